//! [`RetryPolicyBuilder`]: every setting of a [`RetryPolicy`], its default, and the checks that
//! refuse an invalid one.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::Backoff;
use crate::budget::RetryBudget;
use crate::classify::{ClassifyHttp, DefaultClassifier};
use crate::cooldown::Cooldowns;
use crate::error::ConfigError;
use crate::policy::{RetryAfterMode, RetryEvent, RetryHook, RetryPolicy, Shared};
use crate::rng::{StreamSource, entropy_seed};
use crate::throttle::{MAX_THROTTLE_WINDOW, MIN_THROTTLE_WINDOW, Throttles};

/// Builds a [`RetryPolicy`]; every setter documents its default. Invalid values are reported by
/// [`build`](RetryPolicyBuilder::build) as a [`ConfigError`], never by a panic.
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, RetryPolicy};
///
/// let policy = RetryPolicy::builder()
///     .backoff(Backoff::exponential(Duration::from_millis(50)).max_delay(Duration::from_secs(2)))
///     .max_retries(5)
///     .max_elapsed(Duration::from_secs(10))
///     .build()?;
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[must_use]
pub struct RetryPolicyBuilder {
    backoff: Backoff,
    throttle_backoff: Backoff,
    host_cooldown: bool,
    adaptive_throttle: Option<f64>,
    adaptive_throttle_window: Duration,
    replay_buffer: usize,
    hedge_after: Option<Duration>,
    max_retries: u32,
    max_elapsed: Option<Duration>,
    attempt_timeout: Option<Duration>,
    max_retry_after: Duration,
    retry_after: RetryAfterMode,
    idempotency: bool,
    budget: Budget,
    seed: Option<u64>,
    classifier: Box<dyn ClassifyHttp>,
    on_retry: Option<Box<RetryHook>>,
}

/// The budget a builder will give its policy.
#[derive(Debug)]
enum Budget {
    /// A [`RetryBudget::default`] of its own, opened by `build`.
    Default,
    /// The account of a [`RetryBudget`], shared with whatever else holds a clone of it.
    Given(RetryBudget),
    /// None: [`RetryPolicyBuilder::no_budget`].
    Off,
}

