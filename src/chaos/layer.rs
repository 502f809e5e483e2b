//! [`ChaosLayer`] and [`ChaosService`]: fault injection for a tower service over `http` types or a
//! `reqwest::Client`.

use std::io;
use std::task::{Context, Poll};

use bytes::Bytes;
use tower::{BoxError, Layer, Service};

use super::body::AnswerBody;
use super::fault::Action;
use super::future::ChaosFuture;
use super::handle::Chaos;
use crate::classify::RequestView;
use crate::error::InjectedFault;

/// Injects the faults of a [`Chaos`] into the calls of the service beneath it.
///
/// Beneath a [`RetryLayer`](crate::RetryLayer) it tests the retries: each attempt meets the rules.
/// Above it, the caller's handling of a call that fails, retries or not. It takes any
/// `tower::Service` over `http` types (hyper-util's client, a tonic `Channel` beneath
/// `RetryLayer::grpc`, an axum router, a `service_fn`) and a `reqwest::Client` as a
/// `Service<reqwest::Request>` (feature `reqwest`).
///
/// The service's responses are its own: an injected answer is a response of the same type, its
/// body made by [`AnswerBody`](crate::chaos::AnswerBody) (a service whose body cannot be made, such
/// as hyper's `Incoming`, takes the layer once its bodies are a
/// [`ChaosBody`](crate::chaos::ChaosBody) of theirs). Its error becomes a `tower::BoxError`, as with
/// tower's own `Timeout`: a real error is boxed as it came (`downcast_ref::<reqwest::Error>()`
/// finds it), an injected one is an `io::Error` carrying an
/// [`InjectedFault`](crate::chaos::InjectedFault).
///
/// Off ([`Chaos::set_enabled`]), a call costs one atomic load and the service's own future is
/// polled through one `match`.
///
/// ```
/// # #[cfg(feature = "tower")]
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use http::StatusCode;
/// use stagger::chaos::{Chaos, ChaosLayer, Fault, Rule};
/// use stagger::{RetryInfo, RetryLayer, RetryPolicy};
/// use tower::{ServiceBuilder, ServiceExt};
///
/// // A 503 asking for a second, once; then the real service.
/// let chaos = Chaos::new(Rule::script([Fault::retry_after(
///     StatusCode::SERVICE_UNAVAILABLE,
///     Duration::from_secs(1),
/// )]));
/// let client = ServiceBuilder::new()
///     .layer(RetryLayer::new(RetryPolicy::default()))
///     .layer(ChaosLayer::new(chaos))
///     .service_fn(|_: http::Request<String>| async {
///         Ok::<_, std::convert::Infallible>(http::Response::new(String::from("ok")))
///     });
/// let response = client.oneshot(http::Request::new(String::new())).await.unwrap();
/// let info = response.extensions().get::<RetryInfo>().unwrap();
/// assert_eq!(info.attempts(), 2);
/// assert!(info.slept() >= Duration::from_secs(1)); // Retry-After is a floor
/// # }
/// # #[cfg(not(feature = "tower"))]
/// # fn main() {}
/// ```
#[derive(Debug, Clone)]
pub struct ChaosLayer {
    chaos: Chaos,
}

impl ChaosLayer {
    /// A layer injecting `chaos`'s faults (a clone of it: the same rules, switch and counts).
    pub const fn new(chaos: Chaos) -> Self {
        Self { chaos }
    }

    /// Its chaos.
    pub const fn chaos(&self) -> &Chaos {
        &self.chaos
    }
}

impl<S> Layer<S> for ChaosLayer {
    type Service = ChaosService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ChaosService {
            inner,
            chaos: self.chaos.clone(),
        }
    }
}

/// The service of a [`ChaosLayer`]: the faults of its [`Chaos`] in place of, or before, its inner
/// service's answers.
///
/// It needs the inner service to be `Clone` (as a retry layer above it does): a call delayed by
/// latency takes the service that was made ready with it, and leaves a clone for the next call.
#[derive(Debug, Clone)]
pub struct ChaosService<S> {
    inner: S,
    chaos: Chaos,
}

impl<S> ChaosService<S> {
    /// `inner`, with `chaos`'s faults injected into its calls.
    pub const fn new(inner: S, chaos: Chaos) -> Self {
        Self { inner, chaos }
    }

    /// Its chaos.
    pub const fn chaos(&self) -> &Chaos {
        &self.chaos
    }

