use std::task::{Context, Poll};

use ::tower::Service;

use super::future::ResponseFuture;
use crate::attempt::{RetryInfo, StopReason};
use crate::engine::live::PolicySource;
use crate::engine::policy::RetryPolicy;
use crate::error::Error;
use crate::replay::{HttpReplay, Judge};

/// A service that retries its inner service's failed requests; made by [`RetryLayer`](crate::RetryLayer).
///
/// Its error is [`stagger::Error`](crate::Error) over the inner service's error, as `tower::timeout`
/// changes the error of what it wraps: the inner error is one call away
/// ([`inner`](crate::Error::inner), [`into_inner`](crate::Error::into_inner), or `source()`), and the
/// [`RetryInfo`] of the call comes with it.
///
/// ```
/// use std::convert::Infallible;
/// use stagger::{RetryLayer, RetryPolicy};
/// use tower::{Layer, service_fn};
///
/// let ok = |_: http::Request<()>| async { Ok::<_, Infallible>(http::Response::new(())) };
/// let inner = service_fn(ok);
/// let mut service = RetryLayer::new(RetryPolicy::default()).layer(inner);
/// assert_eq!(service.policy().max_retries(), 10);
/// let _inner = service.get_ref(); // or `get_mut()`
/// let _inner = service.into_inner(); // the service it wrapped, without retries
/// ```
#[derive(Debug, Clone)]
pub struct Retry<S, R = HttpReplay, P = RetryPolicy> {
    inner: S,
    policy: P,
    replay: R,
}

impl<S, R, P: PolicySource> Retry<S, R, P> {
    /// Wraps `inner`, retrying under `policy` (a [`RetryPolicy`], or a
    /// [`LivePolicy`](crate::LivePolicy)) with `replay` copying and judging its requests.
    ///
    /// What [`RetryLayer`](crate::RetryLayer) makes, without a layer; `replay` is
    /// [`HttpReplay`](crate::adapter::HttpReplay) for HTTP, [`ReplayFn`](crate::adapter::ReplayFn) for
    /// a closure, or a [`Judge`](crate::adapter::Judge) of your own.
    ///
    /// ```
    /// use std::convert::Infallible;
    /// use stagger::adapter::HttpReplay;
    /// use stagger::tower::Retry;
    /// use stagger::{RetryInfo, RetryPolicy};
    /// use tower::{Service, ServiceExt, service_fn};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let ok = |_: http::Request<()>| async { Ok::<_, Infallible>(http::Response::new(())) };
    /// let inner = service_fn(ok);
    /// let mut service = Retry::new(inner, RetryPolicy::default(), HttpReplay);
    /// let response = service.ready().await.unwrap().call(http::Request::new(())).await.unwrap();
    /// assert_eq!(RetryInfo::of(response.extensions()).attempts(), 1);
    /// # }
    /// ```
    pub const fn new(inner: S, policy: P, replay: R) -> Self {
        Self {
            inner,
            policy,
            replay,
        }
    }

    /// The policy in use: the [`RetryPolicy`], or the [`LivePolicy`](crate::LivePolicy), it was
    /// given.
    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// A reference to the inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// A mutable reference to the inner service.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, R, P, Req> Service<Req> for Retry<S, R, P>
where
    S: Service<Req> + Clone,
    R: Judge<Req, S::Response, S::Error> + Clone,
    P: PolicySource,
{
    type Response = S::Response;
    type Error = Error<S::Error>;
    type Future = ResponseFuture<S, Req, R>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(|error| {
            Error::from_inner(
                error,
                RetryInfo::stopped_before_sending(StopReason::NotReady),
            )
        })
    }

    fn call(&mut self, request: Req) -> Self::Future {
        // The service that was driven to readiness takes this call; a clone, not yet ready, stays behind
        // for the caller's next `poll_ready`. The future keeps the ready one for its retries and polls it
        // ready again before each.
        let clone = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(
            service,
            self.policy.start_call(),
            self.replay.clone(),
            request,
        )
    }
}
