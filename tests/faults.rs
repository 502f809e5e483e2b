//! The promises a retry layer is bought for, on the bad day: a hard deadline, a time limit per attempt,
//! and an answer that says what the retries did — through every adapter (`RetryMiddleware`,
//! `RetryLayer` over `reqwest::Client`, `RetryLayer` over hyper-util's client, `stagger::retry`),
//! against real servers on loopback, in real time kept to a few hundred milliseconds.
//!
//! The servers: one that accepts connections, never answers and notes when the client closes them, one
//! that sends a response's head at once and its body slowly, and wiremock answering late.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagger::{Backoff, RetryPolicy};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

const fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A retry 10 ms after each failure, a 300 ms deadline, the default attempt timeout (10 s).
fn deadline_300ms() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(10)))
        .max_elapsed(ms(300))
        .build()
        .unwrap()
}

/// A retry at once after each failure, a 200 ms limit per attempt. No budget: these tests are about the
/// time limit, not about how many timeouts' retries the budget pays for (a new client's starting
/// credit pays for two).
fn attempt_timeout_200ms() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::ZERO))
        .attempt_timeout(ms(200))
        .budget(None)
        .build()
        .unwrap()
}

/// A server that accepts every connection, reads what it is sent, and never answers. Returns its
/// address and the count of connections it accepted.
async fn hung_server() -> (String, Arc<AtomicUsize>) {
    let hung = Hung::start().await;
    (hung.url, hung.accepted)
}

/// The server of [`hung_server`], which also notes when each connection was closed by the client: when
/// a read returned the end of the stream or an error.
struct Hung {
    url: String,
    accepted: Arc<AtomicUsize>,
    closed: Arc<Mutex<Vec<Instant>>>,
}

impl Hung {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(Mutex::new(Vec::new()));
        let (count, closes) = (Arc::clone(&accepted), Arc::clone(&closed));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let closes = Arc::clone(&closes);
                tokio::spawn(async move {
                    let mut buffer = [0; 1024];
                    while let Ok(1..) = socket.read(&mut buffer).await {}
                    closes.lock().unwrap().push(Instant::now());
                });
            }
        });
        Self {
            url: format!("http://{address}/"),
            accepted,
            closed,
        }
    }

    /// When the first connection was closed, waiting for it at most `within`.
    async fn first_closed(&self, within: Duration) -> Option<Instant> {
        let start = Instant::now();
        loop {
            if let Some(&at) = self.closed.lock().unwrap().first() {
                return Some(at);
            }
            if start.elapsed() > within {
                return None;
            }
            tokio::time::sleep(ms(2)).await;
        }
    }
}

/// How soon after a call ended at its deadline the server must see the attempt's connection closed.
/// The client closes it as soon as its connection task is polled after the attempt was dropped, within
/// milliseconds; a second leaves room for a loaded machine and is far below what a connection left
/// open would show: reqwest's pool keeps an idle one for 90 s, and one with a request in flight for as
/// long as the server keeps it.
const CLOSED_WITHIN: Duration = ms(1000);

/// Asserts that `server`'s one connection was closed at the deadline of a call that started at `start`
/// (`deadline` later) and returned at `ended`: not before the deadline, and within [`CLOSED_WITHIN`]
/// of the call's end.
async fn assert_closed_at_the_deadline(
    server: &Hung,
    start: Instant,
    deadline: Duration,
    ended: Instant,
) {
    let closed = server.first_closed(CLOSED_WITHIN).await;
    let closed = closed.unwrap_or_else(|| {
        panic!("the connection was still open {CLOSED_WITHIN:?} after the call ended")
    });
    assert!(
        closed >= start + deadline,
        "closed {:?} after the start, before the deadline",
        closed - start
    );
    assert!(
        closed.saturating_duration_since(ended) < CLOSED_WITHIN,
        "closed {:?} after the call ended",
        closed - ended
    );
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}

/// Room above a deadline for a call that ends at it, on a machine busy with other test binaries (with
/// six at once on two cores, calls with a 300 ms deadline were seen to take up to 668 ms; with every
/// binary at once, a call that ended at its deadline 512 ms). It is far below what the call would
/// otherwise take: an attempt in flight at the deadline would run to the attempt timeout, 10 s by
/// default, or for as long as the server keeps it waiting.
const LATE: Duration = ms(1000);

