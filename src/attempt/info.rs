//! What a call ends with, besides its result: what its retries did ([`RetryInfo`]) and why they
//! stopped ([`StopReason`]).

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

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
    /// The request's host is down ([`Breaker`](crate::Breaker)): the request failed fast, or was held
    /// for the host past the breaker's bound or the deadline, unsent; or a retry would have gone to
    /// it, and the call ended with what it had.
    HostDown,
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
            Self::HostDown => "host_down",
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
            Self::HostDown => "host down",
        })
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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RetryInfo {
    pub(crate) attempts: u32,
    pub(crate) transparent: u32,
    pub(crate) slept: Duration,
    pub(crate) cooldown: Duration,
    pub(crate) hedges: u32,
    pub(crate) stop: Option<StopReason>,
    /// The replicas the attempts reached, for a call to a name with a replica set.
    /// A thin pointer: the field costs every `RetryInfo` 8 bytes, set or not.
    pub(crate) replicas: Option<Arc<Vec<SocketAddr>>>,
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

    /// The addresses of the replicas the call's attempts reached, in the order the attempts ended
    /// (a replica once per attempt), for a call to a name with a
    /// [`ReplicaSet`](crate::ReplicaSet); empty for any other call, and for one that sent nothing.
    ///
    /// ```
    /// use stagger::RetryInfo;
    ///
    /// assert!(RetryInfo::default().replicas().is_empty());
    /// ```
    pub fn replicas(&self) -> &[SocketAddr] {
        self.replicas.as_deref().map_or(&[], Vec::as_slice)
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

    /// What a call answered with a success at its first attempt did: one attempt, no sleep, stopped
    /// for [`Success`](StopReason::Success).
    ///
    /// Such a call's response carries no `RetryInfo`: putting one into a response's extensions
    /// allocates them (two allocations and a hash map), which was most of what the retry layer cost a
    /// healthy call. [`of`](Self::of) reads a response's, this when it has none.
    pub const FIRST_SUCCESS: Self = Self {
        attempts: 1,
        transparent: 0,
        slept: Duration::ZERO,
        cooldown: Duration::ZERO,
        hedges: 0,
        stop: Some(StopReason::Success),
        replicas: None,
    };

    /// What the call of a response did, from the response's extensions: the `RetryInfo` the
    /// adapter put there, or [`FIRST_SUCCESS`](Self::FIRST_SUCCESS) when there is none (a call
    /// answered with a success at its first attempt, which the adapters do not mark). Works for
    /// `http::Response` and `reqwest::Response` alike (`response.extensions()`).
    ///
    /// ```
    /// use stagger::{RetryInfo, StopReason};
    ///
    /// let first_try = http::Response::new(());
    /// assert_eq!(RetryInfo::of(first_try.extensions()), RetryInfo::FIRST_SUCCESS);
    /// assert_eq!(RetryInfo::of(first_try.extensions()).stop_reason(), Some(StopReason::Success));
    /// ```
    pub fn of(extensions: &http::Extensions) -> Self {
        extensions
            .get::<Self>()
            .cloned()
            .unwrap_or(Self::FIRST_SUCCESS)
    }

    /// Whether it is worth a response's extensions: anything but a success at the first attempt.
    pub(crate) fn worth_reporting(&self) -> bool {
        *self != Self::FIRST_SUCCESS
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
            replicas: None,
        }
    }
}
