//! The settings of [`RetryPolicyBuilder`] for how a request is sent again: hedging and the replay
//! buffer.

use std::time::Duration;

use crate::engine::builder::RetryPolicyBuilder;

impl RetryPolicyBuilder {
    /// Turns on hedging: when an attempt has not answered after `delay`, a second attempt of the same
    /// request starts beside it, and the first acceptable answer wins. Off by default.
    ///
    /// Tail latency is fixed by hedging, not by retrying: a retry waits for the slow attempt to fail,
    /// a hedge does not. In "The Tail at Scale" (Dean and Barroso, 2013), a hedge sent after 10 ms cut
    /// the 99.9th percentile of a Bigtable read from 1 800 ms to 74 ms for 2 % more requests. Set
    /// `delay` near the 95th percentile of the endpoint's latency: then about 5 % of the requests are
    /// hedged.
    ///
    /// The race: an answer that is not a failure worth retrying (a success, or a fatal answer such as
    /// a `404`) wins at once, and the other attempt is dropped, which cancels it (its connection is
    /// closed or its stream reset). A failure worth retrying while the other attempt still runs is set
    /// aside, and the call waits for the other; when both fail, the last failure goes to the retry
    /// logic as usual, with what the one set aside asked for: the retry waits at least the longest
    /// server delay (`Retry-After`, a rate-limit header) of either answer, on the
    /// [`throttle_backoff`](Self::throttle_backoff) schedule if either was throttling, and the host
    /// cooldown hears both. At most two attempts of a call are in flight, and each attempt is hedged
    /// at most once. The time limits cover the race: the attempt timeout runs from the first attempt
    /// of it.
    ///
    /// A hedge is a retry sent early, and it is held to the same rules: only a request that is safe to
    /// send twice (an idempotent method, or an `Idempotency-Key`) and that the adapter holds a copy of
    /// is hedged; it counts towards `max_retries`, spends the retry budget (an exhausted budget sends
    /// no hedge), and is not sent past the deadline, to a host that is pausing, or when adaptive
    /// throttling rejects it (how a race counts to the throttle:
    /// [`adaptive_throttle`](Self::adaptive_throttle)). Paid like a retry, its budget's floor included, a hedge is bounded per
    /// client, not per fleet: 1 000 clients each sending 10 requests a second are all within their
    /// floors, and can each hedge every request. So the delay is what bounds the extra load: in
    /// `examples/herd/` (`--scenario tail`), hedging at the p95 added 4.4 % to the load and cut the
    /// 99.9th percentile from 1 004 ms to 44 ms, while hedging at 10 ms (the p38 there) added 61.5 %
    /// and, on a server 76 % busy, overloaded it (its median went from 12 ms to 743 ms). [`RetryInfo::hedges`](crate::RetryInfo::hedges) counts them.
    ///
    /// Through the tower layer the inner service must be `Clone` (as it must be for retries): the hedge
    /// goes through a clone, driven ready first. A clone that is not ready at once (a concurrency
    /// limit, a rate limit or a full buffer below the layer) is polled again while the race lasts, and
    /// the hedge goes when it is ready, as a retry waits for its service; if the first attempt answers
    /// first, no hedge goes. A hedge is counted and paid for when it is sent, never while it waits.
    ///
    /// `delay` must not be zero ([`ConfigError::HedgeAfter`](crate::ConfigError::HedgeAfter)): that would send every request twice.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::RetryPolicy;
    ///
    /// // This endpoint answers within 40 ms 95 % of the time.
    /// let policy = RetryPolicy::builder().hedge_after(Duration::from_millis(40)).build()?;
    /// assert_eq!(policy.hedge_after(), Some(Duration::from_millis(40)));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn hedge_after(mut self, delay: impl Into<Option<Duration>>) -> Self {
        self.settings.hedge_after = delay.into();
        self
    }

    /// Sets the most bytes of a request body that cannot be copied that are kept, as they stream out,
    /// so that a retry can send them again. Defaults to 64 KiB
    /// ([`RetryPolicy::DEFAULT_REPLAY_BUFFER`](crate::RetryPolicy::DEFAULT_REPLAY_BUFFER)); `0` sends such bodies once.
    ///
    /// A body that can be copied (a `reqwest` body made from bytes, an `http::Request<B>` with
    /// `B: Clone`) is copied as always. A streaming one — `reqwest::Body::wrap_stream`, or an
    /// `http::Request<`[`ReplayBody<B>`](crate::ReplayBody)`>` for a service over `http` types — is
    /// recorded as it goes out: if the attempt fails in a way worth retrying and the whole body fit, the
    /// retry sends the recording byte for byte; if it did not fit (or ended with trailers or an error),
    /// the request is not retried and the result is returned as received
    /// ([`StopReason::NotReplayable`](crate::StopReason::NotReplayable)). A body that was never read
    /// (the connection was refused) is not recorded at all: the retry sends the body itself, whatever
    /// its length. The recording holds the chunks the body yielded, shared rather than copied, so it
    /// costs only the bytes actually sent, and is freed when the call ends.
    ///
    /// Why 64 KiB: it covers the bodies that are streamed without being large — JSON written as it is
    /// produced, a small upload — while bounding what a client with many requests in flight can hold:
    /// 10 000 concurrent streaming requests keep at most 640 MiB, where Envoy's 1 MiB request buffer
    /// would keep 10 GiB. gRPC's clients bound their replay buffers the same way (1 MiB per call,
    /// 16 MiB per channel in gRPC-Java); raise it for a client that streams larger bodies it wants
    /// retried.
    ///
    /// ```
    /// use stagger::RetryPolicy;
    ///
    /// // Retry streamed uploads up to 1 MiB.
    /// let policy = RetryPolicy::builder().replay_buffer(1 << 20).build()?;
    /// assert_eq!(policy.replay_buffer(), 1 << 20);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn replay_buffer(mut self, max_bytes: usize) -> Self {
        self.settings.replay_buffer = max_bytes;
        self
    }
}
