//! The retry policy and the per-request state machine that applies it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::{Backoff, DelayState};
use crate::budget::{BudgetConfig, RetryBudget};
use crate::classify::{ClassifyHttp, DefaultClassifier, Outcome, Reason};
use crate::error::ConfigError;
use crate::rng::{StreamSource, entropy_seed};

/// How a server's `Retry-After` combines with the backoff delay.
///
/// In every mode but [`Ignore`](RetryAfterMode::Ignore), a `Retry-After` longer than the policy's
/// `max_retry_after` stops the retries and the response is handed back as received.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryAfterMode {
    /// The default. `Retry-After` `F` is a floor, and the retry is spread over the window after it:
    /// wait `F + U[0, w]` with `w = max(c(n), F)`, where `c(n)` is the backoff's ceiling, and the window
    /// kept within `max_retry_after` and the deadline (so when `F` is `max_retry_after` itself, there is
    /// no room left to spread).
    ///
    /// Clients that received the same header at the same moment would otherwise come back in the same
    /// millisecond. Spreading over `F` makes the arrival rate after the floor at most `1/F` of the herd
    /// per second, and never later than `2·F`. A window of `F/2` was measured first and fell short: at
    /// 10 000 clients (`examples/herd.rs`) the retries of those refused in the first wave piled up at its
    /// end, to 0.11× the strict floor's peak; with `F` the peak is 0.06×, at the same p99.
    #[default]
    Spread,
    /// `Retry-After` `F` is a floor and nothing more: wait `max(F, jittered backoff delay)`. Clients that
    /// got the same `F` return together; prefer [`Spread`](RetryAfterMode::Spread) unless the server
    /// spreads its own `Retry-After` values.
    Strict,
    /// Ignore `Retry-After`; wait the backoff delay.
    Ignore,
}

/// Why a request's retries stopped; recorded in [`RetryInfo`].
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The last attempt succeeded.
    Success,
    /// The last attempt failed in a way a retry will not fix.
    Fatal,
    /// The server may have acted on a non-idempotent request without an `Idempotency-Key`.
    NotIdempotent,
    /// The request could not be copied for another attempt (a streaming body).
    NotReplayable,
    /// `max_retries` retries were made.
    MaxRetries,
    /// The next retry would end past `max_elapsed`.
    Deadline,
    /// The retry budget is spent.
    Budget,
    /// The server's `Retry-After` is longer than `max_retry_after`.
    RetryAfterTooLong,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Success => "success",
            Self::Fatal => "not retryable",
            Self::NotIdempotent => "not idempotent",
            Self::NotReplayable => "request cannot be replayed",
            Self::MaxRetries => "max retries reached",
            Self::Deadline => "deadline would be exceeded",
            Self::Budget => "retry budget exhausted",
            Self::RetryAfterTooLong => "retry-after exceeds max_retry_after",
        })
    }
}

/// What the state machine answers for one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Sleep this long, then send the request again.
    Retry(Duration),
    /// Return the last attempt's result as it is.
    Stop(StopReason),
}

/// What one attempt produced, as the state machine needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    outcome: Outcome,
    idempotent: bool,
    replayable: bool,
    retry_after: Option<Duration>,
}

impl Attempt {
    /// An attempt with this classified outcome, of an idempotent, replayable request, without `Retry-After`.
    pub const fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            idempotent: true,
            replayable: true,
            retry_after: None,
        }
    }

    /// Whether sending the request again is harmless (see
    /// [`RequestView::is_idempotent`](crate::RequestView::is_idempotent)). Defaults to `true`.
    pub const fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Whether the request can be sent again at all (a streaming body cannot). Defaults to `true`.
    pub const fn replayable(mut self, replayable: bool) -> Self {
        self.replayable = replayable;
        self
    }

    /// How long the server asked the client to wait, from [`parse_retry_after`](crate::parse_retry_after).
    /// Defaults to `None`.
    pub const fn retry_after(mut self, retry_after: Option<Duration>) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// The classified outcome.
    pub const fn outcome(&self) -> Outcome {
        self.outcome
    }
}

