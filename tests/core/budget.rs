//! The retry budget as a value: its shape, its errors, and one account shared by several policies (or
//! two retry layers); a timeout's retry at four times the cost; and the documented defaults.

#[cfg(feature = "tower")]
use std::sync::Arc;
#[cfg(feature = "tower")]
use std::sync::atomic::{AtomicU32, Ordering};

use stagger::adapter::{Attempt, Decision};
use stagger::{ConfigError, StopReason};

use super::*;

/// Decides one 503 and, if a retry is allowed, commits it as sent.
fn spend_a_retry(policy: &RetryPolicy) -> Decision {
    let mut state = policy.start();
    let decision = state.decide(Attempt::new(unavailable()), None);
    if let Decision::Retry(_) = decision {
        // A retry decided and never sent is given back when the state is dropped.
        state.begin_retry(None).unwrap();
    }
    decision
}

#[test]
fn every_budget_config_error_names_its_field_its_value_and_the_valid_range() {
    let budget = RetryBudget::builder;
    let cases = [
        (
            budget().ratio(-1.0),
            ConfigError::BudgetRatio(-1.0),
            &["budget ratio", "got -1", "0.0..=1.0", "20 % is 0.2"][..],
        ),
        (
            budget().ratio(f64::NAN),
            ConfigError::BudgetRatio(f64::NAN),
            &["budget ratio", "got NaN", "0.0..=1.0"],
        ),
        (
            // The percentage where a ratio belongs: refused, and said so.
            budget().ratio(20.0),
            ConfigError::BudgetRatio(20.0),
            &[
                "budget ratio must be within 0.0..=1.0, got 20: it is retries per request, not a \
                 percentage, so 20 % is 0.2, and over 1.0 retries would more than double the load",
                "budget(None)",
            ],
        ),
        (
            budget().ratio(1.000_01),
            ConfigError::BudgetRatio(1.000_01),
            &["got 1.00001", "0.0..=1.0", "more than double"],
        ),
        (
            budget().ratio(f64::INFINITY),
            ConfigError::BudgetRatio(f64::INFINITY),
            &["got inf", "0.0..=1.0"],
        ),
        (
            budget().window(Duration::from_millis(500)),
            ConfigError::BudgetWindow(Duration::from_millis(500)),
            &[
                "budget window must be within 1s..=60s, got 500ms",
                "whole retries per window",
                "round to none",
            ],
        ),
        (
            budget().window(Duration::ZERO),
            ConfigError::BudgetWindow(Duration::ZERO),
            &["budget window", "got 0ns", "1s..=60s", "round to none"],
        ),
        (
            budget().window(Duration::from_secs(61)),
            ConfigError::BudgetWindow(Duration::from_secs(61)),
            &["budget window", "got 61s", "1s..=60s", "over 60s"],
        ),
    ];
    for (builder, want, words) in cases {
        let err = builder.build().unwrap_err();
        // NaN != NaN, so compare the variant by its message too.
        assert_eq!(err.to_string(), want.to_string());
        assert_eq!(std::mem::discriminant(&err), std::mem::discriminant(&want));
        for word in words {
            assert!(err.to_string().contains(word), "{err} lacks {word:?}");
        }
    }
}

#[test]
fn a_whole_percentage_written_as_a_ratio_is_refused() {
    // Every whole percentage from 2 up would be a budget 100 times too generous; 1 % would read as
    // ratio 1.0, a retry per request, the largest budget there is.
    for percent in 2..=100 {
        assert_eq!(
            RetryBudget::builder()
                .ratio(f64::from(percent))
                .build()
                .unwrap_err(),
            ConfigError::BudgetRatio(f64::from(percent))
        );
    }
}

