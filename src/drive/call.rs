//! One call as every adapter drives it: each attempt against its time limit, the step after it, the
//! wait before a retry, and the answer the call ends with.
//!
//! The decisions are the state machine's ([`RetryState`]); this is the bookkeeping around them that
//! would otherwise be written once per adapter: which timer is running, the last response kept for a
//! deadline, and turning a stop into the call's result.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use crate::attempt::{Attempt, Decision, StopReason};
use crate::classify::RequestView;
use crate::drive::timer::{Timer, after, poll_zero_delay};
use crate::engine::state::{Limit, RetryState};
use crate::error::{Elapsed, Error};

/// How an attempt ended.
#[derive(Debug)]
pub(crate) enum Attempted<T> {
    /// It came back with this.
    Answered(T),
    /// It ran past `attempt_timeout` and was dropped.
    TimedOut,
    /// The deadline passed while it was in flight, and it was dropped.
    Deadline,
}

/// What a call ends with: the last response, or an error that says what the retries did.
pub(crate) type Final<Res, E> = Result<Res, Error<E>>;

/// What the call's one timer is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// An attempt is starting; its time limit is set if it has to wait.
    Idle,
    /// An attempt is waiting, under this limit (`None`: no limit).
    Attempt(Option<Limit>),
    /// Waiting before a retry.
    Pause(Pause),
    /// The pause is over; the inner service is getting ready, with the deadline's timer set or not.
    Ready(DeadlineTimer),
}

/// How a pause is waited out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    /// A zero delay: on the task's cooperative budget, with no timer.
    Yield,
    /// On the timer.
    Timer,
}

/// Whether the timer watches the deadline while the inner service gets ready for a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeadlineTimer {
    /// Not yet: it is set when the service first is not ready.
    Unset,
    /// Set (only the tower layer waits for its inner service's readiness).
    #[cfg(feature = "tower")]
    Set,
}

/// Where [`Call::decide`] finds the request of the attempt just judged (for the events it logs) and
/// the request for the retry.
pub(crate) trait Source<N> {
    /// The attempt's request as an HTTP request, if it is one.
    fn view(&self) -> Option<RequestView<'_>>;
    /// Whether [`next`](Self::next) can make a retry: asked before the retry is decided.
    fn replayable(&self) -> bool;
    /// The request for the retry; `again` says whether another retry may follow it.
    fn next(&mut self, again: bool) -> Option<N>;

    /// Whether a response retried is kept, for a deadline that passes later to hand back
    /// ([`Judge::KEEPS_LAST_RESPONSE`]).
    ///
    /// [`Judge::KEEPS_LAST_RESPONSE`]: crate::adapter::Judge::KEEPS_LAST_RESPONSE
    fn keeps_last_response(&self) -> bool {
        true
    }
}

/// `stagger::retry`'s operation: no request to log, and a retry is always possible.
impl Source<()> for () {
    fn view(&self) -> Option<RequestView<'_>> {
        None
    }

    fn replayable(&self) -> bool {
        true
    }

    fn next(&mut self, _again: bool) -> Option<()> {
        Some(())
    }
}

/// One call's retries as an adapter drives them.
#[derive(Debug)]
pub(crate) struct Call<Res> {
    retry: RetryState,
    timer: Timer,
    phase: Phase,
    /// The last response received, kept (with a deadline only) so that a deadline passing during a
    /// later attempt can hand it back; boxed, so that it costs the future of a request that never
    /// retries one pointer.
    last: Option<Box<Res>>,
}

