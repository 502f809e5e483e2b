//! Statistics, with fixed seeds so they are reproducible: each jitter's mean, full jitter's uniformity,
//! and every request of one seeded policy drawing delays of its own.

use stagger::adapter::{Attempt, Decision};

use super::*;

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
