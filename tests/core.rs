//! The I/O-free engine: delay arithmetic, jitter bounds and statistics, configuration errors, and the
//! state machine's decisions.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use http::StatusCode;
use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use stagger::adapter::{Attempt, Decision};
use stagger::{
    Backoff, ConfigError, Jitter, Outcome, Reason, RetryAfterMode, RetryBudget, RetryPolicy,
    StopReason,
};

const MS: Duration = Duration::from_millis(1);
const JITTERS: [Jitter; 4] = [
    Jitter::None,
    Jitter::Full,
    Jitter::Equal,
    Jitter::Decorrelated,
];

fn unavailable() -> Outcome {
    Outcome::RetrySafe(Reason::Status(StatusCode::SERVICE_UNAVAILABLE))
}

fn internal_error() -> Outcome {
    Outcome::RetryIfIdempotent(Reason::Status(StatusCode::INTERNAL_SERVER_ERROR))
}

fn base() -> stagger::RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::exponential(100 * MS).with_jitter(Jitter::None))
        .budget(None)
        .seed(7)
}

// ---------------------------------------------------------------------------------------------------
// Ceilings and delays

#[test]
fn exponential_ceilings_table() {
    let table: &[(Backoff, &[u64])] = &[
        (
            Backoff::exponential(100 * MS),
            &[100, 200, 400, 800, 1600, 3200, 6400, 12800, 20000, 20000],
        ),
        (
            Backoff::exponential(100 * MS).with_max_delay(Duration::from_secs(1)),
            &[100, 200, 400, 800, 1000, 1000, 1000, 1000, 1000, 1000],
        ),
        (
            Backoff::exponential(10 * MS).with_base(3.0),
            &[10, 30, 90, 270, 810, 2430, 7290, 20000, 20000, 20000],
        ),
        (Backoff::fixed(250 * MS), &[250; 10]),
        (Backoff::exponential(Duration::ZERO), &[0; 10]),
    ];
    for (backoff, want) in table {
        let got: Vec<u64> = (1..=10)
            .map(|n| backoff.ceiling(n).as_millis() as u64)
            .collect();
        assert_eq!(&got, want, "{backoff:?}");
    }
}

#[test]
fn no_jitter_waits_exactly_the_ceiling() {
    let backoff = Backoff::exponential(100 * MS).with_jitter(Jitter::None);
    let got: Vec<_> = backoff.delays_seeded(0).take(5).collect();
    assert_eq!(got, [100, 200, 400, 800, 1600].map(|m| m * MS));
}

#[test]
fn decorrelated_starts_from_initial_and_never_exceeds_three_times_the_previous() {
    let backoff = Backoff::exponential(10 * MS)
        .with_max_delay(Duration::from_secs(60))
        .with_jitter(Jitter::Decorrelated);
    let mut previous = 10 * MS;
    for delay in backoff.delays_seeded(11).take(1000) {
        assert!(
            delay >= 10 * MS && delay <= previous * 3,
            "{delay:?} after {previous:?}"
        );
        previous = delay;
    }
}

