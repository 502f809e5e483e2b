//! The tower layer end to end: an in-process service under paused time, then `reqwest::Client` and
//! hyper-util's client against wiremock on loopback.
//!
//! Every test asserts how many times the server saw the request.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use stagger::adapter::{AsError, Attempt, Judge, Replay, Sent};
use stagger::{
    Backoff, Jitter, RetryAfterMode, RetryBudget, RetryEvent, RetryInfo, RetryLayer, RetryPolicy,
    RetryPolicyBuilder, StopReason,
};
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

mod common;

type Req = Request<String>;
type Res = Response<String>;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A policy without jitter and without a budget: every delay is the backoff's ceiling (100, 200, 400 ms …
/// from an `initial` of 100 ms).
fn exact(initial: Duration) -> RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::exponential(initial).with_jitter(Jitter::None))
        .budget(None)
}

/// Builds the policy with a hook that records every retry it announces.
fn recorded(builder: RetryPolicyBuilder) -> (RetryPolicy, Arc<Mutex<Vec<RetryEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let policy = builder
        .on_retry(move |event| sink.lock().unwrap().push(*event))
        .build()
        .unwrap();
    (policy, events)
}

fn delays(events: &Mutex<Vec<RetryEvent>>) -> Vec<Duration> {
    events.lock().unwrap().iter().map(|e| e.delay).collect()
}

fn info<B>(response: &Response<B>) -> RetryInfo {
    *response
        .extensions()
        .get::<RetryInfo>()
        .expect("RetryInfo in the final response's extensions")
}

/// When each attempt reached the server.
#[derive(Clone, Default)]
struct Hits(Arc<Mutex<Vec<Instant>>>);

impl Hits {
    /// Records an attempt and returns its number, from 1.
    fn hit(&self) -> usize {
        let mut hits = self.0.lock().unwrap();
        hits.push(Instant::now());
        hits.len()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Each attempt's time, measured from `start`.
    fn offsets(&self, start: Instant) -> Vec<Duration> {
        self.0.lock().unwrap().iter().map(|t| *t - start).collect()
    }
}

/// A budget of exactly one retry: no share of the load, a floor of one retry a second over one second.
fn one_retry() -> RetryBudget {
    RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(1)
        .window(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// An in-process server that answers attempt `n` (from 1) with `respond(n, &request)`.
fn server<F>(
    hits: &Hits,
    respond: F,
) -> impl Service<Req, Response = Res, Error = Infallible, Future: Send> + Clone + Send + use<F>
where
    F: Fn(usize, &Req) -> Res + Clone + Send + 'static,
{
    let hits = hits.clone();
    service_fn(move |request: Req| {
        let response = respond(hits.hit(), &request);
        async move { Ok::<_, Infallible>(response) }
    })
}

fn status(code: u16) -> Res {
    Response::builder()
        .status(code)
        .body(String::new())
        .unwrap()
}

/// Fails with 503 until attempt `successful`, which gets 200 "ok".
fn fails_until(successful: usize) -> impl Fn(usize, &Req) -> Res + Clone + Send + 'static {
    move |n, _| match n {
        n if n < successful => status(503),
        _ => Response::new("ok".to_owned()),
    }
}

fn always(code: u16) -> impl Fn(usize, &Req) -> Res + Clone + Send + 'static {
    move |_, _| status(code)
}

fn get() -> Req {
    Request::get("http://test.invalid/")
        .body(String::new())
        .unwrap()
}

async fn send<S>(
    policy: RetryPolicy,
    inner: S,
    request: Req,
) -> Result<Res, stagger::Error<S::Error>>
where
    S: Service<Req, Response = Res> + Clone,
    S::Error: AsError,
{
    ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(inner)
        .oneshot(request)
        .await
}

// ---------------------------------------------------------------------------------------------------
// Delays
// ---------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn without_jitter_attempts_come_at_0_100_300_700_ms() {
    let hits = Hits::default();
    let policy = exact(ms(100)).max_retries(3).build().unwrap();
    let start = Instant::now();

    let response = send(policy, server(&hits, always(503)), get())
        .await
        .unwrap();

    assert_eq!(hits.offsets(start), [0, 100, 300, 700].map(ms));
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let info = info(&response);
    assert_eq!(info.attempts(), 4);
    assert_eq!(info.retries(), 3);
    assert_eq!(info.slept(), ms(700));
    assert_eq!(start.elapsed(), ms(700));
    assert_eq!(info.stop_reason(), Some(StopReason::MaxRetries));
}

#[tokio::test(start_paused = true)]
async fn seeded_full_jitter_repeats_its_delays_and_keeps_each_under_its_ceiling() {
    let backoff = Backoff::exponential(ms(100)); // full jitter by default
    let run = |seed: u64| async move {
        let hits = Hits::default();
        let (policy, events) = recorded(
            RetryPolicy::builder()
                .backoff(backoff)
                .budget(None)
                .max_retries(6)
                .seed(seed),
        );
        let start = Instant::now();
        let response = send(policy, server(&hits, always(503)), get())
            .await
            .unwrap();
        assert_eq!(hits.count(), 7);
        assert_eq!(info(&response).attempts(), 7);
        (delays(&events), hits.offsets(start))
    };

    let (first, first_times) = run(42).await;
    let (again, again_times) = run(42).await;
    let (other, _) = run(43).await;

    assert_eq!(first.len(), 6);
    assert_eq!(first, again, "the same seed draws the same delays");
    assert_eq!(first_times, again_times);
    assert_ne!(first, other, "another seed draws other delays");
    for (n, delay) in (1..).zip(&first) {
        assert!(
            *delay <= backoff.ceiling(n),
            "retry {n}: {delay:?} > {:?}",
            backoff.ceiling(n)
        );
    }
    // The attempts really are that far apart; tokio's timer rounds a sleep up to the millisecond.
    for (delay, gap) in first
        .iter()
        .zip(first_times.windows(2).map(|w| w[1] - w[0]))
    {
        assert!(
            *delay <= gap && gap <= *delay + ms(1),
            "slept {gap:?} for {delay:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn requests_of_one_seeded_policy_draw_different_delays() {
    let (policy, events) = recorded(
        RetryPolicy::builder()
            .backoff(Backoff::exponential(ms(100)))
            .budget(None)
            .max_retries(4)
            .seed(7),
    );
    let hits = Hits::default();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(server(&hits, always(503)));

    service.clone().oneshot(get()).await.unwrap();
    let first = delays(&events);
    events.lock().unwrap().clear();
    service.oneshot(get()).await.unwrap();
    let second = delays(&events);

    assert_eq!(hits.count(), 10);
    assert_eq!(first.len(), 4);
    assert_ne!(
        first, second,
        "two requests that fail together must not retry together"
    );
}

#[tokio::test(start_paused = true)]
async fn with_the_defaults_one_503_costs_a_median_of_50_ms() {
    // A transient failure is over in a moment: the first retry waits U[0, 100 ms]. 1 000 requests,
    // each answered 503 once and then 200, through one default policy (its budget's floor and
    // deposits pay for 1 000 retries spread over the calls' own time).
    let policy = RetryPolicy::builder().seed(20).build().unwrap();
    let mut added = Vec::new();
    for _ in 0..1000 {
        let hits = Hits::default();
        let start = Instant::now();
        let response = send(policy.clone(), server(&hits, fails_until(2)), get())
            .await
            .unwrap();
        assert_eq!((response.status().as_u16(), hits.count()), (200, 2));
        added.push(start.elapsed());
        // Apart, as requests of a client are: the budget's floor is 10 retries a second.
        tokio::time::advance(ms(100)).await;
    }
    added.sort_unstable();
    let median = added[500];
    assert!(
        ms(40) <= median && median <= ms(60),
        "median added latency {median:?}"
    );
    assert!(added[999] <= ms(100), "the slowest {:?}", added[999]);
}

// ---------------------------------------------------------------------------------------------------
// Deadline
// ---------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_retry_whose_sleep_would_end_past_max_elapsed_is_not_taken() {
    let hits = Hits::default();
    // Attempts at 0 and 100 ms; the next sleep (200 ms) would end at 300 ms, past the deadline.
    let policy = exact(ms(100))
        .max_retries(10)
        .max_elapsed(ms(250))
        .build()
        .unwrap();
    let start = Instant::now();

    let response = send(policy, server(&hits, always(503)), get())
        .await
        .unwrap();

    assert_eq!(hits.offsets(start), [0, 100].map(ms));
    assert_eq!(
        start.elapsed(),
        ms(100),
        "the response comes back at once, not after a sleep"
    );
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let info = info(&response);
    assert_eq!(info.attempts(), 2);
    assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_sleep_would_end_exactly_at_max_elapsed_is_not_taken() {
    let hits = Hits::default();
    let policy = exact(ms(100))
        .max_retries(10)
        .max_elapsed(ms(300))
        .build()
        .unwrap();
    let start = Instant::now();

    let response = send(policy, server(&hits, always(503)), get())
        .await
        .unwrap();

    // The third attempt would start at the deadline, with no time left to run: it is not sent.
    assert_eq!(hits.offsets(start), [0, 100].map(ms));
    let info = info(&response);
    assert_eq!(info.attempts(), 2);
    assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn the_deadline_counts_the_time_spent_in_attempts() {
    let hits = Hits::default();
    let slow = {
        let hits = hits.clone();
        service_fn(move |_: Req| {
            hits.hit();
            async {
                tokio::time::sleep(ms(100)).await;
                Ok::<_, Infallible>(status(503))
            }
        })
    };
    // Attempt 1 ends at 100 ms, sleeps 100; attempt 2 ends at 300 ms, and 200 more would end at 500.
    let policy = exact(ms(100))
        .max_retries(10)
        .max_elapsed(ms(450))
        .build()
        .unwrap();
    let start = Instant::now();

    let response = send(policy, slow, get()).await.unwrap();

    assert_eq!(hits.offsets(start), [0, 200].map(ms));
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Deadline));
}

// ---------------------------------------------------------------------------------------------------
// Budget
// ---------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn a_zero_percent_budget_allows_only_its_reserve_across_concurrent_requests() {
    let hits = Hits::default();
    // No share of the load, and a reserve of 1 retry per second over a 1 s window: one retry in all.
    let policy = exact(ms(1))
        .max_retries(3)
        .budget(one_retry())
        .build()
        .unwrap();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(server(&hits, always(503)));

    let responses =
        futures::future::join_all((0..10).map(|_| service.clone().oneshot(get()))).await;

    assert_eq!(hits.count(), 11);
    let infos: Vec<_> = responses
        .iter()
        .map(|r| info(r.as_ref().unwrap()))
        .collect();
    assert_eq!(infos.iter().map(RetryInfo::retries).sum::<u32>(), 1);
    assert!(
        infos
            .iter()
            .all(|i| i.stop_reason() == Some(StopReason::Budget))
    );

    // Once the window has passed, the reserve is there again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let response = service.oneshot(get()).await.unwrap();
    assert_eq!(hits.count(), 13);
    assert_eq!(info(&response).attempts(), 2);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Budget));
}

