//! `RetryMiddleware` against real loopback servers (wiremock), through a real `reqwest` client.
//!
//! Every test asserts how many times the server saw the request: that number is what a retry policy is
//! for. Real delays are kept to a few milliseconds, but for the `Retry-After` floors and the cancellation,
//! which need time to pass to be observed at all. Where a test is about when a call ends, it runs on
//! tokio's paused clock against a server in process (the last middleware of the chain).
#![cfg(feature = "reqwest-middleware")]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use reqwest::{Method, StatusCode};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use stagger::{
    Backoff, Jitter, Reason, RetryAfterMode, RetryEvent, RetryInfo, RetryMiddleware, RetryPolicy,
    RetryPolicyBuilder, RetryReport, StopReason,
};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

mod common;

const RETRYABLE: [u16; 7] = [408, 429, 500, 502, 503, 504, 507];
const FATAL: [u16; 8] = [400, 401, 403, 404, 409, 422, 501, 505];

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A policy that retries twice, 1 ms then 2 ms apart, with the default budget.
fn quick() -> RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::exponential(ms(1)).with_jitter(Jitter::None))
        .max_retries(2)
}

/// reqwest's own timeout, in the tests of what a client timeout does: long enough for every attempt to
/// reach the server, which the tests count, before it times out. At 100 ms, with every test binary
/// running at once on two cores, the third attempt once timed out before wiremock had received it.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(1000);

/// A delay no test waits out: the server answers after the client has timed out.
const NEVER: Duration = Duration::from_secs(60);

fn reqwest_client() -> reqwest::ClientBuilder {
    // A proxy from the environment must not stand between the client and the loopback server.
    reqwest::Client::builder().no_proxy()
}

fn client_with(client: reqwest::Client, policy: RetryPolicy) -> ClientWithMiddleware {
    ClientBuilder::new(client)
        .with(RetryMiddleware::new(policy))
        .build()
}

fn client(policy: RetryPolicyBuilder) -> ClientWithMiddleware {
    client_with(reqwest_client().build().unwrap(), policy.build().unwrap())
}

fn info(response: &reqwest::Response) -> RetryInfo {
    *response
        .extensions()
        .get::<RetryInfo>()
        .expect("the final response carries RetryInfo")
}

/// How many requests the server received for `route`.
async fn hits(server: &MockServer, route: &str) -> usize {
    server
        .received_requests()
        .await
        .expect("request recording is on")
        .iter()
        .filter(|request| request.url.path() == route)
        .count()
}

/// Records every retry the policy announces.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<RetryEvent>>>);

impl Events {
    fn hook(&self) -> impl Fn(&RetryEvent) + Send + Sync + 'static {
        let events = Arc::clone(&self.0);
        move |event| events.lock().unwrap().push(*event)
    }

    fn all(&self) -> Vec<RetryEvent> {
        self.0.lock().unwrap().clone()
    }
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap()
}

