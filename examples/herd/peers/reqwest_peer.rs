//! reqwest-retry 0.9's delays, computed by its own crate.

use std::cell::RefCell;
use std::time::{Duration, SystemTime};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::{Jitter, RetryDecision, RetryPolicy};

/// reqwest-retry 0.9's retries as its docs set them up, `RetryTransientMiddleware::new_with_policy(
/// ExponentialBackoff::builder().build_with_max_retries(3))`: 1 s × 2ⁿ under a 30 min cap, full
/// jitter, three retries, `Retry-After` not read (retry-policies 0.5.2,
/// src/policies/exponential_backoff.rs:131-139 for the builder's defaults). The delays are
/// `ExponentialBackoff::should_retry`'s.
///
/// The crate draws its jitter from `rand::rng()`, a thread-local generator seeded by the OS that no
/// caller can seed, so its own draws change from run to run. By default the delays here are the crate's
/// unjittered delays (`should_retry` of the same policy with `Jitter::None`) scaled by a uniform draw
/// from `[0, 1)` of a seeded generator: the arithmetic of its `Jitter::Full` (`interval.mul_f64(U[0,
/// 1))`, retry-policies 0.5.2, src/retry_policy.rs:48-52), reproducible. With `--peer-rng` the delays
/// are the crate's own, jitter included.
pub(crate) struct ReqwestRetry {
    policy: ExponentialBackoff,
    jitter: PeerJitter,
}

/// Where the jitter of reqwest-retry's delays comes from.
enum PeerJitter {
    /// A seeded generator, applied to the crate's unjittered delay.
    Seeded(RefCell<SmallRng>),
    /// The crate's own `rand::rng()`.
    Crate,
}

impl ReqwestRetry {
    /// The crate's retries, with jitter from a generator seeded with `seed`, or with `None` from the
    /// crate's own.
    pub(crate) fn new(seed: Option<u64>) -> Self {
        Self {
            policy: ExponentialBackoff::builder().build_with_max_retries(3),
            jitter: match seed {
                Some(seed) => PeerJitter::Seeded(RefCell::new(SmallRng::seed_from_u64(seed))),
                None => PeerJitter::Crate,
            },
        }
    }

    /// The wait before retry `n_past_retries + 1` of a call started at `start_time`, or `None` when the
    /// policy gives up, as `RetryTransientMiddleware::execute_with_retry` asks it (reqwest-retry 0.9.1,
    /// src/middleware.rs).
    pub(crate) fn delay(&self, start_time: SystemTime, n_past_retries: u32) -> Option<Duration> {
        match &self.jitter {
            // As the middleware does: the time from now until `execute_after`.
            PeerJitter::Crate => match self.policy.should_retry(start_time, n_past_retries) {
                RetryDecision::Retry { execute_after } => Some(
                    execute_after
                        .duration_since(SystemTime::now())
                        .unwrap_or_default(),
                ),
                RetryDecision::DoNotRetry => None,
            },
            PeerJitter::Seeded(rng) => {
                let interval = unjittered(&self.policy, start_time, n_past_retries)?;
                Some(interval.mul_f64(rng.borrow_mut().random::<f64>()))
            }
        }
    }
}

/// The crate's delay before retry `n_past_retries + 1` without jitter, to the nearest millisecond.
///
/// The crate adds its delay to its own `SystemTime::now()`, so the delay is read back against the wall
/// clock, read just before and just after the call: the delay is between `execute_after` less the
/// second reading and `execute_after` less the first. The crate's delays are whole seconds, so the
/// middle of that window, rounded, is the delay while the window is well under a millisecond; when it
/// is not (the thread was held up between the readings, as happens on a loaded machine), the call is
/// made again. Reading the clock once, after the call, made the delay a millisecond short whenever the
/// thread was held up for half of one, and the figures of a seed depend on the load.
fn unjittered(
    policy: &ExponentialBackoff,
    start_time: SystemTime,
    n_past_retries: u32,
) -> Option<Duration> {
    /// The widest window read as one delay: a quarter of the millisecond it is rounded to.
    const TIGHT: Duration = Duration::from_micros(250);
    let mut unjittered = *policy;
    unjittered.jitter = Jitter::None;
    loop {
        let before = SystemTime::now();
        let decision = unjittered.should_retry(start_time, n_past_retries);
        let after = SystemTime::now();
        let RetryDecision::Retry { execute_after } = decision else {
            return None;
        };
        let window = after.duration_since(before).unwrap_or(Duration::MAX);
        if window < TIGHT {
            let shortest = execute_after.duration_since(after).unwrap_or_default();
            let middle = shortest + window / 2;
            let millis = (middle.as_nanos() + 500_000) / 1_000_000;
            return Some(Duration::from_millis(millis as u64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unjittered_delays_are_one_two_four_seconds_then_it_gives_up() {
        let policy = ExponentialBackoff::builder().build_with_max_retries(3);
        let start = SystemTime::now();
        let delays: Vec<_> = (0..4).map(|n| unjittered(&policy, start, n)).collect();
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(delays, [secs(1), secs(2), secs(4), None]);
    }

    #[test]
    fn jittered_delays_stay_under_the_unjittered_ones() {
        for peer in [ReqwestRetry::new(Some(7)), ReqwestRetry::new(None)] {
            let start = SystemTime::now();
            for (n, ceiling) in [(0, 1), (1, 2), (2, 4)] {
                let delay = peer.delay(start, n).expect("a retry");
                assert!(delay <= Duration::from_secs(ceiling), "{delay:?}");
            }
            assert_eq!(peer.delay(start, 3), None);
        }
    }
}
