//! One call as every adapter drives it, step by step (the corridor of [`drive`](super)): before the
//! first attempt, each attempt under its time limit, the decision after it, the pause before a retry,
//! and the retry begun; and the answer the call ends with.
//!
//! The decisions are the state machine's ([`RetryState`]); this is the bookkeeping around them that
//! would otherwise be written once per adapter: which timer is running, the last response kept for a
//! deadline, what is held of the request, and turning a stop into the call's result.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use crate::attempt::{Attempt, Decision, StopReason, TimeLimit};
use crate::classify::RequestView;
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
use crate::drive::held::Held;
use crate::drive::kept::{Kept, Slot};
use crate::drive::timer::{Timer, after, poll_zero_delay};
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
use crate::engine::policy::RetryPolicy;
use crate::engine::state::RetryState;
use crate::error::{Elapsed, Error};
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
use crate::replay::{Judge, Replay, Sent};
use crate::time::Instant;

/// How an attempt ended.
#[derive(Debug)]
pub(crate) enum AttemptEnd<T> {
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
    /// An attempt is waiting, under this limit (`None`: no limit), a limit of the caller's own
    /// (`true`) or the policy's; and where the breaker's check of its silence is.
    Attempt(Option<(TimeLimit, bool)>, Silence),
    /// Waiting before a retry.
    Pause(Pause),
    /// The pause is over; the inner service is getting ready, with the deadline's timer set or not.
    Ready(DeadlineTimer),
    /// The call ended, a guard having refused it, and waited out its delay: its result is kept.
    Ended,
}

/// The breaker's check of an attempt's silence: the timer first fires when the attempt has gone
/// unanswered long past what its host takes, which counts as the host's failure, and is then set to
/// the attempt's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Silence {
    /// No check: no breaker, the host's round trip not known, or the limit comes first.
    None,
    /// The timer is set for it.
    Due,
    /// Counted: the timer is set to the limit.
    Counted,
}

/// [`Call::since`] when no attempt has waited.
const NOT_WAITING: u32 = u32::MAX;

/// How a pause is waited out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pause {
    /// A zero delay: on the task's cooperative budget, with no timer.
    Yield,
    /// On the timer.
    Timer,
    /// Held for a down host: on the timer (its next probe, the hold's end, the deadline), or until
    /// the host is back, whichever comes first.
    Held,
    /// A guard refused the call, which waits the delay its retry would have waited before it ends
    /// (`backoff_on_refusal`), with its result kept.
    Linger,
    /// The call ends unsent, its result kept, on the task's cooperative budget (see
    /// [`Call::end_after`]).
    Ending,
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

/// How a call begins, as [`Call::start`] says before its first attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Send the first attempt now.
    Now,
    /// Wait first ([`Call::poll_resume`]), then [`Call::begin`] the attempt: its host asked for a
    /// pause; or the call ends unsent, and `begin` (or `poll_resume`) hands back its result.
    AfterPause,
}

/// One call's retries as an adapter drives them.
#[derive(Debug)]
pub(crate) struct Call<Res, E> {
    retry: RetryState,
    timer: Timer,
    phase: Phase,
    /// The last attempt's result while a retry of it is due, so that a guard that ends the call
    /// before the retry is sent (its host found down, a pause past the limits) ends it with what it
    /// has, the answer or the error, and a deadline passing during a later attempt with the last
    /// response (where the protocol keeps it, `.1`); boxed, so that it costs the future of a request
    /// that never retries one pointer. Or the call's result, kept while it waits out a refusal.
    last: Slot<Res, E>,
    /// When the attempt in flight started to wait, in microseconds from the call's start
    /// ([`NOT_WAITING`]: it has not waited): its answer's time teaches the breaker what its host
    /// takes. A word, where an `Instant` would take two more in every request's future.
    since: u32,
}