#[tokio::test]
async fn retryable_statuses_are_retried_and_the_last_response_is_returned_intact() {
    let server = MockServer::start().await;
    let client = client(quick());
    for code in RETRYABLE {
        let route = format!("/{code}");
        Mock::given(path(&route))
            .respond_with(
                ResponseTemplate::new(code)
                    .insert_header("x-attempt", "early")
                    .set_body_string("early"),
            )
            .up_to_n_times(2)
            .mount(&server)
            .await;
        Mock::given(path(&route))
            .respond_with(
                ResponseTemplate::new(code)
                    .insert_header("x-attempt", "last")
                    .set_body_string(format!("last {code}")),
            )
            .mount(&server)
            .await;

        let response = client
            .get(format!("{}{route}", server.uri()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{code}: a response, not an error: {e}"));

        assert_eq!(response.status(), status(code));
        assert_eq!(response.headers()["x-attempt"], "last", "{code}");
        let info = info(&response);
        assert_eq!(info.attempts(), 3, "{code}");
        assert_eq!(info.stop_reason(), Some(StopReason::MaxRetries), "{code}");
        assert_eq!(response.text().await.unwrap(), format!("last {code}"));
        assert_eq!(hits(&server, &route).await, 3, "{code}");
    }
}

#[tokio::test]
async fn fatal_statuses_are_sent_once() {
    let server = MockServer::start().await;
    let client = client(quick());
    for code in FATAL {
        let route = format!("/{code}");
        Mock::given(path(&route))
            .respond_with(
                ResponseTemplate::new(code)
                    .insert_header("x-reason", "fatal")
                    .set_body_string(format!("fatal {code}")),
            )
            .expect(1)
            .mount(&server)
            .await;

        let response = client
            .get(format!("{}{route}", server.uri()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{code}: a response, not an error: {e}"));

        assert_eq!(response.status(), status(code));
        assert_eq!(response.headers()["x-reason"], "fatal", "{code}");
        let info = info(&response);
        assert_eq!(info.attempts(), 1, "{code}");
        assert_eq!(info.stop_reason(), Some(StopReason::Fatal), "{code}");
        assert_eq!(response.text().await.unwrap(), format!("fatal {code}"));
        assert_eq!(hits(&server, &route).await, 1, "{code}");
    }
}

#[tokio::test]
async fn a_first_success_is_returned_with_retry_info() {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
        .expect(1)
        .mount(&server)
        .await;

    let response = client(quick()).get(server.uri()).send().await.unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    let info = info(&response);
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.slept(), Duration::ZERO);
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    assert_eq!(hits(&server, "/").await, 1);
}

#[tokio::test]
async fn success_after_a_retry_reports_the_attempts() {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
        .expect(1)
        .mount(&server)
        .await;

    let response = client(quick()).get(server.uri()).send().await.unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    let info = info(&response);
    assert_eq!(info.attempts(), 2);
    assert_eq!(info.retries(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    assert_eq!(response.text().await.unwrap(), "ok");
    assert_eq!(hits(&server, "/").await, 2);
}

/// A 503 with `retry_after` until the first attempt, then a 200.
async fn server_asking_to_wait(retry_after: &str) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(503).insert_header("retry-after", retry_after))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
        .mount(&server)
        .await;
    server
}

#[tokio::test]
async fn retry_after_in_seconds_is_a_floor() {
    let server = server_asking_to_wait("1").await;
    let events = Events::default();
    let client = client(quick().on_retry(events.hook()));

    let start = Instant::now();
    let response = client.get(server.uri()).send().await.unwrap();
    let elapsed = start.elapsed();

    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        elapsed >= Duration::from_secs(1),
        "retried after {elapsed:?}"
    );
    let events = events.all();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].retry_after, Some(Duration::from_secs(1)));
    // Spread: the floor, plus at most the floor again.
    assert!(
        (Duration::from_secs(1)..=ms(2000)).contains(&events[0].delay),
        "{:?}",
        events[0].delay
    );
    assert_eq!(info(&response).attempts(), 2);
    assert_eq!(hits(&server, "/").await, 2);
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_a_floor() {
    // HTTP-dates have whole seconds: "now + 2 s" is between 1 and 2 s away, and never earlier than
    // `start + 1 s`.
    let start = Instant::now();
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(2));
    let server = server_asking_to_wait(&date).await;
    let events = Events::default();
    let client = client(
        quick()
            .retry_after(RetryAfterMode::Strict)
            .on_retry(events.hook()),
    );

    let response = client.get(server.uri()).send().await.unwrap();
    let elapsed = start.elapsed();

    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        elapsed >= Duration::from_secs(1),
        "retried after {elapsed:?}"
    );
    let events = events.all();
    assert_eq!(events.len(), 1);
    let floor = events[0].retry_after.expect("the date was understood");
    assert!(
        (ms(500)..=Duration::from_secs(2)).contains(&floor),
        "{floor:?}"
    );
    assert_eq!(events[0].delay, floor, "strict: the floor and nothing more");
    assert_eq!(info(&response).attempts(), 2);
    assert_eq!(hits(&server, "/").await, 2);
}

#[tokio::test]
async fn malformed_retry_after_is_treated_as_absent() {
    for value in [
        "soon",
        "1.5",
        "-1",
        "5s",
        "+5",
        "Sun, 99 Foo 2024 99:99:99 GMT",
    ] {
        let server = server_asking_to_wait(value).await;
        let events = Events::default();
        let client = client(
            RetryPolicy::builder()
                .backoff(Backoff::fixed(ms(50)))
                .on_retry(events.hook()),
        );

        let start = Instant::now();
        let response = client
            .get(server.uri())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{value:?}: a response, not an error: {e}"));
        let elapsed = start.elapsed();

        assert_eq!(response.status(), StatusCode::OK, "{value:?}");
        let events = events.all();
        assert_eq!(events.len(), 1, "{value:?}");
        assert_eq!(events[0].retry_after, None, "{value:?}");
        assert_eq!(events[0].delay, ms(50), "{value:?}: the backoff's delay");
        assert!(elapsed >= ms(50), "{value:?}: retried after {elapsed:?}");
        assert_eq!(info(&response).attempts(), 2, "{value:?}");
        assert_eq!(hits(&server, "/").await, 2, "{value:?}");
    }
}