#[test]
fn decorrelated_mean_near_the_cap_follows_the_documented_formula() {
    // d(n) = min(max_delay, U[initial, 3·d(n−1)]), d(0) = initial, with a cap ten times `initial` that
    // most draws of d(8) exceed. The formula has no scale, so d(8) / max_delay has the same mean for
    // 100 ms and 1 s as for the caps of the u128 paths (3·d(n−1) beyond a u64 of nanoseconds, and
    // max_delay beyond it). Capping 3·d(n−1) before the draw, U[initial, min(max_delay, 3·d(n−1))], as
    // the draw once did, gave a mean d(8) / max_delay of 0.490 on all three paths against the
    // formula's 0.728 (0.729 measured now).
    const SEQUENCES: u64 = 20_000;
    const SIMULATED: u32 = 200_000;

    // The formula on its own: one generator for every sequence, seeded apart from stagger's, in f64.
    let simulate = |high: fn(f64) -> f64| {
        let mut rng = SmallRng::seed_from_u64(0x00DE_C0DE_D5EE_D000);
        (0..SIMULATED)
            .map(|_| {
                let mut d = 0.1;
                for _ in 0..8 {
                    d = f64::min(1.0, rng.random_range(0.1..high(d)));
                }
                d
            })
            .sum::<f64>()
            / f64::from(SIMULATED)
    };
    let documented = simulate(|d| 3.0 * d);
    let within = |mean: f64| (mean - documented).abs() <= 0.03 * documented;
    // The tolerance tells the formula from the cap before the draw.
    let capped_first = simulate(|d| f64::min(1.0, 3.0 * d));
    assert!(
        !within(capped_first),
        "capped first {capped_first:.4}, documented {documented:.4}"
    );

    for max_delay in [
        Duration::from_secs(1),
        Duration::from_nanos(u64::MAX),
        Duration::MAX,
    ] {
        let backoff = Backoff::exponential(max_delay / 10)
            .with_max_delay(max_delay)
            .with_jitter(Jitter::Decorrelated);
        let measured = (0..SEQUENCES)
            .map(|seed| {
                let d8 = backoff.delays_seeded(seed).nth(7).unwrap();
                d8.as_secs_f64() / max_delay.as_secs_f64()
            })
            .sum::<f64>()
            / SEQUENCES as f64;
        assert!(
            within(measured),
            "max_delay {max_delay:?}: mean d(8) / max_delay {measured:.4}, documented {documented:.4}"
        );
    }
}