/// What happened to a request across its attempts.
///
/// The adapters insert it into the final response's extensions:
///
/// ```
/// # #[cfg(feature = "tower")]
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// # use std::time::Duration;
/// # use stagger::{Backoff, RetryLayer, RetryPolicy, StopReason};
/// # use tower::{Layer, ServiceExt, service_fn};
/// # let policy = RetryPolicy::builder()
/// #     .backoff(Backoff::fixed(Duration::from_millis(10)))
/// #     .build()
/// #     .unwrap();
/// # let calls = std::sync::atomic::AtomicU32::new(0);
/// # let server = service_fn(|_: http::Request<()>| {
/// #     let status = if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 { 503 } else { 200 };
/// #     async move { Ok::<_, std::convert::Infallible>(http::Response::builder().status(status).body(()).unwrap()) }
/// # });
/// # let response = RetryLayer::new(policy).layer(server).oneshot(http::Request::new(())).await.unwrap();
/// // A 503, then a 200:
/// let info = response.extensions().get::<stagger::RetryInfo>().unwrap();
/// assert_eq!(info.attempts(), 2);
/// assert_eq!(info.slept(), Duration::from_millis(10));
/// assert_eq!(info.stop_reason(), Some(StopReason::Success));
/// # }
/// # #[cfg(not(feature = "tower"))]
/// # fn main() {}
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryInfo {
    attempts: u32,
    slept: Duration,
    stop: Option<StopReason>,
}

impl RetryInfo {
    /// Attempts made, the first included.
    pub const fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The retries made: `attempts() - 1`.
    pub const fn retries(&self) -> u32 {
        self.attempts.saturating_sub(1)
    }

    /// Time spent sleeping between attempts.
    pub const fn slept(&self) -> Duration {
        self.slept
    }

    /// Why the attempts stopped; `None` while they go on.
    pub const fn stop_reason(&self) -> Option<StopReason> {
        self.stop
    }
}

/// One retry about to happen, as a [`RetryPolicyBuilder::on_retry`] hook sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryEvent {
    /// The attempt that failed (1 for the first).
    pub attempt: u32,
    /// How long until the next attempt.
    pub delay: Duration,
    /// Why the attempt is retried.
    pub reason: Reason,
    /// The server's `Retry-After`, if it sent one that was taken into account.
    pub retry_after: Option<Duration>,
}

type RetryHook = dyn Fn(&RetryEvent) + Send + Sync;

/// The rules for retrying: backoff, limits, budget, `Retry-After` and classification.
///
/// Cheap to clone; clones share one retry budget and one seed, so a policy is meant to be built once and
/// shared by every request of a client. Each request runs its own [`RetryState`] from
/// [`RetryPolicy::start`].
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | backoff | [`Backoff::exponential`] from 100 ms: base 2, `max_delay` 20 s, full jitter |
/// | `max_retries` | 3 |
/// | `max_elapsed` | none |
/// | `max_retry_after` | 30 s |
/// | `retry_after` | [`RetryAfterMode::Spread`] |
/// | idempotency rule | on |
/// | budget | 20 % of requests, at least 10 retries/s, over a 10 s window |
/// | seed | from OS entropy |
/// | classifier | [`DefaultClassifier`] |
#[derive(Clone)]
pub struct RetryPolicy {
    shared: Arc<Shared>,
}

struct Shared {
    backoff: Backoff,
    max_retries: u32,
    max_elapsed: Option<Duration>,
    max_retry_after: Duration,
    retry_after: RetryAfterMode,
    idempotency: bool,
    budget: Option<RetryBudget>,
    streams: StreamSource,
    classifier: Box<dyn ClassifyHttp>,
    on_retry: Option<Box<RetryHook>>,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shared;
        f.debug_struct("RetryPolicy")
            .field("backoff", &s.backoff)
            .field("max_retries", &s.max_retries)
            .field("max_elapsed", &s.max_elapsed)
            .field("max_retry_after", &s.max_retry_after)
            .field("retry_after", &s.retry_after)
            .field("idempotency", &s.idempotency)
            .field("budget", &s.budget.is_some())
            .field("seed", &s.streams.seed())
            .finish_non_exhaustive()
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::builder()
            .build()
            .expect("the default configuration is valid")
    }
}

