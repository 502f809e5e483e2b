//! What a server asks for: `Retry-After` as a floor (strict or spread), one too long handed back at once,
//! and which statuses it floors (503, 429, a 403 that says a rate limit is spent).

use http::StatusCode;
use stagger::{RetryAfterMode, StopReason};

use super::*;

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