impl<Res, E> Call<Res, E> {
    /// A call whose state is `retry`. A response it ends with does not carry the call's
    /// [`RetryInfo`] yet: the adapter reports it ([`Judge::report`]) as the call returns.
    ///
    /// [`Judge::report`]: crate::adapter::Judge::report
    pub(crate) fn new(retry: RetryState) -> Self {
        Self {
            retry,
            timer: Timer::default(),
            phase: Phase::Idle,
            last: Slot::empty(),
            since: NOT_WAITING,
        }
    }

    /// A call whose attempts block, and whose pauses sleep the calling thread
    /// (`stagger::blocking`).
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    pub(crate) fn blocking(retry: RetryState) -> Self {
        Self {
            timer: Timer::blocking(),
            ..Self::new(retry)
        }
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn retry(&self) -> &RetryState {
        &self.retry
    }

    /// Step 1, before the first attempt: send it [`Now`](Start::Now), or wait first
    /// ([`AfterPause`](Start::AfterPause)): out its host's pause, or, for a call that ends unsent
    /// (the pause outlasts the policy's limits, its host is down, adaptive throttling rejected it,
    /// the caller's deadline has passed), before its result is handed back (see
    /// [`end_after`](Self::end_after)). `view` is asked for only when the answer depends on the
    /// request's host, or to log an end.
    #[inline]
    pub(crate) fn start<'v>(&mut self, view: impl FnOnce() -> Option<RequestView<'v>>) -> Start {
        // A caller's deadline that has already passed (a gRPC call's `grpc-timeout`): nothing is
        // sent with no time to run.
        if self.retry.out_of_time() {
            self.retry.expired_before_sending(view().as_ref());
            let ended = self.at_deadline();
            self.end_after(ended, Duration::ZERO);
            return Start::AfterPause;
        }
        match self.retry.before_first(view) {
            Ok(None) => Start::Now,
            Ok(Some(wait)) => {
                self.pause_for(wait);
                Start::AfterPause
            }
            Err(rejected) => {
                let wait = self.retry.take_linger().unwrap_or_default();
                self.end_after(Err(Error::from_rejected(rejected)), wait);
                Start::AfterPause
            }
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
    pub(crate) fn poll_resume(
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
    fn recheck_pause(&mut self, view: Option<&RequestView<'_>>) -> Result<bool, Final<Res, E>> {
        if let Some(ended) = self.ended() {
            return Err(ended);
        }
        match self.retry.recheck_pause(view) {
            Ok(None) => Ok(false),
            Ok(Some(wait)) => {
                self.pause_for(wait);
                Ok(true)
            }
            Err(rejected) => Err(self.with_what_it_has(rejected)),
        }
    }

    /// Polls the attempt in flight. Its time limit — the earlier of `attempt_timeout` and the deadline —
    /// is set only when it first has to wait: an attempt answered at its first poll costs no timer and no
    /// clock read. `view` is the request's, asked for only once the attempt waits.
    #[inline]
    pub(crate) fn poll_attempt<'v, F: Future + ?Sized>(
        &mut self,
        attempt: Pin<&mut F>,
        cx: &mut Context<'_>,
        view: impl Fn() -> Option<RequestView<'v>>,
    ) -> Poll<AttemptEnd<F::Output>> {
        if let Poll::Ready(output) = attempt.poll(cx) {
            self.phase = Phase::Idle;
            return Poll::Ready(AttemptEnd::Answered(output));
        }
        self.poll_limit(cx, view)
    }

    /// While the attempt in flight (or a hedged pair of attempts) has not answered: ready with the limit
    /// that ended it, once one does. Sets the limit the first time, and the breaker's check of the
    /// attempt's silence, which counts its host's failure when it comes first.
    pub(crate) fn poll_limit<'v, T>(
        &mut self,
        cx: &mut Context<'_>,
        view: impl Fn() -> Option<RequestView<'v>>,
    ) -> Poll<AttemptEnd<T>> {
        let (mut limit, mut silence) = match self.phase {
            Phase::Attempt(limit, silence) => (limit, silence),
            _ => {
                let now = Instant::now();
                let limits = self.retry.attempt_limits(view().as_ref(), now);
                self.since = self.retry.offset(now).unwrap_or(NOT_WAITING);
                let silence = match (limits.silence, limits.cut) {
                    (Some(at), _) => {
                        self.timer.set(at, self.retry.policy().timer());
                        Silence::Due
                    }
                    (None, Some((at, ..))) => {
                        self.timer.set(at, self.retry.policy().timer());
                        Silence::None
                    }
                    (None, None) => Silence::None,
                };
                let limit = limits.cut.map(|(_, limit, own)| (limit, own));
                self.phase = Phase::Attempt(limit, silence);
                (limit, silence)
            }
        };
        loop {
            if limit.is_none() && silence != Silence::Due {
                return Poll::Pending;
            }
            ready!(self.timer.poll(cx));
            if silence != Silence::Due {
                break;
            }
            // Silent long past what its host takes, while the host answered nothing else: the
            // host's failure, now; then the attempt's own limit, from when it started.
            let view = view();
            let start = self
                .retry
                .at_offset(self.since)
                .unwrap_or_else(Instant::now);
            self.retry.count_silence(view.as_ref(), start);
            silence = Silence::Counted;
            let cut = self.retry.attempt_limits(view.as_ref(), start).cut;
            limit = cut.map(|(_, limit, own)| (limit, own));
            if let Some((at, ..)) = cut {
                self.timer.set(at, self.retry.policy().timer());
            }
            self.phase = Phase::Attempt(limit, silence);
        }
        let Some((limit, own)) = limit else {
            return Poll::Pending;
        };
        self.phase = Phase::Idle;
        if own {
            // Cut by the caller's own limit: what it says of the host is nothing.
            self.retry.cut_by_callers_limit();
        }
        Poll::Ready(match limit {
            TimeLimit::Attempt => AttemptEnd::TimedOut,
            TimeLimit::Deadline => AttemptEnd::Deadline,
        })
    }

    /// How long the attempt just answered waited, if it waited, from when it first did; and the
    /// call forgets it.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    fn waited(&mut self) -> Option<Duration> {
        let since = std::mem::replace(&mut self.since, NOT_WAITING);
        if since == NOT_WAITING {
            return None;
        }
        Some(self.retry.at_offset(since)?.elapsed())
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

    /// The call is `stagger::retry`'s, made at `site`, which keys the starting credit its timeouts
    /// may spend.
    pub(crate) fn credit_site(&mut self, site: &std::panic::Location<'_>) {
        self.retry.credit_site(site);
    }

    /// Step 3, after an attempt of a request, of which `held` is what the adapter holds: judges how the
    /// attempt ended with `replay`, and decides. `Continue` to retry, after the pause that
    /// [`poll_resume`](Self::poll_resume) waits out, then [`begin_retry`](Self::begin_retry); or
    /// `Break(final)`, the call's result.
    ///
    /// The state machine is told whether a retry can be made of what is held before it decides, so
    /// that a retry that cannot be sent (a streamed body that did not fit the replay buffer) is never
    /// decided, slept, logged or counted. After the last attempt a request can have (sent without a
    /// copy) the call ends whatever the attempt's outcome.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    #[inline]
    pub(crate) fn decide<Req, R>(
        &mut self,
        answered: AttemptEnd<Result<Res, E>>,
        replay: &R,
        held: &Held<Req, R::Kept>,
    ) -> ControlFlow<Final<Res, E>>
    where
        R: Judge<Req, Res, E>,
    {
        // A protocol whose deadline goes on the wire (gRPC's `grpc-timeout`) has it enforced below
        // too: a channel's timer that fires in the same instant as ours, and is polled first, ends the
        // attempt with an error. Once the deadline has passed, that error is the deadline's.
        let answered = match answered {
            AttemptEnd::Answered(Err(_)) if !R::KEEPS_LAST_RESPONSE && self.retry.out_of_time() => {
                AttemptEnd::Deadline
            }
            answered => answered,
        };
        let policy = self.retry.policy();
        let attempt = judge_attempt(replay, policy, held.sent(), &answered);
        let view = replay.view(held.sent());
        // What the host took to answer, when the attempt had to wait: the breaker learns from it
        // how long a silence of the host's is a failure. Not from a hedged race, whose answer may
        // be the hedge's, sent later.
        let waited = self.waited();
        if let (Some(took), AttemptEnd::Answered(_)) = (waited, &answered)
            && attempt.is_answered()
            && self.retry.hedges() == 0
        {
            self.retry.sample_latency(view.as_ref(), took);
        }
        if matches!(held, Held::Kept(_)) {
            return ControlFlow::Break(self.decide_last(attempt, answered, view.as_ref()));
        }
        let attempt = attempt.replayable(held.replayable());
        self.decide_judged(attempt, answered, view.as_ref(), R::KEEPS_LAST_RESPONSE)
    }

    /// Step 3 for an attempt judged already (`stagger::retry`'s operation, which has no request to
    /// hold: `view` is `None`), or by [`decide`](Self::decide): `Continue` to retry after the pause,
    /// `Break(final)` to end. A failed result is dropped before the pause (so that its connection goes
    /// back to the pool, or is closed, now rather than after it), unless it is a response kept for
    /// the deadline (`keep_last`).
    #[inline]
    pub(crate) fn decide_judged(
        &mut self,
        attempt: Attempt,
        answered: AttemptEnd<Result<Res, E>>,
        view: Option<&RequestView<'_>>,
        keep_last: bool,
    ) -> ControlFlow<Final<Res, E>> {
        self.since = NOT_WAITING;
        let result = match answered {
            AttemptEnd::Answered(result) => Some(result),
            AttemptEnd::TimedOut => None,
            AttemptEnd::Deadline => {
                self.retry.cut_by_deadline(view);
                return ControlFlow::Break(self.at_deadline());
            }
        };
        let delay = match self.retry.decide(attempt, view) {
            Decision::Retry(delay) => delay,
            Decision::Stop(_) => {
                let ended = self.end(result);
                return match self.retry.take_linger() {
                    // Refused by a guard: the result waits out the retry's delay, then ends the
                    // call, from `poll_resume` or `begin`.
                    Some(wait) => {
                        self.end_after(ended, wait);
                        ControlFlow::Continue(())
                    }
                    None => ControlFlow::Break(ended),
                };
            }
        };
        if let Some(result) = result {
            self.last.put(Kept::Last(result, keep_last));
        }
        self.pause_for(delay);
        ControlFlow::Continue(())
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// The step after the last attempt a request can have (it was sent without a copy): always the end.
    #[inline]
    fn decide_last(
        &mut self,
        attempt: Attempt,
        answered: AttemptEnd<Result<Res, E>>,
        request: Option<&RequestView<'_>>,
    ) -> Final<Res, E> {
        let result = match answered {
            AttemptEnd::Answered(result) => Some(result),
            AttemptEnd::TimedOut => None,
            AttemptEnd::Deadline => {
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
            self.timer.set(after(wait), self.retry.policy().timer());
            if self.retry.held_for_host() {
                Phase::Pause(Pause::Held)
            } else {
                Phase::Pause(Pause::Timer)
            }
        };
    }

    /// Keeps `ended`, the call's result, until `wait` has passed: a guard refused the call, which
    /// waits the delay its retry would have waited (`backoff_on_refusal`); or, with no delay, until
    /// the task has spent a unit of its cooperative budget.
    ///
    /// A call that ends unsent ends without I/O, where the request it stands for would have spent
    /// the budget in its socket: a caller's loop whose calls are refused at once (a host found
    /// down, with `Breaker::fail_fast` or past the hold) would otherwise keep its thread, and starve
    /// the tasks beside it, the one whose probe would find the host back among them.
    fn end_after(&mut self, ended: Final<Res, E>, wait: Duration) {
        self.last.put(Kept::Final(ended));
        self.phase = if wait.is_zero() {
            Phase::Pause(Pause::Ending)
        } else {
            self.timer.set(after(wait), self.retry.policy().timer());
            Phase::Pause(Pause::Linger)
        };
    }

    /// The call's result, once a refusal's delay has been waited out.
    fn ended(&mut self) -> Option<Final<Res, E>> {
        if self.phase != Phase::Ended {
            return None;
        }
        match self.last.take() {
            Some(Kept::Final(ended)) => Some(ended),
            _ => None,
        }
    }

    /// Waits out the pause before a retry.
    pub(crate) fn poll_pause(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match self.phase {
            Phase::Pause(Pause::Yield) => ready!(poll_zero_delay(cx)),
            Phase::Pause(Pause::Timer) => ready!(self.timer.poll(cx)),
            Phase::Pause(Pause::Held) => {
                if self.timer.poll(cx).is_pending() && self.retry.still_held(cx.waker()) {
                    return Poll::Pending;
                }
            }
            Phase::Pause(Pause::Linger) => {
                ready!(self.timer.poll(cx));
                self.phase = Phase::Ended;
                return Poll::Ready(());
            }
            Phase::Pause(Pause::Ending) => {
                ready!(poll_zero_delay(cx));
                self.phase = Phase::Ended;
                return Poll::Ready(());
            }
            Phase::Idle | Phase::Attempt(..) | Phase::Ready(_) | Phase::Ended => {
                return Poll::Ready(());
            }
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
                Some(deadline) => self.timer.set(deadline, self.retry.policy().timer()),
                None => return Poll::Pending,
            }
            self.phase = Phase::Ready(DeadlineTimer::Set);
        }
        match self.phase {
            Phase::Ready(DeadlineTimer::Set) => self.timer.poll(cx),
            _ => Poll::Pending,
        }
    }

    /// Step 6, right before an attempt after a pause is sent (the first, after its host's pause, or
    /// `stagger::retry`'s retry, which has no request): `Err(final)` if the deadline has passed
    /// meanwhile, in which case it is not sent; commits the retry's budget withdrawal otherwise.
    pub(crate) fn begin(&mut self, view: Option<&RequestView<'_>>) -> Result<(), Final<Res, E>> {
        if let Some(ended) = self.ended() {
            return Err(ended);
        }
        self.phase = Phase::Idle;
        match self.retry.begin_retry(view) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.at_deadline()),
        }
    }