impl RetryPolicy {
    /// The default initial backoff delay: 100 ms.
    pub const DEFAULT_INITIAL_DELAY: Duration = Duration::from_millis(100);
    /// The default number of retries after the first attempt: 3.
    pub const DEFAULT_MAX_RETRIES: u32 = 3;
    /// The default longest `Retry-After` that is waited for: 30 s.
    pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

    /// A builder starting from the defaults.
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder::new()
    }

    /// Starts the retries of one request: deposits into the budget, starts the deadline's clock and draws
    /// the request's own jitter stream.
    pub fn start(&self) -> RetryState {
        let s = &*self.shared;
        if let Some(budget) = &s.budget {
            budget.deposit();
        }
        RetryState {
            delays: None,
            // The clock is read only for a deadline: a request's success path stays clock-free.
            started: s.max_elapsed.map(|_| Instant::now()),
            policy: self.clone(),
            attempts: 0,
            slept: Duration::ZERO,
            stop: None,
        }
    }

    /// The backoff in use.
    pub fn backoff(&self) -> &Backoff {
        &self.shared.backoff
    }

    /// The most retries after the first attempt.
    pub fn max_retries(&self) -> u32 {
        self.shared.max_retries
    }

    /// The HTTP classifier in use.
    pub fn classifier(&self) -> &dyn ClassifyHttp {
        &*self.shared.classifier
    }
}

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
    max_retries: u32,
    max_elapsed: Option<Duration>,
    max_retry_after: Duration,
    retry_after: RetryAfterMode,
    idempotency: bool,
    budget: Option<BudgetConfig>,
    seed: Option<u64>,
    classifier: Box<dyn ClassifyHttp>,
    on_retry: Option<Box<RetryHook>>,
}

impl fmt::Debug for RetryPolicyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicyBuilder")
            .field("backoff", &self.backoff)
            .field("max_retries", &self.max_retries)
            .field("max_elapsed", &self.max_elapsed)
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
    /// A builder starting from the defaults of [`RetryPolicy`].
    pub fn new() -> Self {
        Self {
            backoff: Backoff::exponential(RetryPolicy::DEFAULT_INITIAL_DELAY),
            max_retries: RetryPolicy::DEFAULT_MAX_RETRIES,
            max_elapsed: None,
            max_retry_after: RetryPolicy::DEFAULT_MAX_RETRY_AFTER,
            retry_after: RetryAfterMode::Spread,
            idempotency: true,
            budget: Some(BudgetConfig::default()),
            seed: None,
            classifier: Box::new(DefaultClassifier),
            on_retry: None,
        }
    }

    /// Sets the backoff. Defaults to [`Backoff::exponential`] from 100 ms (base 2, 20 s cap, full jitter).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets the most retries after the first attempt. Defaults to 3; `u32::MAX` is unlimited in practice,
    /// `0` never retries.
    pub fn max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }

    /// Sets one deadline across all attempts and sleeps of a request, measured with
    /// `tokio::time::Instant` from [`RetryPolicy::start`]: a retry whose sleep would end past it is not
    /// taken. Defaults to none.
    pub fn max_elapsed(mut self, max_elapsed: Duration) -> Self {
        self.max_elapsed = Some(max_elapsed);
        self
    }

    /// Sets the longest `Retry-After` the policy waits for; a longer one stops the retries and the response
    /// is handed back as received. Defaults to 30 s.
    pub fn max_retry_after(mut self, max_retry_after: Duration) -> Self {
        self.max_retry_after = max_retry_after;
        self
    }

    /// Sets how `Retry-After` combines with the backoff. Defaults to [`RetryAfterMode::Spread`].
    pub fn retry_after(mut self, mode: RetryAfterMode) -> Self {
        self.retry_after = mode;
        self
    }

    /// Sets whether a non-idempotent request (a `POST` without `Idempotency-Key`) is kept from being replayed
    /// after a failure the server may have acted on. Defaults to `true`; turn it off only for a server
    /// known to deduplicate.
    pub fn idempotency_check(mut self, enabled: bool) -> Self {
        self.idempotency = enabled;
        self
    }

    /// Turns the retry budget off: only `max_retries` and `max_elapsed` limit the retries.
    pub fn no_budget(mut self) -> Self {
        self.budget = None;
        self
    }

    /// Sets the retry budget: retries may add `percent` % to the load of the last `window`, plus
    /// `min_per_second` retries per second at any rate. Defaults to 20 %, 10/s, 10 s.
    ///
    /// `percent` must be within `0..=1000` (exact to three decimals) and `window` within 1 s to 60 s.
    /// Deposits and withdrawals expire with the window; see the budget's notes in the crate docs.
    pub fn budget(mut self, percent: f32, min_per_second: u32, window: Duration) -> Self {
        self.budget = Some(BudgetConfig {
            window,
            min_per_second,
            percent,
        });
        self
    }

    /// Seeds the jitter, for reproducible tests and simulations. Each request still draws its own stream,
    /// derived from this seed. Defaults to a seed from OS entropy, never the clock.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sets the HTTP classifier, a [`ClassifyHttp`] or a closure. Defaults to [`DefaultClassifier`].
    pub fn classifier(mut self, classifier: impl ClassifyHttp) -> Self {
        self.classifier = Box::new(classifier);
        self
    }

    /// Calls `hook` before every retry's sleep, with the attempt, the delay and the reason.
    pub fn on_retry(mut self, hook: impl Fn(&RetryEvent) + Send + Sync + 'static) -> Self {
        self.on_retry = Some(Box::new(hook));
        self
    }

    /// Validates the configuration and builds the policy.
    pub fn build(self) -> Result<RetryPolicy, ConfigError> {
        self.backoff.validate()?;
        if let Some(budget) = &self.budget {
            budget.validate()?;
        }
        Ok(RetryPolicy {
            shared: Arc::new(Shared {
                backoff: self.backoff,
                max_retries: self.max_retries,
                max_elapsed: self.max_elapsed,
                max_retry_after: self.max_retry_after,
                retry_after: self.retry_after,
                idempotency: self.idempotency,
                budget: self.budget.map(|b| b.build()),
                streams: StreamSource::new(self.seed.unwrap_or_else(entropy_seed)),
                classifier: self.classifier,
                on_retry: self.on_retry,
            }),
        })
    }
}

