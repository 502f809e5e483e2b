//! Over hyper-util's client, a service of `http::Request<ReplayBody<B>>`.

use std::convert::Infallible;

use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use stagger::ReplayBody;

use super::*;

type Stream = StreamBody<
    futures::stream::Iter<std::vec::IntoIter<Result<http_body::Frame<Bytes>, Infallible>>>,
>;

fn body() -> ReplayBody<Stream> {
    let frames: Vec<_> = chunks()
        .into_iter()
        .map(|c| Ok(http_body::Frame::data(c)))
        .collect();
    ReplayBody::new(StreamBody::new(futures::stream::iter(frames)))
}

async fn send(server: &MockServer, replay_buffer: usize) -> http::Response<Bytes> {
    let client = Client::builder(TokioExecutor::new()).build_http::<ReplayBody<Stream>>();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy(replay_buffer)))
        .service(client);
    let request = http::Request::put(format!("{}/upload", server.uri()))
        .body(body())
        .unwrap();
    let response = service.oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    http::Response::from_parts(parts, body)
}

#[tokio::test]
async fn a_replay_body_is_replayed_byte_for_byte() {
    let server = server().await;
    let response = send(&server, RetryPolicy::DEFAULT_REPLAY_BUFFER).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(RetryInfo::of(response.extensions()).attempts(), 2);
    assert_eq!(bodies_received(&server).await, [whole(), whole()]);
}

#[tokio::test]
async fn a_replay_body_past_the_buffer_is_sent_once() {
    let server = server().await;
    let response = send(&server, 1024).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.body(), "try later");
    let info = RetryInfo::of(response.extensions());
    assert_eq!(info.stop_reason(), Some(StopReason::NotReplayable));
    assert_eq!(bodies_received(&server).await, [whole()]);
}

/// A PUT of `body` to `url` through `RetryLayer` over hyper-util's client.
async fn put<B>(
    policy: RetryPolicy,
    url: &str,
    body: ReplayBody<B>,
) -> Result<http::Response<Bytes>, stagger::Error<hyper_util::client::legacy::Error>>
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let client = Client::builder(TokioExecutor::new()).build_http::<ReplayBody<B>>();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(client);
    let request = http::Request::put(url).body(body).unwrap();
    let response = service.oneshot(request).await?;
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Ok(http::Response::from_parts(parts, body))
}

fn attempts<B>(response: &http::Response<B>) -> (u32, Option<StopReason>) {
    let info = RetryInfo::of(response.extensions());
    (info.attempts(), info.stop_reason())
}

/// hyper sends a body whose `is_end_stream()` turns true with its last frame without polling it
/// again, and never polls one that is at its end from the start.
async fn replays_a_body_that_tells_its_end<B>(body: ReplayBody<B>, expected: &[u8])
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let backend = Backend::new(&[503]);
    let base = backend.start();
    let policy = policy(RetryPolicy::DEFAULT_REPLAY_BUFFER);
    let response = put(policy, &format!("{base}/upload"), body).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(attempts(&response), (2, Some(StopReason::Success)));
    assert_eq!(backend.bodies(), [expected, expected]);
}

#[tokio::test]
async fn a_full_body_is_replayed() {
    let body = ReplayBody::new(Full::new(Bytes::from(whole())));
    replays_a_body_that_tells_its_end(body, &whole()).await;
}

#[tokio::test]
async fn an_empty_body_is_replayed() {
    replays_a_body_that_tells_its_end(ReplayBody::new(Empty::<Bytes>::new()), b"").await;
}

/// A proxy in front of `upstream`: each request's body, hyper's `Incoming`, forwarded as a
/// `ReplayBody` through `RetryLayer` over hyper-util's client, with its `Content-Length`; the
/// attempts made go back in `x-attempts`. Its base URL.
fn proxy(upstream: String) -> String {
    let client = Client::builder(TokioExecutor::new()).build_http::<ReplayBody<Incoming>>();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy(RetryPolicy::DEFAULT_REPLAY_BUFFER)))
        .service(client);
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    listener.set_nonblocking(true).unwrap();
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    let forward = move |request: http::Request<Incoming>| {
        let service = service.clone();
        let upstream = upstream.clone();
        async move {
            let (parts, body) = request.into_parts();
            let mut forwarded = http::Request::builder()
                .method(parts.method)
                .uri(format!("{upstream}{}", parts.uri.path()));
            if let Some(length) = parts.headers.get(http::header::CONTENT_LENGTH) {
                forwarded = forwarded.header(http::header::CONTENT_LENGTH, length);
            }
            let forwarded = forwarded.body(ReplayBody::new(body)).unwrap();
            let response = service.oneshot(forwarded).await.unwrap();
            let (mut parts, body) = response.into_parts();
            let attempts = RetryInfo::of(&parts.extensions).attempts();
            parts.headers.insert("x-attempts", attempts.into());
            Ok::<_, Infallible>(http::Response::from_parts(parts, body))
        }
    };
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let forward = forward.clone();
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service_fn(forward)),
            );
        }
    });
    base
}

#[tokio::test]
async fn a_proxy_replays_an_incoming_body_of_known_length() {
    let backend = Backend::new(&[503]);
    let proxy = proxy(backend.start());
    let response = reqwest_client()
        .put(format!("{proxy}/file"))
        .body(file())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-attempts"], "2");
    assert_eq!(backend.bodies(), [file(), file()]);
}

/// A connection refused: the body was never read, and goes to the retry itself.
async fn sends_an_unread_body_once_the_server_comes_up(refused: u32, replay_buffer: usize) {
    let backend = Backend::new(&[]);
    let (policy, base) = comes_up_after(
        refused,
        RetryPolicy::builder().replay_buffer(replay_buffer),
        &backend,
    );
    let result = put(policy, &format!("{base}/upload"), body()).await;
    let response = result.unwrap_or_else(|e| panic!("{e}: {:?}", e.info()));
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        attempts(&response),
        (refused + 1, Some(StopReason::Success))
    );
    assert_eq!(backend.bodies(), [whole()]);
}

#[tokio::test]
async fn an_unread_replay_body_is_sent_once_the_server_comes_up() {
    sends_an_unread_body_once_the_server_comes_up(1, RetryPolicy::DEFAULT_REPLAY_BUFFER).await;
}

#[tokio::test]
async fn an_unread_replay_body_past_the_buffer_is_sent_once_the_server_comes_up() {
    sends_an_unread_body_once_the_server_comes_up(1, 1024).await;
}

#[tokio::test]
async fn an_unread_replay_body_is_sent_after_two_refused_connections() {
    sends_an_unread_body_once_the_server_comes_up(2, 1024).await;
}
