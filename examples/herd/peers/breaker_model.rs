//! A tower layer around a modelled circuit breaker ([`Circuit`]): the plumbing that the models of
//! Microsoft.Extensions.Http.Resilience's breaker ([`polly_breaker`](super::polly_breaker)) and of
//! resilience4j's ([`resilience4j_breaker`](super::resilience4j_breaker)) share.
//!
//! It sits where both libraries put their breaker, inside the retry: each attempt asks it, and each
//! attempt's end is recorded, on tokio's (paused) clock. An error is a failure, an answer a success
//! (the host answers nothing but `200`). An attempt dropped before its end, which is how stagger's
//! attempt timeout ends an attempt that hangs, is a failure: in both libraries the attempt timeout
//! sits inside the breaker, and its exception (Polly's `TimeoutRejectedException`, resilience4j's
//! `TimeoutException` from its `TimeLimiter`) is one the breaker counts.

use std::cell::RefCell;
use std::error::Error;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use stagger::adapter::AsError;
use tokio::time::Instant;
use tower::{Layer, Service};

/// A breaker's state, as both libraries name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Closed,
    Open,
    HalfOpen,
}

/// A modelled breaker: whether an attempt may go, and what its end does.
pub(crate) trait Circuit {
    /// Whether an attempt asking `now` may go (it may move the breaker from open to half-open).
    fn try_acquire(&mut self, now: Instant) -> bool;
    /// An attempt admitted earlier ended `now`, failed or not. Both libraries record an end against
    /// the state the breaker is in when it comes, whichever state admitted the attempt.
    fn on_result(&mut self, now: Instant, failed: bool);
    fn state(&self) -> State;
}

/// The layer: one breaker, shared by every service it makes (one client, one host).
pub(crate) struct BreakerLayer<C> {
    circuit: Rc<RefCell<C>>,
}

impl<C> BreakerLayer<C> {
    pub(crate) fn new(circuit: C) -> Self {
        Self {
            circuit: Rc::new(RefCell::new(circuit)),
        }
    }

    /// The breaker, to read its state.
    pub(crate) fn circuit(&self) -> Rc<RefCell<C>> {
        Rc::clone(&self.circuit)
    }
}

impl<S, C> Layer<S> for BreakerLayer<C> {
    type Service = BreakerService<S, C>;

    fn layer(&self, inner: S) -> BreakerService<S, C> {
        BreakerService {
            inner,
            circuit: Rc::clone(&self.circuit),
        }
    }
}

pub(crate) struct BreakerService<S, C> {
    inner: S,
    circuit: Rc<RefCell<C>>,
}

impl<S: Clone, C> Clone for BreakerService<S, C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            circuit: Rc::clone(&self.circuit),
        }
    }
}

/// What an attempt through a modelled breaker fails with.
#[derive(Debug)]
pub(crate) enum BreakerError<E> {
    /// Not sent: the breaker is open, or half-open with its trial calls taken (Polly's
    /// `BrokenCircuitException`, resilience4j's `CallNotPermittedException`).
    Open,
    /// The attempt's own error.
    Inner(E),
}

impl<E: fmt::Display> fmt::Display for BreakerError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Open => f.write_str("circuit open: not sent"),
            Self::Inner(e) => write!(f, "{e}"),
        }
    }
}

impl<E: Error + 'static> Error for BreakerError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Self::Open => None,
            Self::Inner(e) => Some(e),
        }
    }
}

/// stagger's classifier reads the attempt's own error along the source chain (a refused connect is
/// retried); a rejection it does not know is fatal, and the call ends with it, as both libraries'
/// retries end on their breaker's exception (Microsoft's standard retry handles
/// `HttpRequestException`, timeouts and transient statuses; resilience4j's users exclude
/// `CallNotPermittedException`).
impl<E: Error + 'static> AsError for BreakerError<E> {
    fn as_error(&self) -> &(dyn Error + 'static) {
        self
    }
}

