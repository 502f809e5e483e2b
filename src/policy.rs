//! The retry policy and the per-request state machine that applies it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::budget::RetryBudget;
use crate::classify::{ClassifyHttp, DefaultClassifier, Reason};
use crate::error::ConfigError;
use crate::rng::{StreamSource, entropy_seed};
use crate::state::RetryState;

/// How a server's `Retry-After` combines with the backoff delay.
///
/// In every mode but [`Ignore`](RetryAfterMode::Ignore), a `Retry-After` longer than the policy's
/// `max_retry_after` stops the retries and the response is handed back as received.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RetryAfterMode {
    /// The default. `Retry-After` `F` is a floor, and the retry is spread over the window after it:
    /// wait `F + U[0, w]`, where
    ///
    /// ```text
    /// w = min(max(c(n), F), max_retry_after − F, time left − F)
    /// ```
    ///
    /// and `c(n)` is the backoff's ceiling. So the wait is at least `F`, at most `F + max(c(n), F)` (that
    /// is, `max(2·F, F + c(n))`), never more than `max_retry_after`, and never past the deadline; when `F`
    /// is `max_retry_after` itself, there is no room left to spread.
    ///
    /// Clients that received the same header at the same moment would otherwise come back in the same
    /// millisecond. Spreading over at least `F` makes the arrival rate after the floor at most `1/F` of
    /// the herd per second. A window of `F/2` was measured first and fell short: at 10 000 clients
    /// (`examples/herd.rs`) the retries of those refused in the first wave piled up at its end, to 0.11×
    /// the strict floor's peak; with `F` the peak is 0.06×, at the same p99.
    #[default]
    Spread,
    /// `Retry-After` `F` is a floor and nothing more: wait `max(F, jittered backoff delay)`, capped at
    /// `max_retry_after` (which is at least `F`, or the retries would have stopped). Clients that got the
    /// same `F` return together; prefer [`Spread`](RetryAfterMode::Spread) unless the server spreads its
    /// own `Retry-After` values.
    Strict,
    /// Ignore `Retry-After`; wait the backoff delay.
    Ignore,
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
/// [`RetryPolicy::start`]. Differently configured policies share a budget when they are built with
/// clones of one [`RetryBudget`] (see [`RetryPolicyBuilder::budget`]).
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | backoff | [`Backoff::exponential`] from 100 ms: base 2, `max_delay` 20 s, full jitter |
/// | `max_retries` | 3 |
/// | `max_elapsed` (one deadline across attempts and sleeps) | 30 s |
/// | `attempt_timeout` (each attempt, to the response's head) | 10 s |
/// | `max_retry_after` | 30 s |
/// | `retry_after` | [`RetryAfterMode::Spread`] |
/// | idempotency rule | on |
/// | budget | [`RetryBudget::default`], its own: ratio 0.2 (20 % extra load), at least 10 retries/s, over a 10 s window |
/// | seed | from OS entropy |
/// | classifier | [`DefaultClassifier`] |
#[derive(Clone)]
pub struct RetryPolicy {
    pub(crate) shared: Arc<Shared>,
}

/// What every clone of a policy shares; read by the state machine.
pub(crate) struct Shared {
    pub(crate) backoff: Backoff,
    pub(crate) max_retries: u32,
    pub(crate) max_elapsed: Option<Duration>,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) max_retry_after: Duration,
    pub(crate) retry_after: RetryAfterMode,
    pub(crate) idempotency: bool,
    pub(crate) budget: Option<RetryBudget>,
    pub(crate) streams: StreamSource,
    classifier: Box<dyn ClassifyHttp>,
    pub(crate) on_retry: Option<Box<RetryHook>>,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shared;
        f.debug_struct("RetryPolicy")
            .field("backoff", &s.backoff)
            .field("max_retries", &s.max_retries)
            .field("max_elapsed", &s.max_elapsed)
            .field("attempt_timeout", &s.attempt_timeout)
            .field("max_retry_after", &s.max_retry_after)
            .field("retry_after", &s.retry_after)
            .field("idempotency", &s.idempotency)
            .field("budget", &s.budget)
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
    /// The default deadline of a whole call, attempts and sleeps included: 30 s.
    pub const DEFAULT_MAX_ELAPSED: Duration = Duration::from_secs(30);
    /// The default time limit of one attempt: 10 s.
    pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

    /// A builder starting from the defaults.
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder::new()
    }

    /// Starts the retries of one request: deposits into the budget, starts the deadline's clock (when
    /// there is a deadline) and draws the request's own jitter stream.
    pub fn start(&self) -> RetryState {
        let started = self.shared.max_elapsed.map(|_| Instant::now());
        self.start_at(started)
    }

    /// [`start`](Self::start) for an adapter that starts the deadline's clock itself, when an attempt
    /// first has to wait: an attempt that answers at its first poll took no time, and a request that
    /// succeeds that way never reads the clock.
    pub(crate) fn start_unclocked(&self) -> RetryState {
        self.start_at(None)
    }

    fn start_at(&self, started: Option<Instant>) -> RetryState {
        if let Some(budget) = &self.shared.budget {
            budget.deposit();
        }
        RetryState::new(self.clone(), started)
    }

    /// The backoff in use.
    pub fn backoff(&self) -> &Backoff {
        &self.shared.backoff
    }

    /// The most retries after the first attempt.
    pub fn max_retries(&self) -> u32 {
        self.shared.max_retries
    }

    /// The deadline of a whole call, if there is one.
    pub fn max_elapsed(&self) -> Option<Duration> {
        self.shared.max_elapsed
    }

    /// The time limit of one attempt, if there is one.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.shared.attempt_timeout
    }

    /// The HTTP classifier in use.
    pub fn classifier(&self) -> &dyn ClassifyHttp {
        &*self.shared.classifier
    }

    /// The retry budget this policy draws on, if it has one: its shape for a log line, or a clone to
    /// build another policy that shares it.
    pub fn budget(&self) -> Option<&RetryBudget> {
        self.shared.budget.as_ref()
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
    /// A builder starting from the defaults of [`RetryPolicy`].
    pub fn new() -> Self {
        Self {
            backoff: Backoff::exponential(RetryPolicy::DEFAULT_INITIAL_DELAY),
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
    pub fn max_elapsed(mut self, max_elapsed: Duration) -> Self {
        self.max_elapsed = Some(max_elapsed);
        self
    }

    /// Removes the deadline: only `max_retries`, the budget and `attempt_timeout` bound a call.
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
    pub fn attempt_timeout(mut self, attempt_timeout: Duration) -> Self {
        self.attempt_timeout = Some(attempt_timeout);
        self
    }

    /// Removes the time limit of each attempt: an attempt waits as long as the deadline allows.
    pub fn no_attempt_timeout(mut self) -> Self {
        self.attempt_timeout = None;
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
        if let Some(max_elapsed) = self.max_elapsed.filter(Duration::is_zero) {
            return Err(ConfigError::MaxElapsed(max_elapsed));
        }
        if let Some(timeout) = self.attempt_timeout.filter(Duration::is_zero) {
            return Err(ConfigError::AttemptTimeout(timeout));
        }
        Ok(RetryPolicy {
            shared: Arc::new(Shared {
                backoff: self.backoff,
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
                streams: StreamSource::new(self.seed.unwrap_or_else(entropy_seed)),
                classifier: self.classifier,
                on_retry: self.on_retry,
            }),
        })
    }
}
