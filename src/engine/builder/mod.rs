//! [`RetryPolicyBuilder`]: every setting of a [`RetryPolicy`], its default, and the checks that
//! refuse an invalid one.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::classify::grpc::{GrpcMethod, GrpcName, GrpcRules};
use crate::classify::{ClassifyHttp, DefaultClassifier};
use crate::engine::backoff::Backoff;
use crate::engine::breaker::Breaker;
use crate::engine::policy::{
    GuardShapes, RetryAfterMode, RetryEvent, RetryPolicy, Settings, Shared,
};
use crate::engine::policy_guards::{Guards, ReplicaSet, RetryBudget};
use crate::engine::rng::entropy_seed;
use crate::error::ConfigError;
use crate::error::config::{MAX_THROTTLE_WINDOW, MIN_THROTTLE_WINDOW};
use hosts::check_breaker;

mod grpc;
mod hosts;
mod sending;
mod throttling;
mod timer;

/// Builds a [`RetryPolicy`]; every setter documents its default. Invalid values are reported by
/// [`build`](RetryPolicyBuilder::build) as a [`ConfigError`], never by a panic.
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, RetryPolicy};
///
/// let policy = RetryPolicy::builder()
///     .backoff(Backoff::exponential(Duration::from_millis(50)).with_max_delay(Duration::from_secs(2)))
///     .max_retries(5)
///     .max_elapsed(Duration::from_secs(10))
///     .build()?;
/// # Ok::<(), stagger::ConfigError>(())
/// ```
// The inherent impl of `RetryPolicyBuilder`: the limits here, and a file of `builder/` for each group
// of settings: `throttling.rs`, `sending.rs`, `grpc.rs`, `hosts.rs`, `timer.rs`.
#[must_use]
pub struct RetryPolicyBuilder {
    settings: Settings,
    /// The rules of `grpc_method`, by the names given, checked by `build`.
    grpc_methods: Vec<(String, GrpcMethod)>,
    host_cooldown: bool,
    breaker: Option<Breaker>,
    adaptive_throttle: Option<f64>,
    adaptive_throttle_window: Duration,
    budget: Budget,
    seed: Option<u64>,
    /// The replica sets of names the policy sends to, one per name.
    replicas: Vec<ReplicaSet>,
}

/// The budget a builder will give its policy.
#[derive(Debug)]
enum Budget {
    /// A [`RetryBudget::default`] of its own, opened by `build`.
    Default,
    /// The account of a [`RetryBudget`], shared with whatever else holds a clone of it.
    Given(RetryBudget),
    /// None: `budget(None)`.
    Off,
}

