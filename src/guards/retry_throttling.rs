//! gRPC's retry throttling (A6): a token bucket per server name that stops retries and hedges while
//! the calls to it fail more than they succeed.
//!
//! Each bucket holds up to `maxTokens` tokens, kept in thousandths as A6's three decimal places ask,
//! and starts full. A failed attempt (one the policy would retry, or whose server said not to) takes
//! one token, a successful one gives back `tokenRatio`; a retry or a hedge goes only while the
//! bucket holds more than half of `maxTokens`. First attempts always go.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::time::Instant;

use crate::guards::hosts::{Host, HostMap, Idle};

/// One server's bucket: its tokens, in thousandths.
#[derive(Debug)]
pub(crate) struct TokenBucket {
    milli_tokens: AtomicU64,
    max_milli_tokens: u64,
}

impl TokenBucket {
    fn new(max_milli_tokens: u64) -> Self {
        Self {
            milli_tokens: AtomicU64::new(max_milli_tokens),
            max_milli_tokens,
        }
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
        let max = self.max_milli_tokens;
        let _ = self
            .milli_tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |milli| {
                Some(milli.saturating_add(milli_ratio).min(max))
            });
    }

    /// Whether a retry or a hedge may go: the bucket holds more than half its size.
    pub(crate) fn allows(&self) -> bool {
        self.milli_tokens.load(Ordering::Relaxed) > self.max_milli_tokens / 2
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
        self.milli_tokens.load(Ordering::Relaxed) == self.max_milli_tokens
    }
}

/// The buckets of a policy, one per server name (a request's host; requests without one share a
/// bucket), shared by every clone of the policy and by every policy of one service config.
#[derive(Debug)]
pub(crate) struct RetryThrottling {
    max_milli_tokens: u64,
    milli_ratio: u64,
    hosts: HostMap<TokenBucket>,
}

impl RetryThrottling {
    /// Buckets of `max_tokens` tokens, given back `milli_ratio` thousandths of a token per success.
    pub(crate) fn new(max_tokens: u32, milli_ratio: u64) -> Self {
        Self {
            max_milli_tokens: u64::from(max_tokens) * 1000,
            milli_ratio,
            hosts: HostMap::default(),
        }
    }

    /// The bucket of `host`.
    pub(crate) fn of(&self, host: Option<Host>) -> std::sync::Arc<TokenBucket> {
        self.hosts
            .get(host, || TokenBucket::new(self.max_milli_tokens))
    }

    /// What a success gives back, in thousandths of a token.
    pub(crate) const fn milli_ratio(&self) -> u64 {
        self.milli_ratio
    }

    /// The size of a bucket, in thousandths of a token.
    #[cfg(test)]
    pub(crate) const fn max_milli_tokens(&self) -> u64 {
        self.max_milli_tokens
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_of_ten_stops_retries_at_half_and_successes_bring_them_back_a_tenth_at_a_time() {
        let throttling = RetryThrottling::new(10, 100);
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
        let throttling = RetryThrottling::new(2, 1500);
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
}