impl<S, C, Req> Service<Req> for BreakerService<S, C>
where
    S: Service<Req>,
    C: Circuit,
{
    type Response = S::Response;
    type Error = BreakerError<S::Error>;
    type Future = BreakerFuture<S::Future, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(BreakerError::Inner)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        if !self.circuit.borrow_mut().try_acquire(Instant::now()) {
            return BreakerFuture {
                attempt: None,
                circuit: Rc::clone(&self.circuit),
            };
        }
        BreakerFuture {
            attempt: Some(Box::pin(self.inner.call(request))),
            circuit: Rc::clone(&self.circuit),
        }
    }
}

/// An attempt through the breaker; `attempt` is `None` when it was not sent, and once it has ended.
pub(crate) struct BreakerFuture<F, C: Circuit> {
    attempt: Option<Pin<Box<F>>>,
    circuit: Rc<RefCell<C>>,
}

impl<F, C, T, E> Future for BreakerFuture<F, C>
where
    F: Future<Output = Result<T, E>>,
    C: Circuit,
{
    type Output = Result<T, BreakerError<E>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(attempt) = self.attempt.as_mut() else {
            return Poll::Ready(Err(BreakerError::Open));
        };
        let result = std::task::ready!(attempt.as_mut().poll(cx));
        self.attempt = None;
        let failed = result.is_err();
        self.circuit.borrow_mut().on_result(Instant::now(), failed);
        Poll::Ready(result.map_err(BreakerError::Inner))
    }
}

impl<F, C: Circuit> Drop for BreakerFuture<F, C> {
    /// An attempt cut before its end: the attempt timeout's, a failure.
    fn drop(&mut self) {
        if self.attempt.take().is_some()
            && let Ok(mut circuit) = self.circuit.try_borrow_mut()
        {
            circuit.on_result(Instant::now(), true);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::time::Duration;

    use http::{Request, Response};
    use tower::{ServiceExt, service_fn};

    use super::*;

    /// A breaker that admits while `open` is false, and keeps the ends it is told.
    #[derive(Default)]
    struct Recorder {
        open: bool,
        ends: Vec<bool>,
    }

    impl Circuit for Recorder {
        fn try_acquire(&mut self, _now: Instant) -> bool {
            !self.open
        }

        fn on_result(&mut self, _now: Instant, failed: bool) {
            self.ends.push(failed);
        }

        fn state(&self) -> State {
            if self.open {
                State::Open
            } else {
                State::Closed
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_cut_before_its_end_is_a_failure_and_a_rejected_one_is_not_sent() {
        let layer = BreakerLayer::new(Recorder::default());
        let circuit = layer.circuit();
        let answered = service_fn(|_: Request<()>| async { Ok::<_, io::Error>(Response::new(())) });
        assert!(
            layer
                .layer(answered)
                .oneshot(Request::new(()))
                .await
                .is_ok()
        );
        let refused = service_fn(|_: Request<()>| async {
            Err::<Response<()>, _>(io::Error::from(io::ErrorKind::ConnectionRefused))
        });
        let error = layer.layer(refused).oneshot(Request::new(())).await;
        assert!(matches!(error, Err(BreakerError::Inner(_))));
        let hung = service_fn(|_: Request<()>| std::future::pending::<io::Result<Response<()>>>());
        let cut = tokio::time::timeout(
            Duration::from_millis(500),
            layer.layer(hung).oneshot(Request::new(())),
        );
        assert!(cut.await.is_err());
        assert_eq!(circuit.borrow().ends, [false, true, true]);

        circuit.borrow_mut().open = true;
        let sent = Rc::new(std::cell::Cell::new(false));
        let counted = Rc::clone(&sent);
        let service = service_fn(move |_: Request<()>| {
            counted.set(true);
            async { Ok::<_, io::Error>(Response::new(())) }
        });
        let error = layer.layer(service).oneshot(Request::new(())).await;
        assert!(matches!(error, Err(BreakerError::Open)));
        assert!(!sent.get(), "not sent");
        assert_eq!(circuit.borrow().ends.len(), 3, "nothing recorded");
        // stagger's classifier finds the refusal through the error, and not the rejection.
        let refusal = BreakerError::Inner(io::Error::from(io::ErrorKind::ConnectionRefused));
        assert!(refusal.as_error().source().is_some());
        assert!(
            BreakerError::<io::Error>::Open
                .as_error()
                .source()
                .is_none()
        );
    }
}