#[tokio::test(start_paused = true)]
async fn a_ten_percent_budget_retries_one_request_in_ten() {
    let hits = Hits::default();
    let policy = exact(ms(1))
        .max_retries(3)
        .budget(
            RetryBudget::builder()
                .ratio(0.1)
                .min_per_second(0)
                .window(Duration::from_secs(10))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(server(&hits, always(503)));

    let mut retries = 0;
    for _ in 0..20 {
        let response = service.clone().oneshot(get()).await.unwrap();
        retries += info(&response).retries();
        assert_eq!(info(&response).stop_reason(), Some(StopReason::Budget));
    }

    assert_eq!(retries, 2);
    assert_eq!(hits.count(), 22);
}

// ---------------------------------------------------------------------------------------------------
// Retry-After
// ---------------------------------------------------------------------------------------------------

/// 503 with `Retry-After: secs` at the first attempt, then 200.
fn busy_for(secs: u64) -> impl Fn(usize, &Req) -> Res + Clone + Send + 'static {
    move |n, _| match n {
        1 => Response::builder()
            .status(503)
            .header("retry-after", secs.to_string())
            .body(String::new())
            .unwrap(),
        _ => Response::new("ok".to_owned()),
    }
}

#[tokio::test(start_paused = true)]
async fn strict_retry_after_waits_the_larger_of_the_floor_and_the_backoff_delay() {
    // (backoff, Retry-After in seconds, expected wait)
    let cases = [
        (
            Backoff::exponential(ms(100)).with_jitter(Jitter::None),
            1,
            ms(1000),
        ),
        (
            Backoff::exponential(ms(3000)).with_jitter(Jitter::None),
            1,
            ms(3000),
        ),
        // Full jitter draws at most 100 ms: the floor wins.
        (Backoff::exponential(ms(100)), 2, ms(2000)),
    ];
    for (backoff, retry_after, want) in cases {
        let hits = Hits::default();
        let (policy, events) = recorded(
            RetryPolicy::builder()
                .backoff(backoff)
                .budget(None)
                .seed(1)
                .retry_after(RetryAfterMode::Strict),
        );
        let start = Instant::now();

        let response = send(policy, server(&hits, busy_for(retry_after)), get())
            .await
            .unwrap();

        assert_eq!(hits.offsets(start), [ms(0), want], "{backoff:?}");
        assert_eq!(response.status(), StatusCode::OK);
        let events = events.lock().unwrap();
        assert_eq!(events[0].delay, want);
        assert_eq!(
            events[0].retry_after,
            Some(Duration::from_secs(retry_after))
        );
    }
}

#[tokio::test(start_paused = true)]
async fn spread_retry_after_waits_the_floor_plus_at_most_the_larger_of_backoff_and_the_floor() {
    // (initial backoff, F, the window after F: max(c(1), F))
    let cases = [(ms(100), 2, ms(2000)), (ms(4000), 1, ms(4000))];
    for (initial, retry_after, window) in cases {
        let floor = Duration::from_secs(retry_after);
        let (policy, events) = recorded(
            RetryPolicy::builder()
                .backoff(Backoff::exponential(initial))
                .budget(None)
                .seed(3),
        );
        let mut waits = Vec::new();
        for _ in 0..50 {
            let hits = Hits::default();
            let start = Instant::now();
            let response = send(policy.clone(), server(&hits, busy_for(retry_after)), get())
                .await
                .unwrap();
            assert_eq!(hits.count(), 2);
            assert_eq!(info(&response).stop_reason(), Some(StopReason::Success));
            let offsets = hits.offsets(start);
            waits.push(offsets[1]);
        }
        let delays = delays(&events);
        assert_eq!(delays.len(), 50);
        for (delay, wait) in delays.iter().zip(&waits) {
            assert!(
                floor <= *delay && *delay <= floor + window,
                "F {floor:?}: waited {delay:?}"
            );
            assert!(*delay <= *wait && *wait <= *delay + ms(1));
        }
        // Spread, not merely floored: the herd uses most of the window.
        let earliest = delays.iter().min().unwrap();
        let latest = delays.iter().max().unwrap();
        assert!(
            *latest - *earliest > window / 2,
            "{earliest:?}..{latest:?} over a window of {window:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_over_max_retry_after_hands_the_503_back_at_once_as_received() {
    let cases = [
        // The default max_retry_after is 30 s.
        (RetryPolicy::builder(), "120"),
        (
            RetryPolicy::builder().max_retry_after(Duration::from_secs(5)),
            "6",
        ),
    ];
    for (builder, retry_after) in cases {
        let hits = Hits::default();
        let overloaded = move |_: usize, _: &Req| {
            Response::builder()
                .status(503)
                .header("retry-after", retry_after)
                .header("x-request-id", "abc-123")
                .body("overloaded, come back later".to_owned())
                .unwrap()
        };
        let start = Instant::now();

        let response = send(builder.build().unwrap(), server(&hits, overloaded), get())
            .await
            .unwrap();

        assert_eq!(hits.count(), 1);
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()["retry-after"], retry_after);
        assert_eq!(response.headers()["x-request-id"], "abc-123");
        let info = info(&response);
        assert_eq!(info.attempts(), 1);
        assert_eq!(info.slept(), Duration::ZERO);
        assert_eq!(info.stop_reason(), Some(StopReason::RetryAfterTooLong));
        assert_eq!(response.into_body(), "overloaded, come back later");
    }
}

// ---------------------------------------------------------------------------------------------------
// What comes back
// ---------------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn retry_info_in_the_final_response_counts_the_attempts() {
    let hits = Hits::default();
    let policy = exact(ms(100)).build().unwrap();

    let response = send(policy.clone(), server(&hits, fails_until(3)), get())
        .await
        .unwrap();

    assert_eq!(hits.count(), 3);
    assert_eq!(response.status(), StatusCode::OK);
    let info = info(&response);
    assert_eq!(info.attempts(), 3);
    assert_eq!(info.retries(), 2);
    assert_eq!(info.slept(), ms(300));
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    assert_eq!(response.into_body(), "ok");

    let hits = Hits::default();
    let response = send(policy, server(&hits, fails_until(1)), get())
        .await
        .unwrap();
    assert_eq!(hits.count(), 1);
    let info = self::info(&response);
    assert_eq!((info.attempts(), info.slept()), (1, Duration::ZERO));
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
}

