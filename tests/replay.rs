//! The replay buffer (`RetryPolicyBuilder::replay_buffer`): a streaming body, which cannot be copied,
//! is recorded as it goes out and sent again byte for byte, through `RetryMiddleware`, `RetryLayer`
//! over `reqwest::Client` (the request alone, or in a `WithExtensions` with its `Overrides`), and
//! `RetryLayer` over hyper-util's client with `ReplayBody`, against a
//! wiremock server on loopback; a body that tells its end without being polled to it (a length, an
//! empty body) is whole too, and one that was never read goes to the retry itself (`Backend`, an axum
//! server that may come up only after the first attempt was refused).
#![cfg(all(feature = "reqwest-middleware", feature = "tower"))]

mod common;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use bytes::Bytes;
use reqwest::StatusCode;
use reqwest_middleware::ClientBuilder;
use stagger::{
    Backoff, RetryInfo, RetryLayer, RetryMiddleware, RetryPolicy, RetryPolicyBuilder, RetryReport,
    StopReason,
};
use tower::{ServiceBuilder, ServiceExt};
use wiremock::matchers::path;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// 10 KiB in 10 chunks of 1 KiB, each chunk's bytes its own.
fn chunks() -> Vec<Bytes> {
    (0..10u8)
        .map(|n| Bytes::from(vec![b'a' + n; 1024]))
        .collect()
}

fn whole() -> Vec<u8> {
    chunks().concat()
}

fn streaming() -> reqwest::Body {
    let chunks = chunks().into_iter().map(Ok::<_, std::io::Error>);
    reqwest::Body::wrap_stream(futures::stream::iter(chunks))
}

/// `/upload` answers its first request `503` (with a header and a body), every later one `200`.
async fn server() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(path("/upload"))
        .respond_with(
            ResponseTemplate::new(503)
                .insert_header("x-reason", "overloaded")
                .set_body_string("try later"),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(path("/upload"))
        .respond_with(ResponseTemplate::new(200).set_body_string("stored"))
        .mount(&server)
        .await;
    server
}

fn policy(replay_buffer: usize) -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(1)))
        .replay_buffer(replay_buffer)
        .build()
        .unwrap()
}

fn reqwest_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn bodies_received(server: &MockServer) -> Vec<Vec<u8>> {
    let requests = server.received_requests().await.unwrap();
    requests.into_iter().map(|r| r.body).collect()
}

/// Sends a streaming PUT through `RetryMiddleware`.
async fn through_middleware(server: &MockServer, replay_buffer: usize) -> reqwest::Response {
    let client = ClientBuilder::new(reqwest_client())
        .with(RetryMiddleware::new(policy(replay_buffer)))
        .build();
    client
        .put(format!("{}/upload", server.uri()))
        .body(streaming())
        .send()
        .await
        .unwrap()
}

/// Sends a streaming PUT through `RetryLayer` over `reqwest::Client`.
async fn through_layer(server: &MockServer, replay_buffer: usize) -> reqwest::Response {
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy(replay_buffer)))
        .service(reqwest_client());
    let mut request = reqwest::Request::new(
        reqwest::Method::PUT,
        format!("{}/upload", server.uri()).parse().unwrap(),
    );
    *request.body_mut() = Some(streaming());
    client.oneshot(request).await.unwrap()
}

/// Sends a streaming PUT through `RetryLayer` over `reqwest::Client`, in a `WithExtensions` whose
/// `Overrides` give it a second retry the policy's `max_retries(1)` would not.
async fn through_layer_with_extensions(
    server: &MockServer,
    replay_buffer: usize,
) -> reqwest::Response {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(1)))
        .replay_buffer(replay_buffer)
        .max_retries(0)
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(reqwest_client());
    let url = format!("{}/upload", server.uri()).parse().unwrap();
    let mut request = reqwest::Request::new(reqwest::Method::PUT, url);
    *request.body_mut() = Some(streaming());
    let retried = stagger::Overrides::builder()
        .max_retries(1)
        .build()
        .unwrap();
    let request = stagger::tower::WithExtensions::new(request).with_extension(retried);
    client.oneshot(request).await.unwrap()
}

