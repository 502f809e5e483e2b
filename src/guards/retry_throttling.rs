//! gRPC's retry throttling (A6): a token bucket per server name that stops retries and hedges while
//! the calls to it fail more than they succeed.
//!
//! Each bucket holds up to `maxTokens` tokens, kept in thousandths as A6's three decimal places ask,
//! and starts full. A failed attempt (one the policy would retry, or whose server said not to) takes
//! one token, a successful one gives back `tokenRatio`; a retry or a hedge goes only while the
//! bucket holds more than half of `maxTokens`. First attempts always go.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::time::Instant;

use crate::guards::hosts::{Host, HostMap, Idle};

/// One server's bucket: its tokens, in thousandths.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    milli_tokens: AtomicU64,
    /// Its size, which a reload changes (`RetryThrottling::reshape`).
    max_milli_tokens: AtomicU64,
}

impl TokenBucket {
    fn new(max_milli_tokens: u64) -> Self {
        Self {
            milli_tokens: AtomicU64::new(max_milli_tokens),
            max_milli_tokens: AtomicU64::new(max_milli_tokens),
        }
    }

    fn max(&self) -> u64 {
        self.max_milli_tokens.load(Ordering::Relaxed)
    }

    /// Resizes it to `max_milli_tokens`, its tokens scaled in proportion, as C-core does, so that a
    /// bucket throttling retries on the old scale throttles them on the new one.
    fn resize(&self, max_milli_tokens: u64) {
        let old = self.max();
        let _ = self
            .milli_tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |milli| {
                let fraction = if old == 0 {
                    1.0
                } else {
                    milli as f64 / old as f64
                };
                Some((fraction * max_milli_tokens as f64) as u64)
            });
        self.max_milli_tokens
            .store(max_milli_tokens, Ordering::Relaxed);
    }

    /// Takes a token for a failed attempt, down to none.
    pub(crate) fn failed(&self) {
        let _ = self
            .milli_tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |milli| {
                Some(milli.saturating_sub(1000))
            });
    }

    /// Gives back `ratio` thousandths of a token for a successful attempt, up to the bucket's size.
    pub(crate) fn succeeded(&self, milli_ratio: u64) {
        let max = self.max();
        let _ = self
            .milli_tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |milli| {
                Some(milli.saturating_add(milli_ratio).min(max))
            });
    }

    /// Whether a retry or a hedge may go: the bucket holds more than half its size.
    pub(crate) fn allows(&self) -> bool {
        self.milli_tokens.load(Ordering::Relaxed) > self.max() / 2
    }

    /// Its tokens, in thousandths.
    #[cfg(test)]
    pub(crate) fn milli_tokens(&self) -> u64 {
        self.milli_tokens.load(Ordering::Relaxed)
    }
}

impl Idle for TokenBucket {
    /// A full bucket is a new one.
    fn idle(&self, _now: Instant) -> bool {
        self.milli_tokens.load(Ordering::Relaxed) == self.max()
    }
}

/// The buckets of a policy, one per server name (a request's host; requests without one share a
/// bucket), shared by every clone of the policy and by every policy of one service config.
#[derive(Debug)]
pub(crate) struct RetryThrottling {
    /// `maxTokens` and `tokenRatio`, in thousandths, which a reload changes (`reshape`).
    shape: Mutex<(u64, u64)>,
    milli_ratio: AtomicU64,
    /// Whether it is on (a service config that sets `retryThrottling`). Off, nothing is throttled
    /// or counted, and the buckets are kept for a config that sets it again (as C-core keeps them).
    on: AtomicBool,
    hosts: HostMap<TokenBucket>,
}

impl RetryThrottling {
    /// Buckets of `shape`: `maxTokens` tokens, given back `tokenRatio` (in thousandths of a token)
    /// per success; or off.
    pub(crate) fn new(shape: Option<(u32, u64)>) -> Self {
        let (max_tokens, milli_ratio) = shape.unwrap_or_default();
        Self {
            shape: Mutex::new((u64::from(max_tokens) * 1000, milli_ratio)),
            milli_ratio: AtomicU64::new(milli_ratio),
            on: AtomicBool::new(shape.is_some()),
            hosts: HostMap::default(),
        }
    }

    /// Whether it is on: the one thing an attempt without it asks.
    #[inline]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// The bucket of `host`.
    pub(crate) fn of(&self, host: Option<Host>) -> std::sync::Arc<TokenBucket> {
        self.hosts.get(host, || {
            let (max_milli_tokens, _) = *self.shape.lock().unwrap_or_else(|e| e.into_inner());
            TokenBucket::new(max_milli_tokens)
        })
    }

