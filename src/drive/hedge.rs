//! Hedging: when an attempt has not answered after `hedge_after`, a second one starts and races it
//! (see [`RetryPolicyBuilder::hedge_after`](crate::RetryPolicyBuilder::hedge_after)). Written once,
//! for both adapters, over any attempt future.
//!
//! The race: the first answer that is not a failure worth retrying wins, and the other attempt is
//! dropped, which cancels it. A failure worth retrying that comes while the other attempt still runs is
//! set aside (counted as an attempt made, its pushback kept for the retry) and the race waits for the
//! other; if that one fails too, its failure goes on to the retry logic as any attempt's would, held
//! to what the one set aside asked as well. At most two attempts of a call are in
//! flight, and each attempt is hedged at most once. A hedge goes when the adapter can send it: through
//! the tower layer, once a clone of the inner service is ready, if that happens while the race lasts.

use std::future::Future;
use std::mem;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::attempt::ResendCount;
use crate::classify::RequestView;
use crate::drive::call::{AttemptEnd, Call};
use crate::drive::held::Held;
use crate::drive::timer::{Timer, after};
use crate::engine::state::RetryState;
use crate::guards::replicas::Replica;
use crate::replay::{Judge, NextAttempt};

/// The hedge of the attempt in flight; nothing allocated for a policy without `hedge_after`. `C` is
/// what an adapter needs to send a hedge beside the attempt in flight (the middleware: a copy of the
/// request's extensions, which the attempt in flight borrows), kept with the race.
pub(crate) struct Hedge<F: ?Sized, C = ()> {
    race: Option<Box<Race<F, C>>>,
}

struct Race<F: ?Sized, C> {
    context: C,
    /// When to start the hedge.
    timer: Timer,
    /// Where the hedge of the attempt in flight is.
    step: Step,
    /// Which attempts are in flight.
    runners: Runners<F>,
}

/// Which attempts of the race are in flight.
enum Runners<F: ?Sized> {
    /// The first alone: not hedged yet, or its hedge failed and was set aside.
    First,
    /// The first and its hedge.
    Both(Pin<Box<F>>),
    /// The hedge alone: the first failed and was set aside.
    HedgeOnly(Pin<Box<F>>),
}

/// Where the hedge of the attempt in flight is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// The timer is not set yet.
    Unarmed,
    /// The timer runs.
    Armed,
    /// The delay has passed: the hedge goes as soon as the adapter can send it.
    Due,
    /// This attempt has been hedged, or will not be: no other hedge for it.
    Spent,
}

/// What an adapter keeps in a race for its hedge.
pub(crate) trait HedgeContext {
    /// The hedge was sent, will not be, or the race is over: let go of what was kept for it alone
    /// (a clone of the inner service waiting to be ready holds a place in the service's queue).
    fn release(&mut self) {}
}

impl HedgeContext for () {}

impl<F: ?Sized, C> Hedge<F, C> {
    /// A hedge for the call whose state is `retry`: its race is allocated, with `context`, only if
    /// the call hedges (its policy, or its own overrides, say so).
    pub(crate) fn new(retry: &RetryState, context: impl FnOnce() -> C) -> Self {
        Self {
            race: retry.hedge_after().map(|_| {
                Box::new(Race {
                    context: context(),
                    timer: Timer::default(),
                    step: Step::Unarmed,
                    runners: Runners::First,
                })
            }),
        }
    }
}

impl<F: ?Sized, C> std::fmt::Debug for Hedge<F, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hedge")
            .field(
                "running",
                &self
                    .race
                    .as_ref()
                    .is_some_and(|r| !matches!(r.runners, Runners::First)),
            )
            .finish()
    }
}

