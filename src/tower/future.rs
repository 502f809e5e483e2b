//! Why not `tower::retry::Retry` driven through `tower::retry::Policy`: its future only consults the
//! policy when it holds a copy of the request, so the last allowed attempt, which must be sent without a
//! copy, would come back without being judged, and without [`RetryInfo`](crate::RetryInfo) in its
//! extensions. The future below is the same three-state loop with that gap closed; every decision is
//! still the core state machine's.

use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use ::tower::Service;
use pin_project_lite::pin_project;

use crate::classify::RequestView;
use crate::drive::call::{Call, Final, Start};
use crate::drive::hedge::{Hedge, HedgeContext, HeldRacers};
use crate::drive::held::Held;
use crate::engine::state::RetryState;
use crate::replay::{Judge, NextAttempt, Sent};

pin_project! {
    /// The response future of [`Retry`](super::Retry).
    ///
    /// It runs the whole call: the attempts, the sleeps between them and the time limits. Dropping it
    /// cancels the attempt in flight and the retries to come, and gives a retry it had taken from the
    /// budget back.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use stagger::tower::ResponseFuture;
    /// use stagger::{RetryLayer, RetryPolicy};
    /// use tower::{Layer, Service, ServiceExt, service_fn};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let ok = |_: http::Request<()>| async { Ok::<_, Infallible>(http::Response::new(())) };
    /// let inner = service_fn(ok);
    /// let mut service = RetryLayer::new(RetryPolicy::default()).layer(inner);
    /// let ready = service.ready().await.unwrap();
    /// let future: ResponseFuture<_, _, _> = ready.call(http::Request::new(()));
    /// let response = future.await.unwrap();
    /// assert_eq!(response.status(), 200);
    /// # }
    /// ```
    pub struct ResponseFuture<S, Req, R>
    where
        S: Service<Req>,
        R: Judge<Req, S::Response, S::Error>,
    {
        #[pin]
        state: State<S::Future, S::Response, S::Error>,
        service: S,
        call: Call<S::Response>,
        replay: R,
        held: Held<Req, R::Kept>,
        hedge: Hedge<S::Future, Option<S>>,
    }
}

pin_project! {
    /// Where the call is in the corridor of `drive`.
    #[project = StateProj]
    enum State<F, Res, E> {
        // An attempt is in flight, under its time limit.
        Called { #[pin] future: F },
        // The first attempt waits for its host's pause to end (the request itself is held, unsent),
        // then for the service's readiness.
        Paused,
        // The pause before a retry, then the service's readiness, under the deadline.
        Waiting,
        // The call ended before anything was sent (`Call::start`), with this.
        Ended { result: Option<Final<Res, E>> },
        Done,
    }
}

impl<S, Req, R> std::fmt::Debug for ResponseFuture<S, Req, R>
where
    S: Service<Req>,
    R: Judge<Req, S::Response, S::Error>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("retry", self.call.retry())
            .finish_non_exhaustive()
    }
}

impl<S, Req, R> ResponseFuture<S, Req, R>
where
    S: Service<Req>,
    R: Judge<Req, S::Response, S::Error>,
{
    pub(crate) fn new(mut service: S, mut retry: RetryState, replay: R, mut request: Req) -> Self {
        if let Some(overrides) = replay.overrides(&request) {
            retry.apply_overrides(overrides);
        }
        if let Some(deadline) = replay.deadline(&request) {
            retry.limit_deadline(deadline);
        }
        let mut call = Call::new(retry);
        let (state, held) = match call.start(|| replay.view(Sent::Copy(&request))) {
            Start::Now => {
                let held = Held::prepare(call.retry(), &replay, &mut request);
                replay.before_send(&mut request, NextAttempt::new(call.retry()));
                let future = service.call(request);
                (State::Called { future }, held)
            }
            // Nothing is copied while the request waits: it may never go.
            Start::AfterPause => (State::Paused, Held::unsent(request)),
            Start::End(result) => {
                let ended = State::Ended {
                    result: Some(result),
                };
                (ended, Held::unsent(request))
            }
        };
        let hedge = Hedge::new(call.retry(), || None);
        Self {
            state,
            service,
            call,
            replay,
            held,
            hedge,
        }
    }
}

