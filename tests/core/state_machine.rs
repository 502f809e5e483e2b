//! The state machine: every reason to stop (`max_retries`, success, a fatal answer, the deadline, the
//! budget, a `Retry-After` too long, a request not idempotent or not copyable), `Retry-After` as a
//! floor, the retry hook, and a retry given back when it is not sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use stagger::adapter::{Attempt, Decision};
use stagger::{RetryAfterMode, StopReason};

use super::*;

#[tokio::test(start_paused = true)]
async fn stops_after_max_retries() {
    let policy = base().max_retries(3).build().unwrap();
    let mut state = policy.start();
    let mut delays = vec![];
    let stop = loop {
        assert_eq!(state.may_retry(), delays.len() < 3);
        match state.decide(Attempt::new(unavailable()), None) {
            Decision::Retry(d) => delays.push(d),
            Decision::Stop(reason) => break reason,
        }
    };
    assert_eq!(stop, StopReason::MaxRetries);
    assert_eq!(delays, [100, 200, 400].map(|m| m * MS));
    let info = state.info();
    assert_eq!(
        (info.attempts(), info.retries(), info.slept()),
        (4, 3, 700 * MS)
    );
    assert_eq!(info.stop_reason(), Some(StopReason::MaxRetries));
}

#[tokio::test(start_paused = true)]
async fn success_and_fatal_stop_at_once() {
    let policy = base().build().unwrap();
    let mut state = policy.start();
    assert_eq!(
        state.decide(Attempt::new(Outcome::Success), None),
        Decision::Stop(StopReason::Success)
    );
    let mut state = policy.start();
    assert_eq!(
        state.decide(Attempt::new(Outcome::Fatal), None),
        Decision::Stop(StopReason::Fatal)
    );
    assert_eq!(state.info().attempts(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_sleep_would_end_past_the_deadline_is_not_taken() {
    let policy = base()
        .max_retries(10)
        .max_elapsed(Duration::from_millis(1000))
        .build()
        .unwrap();
    let mut state = policy.start();
    // Sleeps 100 + 200 + 400 = 700 ms; the next, 800 ms, would end at 1500 ms.
    for want in [100, 200, 400] {
        assert_eq!(
            state.decide(Attempt::new(unavailable()), None),
            Decision::Retry(want * MS)
        );
        tokio::time::advance(want * MS).await;
    }
    assert_eq!(
        state.decide(Attempt::new(unavailable()), None),
        Decision::Stop(StopReason::Deadline)
    );
}

#[tokio::test(start_paused = true)]
async fn attempts_that_run_past_the_deadline_leave_no_retry() {
    let policy = base()
        .max_retries(10)
        .max_elapsed(Duration::from_secs(1))
        .build()
        .unwrap();
    let mut state = policy.start();
    assert!(state.may_retry());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(!state.may_retry());
    assert_eq!(
        state.decide(Attempt::new(unavailable()), None),
        Decision::Stop(StopReason::Deadline)
    );
}

#[tokio::test(start_paused = true)]
async fn the_budget_is_shared_by_every_clone_of_a_policy() {
    // No percentage, a floor of 1 retry/s over a 1 s window: one retry in reserve, for all clones.
    let policy = base()
        .budget(budget_of_one())
        .max_retries(5)
        .build()
        .unwrap();
    let clone = policy.clone();
    let mut a = policy.start();
    let mut b = clone.start();
    assert!(matches!(
        a.decide(Attempt::new(unavailable()), None),
        Decision::Retry(_)
    ));
    assert_eq!(
        b.decide(Attempt::new(unavailable()), None),
        Decision::Stop(StopReason::Budget)
    );
    assert_eq!(
        a.decide(Attempt::new(unavailable()), None),
        Decision::Stop(StopReason::Budget)
    );
}

#[tokio::test(start_paused = true)]
async fn the_default_budget_allows_a_fifth_of_the_requests_beyond_its_floor() {
    let policy = RetryPolicy::builder()
        .max_retries(1)
        .seed(3)
        .build()
        .unwrap();
    // 1 000 failing requests over the window, 10 every 100 ms: the budget pays its allowance out at
    // the rate it is earned, so the requests come as the window fills.
    let mut granted = 0;
    for _ in 0..100 {
        for _ in 0..10 {
            let mut state = policy.start();
            if let Decision::Retry(_) = state.decide(Attempt::new(unavailable()), None) {
                // Sent: a retry decided but never sent is given back to the budget.
                state.begin_retry(None).unwrap();
                granted += 1;
            }
        }
        tokio::time::advance(Duration::from_millis(100)).await;
    }
    // 10 retries/s over a 10 s window in reserve, plus 20 % of 1000 requests.
    assert_eq!(granted, 100 + 200);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_over_the_cap_stops() {
    let policy = base()
        .max_retry_after(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut state = policy.start();
    let attempt = Attempt::new(unavailable()).retry_after(Some(Duration::from_secs(31)));
    assert_eq!(
        state.decide(attempt, None),
        Decision::Stop(StopReason::RetryAfterTooLong)
    );
    // Ignored, it does not stop anything.
    let policy = policy_with_mode(RetryAfterMode::Ignore);
    let attempt = Attempt::new(unavailable()).retry_after(Some(Duration::from_secs(3600)));
    assert_eq!(
        policy.start().decide(attempt, None),
        Decision::Retry(100 * MS)
    );
}

fn policy_with_mode(mode: RetryAfterMode) -> RetryPolicy {
    base().retry_after(mode).build().unwrap()
}

#[tokio::test(start_paused = true)]
async fn retry_after_is_a_floor_in_every_mode_that_honours_it() {
    let floor = Duration::from_secs(2);
    let strict = policy_with_mode(RetryAfterMode::Strict);
    let attempt = Attempt::new(unavailable()).retry_after(Some(floor));
    assert_eq!(strict.start().decide(attempt, None), Decision::Retry(floor));
    // A floor below the backoff delay: the backoff wins.
    let short = Attempt::new(unavailable()).retry_after(Some(10 * MS));
    assert_eq!(
        strict.start().decide(short, None),
        Decision::Retry(100 * MS)
    );

    let spread = base().seed(9).build().unwrap();
    let mut seen = vec![];
    for _ in 0..1000 {
        let Decision::Retry(d) = spread.start().decide(attempt, None) else {
            panic!("no retry")
        };
        assert!(d >= floor && d <= floor * 2, "{d:?}");
        seen.push(d);
    }
    // A thousand clients told "2 s" do not come back in the same millisecond: spread over two seconds,
    // about one every two milliseconds, and never more than a handful in one.
    let mut per_ms = std::collections::HashMap::<u128, u32>::new();
    for d in &seen {
        *per_ms.entry(d.as_millis()).or_default() += 1;
    }
    let busiest = per_ms.values().max().copied().unwrap_or(0);
    assert!(busiest <= 8, "{busiest} clients in one millisecond");
}

#[tokio::test(start_paused = true)]
async fn strict_never_waits_past_max_retry_after_even_when_the_backoff_is_longer() {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_secs(60)))
        .retry_after(RetryAfterMode::Strict)
        .max_retry_after(Duration::from_secs(5))
        .max_elapsed(None)
        .budget(None)
        .build()
        .unwrap();
    let attempt = Attempt::new(unavailable()).retry_after(Some(Duration::from_secs(2)));
    assert_eq!(
        policy.start().decide(attempt, None),
        Decision::Retry(Duration::from_secs(5))
    );
    // Without a Retry-After, the backoff is the backoff.
    assert_eq!(
        policy.start().decide(Attempt::new(unavailable()), None),
        Decision::Retry(Duration::from_secs(60))
    );
}

#[tokio::test(start_paused = true)]
async fn spread_never_waits_past_max_retry_after_nor_the_deadline() {
    let policy = base()
        .max_retry_after(Duration::from_secs(3))
        .build()
        .unwrap();
    let attempt = Attempt::new(unavailable()).retry_after(Some(Duration::from_millis(2500)));
    for _ in 0..200 {
        let Decision::Retry(d) = policy.start().decide(attempt, None) else {
            panic!("no retry")
        };
        assert!(
            d >= Duration::from_millis(2500) && d <= Duration::from_secs(3),
            "{d:?}"
        );
    }
    let policy = base().max_elapsed(Duration::from_secs(2)).build().unwrap();
    let attempt = Attempt::new(unavailable()).retry_after(Some(Duration::from_millis(1900)));
    for _ in 0..200 {
        let Decision::Retry(d) = policy.start().decide(attempt, None) else {
            panic!("no retry")
        };
        assert!(
            d >= Duration::from_millis(1900) && d <= Duration::from_secs(2),
            "{d:?}"
        );
    }
    let late = Attempt::new(unavailable()).retry_after(Some(Duration::from_millis(2100)));
    assert_eq!(
        policy.start().decide(late, None),
        Decision::Stop(StopReason::Deadline)
    );
}

#[tokio::test(start_paused = true)]
async fn non_idempotent_requests_are_replayed_only_where_the_server_did_not_act() {
    let policy = base().build().unwrap();
    let post = |outcome| Attempt::new(outcome).idempotent(false);
    assert_eq!(
        policy.start().decide(post(internal_error()), None),
        Decision::Stop(StopReason::NotIdempotent)
    );
    assert_eq!(
        policy
            .start()
            .decide(post(Outcome::RetryIfIdempotent(Reason::Timeout)), None),
        Decision::Stop(StopReason::NotIdempotent)
    );
    assert!(matches!(
        policy.start().decide(post(unavailable()), None),
        Decision::Retry(_)
    ));
    assert!(matches!(
        policy
            .start()
            .decide(post(Outcome::RetrySafe(Reason::Connect)), None),
        Decision::Retry(_)
    ));
    let lax = base().idempotency_check(false).build().unwrap();
    assert!(matches!(
        lax.start().decide(post(internal_error()), None),
        Decision::Retry(_)
    ));
}

#[tokio::test(start_paused = true)]
async fn a_request_that_cannot_be_copied_is_not_retried() {
    let policy = base().build().unwrap();
    let attempt = Attempt::new(unavailable()).replayable(false);
    assert_eq!(
        policy.start().decide(attempt, None),
        Decision::Stop(StopReason::NotReplayable)
    );
}

#[tokio::test(start_paused = true)]
async fn the_hook_sees_every_retry() {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = calls.clone();
    let policy = base()
        .max_retries(2)
        .on_retry(move |event| {
            let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
            assert_eq!(event.attempt, n);
            assert_eq!(event.delay, 100 * MS * 2u32.pow(n - 1));
            assert_eq!(
                event.reason,
                Reason::Status(StatusCode::SERVICE_UNAVAILABLE)
            );
        })
        .build()
        .unwrap();
    let mut state = policy.start();
    while let Decision::Retry(_) = state.decide(Attempt::new(unavailable()), None) {}
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn begin_retry_refuses_a_retry_once_the_deadline_has_passed_and_gives_its_budget_back() {
    // One retry in the budget: no percentage, one per second over a one-second window.
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(100 * MS))
        .max_elapsed(Duration::from_secs(1))
        .budget(budget_of_one())
        .build()
        .unwrap();
    let mut late = policy.start();
    assert_eq!(
        late.decide(Attempt::new(unavailable()), None),
        Decision::Retry(100 * MS)
    );
    // The sleep overran: the deadline has passed by the time the retry would be sent.
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(late.begin_retry(None), Err(StopReason::Deadline));
    assert_eq!(late.info().stop_reason(), Some(StopReason::Deadline));
    // The withdrawal came back: another request may retry.
    let mut next = policy.start();
    assert_eq!(
        next.decide(Attempt::new(unavailable()), None),
        Decision::Retry(100 * MS)
    );
    assert_eq!(next.begin_retry(None), Ok(()));
    // And that one was sent, so the budget is spent.
    assert_eq!(
        policy.start().decide(Attempt::new(unavailable()), None),
        Decision::Stop(StopReason::Budget)
    );
}

#[tokio::test(start_paused = true)]
async fn a_state_dropped_between_a_retry_and_its_sending_gives_the_withdrawal_back() {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(100 * MS))
        .budget(budget_of_one())
        .build()
        .unwrap();
    for _ in 0..5 {
        let mut dropped = policy.start();
        assert!(matches!(
            dropped.decide(Attempt::new(unavailable()), None),
            Decision::Retry(_)
        ));
        // A clone does not carry the pending withdrawal: it is given back once, not twice.
        drop(dropped.clone());
    }
    // Five requests decided a retry and dropped it; the one retry is still there.
    let mut state = policy.start();
    assert!(matches!(
        state.decide(Attempt::new(unavailable()), None),
        Decision::Retry(_)
    ));
    state.begin_retry(None).unwrap();
    assert_eq!(
        policy.start().decide(Attempt::new(unavailable()), None),
        Decision::Stop(StopReason::Budget)
    );
}
