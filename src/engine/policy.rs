//! The retry policy and the per-request state machine that applies it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::classify::grpc::GrpcRules;
use crate::classify::{ClassifyHttp, GrpcCodes, GrpcName, Reason, RequestView};
use crate::engine::backoff::{Backoff, Jitter};
use crate::engine::breaker::Breaker;
use crate::engine::policy_guards::{Guards, RetryBudget};
use crate::time::Timer;

/// How a server's `Retry-After` combines with the backoff delay.
///
/// In every mode but [`Ignore`](RetryAfterMode::Ignore), a `Retry-After` longer than the policy's
/// `max_retry_after` stops the retries and the response is handed back as received.
///
/// Set with [`RetryPolicyBuilder::retry_after`](crate::RetryPolicyBuilder::retry_after). The delay each mode gives before retrying a `503`
/// that carries `Retry-After: 2`, under a 10 ms backoff:
///
/// ```
/// use std::time::Duration;
/// use http::StatusCode;
/// use stagger::adapter::{Attempt, Decision};
/// use stagger::{Backoff, Outcome, Reason, RetryAfterMode, RetryPolicy};
///
/// let delay = |mode: RetryAfterMode| {
///     let backoff = Backoff::fixed(Duration::from_millis(10));
///     let policy = RetryPolicy::builder().backoff(backoff).retry_after(mode).build().unwrap();
///     let unavailable = Outcome::RetrySafe(Reason::Status(StatusCode::SERVICE_UNAVAILABLE));
///     let attempt = Attempt::new(unavailable).retry_after(Some(Duration::from_secs(2)));
///     match policy.start().decide(attempt, None) {
///         Decision::Retry(delay) => delay,
///         Decision::Stop(reason) => panic!("stopped: {reason}"),
///     }
/// };
/// assert_eq!(delay(RetryAfterMode::Ignore), Duration::from_millis(10)); // the backoff alone
/// assert_eq!(delay(RetryAfterMode::Strict), Duration::from_secs(2)); // max(2 s, backoff)
/// let spread = delay(RetryAfterMode::Spread); // 2 s + U[0, max(10 ms, 2 s)]
/// assert!(Duration::from_secs(2) <= spread && spread <= Duration::from_secs(4));
/// ```
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
    /// (`examples/herd/`) the retries of those refused in the first wave piled up at its end, to 0.11×
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

/// One retry about to happen, as a [`RetryPolicyBuilder::on_retry`](crate::RetryPolicyBuilder::on_retry) hook sees it.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use stagger::{Backoff, Outcome, Reason, RetryEvent, RetryPolicy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let events = Arc::new(Mutex::new(Vec::new()));
/// let seen = Arc::clone(&events);
/// let policy = RetryPolicy::builder()
///     .backoff(Backoff::fixed(Duration::from_millis(10)))
///     .max_retries(2)
///     .on_retry(move |event: &RetryEvent| {
///         assert_eq!(event.retry_after, None); // no server asked for a delay here
///         seen.lock().unwrap().push((event.attempt, event.delay, event.reason));
///     })
///     .build()
///     .unwrap();
/// let refused = || async { Err::<(), _>("connection refused") };
/// let _ = stagger::retry(&policy, refused, |_| Outcome::RetrySafe(Reason::Connect)).await;
///
/// let ten = Duration::from_millis(10);
/// assert_eq!(*events.lock().unwrap(), [(1, ten, Reason::Connect), (2, ten, Reason::Connect)]);
/// # }
/// ```
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

pub(crate) type RetryHook = dyn Fn(&RetryEvent) + Send + Sync;

