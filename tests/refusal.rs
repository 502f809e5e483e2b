//! A caller's loop does not tighten during an outage (`backoff_on_refusal`): a call a guard refuses
//! (the budget, adaptive throttling, the breaker failing fast) still waits the delay its retry would
//! have waited before it ends, so that a loop of calls against a failing backend sends no more than
//! its backoff allows. Through `RetryLayer`, `RetryMiddleware` and `stagger::retry`, against servers
//! in process on tokio's paused clock.
//!
//! And without it, a loop of calls refused at once does not keep its thread: each refusal spends a
//! unit of the task's cooperative budget, as a request would have in its socket, so that the tasks
//! beside the loop run (the one whose probe would find the host back among them); through
//! `RetryMiddleware`, under the README's features, in `tests/reqwest_middleware/refused.rs`.
#![cfg(all(feature = "tower", feature = "reqwest-middleware"))]

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use http::{Request, Response};
use reqwest_middleware::ClientBuilder;
use stagger::{
    Backoff, Breaker, Jitter, Outcome, Overrides, Reason, RetryBudget, RetryInfo, RetryLayer,
    RetryMiddleware, RetryPolicy, RetryPolicyBuilder, RetryReport, StopReason,
};
use tokio::time::Instant;
use tower::{Layer, ServiceExt, service_fn};

mod common;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A loop's calls: the delays are exactly 100 ms, so that what a loop sends is counted exactly.
fn looping() -> RetryPolicyBuilder {
    RetryPolicy::builder().backoff(Backoff::fixed(ms(100)).with_jitter(Jitter::None))
}

/// 100 calls in a loop, through the tower layer, to a host that refuses every connection and that
/// the breaker found down, failing fast: how long the loop took, and how many attempts reached the
/// host during it.
async fn fail_fast_loop(policy: &RetryPolicy) -> (Duration, u32) {
    let hits = Arc::new(AtomicU32::new(0));
    let refusing = {
        let hits = Arc::clone(&hits);
        service_fn(move |_: Request<String>| {
            hits.fetch_add(1, Ordering::SeqCst);
            async { Err::<Response<String>, _>(io::Error::from(io::ErrorKind::ConnectionRefused)) }
        })
    };
    let call = || {
        RetryLayer::new(policy.clone())
            .layer(refusing.clone())
            .oneshot(
                Request::get("http://api.test/")
                    .body(String::new())
                    .unwrap(),
            )
    };
    // Found down by a call's five refused attempts.
    let first = call().await.unwrap_err();
    assert_eq!(first.info().stop_reason(), Some(StopReason::HostDown));
    let before = hits.load(Ordering::SeqCst);
    let start = Instant::now();
    for _ in 0..100 {
        let _ = call().await;
    }
    (start.elapsed(), hits.load(Ordering::SeqCst) - before)
}

#[tokio::test(start_paused = true)]
async fn a_loop_of_calls_to_a_host_failing_fast_turns_at_the_backoff_s_pace_with_backoff_on_refusal()
 {
    let policy = looping()
        .breaker(Breaker::fail_fast())
        .budget(None)
        .build()
        .unwrap();
    let (took, hits) = fail_fast_loop(&policy).await;
    // Without it, the loop's 100 calls fail at once, all in the same instant.
    assert_eq!(took, Duration::ZERO);
    assert!(hits <= 1, "{hits}");

    let policy = looping()
        .breaker(Breaker::fail_fast())
        .budget(None)
        .backoff_on_refusal(true)
        .build()
        .unwrap();
    let (took, hits) = fail_fast_loop(&policy).await;
    // With it, each refused call waits its first backoff delay, 100 ms: the loop takes 10 s, and
    // what reaches the host meanwhile is the breaker's probes (100 ms doubling to 1 s, each drawn
    // from its upper half: at most 4 in the first 750 ms, then one per 500 ms), each one a call of
    // the loop.
    assert!(took >= ms(100) * 80, "{took:?}");
    assert!(took <= ms(100) * 100, "{took:?}");
    assert!(hits <= 4 + 19, "{hits} attempts reached the host");
}