impl<S, Req, R> Future for ResponseFuture<S, Req, R>
where
    S: Service<Req> + Clone,
    R: Judge<Req, S::Response, S::Error>,
{
    type Output = Final<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        let replay = &*this.replay;
        loop {
            let result = match this.state.as_mut().project() {
                StateProj::Called { future } => {
                    // The hedge, if the policy hedges, goes through a clone of the service, kept in
                    // the race and driven ready while the race lasts.
                    let service = &*this.service;
                    let mut racers = HeldRacers {
                        held: &mut *this.held,
                        replay,
                        ready: |cx: &mut Context<'_>, clone: &mut Option<S>| {
                            let clone = clone.get_or_insert_with(|| S::clone(service));
                            clone.poll_ready(cx).map(|ready| ready.is_ok())
                        },
                        // The request carries its `ResendCount` (`Replay::before_send`).
                        send: |request, clone: &mut Option<S>, _| {
                            let mut service = clone.take()?;
                            Some(Box::pin(service.call(request)))
                        },
                    };
                    let answered = ready!(this.hedge.poll(this.call, future, cx, &mut racers));
                    // The retry's request is made when it is due (`Call::begin_retry`), so that the
                    // future holds one request.
                    match this.call.decide(answered, replay, this.held) {
                        ControlFlow::Continue(()) => {
                            this.state.set(State::Waiting);
                            continue;
                        }
                        ControlFlow::Break(result) => result,
                    }
                }
                StateProj::Paused => {
                    let view = replay.view(this.held.sent());
                    let ready = ready!(poll_ready_to_send(
                        this.service,
                        this.call,
                        view.as_ref(),
                        cx
                    ))
                    .and_then(|()| this.call.begin(view.as_ref()));
                    match ready.map(|()| this.held.take_unsent(this.call.retry(), replay)) {
                        Ok(Some(mut request)) => {
                            replay.before_send(&mut request, NextAttempt::new(this.call.retry()));
                            let future = this.service.call(request);
                            this.state.set(State::Called { future });
                            continue;
                        }
                        Ok(None) => panic!("`ResponseFuture` polled after it completed"),
                        Err(result) => result,
                    }
                }
                StateProj::Waiting => {
                    let view = replay.view(this.held.sent());
                    let ready = ready!(poll_ready_to_send(
                        this.service,
                        this.call,
                        view.as_ref(),
                        cx
                    ));
                    match ready.and_then(|()| this.call.begin_retry(replay, this.held)) {
                        Ok(mut request) => {
                            replay.before_send(&mut request, NextAttempt::new(this.call.retry()));
                            let future = this.service.call(request);
                            this.state.set(State::Called { future });
                            continue;
                        }
                        Err(result) => result,
                    }
                }
                StateProj::Ended { result } => match result.take() {
                    Some(result) => result,
                    None => panic!("`ResponseFuture` polled after it completed"),
                },
                StateProj::Done => panic!("`ResponseFuture` polled after it completed"),
            };
            this.state.set(State::Done);
            let mut result = result;
            if let Err(error) = &result
                && error.inner().is_none()
                && let Some(response) = replay.response_for(error)
            {
                result = Ok(response);
            }
            if let Ok(response) = &mut result {
                R::report(response, this.call.retry().info());
            }
            return Poll::Ready(result);
        }
    }
}

/// A hedge's clone of the inner service, while it is driven ready: dropped when the race no longer
/// needs it, so that it holds no place in the service's queue (a concurrency limit's, a buffer's).
impl<S> HedgeContext for Option<S> {
    fn release(&mut self) {
        *self = None;
    }
}

/// `Ok` to send the request, or the call's result.
type Sendable<S, Req> =
    Result<(), Final<<S as Service<Req>>::Response, <S as Service<Req>>::Error>>;

/// Steps 4 and 5 of the corridor, before an attempt that waits (the first, after its host's pause, or
/// a retry): the pause over (the host's pauses included, see `Call::poll_resume`), then the service
/// ready, under the deadline. `Err` with the call's result otherwise: a host's pause past the limits,
/// the service's readiness error, or the deadline passing while it got ready. The caller then begins
/// the attempt (`Call::begin`, `Call::begin_retry`).
fn poll_ready_to_send<S, Req>(
    service: &mut S,
    call: &mut Call<S::Response>,
    view: Option<&RequestView<'_>>,
    cx: &mut Context<'_>,
) -> Poll<Sendable<S, Req>>
where
    S: Service<Req>,
{
    if let Err(result) = ready!(call.poll_resume(view, cx)) {
        return Poll::Ready(Err(result));
    }
    Poll::Ready(match service.poll_ready(cx) {
        Poll::Ready(Ok(())) => Ok(()),
        Poll::Ready(Err(error)) => Err(call.not_ready(error, view)),
        Poll::Pending => {
            ready!(call.poll_deadline(cx));
            Err(call.deadline_before_sending(view))
        }
    })
}