fn any_backoff() -> impl Strategy<Value = Backoff> {
    let duration = prop_oneof![
        (0u64..10_000_000_000).prop_map(Duration::from_nanos),
        any::<u64>().prop_map(Duration::from_secs),
        Just(Duration::MAX),
    ];
    let base = prop_oneof![1.0f64..10.0, 1.0f64..f64::MAX, Just(f64::MAX), Just(1.0)];
    let jitter = prop::sample::select(JITTERS.to_vec());
    (duration.clone(), duration, base, jitter).prop_map(|(a, b, base, jitter)| {
        let (initial, max_delay) = if a <= b { (a, b) } else { (b, a) };
        Backoff::exponential(initial)
            .with_max_delay(max_delay)
            .with_base(base)
            .with_jitter(jitter)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_cap_is_a_true_maximum_for_every_jitter(backoff in any_backoff(), seed in any::<u64>()) {
        prop_assert!(backoff.validate().is_ok());
        for (n, delay) in (1..).zip(backoff.delays_seeded(seed).take(64)) {
            prop_assert!(delay <= backoff.max_delay());
            let ceiling = backoff.ceiling(n);
            match backoff.jitter() {
                Jitter::None => prop_assert_eq!(delay, ceiling),
                Jitter::Full => prop_assert!(delay <= ceiling),
                Jitter::Equal => prop_assert!(delay >= ceiling / 2 && delay <= ceiling),
                Jitter::Decorrelated => prop_assert!(delay >= backoff.initial()),
                _ => unreachable!(),
            }
        }
    }

    #[test]
    fn ceilings_saturate_and_never_shrink(backoff in any_backoff(), n in any::<u32>()) {
        let ceiling = backoff.ceiling(n);
        prop_assert!(ceiling <= backoff.max_delay());
        prop_assert!(backoff.ceiling(n.saturating_add(1)) >= ceiling);
        prop_assert!(ceiling >= backoff.initial().min(backoff.max_delay()));
    }

    #[test]
    fn huge_retry_counts_answer_max_delay(initial_ms in 1u64..1_000_000, base in 1.5f64..1e6) {
        let backoff = Backoff::exponential(Duration::from_millis(initial_ms))
            .with_max_delay(Duration::from_secs(1_000_000))
            .with_base(base);
        prop_assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(1_000_000));
    }

    #[test]
    fn setters_never_panic_whatever_the_values(
        initial in any::<u64>(), max in any::<u64>(), base in any::<f64>(), n in any::<u32>(), seed in any::<u64>(),
    ) {
        for jitter in JITTERS {
            let backoff = Backoff::exponential(Duration::from_nanos(initial))
                .with_max_delay(Duration::from_nanos(max))
                .with_base(base)
                .with_jitter(jitter);
            let _ = backoff.validate();
            prop_assert!(backoff.ceiling(n) <= Duration::from_nanos(max));
            for delay in backoff.delays_seeded(seed).take(8) {
                prop_assert!(delay <= Duration::from_nanos(max));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// Statistics, with fixed seeds so they are reproducible

fn draws(jitter: Jitter, ceiling: Duration, count: usize) -> Vec<f64> {
    Backoff::fixed(ceiling)
        .with_jitter(jitter)
        .delays_seeded(0x5eed)
        .take(count)
        .map(|d| d.as_secs_f64() / ceiling.as_secs_f64())
        .collect()
}

#[test]
fn full_jitter_mean_is_half_the_ceiling_within_two_percent() {
    let xs = draws(Jitter::Full, Duration::from_secs(1), 100_000);
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    assert!((mean - 0.5).abs() < 0.5 * 0.02, "mean {mean}");
}

#[test]
fn equal_jitter_mean_is_three_quarters_of_the_ceiling_within_two_percent() {
    let xs = draws(Jitter::Equal, Duration::from_secs(1), 100_000);
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    assert!((mean - 0.75).abs() < 0.75 * 0.02, "mean {mean}");
    assert!(xs.iter().all(|&x| (0.5..=1.0).contains(&x)));
}

#[test]
fn full_jitter_is_uniform_by_a_chi_square_test() {
    const BINS: usize = 20;
    let xs = draws(Jitter::Full, Duration::from_millis(1000), 100_000);
    let mut counts = [0usize; BINS];
    for x in &xs {
        counts[((x * BINS as f64) as usize).min(BINS - 1)] += 1;
    }
    let expected = xs.len() as f64 / BINS as f64;
    let chi2: f64 = counts
        .iter()
        .map(|&c| (c as f64 - expected).powi(2) / expected)
        .sum();
    // The 0.999 quantile of chi-square with 19 degrees of freedom is 43.82.
    assert!(chi2 < 43.82, "chi2 {chi2}, counts {counts:?}");
}

#[test]
fn two_requests_through_one_seeded_policy_draw_different_delays() {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::exponential(100 * MS))
        .max_retries(8)
        .budget(None)
        .seed(1)
        .build()
        .unwrap();
    let run = |policy: &RetryPolicy| -> Vec<Duration> {
        let mut state = policy.start();
        std::iter::from_fn(|| match state.decide(Attempt::new(unavailable()), None) {
            Decision::Retry(d) => Some(d),
            Decision::Stop(_) => None,
        })
        .collect()
    };
    let first = run(&policy);
    let second = run(&policy);
    assert_eq!(first.len(), 8);
    assert_ne!(first, second);
    // The same seed reproduces the same per-request streams.
    let again = RetryPolicy::builder()
        .backoff(Backoff::exponential(100 * MS))
        .max_retries(8)
        .budget(None)
        .seed(1)
        .build()
        .unwrap();
    assert_eq!(run(&again), first);
    assert_eq!(run(&again), second);
}

// ---------------------------------------------------------------------------------------------------
// Configuration errors

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
        // `every_budget_config_error_names_its_field_its_value_and_the_valid_range`.
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
    // `default_policies_each_open_a_default_budget_of_their_own` counts).
    let default = RetryPolicy::default();
    let budget = default.budget().expect("a budget by default");
    assert_eq!(
        (budget.ratio(), budget.min_per_second(), budget.window()),
        (0.2, 10, Duration::from_secs(10))
    );
}

// ---------------------------------------------------------------------------------------------------
// The state machine: every reason to stop

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
    let mut granted = 0;
    for _ in 0..1000 {
        let mut state = policy.start();
        if let Decision::Retry(_) = state.decide(Attempt::new(unavailable()), None) {
            // Sent: a retry decided but never sent is given back to the budget.
            state.begin_retry(None).unwrap();
            granted += 1;
        }
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

// ---------------------------------------------------------------------------------------------------
// The retry budget as a value: its shape, its errors, and one account shared by several policies

/// Exactly one retry: no ratio, a floor of one retry a second over a one-second window.
fn budget_of_one() -> RetryBudget {
    RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(1)
        .window(Duration::from_secs(1))
        .build()
        .unwrap()
}

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
    // 10 retries/s over 10 s in reserve, plus 0.2 per request: n = 100 + 0.2 × n.
    assert_eq!(granted, 125);
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
        *response.extensions().get::<stagger::RetryInfo>().unwrap()
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