#[test]
fn a_budget_keeps_its_bounds_exactly_as_given_and_the_default_is_documented() {
    let edges = [
        (0.0, 0, Duration::from_secs(1)),
        (1.0, u32::MAX, Duration::from_secs(60)),
        (0.123_45, 7, Duration::from_millis(1_500)),
    ];
    for (ratio, min_per_second, window) in edges {
        let budget = RetryBudget::builder()
            .ratio(ratio)
            .min_per_second(min_per_second)
            .window(window)
            .build()
            .unwrap();
        // Never clamped nor rounded where it can be read back.
        assert_eq!(
            (budget.ratio(), budget.min_per_second(), budget.window()),
            (ratio, min_per_second, window)
        );
    }
    let default = RetryBudget::default();
    assert_eq!(
        (default.ratio(), default.min_per_second(), default.window()),
        (
            RetryBudget::DEFAULT_RATIO,
            RetryBudget::DEFAULT_MIN_PER_SECOND,
            RetryBudget::DEFAULT_WINDOW
        )
    );
    assert_eq!(
        (default.ratio(), default.min_per_second(), default.window()),
        (0.2, 10, Duration::from_secs(10))
    );
    let built = RetryBudget::builder().build().unwrap();
    assert_eq!(format!("{built:?}"), format!("{default:?}"));
}

