//! What each host takes to answer, for the breaker: a smoothed round trip and its variation per
//! host, as TCP keeps them for its retransmission timer (RFC 6298), learnt from the attempts that
//! were answered after they had to wait. From them, how long an attempt may go unanswered before its
//! silence is its host's failure, and how long a probe of a down host waits for its answer.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use crate::time::Instant;

use crate::guards::hosts::{Host, HostMap, Idle};

/// The least time an attempt goes unanswered, while its host answers nothing else either, before
/// its silence counts as the host's failure, however fast the host used to answer: a host whose
/// answers jump from a millisecond to a few hundred (a cold cache, a pause for garbage collection,
/// a slow query, a queue building up in an overload) is slow, not down, and is not judged so by
/// its silence within this long. (At 400 ms, a server whose queue built up under a load half again
/// its capacity was found down by the clients that sent it little, and 93 of their 40 000 calls
/// failed in the tail herd's busy row.)
pub(crate) const MIN_SILENCE: Duration = Duration::from_secs(1);

/// An attempt unanswered for this many retransmission timeouts of its host is silent.
const SILENCE_RTOS: u32 = 8;

/// The least time a quick probe waits: a new connection's handshakes, on any network.
const MIN_PROBE: Duration = Duration::from_millis(20);

/// A probe waits this many retransmission timeouts of its host (a new connection, a TLS handshake,
/// the request: a few round trips), unless it is every [`FULL_PROBE_EVERY`]-th.
const PROBE_RTOS: u32 = 8;

/// Every this many probes of a down host, one waits the policy's whole attempt timeout, so that a
/// host that came back slower than it was is found back all the same.
pub(crate) const FULL_PROBE_EVERY: u32 = 4;

/// Answers seen before the estimate is trusted.
const MIN_SAMPLES: u32 = 4;

/// A host not heard from for this long is forgotten: its next answers teach afresh.
const FORGET_AFTER: Duration = Duration::from_secs(600);

/// The round trips of the hosts a policy sends to.
#[derive(Debug, Default)]
pub(crate) struct Latencies {
    hosts: HostMap<RoundTrip>,
}

/// One host's round trip, smoothed (RFC 6298), in nanoseconds; updated without a lock (two answers
/// coming together may lose one sample, which an average of hundreds does not miss).
#[derive(Debug)]
struct RoundTrip {
    smoothed: AtomicU64,
    variation: AtomicU64,
    samples: AtomicU32,
    /// The instant `last` counts from.
    origin: Instant,
    /// When the last sample came, in nanoseconds since `origin`.
    last: AtomicU64,
}

impl RoundTrip {
    #[cfg(any(test, feature = "tower", feature = "reqwest-middleware"))]
    fn new() -> Self {
        Self {
            smoothed: AtomicU64::new(0),
            variation: AtomicU64::new(0),
            samples: AtomicU32::new(0),
            origin: Instant::now(),
            last: AtomicU64::new(0),
        }
    }
}