#[tokio::test(start_paused = true)]
async fn when_retries_run_out_the_last_response_comes_back_intact() {
    let hits = Hits::default();
    let numbered = |n: usize, _: &Req| {
        Response::builder()
            .status(502)
            .header("x-attempt", n.to_string())
            .header("content-type", "text/plain")
            .body(format!("bad gateway, attempt {n}"))
            .unwrap()
    };
    let policy = exact(ms(10)).max_retries(2).build().unwrap();

    let response = send(policy, server(&hits, numbered), get()).await.unwrap();

    assert_eq!(hits.count(), 3);
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(response.headers()["x-attempt"], "3");
    assert_eq!(response.headers()["content-type"], "text/plain");
    assert_eq!(info(&response).stop_reason(), Some(StopReason::MaxRetries));
    assert_eq!(response.into_body(), "bad gateway, attempt 3");
}

#[tokio::test(start_paused = true)]
async fn fatal_statuses_come_back_after_one_attempt() {
    for code in [400, 401, 403, 404, 409, 422, 501, 505] {
        let hits = Hits::default();
        let policy = exact(ms(10)).build().unwrap();
        let response = send(policy, server(&hits, always(code)), get())
            .await
            .unwrap();
        assert_eq!(hits.count(), 1, "{code}");
        assert_eq!(response.status().as_u16(), code);
        assert_eq!(info(&response).stop_reason(), Some(StopReason::Fatal));
    }
}

/// The messages along an error's source chain, from the error itself inwards: what a reporter such as
/// anyhow's `{:#}` joins.
fn chain(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    std::iter::successors(Some(error), |e| e.source())
        .map(ToString::to_string)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_time_limit_or_a_rejection_is_said_once_along_the_error_chain() {
    let hangs = || service_fn(|_: Req| std::future::pending::<Result<Res, io::Error>>());

    let policy = exact(ms(10))
        .attempt_timeout(ms(300))
        .max_retries(0)
        .build()
        .unwrap();
    let error = send(policy, hangs(), get()).await.unwrap_err();
    assert_eq!(chain(&error), ["attempt 1 timed out after 300ms"]);
    assert_eq!(
        format!("{error:?}"),
        "attempt 1 timed out after 300ms (max retries reached)"
    );

    let policy = exact(ms(100))
        .max_elapsed(ms(250))
        .attempt_timeout(ms(100))
        .build()
        .unwrap();
    let error = send(policy, hangs(), get()).await.unwrap_err();
    assert_eq!(chain(&error), ["deadline of 250ms passed after 2 attempts"]);
    assert_eq!(
        format!("{error:?}"),
        "deadline of 250ms passed after 2 attempts (100ms asleep)"
    );

    // A 429 asking for a minute, longer than `max_retry_after`: the next request is not sent.
    let policy = exact(ms(10)).host_cooldown(true).build().unwrap();
    let limited = |_, _: &Req| {
        let response = Response::builder().status(429).header("retry-after", "60");
        response.body(String::new()).unwrap()
    };
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(server(&Hits::default(), limited));
    client.clone().oneshot(get()).await.unwrap();
    let error = client.oneshot(get()).await.unwrap_err();
    assert!(error.rejected().is_some());
    let rejected =
        "not sent: the host asked for a pause of 60s more, longer than max_retry_after (30s)";
    assert_eq!(chain(&error), [rejected]);
    assert_eq!(format!("{error:?}"), rejected);
    // `{:#?}` shows the fields.
    assert!(format!("{error:#?}").starts_with("Error(\n    Rejected {"));
}

/// An inner service that fails every attempt with an `io::Error` of `kind`, numbered./// An inner service that fails every attempt with an `io::Error` of `kind`, numbered.
fn failing(
    hits: &Hits,
    kind: io::ErrorKind,
) -> impl Service<Req, Response = Res, Error = io::Error> + Clone {
    let hits = hits.clone();
    service_fn(move |_: Req| {
        let n = hits.hit();
        async move { Err::<Res, _>(io::Error::new(kind, format!("failure #{n}"))) }
    })
}

#[tokio::test(start_paused = true)]
async fn an_error_from_the_inner_service_is_returned_unchanged() {
    let policy = exact(ms(10)).max_retries(2).build().unwrap();

    // Retryable: the last attempt's error comes back.
    let hits = Hits::default();
    let error = send(
        policy.clone(),
        failing(&hits, io::ErrorKind::ConnectionRefused),
        get(),
    )
    .await
    .unwrap_err();
    assert_eq!(hits.count(), 3);
    assert_eq!(error.info().attempts(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
    let inner = error.inner().expect("the inner error");
    assert_eq!(inner.kind(), io::ErrorKind::ConnectionRefused);
    assert_eq!(inner.to_string(), "failure #3");
    assert_eq!(
        error.to_string(),
        "gave up after 3 attempts (max retries reached)"
    );
    let source = std::error::Error::source(&error).expect("the inner error as source");
    assert_eq!(source.to_string(), "failure #3");
    assert!(source.is::<io::Error>());

    // Fatal: the first.
    let hits = Hits::default();
    let error = send(
        policy,
        failing(&hits, io::ErrorKind::PermissionDenied),
        get(),
    )
    .await
    .unwrap_err();
    assert_eq!(hits.count(), 1);
    assert_eq!(error.info().attempts(), 1);
    assert_eq!(error.info().stop_reason(), Some(StopReason::Fatal));
    let inner = error.into_inner().expect("the inner error");
    assert_eq!(inner.kind(), io::ErrorKind::PermissionDenied);
    assert_eq!(inner.to_string(), "failure #1");
}

#[tokio::test(start_paused = true)]
async fn a_per_attempt_timeout_inside_the_layer_is_retried_and_its_error_kept() {
    let hits = Hits::default();
    let hanging = {
        let hits = hits.clone();
        service_fn(move |_: Req| {
            hits.hit();
            async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, Infallible>(status(200))
            }
        })
    };
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(
            exact(ms(10)).max_retries(2).build().unwrap(),
        ))
        .layer(tower::timeout::TimeoutLayer::new(ms(100)))
        .service(hanging);
    let start = Instant::now();

    let error = service.oneshot(get()).await.unwrap_err();

    assert_eq!(hits.offsets(start), [0, 110, 230].map(ms));
    let inner = error.inner().expect("the inner error");
    assert!(inner.is::<tower::timeout::error::Elapsed>(), "{error}");
    assert_eq!(error.info().attempts(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
}

#[tokio::test(start_paused = true)]
async fn max_retries_zero_sends_once() {
    let policy = exact(ms(10)).max_retries(0).build().unwrap();

    let hits = Hits::default();
    let response = send(policy.clone(), server(&hits, always(503)), get())
        .await
        .unwrap();
    assert_eq!(hits.count(), 1);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(info(&response).attempts(), 1);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::MaxRetries));

    let hits = Hits::default();
    let error = send(
        policy,
        failing(&hits, io::ErrorKind::ConnectionRefused),
        get(),
    )
    .await
    .unwrap_err();
    assert_eq!(hits.count(), 1);
    assert_eq!(error.inner().unwrap().to_string(), "failure #1");
    assert_eq!(error.info().attempts(), 1);
    assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
}

// ---------------------------------------------------------------------------------------------------
// Idempotency
// ---------------------------------------------------------------------------------------------------

/// What the server saw of each attempt: method, `Idempotency-Key` and body.
type Seen = Arc<Mutex<Vec<(Method, Option<String>, String)>>>;

fn watching(
    hits: &Hits,
    seen: &Seen,
    respond: impl Fn(usize) -> u16 + Clone + Send + 'static,
) -> impl Service<Req, Response = Res, Error = Infallible> + Clone {
    let seen = Arc::clone(seen);
    server(hits, move |n, request: &Req| {
        let key = request
            .headers()
            .get("idempotency-key")
            .map(|v| v.to_str().unwrap().to_owned());
        seen.lock()
            .unwrap()
            .push((request.method().clone(), key, request.body().clone()));
        status(respond(n))
    })
}

fn post(key: Option<&str>) -> Req {
    let mut request = Request::post("http://test.invalid/orders");
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.body(r#"{"item":42}"#.to_owned()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn post_is_not_replayed_after_a_500() {
    let (hits, seen) = (Hits::default(), Seen::default());
    let policy = exact(ms(10)).build().unwrap();

    let response = send(policy, watching(&hits, &seen, |_| 500), post(None))
        .await
        .unwrap();

    assert_eq!(hits.count(), 1);
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        info(&response).stop_reason(),
        Some(StopReason::NotIdempotent)
    );
}

#[tokio::test(start_paused = true)]
async fn post_is_replayed_after_a_503_with_the_same_method_and_body() {
    let (hits, seen) = (Hits::default(), Seen::default());
    let policy = exact(ms(10)).build().unwrap();

    let response = send(
        policy,
        watching(&hits, &seen, |n| if n < 3 { 503 } else { 201 }),
        post(None),
    )
    .await
    .unwrap();

    assert_eq!(hits.count(), 3);
    assert_eq!(response.status(), StatusCode::CREATED);
    let want = (Method::POST, None, r#"{"item":42}"#.to_owned());
    assert_eq!(*seen.lock().unwrap(), vec![want; 3]);
}

#[tokio::test(start_paused = true)]
async fn post_with_an_idempotency_key_is_replayed_after_a_500_with_its_key() {
    let (hits, seen) = (Hits::default(), Seen::default());
    let policy = exact(ms(10)).build().unwrap();

    let response = send(
        policy,
        watching(&hits, &seen, |n| if n < 3 { 500 } else { 201 }),
        post(Some("order-8e03978e")),
    )
    .await
    .unwrap();

    assert_eq!(hits.count(), 3);
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(info(&response).attempts(), 3);
    let want = (
        Method::POST,
        Some("order-8e03978e".to_owned()),
        r#"{"item":42}"#.to_owned(),
    );
    assert_eq!(*seen.lock().unwrap(), vec![want; 3]);
}

#[tokio::test(start_paused = true)]
async fn the_idempotency_check_can_be_turned_off() {
    let (hits, seen) = (Hits::default(), Seen::default());
    let policy = exact(ms(10))
        .max_retries(2)
        .idempotency_check(false)
        .build()
        .unwrap();

    let response = send(policy, watching(&hits, &seen, |_| 500), post(None))
        .await
        .unwrap();

    assert_eq!(hits.count(), 3);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::MaxRetries));
}