    /// The inner service.
    pub const fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, the layer taken off.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, Req> Service<Req> for ChaosService<S>
where
    S: Service<Req> + Clone,
    S::Error: Into<BoxError>,
    Req: Injectable<S::Response>,
{
    type Response = Req::Response;
    type Error = BoxError;
    type Future = ChaosFuture<S, Req>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    /// Off, one atomic load and the inner service's call: the rest is out of line.
    #[inline]
    fn call(&mut self, request: Req) -> Self::Future {
        if self.chaos.is_enabled() {
            return self.inject(request);
        }
        ChaosFuture::sent(self.inner.call(request))
    }
}

impl<S> ChaosService<S> {
    /// A call while the chaos is on: the fault its rules pick, if any.
    #[inline(never)]
    fn inject<Req>(&mut self, request: Req) -> ChaosFuture<S, Req>
    where
        S: Service<Req> + Clone,
        Req: Injectable<S::Response>,
    {
        let Some(fault) = self.chaos.pick(&request.view()) else {
            return ChaosFuture::sent(self.inner.call(request));
        };
        if !fault.delay().is_zero() {
            // The service made ready goes with the request; a clone stays for the next call.
            let clone = self.inner.clone();
            let ready = std::mem::replace(&mut self.inner, clone);
            return ChaosFuture::delayed(fault.delay(), ready, request, fault.action);
        }
        match fault.action {
            Action::Send => ChaosFuture::sent(self.inner.call(request)),
            action => ChaosFuture::injected(&request, action),
        }
    }
}

mod sealed {
    pub trait Sealed {}
}

/// The requests [`ChaosService`] can inject faults into, and what it answers them with: an
/// `http::Request` (answered with an `http::Response` of the service's body, an [`AnswerBody`]),
/// and with the feature `reqwest`, a `reqwest::Request` (answered with a `reqwest::Response`).
/// Sealed.
pub trait Injectable<Upstream>: sealed::Sealed + Sized {
    /// The response the service answers with.
    type Response;

    /// What a [`Rule`](crate::chaos::Rule)'s predicate sees of the request.
    fn view(&self) -> RequestView<'_>;

    /// An injected answer to this request.
    fn answer(&self, response: http::Response<Bytes>) -> Self::Response;

    /// The upstream's answer to this request.
    fn upstream(response: Upstream) -> Self::Response;

    /// An injected error of `kind` for this request.
    fn error(&self, kind: io::ErrorKind) -> BoxError {
        Box::new(injected_io(kind))
    }
}

/// The `io::Error` an injected error is: the kind the classifier reads, the mark inside.
pub(crate) fn injected_io(kind: io::ErrorKind) -> io::Error {
    io::Error::new(kind, InjectedFault::new(kind))
}

impl<B> sealed::Sealed for http::Request<B> {}

impl<B, RB: AnswerBody> Injectable<http::Response<RB>> for http::Request<B> {
    type Response = http::Response<RB>;

    fn view(&self) -> RequestView<'_> {
        RequestView::new(self.method(), self.uri(), self.headers())
            .with_extensions(self.extensions())
    }

    fn answer(&self, response: http::Response<Bytes>) -> Self::Response {
        response.map(RB::from_bytes)
    }

    #[inline]
    fn upstream(response: http::Response<RB>) -> Self::Response {
        response
    }

    /// For a gRPC request with the feature `tonic`, a failure to connect (refused, unreachable) is
    /// wrapped in a `tonic::ConnectError`, as a `Channel`'s connector wraps its own: a tonic client
    /// then sees `UNAVAILABLE`, and any other kind `UNKNOWN`, as it does a `Channel`'s real failures.
    fn error(&self, kind: io::ErrorKind) -> BoxError {
        #[cfg(feature = "tonic")]
        if crate::classify::grpc::is_grpc(self.headers()) && is_connect(kind) {
            return Box::new(tonic::ConnectError(Box::new(injected_io(kind))));
        }
        Box::new(injected_io(kind))
    }
}

/// Whether `kind` is a failure to connect, as the default classifier reads one.
#[cfg(feature = "tonic")]
fn is_connect(kind: io::ErrorKind) -> bool {
    use io::ErrorKind::*;
    matches!(
        kind,
        ConnectionRefused | AddrNotAvailable | HostUnreachable | NetworkUnreachable | NetworkDown
    )
}

#[cfg(feature = "reqwest")]
impl sealed::Sealed for reqwest::Request {}

#[cfg(feature = "reqwest")]
impl Injectable<reqwest::Response> for reqwest::Request {
    type Response = reqwest::Response;

    fn view(&self) -> RequestView<'_> {
        RequestView::from_reqwest(self)
    }

    fn answer(&self, response: http::Response<Bytes>) -> reqwest::Response {
        answer_reqwest(self.url(), response)
    }

    #[inline]
    fn upstream(response: reqwest::Response) -> reqwest::Response {
        response
    }
}

/// A `reqwest::Response` of an injected answer, whose `url()` is the request's, as a real one's is.
#[cfg(feature = "reqwest")]
pub(crate) fn answer_reqwest(
    url: &reqwest::Url,
    response: http::Response<Bytes>,
) -> reqwest::Response {
    use reqwest::ResponseBuilderExt;

    let (parts, body) = response.into_parts();
    let mut builder = http::Response::builder()
        .status(parts.status)
        .url(url.clone());
    if let Some(headers) = builder.headers_mut() {
        *headers = parts.headers;
    }
    let response = builder
        .body(body)
        .unwrap_or_else(|_| unreachable!("a status and headers already checked by http"));
    reqwest::Response::from(response)
}
