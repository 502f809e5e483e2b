//! The per-host cooldown: when a host asks for a pause, every request to it through one policy waits.
//!
//! A table from host to the moment its pause ends, shared by every clone of a policy. A request reads
//! one atomic flag when no pause is in force anywhere, so the success path of a policy with the
//! cooldown on costs no lock, no clock read and no allocation; the table is locked only while some
//! host is cooling down, and when a response asks for a pause.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::classify::RequestView;

/// The most hosts the table holds. Past it, a new pause first evicts the pauses that have ended, then
/// the one that ends first: a client talking to more hosts than this at once keeps the pauses of the
/// 4 096 that asked for the longest.
pub(crate) const MAX_HOSTS: usize = 4096;

/// Which host a request goes to: a hash of its host name and port.
///
/// A hash rather than the name, so that a lookup allocates nothing; two hosts whose 64-bit hashes
/// collide would share their pauses, once in 2⁶⁴.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Host(u64);

impl Host {
    /// The host of `request`, if its target names one.
    pub(crate) fn of(request: &RequestView<'_>) -> Option<Self> {
        let name = request.host()?;
        let mut hasher = DefaultHasher::new();
        name.hash(&mut hasher);
        request.port().hash(&mut hasher);
        Some(Self(hasher.finish()))
    }

    #[cfg(test)]
    pub(crate) const fn from_raw(n: u64) -> Self {
        Self(n)
    }
}

/// A pause in force for a host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pause {
    /// Time left until the pause ends.
    pub(crate) left: Duration,
    /// How long the server asked for: the window over which the requests that waited are spread
    /// after the pause ends, as `RetryAfterMode::Spread` spreads retries.
    pub(crate) asked: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    until: Instant,
    asked: Duration,
}

/// The pauses of the hosts that asked for one.
#[derive(Debug, Default)]
pub(crate) struct Cooldowns {
    /// Whether any pause may be in force. Set under the lock when one is recorded, cleared under it
    /// when every pause has ended; read without it by every request.
    armed: AtomicBool,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    hosts: HashMap<Host, Entry>,
    /// When the last pause in the table ends.
    latest: Option<Instant>,
}

impl Cooldowns {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Records that `host` asked, at `now`, for a pause of `asked`. A longer pause already in force
    /// is kept.
    pub(crate) fn record(&self, host: Host, asked: Duration, now: Instant) {
        let Some(until) = now.checked_add(asked) else {
            return;
        };
        if asked.is_zero() {
            return;
        }
        let mut table = self.lock();
        if !table.hosts.contains_key(&host) && table.hosts.len() >= MAX_HOSTS {
            table.make_room(now);
        }
        let entry = table.hosts.entry(host).or_insert(Entry {
            until: now,
            asked: Duration::ZERO,
        });
        if until > entry.until {
            *entry = Entry { until, asked };
        }
        table.latest = Some(table.latest.map_or(until, |latest| latest.max(until)));
        self.armed.store(true, Ordering::Release);
    }

    /// The pause `host` is in at `now`, if any. One atomic load when no host is cooling down.
    #[inline]
    pub(crate) fn pause(&self, host: Host, now: impl FnOnce() -> Instant) -> Option<Pause> {
        if !self.armed.load(Ordering::Acquire) {
            return None;
        }
        self.pause_slow(host, now())
    }

    #[cold]
    fn pause_slow(&self, host: Host, now: Instant) -> Option<Pause> {
        let mut table = self.lock();
        if table.latest.is_none_or(|latest| latest <= now) {
            // Every pause has ended: empty the table, and let requests skip it again.
            table.hosts.clear();
            table.latest = None;
            self.armed.store(false, Ordering::Release);
            return None;
        }
        let entry = table.hosts.get(&host)?;
        (entry.until > now).then(|| Pause {
            left: entry.until - now,
            asked: entry.asked,
        })
    }

    /// Whether any pause may be in force.
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// How many hosts the table holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().hosts.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        // The table holds no invariant a panic could break halfway.
        self.table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Table {
    /// Frees slots: the pauses that have ended, or else the eighth of them that end first, so that a
    /// stream of new hosts costs a scan of the table once per `MAX_HOSTS / 8` of them, not each time.
    fn make_room(&mut self, now: Instant) {
        self.hosts.retain(|_, entry| entry.until > now);
        if self.hosts.len() < MAX_HOSTS {
            return;
        }
        let mut ends: Vec<Instant> = self.hosts.values().map(|entry| entry.until).collect();
        let (_, &mut last_evicted, _) = ends.select_nth_unstable(MAX_HOSTS / 8);
        self.hosts.retain(|_, entry| entry.until > last_evicted);
    }
}

/// What a pause outlasts when a request does not wait for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// The policy's `max_retry_after`.
    MaxRetryAfter,
    /// The time left before the deadline.
    Deadline,
}