    /// Step 6 for a retry of a request whose copy is `held`: [`begin`](Self::begin), then the retry's
    /// request, a copy of the held one while another retry may follow it, the held one itself
    /// otherwise. The one place where a retry's request is made. A copy refused (a [`Replay`] that
    /// broke its contract) ends the call with the last response received, or an error that says so.
    ///
    /// [`Replay`]: crate::adapter::Replay
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn begin_retry<Req, R>(
        &mut self,
        replay: &R,
        held: &mut Held<Req, R::Kept>,
    ) -> Result<Req, Final<Res, E>>
    where
        R: Replay<Req>,
    {
        self.begin(replay.view(held.sent()).as_ref())?;
        match held.next(self.retry.may_retry(), replay) {
            Some(request) => Ok(request),
            None => Err(self.unsent(replay.view(held.sent()).as_ref())),
        }
    }

    #[cfg(feature = "tower")]
    /// The deadline passed while the inner service was getting ready: the retry is not sent.
    pub(crate) fn deadline_before_sending(
        &mut self,
        request: Option<&RequestView<'_>>,
    ) -> Final<Res, E> {
        self.retry.abandon(StopReason::Deadline, request);
        self.at_deadline()
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// The retry was due, but the held request refused to be copied for it (a [`Replay`] that broke its
    /// contract): the call ends with the last response received, or an error that says so.
    ///
    /// [`Replay`]: crate::adapter::Replay
    fn unsent(&mut self, request: Option<&RequestView<'_>>) -> Final<Res, E> {
        self.retry.abandon(StopReason::NotReplayable, request);
        let info = self.retry.info();
        match self.last.take() {
            Some(Kept::Last(Ok(response), _)) => Ok(response),
            Some(Kept::Last(Err(error), _)) => Err(Error::from_inner(error, info)),
            _ => Err(Error::unsent(info)),
        }
    }

    #[cfg(feature = "tower")]
    /// The inner service failed to become ready for a retry: its error ends the call. It says more
    /// about what went wrong than the response that was being retried.
    pub(crate) fn not_ready(
        &mut self,
        error: E,
        request: Option<&RequestView<'_>>,
    ) -> Final<Res, E> {
        self.retry.abandon(StopReason::NotReady, request);
        Err(Error::from_inner(error, self.retry.info()))
    }

    /// The call's result after the deadline: the last response received (where the protocol keeps
    /// it), or an error that says so.
    fn at_deadline(&mut self) -> Final<Res, E> {
        let info = self.retry.info();
        match self.last.take() {
            Some(Kept::Last(Ok(response), true)) => Ok(response),
            _ => {
                let max_elapsed = self.retry.max_elapsed().unwrap_or(Duration::ZERO);
                Err(Error::from_elapsed(Elapsed::deadline(max_elapsed, info)))
            }
        }
    }

    /// The call's result when a guard refused its next attempt after it had one (its host found
    /// down, a pause outlasting the limits): the last answer, or the last error with its kind,
    /// `rejected`'s verdict in their `RetryInfo`; `rejected` itself when nothing was received.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    fn with_what_it_has(&mut self, rejected: crate::error::Rejected) -> Final<Res, E> {
        let info = rejected.info();
        match self.last.take() {
            Some(Kept::Last(Ok(response), _)) => Ok(response),
            Some(Kept::Last(Err(error), _)) => Err(Error::from_inner(error, info)),
            _ => Err(Error::from_rejected(rejected)),
        }
    }