// ---------------------------------------------------------------------------------------------------
// Copies and readiness
// ---------------------------------------------------------------------------------------------------

/// A body whose clones are counted.
#[derive(Debug)]
struct CountingBody {
    clones: Arc<AtomicUsize>,
}

impl Clone for CountingBody {
    fn clone(&self) -> Self {
        self.clones.fetch_add(1, Ordering::SeqCst);
        Self {
            clones: Arc::clone(&self.clones),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn no_copy_is_made_for_the_last_allowed_attempt() {
    // (max_retries, attempts that fail before a 200, expected attempts, expected clones)
    let cases = [
        (2, usize::MAX, 3, 2),
        (0, usize::MAX, 1, 0),
        (5, usize::MAX, 6, 5),
        // A copy is kept before each attempt that may still be retried, whatever its outcome.
        (2, 0, 1, 1),
        (2, 1, 2, 2),
    ];
    for (max_retries, failures, attempts, clones) in cases {
        let hits = Hits::default();
        let inner = {
            let hits = hits.clone();
            service_fn(move |_: Request<CountingBody>| {
                let n = hits.hit();
                let code = if n <= failures { 503 } else { 200 };
                async move { Ok::<_, Infallible>(status(code)) }
            })
        };
        let counter = Arc::new(AtomicUsize::new(0));
        let request = Request::put("http://test.invalid/")
            .body(CountingBody {
                clones: Arc::clone(&counter),
            })
            .unwrap();
        let policy = exact(ms(10)).max_retries(max_retries).build().unwrap();

        let response = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .service(inner)
            .oneshot(request)
            .await
            .unwrap();

        let case = format!("max_retries {max_retries}, failures {failures}");
        assert_eq!(hits.count(), attempts, "{case}");
        assert_eq!(info(&response).attempts() as usize, attempts, "{case}");
        assert_eq!(counter.load(Ordering::SeqCst), clones, "{case}");
    }
}

#[derive(Default)]
struct Readiness {
    polls: AtomicUsize,
    calls: AtomicUsize,
}

/// A service that is not ready until its `poll_ready` has returned `Pending` once, and that panics when
/// called without a `Ready` in between; each call uses the readiness up. Clones start unready.
struct MustBeReady {
    ready: bool,
    stats: Arc<Readiness>,
}

impl Clone for MustBeReady {
    fn clone(&self) -> Self {
        Self {
            ready: false,
            stats: Arc::clone(&self.stats),
        }
    }
}

impl Service<Req> for MustBeReady {
    type Response = Res;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Res, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        let polls = self.stats.polls.fetch_add(1, Ordering::SeqCst) + 1;
        if polls % 2 == 1 {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Req) -> Self::Future {
        assert!(
            std::mem::take(&mut self.ready),
            "called without poll_ready returning Ready first"
        );
        let calls = self.stats.calls.fetch_add(1, Ordering::SeqCst) + 1;
        std::future::ready(Ok(status(if calls < 3 { 503 } else { 200 })))
    }
}

#[tokio::test(start_paused = true)]
async fn poll_ready_is_driven_to_ready_before_every_retry() {
    let stats = Arc::new(Readiness::default());
    let inner = MustBeReady {
        ready: false,
        stats: Arc::clone(&stats),
    };

    let response = send(exact(ms(10)).build().unwrap(), inner, get())
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(stats.calls.load(Ordering::SeqCst), 3);
    // A `Pending` then a `Ready` before each of the three calls.
    assert_eq!(stats.polls.load(Ordering::SeqCst), 6);
    assert_eq!(info(&response).attempts(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_concurrency_limit_inside_the_layer_holds_across_retries() {
    let hits = Hits::default();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most_in_flight = Arc::new(AtomicUsize::new(0));
    let slow = {
        let (hits, in_flight, most) = (
            hits.clone(),
            Arc::clone(&in_flight),
            Arc::clone(&most_in_flight),
        );
        service_fn(move |_: Req| {
            hits.hit();
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let in_flight = Arc::clone(&in_flight);
            async move {
                tokio::time::sleep(ms(50)).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Infallible>(status(503))
            }
        })
    };
    // `ConcurrencyLimit::call` panics unless `poll_ready` gave it a permit first.
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(
            exact(ms(10)).max_retries(2).build().unwrap(),
        ))
        .concurrency_limit(1)
        .service(slow);

    let (a, b) = tokio::join!(
        service.clone().oneshot(get()),
        service.clone().oneshot(get())
    );

    assert_eq!(hits.count(), 6);
    assert_eq!(most_in_flight.load(Ordering::SeqCst), 1);
    assert_eq!(info(&a.unwrap()).attempts(), 3);
    assert_eq!(info(&b.unwrap()).attempts(), 3);
}

// ---------------------------------------------------------------------------------------------------
// Faults: the deadline and the attempt timeout in virtual time, readiness that fails or lags, a call
// dropped mid-sleep, a `Replay` that breaks its contract
// ---------------------------------------------------------------------------------------------------

fn hung(
    hits: &Hits,
) -> impl Service<Req, Response = Res, Error = Infallible, Future: Send> + Clone {
    let hits = hits.clone();
    service_fn(move |_: Req| {
        hits.hit();
        std::future::pending::<Result<Res, Infallible>>()
    })
}

#[tokio::test(start_paused = true)]
async fn a_new_clients_timeouts_are_retried_from_the_starting_credit_an_old_quiet_ones_are_not() {
    let hits = Hits::default();
    let policy = RetryPolicy::builder()
        .attempt_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let start = Instant::now();

    // The budget's first window: no request has paid for retrying a timeout, and the starting credit
    // (one second of the floor, 10 retries' worth) pays for two, at 4 each. The credit of a host is
    // the process's: a host of this test's own, so that no test beside it has spent it.
    let get = || {
        Request::get("http://starting-credit.invalid/")
            .body(String::new())
            .unwrap()
    };
    let error = send(policy.clone(), hung(&hits), get()).await.unwrap_err();
    assert!(error.is_attempt_timeout(), "{error:?}");
    assert_eq!(hits.count(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::Budget));
    // Three attempts of 1 s, retried after jittered 100 and 200 ms ceilings.
    assert!(start.elapsed() >= Duration::from_secs(3) && start.elapsed() <= ms(3_300));

    // A call made after the first window is judged by its recent requests, which paid for nothing:
    // a fleet of quiet clients does not keep a slow server busy with retries of timeouts.
    tokio::time::advance(Duration::from_secs(10)).await;
    let error = send(policy, hung(&hits), get()).await.unwrap_err();
    assert!(error.is_attempt_timeout(), "{error:?}");
    assert_eq!(hits.count(), 4);
    assert_eq!(error.info().stop_reason(), Some(StopReason::Budget));
}

#[tokio::test(start_paused = true)]
async fn without_a_budget_the_default_policy_gives_up_on_a_hung_service_at_30_s_after_3_attempts() {
    let hits = Hits::default();
    let start = Instant::now();

    let policy = RetryPolicy::builder().budget(None).build().unwrap();
    let error = send(policy, hung(&hits), get()).await.unwrap_err();

    // Attempts cut at 10 s each (`attempt_timeout`), retried after a jittered 100 and 200 ms ceiling;
    // the third is cut by the 30 s deadline.
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    assert!(error.is_deadline(), "{error:?}");
    assert_eq!(hits.count(), 3);
    let offsets = hits.offsets(start);
    assert!(offsets[1] >= Duration::from_secs(10) && offsets[1] <= ms(10_100));
    assert!(offsets[2] >= offsets[1] + Duration::from_secs(10));
    assert_eq!(error.info().attempts(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_cuts_each_attempt_and_a_get_is_retried() {
    let hits = Hits::default();
    let slow_first = {
        let hits = hits.clone();
        service_fn(move |_: Req| {
            let n = hits.hit();
            async move {
                if n == 1 {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                Ok::<_, Infallible>(status(200))
            }
        })
    };
    let policy = exact(ms(10)).attempt_timeout(ms(200)).build().unwrap();
    let start = Instant::now();

    let response = send(policy.clone(), slow_first.clone(), get())
        .await
        .unwrap();

    assert_eq!(hits.offsets(start), [0, 210].map(ms));
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(info(&response).attempts(), 2);

    // A POST without a key is not replayed after a timeout: the server may have acted on it.
    let hits = Hits::default();
    let slow = {
        let hits = hits.clone();
        service_fn(move |_: Req| {
            hits.hit();
            async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok::<_, Infallible>(status(200))
            }
        })
    };
    let start = Instant::now();
    let error = send(policy, slow, post(None)).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(200));
    assert!(error.is_attempt_timeout(), "{error:?}");
    assert_eq!(error.elapsed().unwrap().limit(), ms(200));
    assert_eq!(hits.count(), 1);
    assert_eq!(error.info().stop_reason(), Some(StopReason::NotIdempotent));
}

/// Ready at once for the first call; after it, each `poll_ready` waits `lag` on the timer first.
struct LaggingReadiness {
    calls: Arc<Mutex<Vec<Instant>>>,
    lag: Duration,
    wait: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    fail: bool,
}

impl LaggingReadiness {
    fn new(lag: Duration, fail: bool) -> (Self, Arc<Mutex<Vec<Instant>>>) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let service = Self {
            calls: Arc::clone(&calls),
            lag,
            wait: None,
            fail,
        };
        (service, calls)
    }
}

impl Clone for LaggingReadiness {
    fn clone(&self) -> Self {
        Self {
            calls: Arc::clone(&self.calls),
            lag: self.lag,
            wait: None,
            fail: self.fail,
        }
    }
}

impl Service<Req> for LaggingReadiness {
    type Response = Res;
    type Error = io::Error;
    type Future = std::future::Ready<Result<Res, io::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        if self.calls.lock().unwrap().is_empty() {
            return Poll::Ready(Ok(()));
        }
        if self.fail {
            return Poll::Ready(Err(io::Error::other("the service has shut down")));
        }
        let lag = self.lag;
        let wait = self
            .wait
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(lag)));
        std::task::ready!(wait.as_mut().poll(cx));
        self.wait = None;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Req) -> Self::Future {
        self.calls.lock().unwrap().push(Instant::now());
        std::future::ready(Ok(status(503)))
    }
}

#[tokio::test(start_paused = true)]
async fn no_retry_reaches_the_service_after_the_deadline_however_slow_its_readiness() {
    // Readiness that lags past the deadline: the deadline ends the wait for it.
    let (slow, calls) = LaggingReadiness::new(Duration::from_secs(2), false);
    let policy = exact(ms(10))
        .max_elapsed(Duration::from_secs(1))
        .build()
        .unwrap();
    let start = Instant::now();

    let response = send(policy.clone(), slow, get()).await.unwrap();

    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(calls.lock().unwrap().len(), 1);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(info(&response).attempts(), 1);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Deadline));

    // Readiness that comes exactly at the deadline: checked again before the call, and not sent.
    let (at_deadline, calls) = LaggingReadiness::new(ms(990), false);
    let response = send(policy, at_deadline, get()).await.unwrap();
    assert_eq!(calls.lock().unwrap().len(), 1);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn a_readiness_error_before_a_retry_is_returned_with_what_the_retries_did() {
    let (failing, calls) = LaggingReadiness::new(Duration::ZERO, true);

    let error = send(exact(ms(10)).build().unwrap(), failing, get())
        .await
        .unwrap_err();

    assert_eq!(calls.lock().unwrap().len(), 1);
    assert_eq!(
        error.inner().unwrap().to_string(),
        "the service has shut down"
    );
    assert_eq!(error.info().attempts(), 1);
    assert_eq!(error.info().stop_reason(), Some(StopReason::NotReady));
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_mid_sleep_gives_its_retry_back_to_the_budget() {
    // A budget of exactly one retry: no percentage, one retry per second over a one-second window.
    let policy_of_one = || {
        RetryPolicy::builder()
            .backoff(Backoff::fixed(ms(100)))
            .max_retries(1)
            .budget(one_retry())
            .build()
            .unwrap()
    };

    // Dropped during its sleep: the retry it had withdrawn was never sent, and is given back.
    let policy = policy_of_one();
    let hits = Hits::default();
    let first = tokio::spawn(send(policy.clone(), server(&hits, always(503)), get()));
    tokio::time::sleep(ms(50)).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    assert_eq!(hits.count(), 1);
    let response = send(policy, server(&hits, always(503)), get())
        .await
        .unwrap();
    assert_eq!(info(&response).attempts(), 2, "the retry was given back");

    // The control: a first call that sends its retry spends the budget.
    let policy = policy_of_one();
    let hits = Hits::default();
    send(policy.clone(), server(&hits, always(503)), get())
        .await
        .unwrap();
    let response = send(policy, server(&hits, always(503)), get())
        .await
        .unwrap();
    assert_eq!(info(&response).attempts(), 1);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Budget));
}

/// A `Replay` that breaks its contract: it says every attempt may be replayed, copies the request for
/// the first attempt, and refuses every copy after that (or every copy, with `copies: 0`).
#[derive(Clone)]
struct BrokenReplay {
    copies: Arc<AtomicUsize>,
}

impl Replay<Req> for BrokenReplay {
    type Kept = ();