async fn a_503_is_retried_with_the_identical_body(
    response: reqwest::Response,
    server: &MockServer,
) {
    assert_eq!(response.status(), StatusCode::OK);
    let info = RetryInfo::of(response.extensions());
    assert_eq!(info.attempts(), 2);
    assert_eq!(response.text().await.unwrap(), "stored");
    assert_eq!(bodies_received(server).await, [whole(), whole()]);
}

async fn a_body_past_the_buffer_is_sent_once_and_its_503_returned_intact(
    response: reqwest::Response,
    server: &MockServer,
) {
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["x-reason"], "overloaded");
    let info = RetryInfo::of(response.extensions());
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::NotReplayable));
    assert_eq!(response.text().await.unwrap(), "try later");
    assert_eq!(bodies_received(server).await, [whole()]);
}

#[tokio::test]
async fn middleware_replays_a_10_kib_stream_byte_for_byte() {
    let server = server().await;
    let response = through_middleware(&server, RetryPolicy::DEFAULT_REPLAY_BUFFER).await;
    a_503_is_retried_with_the_identical_body(response, &server).await;
}

#[tokio::test]
async fn middleware_sends_a_stream_longer_than_the_buffer_once() {
    let server = server().await;
    let response = through_middleware(&server, 1024).await;
    a_body_past_the_buffer_is_sent_once_and_its_503_returned_intact(response, &server).await;
}

#[tokio::test]
async fn layer_over_reqwest_replays_a_10_kib_stream_byte_for_byte() {
    let server = server().await;
    let response = through_layer(&server, RetryPolicy::DEFAULT_REPLAY_BUFFER).await;
    a_503_is_retried_with_the_identical_body(response, &server).await;
}

#[tokio::test]
async fn layer_over_reqwest_sends_a_stream_longer_than_the_buffer_once() {
    let server = server().await;
    let response = through_layer(&server, 1024).await;
    a_body_past_the_buffer_is_sent_once_and_its_503_returned_intact(response, &server).await;
}

#[tokio::test]
async fn layer_over_reqwest_with_extensions_replays_a_10_kib_stream_byte_for_byte() {
    let server = server().await;
    let response = through_layer_with_extensions(&server, RetryPolicy::DEFAULT_REPLAY_BUFFER).await;
    a_503_is_retried_with_the_identical_body(response, &server).await;
}

#[tokio::test]
async fn layer_over_reqwest_with_extensions_sends_a_stream_longer_than_the_buffer_once() {
    let server = server().await;
    let response = through_layer_with_extensions(&server, 1024).await;
    a_body_past_the_buffer_is_sent_once_and_its_503_returned_intact(response, &server).await;
}

#[tokio::test]
async fn a_body_of_exactly_the_buffer_is_replayed() {
    let server = server().await;
    let response = through_middleware(&server, 10 * 1024).await;
    a_503_is_retried_with_the_identical_body(response, &server).await;
}

/// A loopback server that keeps the body of every request it receives, and answers each with the next
/// status of its script, then `200`.
#[derive(Clone, Default)]
struct Backend {
    bodies: Arc<Mutex<Vec<Bytes>>>,
    script: Arc<Mutex<VecDeque<u16>>>,
}

impl Backend {
    fn new(script: &[u16]) -> Self {
        Self {
            bodies: Arc::default(),
            script: Arc::new(Mutex::new(script.iter().copied().collect())),
        }
    }

    /// Serves on `listener` from now on.
    fn serve(&self, listener: std::net::TcpListener) {
        listener.set_nonblocking(true).unwrap();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        let app = Router::new().fallback(answer).with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
    }

    /// Serves on a port of its own: its base URL.
    fn start(&self) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        self.serve(listener);
        base
    }

    fn bodies(&self) -> Vec<Bytes> {
        self.bodies.lock().unwrap().clone()
    }
}

async fn answer(State(backend): State<Backend>, body: Bytes) -> axum::http::StatusCode {
    backend.bodies.lock().unwrap().push(body);
    let status = backend.script.lock().unwrap().pop_front().unwrap_or(200);
    axum::http::StatusCode::from_u16(status).unwrap()
}