    /// The call's result when the retries stop on an attempt: its own result, or, for an attempt that
    /// timed out, an error that says so.
    #[inline]
    fn end(&mut self, result: Option<Result<Res, E>>) -> Final<Res, E> {
        // A timed-out attempt's call ends with the time limit's error, not an older result.
        self.last.clear();
        // A response carries no `RetryInfo` of this: the adapter reports it, if it is worth it.
        let error = match result {
            Some(Ok(response)) => return Ok(response),
            Some(Err(error)) => Some(error),
            None => None,
        };
        let info = self.retry.info();
        match error {
            Some(error) => Err(Error::from_inner(error, info)),
            // A timed-out attempt whose retry the deadline left no room for: the deadline is what
            // ended the call, and the error says so, as its `RetryInfo` does.
            None if info.stop_reason() == Some(StopReason::Deadline) => {
                let max_elapsed = self.retry.max_elapsed().unwrap_or(Duration::ZERO);
                Err(Error::from_elapsed(Elapsed::deadline(max_elapsed, info)))
            }
            None => {
                let timeout = self.retry.attempt_timeout().unwrap_or(Duration::ZERO);
                Err(Error::from_elapsed(Elapsed::attempt(timeout, info)))
            }
        }
    }
}

/// Judges how an attempt ended: its result with `replay`, and a timeout as a timeout of this request
/// (retried if it is idempotent).
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
#[inline]
fn judge_attempt<Req, Res, E, R>(
    replay: &R,
    policy: &RetryPolicy,
    sent: Sent<'_, Req, R::Kept>,
    answered: &AttemptEnd<Result<Res, E>>,
) -> Attempt
where
    R: Judge<Req, Res, E>,
{
    match answered {
        AttemptEnd::Answered(result) => replay.judge(policy, sent, result),
        AttemptEnd::TimedOut | AttemptEnd::Deadline => Attempt::timed_out(
            replay
                .view(sent)
                .is_none_or(|view| policy.is_idempotent(&view)),
        ),
    }
}