#[test]
fn a_policy_shows_its_budgets_shape_and_gives_it_out() {
    let policy = RetryPolicy::builder()
        .budget(
            RetryBudget::builder()
                .ratio(0.05)
                .min_per_second(3)
                .window(Duration::from_secs(30))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let debug = format!("{policy:?}");
    assert!(
        debug.contains(
            "budget: Some(RetryBudget { ratio: 0.05, min_per_second: 3, window: 30s, per_host: false, own_starting_credit: false })"
        ),
        "{debug}"
    );
    assert_eq!(policy.budget().map(RetryBudget::ratio), Some(0.05));
    let default = format!("{:?}", RetryPolicy::default());
    assert!(
        default
            .contains("budget: Some(RetryBudget { ratio: 0.2, min_per_second: 10, window: 10s, per_host: false, own_starting_credit: false })"),
        "{default}"
    );
    let none = RetryPolicy::builder().budget(None).build().unwrap();
    assert!(format!("{none:?}").contains("budget: None"));
    assert!(none.budget().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_shared_budget_limits_two_differently_configured_policies_together() {
    let shared = budget_of_one();
    let reads = base()
        .backoff(Backoff::fixed(10 * MS))
        .max_retries(5)
        .budget(shared.clone())
        .build()
        .unwrap();
    let writes = base()
        .backoff(Backoff::exponential(Duration::from_secs(1)).with_jitter(Jitter::Full))
        .max_retries(1)
        .budget(shared)
        .build()
        .unwrap();
    assert_eq!(spend_a_retry(&reads), Decision::Retry(10 * MS));
    // The other policy draws on the same account: the one retry is gone.
    assert_eq!(spend_a_retry(&writes), Decision::Stop(StopReason::Budget));
    assert_eq!(spend_a_retry(&reads), Decision::Stop(StopReason::Budget));
    // Once the window has passed, the floor is back, for whichever policy asks first.
    tokio::time::advance(Duration::from_millis(1100)).await;
    assert!(matches!(spend_a_retry(&writes), Decision::Retry(_)));
    assert_eq!(spend_a_retry(&reads), Decision::Stop(StopReason::Budget));
}

#[tokio::test(start_paused = true)]
async fn two_policies_with_budgets_of_their_own_each_retry() {
    let reads = base()
        .backoff(Backoff::fixed(10 * MS))
        .max_retries(5)
        .budget(budget_of_one())
        .build()
        .unwrap();
    let writes = base()
        .backoff(Backoff::fixed(20 * MS))
        .max_retries(1)
        .budget(budget_of_one())
        .build()
        .unwrap();
    assert_eq!(spend_a_retry(&reads), Decision::Retry(10 * MS));
    assert_eq!(spend_a_retry(&writes), Decision::Retry(20 * MS));
    assert_eq!(spend_a_retry(&reads), Decision::Stop(StopReason::Budget));
    assert_eq!(spend_a_retry(&writes), Decision::Stop(StopReason::Budget));
}

#[tokio::test(start_paused = true)]
async fn a_budget_taken_from_a_policy_is_shared_with_the_next_one() {
    let first = base().budget(budget_of_one()).build().unwrap();
    let second = base()
        .max_retries(1)
        .budget(first.budget().unwrap().clone())
        .build()
        .unwrap();
    assert!(matches!(spend_a_retry(&second), Decision::Retry(_)));
    assert_eq!(spend_a_retry(&first), Decision::Stop(StopReason::Budget));
}

#[tokio::test(start_paused = true)]
async fn default_policies_each_open_a_default_budget_of_their_own() {
    let spent = RetryPolicy::builder().seed(1).build().unwrap();
    let other = RetryPolicy::builder().seed(2).build().unwrap();
    let mut granted = 0;
    while let Decision::Retry(_) = spend_a_retry(&spent) {
        granted += 1;
    }
    // At once, one second of the floor, 10 retries, plus 0.2 per request: n = 10 + 0.2 × n.
    assert_eq!(granted, 12);
    // Over the window, as it is earned, trying every 100 ms until refused: the 100 retries the floor
    // holds over 10 s, plus 0.2 per request, those granted and the 99 refused before the last try:
    // n = 100 + 0.2 × (n + 99).
    for _ in 1..100 {
        tokio::time::advance(Duration::from_millis(100)).await;
        while let Decision::Retry(_) = spend_a_retry(&spent) {
            granted += 1;
        }
    }
    assert_eq!(granted, 149);
    assert!(matches!(spend_a_retry(&other), Decision::Retry(_)));
    assert!(matches!(
        spend_a_retry(&RetryPolicy::default()),
        Decision::Retry(_)
    ));
}

#[cfg(feature = "tower")]
#[tokio::test(start_paused = true)]
async fn a_shared_budget_limits_two_retry_layers_together() {
    use stagger::RetryLayer;
    use std::convert::Infallible;
    use tower::{Layer, ServiceExt, service_fn};

    /// A server that answers every request 503, and counts them.
    fn unavailable_server(
        hits: &Arc<AtomicU32>,
    ) -> impl tower::Service<
        http::Request<()>,
        Response = http::Response<()>,
        Error = Infallible,
        Future = impl Send,
    > + Clone {
        let hits = Arc::clone(hits);
        service_fn(move |_: http::Request<()>| {
            hits.fetch_add(1, Ordering::SeqCst);
            async {
                Ok::<_, Infallible>(
                    http::Response::builder()
                        .status(StatusCode::SERVICE_UNAVAILABLE)
                        .body(())
                        .unwrap(),
                )
            }
        })
    }
    fn info(response: &http::Response<()>) -> stagger::RetryInfo {
        stagger::RetryInfo::of(response.extensions())
    }

    let shared = budget_of_one();
    let get_policy = base()
        .backoff(Backoff::fixed(10 * MS))
        .max_retries(3)
        .budget(shared.clone())
        .build()
        .unwrap();
    let post_policy = base()
        .backoff(Backoff::fixed(Duration::from_secs(1)))
        .max_retries(1)
        .budget(shared)
        .build()
        .unwrap();
    let (get_hits, post_hits) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
    let gets = RetryLayer::new(get_policy).layer(unavailable_server(&get_hits));
    let posts = RetryLayer::new(post_policy).layer(unavailable_server(&post_hits));

    let response = gets.clone().oneshot(http::Request::new(())).await.unwrap();
    assert_eq!(info(&response).attempts(), 2);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Budget));
    // The layer of the other policy finds the budget spent, and sends its request once.
    let response = posts.clone().oneshot(http::Request::new(())).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(info(&response).attempts(), 1);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Budget));
    assert_eq!(
        (
            get_hits.load(Ordering::SeqCst),
            post_hits.load(Ordering::SeqCst)
        ),
        (2, 1)
    );

    // The control: the same two layers, each with a budget of its own, both retry.
    let gets = RetryLayer::new(base().budget(budget_of_one()).build().unwrap())
        .layer(unavailable_server(&get_hits));
    let posts = RetryLayer::new(
        base()
            .max_retries(1)
            .budget(budget_of_one())
            .build()
            .unwrap(),
    )
    .layer(unavailable_server(&post_hits));
    let get = gets.oneshot(http::Request::new(())).await.unwrap();
    let post = posts.oneshot(http::Request::new(())).await.unwrap();
    assert_eq!((info(&get).attempts(), info(&post).attempts()), (2, 2));
}