/// The rules for retrying: backoff, limits, budget, `Retry-After` and classification.
///
/// Cheap to clone; clones share one retry budget and one seed, so a policy is meant to be built once and
/// shared by every request of a client. Each request runs its own [`RetryState`](crate::adapter::RetryState) from
/// [`RetryPolicy::start`]. Differently configured policies share a budget when they are built with
/// clones of one [`RetryBudget`] (see [`RetryPolicyBuilder::budget`](crate::RetryPolicyBuilder::budget)).
///
/// # Default
///
/// | setting | default |
/// |---|---|
/// | backoff | [`Backoff::exponential`] from 100 ms: base 2, `max_delay` 20 s, full jitter |
/// | `max_retries` | 10, a backstop: the deadline and the budget end a call that keeps failing |
/// | `max_elapsed` (one deadline across attempts and sleeps) | 30 s |
/// | `attempt_timeout` (each attempt, to the response's head) | 10 s |
/// | `max_retry_after` | 30 s |
/// | `retry_after` | [`RetryAfterMode::Spread`] |
/// | idempotency rule | on |
/// | budget | [`RetryBudget::default`], its own: ratio 0.2 (20 % extra load), at least 10 retries/s, over a 10 s window; a timeout's retry costs 4, paid by recent requests or the starting credit |
/// | seed | from OS entropy |
/// | classifier | [`DefaultClassifier`](crate::classify::DefaultClassifier) |
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, RetryPolicy};
///
/// let policy = RetryPolicy::default();
/// assert_eq!(policy.backoff(), &Backoff::exponential(Duration::from_millis(100)));
/// assert_eq!(policy.max_retries(), 10);
/// assert_eq!(policy.max_elapsed(), Some(Duration::from_secs(30)));
/// assert_eq!(policy.attempt_timeout(), Some(Duration::from_secs(10)));
/// assert_eq!(policy.budget().map(|budget| budget.ratio()), Some(0.2));
///
/// // Build it once per client; a clone is a reference count, and draws on the same budget.
/// let for_another_task = policy.clone();
/// # let _ = for_another_task;
/// ```
// The inherent impl of `RetryPolicy`: its settings here, `builder()` in `builder/mod.rs`, `start()`
// in `state.rs`, beside the state it starts.
#[derive(Clone)]
pub struct RetryPolicy {
    pub(crate) shared: Arc<Shared>,
}

/// What every clone of a policy shares: the settings it was built with, the budget it draws on, and
/// what its requests keep together as they run.
pub(crate) struct Shared {
    pub(crate) settings: Settings,
    /// The retry budget, beside the settings rather than in the guards: a budget's shape is its
    /// account's (what a request deposits, the floor), so a reload that changes it opens another
    /// account (carrying the old one's), which the calls started before it do not draw on.
    pub(crate) budget: Option<RetryBudget>,
    /// Shared with the other policies of one gRPC service config (`RetryPolicy::derive`), and with
    /// every policy a [`LivePolicy`](crate::LivePolicy) is reloaded with, which reshape them in place.
    pub(crate) guards: Arc<Guards>,
}

/// The shapes of the guards a policy was built with: what its getters report, and what a reload
/// gives the guards it keeps ([`Guards::reshape`]). The guards apply the shapes of the last policy a
/// [`LivePolicy`](crate::LivePolicy) was given, to every call; a policy never reloaded has the
/// shapes its guards have.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GuardShapes {
    pub(crate) host_cooldown: bool,
    pub(crate) breaker: Option<Breaker>,
    /// Adaptive throttling's `k` and window, when it is on.
    pub(crate) adaptive_throttle: Option<(f64, Duration)>,
    /// gRPC's retry throttling: `maxTokens`, and `tokenRatio` in thousandths (a service config's).
    pub(crate) retry_throttling: Option<(u32, u64)>,
}

