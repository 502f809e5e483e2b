//! [`ChaosFuture`]: a call through [`ChaosService`](super::ChaosService): the upstream's future, a
//! delay before it, an injected answer or error, or a hang.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use tower::{BoxError, Service};

use super::fault::Action;
use super::layer::Injectable;
use crate::time::{Sleeping, after};

pin_project! {
    /// The future of a call through [`ChaosService`](super::ChaosService): the upstream's future,
    /// inline, or a fault's state in a box of its own that a call without a fault never allocates.
    pub struct ChaosFuture<S, Req>
    where
        S: Service<Req>,
        Req: Injectable<S::Response>,
    {
        #[pin]
        state: State<S, Req>,
    }
}

pin_project! {
    #[project = StateProjection]
    enum State<S, Req>
    where
        S: Service<Req>,
        Req: Injectable<S::Response>,
    {
        /// The upstream's answer, as it comes: a call the chaos let through, or sent after a delay.
        Sent { #[pin] future: S::Future },
        /// A call with a fault.
        Faulted { fault: Pin<Box<Faulted<S, Req>>> },
    }
}

pin_project! {
    /// What a call with a fault is at.
    #[project = FaultedProjection]
    enum Faulted<S, Req>
    where
        S: Service<Req>,
        Req: Injectable<S::Response>,
    {
        /// A delay, then what the fault does with the service made ready for the call and the
        /// request.
        Delayed { #[pin] sleep: Sleeping, then: Option<(S, Req, Action)> },
        /// An injected answer or error, given at the first poll.
        Injected { result: Option<Result<Req::Response, BoxError>> },
        /// Nothing, ever.
        Hang,
    }
}

impl<S, Req> ChaosFuture<S, Req>
where
    S: Service<Req>,
    Req: Injectable<S::Response>,
{
    #[inline]
    pub(super) const fn sent(future: S::Future) -> Self {
        Self {
            state: State::Sent { future },
        }
    }

    fn faulted(fault: Faulted<S, Req>) -> Self {
        Self {
            state: State::Faulted {
                fault: Box::pin(fault),
            },
        }
    }

    pub(super) fn delayed(delay: Duration, service: S, request: Req, action: Action) -> Self {
        Self::faulted(Faulted::Delayed {
            sleep: Sleeping::until(after(delay), None),
            then: Some((service, request, action)),
        })
    }

    /// What `action` (an answer, an error or a hang: not a send) makes of `request`.
    pub(super) fn injected(request: &Req, action: Action) -> Self {
        Self::faulted(injected(request, action))
    }
}

fn injected<S, Req>(request: &Req, action: Action) -> Faulted<S, Req>
where
    S: Service<Req>,
    Req: Injectable<S::Response>,
{
    let result = match action {
        Action::Answer(answer) => Ok(request.answer(answer.response())),
        Action::Error(kind) => Err(request.error(kind)),
        Action::Hang | Action::Send => return Faulted::Hang,
    };
    Faulted::Injected {
        result: Some(result),
    }
}

impl<S, Req> Future for ChaosFuture<S, Req>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    Req: Injectable<S::Response>,
{
    type Output = Result<Req::Response, BoxError>;

    /// The upstream's answer in line; a fault's states out of line.
    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        match state.as_mut().project() {
            StateProjection::Sent { future } => match future.poll(cx) {
                Poll::Ready(Ok(response)) => Poll::Ready(Ok(Req::upstream(response))),
                Poll::Ready(Err(error)) => Poll::Ready(Err(error.into())),
                Poll::Pending => Poll::Pending,
            },
            StateProjection::Faulted { .. } => poll_fault(state, cx),
        }
    }
}

/// A call with a fault: a delay, then what it does (the real call, which the future becomes); an
/// injected answer or error; a hang.
#[inline(never)]
fn poll_fault<S, Req>(
    mut state: Pin<&mut State<S, Req>>,
    cx: &mut Context<'_>,
) -> Poll<Result<Req::Response, BoxError>>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    Req: Injectable<S::Response>,
{
    loop {
        let fault = match state.as_mut().project() {
            StateProjection::Sent { future } => {
                return future
                    .poll(cx)
                    .map(|result| result.map(Req::upstream).map_err(Into::into));
            }
            StateProjection::Faulted { fault } => fault.as_mut(),
        };
        let mut fault = fault;
        match fault.as_mut().project() {
            FaultedProjection::Delayed { sleep, then } => {
                ready!(sleep.poll(cx));
                let Some((mut service, request, action)) = then.take() else {
                    return Poll::Pending;
                };
                match action {
                    Action::Send => state.set(State::Sent {
                        future: service.call(request),
                    }),
                    action => fault.set(injected(&request, action)),
                }
            }
            FaultedProjection::Injected { result } => {
                return match result.take() {
                    Some(result) => Poll::Ready(result),
                    None => Poll::Pending,
                };
            }
            FaultedProjection::Hang => return Poll::Pending,
        }
    }
}

impl<S, Req> fmt::Debug for ChaosFuture<S, Req>
where
    S: Service<Req>,
    Req: Injectable<S::Response>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Sent { .. } => "sent",
            State::Faulted { fault } => match **fault {
                Faulted::Delayed { .. } => "delayed",
                Faulted::Injected { .. } => "injected",
                Faulted::Hang => "hang",
            },
        };
        f.debug_struct("ChaosFuture")
            .field("state", &state)
            .finish()
    }
}