impl<Res> Call<Res> {
    /// A call whose state is `retry`. A response it ends with does not carry the call's
    /// [`RetryInfo`] yet: the adapter reports it ([`Judge::report`]) as the call returns.
    ///
    /// [`Judge::report`]: crate::adapter::Judge::report
    pub(crate) fn new(retry: RetryState) -> Self {
        Self {
            retry,
            timer: Timer::default(),
            phase: Phase::Idle,
            last: None,
        }
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn retry(&self) -> &RetryState {
        &self.retry
    }

    /// Before the first attempt: `Ok(true)` when the request must first wait out its host's pause
    /// (with [`poll_pause`](Self::poll_pause), then [`begin_retry`](Self::begin_retry)), `Ok(false)`
    /// to send it at once, or `Err(final)` when the pause outlasts the policy's limits and the request
    /// is not sent. `view` is asked for only while some host is cooling down.
    #[inline]
    pub(crate) fn before_first<'v, E>(
        &mut self,
        view: impl FnOnce() -> Option<RequestView<'v>>,
    ) -> Result<bool, Final<Res, E>> {
        // A caller's deadline that has already passed (a gRPC call's `grpc-timeout`): nothing is
        // sent with no time to run.
        if self.retry.out_of_time() {
            self.retry.expired_before_sending(view().as_ref());
            return Err(self.at_deadline());
        }
        match self.retry.before_first(view) {
            Ok(None) => Ok(false),
            Ok(Some(wait)) => {
                self.pause_for(wait);
                Ok(true)
            }
            Err(rejected) => Err(Err(Error::from_rejected(rejected))),
        }
    }

    /// Waits out the pause before an attempt of `view` (the host's, before a first attempt; the
    /// backoff, before a retry), and then any pause its host asked for meanwhile (another request's
    /// response, while this one slept). `Ok` once the attempt may go, or `Err(final)` when a pause
    /// asked for meanwhile outlasts the policy's limits: before the first attempt a [`Rejected`] error,
    /// before a retry the last response received, or the [`Rejected`] error if there is none.
    ///
    /// [`Rejected`]: crate::Rejected
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn poll_resume<E>(
        &mut self,
        view: Option<&RequestView<'_>>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), Final<Res, E>>> {
        loop {
            ready!(self.poll_pause(cx));
            match self.recheck_pause(view) {
                Ok(true) => continue,
                Ok(false) => return Poll::Ready(Ok(())),
                Err(result) => return Poll::Ready(Err(result)),
            }
        }
    }

    /// When a pause before an attempt has ended: `Ok(true)` to wait again, `Ok(false)` to go on, or
    /// `Err(final)` (see [`poll_resume`](Self::poll_resume)).
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    #[inline]
    fn recheck_pause<E>(&mut self, view: Option<&RequestView<'_>>) -> Result<bool, Final<Res, E>> {
        match self.retry.recheck_pause(view) {
            Ok(None) => Ok(false),
            Ok(Some(wait)) => {
                self.pause_for(wait);
                Ok(true)
            }
            Err(rejected) => Err(match self.last.take() {
                Some(response) => Ok(*response),
                None => Err(Error::from_rejected(rejected)),
            }),
        }
    }

    /// Polls the attempt in flight. Its time limit — the earlier of `attempt_timeout` and the deadline —
    /// is set only when it first has to wait: an attempt answered at its first poll costs no timer and no
    /// clock read.
    #[inline]
    pub(crate) fn poll_attempt<F: Future + ?Sized>(
        &mut self,
        attempt: Pin<&mut F>,
        cx: &mut Context<'_>,
    ) -> Poll<Attempted<F::Output>> {
        if let Poll::Ready(output) = attempt.poll(cx) {
            self.phase = Phase::Idle;
            return Poll::Ready(Attempted::Answered(output));
        }
        self.poll_limit(cx)
    }