    fn clone_request(&self, request: &Req) -> Option<Req> {
        let allowed = self
            .copies
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        allowed.then(|| Request::new(request.body().clone()))
    }

    fn keep(&self, _: &Req) {}

    fn view<'a>(&self, _: Sent<'a, Req, ()>) -> Option<stagger::classify::RequestView<'a>> {
        None
    }
}

impl Judge<Req, Res, Infallible> for BrokenReplay {
    fn judge(
        &self,
        _: &RetryPolicy,
        _: Sent<'_, Req, ()>,
        result: &Result<Res, Infallible>,
    ) -> Attempt {
        let status = match result {
            Ok(response) => response.status(),
            Err(never) => match *never {},
        };
        Attempt::new(stagger::classify::DefaultClassifier::status(status)).replayable(true)
    }

    fn report(response: &mut Res, info: RetryInfo) {
        response.extensions_mut().insert(info);
    }
}

async fn send_broken(
    policy: RetryPolicy,
    copies: usize,
    hits: &Hits,
) -> Result<Res, stagger::Error<Infallible>> {
    let replay = BrokenReplay {
        copies: Arc::new(AtomicUsize::new(copies)),
    };
    stagger::tower::Retry::new(server(hits, always(503)), policy, replay)
        .oneshot(get())
        .await
}

#[tokio::test(start_paused = true)]
async fn a_replay_that_refuses_a_copy_ends_the_call_with_what_it_has_and_never_panics() {
    // It copied once, then refused the retry's copy: the 503 comes back, kept for the deadline.
    let hits = Hits::default();
    let response = send_broken(exact(ms(10)).build().unwrap(), 1, &hits)
        .await
        .unwrap();
    assert_eq!(hits.count(), 1);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        info(&response).stop_reason(),
        Some(StopReason::NotReplayable)
    );

    // Without a deadline nothing was kept: an error that says so.
    let hits = Hits::default();
    let error = send_broken(exact(ms(10)).max_elapsed(None).build().unwrap(), 1, &hits)
        .await
        .unwrap_err();
    assert_eq!(hits.count(), 1);
    assert!(error.inner().is_none() && error.elapsed().is_none());
    assert_eq!(error.info().stop_reason(), Some(StopReason::NotReplayable));
    assert_eq!(
        error.to_string(),
        "gave up after 1 attempt (request cannot be replayed)"
    );

    // It never copied, yet judged the attempt replayable: the adapter knows better, and sends once.
    let hits = Hits::default();
    let response = send_broken(exact(ms(10)).build().unwrap(), 0, &hits)
        .await
        .unwrap();
    assert_eq!(hits.count(), 1);
    assert_eq!(
        info(&response).stop_reason(),
        Some(StopReason::NotReplayable)
    );
}

