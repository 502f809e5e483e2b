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

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::time::Instant;

use crate::guards::hosts::Host;
use crate::guards::hosts::HostMap;

/// Slots across the window: a count expires between 90 % and 100 % of the window after it was made.
const SLOTS: u64 = 10;

/// One host's throttle.
#[derive(Debug)]
pub(crate) struct AdaptiveThrottle {
    /// `K`, as the bits of an `f64`: a reload changes it in place (the counts mean the same).
    k: AtomicU64,
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
            k: AtomicU64::new(k.to_bits()),
            origin: Instant::now(),
            slot: slot_of(window),
            slots: Default::default(),
        }
    }

    /// A throttle over `window` that knows what `old` counted in its window up to `now`: the
    /// requests and accepts of a window mean the same over another, and count from `now` in it.
    fn carried(old: &Self, k: f64, window: Duration, now: Instant) -> Self {
        let new = Self::new(k, window);
        let (requests, accepts) = old.counts(now);
        let slot = new.slot_at(now);
        slot.requests.store(requests, Ordering::Relaxed);
        slot.accepts.store(accepts, Ordering::Relaxed);
        new
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
        let (requests, accepts) = self.counts(now);
        let k = f64::from_bits(self.k.load(Ordering::Relaxed));
        let requests = requests as f64;
        ((requests - k * accepts as f64) / (requests + 1.0)).max(0.0)
    }

    /// The requests and the accepts counted over the window ending at `now`.
    fn counts(&self, now: Instant) -> (u64, u64) {
        let current = self.epoch(now);
        let (mut requests, mut accepts) = (0u64, 0u64);
        for slot in &self.slots {
            let epoch = slot.epoch.load(Ordering::Relaxed);
            if epoch + SLOTS > current && epoch <= current {
                requests += slot.requests.load(Ordering::Relaxed);
                accepts += slot.accepts.load(Ordering::Relaxed);
            }
        }
        (requests, accepts)
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

/// A slot of a throttle over `window`.
fn slot_of(window: Duration) -> Duration {
    (window / SLOTS as u32).max(Duration::from_millis(1))
}

/// The throttles of a policy: one per host, shared by every clone of the policy.
#[derive(Debug)]
pub(crate) struct Throttles {
    /// `K` and the window, which a reload changes (`reshape`).
    shape: Mutex<(f64, Duration)>,
    /// Whether adaptive throttling is on: off, nothing is rejected, nothing counted.
    on: AtomicBool,
    hosts: HostMap<AdaptiveThrottle>,
}

impl Throttles {
    /// The throttles of `shape` (`K` and the window), or off.
    pub(crate) fn new(shape: Option<(f64, Duration)>) -> Self {
        // Off, the default shape waits for a reload that turns them on.
        let (k, window) = shape.unwrap_or((2.0, Duration::from_secs(10)));
        Self {
            shape: Mutex::new((k, window)),
            on: AtomicBool::new(shape.is_some()),
            hosts: HostMap::default(),
        }
    }

    /// Whether adaptive throttling is on: the one thing a request without it asks.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    fn shape(&self) -> (f64, Duration) {
        *self.shape.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a request to `host` goes out at `now` (see [`AdaptiveThrottle::admit`]). Asked only
    /// while the throttles are on.
    pub(crate) fn admit(
        &self,
        host: Option<Host>,
        now: Instant,
        draw: impl FnOnce() -> f64,
    ) -> Result<(), f64> {
        self.of(host).admit(now, draw)
    }

    /// Counts, at `now`, a request to `host` the backend answered, `accepted` or not. Told only
    /// while the throttles are on.
    pub(crate) fn answered(&self, host: Option<Host>, now: Instant, accepted: bool) {
        self.of(host).answered(now, accepted);
    }

    /// The throttle of `host` (requests without one share a throttle).
    fn of(&self, host: Option<Host>) -> std::sync::Arc<AdaptiveThrottle> {
        self.hosts.get(host, || {
            let (k, window) = self.shape();
            AdaptiveThrottle::new(k, window)
        })
    }

    /// Gives the throttles `shape` (`K` and the window; `None`: off) at `now`. A new `K` keeps every
    /// host's counts, which mean the same under it; a new window keeps each host's counts of the
    /// old window, counted from `now` in the new one; turned off, they are forgotten, and turned on
    /// again, counted afresh.
    pub(crate) fn reshape(&self, shape: Option<(f64, Duration)>, now: Instant) {
        let Some((k, window)) = shape else {
            self.on.store(false, Ordering::Relaxed);
            self.hosts.clear();
            return;
        };
        // Not held while the hosts' map is locked: a new host's throttle reads it under that lock.
        let (_, old_window) = std::mem::replace(
            &mut *self.shape.lock().unwrap_or_else(|e| e.into_inner()),
            (k, window),
        );
        if slot_of(old_window) == slot_of(window) {
            self.hosts
                .for_each(|throttle| throttle.k.store(k.to_bits(), Ordering::Relaxed));
        } else {
            self.hosts
                .replace_each(|throttle| AdaptiveThrottle::carried(throttle, k, window, now));
        }
        self.on.store(true, Ordering::Relaxed);
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

    #[tokio::test(start_paused = true)]
    async fn a_reload_keeps_the_counts_under_a_new_k_and_over_a_new_window() {
        let throttles = Throttles::new(Some((2.0, secs(10))));
        let host = Some(Host::from_raw(1));
        let now = Instant::now();
        for n in 0..100 {
            throttles.answered(host, now, n < 20);
        }
        let p = |throttles: &Throttles| throttles.of(host).rejection_probability(Instant::now());
        assert!((p(&throttles) - 60.0 / 101.0).abs() < 1e-12);
        // K = 3: (100 − 60) / 101, the same counts.
        throttles.reshape(Some((3.0, secs(10))), Instant::now());
        assert!((p(&throttles) - 40.0 / 101.0).abs() < 1e-12);
        // Over a window of 30 s, the counts of the last 10 s count from now: they last 30 s.
        tokio::time::advance(secs(5)).await;
        throttles.reshape(Some((3.0, secs(30))), Instant::now());
        assert!((p(&throttles) - 40.0 / 101.0).abs() < 1e-12);
        tokio::time::advance(secs(20)).await;
        assert!((p(&throttles) - 40.0 / 101.0).abs() < 1e-12);
        // Off, it forgets; on again, it starts afresh.
        throttles.reshape(None, Instant::now());
        assert!(!throttles.is_on());
        throttles.reshape(Some((2.0, secs(10))), Instant::now());
        assert!(throttles.is_on());
        assert_eq!(p(&throttles), 0.0);
    }
}