/// A loop of calls through `RetryMiddleware` for 10 s of the paused clock, against a backend that
/// answers `503`, under a budget of one retry a second and no breaker: how many attempts reached it,
/// and how the last call ended. `overrides` are every call's.
async fn budget_loop(policy: RetryPolicy, overrides: Option<Overrides>) -> (u32, RetryInfo) {
    let hits = Arc::new(AtomicU32::new(0));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(policy))
        .with(common::Answering {
            status: 503,
            hits: Arc::clone(&hits),
        })
        .build();
    let start = Instant::now();
    let mut last = None;
    let mut calls = 0;
    while start.elapsed() < Duration::from_secs(10) && calls < 10_000 {
        let report = RetryReport::new();
        let mut request = client
            .get("http://api.test/")
            .with_extension(report.clone());
        if let Some(overrides) = overrides {
            request = request.with_extension(overrides);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 503, "the last answer, intact");
        last = report.get();
        calls += 1;
    }
    (hits.load(Ordering::SeqCst), last.expect("a call"))
}

fn one_a_second() -> RetryBudget {
    RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(1)
        .window(Duration::from_secs(1))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_loop_of_calls_whose_retries_the_budget_refuses_waits_their_delays_with_backoff_on_refusal()
 {
    let policy = || looping().breaker(None).budget(one_a_second());
    // Without it: the budget refuses the retries, each call ends at once with its 503, and the loop
    // sends as fast as it turns (stopped here at 10 000 calls, in no time at all).
    let (hits, last) = budget_loop(policy().build().unwrap(), None).await;
    assert!(hits >= 10_000, "{hits}");
    assert_eq!(last.stop_reason(), Some(StopReason::Budget));

    // With it, a refused call waits the 100 ms its retry would have: 10 s of the loop send one
    // attempt per 100 ms, and the retry a second the budget allows.
    let (hits, last) = budget_loop(policy().backoff_on_refusal(true).build().unwrap(), None).await;
    assert!(hits <= 100 + 10 + 2, "{hits}");
    assert!(hits >= 90, "{hits}");
    assert_eq!(last.stop_reason(), Some(StopReason::Budget));

    // One request's own: the policy's off, the request's on.
    let on = Overrides::builder()
        .backoff_on_refusal(true)
        .build()
        .unwrap();
    let (hits, _) = budget_loop(policy().build().unwrap(), Some(on)).await;
    assert!(hits <= 100 + 10 + 2, "{hits}");
}

#[tokio::test(start_paused = true)]
async fn stagger_retry_refused_by_the_budget_waits_the_retry_s_delay_before_returning_the_error() {
    let policy = looping()
        .budget(one_a_second())
        .backoff_on_refusal(true)
        .build()
        .unwrap();
    let refused = |_: &Result<(), io::Error>| Outcome::RetrySafe(Reason::Connect);
    let down = || async { Err::<(), _>(io::Error::from(io::ErrorKind::ConnectionRefused)) };
    let start = Instant::now();
    let error = stagger::retry(&policy, down, refused).await.unwrap_err();
    // One retry (the budget's second), then the refused one's 100 ms, waited: 200 ms in all.
    assert_eq!(error.info().retries(), 1);
    assert_eq!(error.info().stop_reason(), Some(StopReason::Budget));
    assert_eq!(
        error.inner().map(io::Error::kind),
        Some(io::ErrorKind::ConnectionRefused),
        "the error keeps its kind"
    );
    assert_eq!(start.elapsed(), ms(200));
}

#[tokio::test]
async fn a_loop_of_calls_refused_at_once_through_the_tower_layer_lets_the_tasks_beside_it_run() {
    // The defaults (a host found down holds its requests 10 s, then refuses them at once), with the
    // host marked down by hand, which refuses them at once from the start.
    let policy = RetryPolicy::builder().build().unwrap();
    assert!(policy.mark_down("api.test"));
    let hits = Arc::new(AtomicU32::new(0));
    let never = {
        let hits = Arc::clone(&hits);
        service_fn(move |_: Request<String>| {
            hits.fetch_add(1, Ordering::SeqCst);
            async { Ok::<_, io::Error>(Response::new(String::new())) }
        })
    };
    let service = RetryLayer::new(policy.clone()).layer(never);
    let calls = common::refused_before_a_neighbour_runs(|| {
        let request = Request::get("http://api.test/").body(String::new());
        let call = service.clone().oneshot(request.unwrap());
        async move {
            let error = call.await.unwrap_err();
            error.info().stop_reason() == Some(StopReason::HostDown) && error.info().attempts() == 0
        }
    })
    .await;
    assert!(calls <= common::YIELDS_WITHIN, "{calls}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was sent");
}