/// The retries of one request: feed it each attempt's outcome and do what it says.
///
/// This is the one place where retry decisions are made; the tower layer, the reqwest middleware and
/// [`retry`](crate::retry()) all drive it. A loop for any other kind of work looks like this:
///
/// ```
/// use stagger::{Attempt, Decision, Outcome, Reason, RetryPolicy};
///
/// # async fn connect() -> Result<(), std::io::Error> { Ok(()) }
/// # async fn run() -> Result<(), std::io::Error> {
/// let policy = RetryPolicy::default();
/// let mut state = policy.start();
/// loop {
///     let result = connect().await;
///     let outcome = match &result {
///         Ok(_) => Outcome::Success,
///         Err(_) => Outcome::RetrySafe(Reason::Connect),
///     };
///     match state.decide(Attempt::new(outcome)) {
///         Decision::Retry(delay) => tokio::time::sleep(delay).await,
///         Decision::Stop(_) => return result,
///     }
/// }
/// # }
/// ```
#[derive(Clone)]
pub struct RetryState {
    policy: RetryPolicy,
    delays: Option<DelayState>,
    started: Option<Instant>,
    attempts: u32,
    slept: Duration,
    stop: Option<StopReason>,
}

impl fmt::Debug for RetryState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryState")
            .field("attempts", &self.attempts)
            .field("slept", &self.slept)
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

impl RetryState {
    /// The policy this state applies.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Attempts decided so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether a retry could still follow the attempt about to be made, as far as the count and the
    /// deadline tell before its outcome is known. When it is `false`, adapters send the request without
    /// keeping a copy.
    pub fn may_retry(&self) -> bool {
        let s = &*self.policy.shared;
        self.stop.is_none()
            && self.attempts < s.max_retries
            && self.remaining() != Some(Duration::ZERO)
    }

    /// What has happened so far.
    pub fn info(&self) -> RetryInfo {
        RetryInfo {
            attempts: self.attempts,
            slept: self.slept,
            stop: self.stop,
        }
    }