#[tokio::test]
async fn retry_after_over_the_maximum_hands_the_response_back_at_once() {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(
            ResponseTemplate::new(503)
                .insert_header("retry-after", "120")
                .set_body_string("come back in two minutes"),
        )
        .expect(1)
        .mount(&server)
        .await;
    let client = client(quick().max_retry_after(Duration::from_secs(1)));

    let start = Instant::now();
    let response = client.get(server.uri()).send().await.unwrap();
    let elapsed = start.elapsed();

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "120");
    let info = info(&response);
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::RetryAfterTooLong));
    assert!(elapsed < ms(500), "took {elapsed:?}");
    assert_eq!(response.text().await.unwrap(), "come back in two minutes");
    assert_eq!(hits(&server, "/").await, 1);
}

/// Mounts `code` on `/{method}/{code}` and sends one `method` request with a body there.
async fn send_and_count(
    client: &ClientWithMiddleware,
    server: &MockServer,
    verb: Method,
    code: u16,
    idempotency_key: Option<&str>,
) -> (reqwest::Response, usize) {
    let route = format!("/{verb}/{code}/{}", idempotency_key.unwrap_or("-"));
    Mock::given(method(verb.as_str()))
        .and(path(&route))
        .respond_with(ResponseTemplate::new(code))
        .mount(server)
        .await;
    let mut request = client
        .request(verb.clone(), format!("{}{route}", server.uri()))
        .body("{\"amount\": 100}");
    if let Some(key) = idempotency_key {
        request = request.header("idempotency-key", key);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{verb} {code}: a response, not an error: {e}"));
    assert_eq!(response.status(), status(code), "{verb} {code}");
    let hits = hits(server, &route).await;
    (response, hits)
}

#[tokio::test]
async fn post_and_patch_are_not_replayed_after_a_failure_the_server_may_have_acted_on() {
    let server = MockServer::start().await;
    let client = client(quick());
    for verb in [Method::POST, Method::PATCH] {
        for code in [500, 502, 504] {
            let (response, hits) = send_and_count(&client, &server, verb.clone(), code, None).await;
            assert_eq!(hits, 1, "{verb} {code}");
            let info = info(&response);
            assert_eq!(info.attempts(), 1, "{verb} {code}");
            assert_eq!(
                info.stop_reason(),
                Some(StopReason::NotIdempotent),
                "{verb} {code}"
            );
        }
    }
}

#[tokio::test]
async fn post_and_patch_are_replayed_when_the_server_did_not_act() {
    let server = MockServer::start().await;
    let client = client(quick());
    for verb in [Method::POST, Method::PATCH] {
        for code in [503, 429] {
            let (response, hits) = send_and_count(&client, &server, verb.clone(), code, None).await;
            assert_eq!(hits, 3, "{verb} {code}");
            assert_eq!(
                info(&response).stop_reason(),
                Some(StopReason::MaxRetries),
                "{verb} {code}"
            );
        }
    }
}

#[tokio::test]
async fn post_with_an_idempotency_key_is_replayed_after_a_500() {
    let server = MockServer::start().await;
    let client = client(quick());
    let (response, hits) =
        send_and_count(&client, &server, Method::POST, 500, Some("8e03978e")).await;
    assert_eq!(hits, 3);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::MaxRetries));
    // Every attempt carried the key.
    let requests = server.received_requests().await.unwrap();
    assert!(
        requests
            .iter()
            .all(|r| r.headers["idempotency-key"] == "8e03978e")
    );
}

#[tokio::test]
async fn put_and_delete_are_replayed_after_a_500() {
    let server = MockServer::start().await;
    let client = client(quick());
    for verb in [Method::PUT, Method::DELETE] {
        let (response, hits) = send_and_count(&client, &server, verb.clone(), 500, None).await;
        assert_eq!(hits, 3, "{verb}");
        assert_eq!(
            info(&response).stop_reason(),
            Some(StopReason::MaxRetries),
            "{verb}"
        );
    }
    // The body is sent again, whole, with every attempt.
    let requests = server.received_requests().await.unwrap();
    assert!(requests.iter().all(|r| r.body == b"{\"amount\": 100}"));
}

