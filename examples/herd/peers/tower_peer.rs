//! tower 0.5's `ExponentialBackoffMaker::default()`, its delays computed by its own crate.

use std::collections::hash_map::DefaultHasher;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use tokio::time::Instant;
use tower::retry::backoff::{Backoff, ExponentialBackoff, ExponentialBackoffMaker, MakeBackoff};
use tower::util::rng::HasherRng;

/// tower's retry middleware has no limit of its own: the `Policy` decides. Its docs' example policy,
/// `Attempts(usize)` (tower 0.5.3, src/retry/policy.rs:14-38), counts retries down from a number; three, as
/// every other row here.
pub(crate) const RETRIES: u32 = 3;

/// One client's `ExponentialBackoffMaker` with tower's defaults (tower 0.5.3,
/// src/retry/backoff.rs:186-196: min 50 ms, max `u64::MAX` ms, jitter 0.99): each backoff waits
/// `min · 2ⁿ`, plus a uniform share of up to 99 % of it.
///
/// Its generator is a `HasherRng`, a counter hashed by a `RandomState` that no caller can seed. By
/// default the maker here is built with the same three values and a `HasherRng` whose hasher is
/// seeded (SipHash with zero keys, fed the client's seed first): tower's own arithmetic, reproducible.
/// With `--peer-rng` it is `ExponentialBackoffMaker::default()` itself.
///
/// `make_backoff` clones the maker's generator, counter and all, so every call through one maker
/// draws the same jitter sequence: tower's jitter spreads the clients of a fleet, each with a maker
/// of its own, but not the calls of one process.
pub(crate) enum TowerMaker {
    Seeded(ExponentialBackoffMaker<HasherRng<SeededHasher>>),
    Crate(ExponentialBackoffMaker),
}

/// One call's backoff.
pub(crate) enum TowerBackoff {
    Seeded(ExponentialBackoff<HasherRng<SeededHasher>>),
    Crate(ExponentialBackoff),
}

/// A `BuildHasher` that feeds a seed to SipHash with zero keys before what it hashes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeededHasher(u64);

impl BuildHasher for SeededHasher {
    type Hasher = DefaultHasher;

    fn build_hasher(&self) -> DefaultHasher {
        let mut hasher = DefaultHasher::new();
        hasher.write_u64(self.0);
        hasher
    }
}

impl TowerMaker {
    /// A client's maker: seeded with `seed`, or with `None` the crate's default.
    pub(crate) fn new(seed: Option<u64>) -> Self {
        match seed {
            Some(seed) => Self::Seeded(
                ExponentialBackoffMaker::new(
                    Duration::from_millis(50),
                    Duration::from_millis(u64::MAX),
                    0.99,
                    HasherRng::with_hasher(SeededHasher(seed)),
                )
                .expect("tower's default values"),
            ),
            None => Self::Crate(ExponentialBackoffMaker::default()),
        }
    }

    /// A new call's backoff.
    pub(crate) fn make_backoff(&mut self) -> TowerBackoff {
        match self {
            Self::Seeded(maker) => TowerBackoff::Seeded(maker.make_backoff()),
            Self::Crate(maker) => TowerBackoff::Crate(maker.make_backoff()),
        }
    }
}

impl TowerBackoff {
    /// The next wait: the deadline of the sleep `Backoff::next_backoff` returns, from now.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let sleep = match self {
            Self::Seeded(backoff) => backoff.next_backoff(),
            Self::Crate(backoff) => backoff.next_backoff(),
        };
        sleep.deadline().saturating_duration_since(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeded_maker_has_the_defaults_values() {
        let Ok(default) = ExponentialBackoffMaker::new(
            Duration::from_millis(50),
            Duration::from_millis(u64::MAX),
            0.99,
            HasherRng::default(),
        ) else {
            panic!("valid")
        };
        let fields = |debug: String| debug.split(", rng").next().map(str::to_string);
        assert_eq!(
            fields(format!("{default:?}")),
            fields(format!("{:?}", ExponentialBackoffMaker::default()))
        );
        let TowerMaker::Seeded(seeded) = TowerMaker::new(Some(1)) else {
            panic!("seeded")
        };
        assert_eq!(
            fields(format!("{seeded:?}")),
            fields(format!("{default:?}"))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn each_backoff_is_min_times_two_to_the_n_plus_up_to_99_percent() {
        for seed in [Some(1), Some(2), None] {
            let mut backoff = TowerMaker::new(seed).make_backoff();
            for base in [50, 100, 200, 400] {
                let delay = backoff.next_delay();
                let low = Duration::from_millis(base);
                assert!(low <= delay && delay <= low.mul_f64(1.99), "{delay:?}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn every_call_of_one_maker_draws_the_same_jitter() {
        let first = |maker: &mut TowerMaker| maker.make_backoff().next_delay();
        let mut maker = TowerMaker::new(Some(3));
        assert_eq!(first(&mut maker), first(&mut maker));
        assert_ne!(first(&mut maker), first(&mut TowerMaker::new(Some(4))));
    }
}
