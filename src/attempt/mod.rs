//! What goes into the state machine and what comes out of it: an [`Attempt`] in, a [`Decision`] out,
//! and, when the retries stop, the [`RetryInfo`] and [`StopReason`] a call ends with (`info.rs`); and
//! the [`RestartEvent`] of a supervised task's restart (`restart.rs`), which the observers read too;
//! and the [`ResendCount`] a resent request carries to the layers below (`resend.rs`).

mod info;
mod resend;
mod restart;

pub use info::{RetryInfo, StopReason};
pub use resend::ResendCount;
pub use restart::RestartEvent;

use std::time::Duration;

use crate::classify::{Outcome, Reason};

/// A call's two time limits: which one ended an attempt, or the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeLimit {
    /// `attempt_timeout`: the attempt is dropped and judged a timeout.
    Attempt,
    /// The call's deadline (`max_elapsed`, or the caller's): the call ends.
    Deadline,
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
    pub(crate) signal: HostSignal,
    /// The attempt was answered (a response, whatever it says), not an error: the host is up.
    pub(crate) answered: bool,
}

impl Attempt {
    /// An attempt with this classified outcome, of an idempotent, replayable request, without
    /// `Retry-After`; an [`Outcome::RetryAfter`] is a [`Outcome::RetrySafe`] whose delay is the
    /// attempt's [`retry_after`](Self::retry_after).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::adapter::Attempt;
    /// use stagger::{Outcome, Reason};
    ///
    /// let timeout = Outcome::RetryIfIdempotent(Reason::Timeout);
    /// let attempt = Attempt::new(timeout);
    /// assert_eq!(attempt, Attempt::new(timeout).idempotent(true).replayable(true).retry_after(None));
    ///
    /// let named = Attempt::new(Outcome::RetryAfter(Reason::Connect, Duration::from_secs(2)));
    /// let floored = Attempt::new(Outcome::RetrySafe(Reason::Connect));
    /// assert_eq!(named, floored.retry_after(Some(Duration::from_secs(2))));
    /// ```
    pub const fn new(outcome: Outcome) -> Self {
        let (outcome, retry_after) = match outcome {
            Outcome::RetryAfter(reason, delay) => (Outcome::RetrySafe(reason), Some(delay)),
            other => (other, None),
        };
        Self {
            outcome,
            idempotent: true,
            replayable: true,
            retry_after,
            throttled: false,
            refused_retry: false,
            restarts_backoff: false,
            opted_out: false,
            transparent: false,
            signal: HostSignal::Nothing,
            answered: false,
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
            Some(asked) => HostSignal::Accepted {
                spent: Some(asked),
                pace: None,
            },
            None => HostSignal::Nothing,
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

    /// Whether the attempt was answered by its host (a response of any status), rather than ended by
    /// an error: to the breaker, the host is up.
    pub(crate) const fn answered(mut self, answered: bool) -> Self {
        self.answered = answered;
        self
    }

    /// Whether the attempt was answered by its host (a response of any status).
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) const fn is_answered(&self) -> bool {
        self.answered
    }

    /// What the answer tells the host's cooldown, as the HTTP adapters read it.
    pub(crate) const fn signal(mut self, signal: HostSignal) -> Self {
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

/// What an answer from a host tells its cooldown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum HostSignal {
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

impl HostSignal {
    /// Whether the signal can put its host into the table: anything but a plain accept.
    pub(crate) fn starts_a_cooldown(self) -> bool {
        matches!(
            self,
            Self::Accepted { spent: Some(_), .. } | Self::Refused { .. }
        )
    }
}
