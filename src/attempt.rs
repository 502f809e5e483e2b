//! What goes into the state machine and what comes out of it: an [`Attempt`] in, a [`Decision`] out,
//! and, when the retries stop, the [`RetryInfo`] and [`StopReason`] a call ends with.

use std::fmt;
use std::time::Duration;

use crate::classify::{Outcome, Reason};

/// Why a request's retries stopped; recorded in [`RetryInfo`].
///
/// What a caller does next depends on it:
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// # let policy = RetryPolicy::builder().backoff(Backoff::fixed(Duration::from_millis(10))).build().unwrap();
/// let refused = || async { Err::<(), _>("connection refused") };
/// let error = stagger::retry(&policy, refused, |_| Outcome::RetrySafe(Reason::Connect))
///     .await
///     .unwrap_err();
/// let next = match error.info().stop_reason() {
///     Some(StopReason::MaxRetries | StopReason::Budget | StopReason::Deadline) => "still failing",
///     Some(StopReason::NotIdempotent) => "may have been applied: check before sending again",
///     Some(StopReason::Fatal) => "will not work later either",
///     _ => "something else",
/// };
/// assert_eq!(next, "still failing");
/// assert_eq!(StopReason::MaxRetries.to_string(), "max retries reached");
/// # }
/// ```
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
    /// The deadline (`max_elapsed`) passed, or the next retry would have ended past it.
    Deadline,
    /// The retry budget is spent.
    Budget,
    /// The delay the server asked for (`Retry-After`, or a rate-limit header: see
    /// [`server_delay`](crate::server_delay)) is longer than `max_retry_after`.
    RetryAfterTooLong,
    /// The inner service failed to become ready for a retry; its `poll_ready` error is returned.
    NotReady,
    /// The host's cooldown (its hold, or the request's turn in its pace) would outlast
    /// `max_retry_after` or the deadline, so the request was not sent (see
    /// [`RetryPolicyBuilder::host_cooldown`](crate::RetryPolicyBuilder::host_cooldown)).
    Cooldown,
    /// Adaptive throttling rejected the attempt locally, because the backend has been refusing most of
    /// what the client sent (see
    /// [`RetryPolicyBuilder::adaptive_throttle`](crate::RetryPolicyBuilder::adaptive_throttle)).
    Throttled,
    /// The server asked the client not to retry: gRPC's `grpc-retry-pushback-ms` with a negative or
    /// malformed value (gRPC's retry design, A6).
    Pushback,
    /// The request's own rule opts it out of a retry the policy would otherwise make: a gRPC method
    /// marked [`GrpcMethod::no_retries`](crate::classify::GrpcMethod::no_retries), or whose codes
    /// ([`GrpcMethod::retry_on`](crate::classify::GrpcMethod::retry_on)) leave out the status it
    /// failed with.
    OptedOut,
    /// A supervised task reached its restart limit (see
    /// [`RestartPolicyBuilder::max_restarts`](crate::RestartPolicyBuilder::max_restarts)).
    MaxRestarts,
}

impl StopReason {
    /// A stable `snake_case` token for the stop reason, what a log query or an alert matches on: the
    /// variant's name (`max_retries`, `deadline`, `budget`, `not_idempotent`, …), as the `stop.reason`
    /// field of the `tracing` events and the `stop.reason` label of the metrics carry it. Its
    /// [`Display`](fmt::Display) is a phrase for people, which the error messages use.
    ///
    /// ```
    /// use stagger::StopReason;
    ///
    /// assert_eq!(StopReason::MaxRetries.as_str(), "max_retries");
    /// assert_eq!(StopReason::RetryAfterTooLong.as_str(), "retry_after_too_long");
    /// assert_eq!(StopReason::MaxRetries.to_string(), "max retries reached");
    /// ```
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Fatal => "fatal",
            Self::NotIdempotent => "not_idempotent",
            Self::NotReplayable => "not_replayable",
            Self::MaxRetries => "max_retries",
            Self::Deadline => "deadline",
            Self::Budget => "budget",
            Self::RetryAfterTooLong => "retry_after_too_long",
            Self::NotReady => "not_ready",
            Self::Cooldown => "cooldown",
            Self::Throttled => "throttled",
            Self::MaxRestarts => "max_restarts",
            Self::Pushback => "pushback",
            Self::OptedOut => "opted_out",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Success => "success",
            Self::Fatal => "not retryable",
            Self::NotIdempotent => "not idempotent",
            Self::NotReplayable => "request cannot be replayed",
            Self::MaxRetries => "max retries reached",
            Self::Deadline => "deadline reached",
            Self::Budget => "retry budget exhausted",
            Self::RetryAfterTooLong => "retry-after exceeds max_retry_after",
            Self::NotReady => "service not ready",
            Self::Cooldown => "host cooling down",
            Self::Throttled => "throttled locally",
            Self::MaxRestarts => "restart limit reached",
            Self::Pushback => "server asked not to retry",
            Self::OptedOut => "opted out of retries",
        })
    }
}

