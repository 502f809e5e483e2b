//! Client-side adaptive throttling, as in Google's SRE book ("Handling Overload"): a client that sees
//! its backend refuse most of what it sends stops sending most of it, locally.
//!
//! Over a sliding window, each host's throttle counts the *requests* (every attempt the client was about
//! to send, those it then rejected included) and the *accepts* (attempts the backend answered with
//! something other than a reason to retry). A new attempt is rejected locally with probability
//!
//! ```text
//! p = max(0, (requests − K·accepts) / (requests + 1))
//! ```
//!
//! so a client sends up to `K` times what its backend accepts, and an overloaded backend sees its load
//! fall to about `K` times its capacity instead of every client's full demand plus retries. With the
//! backend healthy, `accepts = requests` and nothing is rejected; `K = 2` lets through twice the accepted
//! load, enough that a backend recovering from overload is probed at more than its capacity.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::time::Instant;

use crate::guards::hosts::Host;
use crate::guards::hosts::HostMap;

/// Slots across the window: a count expires between 90 % and 100 % of the window after it was made.
const SLOTS: u64 = 10;

/// One host's throttle.
#[derive(Debug)]
pub(crate) struct AdaptiveThrottle {
    k: f64,
    origin: Instant,
    slot: Duration,
    slots: [Slot; SLOTS as usize],
}

#[derive(Debug, Default)]
struct Slot {
    /// Which slot of time since `origin` the counts are for.
    epoch: AtomicU64,
    requests: AtomicU64,
    accepts: AtomicU64,
}

impl AdaptiveThrottle {
    pub(crate) fn new(k: f64, window: Duration) -> Self {
        Self {
            k,
            origin: Instant::now(),
            slot: (window / SLOTS as u32).max(Duration::from_millis(1)),
            slots: Default::default(),
        }
    }

    /// Decides at `now` whether a request goes out: `Err(p)` if it is rejected locally, with the
    /// probability it was rejected with, and counted as a request at once. `draw` gives a uniform
    /// number in `[0, 1)`, and is called only when `p > 0`.
    ///
    /// A request that goes is counted when its answer is known ([`answered`](Self::answered)): one
    /// in flight is neither accepted nor refused yet, and counting it at once would make a client
    /// with requests overlapping look refused by a healthy backend (with `K = 1`, 39 of 60
    /// overlapping calls were rejected), and a hedge judged by the attempt it races.
    pub(crate) fn admit(&self, now: Instant, draw: impl FnOnce() -> f64) -> Result<(), f64> {
        let p = self.rejection_probability(now);
        if p > 0.0 && draw() < p {
            self.slot_at(now).requests.fetch_add(1, Ordering::Relaxed);
            return Err(p);
        }
        Ok(())
    }

