//! Configuration: every error names its field and value, the default policy's limits and how to remove
//! them, and a budget switched off, reshaped or left at its default.

use stagger::adapter::{Attempt, Decision};
use stagger::{ConfigError, StopReason};

use super::*;

#[test]
fn every_config_error_names_its_field_and_value() {
    let cases: Vec<(stagger::RetryPolicyBuilder, ConfigError, &str)> = vec![
        (
            RetryPolicy::builder().backoff(Backoff::exponential(MS).with_base(0.5)),
            ConfigError::InvalidBase(0.5),
            "base",
        ),
        (
            RetryPolicy::builder().backoff(Backoff::exponential(MS).with_base(f64::NAN)),
            ConfigError::InvalidBase(f64::NAN),
            "NaN",
        ),
        (
            RetryPolicy::builder().backoff(Backoff::exponential(MS).with_base(f64::INFINITY)),
            ConfigError::InvalidBase(f64::INFINITY),
            "inf",
        ),
        (
            RetryPolicy::builder().backoff(
                Backoff::exponential(Duration::from_secs(2)).with_max_delay(Duration::from_secs(1)),
            ),
            ConfigError::MaxDelayBelowInitial {
                max_delay: Duration::from_secs(1),
                initial: Duration::from_secs(2),
            },
            "max_delay (1s)",
        ),
        // The budget's errors come from `RetryBudget::builder().build()`: see
        // `budget::every_budget_config_error_names_its_field_its_value_and_the_valid_range`.
        (
            RetryPolicy::builder().max_elapsed(Duration::ZERO),
            ConfigError::MaxElapsed(Duration::ZERO),
            "max_elapsed must be greater than zero, got 0ns (use max_elapsed(None)",
        ),
        (
            RetryPolicy::builder().attempt_timeout(Duration::ZERO),
            ConfigError::AttemptTimeout(Duration::ZERO),
            "attempt_timeout must be greater than zero, got 0ns (use attempt_timeout(None)",
        ),
    ];
    for (builder, want, words) in cases {
        let err = builder.build().unwrap_err();
        // NaN != NaN, so compare the variant by its message too.
        assert_eq!(err.to_string(), want.to_string());
        assert!(err.to_string().contains(words), "{err} lacks {words:?}");
        assert_eq!(std::mem::discriminant(&err), std::mem::discriminant(&want));
    }
}

#[test]
fn the_default_policy_bounds_a_call_and_each_attempt_and_both_can_be_removed() {
    let policy = RetryPolicy::default();
    assert_eq!(policy.max_elapsed(), Some(Duration::from_secs(30)));
    assert_eq!(policy.attempt_timeout(), Some(Duration::from_secs(10)));
    assert_eq!(policy.max_elapsed(), Some(RetryPolicy::DEFAULT_MAX_ELAPSED));
    assert_eq!(
        policy.attempt_timeout(),
        Some(RetryPolicy::DEFAULT_ATTEMPT_TIMEOUT)
    );
    let unbounded = RetryPolicy::builder()
        .max_elapsed(None)
        .attempt_timeout(None)
        .build()
        .unwrap();
    assert_eq!(unbounded.max_elapsed(), None);
    assert_eq!(unbounded.attempt_timeout(), None);
    // Limits beyond what an instant can hold are no limits, not a panic.
    let huge = RetryPolicy::builder()
        .max_elapsed(Duration::MAX)
        .attempt_timeout(Duration::MAX)
        .build()
        .unwrap();
    let mut state = huge.start();
    assert!(matches!(
        state.decide(Attempt::new(unavailable()), None),
        Decision::Retry(_)
    ));
}

/// One call that meets `outcome` at every attempt, each retry sent: how many retries it made, and why
/// it stopped.
fn one_failing_call(policy: &RetryPolicy, outcome: Outcome) -> (u32, StopReason) {
    let mut state = policy.start();
    let mut retries = 0;
    loop {
        match state.decide(Attempt::new(outcome), None) {
            Decision::Retry(_) => {
                state.begin_retry(None).unwrap();
                retries += 1;
            }
            Decision::Stop(reason) => return (retries, reason),
        }
    }
}

/// `n` requests answered at once: each deposits in the budget and retries nothing.
fn succeed(policy: &RetryPolicy, n: u32) {
    for _ in 0..n {
        assert_eq!(
            policy.start().decide(Attempt::new(Outcome::Success), None),
            Decision::Stop(StopReason::Success)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_budget_switched_off_reshaped_or_left_at_its_default_does_what_its_shape_says() {
    let timeout = Outcome::RetryIfIdempotent(Reason::Timeout);
    let with = |budget: RetryBudget| base().max_retries(1000).budget(budget).build().unwrap();

    // No ratio and no floor: never a retry, whatever the requests, and no starting credit for a
    // timeout either.
    let none = with(
        RetryBudget::builder()
            .ratio(0.0)
            .min_per_second(0)
            .window(Duration::from_secs(1))
            .build()
            .unwrap(),
    );
    succeed(&none, 1000);
    assert_eq!(
        one_failing_call(&none, unavailable()),
        (0, StopReason::Budget)
    );
    assert_eq!(one_failing_call(&none, timeout), (0, StopReason::Budget));

    // A retry per request and no floor, over a minute: a failing call retries once on its own
    // deposit, and once more for each request of the last minute.
    let one_each = with(
        RetryBudget::builder()
            .ratio(1.0)
            .min_per_second(0)
            .window(Duration::from_secs(60))
            .build()
            .unwrap(),
    );
    for _ in 0..10 {
        assert_eq!(
            one_failing_call(&one_each, unavailable()),
            (1, StopReason::Budget)
        );
    }
    succeed(&one_each, 20);
    tokio::time::advance(Duration::from_secs(30)).await;
    // Half a minute on, the window still holds those requests' 20 retries and the call's own, but
    // the budget pays them out at the rate they are earned: at once, a burst spends what the last
    // ticks' requests paid in, here none but the call's, so the least a burst may spend (one
    // timeout's cost, 4 retries).
    assert_eq!(
        one_failing_call(&one_each, unavailable()),
        (4, StopReason::Budget)
    );
    // Requests sent now pay for retries at once: the next failing call retries once for each of
    // them and once on its own deposit.
    succeed(&one_each, 20);
    assert_eq!(
        one_failing_call(&one_each, unavailable()),
        (21, StopReason::Budget)
    );
    // Past the minute, what was banked has expired: the call has its own deposit at most (the clock
    // is read on one deposit in 64, so it may land in a slot that has just expired).
    succeed(&one_each, 20);
    tokio::time::advance(Duration::from_secs(70)).await;
    let (retries, stop) = one_failing_call(&one_each, unavailable());
    assert!(retries <= 1, "{retries} retries from deposits a minute old");
    assert_eq!(stop, StopReason::Budget);

    // No budget: every retry max_retries allows, of any failure.
    let unlimited = base().max_retries(1000).budget(None).build().unwrap();
    assert!(unlimited.budget().is_none());
    for outcome in [unavailable(), timeout] {
        assert_eq!(
            one_failing_call(&unlimited, outcome),
            (1000, StopReason::MaxRetries)
        );
    }

    // The default: the default shape (whose limits
    // `budget::default_policies_each_open_a_default_budget_of_their_own` counts).
    let default = RetryPolicy::default();
    let budget = default.budget().expect("a budget by default");
    assert_eq!(
        (budget.ratio(), budget.min_per_second(), budget.window()),
        (0.2, 10, Duration::from_secs(10))
    );
}
