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

use crate::pause::Pause;
use crate::policy::RetryState;
use crate::replay::{Held, Replay, conclude};

pin_project! {
    /// The response future of [`Retry`](super::Retry).
    pub struct ResponseFuture<S, Req, R>
    where
        S: Service<Req>,
        R: Replay<Req, S::Response, S::Error>,
    {
        #[pin]
        state: State<S::Future>,
        service: S,
        retry: RetryState,
        replay: R,
        held: Held<Req, R::Kept>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        Called { #[pin] future: F },
        Sleeping { pause: Pause },
        Retrying,
    }
}

impl<S, Req, R> std::fmt::Debug for ResponseFuture<S, Req, R>
where
    S: Service<Req>,
    R: Replay<Req, S::Response, S::Error>,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl<S, Req, R> ResponseFuture<S, Req, R>
where
    S: Service<Req>,
    R: Replay<Req, S::Response, S::Error>,
{
    pub(crate) fn new(mut service: S, retry: RetryState, replay: R, request: Req) -> Self {
        let held = Held::prepare(&retry, &replay, &request);
        let future = service.call(request);
        Self {
            state: State::Called { future },
            service,
            retry,
            replay,
            held,
        }
    }
}

impl<S, Req, R> Future for ResponseFuture<S, Req, R>
where
    S: Service<Req>,
    R: Replay<Req, S::Response, S::Error>,
{
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Called { future } => {
                    let result = ready!(future.poll(cx));
                    let (sent, replayable) = this.held.sent();
                    match conclude(this.replay, this.retry, sent, result, replayable) {
                        ControlFlow::Continue(delay) => {
                            this.state.set(State::Sleeping {
                                pause: Pause::new(delay),
                            });
                        }
                        ControlFlow::Break(result) => return Poll::Ready(result),
                    }
                }
                StateProj::Sleeping { pause } => {
                    ready!(Pin::new(pause).poll(cx));
                    this.state.set(State::Retrying);
                }
                StateProj::Retrying => {
                    ready!(this.service.poll_ready(cx))?;
                    // `decide` retries only a replayable attempt, which is one whose copy is held.
                    let Some(request) = this.held.next(this.retry, this.replay) else {
                        unreachable!("a retry is decided only for a request with a copy");
                    };
                    let future = this.service.call(request);
                    this.state.set(State::Called { future });
                }
            }
        }
    }
}