    /// Counts, at `now`, a request the backend answered: accepted, or not (a reason to retry, a
    /// time limit, an error).
    pub(crate) fn answered(&self, now: Instant, accepted: bool) {
        let slot = self.slot_at(now);
        slot.requests.fetch_add(1, Ordering::Relaxed);
        if accepted {
            slot.accepts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// `max(0, (requests − K·accepts) / (requests + 1))` over the window ending at `now`.
    pub(crate) fn rejection_probability(&self, now: Instant) -> f64 {
        let current = self.epoch(now);
        let (mut requests, mut accepts) = (0u64, 0u64);
        for slot in &self.slots {
            let epoch = slot.epoch.load(Ordering::Relaxed);
            if epoch + SLOTS > current && epoch <= current {
                requests += slot.requests.load(Ordering::Relaxed);
                accepts += slot.accepts.load(Ordering::Relaxed);
            }
        }
        let requests = requests as f64;
        ((requests - self.k * accepts as f64) / (requests + 1.0)).max(0.0)
    }

    fn epoch(&self, now: Instant) -> u64 {
        let since = now.saturating_duration_since(self.origin);
        // Plus one, so that a slot never used (epoch 0) is never mistaken for the current one.
        u64::try_from(since.as_nanos() / self.slot.as_nanos())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    /// The slot counting `now`, emptied first if it last counted an older stretch of time.
    fn slot_at(&self, now: Instant) -> &Slot {
        let epoch = self.epoch(now);
        let slot = &self.slots[(epoch % SLOTS) as usize];
        let seen = slot.epoch.load(Ordering::Relaxed);
        if seen < epoch
            && slot
                .epoch
                .compare_exchange(seen, epoch, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            // Counts made between the exchange and these stores are lost: a few requests of the
            // first moment of a slot, which only ever lowers both counts alike.
            slot.requests.store(0, Ordering::Relaxed);
            slot.accepts.store(0, Ordering::Relaxed);
        }
        slot
    }
}

impl crate::guards::hosts::Idle for AdaptiveThrottle {
    /// Nothing counted in the window ending at `now`: a fresh throttle would decide alike.
    fn idle(&self, now: Instant) -> bool {
        let current = self.epoch(now);
        self.slots
            .iter()
            .all(|slot| slot.epoch.load(Ordering::Relaxed) + SLOTS <= current)
    }
}

/// The throttles of a policy: one per host, shared by every clone of the policy.
#[derive(Debug)]
pub(crate) struct Throttles {
    k: f64,
    window: Duration,
    hosts: HostMap<AdaptiveThrottle>,
}

impl Throttles {
    pub(crate) fn new(k: f64, window: Duration) -> Self {
        Self {
            k,
            window,
            hosts: HostMap::default(),
        }
    }

    pub(crate) const fn k(&self) -> f64 {
        self.k
    }

    /// The window the throttles count over.
    #[cfg(feature = "serde")]
    pub(crate) const fn window(&self) -> Duration {
        self.window
    }

    /// The throttle of `host` (requests without one share a throttle).
    pub(crate) fn of(&self, host: Option<Host>) -> Arc<AdaptiveThrottle> {
        self.hosts
            .get(host, || AdaptiveThrottle::new(self.k, self.window))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_healthy_backend_is_never_throttled() {
        let throttle = AdaptiveThrottle::new(2.0, secs(10));
        let now = Instant::now();
        for _ in 0..10_000 {
            assert_eq!(throttle.admit(now, || 0.0), Ok(()));
            throttle.answered(now, true);
        }
        assert_eq!(throttle.rejection_probability(now), 0.0);
    }

    #[test]
    fn the_probability_follows_the_formula() {
        let throttle = AdaptiveThrottle::new(2.0, secs(10));
        let now = Instant::now();
        // 100 requests answered, 20 accepted: (100 − 40) / 101.
        for n in 0..100 {
            throttle.answered(now, n < 20);
        }
        let p = throttle.rejection_probability(now);
        assert!((p - 60.0 / 101.0).abs() < 1e-12, "{p}");
        // Locally rejected requests count too, at once: they are what lets the rejections converge.
        assert_eq!(throttle.admit(now, || 0.5), Err(p));
        assert!(throttle.rejection_probability(now) > p);
    }

    #[test]
    fn requests_in_flight_count_only_once_answered() {
        // With k = 1, a request counted when it went and not yet accepted gave the next one, and a
        // hedge its own attempt, a chance of being rejected by a healthy backend.
        let throttle = AdaptiveThrottle::new(1.0, secs(10));
        let now = Instant::now();
        for _ in 0..10 {
            assert_eq!(throttle.admit(now, || 0.0), Ok(()));
        }
        assert_eq!(throttle.rejection_probability(now), 0.0);
        for _ in 0..10 {
            throttle.answered(now, true);
        }
        assert_eq!(throttle.rejection_probability(now), 0.0);
    }

    #[test]
    fn counts_expire_with_the_window() {
        let throttle = AdaptiveThrottle::new(2.0, secs(10));
        let t0 = Instant::now();
        for _ in 0..100 {
            throttle.answered(t0, false);
        }
        assert!(throttle.rejection_probability(t0) > 0.9);
        assert!(throttle.rejection_probability(t0 + secs(5)) > 0.9);
        assert_eq!(throttle.rejection_probability(t0 + secs(11)), 0.0);
        // A slot reused after a full turn starts from zero.
        throttle.answered(t0 + secs(11), false);
        assert!((throttle.rejection_probability(t0 + secs(11)) - 0.5).abs() < 1e-12);
    }
}
