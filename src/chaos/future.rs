//! [`ChaosFuture`]: a call through [`ChaosService`](super::ChaosService): the upstream's future, a
//! delay before it, an injected answer or error, or a hang.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower::{BoxError, Service};

use super::fault::Action;
use super::layer::Injectable;

pin_project! {
    /// The future of a call through [`ChaosService`](super::ChaosService).
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
        /// The upstream's answer, as it comes: the success path, the only state of a call when the
        /// chaos is off.
        Sent { #[pin] future: S::Future },
        /// A delay, then what the fault does; boxed, so that the success path's future stays the
        /// size of the upstream's.
        Delayed { delayed: Pin<Box<Delayed<S, Req>>> },
        /// An injected answer or error, given at the first poll.
        Injected { result: Option<Result<Req::Response, BoxError>> },
        /// Nothing, ever.
        Hang,
    }
}

pin_project! {
    struct Delayed<S, Req> {
        #[pin]
        sleep: Sleep,
        // The service made ready for the call, the request, and what to do with them.
        then: Option<(S, Req, Action)>,
    }
}

impl<S, Req> ChaosFuture<S, Req>
where
    S: Service<Req>,
    Req: Injectable<S::Response>,
{
    pub(super) const fn sent(future: S::Future) -> Self {
        Self {
            state: State::Sent { future },
        }
    }

    pub(super) fn delayed(delay: Duration, service: S, request: Req, action: Action) -> Self {
        let delayed = Delayed {
            sleep: tokio::time::sleep(delay),
            then: Some((service, request, action)),
        };
        Self {
            state: State::Delayed {
                delayed: Box::pin(delayed),
            },
        }
    }

    /// What `action` (an answer, an error or a hang: not a send) makes of `request`.
    pub(super) fn injected(request: &Req, action: Action) -> Self {
        let result = match action {
            Action::Answer(answer) => Ok(request.answer(answer.response())),
            Action::Error(kind) => Err(request.error(kind)),
            Action::Hang | Action::Send => return Self { state: State::Hang },
        };
        Self {
            state: State::Injected {
                result: Some(result),
            },
        }
    }
}

impl<S, Req> Future for ChaosFuture<S, Req>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    Req: Injectable<S::Response>,
{
    type Output = Result<Req::Response, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProjection::Sent { future } => {
                    return future
                        .poll(cx)
                        .map(|result| result.map(Req::upstream).map_err(Into::into));
                }
                StateProjection::Delayed { delayed } => {
                    let delayed = delayed.as_mut().project();
                    ready!(delayed.sleep.poll(cx));
                    let Some((mut service, request, action)) = delayed.then.take() else {
                        return Poll::Pending;
                    };
                    let next = match action {
                        Action::Send => State::Sent {
                            future: service.call(request),
                        },
                        action => Self::injected(&request, action).state,
                    };
                    state.set(next);
                }
                StateProjection::Injected { result } => match result.take() {
                    Some(result) => return Poll::Ready(result),
                    None => return Poll::Pending,
                },
                StateProjection::Hang => return Poll::Pending,
            }
        }
    }
}

impl<S, Req> fmt::Debug for ChaosFuture<S, Req>
where
    S: Service<Req>,
    Req: Injectable<S::Response>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Sent { .. } => "sent",
            State::Delayed { .. } => "delayed",
            State::Injected { .. } => "injected",
            State::Hang => "hang",
        };
        f.debug_struct("ChaosFuture")
            .field("state", &state)
            .finish()
    }
}