/// What the state machine answers for one attempt.
///
/// ```
/// use std::time::Duration;
/// use stagger::adapter::{Attempt, Decision};
/// use stagger::{Outcome, Reason, RetryPolicy, StopReason};
///
/// let mut state = RetryPolicy::builder().max_retries(1).build()?.start();
/// let refused = Attempt::new(Outcome::RetrySafe(Reason::Connect));
/// match state.decide(refused, None) {
///     // Full jitter under the first ceiling, 100 ms.
///     Decision::Retry(delay) => assert!(delay <= Duration::from_millis(100)),
///     Decision::Stop(reason) => panic!("stopped: {reason}"),
/// }
/// state.begin_retry(None).unwrap();
/// assert_eq!(state.decide(refused, None), Decision::Stop(StopReason::MaxRetries));
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Sleep this long, then send the request again.
    Retry(Duration),
    /// Return the last attempt's result as it is.
    Stop(StopReason),
}

/// What one attempt produced, as the state machine needs it.
///
/// An adapter builds one from the classifier's [`Outcome`] and what it knows of the request and the
/// response; here a `429` to a `GET`, with `Retry-After: 5`:
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::{HeaderValue, StatusCode};
/// use stagger::adapter::{Attempt, Decision};
/// use stagger::{Outcome, Reason, RetryPolicy, parse_retry_after};
///
/// let too_many = Outcome::RetrySafe(Reason::Status(StatusCode::TOO_MANY_REQUESTS));
/// let retry_after = parse_retry_after(&HeaderValue::from_static("5"), SystemTime::now());
/// let attempt = Attempt::new(too_many).retry_after(retry_after);
/// match RetryPolicy::default().start().decide(attempt, None) {
///     Decision::Retry(delay) => assert!(delay >= Duration::from_secs(5)),
///     Decision::Stop(reason) => panic!("stopped: {reason}"),
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    pub(crate) outcome: Outcome,
    pub(crate) idempotent: bool,
    pub(crate) replayable: bool,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) throttled: bool,
    /// The server asked for no retry (gRPC's pushback).
    pub(crate) refused_retry: bool,
    /// The server timed this retry (gRPC's pushback): the backoff starts over after it (A6).
    pub(crate) restarts_backoff: bool,
    /// The request's own rule opts it out of the retry its outcome would get (a gRPC method's).
    pub(crate) opted_out: bool,
    /// The server's application never saw the attempt (a gRPC call's refused connection,
    /// `REFUSED_STREAM`, graceful `GOAWAY`): A6's transparent retry, which `max_retries` and
    /// `grpc-previous-rpc-attempts` do not count.
    pub(crate) transparent: bool,
    /// What the answer tells the host's cooldown.
    pub(crate) signal: Signal,
}

impl Attempt {
    /// An attempt with this classified outcome, of an idempotent, replayable request, without `Retry-After`.
    ///
    /// ```
    /// use stagger::adapter::Attempt;
    /// use stagger::{Outcome, Reason};
    ///
    /// let timeout = Outcome::RetryIfIdempotent(Reason::Timeout);
    /// let attempt = Attempt::new(timeout);
    /// assert_eq!(attempt, Attempt::new(timeout).idempotent(true).replayable(true).retry_after(None));
    /// ```
    pub const fn new(outcome: Outcome) -> Self {
        Self {
            outcome,
            idempotent: true,
            replayable: true,
            retry_after: None,
            throttled: false,
            refused_retry: false,
            restarts_backoff: false,
            opted_out: false,
            transparent: false,
            signal: Signal::Nothing,
        }
    }

    /// An attempt that ran past `attempt_timeout` and was dropped: a timeout, after which the server may
    /// have acted.
    pub(crate) const fn timed_out(idempotent: bool) -> Self {
        Self::new(Outcome::RetryIfIdempotent(Reason::Timeout)).idempotent(idempotent)
    }