/// The settings a policy was built with: read by the state machine, never written.
pub(crate) struct Settings {
    pub(crate) backoff: Backoff,
    pub(crate) throttle_backoff: Backoff,
    pub(crate) max_retries: u32,
    pub(crate) max_elapsed: Option<Duration>,
    pub(crate) attempt_timeout: Option<Duration>,
    pub(crate) max_retry_after: Duration,
    pub(crate) retry_after: RetryAfterMode,
    pub(crate) idempotency: bool,
    /// The most bytes of a body that cannot be copied kept for a retry; 0 for none.
    pub(crate) replay_buffer: usize,
    /// How long an attempt waits before a hedge races it, if hedging is on.
    pub(crate) hedge_after: Option<Duration>,
    pub(crate) classifier: Box<dyn ClassifyHttp>,
    /// The classifier was set with `classifier`: an adapter that judges with a closure of its own
    /// would ignore it.
    pub(crate) custom_classifier: bool,
    pub(crate) on_retry: Option<Box<RetryHook>>,
    pub(crate) grpc: GrpcRules,
    /// `max_elapsed` is sent as a gRPC call's deadline (`grpc-timeout`), not only the caller's own.
    pub(crate) grpc_send_max_elapsed: bool,
    /// A call a guard refuses still waits the delay its retry would have waited before it ends.
    pub(crate) backoff_on_refusal: bool,
    /// The guards' shapes this policy was built with.
    pub(crate) shapes: GuardShapes,
    /// The timer of one's own its calls sleep on; `None`: the timer of what runs each call.
    pub(crate) timer: Option<Arc<dyn Timer>>,
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shared.settings;
        f.debug_struct("RetryPolicy")
            .field("backoff", &s.backoff)
            .field("max_retries", &s.max_retries)
            .field("max_elapsed", &s.max_elapsed)
            .field("attempt_timeout", &s.attempt_timeout)
            .field("max_retry_after", &s.max_retry_after)
            .field("retry_after", &s.retry_after)
            .field("idempotency", &s.idempotency)
            .field("budget", &self.shared.budget)
            .field("seed", &self.shared.guards.seed())
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
    ///
    /// ```
    /// # use stagger::RetryPolicy;
    /// assert_eq!(RetryPolicy::default().backoff().initial(), RetryPolicy::DEFAULT_INITIAL_DELAY);
    /// ```
    pub const DEFAULT_INITIAL_DELAY: Duration = Duration::from_millis(100);
    /// The default number of retries after the first attempt: 10, a backstop behind the deadline and
    /// the budget (see [`RetryPolicyBuilder::max_retries`](crate::RetryPolicyBuilder::max_retries)).
    ///
    /// ```
    /// # use stagger::RetryPolicy;
    /// assert_eq!(RetryPolicy::default().max_retries(), RetryPolicy::DEFAULT_MAX_RETRIES);
    /// ```
    pub const DEFAULT_MAX_RETRIES: u32 = 10;
    /// The default longest `Retry-After` that is waited for: 30 s.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use http::StatusCode;
    /// # use stagger::adapter::{Attempt, Decision};
    /// # use stagger::{Outcome, Reason, RetryPolicy, StopReason};
    /// let too_many = Outcome::RetrySafe(Reason::Status(StatusCode::TOO_MANY_REQUESTS));
    /// let longer = RetryPolicy::DEFAULT_MAX_RETRY_AFTER + Duration::from_secs(1);
    /// let attempt = Attempt::new(too_many).retry_after(Some(longer));
    /// let decision = RetryPolicy::default().start().decide(attempt, None);
    /// assert_eq!(decision, Decision::Stop(StopReason::RetryAfterTooLong));
    /// ```
    pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
    /// The default deadline of a whole call, attempts and sleeps included: 30 s.
    ///
    /// ```
    /// # use stagger::RetryPolicy;
    /// assert_eq!(RetryPolicy::default().max_elapsed(), Some(RetryPolicy::DEFAULT_MAX_ELAPSED));
    /// ```
    pub const DEFAULT_MAX_ELAPSED: Duration = Duration::from_secs(30);
    /// The default time limit of one attempt: 10 s.
    ///
    /// ```
    /// # use stagger::RetryPolicy;
    /// let policy = RetryPolicy::default();
    /// assert_eq!(policy.attempt_timeout(), Some(RetryPolicy::DEFAULT_ATTEMPT_TIMEOUT));
    /// ```
    pub const DEFAULT_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

    /// The default schedule of a throttled attempt (a `429`, or a `503` with a rate-limit header)
    /// without a usable server delay: exponential from 500 ms, base 2, `max_delay` 20 s, equal jitter,
    /// so 250–500 ms, then 500 ms–1 s, 1–2 s, … See
    /// [`RetryPolicyBuilder::throttle_backoff`](crate::RetryPolicyBuilder::throttle_backoff) for why.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Jitter, RetryPolicy};
    ///
    /// let throttle = RetryPolicy::DEFAULT_THROTTLE_BACKOFF;
    /// assert_eq!(throttle.initial(), Duration::from_millis(500));
    /// assert_eq!(throttle.jitter(), Jitter::Equal);
    /// assert_eq!(RetryPolicy::default().throttle_backoff(), &throttle);
    /// ```
    pub const DEFAULT_THROTTLE_BACKOFF: Backoff =
        Backoff::exponential(Duration::from_millis(500)).with_jitter(Jitter::Equal);

