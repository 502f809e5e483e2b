//! The promises a retry layer is bought for, on the bad day: a hard deadline, a time limit per attempt,
//! and an answer that says what the retries did — through every adapter (`RetryMiddleware`,
//! `RetryLayer` over `reqwest::Client`, `RetryLayer` over hyper-util's client, `stagger::retry`),
//! against real servers on loopback, in real time kept to a few hundred milliseconds.
//!
//! The servers: one that accepts connections and never answers, and wiremock answering late.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buffer = [0; 1024];
                while let Ok(n) = socket.read(&mut buffer).await {
                    if n == 0 {
                        break;
                    }
                }
            });
        }
    });
    (format!("http://{address}/"), accepted)
}

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
mod wiremock_servers {
    use wiremock::matchers::any;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::ms;

    /// Answers every request 503 after 250 ms, with a body to check it arrives intact.
    pub async fn slow_503() -> MockServer {
        let server = MockServer::start().await;
        Mock::given(any())
            .respond_with(
                ResponseTemplate::new(503)
                    .insert_header("x-attempt", "slow")
                    .set_body_string("overloaded")
                    .set_delay(ms(250)),
            )
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

    use super::wiremock_servers::{first_answer_late, hits, slow_503};
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
        took(start.elapsed(), ms(300), ms(450));

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
        let server = slow_503().await;
        let client = client(deadline_300ms());

        let start = Instant::now();
        let response = client.get(server.uri()).send().await.expect("the 503");
        took(start.elapsed(), ms(300), ms(400));

        assert_eq!(response.status(), 503);
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
        assert_eq!(
            info.attempts(),
            2,
            "the second was cut short at the deadline"
        );
        assert_eq!(response.headers()["x-attempt"], "slow");
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

    use super::wiremock_servers::{first_answer_late, hits, slow_503};
    use super::*;

    async fn send(
        policy: RetryPolicy,
        method: reqwest::Method,
        url: &str,
    ) -> Result<reqwest::Response, stagger::Error<reqwest::Error>> {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let request = client.request(method, url).body("x").build().unwrap();
        let service = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .service(client);
        tokio::spawn(service.oneshot(request)).await.unwrap()
    }

    #[tokio::test]
    async fn a_server_that_never_answers_ends_the_call_at_the_deadline() {
        let (url, accepted) = hung_server().await;

        let start = Instant::now();
        let error = send(deadline_300ms(), reqwest::Method::GET, &url)
            .await
            .unwrap_err();
        took(start.elapsed(), ms(300), ms(450));

        assert!(error.is_deadline(), "{error:?}");
        assert!(error.inner().is_none());
        assert_eq!(error.info().attempts(), 1);
        assert_eq!(error.info().stop_reason(), Some(StopReason::Deadline));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_503_received_before_the_deadline_is_returned_intact_when_it_passes() {
        let server = slow_503().await;

        let start = Instant::now();
        let response = send(deadline_300ms(), reqwest::Method::GET, &server.uri())
            .await
            .expect("the 503");
        took(start.elapsed(), ms(300), ms(400));

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

        let start = Instant::now();
        let response = send(attempt_timeout_200ms(), reqwest::Method::GET, &server.uri())
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

    use super::wiremock_servers::{first_answer_late, hits, slow_503};
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
        took(start.elapsed(), ms(300), ms(450));

        assert!(error.is_deadline(), "{error:?}");
        assert_eq!(error.info().attempts(), 1);
        assert_eq!(error.info().stop_reason(), Some(StopReason::Deadline));
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_503_received_before_the_deadline_is_returned_intact_when_it_passes() {
        let server = slow_503().await;

        let start = Instant::now();
        let response = send(deadline_300ms(), http::Method::GET, &server.uri())
            .await
            .expect("the 503");
        took(start.elapsed(), ms(300), ms(400));

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
        took(start.elapsed(), ms(300), ms(450));

        assert!(error.is_deadline(), "{error:?}");
        assert_eq!(error.info().attempts(), 1);
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_value_received_before_the_deadline_is_returned_when_it_passes() {
        let attempts = AtomicUsize::new(0);
        let start = Instant::now();
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
        took(start.elapsed(), ms(300), ms(400));

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