#[tokio::test]
async fn without_the_idempotency_check_a_post_is_replayed_after_a_500() {
    let server = MockServer::start().await;
    let client = client(quick().idempotency_check(false));
    let (response, hits) = send_and_count(&client, &server, Method::POST, 500, None).await;
    assert_eq!(hits, 3);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::MaxRetries));
}

#[tokio::test]
async fn connection_refused_is_retried_and_the_reqwest_error_returned() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let retries = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&retries);
    let events = Events::default();
    let hook = events.hook();
    let client = client(
        RetryPolicy::builder()
            .backoff(Backoff::exponential(ms(1)).with_jitter(Jitter::None))
            .on_retry(move |event| {
                counter.fetch_add(1, Ordering::SeqCst);
                hook(event);
            }),
    );

    let report = RetryReport::new();
    let result = client
        .get(format!("http://127.0.0.1:{port}/"))
        .with_extension(report.clone())
        .send()
        .await;

    match result {
        Err(reqwest_middleware::Error::Reqwest(e)) => {
            assert!(e.is_connect(), "a connect error: {e:?}")
        }
        other => panic!("expected the reqwest connect error, got {other:?}"),
    }
    let info = report.get().expect("the report is written");
    assert_eq!(info.attempts(), 11);
    assert_eq!(info.stop_reason(), Some(StopReason::MaxRetries));
    assert_eq!(
        retries.load(Ordering::SeqCst),
        RetryPolicy::DEFAULT_MAX_RETRIES,
        "11 attempts in all"
    );
    assert!(events.all().iter().all(|e| e.reason == Reason::Connect));
}

#[tokio::test]
async fn client_timeouts_are_returned_as_reqwest_errors_after_retrying_a_get() {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(200).set_delay(NEVER))
        .mount(&server)
        .await;
    let events = Events::default();
    // The default budget: a new client's starting credit pays for retrying its first two timeouts.
    let client = client_with(
        reqwest_client().timeout(CLIENT_TIMEOUT).build().unwrap(),
        quick().on_retry(events.hook()).build().unwrap(),
    );

    let report = RetryReport::new();
    let result = client
        .get(server.uri())
        .with_extension(report.clone())
        .send()
        .await;

    match result {
        Err(reqwest_middleware::Error::Reqwest(e)) => {
            assert!(e.is_timeout(), "a timeout: {e:?}")
        }
        other => panic!("expected the reqwest timeout, got {other:?}"),
    }
    assert_eq!(hits(&server, "/").await, 3);
    let info = report.get().expect("the report is written");
    assert_eq!(info.attempts(), 3);
    assert_eq!(info.stop_reason(), Some(StopReason::MaxRetries));
    let events = events.all();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.reason == Reason::Timeout));
}

#[tokio::test]
async fn a_post_that_timed_out_is_not_replayed() {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(200).set_delay(NEVER))
        .mount(&server)
        .await;
    let client = client_with(
        reqwest_client().timeout(CLIENT_TIMEOUT).build().unwrap(),
        quick().build().unwrap(),
    );

    let report = RetryReport::new();
    let result = client
        .post(server.uri())
        .body("charge")
        .with_extension(report.clone())
        .send()
        .await;

    assert!(
        matches!(&result, Err(reqwest_middleware::Error::Reqwest(e)) if e.is_timeout()),
        "{result:?}"
    );
    assert_eq!(hits(&server, "/").await, 1);
    let info = report.get().expect("the report is written");
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::NotIdempotent));
}

#[tokio::test]
async fn without_a_replay_buffer_a_streaming_body_is_sent_once_and_its_503_returned_as_received() {
    let server = MockServer::start().await;
    Mock::given(path("/upload"))
        .respond_with(
            ResponseTemplate::new(503)
                .insert_header("x-reason", "overloaded")
                .set_body_string("try later"),
        )
        .expect(1)
        .mount(&server)
        .await;
    let chunks: Vec<Result<&'static str, std::io::Error>> =
        vec![Ok("chunk one, "), Ok("chunk two")];
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));

    let response = client(quick().replay_buffer(0))
        .put(format!("{}/upload", server.uri()))
        .body(body)
        .send()
        .await
        .expect("the 503, not an error");

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["x-reason"], "overloaded");
    let info = info(&response);
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::NotReplayable));
    assert_eq!(response.text().await.unwrap(), "try later");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body, b"chunk one, chunk two");
}