    /// The default replay buffer: 64 KiB of a body that cannot be copied are kept for a retry (see
    /// [`RetryPolicyBuilder::replay_buffer`](crate::RetryPolicyBuilder::replay_buffer)).
    ///
    /// ```
    /// # use stagger::RetryPolicy;
    /// assert_eq!(RetryPolicy::default().replay_buffer(), RetryPolicy::DEFAULT_REPLAY_BUFFER);
    /// ```
    pub const DEFAULT_REPLAY_BUFFER: usize = 64 * 1024;

    /// The default window of adaptive throttling: 10 s (see
    /// [`RetryPolicyBuilder::adaptive_throttle_window`](crate::RetryPolicyBuilder::adaptive_throttle_window)).
    pub const DEFAULT_ADAPTIVE_THROTTLE_WINDOW: Duration = Duration::from_secs(10);

    /// The backoff in use.
    pub fn backoff(&self) -> &Backoff {
        &self.shared.settings.backoff
    }

    /// The schedule of throttled attempts without a usable server delay.
    pub fn throttle_backoff(&self) -> &Backoff {
        &self.shared.settings.throttle_backoff
    }

    /// How long an attempt waits before a hedge races it, if hedging is on (see
    /// [`RetryPolicyBuilder::hedge_after`](crate::RetryPolicyBuilder::hedge_after)).
    pub fn hedge_after(&self) -> Option<Duration> {
        self.shared.settings.hedge_after
    }

    /// Whether a call a guard refuses still waits the delay its retry would have waited before it
    /// ends (see [`RetryPolicyBuilder::backoff_on_refusal`](crate::RetryPolicyBuilder::backoff_on_refusal)).
    pub fn backoff_on_refusal(&self) -> bool {
        self.shared.settings.backoff_on_refusal
    }

    /// The most bytes of a streaming body kept for a retry (see
    /// [`RetryPolicyBuilder::replay_buffer`](crate::RetryPolicyBuilder::replay_buffer)); 0 when such bodies are sent once.
    pub fn replay_buffer(&self) -> usize {
        self.shared.settings.replay_buffer
    }

    /// Adaptive throttling's multiplier `k`, if it is on (see
    /// [`RetryPolicyBuilder::adaptive_throttle`](crate::RetryPolicyBuilder::adaptive_throttle)).
    pub fn adaptive_throttle(&self) -> Option<f64> {
        self.shared
            .settings
            .shapes
            .adaptive_throttle
            .map(|(k, _)| k)
    }

    /// Adaptive throttling's window, if it is on.
    #[cfg(feature = "serde")]
    pub(crate) fn adaptive_throttle_window(&self) -> Option<Duration> {
        self.shared
            .settings
            .shapes
            .adaptive_throttle
            .map(|(_, window)| window)
    }

    /// Whether a pause a host asks for holds every request to it (see
    /// [`RetryPolicyBuilder::host_cooldown`](crate::RetryPolicyBuilder::host_cooldown)).
    pub fn host_cooldown(&self) -> bool {
        self.shared.settings.shapes.host_cooldown
    }

    /// The breaker, if the policy has one (see
    /// [`RetryPolicyBuilder::breaker`](crate::RetryPolicyBuilder::breaker)).
    pub fn breaker(&self) -> Option<Breaker> {
        self.shared.settings.shapes.breaker
    }

    /// The most retries after the first attempt.
    pub fn max_retries(&self) -> u32 {
        self.shared.settings.max_retries
    }

    /// The deadline of a whole call, if there is one.
    pub fn max_elapsed(&self) -> Option<Duration> {
        self.shared.settings.max_elapsed
    }

    /// The time limit of one attempt, if there is one.
    pub fn attempt_timeout(&self) -> Option<Duration> {
        self.shared.settings.attempt_timeout
    }