    /// Whether sending the request again is harmless (see
    /// [`RequestView::is_idempotent`](crate::classify::RequestView::is_idempotent)). Defaults to `true`.
    ///
    /// ```
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// let policy = RetryPolicy::default();
    /// let reset = Attempt::new(Outcome::RetryIfIdempotent(Reason::ConnectionClosed));
    /// assert!(matches!(policy.start().decide(reset, None), Decision::Retry(_)));
    /// let post = reset.idempotent(false);
    /// assert_eq!(policy.start().decide(post, None), Decision::Stop(StopReason::NotIdempotent));
    /// ```
    pub const fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Whether the request can be sent again at all (a streaming body cannot). Defaults to `true`.
    ///
    /// ```
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// let streamed = Attempt::new(Outcome::RetrySafe(Reason::Connect)).replayable(false);
    /// let decision = RetryPolicy::default().start().decide(streamed, None);
    /// assert_eq!(decision, Decision::Stop(StopReason::NotReplayable));
    /// ```
    pub const fn replayable(mut self, replayable: bool) -> Self {
        self.replayable = replayable;
        self
    }

    /// How long the server asked the client to wait before retrying, from
    /// [`server_delay`](crate::server_delay) (or [`parse_retry_after`](crate::parse_retry_after) for
    /// `Retry-After` alone). Defaults to `None`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// // Longer than the policy's `max_retry_after` (30 s by default): not waited for.
    /// let overloaded = Attempt::new(Outcome::RetrySafe(Reason::Other("overloaded")))
    ///     .retry_after(Some(Duration::from_secs(45)));
    /// let decision = RetryPolicy::default().start().decide(overloaded, None);
    /// assert_eq!(decision, Decision::Stop(StopReason::RetryAfterTooLong));
    /// ```
    pub const fn retry_after(mut self, retry_after: Option<Duration>) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// Whether the server is throttling the client rather than failing: a `429`, or a `503` with a
    /// rate-limit header. Without a usable [`retry_after`](Self::retry_after), such an attempt waits on
    /// the policy's [`throttle_backoff`](crate::RetryPolicyBuilder::throttle_backoff) instead of its
    /// backoff. Defaults to `false`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Backoff, Outcome, Reason, RetryPolicy};
    ///
    /// let policy = RetryPolicy::builder()
    ///     .backoff(Backoff::fixed(Duration::from_millis(10)))
    ///     .throttle_backoff(Backoff::fixed(Duration::from_secs(2)))
    ///     .build()?;
    /// let too_many = Attempt::new(Outcome::RetrySafe(Reason::Other("429")));
    /// assert_eq!(policy.start().decide(too_many, None), Decision::Retry(Duration::from_millis(10)));
    /// let throttled = too_many.throttled(true);
    /// assert_eq!(policy.start().decide(throttled, None), Decision::Retry(Duration::from_secs(2)));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub const fn throttled(mut self, throttled: bool) -> Self {
        self.throttled = throttled;
        self
    }

    /// How long the response asked every request to its host to wait: the server delay of a `429` or
    /// a `503`, or the reset of a quota a response of any status says is spent. Recorded for the host
    /// when the policy has [`host_cooldown`](crate::RetryPolicyBuilder::host_cooldown) on, and only for
    /// a request whose view names a host. Defaults to `None`.
    pub const fn cooldown(mut self, cooldown: Option<Duration>) -> Self {
        self.signal = match cooldown {
            Some(asked) => Signal::Accepted {
                spent: Some(asked),
                pace: None,
            },
            None => Signal::Nothing,
        };
        self
    }

    /// Whether the server asked the client not to retry (gRPC's `grpc-retry-pushback-ms` with a
    /// negative or malformed value): a retryable failure then stops with [`StopReason::Pushback`].
    /// Defaults to `false`.
    ///
    /// ```
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::classify::GrpcCode;
    /// use stagger::{Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// let unavailable = Attempt::new(Outcome::RetrySafe(Reason::Grpc(GrpcCode::Unavailable)));
    /// let decision = RetryPolicy::default().start().decide(unavailable.refused_retry(true), None);
    /// assert_eq!(decision, Decision::Stop(StopReason::Pushback));
    /// ```
    pub const fn refused_retry(mut self, refused: bool) -> Self {
        self.refused_retry = refused;
        self
    }

    /// Whether the backoff starts over after this attempt's retry: gRPC's pushback, after which A6
    /// resets the backoff to its first delay.
    pub(crate) const fn restarts_backoff(mut self, restarts: bool) -> Self {
        self.restarts_backoff = restarts;
        self
    }

    /// Whether the request's own rule opts it out of retries (a gRPC method marked
    /// [`GrpcMethod::no_retries`](crate::classify::GrpcMethod::no_retries), or whose codes leave out
    /// the status it failed with): the call then stops with [`StopReason::OptedOut`] rather than as
    /// fatal, so that its events say why. Defaults to `false`.
    ///
    /// ```
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, RetryPolicy, StopReason};
    ///
    /// let decision = RetryPolicy::default().start().decide(Attempt::new(Outcome::Fatal).opted_out(true), None);
    /// assert_eq!(decision, Decision::Stop(StopReason::OptedOut));
    /// ```
    pub const fn opted_out(mut self, opted_out: bool) -> Self {
        self.opted_out = opted_out;
        self
    }

    /// Whether the server's application never saw this attempt, so that a gRPC call retries it
    /// *transparently* (A6): HTTP/2 `REFUSED_STREAM`, a graceful `GOAWAY` for a stream the server did
    /// not process. The first such attempt of a call is retried at once, without the backoff, and is
    /// not counted against `max_retries` nor in the `grpc-previous-rpc-attempts` the server is told
    /// ([`RetryInfo::transparent`]); it is still one of [`RetryInfo::attempts`], and its retry is paid
    /// from the budget. A later one is an ordinary retry. Defaults to `false`; the gRPC adapter sets
    /// it.
    ///
    /// Once a call, at once, and not counted against `max_retries`:
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// let mut state = RetryPolicy::builder().max_retries(0).build()?.start();
    /// let refused = Attempt::new(Outcome::RetrySafe(Reason::RefusedStream)).transparent(true);
    /// assert_eq!(state.decide(refused, None), Decision::Retry(Duration::ZERO));
    /// state.begin_retry(None).unwrap();
    /// assert_eq!(state.decide(refused, None), Decision::Stop(StopReason::MaxRetries));
    /// assert_eq!((state.info().attempts(), state.info().transparent()), (2, 1));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub const fn transparent(mut self, transparent: bool) -> Self {
        self.transparent = transparent;
        self
    }

    /// What the answer tells the host's cooldown, as the HTTP adapters read it.
    pub(crate) const fn signal(mut self, signal: Signal) -> Self {
        self.signal = signal;
        self
    }

    /// The classified outcome.
    ///
    /// ```
    /// # use stagger::adapter::Attempt;
    /// # use stagger::Outcome;
    /// assert_eq!(Attempt::new(Outcome::Fatal).outcome(), Outcome::Fatal);
    /// ```
    pub const fn outcome(&self) -> Outcome {
        self.outcome
    }
}