/// How long a request waits before its first attempt to a host in `pause`: until the pause ends, plus
/// `U[0, w]` drawn by `uniform`, with `w = min(asked, max_retry_after − left, time left − left)` —
/// the rule of `RetryAfterMode::Spread`, which spreads the waiters over a window as long as the pause
/// the server asked for, so that they do not all leave in the same millisecond. `Err` when the pause
/// itself outlasts `max_retry_after` or the time left (`remaining`), or the wait would end at the
/// deadline.
pub(crate) fn wait(
    pause: Pause,
    max_retry_after: Duration,
    remaining: Option<Duration>,
    uniform: impl FnOnce(Duration) -> Duration,
) -> Result<Duration, Limit> {
    if pause.left > max_retry_after {
        return Err(Limit::MaxRetryAfter);
    }
    let mut window = pause.asked.min(max_retry_after - pause.left);
    if let Some(remaining) = remaining {
        if pause.left >= remaining {
            return Err(Limit::Deadline);
        }
        window = window.min(remaining - pause.left);
    }
    let wait = pause.left + uniform(window);
    // A first attempt due at the deadline itself would have no time to run.
    if remaining.is_some_and(|remaining| wait >= remaining) {
        return Err(Limit::Deadline);
    }
    Ok(wait)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn a_pause_holds_its_host_until_it_ends_and_no_other() {
        let cooldowns = Cooldowns::new();
        let t0 = Instant::now();
        let (a, b) = (Host::from_raw(1), Host::from_raw(2));
        assert_eq!(cooldowns.pause(a, || t0), None);
        assert!(!cooldowns.is_armed());

        cooldowns.record(a, secs(10), t0);
        assert_eq!(
            cooldowns.pause(a, || t0 + secs(4)),
            Some(Pause {
                left: secs(6),
                asked: secs(10)
            })
        );
        assert_eq!(cooldowns.pause(b, || t0 + secs(4)), None);
        // A shorter pause does not cut a longer one short; a longer one extends it.
        cooldowns.record(a, secs(1), t0 + secs(5));
        assert_eq!(cooldowns.pause(a, || t0 + secs(5)).unwrap().left, secs(5));
        cooldowns.record(a, secs(20), t0 + secs(5));
        assert_eq!(cooldowns.pause(a, || t0 + secs(5)).unwrap().left, secs(20));
        // Once every pause has ended, the table empties and requests skip it again.
        assert_eq!(cooldowns.pause(a, || t0 + secs(25)), None);
        assert!(!cooldowns.is_armed());
        assert_eq!(cooldowns.len(), 0);
    }

    #[test]
    fn the_wait_spreads_over_the_pause_asked_and_never_past_the_limits() {
        let pause = Pause {
            left: secs(2),
            asked: secs(5),
        };
        let top = |window| window;
        let bottom = |_| Duration::ZERO;
        assert_eq!(wait(pause, secs(30), None, bottom), Ok(secs(2)));
        assert_eq!(wait(pause, secs(30), None, top), Ok(secs(7)));
        // The window shrinks to what max_retry_after and the deadline leave.
        assert_eq!(wait(pause, secs(4), None, top), Ok(secs(4)));
        assert_eq!(wait(pause, secs(30), Some(secs(6)), bottom), Ok(secs(2)));
        assert_eq!(
            wait(pause, secs(30), Some(secs(6)), top),
            Err(Limit::Deadline)
        );
        assert_eq!(
            wait(pause, secs(30), Some(secs(6)), |w| w
                - Duration::from_nanos(1)),
            Ok(secs(6) - Duration::from_nanos(1))
        );
        // A pause that outlasts a limit is not waited for.
        assert_eq!(wait(pause, secs(1), None, top), Err(Limit::MaxRetryAfter));
        assert_eq!(
            wait(pause, secs(30), Some(secs(2)), top),
            Err(Limit::Deadline)
        );
    }

    #[test]
    fn zero_and_unrepresentable_pauses_are_not_recorded() {
        let cooldowns = Cooldowns::new();
        let t0 = Instant::now();
        cooldowns.record(Host::from_raw(1), Duration::ZERO, t0);
        cooldowns.record(Host::from_raw(1), Duration::MAX, t0);
        assert!(!cooldowns.is_armed());
    }

    #[test]
    fn the_table_stays_bounded_under_100_000_hosts() {
        let cooldowns = Cooldowns::new();
        let t0 = Instant::now();
        for n in 0..100_000u64 {
            // Each pause outlasts the run, so none has ended when room is needed.
            cooldowns.record(Host::from_raw(n), secs(3600) + Duration::from_millis(n), t0);
            assert!(cooldowns.len() <= MAX_HOSTS);
        }
        assert!(cooldowns.len() > MAX_HOSTS * 7 / 8, "{}", cooldowns.len());
        // The pauses kept are those that end last.
        assert!(cooldowns.pause(Host::from_raw(99_999), || t0).is_some());
        assert!(cooldowns.pause(Host::from_raw(0), || t0).is_none());
    }

    #[test]
    fn ended_pauses_make_room_first() {
        let cooldowns = Cooldowns::new();
        let t0 = Instant::now();
        for n in 0..MAX_HOSTS as u64 {
            cooldowns.record(Host::from_raw(n), secs(1), t0);
        }
        cooldowns.record(Host::from_raw(u64::MAX), secs(1), t0 + secs(2));
        assert_eq!(cooldowns.len(), 1);
    }
}