    /// While the attempt in flight (or a hedged pair of attempts) has not answered: ready with the limit
    /// that ended it, once one does. Sets the limit the first time.
    pub(crate) fn poll_limit<T>(&mut self, cx: &mut Context<'_>) -> Poll<Attempted<T>> {
        let limit = match self.phase {
            Phase::Attempt(limit) => limit,
            _ => {
                let limit = self.retry.attempt_limit().map(|(at, limit)| {
                    self.timer.set(at);
                    limit
                });
                self.phase = Phase::Attempt(limit);
                limit
            }
        };
        let Some(limit) = limit else {
            return Poll::Pending;
        };
        ready!(self.timer.poll(cx));
        self.phase = Phase::Idle;
        Poll::Ready(match limit {
            Limit::Attempt => Attempted::TimedOut,
            Limit::Deadline => Attempted::Deadline,
        })
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// The attempt is answered: its limit no longer runs.
    pub(crate) fn answered(&mut self) {
        self.phase = Phase::Idle;
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// The retries' state, to record what a hedged race set aside or started.
    pub(crate) fn retry_mut(&mut self) -> &mut RetryState {
        &mut self.retry
    }

    /// The step after an attempt of a request whose copy is held: `Continue(request)`, the next attempt's
    /// request from `source`, after the pause that [`poll_pause`](Self::poll_pause) waits out, or
    /// `Break(final)`, the call's result with [`RetryInfo`] recorded in it. The `source`
    /// gives the attempt's request, for the events logged, and the next one, told whether a retry may
    /// follow it.
    ///
    /// The state machine is told whether the source can make a retry before it decides, so that a retry
    /// it cannot send (a streamed body that did not fit the replay buffer) is never decided, slept,
    /// logged or counted. A failed result is dropped before the pause (so that its connection goes back
    /// to the pool, or is closed, now rather than after it), unless it is a response kept for the
    /// deadline. If `next` still cannot copy the request (a [`Replay`] that broke its contract), the
    /// result is returned as it is, stopped as not replayable.
    ///
    /// [`Replay`]: crate::adapter::Replay
    #[inline]
    pub(crate) fn decide<E, N>(
        &mut self,
        attempt: Attempt,
        answered: Attempted<Result<Res, E>>,
        source: &mut impl Source<N>,
    ) -> ControlFlow<Final<Res, E>, N> {
        let result = match answered {
            Attempted::Answered(result) => Some(result),
            Attempted::TimedOut => None,
            Attempted::Deadline => {
                self.retry.cut_by_deadline(source.view().as_ref());
                return ControlFlow::Break(self.at_deadline());
            }
        };
        let replayable = source.replayable();
        let decision = self
            .retry
            .decide(attempt.replayable(replayable), source.view().as_ref());
        let delay = match decision {
            Decision::Retry(delay) => delay,
            Decision::Stop(_) => return ControlFlow::Break(self.end(result)),
        };
        let Some(next) = source.next(self.retry.may_retry()) else {
            self.retry
                .abandon(StopReason::NotReplayable, source.view().as_ref());
            return ControlFlow::Break(self.end(result));
        };
        if let Some(Ok(response)) = result
            && self.retry.max_elapsed().is_some()
            && source.keeps_last_response()
        {
            self.last = Some(Box::new(response));
        }
        self.pause_for(delay);
        ControlFlow::Continue(next)
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// The step after the last attempt a request can have (it was sent without a copy): always the end.
    #[inline]
    pub(crate) fn decide_last<E>(
        &mut self,
        attempt: Attempt,
        answered: Attempted<Result<Res, E>>,
        request: Option<&RequestView<'_>>,
    ) -> Final<Res, E> {
        let result = match answered {
            Attempted::Answered(result) => Some(result),
            Attempted::TimedOut => None,
            Attempted::Deadline => {
                self.retry.cut_by_deadline(request);
                return self.at_deadline();
            }
        };
        self.retry.finish(attempt, request);
        self.end(result)
    }

    /// Starts a pause of `wait`, which [`poll_pause`](Self::poll_pause) waits out: a zero one on the
    /// task's cooperative budget, any other on the timer.
    fn pause_for(&mut self, wait: Duration) {
        self.phase = if wait.is_zero() {
            Phase::Pause(Pause::Yield)
        } else {
            self.timer.set(after(wait));
            Phase::Pause(Pause::Timer)
        };
    }

    /// Waits out the pause before a retry.
    pub(crate) fn poll_pause(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.phase {
            Phase::Pause(Pause::Yield) => ready!(poll_zero_delay(cx)),
            Phase::Pause(Pause::Timer) => ready!(self.timer.poll(cx)),
            Phase::Idle | Phase::Attempt(_) | Phase::Ready(_) => return Poll::Ready(()),
        }
        self.phase = Phase::Ready(DeadlineTimer::Unset);
        Poll::Ready(())
    }

    #[cfg(feature = "tower")]
    /// While the inner service gets ready for a retry: ready when the deadline passes (pending forever
    /// without one). The retry's decision left the deadline ahead; a slow `poll_ready` may overrun it.
    pub(crate) fn poll_deadline(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.phase == Phase::Ready(DeadlineTimer::Unset) {
            match self.retry.deadline() {
                Some(deadline) => self.timer.set(deadline),
                None => return Poll::Pending,
            }
            self.phase = Phase::Ready(DeadlineTimer::Set);
        }
        match self.phase {
            Phase::Ready(DeadlineTimer::Set) => self.timer.poll(cx),
            _ => Poll::Pending,
        }
    }

    /// Right before a retry is sent: `Err(final)` if the deadline has passed meanwhile, in which case
    /// the retry is not sent.
    pub(crate) fn begin_retry<E>(
        &mut self,
        request: Option<&RequestView<'_>>,
    ) -> Result<(), Final<Res, E>> {
        self.phase = Phase::Idle;
        match self.retry.begin_retry(request) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.at_deadline()),
        }
    }

    #[cfg(feature = "tower")]
    /// The deadline passed while the inner service was getting ready: the retry is not sent.
    pub(crate) fn deadline_before_sending<E>(
        &mut self,
        request: Option<&RequestView<'_>>,
    ) -> Final<Res, E> {
        self.retry.abandon(StopReason::Deadline, request);
        self.at_deadline()
    }

    #[cfg(feature = "tower")]
    /// The retry was due, but the held request refused to be copied for it (a [`Replay`] that broke its
    /// contract): the call ends with the last response received, or an error that says so.
    ///
    /// [`Replay`]: crate::adapter::Replay
    pub(crate) fn unsent<E>(&mut self, request: Option<&RequestView<'_>>) -> Final<Res, E> {
        self.retry.abandon(StopReason::NotReplayable, request);
        let info = self.retry.info();
        match self.last.take() {
            Some(response) => Ok(*response),
            None => Err(Error::unsent(info)),
        }
    }

    #[cfg(feature = "tower")]
    /// The inner service failed to become ready for a retry: its error ends the call. It says more
    /// about what went wrong than the response that was being retried.
    pub(crate) fn not_ready<E>(
        &mut self,
        error: E,
        request: Option<&RequestView<'_>>,
    ) -> Final<Res, E> {
        self.retry.abandon(StopReason::NotReady, request);
        Err(Error::from_inner(error, self.retry.info()))
    }

    /// The call's result after the deadline: the last response received, or an error that says so.
    fn at_deadline<E>(&mut self) -> Final<Res, E> {
        let info = self.retry.info();
        match self.last.take() {
            Some(response) => Ok(*response),
            None => {
                let max_elapsed = self.retry.max_elapsed().unwrap_or(Duration::ZERO);
                Err(Error::from_elapsed(Elapsed::deadline(max_elapsed, info)))
            }
        }
    }

    /// The call's result when the retries stop on an attempt: its own result, or, for an attempt that
    /// timed out, an error that says so.
    #[inline]
    fn end<E>(&mut self, result: Option<Result<Res, E>>) -> Final<Res, E> {
        self.last = None;
        let info = self.retry.info();
        match result {
            Some(Ok(response)) => Ok(response),
            Some(Err(error)) => Err(Error::from_inner(error, info)),
            // A timed-out attempt whose retry the deadline left no room for: the deadline is what
            // ended the call, and the error says so, as its `RetryInfo` does.
            None if info.stop_reason() == Some(StopReason::Deadline) => {
                let max_elapsed = self.retry.max_elapsed().unwrap_or(Duration::ZERO);
                Err(Error::from_elapsed(Elapsed::deadline(max_elapsed, info)))
            }
            None => {
                let timeout = self
                    .retry
                    .policy()
                    .attempt_timeout()
                    .unwrap_or(Duration::ZERO);
                Err(Error::from_elapsed(Elapsed::attempt(timeout, info)))
            }
        }
    }
}