impl fmt::Debug for RetryPolicyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicyBuilder")
            .field("backoff", &self.backoff)
            .field("throttle_backoff", &self.throttle_backoff)
            .field("host_cooldown", &self.host_cooldown)
            .field("adaptive_throttle", &self.adaptive_throttle)
            .field("adaptive_throttle_window", &self.adaptive_throttle_window)
            .field("replay_buffer", &self.replay_buffer)
            .field("hedge_after", &self.hedge_after)
            .field("max_retries", &self.max_retries)
            .field("max_elapsed", &self.max_elapsed)
            .field("attempt_timeout", &self.attempt_timeout)
            .field("max_retry_after", &self.max_retry_after)
            .field("retry_after", &self.retry_after)
            .field("idempotency", &self.idempotency)
            .field("budget", &self.budget)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl Default for RetryPolicyBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RetryPolicyBuilder {
    /// A builder starting from the defaults of [`RetryPolicy`]; the same as [`RetryPolicy::builder`]
    /// and [`RetryPolicyBuilder::default`].
    ///
    /// ```
    /// use stagger::{RetryPolicy, RetryPolicyBuilder};
    ///
    /// let policy = RetryPolicyBuilder::new().build()?;
    /// assert_eq!(policy.max_retries(), RetryPolicy::DEFAULT_MAX_RETRIES);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn new() -> Self {
        Self {
            backoff: Backoff::exponential(RetryPolicy::DEFAULT_INITIAL_DELAY),
            throttle_backoff: RetryPolicy::DEFAULT_THROTTLE_BACKOFF,
            host_cooldown: false,
            adaptive_throttle: None,
            adaptive_throttle_window: RetryPolicy::DEFAULT_ADAPTIVE_THROTTLE_WINDOW,
            replay_buffer: RetryPolicy::DEFAULT_REPLAY_BUFFER,
            hedge_after: None,
            max_retries: RetryPolicy::DEFAULT_MAX_RETRIES,
            max_elapsed: Some(RetryPolicy::DEFAULT_MAX_ELAPSED),
            attempt_timeout: Some(RetryPolicy::DEFAULT_ATTEMPT_TIMEOUT),
            max_retry_after: RetryPolicy::DEFAULT_MAX_RETRY_AFTER,
            retry_after: RetryAfterMode::Spread,
            idempotency: true,
            budget: Budget::Default,
            seed: None,
            classifier: Box::new(DefaultClassifier),
            on_retry: None,
        }
    }

    /// Sets the backoff. Defaults to [`Backoff::exponential`] from 100 ms (base 2, 20 s cap, full jitter).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, Jitter, RetryPolicy};
    ///
    /// let backoff = Backoff::exponential(Duration::from_millis(250))
    ///     .max_delay(Duration::from_secs(5))
    ///     .jitter(Jitter::Equal);
    /// let policy = RetryPolicy::builder().backoff(backoff).build()?;
    /// assert_eq!(policy.backoff().get_max_delay(), Duration::from_secs(5));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets the schedule of a throttled attempt, one the server refused to limit the client's rate
    /// rather than because it failed: a `429`, or a `503` with a rate-limit header (see
    /// [`server_delay`](crate::server_delay)) that does not say quota remains (a
    /// `X-RateLimit-Remaining: 4999`, sent on every response by some APIs, does not make a `503`
    /// throttling), that gives no usable delay. Defaults to
    /// [`RetryPolicy::DEFAULT_THROTTLE_BACKOFF`]: exponential from 500 ms, base 2, 20 s cap, equal
    /// jitter (250–500 ms, 0.5–1 s, 1–2 s, …).
    ///
    /// A transient failure (a `503` without such a header, a reset) is over in a moment, and the
    /// backoff's 100 ms suits it; a rate limit is counted over a window, most often a second or more,
    /// and a retry 0–100 ms later meets the same limit and spends another request of the quota. So
    /// throttling has its own schedule, as the AWS SDKs (a 500 ms base delay for throttling errors
    /// against 100 ms for others, equal jitter) and gRPC (which tells `RESOURCE_EXHAUSTED` from
    /// `UNAVAILABLE`) do. Equal jitter keeps a floor under the first wait, which full jitter would not.
    /// A server delay, when there is one, is used instead, as for any retry.
    ///
    /// The throttle schedule counts its own retries: the `n`-th throttled retry waits on its `c(n)`,
    /// whatever transient failures came between.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, RetryPolicy};
    ///
    /// // A quota counted per minute: back off in seconds, not milliseconds.
    /// let policy = RetryPolicy::builder()
    ///     .throttle_backoff(Backoff::exponential(Duration::from_secs(2)).max_delay(Duration::from_secs(60)))
    ///     .build()?;
    /// assert_eq!(policy.throttle_backoff().initial(), Duration::from_secs(2));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn throttle_backoff(mut self, backoff: Backoff) -> Self {
        self.throttle_backoff = backoff;
        self
    }

    /// Sets whether a pause a host asks for holds every request to it, not only the retries of the
    /// request it answered. Defaults to `false`.
    ///
    /// With it on, a `429` or a `503` that carries a server delay (`Retry-After`, `retry-after-ms`, a
    /// rate-limit header: see [`server_delay`](crate::server_delay)), or any response whose
    /// rate-limit headers say the quota is spent (`RateLimit: "name";r=0;t=30`,
    /// `X-RateLimit-Remaining: 0`), starts a pause for its host (name and port) until that delay has
    /// passed. Every later request to the host through this policy — every clone of the layer or the
    /// middleware — waits before its first attempt until the pause ends, plus a uniform share of a
    /// window as long as the pause (`RetryAfterMode::Spread`'s rule), so that the waiters do not all
    /// leave in the same millisecond; a retry to the host waits at least until it ends too. A pause
    /// that outlasts `max_retry_after` or the time left before the deadline is not waited for: the
    /// request is not sent, and the call fails at once with a [`Rejected`](crate::Rejected) error
    /// whose [`RetryInfo`](crate::RetryInfo) says [`StopReason::Cooldown`](crate::StopReason::Cooldown).
    /// The time waited is [`RetryInfo::cooldown`](crate::RetryInfo::cooldown).
    ///
    /// What it saves: after a `429`, the stampede that matters is not the retries but the new requests
    /// the same process keeps sending while the server has said to wait; each is refused and spends the
    /// server's quota or capacity again. The AWS SDKs hold new requests so in their adaptive mode.
    /// What it costs: a client asking steadily for more than its quota waits instead of failing. In
    /// `examples/herd/` (1 000 requests a second against a quota of 800), the server sent 91 `429`s
    /// instead of 7 046 and no call failed instead of 2 849, at the same goodput, but the median call
    /// took 707 ms instead of 3 ms, and the 99th percentile 12 s, as the excess queued in the client.
    ///
    /// Why it is off by default: a host is not always one quota. GitHub counts search, the core API
    /// and GraphQL separately on one host, and many APIs limit per endpoint or per key; a pause asked
    /// for by one endpoint would then hold requests the server would have served, for as long as 30 s.
    /// Turn it on for an API with one quota per host, or give such an endpoint a policy of its own
    /// (policies do not share their pauses). The memory it takes is bounded: at most 4 096 hosts, and a
    /// host's entry is gone once its pause ends. A policy with it on and no pause in force costs one
    /// atomic load per request.
    ///
    /// ```
    /// use stagger::RetryPolicy;
    ///
    /// let policy = RetryPolicy::builder().host_cooldown(true).build()?;
    /// assert!(policy.host_cooldown());
    /// assert!(!RetryPolicy::default().host_cooldown());
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn host_cooldown(mut self, enabled: bool) -> Self {
        self.host_cooldown = enabled;
        self
    }

    /// Turns on client-side adaptive throttling, with multiplier `k`: an attempt to a backend that has
    /// been refusing most of what this client sends is rejected locally, without reaching it, with
    /// probability `max(0, (requests − k·accepts) / (requests + 1))` over the last
    /// [`adaptive_throttle_window`](Self::adaptive_throttle_window) (Google SRE book, "Handling
    /// Overload"). Off by default; `k = 2.0` is the book's choice.
    ///
    /// *Requests* are the attempts the client was about to send, those rejected locally included;
    /// *accepts* are the attempts the backend answered with anything but a reason to retry (a success,
    /// or a fatal answer such as a `404`): a `503`, a timeout or a refused connection is not an accept.
    /// So a client sends at most about `k` times what its backend accepts. When the backend is
    /// overloaded — answering slowly, timing out, refusing — the load it sees falls towards `k` times
    /// its capacity instead of every client's whole demand plus its retries, which is what lets it
    /// recover from a metastable overload; when it is healthy, accepts equal requests and nothing is
    /// rejected. It lets go as the window slides past the overload: with the default 10 s window, a
    /// client offering 500 requests a second to a backend of capacity 50 sends 100 of them (2 × 50);
    /// once the backend recovers, 19 % get through in the first second, then more each second, and
    /// all of them once the accepts of the last window are half its requests, about 11 s later
    /// (`tests/overload.rs`). Each host has its own throttle, kept by every clone of the policy (at most 4 096
    /// hosts).
    ///
    /// A first attempt rejected locally ends the call at once with [`Rejected`](crate::Rejected)
    /// ([`StopReason::Throttled`](crate::StopReason::Throttled), no attempt made); a retry rejected
    /// locally ends the call with the last result received, like a spent budget. `k` must be finite and
    /// at least `1.0` (below it, a healthy backend would be throttled), or
    /// [`build`](Self::build) returns [`ConfigError::AdaptiveThrottle`].
    ///
    /// Why it is off by default: it rejects requests the backend might have served, so its gain shows
    /// only under overload, and the retry budget already keeps retries from adding more than 20 % to
    /// the load of a failing backend. Turn it on for a client whose own first attempts can overload its
    /// backend: many clients, no admission control at the server.
    ///
    /// ```
    /// use stagger::{ConfigError, RetryPolicy};
    ///
    /// let policy = RetryPolicy::builder().adaptive_throttle(2.0).build()?;
    /// assert_eq!(policy.adaptive_throttle(), Some(2.0));
    /// assert_eq!(
    ///     RetryPolicy::builder().adaptive_throttle(0.5).build().unwrap_err(),
    ///     ConfigError::AdaptiveThrottle(0.5)
    /// );
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn adaptive_throttle(mut self, k: f64) -> Self {
        self.adaptive_throttle = Some(k);
        self
    }

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
    /// logic as usual. At most two attempts of a call are in flight, and each attempt is hedged at most
    /// once. The time limits cover the race: the attempt timeout runs from the first attempt of it.
    ///
    /// A hedge is a retry sent early, and it is held to the same rules: only a request that is safe to
    /// send twice (an idempotent method, or an `Idempotency-Key`) and that the adapter holds a copy of
    /// is hedged; it counts towards `max_retries`, spends the retry budget (an exhausted budget sends
    /// no hedge), and is not sent past the deadline, to a host that is pausing, or when adaptive
    /// throttling rejects it. [`RetryInfo::hedges`](crate::RetryInfo::hedges) counts them. Through the
    /// tower layer the inner service must be `Clone` (as it must be for retries): the hedge goes
    /// through a clone, driven ready first.
    ///
    /// `delay` must not be zero ([`ConfigError::HedgeAfter`]): that would send every request twice.
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
    pub fn hedge_after(mut self, delay: Duration) -> Self {
        self.hedge_after = Some(delay);
        self
    }

    /// Sets the most bytes of a request body that cannot be copied that are kept, as they stream out,
    /// so that a retry can send them again. Defaults to 64 KiB
    /// ([`RetryPolicy::DEFAULT_REPLAY_BUFFER`]); `0` sends such bodies once.
    ///
    /// A body that can be copied (a `reqwest` body made from bytes, an `http::Request<B>` with
    /// `B: Clone`) is copied as always. A streaming one — `reqwest::Body::wrap_stream`, or an
    /// `http::Request<`[`ReplayBody<B>`](crate::ReplayBody)`>` for a service over `http` types — is
    /// recorded as it goes out: if the attempt fails in a way worth retrying and the whole body fit, the
    /// retry sends the recording byte for byte; if it did not fit (or ended with trailers or an error),
    /// the request is not retried and the result is returned as received
    /// ([`StopReason::NotReplayable`](crate::StopReason::NotReplayable)). The recording holds the
    /// chunks the body yielded, shared rather than copied, so it costs only the bytes actually sent,
    /// and is freed when the call ends.
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
        self.replay_buffer = max_bytes;
        self
    }

    /// Sets the window over which adaptive throttling counts requests and accepts. Defaults to 10 s
    /// ([`RetryPolicy::DEFAULT_ADAPTIVE_THROTTLE_WINDOW`]); valid from 1 s to 300 s.
    ///
    /// The window is how long the throttle remembers: a longer one reacts more slowly to an overload
    /// and lets go of it more slowly once the backend recovers (the SRE book keeps two minutes; Envoy's
    /// admission control, the same formula, 30 s). 10 s matches the retry budget's window.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::RetryPolicy;
    ///
    /// let policy = RetryPolicy::builder()
    ///     .adaptive_throttle(2.0)
    ///     .adaptive_throttle_window(Duration::from_secs(30))
    ///     .build()?;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn adaptive_throttle_window(mut self, window: Duration) -> Self {
        self.adaptive_throttle_window = window;
        self
    }

    /// Sets the most retries after the first attempt. Defaults to 3; `u32::MAX` is unlimited in practice,
    /// `0` never retries.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stagger::ConfigError> {
    /// let policy = RetryPolicy::builder()
    ///     .backoff(Backoff::fixed(Duration::from_millis(10)))
    ///     .max_retries(1)
    ///     .build()?;
    /// let refused = || async { Err::<(), _>("connection refused") };
    /// let error = stagger::retry(&policy, refused, |_| Outcome::RetrySafe(Reason::Connect))
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!(error.info().attempts(), 2); // the first attempt and one retry
    /// assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// Sets one deadline across all attempts and sleeps of a call. Defaults to 30 s
    /// ([`RetryPolicy::DEFAULT_MAX_ELAPSED`]).
    ///
    /// It is a hard limit: a retry whose sleep would end past it is not taken, a retry is not sent once
    /// it has passed (it is checked again after the inner service's `poll_ready`), and an attempt still in
    /// flight when it passes is dropped, which cancels it. The call then ends at once with the last
    /// response received, intact ([`StopReason::Deadline`](crate::StopReason::Deadline) in its
    /// [`RetryInfo`](crate::RetryInfo)), or, if there was none, with an [`Error`](crate::Error) whose
    /// [`is_deadline`](crate::Error::is_deadline) is true.
    ///
    /// Measured on `tokio::time::Instant` (paused-time tests see it). The adapters start its clock when
    /// the first attempt first has to wait, so a request answered at its first poll never reads the
    /// clock; [`RetryPolicy::start`] starts it at once. Zero is refused by
    /// [`build`](Self::build).
    ///
    /// Here retries 1 s apart stop after the third, since a fourth would come at 4 s, past the deadline:
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stagger::ConfigError> {
    /// let policy = RetryPolicy::builder()
    ///     .backoff(Backoff::fixed(Duration::from_secs(1)))
    ///     .max_retries(100)
    ///     .max_elapsed(Duration::from_millis(3500))
    ///     .build()?;
    /// let refused = || async { Err::<(), _>("connection refused") };
    /// let error = stagger::retry(&policy, refused, |_| Outcome::RetrySafe(Reason::Connect))
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!(error.info().attempts(), 4);
    /// assert_eq!(error.info().stop_reason(), Some(StopReason::Deadline));
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_elapsed(mut self, max_elapsed: Duration) -> Self {
        self.max_elapsed = Some(max_elapsed);
        self
    }

    /// Removes the deadline: only `max_retries`, the budget and `attempt_timeout` bound a call.
    ///
    /// ```
    /// # use stagger::RetryPolicy;
    /// let policy = RetryPolicy::builder().no_max_elapsed().build()?;
    /// assert_eq!(policy.max_elapsed(), None);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn no_max_elapsed(mut self) -> Self {
        self.max_elapsed = None;
        self
    }

    /// Sets the time limit of one attempt, until the response's head (status and headers) arrives: an
    /// attempt that exceeds it is dropped, which cancels it, and is judged a timeout, which is retried
    /// like any timeout when the request is idempotent or carries an `Idempotency-Key`. Defaults to 10 s
    /// ([`RetryPolicy::DEFAULT_ATTEMPT_TIMEOUT`]).
    ///
    /// It nests inside the deadline: an attempt gets `min(attempt_timeout, time left)`. When the retries
    /// stop on a timed-out attempt, the call ends with an [`Error`](crate::Error) whose
    /// [`is_attempt_timeout`](crate::Error::is_attempt_timeout) is true. The body of a response that
    /// arrived in time is not limited: reading it is the caller's business. Zero is refused by
    /// [`build`](Self::build).
    ///
    /// An attempt that hangs is cut after 2 s and the next one answers:
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use stagger::{Outcome, RetryPolicy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stagger::ConfigError> {
    /// // No budget: one call has not paid for retrying a timeout (see `RetryBudget`).
    /// let policy = RetryPolicy::builder()
    ///     .attempt_timeout(Duration::from_secs(2))
    ///     .no_budget()
    ///     .build()?;
    /// let attempts = AtomicU32::new(0);
    /// let hangs_once = || async {
    ///     let attempt = attempts.fetch_add(1, Ordering::SeqCst) + 1;
    ///     if attempt == 1 {
    ///         std::future::pending::<()>().await;
    ///     }
    ///     Ok::<_, std::io::Error>(attempt)
    /// };
    /// let value = stagger::retry(&policy, hangs_once, |_| Outcome::Success).await.unwrap();
    /// assert_eq!(value, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn attempt_timeout(mut self, attempt_timeout: Duration) -> Self {
        self.attempt_timeout = Some(attempt_timeout);
        self
    }

    /// Removes the time limit of each attempt: an attempt waits as long as the deadline allows.
    ///
    /// ```
    /// # use stagger::RetryPolicy;
    /// let policy = RetryPolicy::builder().no_attempt_timeout().build()?;
    /// assert_eq!(policy.attempt_timeout(), None);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn no_attempt_timeout(mut self) -> Self {
        self.attempt_timeout = None;
        self
    }

    /// Sets the longest `Retry-After` the policy waits for; a longer one stops the retries and the response
    /// is handed back as received. Defaults to 30 s ([`RetryPolicy::DEFAULT_MAX_RETRY_AFTER`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// // A 503 asking for two minutes:
    /// let unavailable = Outcome::RetrySafe(Reason::Status(StatusCode::SERVICE_UNAVAILABLE));
    /// let attempt = Attempt::new(unavailable).retry_after(Some(Duration::from_secs(120)));
    ///
    /// let impatient = RetryPolicy::builder().max_retry_after(Duration::from_secs(60)).build()?;
    /// assert_eq!(impatient.start().decide(attempt), Decision::Stop(StopReason::RetryAfterTooLong));
    ///
    /// // Waiting needs a deadline that leaves room for it, too.
    /// let patient = RetryPolicy::builder()
    ///     .max_retry_after(Duration::from_secs(300))
    ///     .max_elapsed(Duration::from_secs(600))
    ///     .build()?;
    /// let decision = patient.start().decide(attempt);
    /// assert!(matches!(decision, Decision::Retry(delay) if delay >= Duration::from_secs(120)));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn max_retry_after(mut self, max_retry_after: Duration) -> Self {
        self.max_retry_after = max_retry_after;
        self
    }

    /// Sets how `Retry-After` combines with the backoff. Defaults to [`RetryAfterMode::Spread`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Reason, RetryAfterMode, RetryPolicy};
    ///
    /// // For a server that spreads its own `Retry-After` values: wait exactly what it says.
    /// let policy = RetryPolicy::builder().retry_after(RetryAfterMode::Strict).build()?;
    /// let too_many = Outcome::RetrySafe(Reason::Status(StatusCode::TOO_MANY_REQUESTS));
    /// let attempt = Attempt::new(too_many).retry_after(Some(Duration::from_secs(3)));
    /// assert_eq!(policy.start().decide(attempt), Decision::Retry(Duration::from_secs(3)));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn retry_after(mut self, mode: RetryAfterMode) -> Self {
        self.retry_after = mode;
        self
    }

    /// Sets whether a non-idempotent request (a `POST` without `Idempotency-Key`) is kept from being replayed
    /// after a failure the server may have acted on. Defaults to `true`; turn it off only for a server
    /// known to deduplicate.
    ///
    /// ```
    /// use http::StatusCode;
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// // A POST (not idempotent) answered 502: the server may have acted on it.
    /// let bad_gateway = Outcome::RetryIfIdempotent(Reason::Status(StatusCode::BAD_GATEWAY));
    /// let post = Attempt::new(bad_gateway).idempotent(false);
    ///
    /// let checked = RetryPolicy::default();
    /// assert_eq!(checked.start().decide(post), Decision::Stop(StopReason::NotIdempotent));
    ///
    /// let deduplicating_server = RetryPolicy::builder().idempotency_check(false).build()?;
    /// assert!(matches!(deduplicating_server.start().decide(post), Decision::Retry(_)));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn idempotency_check(mut self, enabled: bool) -> Self {
        self.idempotency = enabled;
        self
    }

    /// Turns the retry budget off: only `max_retries` and `max_elapsed` limit the retries.
    ///
    /// ```
    /// # use stagger::RetryPolicy;
    /// let policy = RetryPolicy::builder().no_budget().build()?;
    /// assert!(policy.budget().is_none());
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn no_budget(mut self) -> Self {
        self.budget = Budget::Off;
        self
    }

    /// Sets the retry budget the policy draws on. Defaults to a [`RetryBudget::default()`] of the
    /// policy's own (ratio 0.2, at least 10 retries/s, over a 10 s window), shared only by its clones.
    ///
    /// The policy keeps the budget's account, not a copy of it: every policy built with a clone of
    /// `budget` draws on the same one, so a `GET` policy and a `POST` policy to one backend, or the
    /// policies of every host of a client, are limited together.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{RetryBudget, RetryPolicy};
    ///
    /// let budget = RetryBudget::builder().ratio(0.1).window(Duration::from_secs(30)).build()?;
    /// let get = RetryPolicy::builder().budget(budget.clone()).build()?;
    /// let post = RetryPolicy::builder().max_retries(1).budget(budget).build()?;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn budget(mut self, budget: RetryBudget) -> Self {
        self.budget = Budget::Given(budget);
        self
    }

    /// Seeds the jitter, for reproducible tests and simulations. Each request still draws its own stream,
    /// derived from this seed. Defaults to a seed from OS entropy, never the clock.
    ///
    /// ```
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Reason, RetryPolicy};
    ///
    /// // The delay before the first retry of the next request:
    /// let first_delay = |policy: &RetryPolicy| -> Decision {
    ///     policy.start().decide(Attempt::new(Outcome::RetrySafe(Reason::Connect)))
    /// };
    /// let a = RetryPolicy::builder().seed(7).build()?;
    /// let b = RetryPolicy::builder().seed(7).build()?;
    /// assert_eq!(first_delay(&a), first_delay(&b)); // the same seed, the same sequence
    /// assert_ne!(first_delay(&a), first_delay(&a)); // each request its own stream
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sets the HTTP classifier, a [`ClassifyHttp`] or a closure. Defaults to [`DefaultClassifier`].
    ///
    /// A closure given here spells its argument types; wrapped in
    /// [`classify::from_fn`](crate::classify::from_fn) it need not.
    ///
    /// ```
    /// use stagger::classify::{AttemptResult, RequestView};
    /// use stagger::{Outcome, Reason, RetryPolicy};
    ///
    /// // Retry 5xx responses, and nothing else: no error, however transient it looks.
    /// let policy = RetryPolicy::builder()
    ///     .classifier(|_: &RequestView<'_>, result: &AttemptResult<'_>| match result {
    ///         AttemptResult::Response { status, .. } if status.is_server_error() => {
    ///             Outcome::RetryIfIdempotent(Reason::Status(*status))
    ///         }
    ///         AttemptResult::Response { .. } => Outcome::Success,
    ///         AttemptResult::Error(_) => Outcome::Fatal,
    ///     })
    ///     .build()?;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn classifier(mut self, classifier: impl ClassifyHttp) -> Self {
        self.classifier = Box::new(classifier);
        self
    }

    /// Calls `hook` before every retry's sleep, with the attempt, the delay and the reason (a
    /// [`RetryEvent`]). Defaults to none; the `tracing` events are emitted either way.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Reason, RetryPolicy};
    ///
    /// static RETRIES: AtomicU32 = AtomicU32::new(0); // a metric, say
    /// let policy = RetryPolicy::builder()
    ///     .on_retry(|_event| {
    ///         RETRIES.fetch_add(1, Ordering::Relaxed);
    ///     })
    ///     .build()?;
    ///
    /// // The hook runs as soon as a retry is decided, before its sleep:
    /// let decision = policy.start().decide(Attempt::new(Outcome::RetrySafe(Reason::Connect)));
    /// assert!(matches!(decision, Decision::Retry(_)));
    /// assert_eq!(RETRIES.load(Ordering::Relaxed), 1);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn on_retry(mut self, hook: impl Fn(&RetryEvent) + Send + Sync + 'static) -> Self {
        self.on_retry = Some(Box::new(hook));
        self
    }

    /// Validates the configuration and builds the policy.
    ///
    /// A [`ConfigError`] names the setting and the value refused: a meaningless backoff (see
    /// [`Backoff::validate`]), or a zero `max_elapsed` or `attempt_timeout`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, ConfigError, RetryPolicy};
    ///
    /// let policy = RetryPolicy::builder().max_retries(5).build()?;
    ///
    /// let shrinking = Backoff::exponential(Duration::from_secs(1)).base(0.5);
    /// let error = RetryPolicy::builder().backoff(shrinking).build().unwrap_err();
    /// assert_eq!(error, ConfigError::InvalidBase(0.5));
    /// assert_eq!(error.to_string(), "backoff base must be a finite number >= 1.0, got 0.5");
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn build(self) -> Result<RetryPolicy, ConfigError> {
        self.backoff.validate()?;
        self.throttle_backoff.validate()?;
        if let Some(k) = self.adaptive_throttle
            && !(k.is_finite() && k >= 1.0)
        {
            return Err(ConfigError::AdaptiveThrottle(k));
        }
        if !(MIN_THROTTLE_WINDOW..=MAX_THROTTLE_WINDOW).contains(&self.adaptive_throttle_window) {
            return Err(ConfigError::AdaptiveThrottleWindow(
                self.adaptive_throttle_window,
            ));
        }
        if let Some(max_elapsed) = self.max_elapsed.filter(Duration::is_zero) {
            return Err(ConfigError::MaxElapsed(max_elapsed));
        }
        if let Some(timeout) = self.attempt_timeout.filter(Duration::is_zero) {
            return Err(ConfigError::AttemptTimeout(timeout));
        }
        if let Some(delay) = self.hedge_after.filter(Duration::is_zero) {
            return Err(ConfigError::HedgeAfter(delay));
        }
        Ok(RetryPolicy {
            shared: Arc::new(Shared {
                backoff: self.backoff,
                throttle_backoff: self.throttle_backoff,
                max_retries: self.max_retries,
                max_elapsed: self.max_elapsed,
                attempt_timeout: self.attempt_timeout,
                max_retry_after: self.max_retry_after,
                retry_after: self.retry_after,
                idempotency: self.idempotency,
                budget: match self.budget {
                    Budget::Default => Some(RetryBudget::default()),
                    Budget::Given(budget) => Some(budget),
                    Budget::Off => None,
                },
                cooldowns: self.host_cooldown.then(Cooldowns::new),
                replay_buffer: self.replay_buffer,
                hedge_after: self.hedge_after,
                throttles: self
                    .adaptive_throttle
                    .map(|k| Throttles::new(k, self.adaptive_throttle_window)),
                streams: StreamSource::new(self.seed.unwrap_or_else(entropy_seed)),
                classifier: self.classifier,
                on_retry: self.on_retry,
            }),
        })
    }
}
