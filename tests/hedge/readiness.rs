//! A hedge goes through a clone of the inner service, which may not be ready to take it.

use stagger::{Backoff, StopReason};
use tower::ServiceBuilder;

use super::scripted::{answer, backend, get, ms};
use super::*;

/// One retry per request deposited, no floor: a withdrawal that is never given back shows as a
/// retry refused later.
fn one_retry_per_request() -> RetryBudget {
    RetryBudget::builder()
        .ratio(1.0)
        .min_per_second(0)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_hedge_the_inner_service_cannot_take_is_neither_counted_nor_paid() {
    // `/slow` answers after 300 ms; `/flaky` answers 503 twice, then 200.
    let (inner, calls) = backend(|n, path| match (path, n) {
        ("/slow", _) => answer(300, 200),
        (_, 0 | 1) => answer(0, 503),
        _ => answer(0, 200),
    });
    let policy = hedging()
        .backoff(Backoff::fixed(ms(10)))
        .max_retries(3)
        .budget(one_retry_per_request())
        .build()
        .unwrap();
    // One request at a time below the layer: while the slow attempt runs, the hedge's clone of
    // the service is not ready.
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .concurrency_limit(1)
        .service(inner);

    let start = tokio::time::Instant::now();
    let response = service.clone().oneshot(get("/slow")).await.unwrap();
    assert_eq!(start.elapsed(), ms(300));
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!(
        (info.attempts(), info.hedges()),
        (1, 0),
        "no hedge was sent"
    );
    assert_eq!(calls.to("/slow"), 1);

    // The budget holds the deposits of both requests, two retries: the hedge withdrew nothing.
    let response = service.clone().oneshot(get("/flaky")).await.unwrap();
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!(
        (
            response.status().as_u16(),
            info.attempts(),
            info.stop_reason()
        ),
        (200, 3, Some(StopReason::Success))
    );
}

#[tokio::test(start_paused = true)]
async fn a_hedge_waits_for_the_inner_service_while_the_race_lasts() {
    // Two requests at a time below the layer. `/busy` holds the second place until 150 ms, so
    // the hedge of `/slow`, due at 100 ms, goes at 150 ms, when the service can take it.
    let (inner, calls) = backend(|n, path| match (path, n) {
        ("/busy", _) => answer(150, 200),
        ("/slow", 0) => answer(1_000, 200),
        _ => answer(20, 200),
    });
    let policy = hedging().max_retries(1).build().unwrap();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .concurrency_limit(2)
        .service(inner);

    let start = tokio::time::Instant::now();
    let slow = tokio::spawn(service.clone().oneshot(get("/slow")));
    tokio::task::yield_now().await;
    let busy = service.clone().oneshot(get("/busy")).await.unwrap();
    assert_eq!(busy.status(), 200);
    let response = slow.await.unwrap().unwrap();
    assert_eq!(
        start.elapsed(),
        ms(170),
        "the hedge's answer, 20 ms after it went"
    );
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (2, 1));
    assert_eq!(calls.to("/slow"), 2);
}
