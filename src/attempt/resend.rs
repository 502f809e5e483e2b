//! [`ResendCount`]: which resend an attempt is, for the layers below the retry layer.

/// How many times a request was sent before this attempt: put by stagger into the extensions of every
/// request it sends again (a retry, a hedge), ahead of the layers below it, so that a tracing layer
/// there can tell a resend from a first send and record OpenTelemetry's `http.request.resend_count`
/// (a first send carries none, as that attribute is set on resends only).
///
/// Where it is put: a tower service over `http::Request` (hyper-util's client, tower-http's
/// `TraceLayer` beneath [`RetryLayer`](crate::RetryLayer)) finds it in the request's extensions, and so
/// does one beneath `RetryLayer::grpc`; a reqwest-middleware `Middleware`
/// after `RetryMiddleware` finds it in the `Extensions` it is handed.
/// Beneath `RetryLayer` over `reqwest::Client` there is nowhere to put it: reqwest keeps a
/// `reqwest::Request`'s extensions to itself.
///
/// ```
/// # #[cfg(feature = "tower")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::convert::Infallible;
/// use tower::{Layer, ServiceExt, service_fn};
/// use stagger::{Backoff, ResendCount, RetryLayer, RetryPolicy};
///
/// let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
/// let record = seen.clone();
/// // A service beneath the layer: what a tracing layer there reads, and a 503 for the first two.
/// let service = service_fn(move |request: http::Request<()>| {
///     let count = request.extensions().get::<ResendCount>().map(|count| count.get());
///     record.lock().unwrap().push(count);
///     let status = if count.unwrap_or(0) < 2 { 503 } else { 200 };
///     async move { Ok::<_, Infallible>(http::Response::builder().status(status).body(()).unwrap()) }
/// });
/// let policy = RetryPolicy::builder().backoff(Backoff::fixed(std::time::Duration::ZERO)).build().unwrap();
/// let request = http::Request::get("http://example.com/").body(()).unwrap();
/// let response = RetryLayer::new(policy).layer(service).oneshot(request).await.unwrap();
/// assert_eq!(response.status(), 200);
/// assert_eq!(*seen.lock().unwrap(), [None, Some(1), Some(2)]);
/// # }
/// # #[cfg(not(feature = "tower"))]
/// # fn main() {}
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResendCount(u32);

impl ResendCount {
    /// The resend of a request sent `previous` times before, `None` for its first send.
    pub(crate) const fn of(previous: u32) -> Option<Self> {
        if previous == 0 {
            None
        } else {
            Some(Self(previous))
        }
    }

    /// How many times the request was sent before: 1 for the first resend.
    pub const fn get(self) -> u32 {
        self.0
    }
}