    /// The HTTP classifier in use.
    ///
    /// ```
    /// use stagger::classify::{AttemptResult, RequestView};
    /// use stagger::{Outcome, Reason, RetryPolicy};
    ///
    /// let policy = RetryPolicy::default();
    /// let get = http::Request::get("http://example.com/").body(()).unwrap();
    /// let request = RequestView::new(get.method(), get.uri(), get.headers());
    /// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    /// let outcome = policy.classifier().classify(&request, &AttemptResult::Error(&refused));
    /// assert_eq!(outcome, Outcome::RetrySafe(Reason::Connect));
    /// ```
    pub fn classifier(&self) -> &dyn ClassifyHttp {
        &*self.shared.settings.classifier
    }

    /// The retry budget this policy draws on, if it has one: its shape for a log line, or a clone to
    /// build another policy that shares it.
    ///
    /// ```
    /// use stagger::RetryPolicy;
    ///
    /// let reads = RetryPolicy::default();
    /// // A policy for writes, with fewer retries, drawing on the same account:
    /// let shared = reads.budget().unwrap().clone();
    /// let writes = RetryPolicy::builder().max_retries(1).budget(shared).build()?;
    /// assert_eq!(writes.budget().unwrap().ratio(), 0.2);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn budget(&self) -> Option<&RetryBudget> {
        self.shared.budget.as_ref()
    }
}

impl RetryPolicy {
    /// The gRPC status codes retried for a method without a rule of its own (see
    /// [`RetryPolicyBuilder::grpc_retry_on`](crate::RetryPolicyBuilder::grpc_retry_on)).
    ///
    /// ```
    /// use stagger::classify::GrpcCodes;
    /// use stagger::RetryPolicy;
    ///
    /// assert_eq!(RetryPolicy::default().grpc_retry_on(), GrpcCodes::DEFAULT);
    /// ```
    pub fn grpc_retry_on(&self) -> GrpcCodes {
        self.shared.settings.grpc.codes
    }

    /// The gRPC status codes retried for the method `full_name` (`/package.Service/Method`, or
    /// `package.Service/Method`): its rule's, or the policy's.
    ///
    /// ```
    /// use stagger::classify::{GrpcCodes, GrpcMethod};
    /// use stagger::RetryPolicy;
    ///
    /// let policy = RetryPolicy::builder()
    ///     .grpc_method("/shop.Payments/Charge", GrpcMethod::no_retries())
    ///     .build()?;
    /// assert_eq!(policy.grpc_codes_of("/shop.Payments/Charge"), GrpcCodes::NONE);
    /// assert_eq!(policy.grpc_codes_of("shop.Payments/Charge"), GrpcCodes::NONE);
    /// assert_eq!(policy.grpc_codes_of("/shop.Catalog/List"), GrpcCodes::DEFAULT);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn grpc_codes_of(&self, full_name: &str) -> GrpcCodes {
        self.shared
            .settings
            .grpc
            .codes_of(GrpcName::parse(full_name))
    }

    /// Whether `max_elapsed` is sent to a gRPC server as the call's deadline (see
    /// [`RetryPolicyBuilder::grpc_send_max_elapsed`](crate::RetryPolicyBuilder::grpc_send_max_elapsed)).
    pub fn grpc_send_max_elapsed(&self) -> bool {
        self.shared.settings.grpc_send_max_elapsed
    }

    /// The policy's gRPC rules, which judging a gRPC call applies.
    pub(crate) fn grpc_rules(&self) -> &GrpcRules {
        &self.shared.settings.grpc
    }

    /// The timer of one's own its calls sleep on, if it was given one
    /// ([`RetryPolicyBuilder::timer`](crate::RetryPolicyBuilder::timer)).
    pub(crate) fn timer(&self) -> Option<&Arc<dyn Timer>> {
        self.shared.settings.timer.as_ref()
    }

    /// Whether sending `request` twice is harmless, as the policy judges it: an idempotent HTTP method
    /// or an `Idempotency-Key` ([`RequestView::is_idempotent`]), or a gRPC method marked
    /// [`GrpcMethod::idempotent`]. What decides whether an ambiguous failure is retried, and whether
    /// the request may be hedged.
    pub(crate) fn is_idempotent(&self, request: &RequestView<'_>) -> bool {
        request.is_idempotent()
            || request
                .grpc_method()
                .is_some_and(|name| self.shared.settings.grpc.is_idempotent(name))
    }
}