/// A policy with a 1 ms backoff, and `backend` brought up on a port that refuses connections until
/// attempt `refused` has failed: the attempts until then fail to connect, the next finds the server.
/// The base URL of that port.
fn comes_up_after(
    refused: u32,
    builder: RetryPolicyBuilder,
    backend: &Backend,
) -> (RetryPolicy, String) {
    // A port that was free a moment ago, and that nothing listens on now.
    let addr: SocketAddr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let backend = backend.clone();
    let up = AtomicBool::new(false);
    let policy = builder
        .backoff(Backoff::fixed(Duration::from_millis(1)))
        .on_retry(move |retry| {
            if retry.attempt == refused && !up.swap(true, Ordering::SeqCst) {
                backend.serve(std::net::TcpListener::bind(addr).unwrap());
            }
        })
        .build()
        .unwrap();
    (policy, format!("http://{addr}"))
}

/// 65 535 bytes in chunks of 8 KiB: urllib3's `test_retries_put_filehandle`.
fn file() -> Vec<u8> {
    (0..65_535u32).map(|i| (i % 251) as u8).collect()
}

fn file_stream() -> reqwest::Body {
    let chunks: Vec<_> = file()
        .chunks(8192)
        .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
        .collect();
    reqwest::Body::wrap_stream(futures::stream::iter(chunks))
}

fn middleware(policy: RetryPolicy) -> reqwest_middleware::ClientWithMiddleware {
    ClientBuilder::new(reqwest_client())
        .with(RetryMiddleware::new(policy))
        .build()
}