// ---------------------------------------------------------------------------------------------------
// Logs
// ---------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn each_retry_is_a_debug_event_and_giving_up_while_failing_a_warn_with_the_request_s_fields()
{
    let events = common::capture();
    let hits = Hits::default();
    let request = Request::get("http://api.example:8080/items?page=2")
        .body(String::new())
        .unwrap();

    let response = send(
        exact(ms(100)).max_retries(2).build().unwrap(),
        server(&hits, always(503)),
        request,
    )
    .await
    .unwrap();
    assert_eq!(info(&response).attempts(), 3);

    let events = events.stagger();
    assert_eq!(events.len(), 3, "{events:#?}");
    for (n, retry) in events[..2].iter().enumerate() {
        assert_eq!(retry.level, tracing::Level::DEBUG);
        assert_eq!(retry.message, "retrying");
        assert_eq!(retry.field("http.request.method"), "GET");
        assert_eq!(retry.field("server.address"), "api.example");
        assert_eq!(retry.field("url.path"), "/items");
        assert_eq!(retry.field("attempt"), (n + 1).to_string());
        assert_eq!(
            retry.field("http.request.resend_count"),
            (n + 1).to_string()
        );
        assert_eq!(retry.field("error.type"), "503");
        assert_eq!(retry.field("delay_ms"), ["100", "200"][n]);
        assert_eq!(retry.field("delay.reason"), "backoff");
    }
    let gave_up = &events[2];
    assert_eq!(gave_up.level, tracing::Level::WARN);
    assert_eq!(gave_up.message, "gave up while still failing");
    assert_eq!(gave_up.field("url.path"), "/items");
    assert_eq!(gave_up.field("attempts"), "3");
    assert_eq!(gave_up.field("http.request.resend_count"), "2");
    assert_eq!(gave_up.field("slept_ms"), "300");
    assert_eq!(gave_up.field("stop.reason"), "max_retries");
    assert_eq!(gave_up.field("error.type"), "503");
    // No message repeats the target's name.
    assert!(events.iter().all(|e| !e.message.contains("stagger")));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_first_success_logs_nothing_a_later_one_a_debug_event_and_a_fatal_answer_no_warn() {
    let events = common::capture();
    let policy = exact(ms(10)).build().unwrap();

    send(policy.clone(), server(&Hits::default(), always(200)), get())
        .await
        .unwrap();
    assert!(events.stagger().is_empty(), "{:#?}", events.stagger());

    send(
        policy.clone(),
        server(&Hits::default(), fails_until(2)),
        get(),
    )
    .await
    .unwrap();
    let succeeded = events.stagger().pop().unwrap();
    assert_eq!(succeeded.level, tracing::Level::DEBUG);
    assert_eq!(succeeded.message, "succeeded");
    assert_eq!(succeeded.field("http.request.resend_count"), "1");

    send(policy, server(&Hits::default(), always(404)), get())
        .await
        .unwrap();
    let stopped = events.stagger().pop().unwrap();
    assert_eq!(stopped.level, tracing::Level::DEBUG);
    assert_eq!(stopped.field("stop.reason"), "fatal");
}

/// `error.type`, `delay.reason` and `stop.reason` are stable `snake_case` tokens, which a logfmt or
/// JSON line carries as they are: no spaces, whatever the reason.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_reasons_in_the_events_are_snake_case_tokens() {
    let events = common::capture();

    // A 503 asking for a second, then 503s: retry_after, then backoff, and max_retries.
    let limited = |n, _: &Req| match n {
        1 => Response::builder()
            .status(503)
            .header("retry-after", "1")
            .body(String::new())
            .unwrap(),
        _ => status(503),
    };
    let policy = exact(ms(10)).max_retries(2).build().unwrap();
    send(policy, server(&Hits::default(), limited), get())
        .await
        .unwrap();
    // A POST answered 502, which the server may have acted on: not_idempotent.
    let post = Request::post("http://test.invalid/orders")
        .body(String::new())
        .unwrap();
    let policy = exact(ms(10)).build().unwrap();
    send(policy, server(&Hits::default(), always(502)), post)
        .await
        .unwrap();
    // Refused connections until the next retry would end past the deadline: connect, deadline.
    let policy = exact(ms(40)).max_elapsed(ms(100)).build().unwrap();
    let hits = Hits::default();
    let refused = failing(&hits, io::ErrorKind::ConnectionRefused);
    send(policy, refused, get()).await.unwrap_err();
    // Resets, and the budget's one retry: connection_closed, budget.
    let policy = exact(ms(10)).budget(one_retry()).build().unwrap();
    let reset = failing(&hits, io::ErrorKind::ConnectionReset);
    send(policy, reset, get()).await.unwrap_err();
    // Attempts that time out: timeout.
    let policy = exact(ms(10))
        .attempt_timeout(ms(50))
        .max_retries(1)
        .build()
        .unwrap();
    let hangs = service_fn(|_: Req| std::future::pending::<Result<Res, io::Error>>());
    send(policy, hangs, get()).await.unwrap_err();

    let events = events.stagger();
    let values = |field: &str| {
        let mut values: Vec<&str> = events
            .iter()
            .filter_map(|e| e.fields.get(field).map(String::as_str))
            .collect();
        values.sort_unstable();
        values.dedup();
        values
    };
    assert_eq!(values("delay.reason"), ["backoff", "retry_after"]);
    assert_eq!(
        values("stop.reason"),
        ["budget", "deadline", "max_retries", "not_idempotent"]
    );
    assert_eq!(
        values("error.type"),
        ["502", "503", "connect", "connection_closed", "timeout"]
    );
    let gave_up: Vec<_> = events
        .iter()
        .filter(|e| e.message == "gave up while still failing")
        .map(|e| (e.field("error.type"), e.field("stop.reason")))
        .collect();
    assert_eq!(
        gave_up,
        [
            ("503", "max_retries"),
            ("502", "not_idempotent"),
            ("connect", "deadline"),
            ("connection_closed", "budget"),
            ("timeout", "max_retries"),
        ]
    );
}

// ---------------------------------------------------------------------------------------------------
// reqwest::Client against wiremock
// ---------------------------------------------------------------------------------------------------

#[cfg(feature = "reqwest")]
mod reqwest_client {
    use super::*;