    /// Records one attempt and decides: retry after a delay, or stop.
    ///
    /// The checks run in this order, and the first that applies stops the retries: success, fatal,
    /// `max_retries`, the deadline already passed, not replayable, not idempotent, `Retry-After` over
    /// `max_retry_after`, the deadline passed by the end of the sleep, the budget. The limits that
    /// [`may_retry`](Self::may_retry) foresees come before anything that depends on the request, and the
    /// budget is asked last, so that a retry refused for another reason does not spend it.
    pub fn decide(&mut self, attempt: Attempt) -> Decision {
        self.attempts = self.attempts.saturating_add(1);
        let decision = self.evaluate(&attempt);
        match decision {
            Decision::Retry(delay) => {
                self.slept = self.slept.saturating_add(delay);
                let reason = attempt.outcome.reason().unwrap_or(Reason::Other("retry"));
                tracing::debug!(attempt = self.attempts, ?delay, %reason, "stagger: retrying");
                if let Some(hook) = &self.policy.shared.on_retry {
                    hook(&RetryEvent {
                        attempt: self.attempts,
                        delay,
                        reason,
                        retry_after: self.effective_retry_after(&attempt),
                    });
                }
            }
            Decision::Stop(reason) => {
                self.stop = Some(reason);
                if reason != StopReason::Success {
                    tracing::debug!(attempts = self.attempts, %reason, "stagger: giving up");
                }
            }
        }
        decision
    }

    /// Time left before the deadline, if there is one.
    fn remaining(&self) -> Option<Duration> {
        let max = self.policy.shared.max_elapsed?;
        let started = self.started?;
        Some(max.saturating_sub(started.elapsed()))
    }

    fn effective_retry_after(&self, attempt: &Attempt) -> Option<Duration> {
        match self.policy.shared.retry_after {
            RetryAfterMode::Ignore => None,
            RetryAfterMode::Spread | RetryAfterMode::Strict => attempt.retry_after,
        }
    }

    fn evaluate(&mut self, attempt: &Attempt) -> Decision {
        let s = &*self.policy.shared;
        match attempt.outcome {
            Outcome::Success => return Decision::Stop(StopReason::Success),
            Outcome::Fatal => return Decision::Stop(StopReason::Fatal),
            Outcome::RetrySafe(_) | Outcome::RetryIfIdempotent(_) => {}
        }
        if self.attempts > s.max_retries {
            return Decision::Stop(StopReason::MaxRetries);
        }
        let remaining = self.remaining();
        if remaining == Some(Duration::ZERO) {
            return Decision::Stop(StopReason::Deadline);
        }
        if !attempt.replayable {
            return Decision::Stop(StopReason::NotReplayable);
        }
        if s.idempotency
            && !attempt.idempotent
            && matches!(attempt.outcome, Outcome::RetryIfIdempotent(_))
        {
            return Decision::Stop(StopReason::NotIdempotent);
        }
        let floor = self.effective_retry_after(attempt);
        if floor.is_some_and(|f| f > s.max_retry_after) {
            return Decision::Stop(StopReason::RetryAfterTooLong);
        }
        // The generator is seeded at the first retry, so a request that succeeds at once pays nothing for it.
        let delays = self
            .delays
            .get_or_insert_with(|| DelayState::new(&s.backoff, s.streams.next_stream()));
        let backoff_delay = delays.next_delay(&s.backoff);
        let delay = match (s.retry_after, floor) {
            (_, None) | (RetryAfterMode::Ignore, _) => backoff_delay,
            (RetryAfterMode::Strict, Some(floor)) => floor.max(backoff_delay),
            (RetryAfterMode::Spread, Some(floor)) => {
                let ceiling = s.backoff.ceiling(self.attempts);
                let mut window = ceiling.max(floor).min(s.max_retry_after - floor);
                if let Some(remaining) = remaining {
                    window = window.min(remaining.saturating_sub(floor));
                }
                floor + delays.uniform(window)
            }
        };
        if remaining.is_some_and(|remaining| delay > remaining) {
            return Decision::Stop(StopReason::Deadline);
        }
        if let Some(budget) = &s.budget
            && !budget.withdraw()
        {
            return Decision::Stop(StopReason::Budget);
        }
        Decision::Retry(delay)
    }
}
