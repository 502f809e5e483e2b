//! What a server asks for: `Retry-After` in seconds or as an HTTP-date is a floor, a malformed one is
//! treated as absent, and one over `max_retry_after` hands the response back at once.

use std::time::{Instant, SystemTime};

use stagger::{RetryAfterMode, StopReason};
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use super::*;

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

/// A server in process, the last middleware of a chain: the first attempt of each call (every odd
/// request) answered `503` with `Retry-After: 1`, its retry `200`.
struct BusyOnce(std::sync::atomic::AtomicU32);

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for BusyOnce {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let n = self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut response = http::Response::builder();
        if n.is_multiple_of(2) {
            response = response.status(503).header("retry-after", "1");
        }
        Ok(response.body("").unwrap().into())
    }
}

/// The default `RetryAfterMode` is `Spread` (the README's and the docs' defaults): a `Retry-After`
/// of 1 s is a floor, and the retries of 30 calls told it spread over the second after it. `Strict`
/// would send every one at 1 s exactly; this test fails if the default changes, the enum's
/// `#[default]` included (the builder takes it from there).
#[tokio::test(start_paused = true)]
async fn by_default_a_retry_after_is_a_floor_and_the_retries_spread_over_the_window_after_it() {
    assert_eq!(RetryAfterMode::default(), RetryAfterMode::Spread);
    let events = Events::default();
    let policy = RetryPolicy::builder()
        .seed(11)
        .budget(None)
        .on_retry(events.hook())
        .build()
        .unwrap();
    let client = ClientBuilder::new(reqwest_client().build().unwrap())
        .with(RetryMiddleware::new(policy))
        .with(BusyOnce(Default::default()))
        .build();
    for _ in 0..30 {
        let start = tokio::time::Instant::now();
        let response = client.get("http://busy.test/").send().await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let waited = start.elapsed();
        assert!(
            (Duration::from_secs(1)..=ms(2000)).contains(&waited),
            "{waited:?}"
        );
    }
    let delays: Vec<Duration> = events.all().iter().map(|e| e.delay).collect();
    assert_eq!(delays.len(), 30);
    let above_the_floor = delays.iter().filter(|d| **d > ms(1050)).count();
    assert!(above_the_floor >= 20, "spread: {delays:?}");
    let (earliest, latest) = (delays.iter().min().unwrap(), delays.iter().max().unwrap());
    assert!(*latest - *earliest > ms(500), "{earliest:?}..{latest:?}");
}