    use bytes::Bytes;
    use http_body_util::StreamBody;
    use hyper::body::Frame;
    use stagger::Reason;
    use wiremock::matchers::{body_string, header, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    /// Real time on loopback: delays of 1, 2, 4 ms.
    fn quick() -> RetryPolicyBuilder {
        exact(ms(1))
    }

    fn client() -> reqwest::Client {
        reqwest::Client::builder().no_proxy().build().unwrap()
    }

    async fn send(
        policy: RetryPolicy,
        client: reqwest::Client,
        request: reqwest::Request,
    ) -> Result<reqwest::Response, stagger::Error<reqwest::Error>> {
        let service = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .service(client);
        // Spawned, because that is how a client is used: the future must be `Send + 'static`.
        tokio::spawn(service.oneshot(request)).await.unwrap()
    }

    fn info(response: &reqwest::Response) -> RetryInfo {
        *response
            .extensions()
            .get::<RetryInfo>()
            .expect("RetryInfo in the final response's extensions")
    }

    /// A port nothing listens on.
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn every_retryable_status_is_retried() {
        let server = MockServer::start().await;
        let codes = [408, 429, 500, 502, 503, 504, 507];
        for code in codes {
            Mock::given(path(format!("/{code}")))
                .respond_with(ResponseTemplate::new(code))
                .expect(3)
                .named(format!("status {code}"))
                .mount(&server)
                .await;
        }
        let client = client();

        for code in codes {
            let request = client
                .get(format!("{}/{code}", server.uri()))
                .build()
                .unwrap();
            let policy = quick().max_retries(2).build().unwrap();
            let response = send(policy, client.clone(), request).await.unwrap();
            assert_eq!(response.status().as_u16(), code);
            assert_eq!(info(&response).attempts(), 3, "{code}");
            assert_eq!(
                info(&response).stop_reason(),
                Some(StopReason::MaxRetries),
                "{code}"
            );
        }
        server.verify().await;
    }

    #[tokio::test]
    async fn fatal_statuses_are_not_retried() {
        let server = MockServer::start().await;
        let codes = [400, 401, 403, 404, 409, 422, 501, 505];
        for code in codes {
            Mock::given(path(format!("/{code}")))
                .respond_with(ResponseTemplate::new(code))
                .expect(1)
                .named(format!("status {code}"))
                .mount(&server)
                .await;
        }
        let client = client();

        for code in codes {
            let request = client
                .get(format!("{}/{code}", server.uri()))
                .build()
                .unwrap();
            let response = send(quick().build().unwrap(), client.clone(), request)
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), code);
            assert_eq!(info(&response).attempts(), 1, "{code}");
            assert_eq!(
                info(&response).stop_reason(),
                Some(StopReason::Fatal),
                "{code}"
            );
        }
        server.verify().await;
    }

    #[tokio::test]
    async fn only_idempotent_requests_are_replayed_after_a_failure_the_server_may_have_acted_on() {
        // (method, status, Idempotency-Key, attempts the server sees)
        let cases = [
            (Method::POST, 500, None, 1),
            (Method::POST, 502, None, 1),
            (Method::PATCH, 504, None, 1),
            (Method::POST, 408, None, 1),
            (Method::POST, 503, None, 3),
            (Method::POST, 429, None, 3),
            (Method::POST, 500, Some("key-1"), 3),
            (Method::PATCH, 502, Some("key-2"), 3),
            (Method::GET, 500, None, 3),
            (Method::PUT, 502, None, 3),
            (Method::DELETE, 504, None, 3),
        ];
        let server = MockServer::start().await;
        for (i, (verb, code, key, attempts)) in cases.iter().enumerate() {
            let mut mock = Mock::given(path(format!("/case/{i}")))
                .and(method(verb.as_str()))
                .and(body_string("payload"));
            if let Some(key) = key {
                // Every replay carries the key.
                mock = mock.and(header("idempotency-key", *key));
            }
            mock.respond_with(ResponseTemplate::new(*code))
                .expect(*attempts)
                .named(format!("{verb} {code} key {key:?}"))
                .mount(&server)
                .await;
        }
        let client = client();

        for (i, (verb, code, key, attempts)) in cases.into_iter().enumerate() {
            let mut request = client
                .request(verb.clone(), format!("{}/case/{i}", server.uri()))
                .body("payload");
            if let Some(key) = key {
                request = request.header("Idempotency-Key", key);
            }
            let policy = quick().max_retries(2).build().unwrap();
            let response = send(policy, client.clone(), request.build().unwrap())
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), code);
            assert_eq!(
                u64::from(info(&response).attempts()),
                attempts,
                "{verb} {code} {key:?}"
            );
            let stop = if attempts == 1 {
                StopReason::NotIdempotent
            } else {
                StopReason::MaxRetries
            };
            assert_eq!(info(&response).stop_reason(), Some(stop));
        }
        server.verify().await;
    }

    #[tokio::test]
    async fn fails_twice_then_succeeds() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(503))
            .up_to_n_times(2)
            .with_priority(1)
            .expect(2)
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
            .with_priority(2)
            .expect(1)
            .mount(&server)
            .await;
        let client = client();
        let request = client.get(server.uri()).build().unwrap();

        let response = send(quick().build().unwrap(), client, request)
            .await
            .unwrap();

        assert_eq!(response.status(), StatusCode::OK);
        let info = info(&response);
        assert_eq!(info.attempts(), 3);
        assert_eq!(info.stop_reason(), Some(StopReason::Success));
        assert_eq!(response.text().await.unwrap(), "ok");
        assert_eq!(server.received_requests().await.unwrap().len(), 3);
        server.verify().await;
    }

    #[tokio::test]
    async fn connect_refused_is_retried_and_the_error_still_answers_is_connect() {
        let (policy, events) = recorded(quick().max_retries(2));
        let client = client();
        let request = client
            .post(format!("http://127.0.0.1:{}/", closed_port()))
            .body("never sent")
            .build()
            .unwrap();

        let error = send(policy, client, request).await.unwrap_err();

        assert!(error.inner().unwrap().is_connect(), "{error:?}");
        assert_eq!(error.info().attempts(), 3);
        assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
        // Refused before the server could act: even a POST is tried three times.
        let events = events.lock().unwrap();
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(|e| e.reason == Reason::Connect));
    }

    #[tokio::test]
    async fn a_client_timeout_is_retried_and_the_error_still_answers_is_timeout() {
        let server = MockServer::start().await;
        // Answered after a minute, which no test waits out. reqwest's timeout is long enough for every
        // attempt to reach the server, which counts them, before it times out: at 50 ms, with every
        // test binary running at once on two cores, the third attempt once timed out before wiremock
        // had received it.
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_delay(ms(60_000)))
            .expect(3)
            .mount(&server)
            .await;
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(ms(1000))
            .build()
            .unwrap();
        let (policy, events) = recorded(quick().max_retries(2));
        let request = client.get(server.uri()).build().unwrap();

        let error = send(policy, client, request).await.unwrap_err();

        assert!(error.inner().unwrap().is_timeout(), "{error:?}");
        assert_eq!(error.info().attempts(), 3);
        assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
        assert!(
            events
                .lock()
                .unwrap()
                .iter()
                .all(|e| e.reason == Reason::Timeout)
        );
        server.verify().await;
    }

    #[tokio::test]
    async fn without_a_replay_buffer_a_streaming_body_is_sent_once_and_its_503_returned_as_received()
     {
        let server = MockServer::start().await;
        Mock::given(method("PUT"))
            .and(body_string("chunk one, chunk two"))
            .respond_with(
                ResponseTemplate::new(503)
                    .insert_header("x-served-by", "replica-3")
                    .set_body_string("busy"),
            )
            .expect(1)
            .mount(&server)
            .await;
        let chunks = ["chunk one, ", "chunk two"]
            .map(|c| Ok::<_, io::Error>(Frame::data(Bytes::from_static(c.as_bytes()))));
        let body = reqwest::Body::wrap(StreamBody::new(futures::stream::iter(chunks)));
        let client = client();
        let request = client.put(server.uri()).body(body).build().unwrap();

        let response = send(quick().replay_buffer(0).build().unwrap(), client, request)
            .await
            .unwrap();

        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()["x-served-by"], "replica-3");
        let info = info(&response);
        assert_eq!(info.attempts(), 1);
        assert_eq!(info.stop_reason(), Some(StopReason::NotReplayable));
        assert_eq!(response.text().await.unwrap(), "busy");
        server.verify().await;
    }
}

// ---------------------------------------------------------------------------------------------------
// hyper-util's legacy client against wiremock
// ---------------------------------------------------------------------------------------------------

#[cfg(feature = "hyper-util")]
mod hyper_util_client {
    use super::*;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;
    use stagger::Reason;
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    fn client() -> Client<HttpConnector, Full<Bytes>> {
        Client::builder(TokioExecutor::new()).build_http()
    }

    fn get(uri: &str) -> Request<Full<Bytes>> {
        Request::get(uri).body(Full::new(Bytes::new())).unwrap()
    }

    #[tokio::test]
    async fn fails_twice_then_succeeds() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(503))
            .up_to_n_times(2)
            .with_priority(1)
            .expect(2)
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
            .with_priority(2)
            .expect(1)
            .mount(&server)
            .await;

        let service = ServiceBuilder::new()
            .layer(RetryLayer::new(exact(ms(1)).build().unwrap()))
            .service(client());
        // Spawned: the future must be `Send + 'static`.
        let response = tokio::spawn(service.oneshot(get(&server.uri())))
            .await
            .unwrap()
            .unwrap();

        assert_eq!(response.status(), StatusCode::OK);
        let info = info(&response);
        assert_eq!(info.attempts(), 3);
        assert_eq!(info.stop_reason(), Some(StopReason::Success));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "ok");
        assert_eq!(server.received_requests().await.unwrap().len(), 3);
        server.verify().await;
    }

    #[tokio::test]
    async fn connect_refused_is_classified_as_connect_and_the_error_still_answers_is_connect() {
        let port = closed_port();
        let (policy, events) = recorded(exact(ms(1)).max_retries(2));

        let error = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .service(client())
            .oneshot(get(&format!("http://127.0.0.1:{port}/")))
            .await
            .unwrap_err();

        assert!(error.inner().unwrap().is_connect(), "{error:?}");
        assert_eq!(error.info().attempts(), 3);
        assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
        let events = events.lock().unwrap();
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(|e| e.reason == Reason::Connect));
    }

    /// A port nothing listens on.
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }
}

