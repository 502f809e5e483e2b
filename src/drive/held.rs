//! What an adapter holds of a request while its attempts run, and the step both adapters take after
//! each attempt: judge it, then retry with a copy of what is held, or end the call.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::attempt::Attempt;
use crate::classify::RequestView;
use crate::drive::call::{Attempted, Call, Final, Source};
use crate::drive::hedge::Racers;
use crate::engine::policy::RetryPolicy;
use crate::engine::state::RetryState;
use crate::replay::{Judge, NextAttempt, Recorded, Replay, Sent};

/// Judges how an attempt ended: its result with `replay`, and a timeout as a timeout of this request
/// (retried if it is idempotent).
#[inline]
pub(crate) fn judge_attempt<Req, Res, E, R>(
    replay: &R,
    policy: &RetryPolicy,
    sent: Sent<'_, Req, R::Kept>,
    answered: &Attempted<Result<Res, E>>,
) -> Attempt
where
    R: Judge<Req, Res, E>,
{
    match answered {
        Attempted::Answered(result) => replay.judge(policy, sent, result),
        Attempted::TimedOut | Attempted::Deadline => Attempt::timed_out(
            replay
                .view(sent)
                .is_none_or(|view| policy.is_idempotent(&view)),
        ),
    }
}

/// What an adapter holds of the request while an attempt is in flight: a copy, from which the retries
/// are copied again, or, once no retry can follow, only what judging the result needs.
///
/// Retries send copies of the held copy, which stays in place: a future waiting in a busy runtime is
/// cold in the cache, and moving a request out of it and a new copy back in cost more than the copy
/// itself (`examples/herd/`, 10 000 clients). The last attempt a request can have sends the held copy
/// itself, so that no copy is made that no retry could use.
pub(crate) enum Held<Req, K> {
    /// A copy for the retries.
    Copy(Req),
    /// A request whose body could not be copied, being recorded as it streams out: the retries are
    /// made from the recording (the policy's `replay_buffer`), or, if the body was dropped unread,
    /// with the body itself.
    ///
    /// Boxed: rare, and it would otherwise make every request's future a word larger.
    Recording(Box<Recorded<Req>>),
    /// What judging needs of a request sent without a copy.
    Kept(K),
}

impl<Req, K> Held<Req, K> {
    /// Keeps a copy of `request` when a retry may follow it — or, for a body that cannot be copied and
    /// a policy with a `replay_buffer`, starts recording it — and only what judging needs otherwise: no
    /// copy is made for a request that can never be retried.
    pub(crate) fn prepare<R>(retry: &RetryState, replay: &R, request: &mut Req) -> Self
    where
        R: Replay<Req, Kept = K>,
    {
        if retry.may_retry() {
            if let Some(copy) = replay.clone_request(request) {
                return Held::Copy(copy);
            }
            let limit = retry.policy().replay_buffer();
            if limit > 0
                && let Some(recorded) = replay.start_recording(request, limit)
            {
                return Held::Recording(Box::new(recorded));
            }
        }
        Held::Kept(replay.keep(request))
    }

    /// Whether a retry can be made from what is held: a copy, a recording of a whole body, or a body
    /// that came back unread.
    pub(crate) fn replayable(&self) -> bool {
        match self {
            Held::Copy(_) => true,
            Held::Recording(recorded) => recorded.replayable(),
            Held::Kept(_) => false,
        }
    }

    /// The request as judging sees it.
    pub(crate) fn sent(&self) -> Sent<'_, Req, K> {
        match self {
            Held::Copy(copy) => Sent::Copy(copy),
            Held::Recording(recorded) => Sent::Copy(recorded.request()),
            Held::Kept(kept) => Sent::Kept(kept),
        }
    }

    /// The request for a retry: a copy of the held one while `again` (another retry may follow it), and
    /// the held one itself otherwise. `None` if there is nothing to send — the held request cannot be
    /// copied, or none is held — in which case the call ends with the result in hand.
    pub(crate) fn next<R>(&mut self, again: bool, replay: &R) -> Option<Req>
    where
        R: Replay<Req, Kept = K>,
    {
        let held = match self {
            Held::Copy(held) => held,
            Held::Recording(recorded) if recorded.is_whole() => {
                // The recording becomes the held copy, from which this retry and any later one are
                // copied.
                let replayed = replay.replay(recorded)?;
                *self = Held::Copy(replayed);
                let Held::Copy(held) = self else {
                    return None;
                };
                held
            }
            Held::Recording(recorded) => {
                // The body came back unread (`None` if it did not: it did not end within the limit),
                // and goes out itself, recorded again if another retry may follow.
                let mut request = replay.replay(recorded)?;
                let limit = recorded.limit();
                *self = match again.then(|| replay.start_recording(&mut request, limit)) {
                    Some(Some(recorded)) => Held::Recording(Box::new(recorded)),
                    Some(None) | None => Held::Kept(replay.keep(&request)),
                };
                return Some(request);
            }
            Held::Kept(_) => return None,
        };
        if again {
            return replay.clone_request(held);
        }
        let kept = Held::Kept(replay.keep(held));
        match std::mem::replace(self, kept) {
            Held::Copy(request) => Some(request),
            Held::Recording(_) | Held::Kept(_) => None,
        }
    }
}