impl<F: Future + ?Sized, C: HedgeContext> Hedge<F, C> {
    // `first` may be of another type than the hedge: the middleware's first attempt borrows the
    // request's extensions, a hedge owns a copy of them.
    /// Polls the attempt in flight, `first`, and its hedge if one runs, under the call's time limit;
    /// starts the hedge once the attempt has waited `hedge_after`, if `racers` makes one. Ready with
    /// the answer that ends the race, or the limit that ended it; a hedge still running then is
    /// dropped, and so is `first`, by the adapter.
    ///
    /// Without `hedge_after` this is [`Call::poll_attempt`].
    #[inline]
    pub(crate) fn poll<Res, E, First>(
        &mut self,
        call: &mut Call<Res, E>,
        mut first: Pin<&mut First>,
        cx: &mut Context<'_>,
        racers: &mut impl Racers<Res, E, F, C>,
    ) -> Poll<AttemptEnd<F::Output>>
    where
        First: Future<Output = F::Output> + ?Sized,
    {
        let (Some(race), Some(hedge_after)) = (&mut self.race, call.retry().hedge_after()) else {
            return call.poll_attempt(first, cx, || racers.view());
        };
        loop {
            if !matches!(race.runners, Runners::HedgeOnly(_))
                && let Poll::Ready(output) = first.as_mut().poll(cx)
            {
                let hedged = matches!(race.runners, Runners::Both(_));
                if hedged && racers.set_aside(call, &output) {
                    // The hedge runs on: its replica is the one in flight.
                    call.retry_mut().hedge_becomes_current();
                    if let Runners::Both(hedge) = mem::replace(&mut race.runners, Runners::First) {
                        race.runners = Runners::HedgeOnly(hedge);
                    }
                } else {
                    if hedged {
                        racers.lost(call);
                    }
                    return Poll::Ready(race.end(call, output));
                }
            }
            if let Runners::Both(hedge) | Runners::HedgeOnly(hedge) = &mut race.runners
                && let Poll::Ready(output) = hedge.as_mut().poll(cx)
            {
                let first_runs = matches!(race.runners, Runners::Both(_));
                race.runners = Runners::First;
                if first_runs {
                    // The hedge's answer is judged: its replica's, the first's set beside it.
                    call.retry_mut().swap_replicas();
                }
                if !first_runs || !racers.set_aside(call, &output) {
                    if first_runs {
                        racers.lost(call);
                    }
                    return Poll::Ready(race.end(call, output));
                }
                // The first runs on: its replica is the one in flight again.
                call.retry_mut().hedge_becomes_current();
            }
            if race.step == Step::Unarmed {
                race.timer
                    .set(after(hedge_after), call.retry().policy().timer());
                race.step = Step::Armed;
            }
            if race.step == Step::Armed && race.timer.poll(cx).is_ready() {
                race.step = Step::Due;
            }
            if race.step == Step::Due {
                // Pending while the adapter cannot send it yet: it woke this task to try again.
                if let Poll::Ready(started) = racers.start(call, cx, &mut race.context) {
                    race.step = Step::Spent;
                    race.context.release();
                    if let Some(hedge) = started {
                        race.runners = Runners::Both(hedge);
                        // Poll the new hedge at once, so that it registers its waker.
                        continue;
                    }
                }
            }
            let limit = std::task::ready!(call.poll_limit(cx, || racers.view()));
            // Both attempts are cut: the one the limit is judged for, and the other, dropped.
            if matches!(race.runners, Runners::Both(_)) {
                call.retry_mut().count_cancelled();
            }
            race.reset();
            return Poll::Ready(limit);
        }
    }
}

/// What the race needs of an adapter: to judge an answer, and to send the hedge.
pub(crate) trait Racers<Res, E, F: Future + ?Sized, C> {
    /// The request's view, for the time limits of the attempt in flight.
    fn view(&self) -> Option<RequestView<'_>>;

    /// Judges an answer that came while the other attempt still runs: `true` if it is a failure worth
    /// retrying, recorded as an attempt made, and then dropped.
    fn set_aside(&mut self, call: &mut Call<Res, E>, output: &F::Output) -> bool;

    /// The other attempt lost the race to an answer not worth retrying, and is dropped while it
    /// runs (`RetryState::count_lost`).
    fn lost(&mut self, call: &mut Call<Res, E>);

    /// The hedge's attempt, if the call's state lets one go (`RetryState::begin_hedge`) and a copy of
    /// the request can be sent; `Ready(None)` if no hedge will go for this attempt. Pending while the
    /// adapter cannot send it yet (the tower layer's inner service is not ready), having registered
    /// the waker: the hedge is then neither counted nor paid for.
    fn start(
        &mut self,
        call: &mut Call<Res, E>,
        cx: &mut Context<'_>,
        context: &mut C,
    ) -> Poll<Option<Pin<Box<F>>>>;
}

impl<F: ?Sized, C: HedgeContext> Race<F, C> {
    /// The race is over with `output`: the other attempt, if it still runs, is dropped (the caller
    /// counted it, [`Racers::lost`]), and the next attempt starts a race of its own.
    fn end<Res, E, T>(&mut self, call: &mut Call<Res, E>, output: T) -> AttemptEnd<T> {
        call.answered();
        self.reset();
        AttemptEnd::Answered(output)
    }

    fn reset(&mut self) {
        self.runners = Runners::First;
        self.step = Step::Unarmed;
        self.context.release();
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

impl<Req, Res, E, R, Rd, S, F, C> Racers<Res, E, F, C> for HeldRacers<'_, Req, R::Kept, R, Rd, S>
where
    R: Judge<Req, Res, E>,
    F: Future<Output = Result<Res, E>> + ?Sized,
    Rd: FnMut(&mut Context<'_>, &mut C) -> Poll<bool>,
    S: FnMut(Req, &mut C, Option<ResendCount>, Option<Replica>) -> Option<Pin<Box<F>>>,
{
    fn view(&self) -> Option<RequestView<'_>> {
        self.replay.view(self.held.sent())
    }

    fn set_aside(&mut self, call: &mut Call<Res, E>, output: &Result<Res, E>) -> bool {
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

    fn lost(&mut self, call: &mut Call<Res, E>) {
        let view = self.replay.view(self.held.sent());
        call.retry_mut().count_lost(view.as_ref());
    }

    fn start(
        &mut self,
        call: &mut Call<Res, E>,
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
        let next = NextAttempt::hedge(call.retry());
        let (resend, replica) = (next.resend_count(), next.replica());
        self.replay.before_send(&mut request, next);
        Poll::Ready((self.send)(request, context, resend, replica))
    }
}