#[tokio::test]
async fn zero_delay_retries_spend_the_cooperative_budget_and_then_yield() {
    // On this current-thread runtime the spawned task runs only when the retrying one yields. A service
    // that fails at once, retried without a delay, retries at once while the task has tokio's budget
    // (128 units per poll), and must then let the other task run: it cannot keep the thread to itself.
    let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&other_ran);
    tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let hits = Hits::default();
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::ZERO))
        .max_retries(1000)
        .budget(None)
        .build()
        .unwrap();

    let response = send(
        policy,
        server(&hits, move |_, _| {
            record
                .lock()
                .unwrap()
                .push(other_ran.load(Ordering::SeqCst));
            status(503)
        }),
        get(),
    )
    .await
    .unwrap();

    assert_eq!(hits.count(), 1001);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let seen = seen.lock().unwrap();
    let before = seen.iter().take_while(|&&ran| !ran).count();
    // Zero-delay retries do not wait for the runtime: several go out before the first yield…
    assert!(before > 1, "the other task ran after {before} attempt(s)");
    // …but the budget runs out long before the retries do, and once the other task has run it stays run.
    assert!(
        before <= 129,
        "the other task ran only after {before} attempts"
    );
    assert!(seen[before..].iter().all(|&ran| ran));
}

#[test]
fn a_zero_delay_retry_does_not_go_through_the_timer() {
    // A runtime without a timer: `tokio::time::sleep` would panic in it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let hits = Hits::default();
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::ZERO))
        .max_retries(3)
        .budget(None)
        .build()
        .unwrap();

    let response = runtime
        .block_on(send(policy, server(&hits, |_, _| status(503)), get()))
        .unwrap();

    assert_eq!(hits.count(), 4);
    assert_eq!(info(&response).slept(), Duration::ZERO);
}

// ---------------------------------------------------------------------------------------------------
// Hosts, pushback and the deadline's answer
// ---------------------------------------------------------------------------------------------------

/// The host and path of every request a server saw, and when.
type Arrivals = Arc<Mutex<Vec<(String, Duration)>>>;

/// A server that answers `/limited` with `429` and `Retry-After: secs` the first time, and everything
/// else with `200`, recording what it sees.
fn limited(
    retry_after: &'static str,
) -> (
    impl Service<Request<()>, Response = Response<()>, Error = Infallible, Future: Send> + Clone,
    Arrivals,
) {
    let start = Instant::now();
    let seen = Arrivals::default();
    let record = Arc::clone(&seen);
    let refused = Arc::new(AtomicUsize::new(0));
    let service = service_fn(move |request: Request<()>| {
        let host = request
            .uri()
            .host()
            .or_else(|| request.headers().get("host").and_then(|h| h.to_str().ok()))
            .unwrap_or("-")
            .to_owned();
        record
            .lock()
            .unwrap()
            .push((format!("{host}{}", request.uri().path()), start.elapsed()));
        let first =
            request.uri().path() == "/limited" && refused.fetch_add(1, Ordering::SeqCst) == 0;
        let response = if first {
            Response::builder()
                .status(429)
                .header("retry-after", retry_after)
        } else {
            Response::builder().status(200)
        };
        async move { Ok::<_, Infallible>(response.body(()).unwrap()) }
    });
    (service, seen)
}

fn cooling() -> RetryPolicy {
    RetryPolicy::builder()
        .host_cooldown(true)
        .max_retries(0)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_host_s_cooldown_holds_its_name_in_any_case() {
    let (server, seen) = limited("2");
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(cooling()))
        .service(server);
    let get = |uri: &str| Request::get(uri).body(()).unwrap();
    let refused = client
        .clone()
        .oneshot(get("http://API.Example.test/limited"))
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    let held = client
        .oneshot(get("http://api.example.test/items"))
        .await
        .unwrap();
    assert!(
        info(&held).cooldown() >= Duration::from_secs(2),
        "{:?}",
        info(&held)
    );
    let at = seen.lock().unwrap()[1].1;
    assert!(
        at >= Duration::from_secs(2),
        "the second request went at {at:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_in_origin_form_is_held_by_its_host_header_s_cooldown() {
    // hyper's connection API sends `/items` and a `Host` header.
    let (server, seen) = limited("2");
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(cooling()))
        .service(server);
    let get = |path: &str, host: &str| Request::get(path).header("host", host).body(()).unwrap();
    let refused = client
        .clone()
        .oneshot(get("/limited", "api.test"))
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    // Another host, in origin form too, is not held by it.
    let other = client
        .clone()
        .oneshot(get("/items", "other.test"))
        .await
        .unwrap();
    assert_eq!(info(&other).cooldown(), Duration::ZERO);
    let held = client.oneshot(get("/items", "api.test")).await.unwrap();
    assert!(
        info(&held).cooldown() >= Duration::from_secs(2),
        "{:?}",
        info(&held)
    );
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_of_years_holds_a_host_five_minutes_and_then_a_request_probes_it() {
    let (server, seen) = limited("999999999");
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(cooling()))
        .service(server);
    let get = |path: &str| {
        Request::get(format!("http://api.test{path}"))
            .body(())
            .unwrap()
    };
    let refused = client.clone().oneshot(get("/limited")).await.unwrap();
    assert_eq!(refused.status(), 429);
    // Longer than max_retry_after: not waited for, not sent.
    let error = client.clone().oneshot(get("/items")).await.unwrap_err();
    assert_eq!(
        error.rejected().unwrap().info().stop_reason(),
        Some(StopReason::Cooldown)
    );
    // Five minutes on, the host is probed again, and its answer goes through.
    tokio::time::advance(Duration::from_secs(300)).await;
    let probe = client.oneshot(get("/items")).await.unwrap();
    assert_eq!(probe.status(), 200);
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_deadline_that_leaves_no_room_after_a_timed_out_attempt_is_the_error_s_answer() {
    // 1 s in all, 200 ms per attempt, no budget: the attempts time out until a retry no longer fits.
    let hits = Hits::default();
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(10)))
        .max_elapsed(Duration::from_secs(1))
        .attempt_timeout(ms(200))
        .budget(None)
        .build()
        .unwrap();
    let error = send(policy, hung(&hits), get()).await.unwrap_err();
    let stop = error.info().stop_reason();
    assert_eq!(stop, Some(StopReason::Deadline));
    assert!(error.is_deadline(), "{error}");
    assert!(!error.is_attempt_timeout(), "{error}");
}

/// Answers attempt 1 with `status` and `Retry-After: 2` (and `extra` headers), attempt 2 with `200`.
fn once_with_retry_after(
    status: u16,
    extra: &'static [(&'static str, &'static str)],
) -> impl Fn(usize, &Req) -> Res + Clone + Send + 'static {
    move |n, _| {
        if n > 1 {
            return Response::new("ok".to_owned());
        }
        let mut response = Response::builder()
            .status(status)
            .header("retry-after", "2");
        for (name, value) in extra {
            response = response.header(*name, *value);
        }
        response.body(String::new()).unwrap()
    }
}

#[tokio::test(start_paused = true)]
async fn retry_after_floors_the_retry_of_a_503_or_429_not_of_a_502() {
    let policy = || RetryPolicy::builder().seed(3).build().unwrap();
    for (status, floored) in [(503, true), (429, true), (502, false), (500, false)] {
        let hits = Hits::default();
        let response = send(
            policy(),
            server(&hits, once_with_retry_after(status, &[])),
            get(),
        )
        .await
        .unwrap();
        assert_eq!(
            (response.status().as_u16(), hits.count()),
            (200, 2),
            "{status}"
        );
        let slept = info(&response).slept();
        if floored {
            assert!(slept >= Duration::from_secs(2), "{status}: {slept:?}");
        } else {
            assert!(slept <= ms(100), "{status}: the backoff's, {slept:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_403_that_says_a_rate_limit_is_spent_is_retried_after_it_and_another_is_not() {
    let policy = || RetryPolicy::builder().seed(3).build().unwrap();
    // GitHub's secondary limit: 403 with Retry-After.
    let hits = Hits::default();
    let response = send(
        policy(),
        server(&hits, once_with_retry_after(403, &[])),
        get(),
    )
    .await
    .unwrap();
    assert_eq!(hits.count(), 2);
    assert!(info(&response).slept() >= Duration::from_secs(2));
    // Its primary limit: 403 with X-RateLimit-Remaining: 0 and a reset (here beside Retry-After).
    let hits = Hits::default();
    let primary = &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "2")];
    let response = send(
        policy(),
        server(&hits, once_with_retry_after(403, primary)),
        get(),
    )
    .await
    .unwrap();
    assert_eq!((response.status().as_u16(), hits.count()), (200, 2));
    // A 403 that says nothing of a limit is a refusal of permission: fatal, and handed back.
    let hits = Hits::default();
    let response = send(policy(), server(&hits, always(403)), get())
        .await
        .unwrap();
    assert_eq!((response.status().as_u16(), hits.count()), (403, 1));
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Fatal));
}
