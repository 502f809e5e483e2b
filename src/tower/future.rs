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

use tracing::Span;

use crate::classify::RequestView;
use crate::drive::call::{AttemptEnd, Call, Final, Start};
use crate::drive::hedge::{Hedge, HedgeContext, HeldRacers};
use crate::drive::held::Held;
use crate::engine::state::RetryState;
use crate::observe::span;
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
        state: State<S::Future>,
        service: S,
        call: Call<S::Response, S::Error>,
        replay: R,
        held: Held<Req, R::Kept>,
        hedge: Hedge<S::Future, HedgeClone<S>>,
        // Boxed, and only when a subscriber wants them: a call nobody traces carries 8 bytes.
        spans: Option<Box<Spans>>,
    }
}

/// The call's span, entered while its future is polled, the span of its attempt in flight, and the
/// caller's span, which gets the call's resend count at its end as it does untraced (the count the
/// engine records goes on the span current then: the call's own).
struct Spans {
    call: Span,
    attempt: Span,
    caller: Span,
}

pin_project! {
    /// Where the call is in the corridor of `drive`.
    #[project = StateProj]
    enum State<F> {
        // An attempt is in flight, under its time limit.
        Called { #[pin] future: F },
        // The first attempt waits for its host's pause to end (the request itself is held, unsent),
        // then for the service's readiness; or the call ends unsent, with what `Call` kept.
        Paused,
        // The pause before a retry, then the service's readiness, under the deadline.
        Waiting,
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
        let call_span = span::call(|| replay.view(Sent::Copy(&request)));
        let mut spans = (!call_span.is_disabled()).then(|| {
            Box::new(Spans {
                call: call_span,
                attempt: Span::none(),
                caller: Span::current(),
            })
        });
        let (call_span, attempt, _) = split(spans.as_deref_mut());
        let _call = call_span.map(Span::enter);
        let (state, held) = match call.start(|| replay.view(Sent::Copy(&request))) {
            Start::Now => {
                let held = Held::prepare(call.retry(), &replay, &mut request);
                let spans = (call_span, attempt);
                let future = send(&mut service, &call, &replay, spans, request);
                (State::Called { future }, held)
            }
            // Nothing is copied while the request waits: it may never go.
            Start::AfterPause => (State::Paused, Held::unsent(request)),
        };
        let hedge = Hedge::new(call.retry(), HedgeClone::default);
        drop(_call);
        Self {
            state,
            service,
            call,
            replay,
            held,
            hedge,
            spans,
        }
    }
}

/// The call's span, the attempt's and the caller's, when the call is traced.
fn split(spans: Option<&mut Spans>) -> (Option<&Span>, Option<&mut Span>, Option<&Span>) {
    match spans {
        Some(spans) => (
            Some(&spans.call),
            Some(&mut spans.attempt),
            Some(&spans.caller),
        ),
        None => (None, None, None),
    }
}

/// Sends an attempt of `call` through `service`: its `ResendCount` put in (`Replay::before_send`), in
/// a span of its own inside the call's when the call is traced, entered while the service takes it.
fn send<S, Req, R>(
    service: &mut S,
    call: &Call<S::Response, S::Error>,
    replay: &R,
    spans: (Option<&Span>, Option<&mut Span>),
    mut request: Req,
) -> S::Future
where
    S: Service<Req>,
    R: Judge<Req, S::Response, S::Error>,
{
    let next = NextAttempt::new(call.retry());
    let (Some(call_span), Some(attempt)) = spans else {
        replay.before_send(&mut request, next);
        return service.call(request);
    };
    *attempt = span::attempt(
        call_span,
        || replay.view(Sent::Copy(&request)),
        next.resend_count(),
    );
    replay.before_send(&mut request, next);
    let _attempt = attempt.enter();
    service.call(request)
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
        let (call_span, mut attempt_span, caller) = split(this.spans.as_deref_mut());
        let _call = call_span.map(Span::enter);
        loop {
            let result = match this.state.as_mut().project() {
                StateProj::Called { future } => {
                    // The hedge, if the policy hedges, goes through a clone of the service, kept in
                    // the race and driven ready while the race lasts.
                    let service = &*this.service;
                    let mut racers = HeldRacers {
                        held: &mut *this.held,
                        replay,
                        ready: |cx: &mut Context<'_>, clone: &mut HedgeClone<S>| {
                            let clone = clone.service.get_or_insert_with(|| S::clone(service));
                            clone.poll_ready(cx).map(|ready| ready.is_ok())
                        },
                        // The request carries its `ResendCount` (`Replay::before_send`); the
                        // hedge's span is the call's child, as its first attempt's is.
                        send: |request, clone: &mut HedgeClone<S>, resend, _replica| {
                            let mut service = clone.service.take()?;
                            if let Some(call_span) = call_span {
                                let view = || replay.view(Sent::Copy(&request));
                                clone.span = span::attempt(call_span, view, resend);
                            }
                            Some(Box::pin(clone.span.in_scope(|| service.call(request))))
                        },
                    };
                    let entered = attempt_span.as_deref().map(Span::enter);
                    let answered = ready!(this.hedge.poll(this.call, future, cx, &mut racers));
                    drop(entered);
                    if let (Some(span), AttemptEnd::Answered(Ok(response))) =
                        (attempt_span.as_deref(), &answered)
                        && let Some(status) = replay.status(response)
                    {
                        span::answered(span, status);
                    }
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
                        Ok(Some(request)) => {
                            let spans = (call_span, attempt_span.as_deref_mut());
                            let future = send(this.service, this.call, replay, spans, request);
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
                        Ok(request) => {
                            let spans = (call_span, attempt_span.as_deref_mut());
                            let future = send(this.service, this.call, replay, spans, request);
                            this.state.set(State::Called { future });
                            continue;
                        }
                        Err(result) => result,
                    }
                }
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
            // A success at the first attempt is not marked (`RetryInfo::FIRST_SUCCESS`).
            if let Ok(response) = &mut result
                && this.call.retry().worth_reporting()
            {
                R::report(response, this.call.retry().info());
            }
            if let Some(caller) = caller {
                span::resends(caller, this.call.retry().attempts());
            }
            return Poll::Ready(result);
        }
    }
}

/// A hedge's clone of the inner service, while it is driven ready, and the span of the hedge sent.
struct HedgeClone<S> {
    service: Option<S>,
    /// The hedge's span: it ends when the next hedge is sent, or the call ends (the race keeps the
    /// hedge's future alone, so the span is not entered while it is polled).
    span: Span,
}

impl<S> Default for HedgeClone<S> {
    fn default() -> Self {
        Self {
            service: None,
            span: Span::none(),
        }
    }
}

/// The clone is dropped when the race no longer needs it, so that it holds no place in the service's
/// queue (a concurrency limit's, a buffer's).
impl<S> HedgeContext for HedgeClone<S> {
    fn release(&mut self) {
        self.service = None;
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
    call: &mut Call<S::Response, S::Error>,
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