impl fmt::Debug for RetryPolicyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicyBuilder")
            .field("backoff", &self.settings.backoff)
            .field("throttle_backoff", &self.settings.throttle_backoff)
            .field("host_cooldown", &self.host_cooldown)
            .field("breaker", &self.breaker)
            .field("replicas", &self.replicas)
            .field("adaptive_throttle", &self.adaptive_throttle)
            .field("adaptive_throttle_window", &self.adaptive_throttle_window)
            .field("replay_buffer", &self.settings.replay_buffer)
            .field("hedge_after", &self.settings.hedge_after)
            .field("max_retries", &self.settings.max_retries)
            .field("max_elapsed", &self.settings.max_elapsed)
            .field("attempt_timeout", &self.settings.attempt_timeout)
            .field("max_retry_after", &self.settings.max_retry_after)
            .field("retry_after", &self.settings.retry_after)
            .field("idempotency", &self.settings.idempotency)
            .field("grpc", &self.settings.grpc)
            .field("grpc_methods", &self.grpc_methods)
            .field(
                "grpc_send_max_elapsed",
                &self.settings.grpc_send_max_elapsed,
            )
            .field("budget", &self.budget)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl RetryPolicy {
    /// A builder starting from the defaults.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::RetryPolicy;
    ///
    /// let policy = RetryPolicy::builder().max_retries(5).build()?;
    /// assert_eq!(policy.max_retries(), 5);
    /// assert_eq!(policy.max_elapsed(), Some(Duration::from_secs(30))); // not set: the default
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn builder() -> RetryPolicyBuilder {
        RetryPolicyBuilder::new()
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
            settings: Settings {
                backoff: Backoff::exponential(RetryPolicy::DEFAULT_INITIAL_DELAY),
                throttle_backoff: RetryPolicy::DEFAULT_THROTTLE_BACKOFF,
                max_retries: RetryPolicy::DEFAULT_MAX_RETRIES,
                max_elapsed: Some(RetryPolicy::DEFAULT_MAX_ELAPSED),
                attempt_timeout: Some(RetryPolicy::DEFAULT_ATTEMPT_TIMEOUT),
                max_retry_after: RetryPolicy::DEFAULT_MAX_RETRY_AFTER,
                // The enum's own `#[default]`: one place says what the default is.
                retry_after: RetryAfterMode::default(),
                idempotency: true,
                backoff_on_refusal: false,
                replay_buffer: RetryPolicy::DEFAULT_REPLAY_BUFFER,
                hedge_after: None,
                classifier: Box::new(DefaultClassifier),
                custom_classifier: false,
                on_retry: None,
                grpc: GrpcRules::default(),
                grpc_send_max_elapsed: false,
                // Set by `build`, from the fields below.
                shapes: GuardShapes {
                    host_cooldown: false,
                    breaker: None,
                    adaptive_throttle: None,
                    retry_throttling: None,
                },
                timer: None,
            },
            grpc_methods: Vec::new(),
            host_cooldown: false,
            breaker: Some(Breaker::default()),
            adaptive_throttle: None,
            adaptive_throttle_window: RetryPolicy::DEFAULT_ADAPTIVE_THROTTLE_WINDOW,
            budget: Budget::Default,
            seed: None,
            replicas: Vec::new(),
        }
    }

    /// Sets the backoff. Defaults to [`Backoff::exponential`] from 100 ms (base 2, 20 s cap, full jitter).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, Jitter, RetryPolicy};
    ///
    /// let backoff = Backoff::exponential(Duration::from_millis(250))
    ///     .with_max_delay(Duration::from_secs(5))
    ///     .with_jitter(Jitter::Equal);
    /// let policy = RetryPolicy::builder().backoff(backoff).build()?;
    /// assert_eq!(policy.backoff().max_delay(), Duration::from_secs(5));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.settings.backoff = backoff;
        self
    }

    /// Sets the most retries after the first attempt. Defaults to 10
    /// ([`RetryPolicy::DEFAULT_MAX_RETRIES`]); `u32::MAX` is unlimited in practice, `0` never retries.
    ///
    /// Why 10: the count is a backstop, not what ends a call that keeps failing. Ten retries of the
    /// default backoff (ceilings 100 ms, 200 ms, … capped at 20 s) reach past the 30 s deadline, so a
    /// call is bounded by its deadline and by the retry budget, the two limits that mean something to a
    /// caller and to a server: it rides out a backend restart of several seconds, where three retries
    /// (700 ms of ceilings) were spent inside a one-second restart, and the budget keeps a fleet's
    /// retries to 20 % of its requests however many each call may make.
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
        self.settings.max_retries = max_retries;
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
    ///
    /// `None` removes the deadline: only `max_retries`, the budget and `attempt_timeout` bound a call.
    ///
    /// ```
    /// # use stagger::RetryPolicy;
    /// let policy = RetryPolicy::builder().max_elapsed(None).build()?;
    /// assert_eq!(policy.max_elapsed(), None);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn max_elapsed(mut self, max_elapsed: impl Into<Option<Duration>>) -> Self {
        self.settings.max_elapsed = max_elapsed.into();
        self
    }

    /// Sets the time limit of one attempt, until the response's head (status and headers) arrives: an
    /// attempt that exceeds it is dropped, which cancels it, and is judged a timeout, which is retried
    /// like any timeout when the request is idempotent or carries an `Idempotency-Key`, and the retry
    /// budget pays for it: a timeout's retry costs four retries, paid by the requests of the last
    /// seconds, or, for the calls of a new budget's first window, by its starting credit (see
    /// [`RetryBudget`], "Timeouts"). Defaults to 10 s ([`RetryPolicy::DEFAULT_ATTEMPT_TIMEOUT`]).
    ///
    /// It nests inside the deadline: an attempt gets `min(attempt_timeout, time left)`. When the retries
    /// stop on a timed-out attempt, the call ends with an [`Error`](crate::Error) whose
    /// [`is_attempt_timeout`](crate::Error::is_attempt_timeout) is true. The body of a response that
    /// arrived in time is not limited: reading it is the caller's business. Zero is refused by
    /// [`build`](Self::build).
    ///
    /// # A host that drops connections
    ///
    /// A host behind a firewall that drops packets, or a dead host behind a live route, never refuses
    /// a connection: its SYNs go unanswered. Without a connect timeout of the client's own, the attempt
    /// waits until `attempt_timeout` and is judged a timeout, which cannot be told from one that came
    /// after the request was sent: a `POST` without an `Idempotency-Key` is not sent again, and a
    /// `GET`'s retry costs four of the budget. Set the client's connect timeout, shorter than this one
    /// (`reqwest::ClientBuilder::connect_timeout`, hyper-util's `HttpConnector::set_connect_timeout`):
    /// its failure is a connect error, which says the request never left, and is retried for any
    /// method, at the price of one retry.
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
    /// // A new client: the budget's starting credit pays for retrying its first timeouts.
    /// let policy = RetryPolicy::builder()
    ///     .attempt_timeout(Duration::from_secs(2))
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
    pub fn attempt_timeout(mut self, attempt_timeout: impl Into<Option<Duration>>) -> Self {
        self.settings.attempt_timeout = attempt_timeout.into();
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
    /// assert_eq!(impatient.start().decide(attempt, None), Decision::Stop(StopReason::RetryAfterTooLong));
    ///
    /// // Waiting needs a deadline that leaves room for it, too.
    /// let patient = RetryPolicy::builder()
    ///     .max_retry_after(Duration::from_secs(300))
    ///     .max_elapsed(Duration::from_secs(600))
    ///     .build()?;
    /// let decision = patient.start().decide(attempt, None);
    /// assert!(matches!(decision, Decision::Retry(delay) if delay >= Duration::from_secs(120)));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn max_retry_after(mut self, max_retry_after: Duration) -> Self {
        self.settings.max_retry_after = max_retry_after;
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
    /// assert_eq!(policy.start().decide(attempt, None), Decision::Retry(Duration::from_secs(3)));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn retry_after(mut self, mode: RetryAfterMode) -> Self {
        self.settings.retry_after = mode;
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
    /// assert_eq!(checked.start().decide(post, None), Decision::Stop(StopReason::NotIdempotent));
    ///
    /// let deduplicating_server = RetryPolicy::builder().idempotency_check(false).build()?;
    /// assert!(matches!(deduplicating_server.start().decide(post, None), Decision::Retry(_)));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn idempotency_check(mut self, enabled: bool) -> Self {
        self.settings.idempotency = enabled;
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
    ///
    /// `None` turns the budget off: only `max_retries` and `max_elapsed` limit the retries.
    ///
    /// ```
    /// # use stagger::RetryPolicy;
    /// let policy = RetryPolicy::builder().budget(None).build()?;
    /// assert!(policy.budget().is_none());
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn budget(mut self, budget: impl Into<Option<RetryBudget>>) -> Self {
        self.budget = match budget.into() {
            Some(budget) => Budget::Given(budget),
            None => Budget::Off,
        };
        self
    }

    /// Sets whether a call that a guard refuses still waits, before it ends, the delay its retry
    /// would have waited: when the budget or adaptive throttling refuses its retry, or the breaker
    /// fails it fast (a call refused before its first attempt waits its first backoff delay).
    /// Defaults to `false`: a refused call ends at once, with what it has.
    ///
    /// A caller that loops on failures (a consumer that polls, a worker that reconnects, a long poll)
    /// sends its next call as soon as the last ends: while a dependency is down and the guards refuse
    /// at once, such a loop turns as fast as the CPU allows, and its first attempts are what the
    /// dependency meets. With this on, each refused call takes as long as its retry would have, and
    /// the loop's pace is the backoff's, whatever the guards decide. AWS's SDKs made the same rule
    /// their default for long-polling calls in 2026. It is off by default because a service that
    /// answers its own callers would make each of them wait for a retry that will not be sent; set
    /// it on the policy of a loop, or on one request with
    /// [`Overrides`](crate::Overrides).
    ///
    /// ```
    /// use stagger::RetryPolicy;
    ///
    /// assert!(!RetryPolicy::default().backoff_on_refusal());
    /// let poller = RetryPolicy::builder().backoff_on_refusal(true).build()?;
    /// assert!(poller.backoff_on_refusal());
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn backoff_on_refusal(mut self, wait: bool) -> Self {
        self.settings.backoff_on_refusal = wait;
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
    ///     policy.start().decide(Attempt::new(Outcome::RetrySafe(Reason::Connect)), None)
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
    ///
    /// A gRPC call's answers go to the classifier too, with the policy's gRPC rules: the
    /// [`DefaultClassifier`] gives them gRPC's verdict (the codes of
    /// [`grpc_retry_on`](Self::grpc_retry_on) and of each method's
    /// [`grpc_method`](Self::grpc_method) rule), so a classifier that falls back to it refines that
    /// verdict and keeps the rest: pushback, opt-outs, transparent retries.
    pub fn classifier(mut self, classifier: impl ClassifyHttp) -> Self {
        self.settings.classifier = Box::new(classifier);
        self.settings.custom_classifier = true;
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
    /// let decision = policy.start().decide(Attempt::new(Outcome::RetrySafe(Reason::Connect)), None);
    /// assert!(matches!(decision, Decision::Retry(_)));
    /// assert_eq!(RETRIES.load(Ordering::Relaxed), 1);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn on_retry(mut self, hook: impl Fn(&RetryEvent) + Send + Sync + 'static) -> Self {
        self.settings.on_retry = Some(Box::new(hook));
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
    /// let shrinking = Backoff::exponential(Duration::from_secs(1)).with_base(0.5);
    /// let error = RetryPolicy::builder().backoff(shrinking).build().unwrap_err();
    /// assert_eq!(error, ConfigError::InvalidBase(0.5));
    /// assert_eq!(error.to_string(), "backoff base must be a finite number >= 1.0, got 0.5");
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn build(mut self) -> Result<RetryPolicy, ConfigError> {
        for (name, rule) in &self.grpc_methods {
            let parsed =
                GrpcName::parse(name).ok_or_else(|| ConfigError::GrpcMethodName(name.clone()))?;
            self.settings.grpc.set(parsed, *rule);
        }
        self.settings.backoff.validate()?;
        self.settings.throttle_backoff.validate()?;
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
        if let Some(max_elapsed) = self.settings.max_elapsed.filter(Duration::is_zero) {
            return Err(ConfigError::MaxElapsed(max_elapsed));
        }
        crate::observe::metrics::prepare();
        if let Some(timeout) = self.settings.attempt_timeout.filter(Duration::is_zero) {
            return Err(ConfigError::AttemptTimeout(timeout));
        }
        if let Some(delay) = self.settings.hedge_after.filter(Duration::is_zero) {
            return Err(ConfigError::HedgeAfter(delay));
        }
        if let Some(breaker) = &self.breaker {
            check_breaker(breaker)?;
        }
        let budget = match self.budget {
            Budget::Default => Some(RetryBudget::default()),
            Budget::Given(budget) => Some(budget),
            Budget::Off => None,
        };
        self.settings.shapes = GuardShapes {
            host_cooldown: self.host_cooldown,
            breaker: self.breaker,
            adaptive_throttle: (self.adaptive_throttle).map(|k| (k, self.adaptive_throttle_window)),
            // A service config's, which its policies give the guards (`GrpcPolicies`).
            retry_throttling: None,
        };
        let seed = self.seed.unwrap_or_else(entropy_seed);
        let guards = Arc::new(Guards::new(&self.settings.shapes, seed, self.replicas));
        Ok(RetryPolicy {
            shared: Arc::new(Shared {
                settings: self.settings,
                budget,
                guards,
            }),
        })
    }
}
