use ::tower::Layer;

use super::service::Retry;
use crate::policy::RetryPolicy;
use crate::replay::{HttpReplay, ReplayFn};

/// Retries the requests of the service it wraps, as its [`RetryPolicy`] says.
///
/// Over `http` requests and responses (hyper-util's client, any `tower::Service<http::Request<B>>` with a
/// cloneable body) and over `reqwest::Client` (feature `reqwest`), [`RetryLayer::new`] is all it takes:
///
/// ```
/// use std::convert::Infallible;
/// use http::{Request, Response, StatusCode};
/// use stagger::{RetryInfo, RetryLayer, RetryPolicy};
/// use tower::{ServiceBuilder, ServiceExt};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let service = ServiceBuilder::new()
///     .layer(RetryLayer::new(RetryPolicy::default()))
///     .service_fn(|_req: Request<String>| async {
///         Ok::<_, Infallible>(Response::new("hello".to_string()))
///     });
/// let response = service.oneshot(Request::new(String::new())).await.unwrap();
/// assert_eq!(response.status(), StatusCode::OK);
/// assert_eq!(response.extensions().get::<RetryInfo>().unwrap().attempts(), 1);
/// # }
/// ```
///
/// For any other kind of service, [`RetryLayer::with_classifier`] takes a closure that judges each result.
///
/// # Requirements
///
/// The inner service must be [`Clone`]: each request keeps a clone for its retries, and calls it only after
/// `poll_ready` says it is ready. Put a `tower::buffer::Buffer` in front of a service that is not.
#[derive(Debug, Clone)]
pub struct RetryLayer<R = HttpReplay> {
    policy: RetryPolicy,
    replay: R,
}

impl RetryLayer {
    /// A layer that retries HTTP requests under `policy`, with the policy's HTTP classifier.
    pub const fn new(policy: RetryPolicy) -> Self {
        Self {
            policy,
            replay: HttpReplay,
        }
    }
}

impl<F> RetryLayer<ReplayFn<F>> {
    /// A layer for any service whose requests are [`Clone`], judging each attempt's result with
    /// `classify`; the policy's HTTP classifier is not used.
    pub const fn with_classifier(policy: RetryPolicy, classify: F) -> Self {
        Self {
            policy,
            replay: ReplayFn::new(classify),
        }
    }
}

impl<S, R: Clone> Layer<S> for RetryLayer<R> {
    type Service = Retry<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        Retry::new(inner, self.policy.clone(), self.replay.clone())
    }
}