/// Asserts that `elapsed` is at least `at_least` and under `under`.
#[track_caller]
fn took(elapsed: Duration, at_least: Duration, under: Duration) {
    assert!(
        elapsed >= at_least && elapsed < under,
        "took {elapsed:?}, expected [{at_least:?}, {under:?})"
    );
}

#[cfg(any(
    feature = "reqwest-middleware",
    all(feature = "tower", any(feature = "reqwest", feature = "hyper-util"))
))]
mod slow_body {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// The body of [`slow_body_server`]'s answer, in the chunks it sends them.
    pub const SLOW_CHUNKS: [&[u8]; 5] = [b"one ", b"two ", b"three ", b"four ", b"five"];

    /// The time [`slow_body_server`] takes to send its body after the head: its chunks are 100 ms apart,
    /// the first 100 ms after the head.
    pub const SLOW_BODY_TAKES: Duration = ms(500);

    /// A server that answers every request with a `200` whose head it sends at once and whose body, of
    /// `SLOW_CHUNKS`, takes [`SLOW_BODY_TAKES`]. Returns its address and the count of connections it
    /// accepted.
    pub async fn slow_body_server() -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    read_request(&mut socket).await?;
                    let length: usize = SLOW_CHUNKS.iter().map(|chunk| chunk.len()).sum();
                    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {length}\r\n\r\n");
                    socket.write_all(head.as_bytes()).await?;
                    for chunk in SLOW_CHUNKS {
                        tokio::time::sleep(SLOW_BODY_TAKES / 5).await;
                        socket.write_all(chunk).await?;
                    }
                    socket.shutdown().await
                });
            }
        });
        (format!("http://{address}/"), accepted)
    }

    /// Reads an HTTP/1.1 request: its head and a `Content-Length` body.
    async fn read_request(stream: &mut TcpStream) -> std::io::Result<()> {
        let mut received = Vec::new();
        let mut buf = [0; 1024];
        let head_end = loop {
            if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            received.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&received[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .map_or(0, |value| value.trim().parse().unwrap());
        let mut rest = vec![0; (head_end + length).saturating_sub(received.len())];
        stream.read_exact(&mut rest).await?;
        Ok(())
    }
}

#[cfg(any(
    feature = "reqwest-middleware",
    all(feature = "tower", any(feature = "reqwest", feature = "hyper-util"))
))]
mod wiremock_servers {
    use wiremock::matchers::any;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::ms;

    /// Answers the first request 503 at once, with a header and a body to check they arrive intact,
    /// and every later one not for a minute: a retry is in flight whenever a deadline passes, however
    /// slow the machine, and the 503 came before it.
    pub async fn a_503_then_silence() -> MockServer {
        let server = MockServer::start().await;
        Mock::given(any())
            .respond_with(
                ResponseTemplate::new(503)
                    .insert_header("x-attempt", "first")
                    .set_body_string("overloaded"),
            )
            .up_to_n_times(1)
            .with_priority(1)
            .mount(&server)
            .await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(200).set_delay(ms(60_000)))
            .with_priority(2)
            .mount(&server)
            .await;
        server
    }

    /// Answers the first request after 2 s, and every later one at once with 200 "ok".
    pub async fn first_answer_late() -> MockServer {
        let server = MockServer::start().await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(200).set_delay(ms(2000)))
            .up_to_n_times(1)
            .with_priority(1)
            .mount(&server)
            .await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
            .with_priority(2)
            .mount(&server)
            .await;
        server
    }

    pub async fn hits(server: &MockServer) -> usize {
        server.received_requests().await.unwrap().len()
    }
}

// ---------------------------------------------------------------------------------------------------
// RetryMiddleware
// ---------------------------------------------------------------------------------------------------

#[cfg(feature = "reqwest-middleware")]
mod middleware {
    use http::Extensions;
    use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
    use stagger::{Elapsed, RetryInfo, RetryMiddleware, RetryPolicy, RetryReport, StopReason};

    use super::slow_body::{SLOW_BODY_TAKES, SLOW_CHUNKS, slow_body_server};
    use super::wiremock_servers::{a_503_then_silence, first_answer_late, hits};
    use super::*;

    fn client(policy: RetryPolicy) -> ClientWithMiddleware {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        ClientBuilder::new(client)
            .with(RetryMiddleware::new(policy))
            .build()
    }