/// A server in process: the last middleware of a chain, which answers every request 503 at once and
/// counts them.
struct AlwaysUnavailable(Arc<AtomicU32>);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for AlwaysUnavailable {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        self.0.fetch_add(1, Ordering::SeqCst);
        let mut response = http::Response::new("");
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        Ok(response.into())
    }
}

// In virtual time, against a server in process, so that the times are exact: in real time the second
// 503 had to come back within 100 ms for the call to end before the deadline.
#[tokio::test(start_paused = true)]
async fn retries_stop_at_the_deadline() {
    // The first retry ends 200 ms in, within 300 ms; the second would end 400 ms in, past it, and is
    // not taken: the call ends as the second 503 comes back, 200 ms in, rather than at the deadline.
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(200)))
        .max_retries(10)
        .max_elapsed(ms(300))
        .build()
        .unwrap();
    let hits = Arc::new(AtomicU32::new(0));
    let client = ClientBuilder::new(reqwest_client().build().unwrap())
        .with(RetryMiddleware::new(policy))
        .with(AlwaysUnavailable(Arc::clone(&hits)))
        .build();

    let start = tokio::time::Instant::now();
    let response = client.get("http://in-process.test/").send().await.unwrap();

    assert_eq!(start.elapsed(), ms(200));
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let info = info(&response);
    assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
    assert_eq!(info.attempts(), 2);
    assert_eq!(info.slept(), ms(200));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn dropping_the_request_mid_sleep_cancels_the_retries() {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let client = client(RetryPolicy::builder().backoff(Backoff::fixed(ms(500))));

    let request = tokio::spawn({
        let url = server.uri();
        async move { client.get(url).send().await }
    });
    // Wait for the first attempt, then abort during the 500 ms sleep that follows it.
    let first_seen = Instant::now();
    while hits(&server, "/").await == 0 {
        assert!(first_seen.elapsed() < Duration::from_secs(5), "no request");
        tokio::time::sleep(ms(5)).await;
    }
    tokio::time::sleep(ms(50)).await;
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled());

    tokio::time::sleep(ms(700)).await;
    assert_eq!(hits(&server, "/").await, 1);
}

/// Sends 100 concurrent GETs through one client to an always-503 server; returns the server's count of
/// requests and the responses' stop reasons.
async fn herd(policy: RetryPolicyBuilder) -> (usize, Vec<StopReason>) {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let client = client(policy);
    let responses =
        futures::future::join_all((0..100).map(|_| client.get(server.uri()).send())).await;
    let stops = responses
        .into_iter()
        .map(|r| {
            let response = r.expect("a 503, not an error");
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            info(&response).stop_reason().expect("stopped")
        })
        .collect();
    (hits(&server, "/").await, stops)
}

fn herd_policy() -> RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::exponential(ms(1)))
        .max_retries(3)
}

// A current-thread runtime: `join_all` starts all 100 requests, each depositing in the budget, before
// the first 503 can come back, so every deposit is in before the first retry withdraws.
#[tokio::test]
async fn the_default_budget_bounds_a_herd_under_a_total_outage() {
    let (hits, stops) = herd(herd_policy()).await;
    // The default budget (20 %, 10/s over 10 s) holds a reserve of 10 × 10 = 100 retries, and the 100
    // requests deposit 20 % of 100 = 20 more. The calls could make 300 retries between them
    // (max_retries 3, 400 requests without a budget): they make the 120 the budget holds, and stop.
    assert_eq!(hits, 100 + 100 + 20, "{hits} requests");
    let budget_stops = stops.iter().filter(|&&s| s == StopReason::Budget).count();
    let max_retries_stops = stops
        .iter()
        .filter(|&&s| s == StopReason::MaxRetries)
        .count();
    // 120 retries, three to a call that reaches max_retries: at most 40 calls do, the others stop on
    // the budget.
    assert!(
        max_retries_stops <= 40,
        "{max_retries_stops} reached max_retries"
    );
    assert_eq!(budget_stops + max_retries_stops, 100);
}

#[tokio::test]
async fn without_a_budget_a_herd_makes_every_retry() {
    let (hits, stops) = herd(herd_policy().budget(None)).await;
    assert_eq!(hits, 400);
    assert!(stops.iter().all(|&s| s == StopReason::MaxRetries));
}