/// What happened to a request across its attempts.
///
/// The adapters insert it into the final response's extensions, and every error they return carries it
/// ([`Error::info`](crate::Error::info)):
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetryInfo {
    pub(crate) attempts: u32,
    pub(crate) transparent: u32,
    pub(crate) slept: Duration,
    pub(crate) cooldown: Duration,
    pub(crate) hedges: u32,
    pub(crate) stop: Option<StopReason>,
}

impl RetryInfo {
    /// Attempts made, the first included; an attempt cut short by the deadline counts.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use http::StatusCode;
    /// # use stagger::adapter::Attempt;
    /// # use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    /// # let backoff = Backoff::fixed(Duration::from_millis(10));
    /// # let mut state = RetryPolicy::builder().backoff(backoff).build().unwrap().start();
    /// # let unavailable = Reason::Status(StatusCode::SERVICE_UNAVAILABLE);
    /// # let _ = state.decide(Attempt::new(Outcome::RetrySafe(unavailable)), None);
    /// # state.begin_retry(None).unwrap();
    /// # let _ = state.decide(Attempt::new(Outcome::Success), None);
    /// // A 503, then, 10 ms later, a 200:
    /// let info = state.info();
    /// assert_eq!(info.attempts(), 2);
    /// ```
    pub const fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The retries made: `attempts() - 1`, and zero when no attempt was made.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use http::StatusCode;
    /// # use stagger::adapter::Attempt;
    /// # use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    /// # let backoff = Backoff::fixed(Duration::from_millis(10));
    /// # let mut state = RetryPolicy::builder().backoff(backoff).build().unwrap().start();
    /// # let unavailable = Reason::Status(StatusCode::SERVICE_UNAVAILABLE);
    /// # let _ = state.decide(Attempt::new(Outcome::RetrySafe(unavailable)), None);
    /// # state.begin_retry(None).unwrap();
    /// # let _ = state.decide(Attempt::new(Outcome::Success), None);
    /// // A 503, then, 10 ms later, a 200:
    /// let info = state.info();
    /// assert_eq!(info.retries(), 1);
    /// assert_eq!(stagger::RetryInfo::default().retries(), 0);
    /// ```
    pub const fn retries(&self) -> u32 {
        self.attempts.saturating_sub(1)
    }