    fn elapsed_error(error: &reqwest_middleware::Error) -> Elapsed {
        match error {
            reqwest_middleware::Error::Middleware(e) => *e
                .downcast_ref::<Elapsed>()
                .unwrap_or_else(|| panic!("a stagger::Elapsed: {e:?}")),
            other => panic!("expected Error::Middleware(Elapsed), got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_server_that_never_answers_ends_the_call_at_the_deadline() {
        let (url, accepted) = hung_server().await;
        let client = client(deadline_300ms());
        let report = RetryReport::new();

        let start = Instant::now();
        let result = client.get(&url).with_extension(report.clone()).send().await;
        took(start.elapsed(), ms(300), ms(300) + LATE);

        let error = result.unwrap_err();
        let elapsed = elapsed_error(&error);
        assert!(elapsed.is_deadline());
        assert_eq!(elapsed.limit(), ms(300));
        assert_eq!(elapsed.info().attempts(), 1);
        assert_eq!(
            error.to_string(),
            "deadline of 300ms passed after 1 attempt"
        );
        let info = report.get().expect("the report is written");
        assert_eq!(info, elapsed.info());
        assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_deadline_closes_the_connection_of_the_attempt_in_flight() {
        let server = Hung::start().await;
        let client = client(deadline_300ms());

        let start = Instant::now();
        let result = client.get(&server.url).send().await;
        let ended = Instant::now();

        assert!(elapsed_error(&result.unwrap_err()).is_deadline());
        assert_closed_at_the_deadline(&server, start, ms(300), ended).await;
    }

    #[tokio::test]
    async fn attempt_timeout_ends_at_the_head_and_a_slower_body_is_read_whole() {
        let (url, accepted) = slow_body_server().await;
        let client = client(attempt_timeout_200ms());

        let start = Instant::now();
        let response = client.get(&url).send().await.expect("the 200");
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        let body = response.bytes().await.expect("the whole body");

        // The body took longer than the attempt's time limit.
        assert!(start.elapsed() >= SLOW_BODY_TAKES);
        assert_eq!(body, SLOW_CHUNKS.concat());
        assert_eq!(info.attempts(), 1);
        assert_eq!(info.stop_reason(), Some(StopReason::Success));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn execute_with_extensions_gives_the_retry_info_of_a_failure() {
        let (url, _) = hung_server().await;
        let client = client(deadline_300ms());
        let request = client.get(&url).build().unwrap();
        let mut extensions = Extensions::new();

        let result = client
            .execute_with_extensions(request, &mut extensions)
            .await;

        assert!(result.is_err());
        let info = extensions
            .get::<RetryInfo>()
            .expect("RetryInfo in the extensions");
        assert_eq!(info.attempts(), 1);
        assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
    }

    #[tokio::test]
    async fn a_503_received_before_the_deadline_is_returned_intact_when_it_passes() {
        let server = a_503_then_silence().await;
        let client = client(deadline_300ms());

        let start = Instant::now();
        let response = client.get(server.uri()).send().await.expect("the 503");
        took(start.elapsed(), ms(300), ms(300) + LATE);

        assert_eq!(response.status(), 503);
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
        assert_eq!(
            info.attempts(),
            2,
            "the second was cut short at the deadline"
        );
        assert_eq!(response.headers()["x-attempt"], "first");
        assert_eq!(response.text().await.unwrap(), "overloaded");
        assert_eq!(hits(&server).await, 2);
    }

    #[tokio::test]
    async fn an_attempt_past_its_timeout_is_dropped_and_a_get_retried() {
        let server = first_answer_late().await;
        let client = client(attempt_timeout_200ms());

        let start = Instant::now();
        let response = client.get(server.uri()).send().await.expect("the 200");
        took(start.elapsed(), ms(200), ms(600));

        assert_eq!(response.status(), 200);
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!(info.attempts(), 2);
        assert_eq!(info.stop_reason(), Some(StopReason::Success));
        assert_eq!(response.text().await.unwrap(), "ok");
        assert_eq!(hits(&server).await, 2);
    }

    #[tokio::test]
    async fn a_post_past_its_timeout_is_not_replayed_and_says_it_timed_out() {
        let server = first_answer_late().await;
        let client = client(attempt_timeout_200ms());
        let report = RetryReport::new();

        let start = Instant::now();
        let result = client
            .post(server.uri())
            .body("charge")
            .with_extension(report.clone())
            .send()
            .await;
        took(start.elapsed(), ms(200), ms(600));

        let elapsed = elapsed_error(&result.unwrap_err());
        assert!(elapsed.is_attempt_timeout());
        assert_eq!(elapsed.limit(), ms(200));
        let info = report.get().unwrap();
        assert_eq!(info.attempts(), 1);
        assert_eq!(info.stop_reason(), Some(StopReason::NotIdempotent));
        assert_eq!(hits(&server).await, 1);
    }
}

// ---------------------------------------------------------------------------------------------------
// RetryLayer over reqwest::Client
// ---------------------------------------------------------------------------------------------------

#[cfg(all(feature = "tower", feature = "reqwest"))]
mod layer_over_reqwest {
    use stagger::{RetryInfo, RetryLayer, StopReason};
    use tower::{ServiceBuilder, ServiceExt};

    use super::slow_body::{SLOW_BODY_TAKES, SLOW_CHUNKS, slow_body_server};
    use super::wiremock_servers::{a_503_then_silence, first_answer_late, hits};
    use super::*;

    /// A call through `RetryLayer` over a new `reqwest::Client`, which it sends when awaited. The client
    /// is built at once, before a test starts its clock: building one loads the system's root
    /// certificates, 20 ms in a debug build and far more on a loaded machine.
    fn send(
        policy: RetryPolicy,
        method: reqwest::Method,
        url: &str,
    ) -> impl Future<Output = Result<reqwest::Response, stagger::Error<reqwest::Error>>> + use<>
    {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let request = client.request(method, url).body("x").build().unwrap();
        let service = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .service(client);
        async move { tokio::spawn(service.oneshot(request)).await.unwrap() }
    }

    #[tokio::test]
    async fn a_server_that_never_answers_ends_the_call_at_the_deadline() {
        let (url, accepted) = hung_server().await;

        let call = send(deadline_300ms(), reqwest::Method::GET, &url);
        let start = Instant::now();
        let error = call.await.unwrap_err();
        took(start.elapsed(), ms(300), ms(300) + LATE);

        assert!(error.is_deadline(), "{error:?}");
        assert!(error.inner().is_none());
        assert_eq!(error.info().attempts(), 1);
        assert_eq!(error.info().stop_reason(), Some(StopReason::Deadline));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_deadline_closes_the_connection_of_the_attempt_in_flight() {
        let server = Hung::start().await;

        let call = send(deadline_300ms(), reqwest::Method::GET, &server.url);
        let start = Instant::now();
        let error = call.await.unwrap_err();
        let ended = Instant::now();

        assert!(error.is_deadline(), "{error:?}");
        assert_closed_at_the_deadline(&server, start, ms(300), ended).await;
    }

    #[tokio::test]
    async fn attempt_timeout_ends_at_the_head_and_a_slower_body_is_read_whole() {
        let (url, accepted) = slow_body_server().await;

        let call = send(attempt_timeout_200ms(), reqwest::Method::GET, &url);
        let start = Instant::now();
        let response = call.await.expect("the 200");
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        let body = response.bytes().await.expect("the whole body");

        // The body took longer than the attempt's time limit.
        assert!(start.elapsed() >= SLOW_BODY_TAKES);
        assert_eq!(body, SLOW_CHUNKS.concat());
        assert_eq!(info.attempts(), 1);
        assert_eq!(info.stop_reason(), Some(StopReason::Success));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_503_received_before_the_deadline_is_returned_intact_when_it_passes() {
        let server = a_503_then_silence().await;

        let call = send(deadline_300ms(), reqwest::Method::GET, &server.uri());
        let start = Instant::now();
        let response = call.await.expect("the 503");
        took(start.elapsed(), ms(300), ms(300) + LATE);

        assert_eq!(response.status(), 503);
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
        assert_eq!(info.attempts(), 2);
        assert_eq!(response.text().await.unwrap(), "overloaded");
        assert_eq!(hits(&server).await, 2);
    }

    #[tokio::test]
    async fn an_attempt_past_its_timeout_is_dropped_and_a_get_retried() {
        let server = first_answer_late().await;

        let call = send(attempt_timeout_200ms(), reqwest::Method::GET, &server.uri());
        let start = Instant::now();
        let response = call.await.expect("the 200");
        took(start.elapsed(), ms(200), ms(600));

        assert_eq!(response.status(), 200);
        assert_eq!(
            response.extensions().get::<RetryInfo>().unwrap().attempts(),
            2
        );
        assert_eq!(hits(&server).await, 2);
    }

    #[tokio::test]
    async fn a_post_past_its_timeout_is_not_replayed_and_says_it_timed_out() {
        let server = first_answer_late().await;

        let error = send(
            attempt_timeout_200ms(),
            reqwest::Method::POST,
            &server.uri(),
        )
        .await
        .unwrap_err();

        assert!(error.is_attempt_timeout(), "{error:?}");
        assert_eq!(error.info().attempts(), 1);
        assert_eq!(error.info().stop_reason(), Some(StopReason::NotIdempotent));
        assert_eq!(error.to_string(), "attempt 1 timed out after 200ms");
        assert_eq!(hits(&server).await, 1);
    }
}

// ---------------------------------------------------------------------------------------------------
// RetryLayer over hyper-util's client
// ---------------------------------------------------------------------------------------------------

#[cfg(all(feature = "tower", feature = "hyper-util"))]
mod layer_over_hyper_util {
    use bytes::Bytes;
    use http::Request;
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;
    use stagger::{RetryInfo, RetryLayer, StopReason};
    use tower::{ServiceBuilder, ServiceExt};

    use super::slow_body::{SLOW_BODY_TAKES, SLOW_CHUNKS, slow_body_server};
    use super::wiremock_servers::{a_503_then_silence, first_answer_late, hits};
    use super::*;

    type Response = http::Response<hyper::body::Incoming>;

    async fn send(
        policy: RetryPolicy,
        method: http::Method,
        url: &str,
    ) -> Result<Response, stagger::Error<hyper_util::client::legacy::Error>> {
        let client: Client<HttpConnector, Full<Bytes>> =
            Client::builder(TokioExecutor::new()).build_http();
        let request = Request::builder()
            .method(method)
            .uri(url)
            .body(Full::new(Bytes::from_static(b"x")))
            .unwrap();
        ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .service(client)
            .oneshot(request)
            .await
    }

    #[tokio::test]
    async fn a_server_that_never_answers_ends_the_call_at_the_deadline() {
        let (url, accepted) = hung_server().await;

        let start = Instant::now();
        let error = send(deadline_300ms(), http::Method::GET, &url)
            .await
            .unwrap_err();
        took(start.elapsed(), ms(300), ms(300) + LATE);

        assert!(error.is_deadline(), "{error:?}");
        assert_eq!(error.info().attempts(), 1);
        assert_eq!(error.info().stop_reason(), Some(StopReason::Deadline));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_deadline_closes_the_connection_of_the_attempt_in_flight() {
        let server = Hung::start().await;

        let start = Instant::now();
        let error = send(deadline_300ms(), http::Method::GET, &server.url)
            .await
            .unwrap_err();
        let ended = Instant::now();

        assert!(error.is_deadline(), "{error:?}");
        assert_closed_at_the_deadline(&server, start, ms(300), ended).await;
    }

    #[tokio::test]
    async fn attempt_timeout_ends_at_the_head_and_a_slower_body_is_read_whole() {
        let (url, accepted) = slow_body_server().await;

        let start = Instant::now();
        let response = send(attempt_timeout_200ms(), http::Method::GET, &url)
            .await
            .expect("the 200");
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        let body = response
            .into_body()
            .collect()
            .await
            .expect("the whole body");

        // The body took longer than the attempt's time limit.
        assert!(start.elapsed() >= SLOW_BODY_TAKES);
        assert_eq!(body.to_bytes(), SLOW_CHUNKS.concat());
        assert_eq!(info.attempts(), 1);
        assert_eq!(info.stop_reason(), Some(StopReason::Success));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_503_received_before_the_deadline_is_returned_intact_when_it_passes() {
        let server = a_503_then_silence().await;

        let start = Instant::now();
        let response = send(deadline_300ms(), http::Method::GET, &server.uri())
            .await
            .expect("the 503");
        took(start.elapsed(), ms(300), ms(300) + LATE);

        assert_eq!(response.status(), 503);
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
        assert_eq!(info.attempts(), 2);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "overloaded");
        assert_eq!(hits(&server).await, 2);
    }

    #[tokio::test]
    async fn an_attempt_past_its_timeout_is_dropped_and_a_get_retried() {
        let server = first_answer_late().await;

        let start = Instant::now();
        let response = send(attempt_timeout_200ms(), http::Method::GET, &server.uri())
            .await
            .expect("the 200");
        took(start.elapsed(), ms(200), ms(600));

        assert_eq!(response.status(), 200);
        assert_eq!(
            response.extensions().get::<RetryInfo>().unwrap().attempts(),
            2
        );
        assert_eq!(hits(&server).await, 2);
    }

    #[tokio::test]
    async fn a_post_past_its_timeout_is_not_replayed_and_says_it_timed_out() {
        let server = first_answer_late().await;

        let error = send(attempt_timeout_200ms(), http::Method::POST, &server.uri())
            .await
            .unwrap_err();

        assert!(error.is_attempt_timeout(), "{error:?}");
        assert_eq!(error.info().attempts(), 1);
        assert_eq!(error.info().stop_reason(), Some(StopReason::NotIdempotent));
        assert_eq!(hits(&server).await, 1);
    }
}

// ---------------------------------------------------------------------------------------------------
// stagger::retry
// ---------------------------------------------------------------------------------------------------

mod generic_retry {
    use std::io;

    use stagger::{Outcome, Reason};

    use super::*;

    /// Connects and waits for a first byte: what a client of a line protocol does.
    async fn greeting(address: &str) -> io::Result<u8> {
        let address = address.trim_start_matches("http://").trim_end_matches('/');
        let mut stream = TcpStream::connect(address).await?;
        let mut byte = [0];
        stream.read_exact(&mut byte).await?;
        Ok(byte[0])
    }

    fn retry_errors(result: &io::Result<u8>) -> Outcome {
        match result {
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::RetrySafe(Reason::Connect),
        }
    }

    #[tokio::test]
    async fn an_operation_that_never_finishes_ends_at_the_deadline() {
        let (url, accepted) = hung_server().await;

        let start = Instant::now();
        let error = stagger::retry(&deadline_300ms(), || greeting(&url), retry_errors)
            .await
            .unwrap_err();
        took(start.elapsed(), ms(300), ms(300) + LATE);

        assert!(error.is_deadline(), "{error:?}");
        assert_eq!(error.info().attempts(), 1);
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_deadline_drops_the_operation_in_flight_and_its_connection_with_it() {
        let server = Hung::start().await;

        let start = Instant::now();
        let error = stagger::retry(&deadline_300ms(), || greeting(&server.url), retry_errors)
            .await
            .unwrap_err();
        let ended = Instant::now();

        assert!(error.is_deadline(), "{error:?}");
        assert_closed_at_the_deadline(&server, start, ms(300), ended).await;
    }

    // In virtual time: the operation needs no I/O, so the times are exact. Each attempt answers 503
    // after 250 ms; the second starts at 260 ms and is cut short at 300 ms.
    #[tokio::test(start_paused = true)]
    async fn a_value_received_before_the_deadline_is_returned_when_it_passes() {
        let attempts = AtomicUsize::new(0);
        let start = tokio::time::Instant::now();
        let result = stagger::retry(
            &deadline_300ms(),
            || {
                attempts.fetch_add(1, Ordering::SeqCst);
                async {
                    tokio::time::sleep(ms(250)).await;
                    Ok::<u16, io::Error>(503)
                }
            },
            |result| match result {
                Ok(503) => Outcome::RetrySafe(Reason::Other("busy")),
                _ => Outcome::Success,
            },
        )
        .await;
        assert_eq!(start.elapsed(), ms(300));

        assert_eq!(result.unwrap(), 503);
        assert_eq!(attempts.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_attempt_past_its_timeout_is_dropped_and_retried() {
        let attempts = AtomicUsize::new(0);
        let start = Instant::now();
        let result = stagger::retry(
            &attempt_timeout_200ms(),
            || {
                let n = attempts.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n == 0 {
                        tokio::time::sleep(ms(2000)).await;
                    }
                    Ok::<usize, io::Error>(n + 1)
                }
            },
            |_| Outcome::Success,
        )
        .await;
        took(start.elapsed(), ms(200), ms(600));

        assert_eq!(result.unwrap(), 2, "the second attempt's value");
    }
}