/// `RetryLayer` over `reqwest::Client`: a PUT of `body` to `url`, with `headers`.
async fn put_through_layer(
    policy: RetryPolicy,
    url: &str,
    headers: &[(&'static str, &str)],
    body: reqwest::Body,
) -> Result<reqwest::Response, stagger::Error<reqwest::Error>> {
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(reqwest_client());
    let mut request = reqwest::Request::new(reqwest::Method::PUT, url.parse().unwrap());
    for (name, value) in headers {
        request.headers_mut().insert(*name, value.parse().unwrap());
    }
    *request.body_mut() = Some(body);
    client.oneshot(request).await
}

fn attempts(response: &reqwest::Response) -> (u32, Option<StopReason>) {
    let info = RetryInfo::of(response.extensions());
    (info.attempts(), info.stop_reason())
}

/// hyper stops sending a body when its `Content-Length` is reached, without polling it to its end:
/// the recording is whole all the same.
#[tokio::test]
async fn middleware_replays_a_stream_sent_with_its_content_length() {
    let backend = Backend::new(&[503]);
    let base = backend.start();
    let response = middleware(policy(RetryPolicy::DEFAULT_REPLAY_BUFFER))
        .put(format!("{base}/file"))
        .header("content-length", "65535")
        .body(file_stream())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(attempts(&response), (2, Some(StopReason::Success)));
    assert_eq!(backend.bodies(), [file(), file()]);
}

#[tokio::test]
async fn layer_over_reqwest_replays_a_stream_sent_with_its_content_length() {
    let backend = Backend::new(&[503]);
    let base = backend.start();
    let response = put_through_layer(
        policy(RetryPolicy::DEFAULT_REPLAY_BUFFER),
        &format!("{base}/file"),
        &[("content-length", "65535")],
        file_stream(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(attempts(&response), (2, Some(StopReason::Success)));
    assert_eq!(backend.bodies(), [file(), file()]);
}

/// A connection refused: no byte of the body left, and the body itself goes to the retry, even one
/// longer than the replay buffer.
async fn middleware_retries_an_unread_stream(refused: u32, replay_buffer: usize) {
    let backend = Backend::new(&[]);
    let (policy, base) = comes_up_after(
        refused,
        RetryPolicy::builder().replay_buffer(replay_buffer),
        &backend,
    );
    let report = RetryReport::new();
    let result = middleware(policy)
        .put(format!("{base}/upload"))
        .body(streaming())
        .with_extension(report.clone())
        .send()
        .await;
    let response = result.unwrap_or_else(|e| panic!("{e}: {:?}", report.get()));
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        attempts(&response),
        (refused + 1, Some(StopReason::Success))
    );
    assert_eq!(backend.bodies(), [whole()]);
}

#[tokio::test]
async fn middleware_sends_an_unread_stream_once_the_server_comes_up() {
    middleware_retries_an_unread_stream(1, RetryPolicy::DEFAULT_REPLAY_BUFFER).await;
}

#[tokio::test]
async fn middleware_sends_an_unread_stream_past_the_buffer_once_the_server_comes_up() {
    middleware_retries_an_unread_stream(1, 1024).await;
}

/// The retry of an unread body is the last attempt the policy allows: it is sent without recording.
#[tokio::test]
async fn middleware_sends_an_unread_stream_as_the_last_attempt() {
    let backend = Backend::new(&[]);
    let builder = RetryPolicy::builder().max_retries(1);
    let (policy, base) = comes_up_after(1, builder, &backend);
    let response = middleware(policy)
        .put(format!("{base}/upload"))
        .body(streaming())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(attempts(&response), (2, Some(StopReason::Success)));
    assert_eq!(backend.bodies(), [whole()]);
}

#[tokio::test]
async fn middleware_sends_an_unread_stream_after_two_refused_connections() {
    middleware_retries_an_unread_stream(2, 1024).await;
}

async fn layer_over_reqwest_retries_an_unread_stream(refused: u32, replay_buffer: usize) {
    let backend = Backend::new(&[]);
    let (policy, base) = comes_up_after(
        refused,
        RetryPolicy::builder().replay_buffer(replay_buffer),
        &backend,
    );
    let result = put_through_layer(policy, &format!("{base}/upload"), &[], streaming()).await;
    let response = result.unwrap_or_else(|e| panic!("{e}: {:?}", e.info()));
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        attempts(&response),
        (refused + 1, Some(StopReason::Success))
    );
    assert_eq!(backend.bodies(), [whole()]);
}

#[tokio::test]
async fn layer_over_reqwest_sends_an_unread_stream_once_the_server_comes_up() {
    layer_over_reqwest_retries_an_unread_stream(1, RetryPolicy::DEFAULT_REPLAY_BUFFER).await;
}

#[tokio::test]
async fn layer_over_reqwest_sends_an_unread_stream_past_the_buffer_once_the_server_comes_up() {
    layer_over_reqwest_retries_an_unread_stream(1, 1024).await;
}

#[tokio::test]
async fn layer_over_reqwest_sends_an_unread_stream_after_two_refused_connections() {
    layer_over_reqwest_retries_an_unread_stream(2, 1024).await;
}

/// A `503` to a stream longer than the buffer: the retry it calls for cannot be made, so none is
/// reported — no time slept, no `on_retry`, no "retrying" event — and the call stops as not
/// replayable, on the `503`.
async fn no_retry_is_reported_for_a_stream_past_the_buffer(
    send: impl AsyncFnOnce(RetryPolicy, String) -> reqwest::Response,
) {
    let server = server().await;
    let hooked = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&hooked);
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(250)))
        .replay_buffer(1024)
        .on_retry(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let events = common::capture();
    let response = send(policy, format!("{}/upload", server.uri())).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let info = RetryInfo::of(response.extensions());
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::NotReplayable));
    assert_eq!(info.slept(), Duration::ZERO);
    assert_eq!(hooked.load(Ordering::SeqCst), 0);
    let events = events.stagger();
    assert!(
        events.iter().all(|e| e.message != "retrying"),
        "{events:#?}"
    );
    let [gave_up] = events.as_slice() else {
        panic!("one event: {events:#?}");
    };
    assert_eq!(gave_up.message, "gave up while still failing");
    assert_eq!(gave_up.field("error.type"), "503");
    assert_eq!(gave_up.field("slept_ms"), "0");
    assert_eq!(gave_up.field("stop.reason"), "not_replayable");
    assert_eq!(bodies_received(&server).await, [whole()]);
}

#[tokio::test]
async fn middleware_reports_no_retry_for_a_stream_past_the_buffer() {
    no_retry_is_reported_for_a_stream_past_the_buffer(async |policy, url| {
        middleware(policy)
            .put(url)
            .body(streaming())
            .send()
            .await
            .unwrap()
    })
    .await;
}

#[tokio::test]
async fn layer_over_reqwest_reports_no_retry_for_a_stream_past_the_buffer() {
    no_retry_is_reported_for_a_stream_past_the_buffer(async |policy, url| {
        put_through_layer(policy, &url, &[], streaming())
            .await
            .unwrap()
    })
    .await;
}

/// Over hyper-util's client, a service of `http::Request<ReplayBody<B>>`.
#[cfg(feature = "hyper-util")]
#[path = "replay/hyper_util_client.rs"]
mod hyper_util_client;