    /// Of the [`attempts`](Self::attempts), those a gRPC call retried transparently, because the
    /// server's application never saw them (a refused connection, `REFUSED_STREAM`): gRPC's retry
    /// design (A6) does not count them against `max_retries`, nor in the
    /// `grpc-previous-rpc-attempts` the server is told. Always zero for any other call.
    pub const fn transparent(&self) -> u32 {
        self.transparent
    }

    /// Time spent sleeping between attempts: the delays decided, not the attempts' own time.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use http::StatusCode;
    /// # use stagger::adapter::Attempt;
    /// # use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    /// # let backoff = Backoff::fixed(Duration::from_millis(10));
    /// # let mut state = RetryPolicy::builder().backoff(backoff).build().unwrap().start();
    /// # let unavailable = Reason::Status(StatusCode::SERVICE_UNAVAILABLE);
    /// # let _ = state.decide(Attempt::new(Outcome::RetrySafe(unavailable)), None);
    /// # state.begin_retry(None).unwrap();
    /// # let _ = state.decide(Attempt::new(Outcome::Success), None);
    /// // A 503, then, 10 ms later, a 200:
    /// let info = state.info();
    /// assert_eq!(info.slept(), Duration::from_millis(10));
    /// ```
    pub const fn slept(&self) -> Duration {
        self.slept
    }

    /// Time spent before the first attempt, waiting for the host's pause to end (see
    /// [`RetryPolicyBuilder::host_cooldown`](crate::RetryPolicyBuilder::host_cooldown)); not part of
    /// [`slept`](Self::slept). Zero when the host was not cooling down.
    pub const fn cooldown(&self) -> Duration {
        self.cooldown
    }

    /// Hedged attempts started (see
    /// [`RetryPolicyBuilder::hedge_after`](crate::RetryPolicyBuilder::hedge_after)); each is also one
    /// of [`attempts`](Self::attempts) once it has answered or been dropped.
    ///
    /// ```
    /// # #[cfg(feature = "tower")]
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use stagger::{RetryInfo, RetryLayer, RetryPolicy};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// // The first call takes a second, the next answers at once.
    /// let calls = AtomicU32::new(0);
    /// let server = service_fn(|_: http::Request<()>| {
    ///     let slow = calls.fetch_add(1, Ordering::SeqCst) == 0;
    ///     async move {
    ///         if slow {
    ///             tokio::time::sleep(Duration::from_secs(1)).await;
    ///         }
    ///         Ok::<_, std::convert::Infallible>(http::Response::new(()))
    ///     }
    /// });
    /// let policy = RetryPolicy::builder().hedge_after(Duration::from_millis(50)).build().unwrap();
    /// let start = tokio::time::Instant::now();
    /// let response = RetryLayer::new(policy).layer(server).oneshot(http::Request::new(())).await.unwrap();
    /// let info = response.extensions().get::<RetryInfo>().unwrap();
    /// assert_eq!(start.elapsed(), Duration::from_millis(50)); // the hedge's answer
    /// assert_eq!((info.attempts(), info.hedges()), (2, 1)); // the slow one was dropped
    /// # }
    /// # #[cfg(not(feature = "tower"))]
    /// # fn main() {}
    /// ```
    pub const fn hedges(&self) -> u32 {
        self.hedges
    }

    /// Why the attempts stopped; `None` while they go on.
    ///
    /// ```
    /// use stagger::adapter::Attempt;
    /// use stagger::{Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// let mut state = RetryPolicy::default().start();
    /// let _ = state.decide(Attempt::new(Outcome::RetrySafe(Reason::Connect)), None);
    /// assert_eq!(state.info().stop_reason(), None); // a retry is due
    /// state.begin_retry(None).unwrap();
    /// let _ = state.decide(Attempt::new(Outcome::Success), None);
    /// assert_eq!(state.info().stop_reason(), Some(StopReason::Success));
    /// ```
    pub const fn stop_reason(&self) -> Option<StopReason> {
        self.stop
    }