    /// Whether a retry or a hedge to `host` may go: its bucket holds more than half its size.
    pub(crate) fn allows(&self, host: Option<Host>) -> bool {
        self.of(host).allows()
    }

    /// An attempt to `host` failed in a way worth retrying: its bucket loses a token.
    pub(crate) fn failed(&self, host: Option<Host>) {
        self.of(host).failed();
    }

    /// An attempt to `host` succeeded: its bucket gets `tokenRatio` back.
    pub(crate) fn succeeded(&self, host: Option<Host>) {
        self.of(host).succeeded(self.milli_ratio());
    }

    /// What a success gives back, in thousandths of a token.
    pub(crate) fn milli_ratio(&self) -> u64 {
        self.milli_ratio.load(Ordering::Relaxed)
    }

    /// Gives the buckets `shape` (`maxTokens`, and `tokenRatio` in thousandths; `None`: off), as
    /// C-core's channel does when its service config changes: the same shape keeps every bucket as
    /// it is; another scales each bucket's tokens to its new size in proportion, so that a server
    /// whose retries were throttled stays throttled; off, the buckets stay for a config that turns
    /// it on again.
    pub(crate) fn reshape(&self, shape: Option<(u32, u64)>) {
        let Some((max_tokens, milli_ratio)) = shape else {
            self.on.store(false, Ordering::Relaxed);
            return;
        };
        let max_milli_tokens = u64::from(max_tokens) * 1000;
        // Not held while the hosts' map is locked: a new host's bucket reads it under that lock.
        let (old_max, _) = std::mem::replace(
            &mut *self.shape.lock().unwrap_or_else(|e| e.into_inner()),
            (max_milli_tokens, milli_ratio),
        );
        if old_max != max_milli_tokens {
            self.hosts
                .for_each(|bucket| bucket.resize(max_milli_tokens));
        }
        self.milli_ratio.store(milli_ratio, Ordering::Relaxed);
        self.on.store(true, Ordering::Relaxed);
    }

    /// The size of a bucket, in thousandths of a token.
    #[cfg(test)]
    pub(crate) fn max_milli_tokens(&self) -> u64 {
        self.shape.lock().unwrap().0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_of_ten_stops_retries_at_half_and_successes_bring_them_back_a_tenth_at_a_time() {
        let throttling = RetryThrottling::new(Some((10, 100)));
        let bucket = throttling.of(None);
        for failed in 1..=6 {
            bucket.failed();
            assert_eq!(bucket.allows(), failed < 5, "after {failed} failures");
        }
        assert_eq!(bucket.milli_tokens(), 4_000);
        for _ in 0..10 {
            bucket.succeeded(throttling.milli_ratio());
            assert!(!bucket.allows(), "5 tokens is not more than half of 10");
        }
        bucket.succeeded(throttling.milli_ratio());
        assert_eq!(bucket.milli_tokens(), 5_100);
        assert!(bucket.allows());
    }

    #[test]
    fn a_bucket_stays_between_empty_and_full() {
        let throttling = RetryThrottling::new(Some((2, 1500)));
        let bucket = throttling.of(None);
        for _ in 0..5 {
            bucket.failed();
        }
        assert_eq!(bucket.milli_tokens(), 0);
        for _ in 0..5 {
            bucket.succeeded(throttling.milli_ratio());
        }
        assert_eq!(bucket.milli_tokens(), throttling.max_milli_tokens());
    }

    #[test]
    fn a_new_size_scales_the_tokens_as_c_core_does_and_the_same_keeps_them() {
        let throttling = RetryThrottling::new(Some((10, 100)));
        for _ in 0..6 {
            throttling.failed(None);
        }
        assert_eq!(throttling.of(None).milli_tokens(), 4_000);
        assert!(!throttling.allows(None));
        throttling.reshape(Some((10, 100)));
        assert_eq!(throttling.of(None).milli_tokens(), 4_000);
        // 4 of 10 is 8 of 20: still throttled on the new scale.
        throttling.reshape(Some((20, 500)));
        assert_eq!(throttling.of(None).milli_tokens(), 8_000);
        assert_eq!(throttling.max_milli_tokens(), 20_000);
        assert!(!throttling.allows(None));
        throttling.succeeded(None);
        assert_eq!(throttling.of(None).milli_tokens(), 8_500);
        // Off; the buckets kept for a config that sets it again.
        throttling.reshape(None);
        assert!(!throttling.is_on());
        throttling.reshape(Some((5, 100)));
        assert!(throttling.is_on());
        assert_eq!(throttling.of(None).milli_tokens(), 2_125);
    }
}
