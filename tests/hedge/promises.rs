//! What the hedging docs promise beyond the race itself: hedges obey the deadline, the attempt
//! timeout, the host cooldown and adaptive throttling, and a call has at most two attempts in
//! flight.

use stagger::{Backoff, StopReason};
use tower::Layer;

use super::scripted::{answer, backend, get, ms};
use super::*;

#[tokio::test(start_paused = true)]
async fn no_hedge_is_sent_at_the_deadline() {
    // The hedge is due when the deadline passes: it is not sent, and the call ends there.
    let (inner, calls) = backend(|_, _| answer(1_000, 200));
    let policy = hedging().max_elapsed(ms(100)).build().unwrap();
    let start = tokio::time::Instant::now();
    let error = RetryLayer::new(policy)
        .layer(inner)
        .oneshot(get("/"))
        .await
        .unwrap_err();
    assert!(error.is_deadline(), "{error}");
    assert_eq!(start.elapsed(), ms(100));
    let info = error.info();
    assert_eq!((info.attempts(), info.hedges()), (1, 0));
    assert_eq!(calls.to("/"), 1);
}

#[tokio::test(start_paused = true)]
async fn the_deadline_cuts_both_attempts_of_a_race() {
    let (inner, calls) = backend(|_, _| answer(1_000, 200));
    let policy = hedging().max_elapsed(ms(250)).build().unwrap();
    let start = tokio::time::Instant::now();
    let error = RetryLayer::new(policy)
        .layer(inner)
        .oneshot(get("/"))
        .await
        .unwrap_err();
    assert!(error.is_deadline(), "{error}");
    assert_eq!(start.elapsed(), ms(250));
    let info = error.info();
    assert_eq!((info.attempts(), info.hedges()), (2, 1));
    assert_eq!(calls.to("/"), 2);
}

#[tokio::test(start_paused = true)]
async fn the_attempt_timeout_runs_from_the_first_attempt_of_a_race() {
    // Both attempts of the first race hang; the timeout, 250 ms from the first attempt, cuts
    // them both (the hedge after 150 ms of its own), and the retry answers at once.
    let (inner, calls) = backend(|n, _| match n {
        0 | 1 => answer(10_000, 200),
        _ => answer(0, 200),
    });
    let policy = hedging()
        .attempt_timeout(ms(250))
        .backoff(Backoff::fixed(ms(10)))
        .max_retries(2)
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let response = RetryLayer::new(policy)
        .layer(inner)
        .oneshot(get("/"))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), ms(260));
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (3, 1));
    assert_eq!(calls.to("/"), 3);
}

#[tokio::test(start_paused = true)]
async fn no_hedge_is_sent_to_a_host_that_is_pausing() {
    // `/slow` takes 300 ms. At 10 ms, `/limited`, on the same host, is answered 429 with
    // `Retry-After: 5`, longer than max_retry_after: that call ends, and the host is held.
    let (inner, calls) = backend(|_, path| match path {
        "/slow" => answer(300, 200),
        _ => answer(0, 429).header("retry-after", "5"),
    });
    let policy = hedging()
        .host_cooldown(true)
        .max_retry_after(Duration::from_secs(1))
        .build()
        .unwrap();
    let service = RetryLayer::new(policy).layer(inner);
    let slow = tokio::spawn(service.clone().oneshot(get("/slow")));
    tokio::time::sleep(ms(10)).await;
    let limited = service.clone().oneshot(get("/limited")).await.unwrap();
    let info = limited.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!(info.stop_reason(), Some(StopReason::RetryAfterTooLong));

    let response = slow.await.unwrap().unwrap();
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (1, 0));
    assert_eq!(calls.to("/slow"), 1);
}

#[tokio::test(start_paused = true)]
async fn no_hedge_is_sent_when_adaptive_throttling_rejects_it() {
    // `/slow` takes 300 ms. Meanwhile 50 calls to `/down`, on the same host, are all refused:
    // by the time the hedge is due the throttle rejects nearly everything.
    let (inner, calls) = backend(|_, path| match path {
        "/slow" => answer(300, 200),
        _ => answer(0, 503),
    });
    let policy = hedging()
        .adaptive_throttle(2.0)
        .backoff(Backoff::fixed(ms(1)))
        .max_retries(1)
        .budget(None)
        .seed(1)
        .build()
        .unwrap();
    let service = RetryLayer::new(policy).layer(inner);
    let slow = tokio::spawn(service.clone().oneshot(get("/slow")));
    tokio::time::sleep(ms(10)).await;
    for _ in 0..50 {
        let _ = service.clone().oneshot(get("/down")).await;
    }

    let response = slow.await.unwrap().unwrap();
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (1, 0));
    assert_eq!(calls.to("/slow"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_has_at_most_two_attempts_in_flight() {
    // Both attempts run for a second: the first is hedged once, at 100 ms, and never again.
    let (inner, calls) = backend(|_, _| answer(1_000, 200));
    let policy = hedging().max_retries(5).build().unwrap();
    let start = tokio::time::Instant::now();
    let response = RetryLayer::new(policy)
        .layer(inner.clone())
        .oneshot(get("/"))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), ms(1_000));
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (2, 1));
    assert_eq!((calls.to("/"), calls.most_in_flight()), (2, 2));
}

#[tokio::test(start_paused = true)]
async fn an_attempt_left_alone_after_a_failure_set_aside_is_not_hedged_again() {
    // The first attempt fails at 150 ms and is set aside; its hedge, sent at 100 ms, runs for a
    // second, alone, unhedged.
    let (inner, calls) = backend(|n, _| match n {
        0 => answer(150, 503),
        _ => answer(1_000, 200),
    });
    let policy = hedging().max_retries(5).build().unwrap();
    let start = tokio::time::Instant::now();
    let response = RetryLayer::new(policy)
        .layer(inner)
        .oneshot(get("/"))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(start.elapsed(), ms(1_100));
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (2, 1));
    assert_eq!((calls.to("/"), calls.most_in_flight()), (2, 2));
}