    /// No attempt made, stopped for `reason`.
    #[cfg(feature = "tower")]
    pub(crate) const fn stopped_before_sending(reason: StopReason) -> Self {
        Self {
            attempts: 0,
            transparent: 0,
            slept: Duration::ZERO,
            cooldown: Duration::ZERO,
            hedges: 0,
            stop: Some(reason),
        }
    }
}

/// What an answer from a host tells its cooldown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Signal {
    /// No answer (an error), or one the cooldown does not read.
    #[default]
    Nothing,
    /// The host answered without refusing; `spent` is the wait its headers ask for when they say its
    /// quota is spent (the next request would be refused), and `pace` the interval its stated rate
    /// allows (`RateLimit-Policy`), if it states one.
    Accepted {
        spent: Option<Duration>,
        pace: Option<Duration>,
    },
    /// The host refused the request and asked for `asked` (a `429`, or a `503` with a server delay);
    /// `pace` as for an accept.
    Refused {
        asked: Duration,
        pace: Option<Duration>,
    },
}

impl Signal {
    /// Whether the signal can put its host into the table: anything but a plain accept.
    pub(crate) fn starts_a_cooldown(self) -> bool {
        matches!(
            self,
            Self::Accepted { spent: Some(_), .. } | Self::Refused { .. }
        )
    }
}

/// A restart about to happen, as the hook of
/// [`RestartPolicyBuilder::on_restart`](crate::RestartPolicyBuilder::on_restart) sees it: which
/// restart, how the run before it went (the error it ended with among it), and how long until the
/// task runs again.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use stagger::{Backoff, RestartEvent, RestartPolicy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let events = Arc::new(Mutex::new(Vec::new()));
/// let seen = Arc::clone(&events);
/// let policy = RestartPolicy::builder()
///     .backoff(Backoff::fixed(Duration::from_millis(100)))
///     .healthy_after(Duration::from_secs(1))
///     .on_restart(move |event: &RestartEvent| {
///         let error = event.error.map(|error| error.to_string());
///         seen.lock().unwrap().push((event.restart, event.failures, event.uptime, event.delay, error));
///     })
///     .build()
///     .unwrap();
/// // Up for 2 s, then failing at once twice.
/// let mut run = 0;
/// let task = || {
///     run += 1;
///     let uptime = if run == 1 { Duration::from_secs(2) } else { Duration::ZERO };
///     async move {
///         tokio::time::sleep(uptime).await;
///         Err::<(), _>("connection reset")
///     }
/// };
/// let stop = tokio::time::sleep(Duration::from_millis(2150));
/// stagger::supervise(&policy, task, stop).await.unwrap();
///
/// let events = events.lock().unwrap();
/// let reset = Some("connection reset".to_owned());
/// // A healthy run: restarted at once, no failure in a row.
/// assert_eq!(events[0], (1, 0, Duration::from_secs(2), Duration::ZERO, reset.clone()));
/// // Then one failure, which waits the backoff.
/// assert_eq!(events[1], (2, 1, Duration::ZERO, Duration::from_millis(100), reset));
/// # }
/// ```
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct RestartEvent<'a> {
    /// Which restart this is, counting from 1 over the whole supervision.
    pub restart: u32,
    /// The runs in a row, this one included, that ended before
    /// [`healthy_after`](crate::RestartPolicyBuilder::healthy_after); 0 when the run that ended was
    /// healthy.
    pub failures: u32,
    /// How long the run that ended stayed up.
    pub uptime: Duration,
    /// How long until the task runs again.
    pub delay: Duration,
    /// Whether the run ended with an error; `false` when it returned `Ok` and
    /// [`restart_on_return`](crate::RestartPolicyBuilder::restart_on_return) is on.
    pub failed: bool,
    /// The error the run ended with, when the adapter has it: [`supervise`](crate::supervise())
    /// gives its task's; `stagger::tower::Restarting` has none (tower's `Reconnect` hands a failed
    /// connection's error to the call that met it).
    pub error: Option<&'a dyn fmt::Display>,
}

impl fmt::Debug for RestartEvent<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestartEvent")
            .field("restart", &self.restart)
            .field("failures", &self.failures)
            .field("uptime", &self.uptime)
            .field("delay", &self.delay)
            .field("failed", &self.failed)
            .field("error", &self.error.map(ToString::to_string))
            .finish()
    }
}