#[tokio::test]
async fn the_retry_and_the_give_up_are_logged_with_the_request_s_method_host_and_path() {
    let server = MockServer::start().await;
    Mock::given(path("/orders"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let events = common::capture();

    let response = client(quick().max_retries(1))
        .delete(format!("{}/orders", server.uri()))
        .send()
        .await
        .unwrap();

    assert_eq!(info(&response).attempts(), 2);
    let events = events.stagger();
    assert_eq!(events.len(), 2, "{events:#?}");
    let (retry, gave_up) = (&events[0], &events[1]);
    assert_eq!(retry.message, "retrying");
    assert_eq!(gave_up.level, tracing::Level::WARN);
    for event in [retry, gave_up] {
        assert_eq!(event.field("http.request.method"), "DELETE");
        assert_eq!(event.field("server.address"), "127.0.0.1");
        assert_eq!(event.field("url.path"), "/orders");
        assert_eq!(event.field("error.type"), "503");
    }
    assert_eq!(gave_up.field("stop.reason"), "max_retries");
}

#[tokio::test]
async fn with_the_default_budget_a_new_clients_timeouts_are_retried_from_its_starting_credit() {
    // A new budget has no deposits to judge a timeout by: the starting credit (one second of the
    // floor) pays for two timeouts' retries, at four retries' worth each, and no more; a 503 is paid
    // from the floor (see `RetryBudget`, "Timeouts").
    let server = MockServer::start().await;
    Mock::given(path("/slow"))
        .respond_with(ResponseTemplate::new(200).set_delay(NEVER))
        .mount(&server)
        .await;
    Mock::given(path("/busy"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    // The starting credit of a host is the process's: a name of this test's own, resolved to the
    // server, so that no other test of this binary (a loopback port used again) has spent it.
    let host = "starting-credit.test";
    let client = client_with(
        reqwest_client()
            .timeout(CLIENT_TIMEOUT)
            .resolve(host, *server.address())
            .build()
            .unwrap(),
        quick().max_retries(5).build().unwrap(),
    );
    let url = |path: &str| format!("http://{host}:{}{path}", server.address().port());

    let report = RetryReport::new();
    let result = client
        .get(url("/slow"))
        .with_extension(report.clone())
        .send()
        .await;
    assert!(matches!(result, Err(reqwest_middleware::Error::Reqwest(e)) if e.is_timeout()));
    assert_eq!(hits(&server, "/slow").await, 3);
    let timed_out = report.get().unwrap();
    assert_eq!(
        (timed_out.attempts(), timed_out.stop_reason()),
        (3, Some(StopReason::Budget))
    );

    let response = client.get(url("/busy")).send().await.unwrap();
    assert_eq!(info(&response).attempts(), 6);
    assert_eq!(hits(&server, "/busy").await, 6);
}

#[tokio::test]
async fn reqwest_s_own_retry_beneath_the_middleware_multiplies_its_attempts_unless_turned_off() {
    // reqwest 0.13 retries by itself, beneath every middleware (`reqwest::retry`). Its default resends
    // only what a server refused unprocessed, never a 503; a `for_host` policy that retries a 503
    // resends it twice at once, under each of stagger's attempts; `never()` turns it off (README,
    // "Quick start: reqwest").
    let server = MockServer::start().await;
    Mock::given(path("/busy"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let host = server.address().ip().to_string();
    let retry_503 = || {
        reqwest::retry::for_host(host.clone()).classify_fn(|attempt| {
            if attempt.status() == Some(StatusCode::SERVICE_UNAVAILABLE) {
                attempt.retryable()
            } else {
                attempt.success()
            }
        })
    };
    let stacks = [
        ("reqwest's defaults", reqwest_client(), 3),
        (
            "for_host, 503 retried",
            reqwest_client().retry(retry_503()),
            9,
        ),
        ("never", reqwest_client().retry(reqwest::retry::never()), 3),
    ];
    let mut seen = 0;
    for (name, builder, sends) in stacks {
        let client = client_with(builder.build().unwrap(), quick().build().unwrap());
        let response = client
            .get(format!("{}/busy", server.uri()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{name}");
        // stagger counts its own attempts; the server sees every send.
        assert_eq!(info(&response).attempts(), 3, "{name}");
        let hits = hits(&server, "/busy").await;
        assert_eq!(hits - seen, sends, "{name}");
        seen = hits;
    }
}
