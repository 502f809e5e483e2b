//! Delays: the backoff's schedule without jitter, seeded jitter under its ceilings, and what one 503
//! costs with the defaults.

use http::StatusCode;
use stagger::StopReason;

use super::*;

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
                // Six 503s in a row would find the host down, and hold the last retries for a probe.
                .breaker(None)
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