/// The decision both adapters take after every attempt: judge it, and go on (after the pause that
/// [`Call::poll_pause`] waits out) with what `next` makes of the held request — the request for the
/// retry, or a promise to make it after the pause — or end with the call's result, its [`RetryInfo`]
/// recorded. `next` is told whether a retry may follow the attempt it is for.
#[inline]
pub(crate) fn decide<Req, Res, E, R, N>(
    answered: Attempted<Result<Res, E>>,
    call: &mut Call<Res>,
    replay: &R,
    held: &mut Held<Req, R::Kept>,
    next: impl FnMut(&mut Held<Req, R::Kept>, bool) -> Option<N>,
) -> ControlFlow<Final<Res, E>, N>
where
    R: Judge<Req, Res, E>,
{
    let attempt = judge_attempt(replay, call.retry().policy(), held.sent(), &answered);
    if matches!(held, Held::Kept(_)) {
        let view = replay.view(held.sent());
        return ControlFlow::Break(call.decide_last(attempt, answered, view.as_ref()));
    }
    let mut source = HeldSource {
        held,
        replay,
        next,
        keeps_last_response: R::KEEPS_LAST_RESPONSE,
    };
    call.decide(attempt, answered, &mut source)
}

struct HeldSource<'h, Req, K, R, F> {
    held: &'h mut Held<Req, K>,
    replay: &'h R,
    next: F,
    keeps_last_response: bool,
}

impl<Req, R, N, F> Source<N> for HeldSource<'_, Req, R::Kept, R, F>
where
    R: Replay<Req>,
    F: FnMut(&mut Held<Req, R::Kept>, bool) -> Option<N>,
{
    fn view(&self) -> Option<RequestView<'_>> {
        self.replay.view(self.held.sent())
    }

    fn replayable(&self) -> bool {
        self.held.replayable()
    }

    fn next(&mut self, again: bool) -> Option<N> {
        (self.next)(self.held, again)
    }

    fn keeps_last_response(&self) -> bool {
        self.keeps_last_response
    }
}

/// The race's needs met from the held request: judging with `replay`, the hedge copied from what is
/// held and handed to `send` (the adapter's way of sending it) once `ready` (the adapter's way of
/// getting ready to send it, which may keep what it readies in the race's context) says it can go:
/// `Pending` not yet, `Ready(false)` never.
pub(crate) struct HeldRacers<'h, Req, K, R, Rd, S> {
    pub(crate) held: &'h mut Held<Req, K>,
    pub(crate) replay: &'h R,
    pub(crate) ready: Rd,
    pub(crate) send: S,
}

impl<Req, Res, E, R, Rd, S, F, C> Racers<Res, F, C> for HeldRacers<'_, Req, R::Kept, R, Rd, S>
where
    R: Judge<Req, Res, E>,
    F: Future<Output = Result<Res, E>> + ?Sized,
    Rd: FnMut(&mut Context<'_>, &mut C) -> Poll<bool>,
    S: FnMut(Req, &mut C) -> Option<Pin<Box<F>>>,
{
    fn set_aside(&mut self, call: &mut Call<Res>, output: &Result<Res, E>) -> bool {
        let attempt = self
            .replay
            .judge(call.retry().policy(), self.held.sent(), output);
        if !attempt.outcome().is_retryable() {
            return false;
        }
        let view = self.replay.view(self.held.sent());
        call.retry_mut().set_aside(attempt, view.as_ref());
        true
    }

    fn lost(&mut self, call: &mut Call<Res>) {
        let view = self.replay.view(self.held.sent());
        call.retry_mut().count_lost(view.as_ref());
    }

    fn start(
        &mut self,
        call: &mut Call<Res>,
        cx: &mut Context<'_>,
        context: &mut C,
    ) -> Poll<Option<Pin<Box<F>>>> {
        if matches!(self.held, Held::Kept(_)) {
            return Poll::Ready(None);
        }
        // What the state can tell without counting or paying for anything, so that the adapter
        // readies nothing for a hedge that would not go; then the adapter's leave, so that a hedge it
        // cannot send yet is neither counted nor paid for; then a copy (a recording that has not
        // ended gives none), and the state's leave: a hedge allowed is counted and paid for, and
        // sent at once.
        let view = self.replay.view(self.held.sent());
        if !call.retry().may_hedge(view.as_ref()) || !std::task::ready!((self.ready)(cx, context)) {
            return Poll::Ready(None);
        }
        let Some(mut request) = self.held.next(true, self.replay) else {
            return Poll::Ready(None);
        };
        let view = self.replay.view(self.held.sent());
        if !call.retry_mut().begin_hedge(view.as_ref()) {
            return Poll::Ready(None);
        }
        self.replay
            .before_send(&mut request, NextAttempt::hedge(call.retry()));
        Poll::Ready((self.send)(request, context))
    }
}