#[tokio::test(start_paused = true)]
async fn a_timeout_s_retry_costs_four_retries_of_the_requests_deposits() {
    // No floor (so no starting credit): 20 requests at ratio 0.2 deposit four retries' worth.
    let budget = RetryBudget::builder()
        .ratio(0.2)
        .min_per_second(0)
        .build()
        .unwrap();
    let policy = RetryPolicy::builder()
        .budget(budget)
        .max_retries(u32::MAX)
        .build()
        .unwrap();
    let deposit = |n| {
        for _ in 0..n {
            let _ = policy.start().decide(Attempt::new(Outcome::Success), None);
        }
    };
    let timeout = Attempt::new(Outcome::RetryIfIdempotent(Reason::Timeout));
    deposit(20);
    let mut state = policy.start(); // the 21st request: 4.2 retries' worth
    assert!(matches!(state.decide(timeout, None), Decision::Retry(_)));
    state.begin_retry(None).unwrap();
    assert_eq!(
        state.decide(timeout, None),
        Decision::Stop(StopReason::Budget)
    );
    // The same deposits pay for four retries of any other failure.
    deposit(20);
    let mut state = policy.start();
    for _ in 0..4 {
        assert!(matches!(
            state.decide(Attempt::new(unavailable()), None),
            Decision::Retry(_)
        ));
        state.begin_retry(None).unwrap();
    }
    assert_eq!(
        state.decide(Attempt::new(unavailable()), None),
        Decision::Stop(StopReason::Budget)
    );
}

#[test]
fn the_documented_defaults_are_what_a_policy_gets() {
    // The values the README and the docs state, written out rather than read from the constants.
    let policy = RetryPolicy::default();
    assert_eq!(policy.max_retries(), 10);
    assert_eq!(policy.max_elapsed(), Some(Duration::from_secs(30)));
    assert_eq!(policy.attempt_timeout(), Some(Duration::from_secs(10)));
    assert_eq!(policy.replay_buffer(), 64 * 1024);
    assert_eq!(policy.hedge_after(), None);
    assert_eq!(policy.adaptive_throttle(), None);
    assert!(!policy.host_cooldown());
    let backoff = policy.backoff();
    assert_eq!(backoff.initial(), Duration::from_millis(100));
    assert_eq!(backoff.ceiling(1), Duration::from_millis(100));
    assert_eq!(backoff.ceiling(2), Duration::from_millis(200));
    assert_eq!(backoff.ceiling(20), Duration::from_secs(20));
    let throttle = policy.throttle_backoff();
    assert_eq!(throttle.initial(), Duration::from_millis(500));
    assert_eq!(throttle.ceiling(20), Duration::from_secs(20));
    let budget = policy.budget().unwrap();
    assert_eq!(
        (
            budget.ratio(),
            budget.min_per_second(),
            budget.window(),
            budget.per_host()
        ),
        (0.2, 10, Duration::from_secs(10), false)
    );
    // max_retry_after: a delay of 30 s is waited for, 30 s and a nanosecond is not.
    let asked = |delay| {
        let attempt = Attempt::new(unavailable()).retry_after(Some(delay));
        RetryPolicy::builder()
            .max_elapsed(Duration::from_secs(120))
            .build()
            .unwrap()
            .start()
            .decide(attempt, None)
    };
    assert!(matches!(asked(Duration::from_secs(30)), Decision::Retry(_)));
    assert_eq!(
        asked(Duration::from_secs(30) + Duration::from_nanos(1)),
        Decision::Stop(StopReason::RetryAfterTooLong)
    );
}