impl Latencies {
    /// Learns that an attempt to `host` was answered after `took`.
    #[cfg(any(test, feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn sample(&self, host: Host, took: Duration) {
        let entry = self.hosts.get(Some(host), RoundTrip::new);
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let samples = entry.samples.load(Ordering::Relaxed);
        let (smoothed, variation) = if samples == 0 {
            (took, took / 2)
        } else {
            let smoothed = entry.smoothed.load(Ordering::Relaxed);
            let variation = entry.variation.load(Ordering::Relaxed);
            let deviation = smoothed.abs_diff(took);
            (
                smoothed - smoothed / 8 + took / 8,
                variation - variation / 4 + deviation / 4,
            )
        };
        entry.smoothed.store(smoothed, Ordering::Relaxed);
        entry.variation.store(variation, Ordering::Relaxed);
        entry
            .samples
            .store(samples.saturating_add(1), Ordering::Relaxed);
        let now = Instant::now().saturating_duration_since(entry.origin);
        let now = u64::try_from(now.as_nanos()).unwrap_or(u64::MAX);
        entry.last.store(now, Ordering::Relaxed);
    }

    /// Whether `host` answered an attempt at or after `since`: a host that answers others is slow
    /// for the one that waits, not silent.
    pub(crate) fn answered_since(&self, host: Host, since: Instant) -> bool {
        let Some(entry) = self.hosts.find(Some(host)) else {
            return false;
        };
        let last = Duration::from_nanos(entry.last.load(Ordering::Relaxed));
        entry.samples.load(Ordering::Relaxed) > 0 && entry.origin + last >= since
    }

    /// `host`'s retransmission timeout, its smoothed round trip and four times its variation, once
    /// enough of its answers have been seen.
    fn timeout(&self, host: Host) -> Option<Duration> {
        let entry = self.hosts.find(Some(host))?;
        if entry.samples.load(Ordering::Relaxed) < MIN_SAMPLES {
            return None;
        }
        let smoothed = entry.smoothed.load(Ordering::Relaxed);
        let variation = entry.variation.load(Ordering::Relaxed);
        Some(Duration::from_nanos(
            smoothed.saturating_add(variation.saturating_mul(4)),
        ))
    }

    /// How long an attempt to `host` may go unanswered before its silence counts as the host's
    /// failure, if the host has answered no other attempt meanwhile: eight of its retransmission
    /// timeouts, and at least [`MIN_SILENCE`]. `None` while too little is known of it.
    pub(crate) fn silence(&self, host: Host) -> Option<Duration> {
        let timeout = self.timeout(host)?;
        Some(timeout.saturating_mul(SILENCE_RTOS).max(MIN_SILENCE))
    }

    /// How long the `number`-th probe of `host`, down, waits for its answer: eight of its
    /// retransmission timeouts, and at least [`MIN_PROBE`]; `None` for every
    /// [`FULL_PROBE_EVERY`]-th, which waits the attempt's own limit, and while too little is known
    /// of the host.
    pub(crate) fn probe(&self, host: Host, number: u32) -> Option<Duration> {
        if number.is_multiple_of(FULL_PROBE_EVERY) {
            return None;
        }
        let timeout = self.timeout(host)?;
        Some(timeout.saturating_mul(PROBE_RTOS).max(MIN_PROBE))
    }
}

impl Idle for RoundTrip {
    /// Not heard from for [`FORGET_AFTER`]: the host's next answers teach afresh.
    fn idle(&self, now: Instant) -> bool {
        let last = Duration::from_nanos(self.last.load(Ordering::Relaxed));
        now.saturating_duration_since(self.origin) >= last.saturating_add(FORGET_AFTER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: Host = Host::from_raw(9);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_that_answers_in_a_millisecond_is_silent_after_400_ms_and_probed_for_20() {
        let latencies = Latencies::default();
        assert_eq!(latencies.silence(HOST), None, "nothing known yet");
        for _ in 0..100 {
            latencies.sample(HOST, ms(1));
        }
        assert_eq!(latencies.silence(HOST), Some(MIN_SILENCE));
        assert_eq!(MIN_SILENCE, Duration::from_secs(1));
        assert_eq!(latencies.probe(HOST, 1), Some(MIN_PROBE));
        assert_eq!(latencies.probe(HOST, FULL_PROBE_EVERY), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_that_answers_in_200_ms_with_spread_is_given_eight_timeouts() {
        // (8 × (200 + 4 × ~40) ms is over the second of the floor.)
        let latencies = Latencies::default();
        for n in 0..200u64 {
            latencies.sample(HOST, ms(150 + (n % 3) * 50));
        }
        let silence = latencies.silence(HOST).unwrap();
        // A round trip of about 200 ms, varying by tens: 8 × (200 + 4 × ~40) ms.
        assert!(silence > Duration::from_secs(2), "{silence:?}");
        assert!(silence < Duration::from_secs(4), "{silence:?}");
    }
}
