use ::tower::Layer;

use super::service::Retry;
use crate::engine::live::PolicySource;
use crate::engine::policy::RetryPolicy;
use crate::error::ConfigError;
#[cfg(feature = "tonic")]
use crate::replay::GrpcReplay;
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
/// // Answered at its first attempt: no `RetryInfo` in the response, `RetryInfo::of` says so.
/// assert_eq!(RetryInfo::of(response.extensions()), RetryInfo::FIRST_SUCCESS);
/// # }
/// ```
///
/// For any other kind of service, [`RetryLayer::classify_with`] takes a closure that judges each result.
///
/// # Requirements
///
/// The inner service must be [`Clone`]: each request keeps a clone for its retries, and calls it only after
/// `poll_ready` says it is ready. Put a `tower::buffer::Buffer` in front of a service that is not.
///
/// # A policy that changes
///
/// Each constructor takes a [`RetryPolicy`], or a [`LivePolicy`](crate::LivePolicy) whose
/// [`reload`](crate::LivePolicy::reload) changes the policy of the calls that start after it,
/// keeping what the guards know (a host found down stays down).
// The inherent impl of `RetryLayer`: here, and `grpc_service_config` in `service_config.rs`.
#[derive(Debug, Clone)]
pub struct RetryLayer<R = HttpReplay, P = RetryPolicy> {
    policy: P,
    replay: R,
}

impl<P: PolicySource> RetryLayer<HttpReplay, P> {
    /// A layer that retries HTTP requests under `policy`, with the policy's HTTP classifier.
    ///
    /// A server that answers `503` with `Retry-After: 1`, then `200`:
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{RetryInfo, RetryLayer, RetryPolicy};
    /// use tower::{ServiceBuilder, ServiceExt};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// # let calls = std::sync::atomic::AtomicU32::new(0);
    /// # let server = tower::service_fn(|_: http::Request<String>| {
    /// #     let first = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
    /// #     let response = match first {
    /// #         true => http::Response::builder().status(503).header("retry-after", "1"),
    /// #         false => http::Response::builder().status(200),
    /// #     };
    /// #     async move { Ok::<_, std::convert::Infallible>(response.body(()).unwrap()) }
    /// # });
    /// let service = ServiceBuilder::new()
    ///     .layer(RetryLayer::new(RetryPolicy::default()))
    ///     .service(server);
    /// let response = service.oneshot(http::Request::new(String::new())).await.unwrap();
    /// assert_eq!(response.status(), 200);
    /// let info = response.extensions().get::<RetryInfo>().unwrap();
    /// assert_eq!(info.attempts(), 2);
    /// assert!(info.slept() >= Duration::from_secs(1)); // Retry-After honoured
    /// # }
    /// ```
    pub const fn new(policy: P) -> Self {
        Self {
            policy,
            replay: HttpReplay,
        }
    }
}

#[cfg(feature = "tonic")]
impl<P: PolicySource> RetryLayer<GrpcReplay, P> {
    /// A layer that retries the calls of a tonic client under `policy`, as gRPC's retry design (A6)
    /// says (feature `tonic`): over a `tonic::transport::Channel`, or any service of
    /// `http::Request<tonic::body::Body>`, and under a generated client.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use stagger::{RetryLayer, RetryPolicy};
    /// use tower::ServiceBuilder;
    ///
    /// let channel = tonic::transport::Channel::from_static("http://[::1]:50051").connect_lazy();
    /// let channel = ServiceBuilder::new()
    ///     .layer(RetryLayer::grpc(RetryPolicy::default()))
    ///     .service(channel);
    /// // Any generated client takes it: `GreeterClient::new(channel)`; or by hand:
    /// let mut client = tonic::client::Grpc::new(channel);
    /// client.ready().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// A call that fails before any message with a status the method retries (`UNAVAILABLE` by
    /// default, and `RESOURCE_EXHAUSTED` when the server names a delay:
    /// [`grpc_retry_on`](crate::RetryPolicyBuilder::grpc_retry_on),
    /// [`grpc_method`](crate::RetryPolicyBuilder::grpc_method)) is sent again, after the server's
    /// `grpc-retry-pushback-ms` if it gave one; a call whose messages have started is never retried.
    /// Its request's messages are kept for the retries within the policy's
    /// [`replay_buffer`](crate::RetryPolicyBuilder::replay_buffer) ([`GrpcReplay`]).
    ///
    /// The caller's deadline (`tonic::Request::set_timeout`) is the call's: no retry waits past it,
    /// and a call it ends without an answer ends with `DEADLINE_EXCEEDED`. Only that deadline goes to
    /// the server as `grpc-timeout`, which a gRPC server applies to the whole call: the attempt
    /// timeout bounds the wait for a response's head, and a stream lasts as long as the server sends.
    ///
    /// Not [`RetryLayer::new`]: tonic's body is not `Clone`, and Rust does not let stagger read a
    /// body that is not `Clone` in the same layer type as those that are (see [`GrpcReplay`]).
    pub const fn grpc(policy: P) -> Self {
        Self {
            policy,
            replay: GrpcReplay,
        }
    }
}

impl<F, P: PolicySource> RetryLayer<ReplayFn<F>, P> {
    /// A layer for any service whose requests are [`Clone`], judging each attempt's result with
    /// `classify` instead of the policy's HTTP classifier.
    ///
    /// A policy built with [`classifier`](crate::RetryPolicyBuilder::classifier) is refused with
    /// [`ConfigError::ClassifierUnused`]: its classifier would never be asked; so is, from then on,
    /// the [`reload`](crate::LivePolicy::reload) of a live policy with one.
    ///
    /// Here a service over `u32` requests that is busy twice, then answers:
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use stagger::{Backoff, Outcome, Reason, RetryLayer, RetryPolicy};
    /// use tower::{Layer, ServiceExt, service_fn};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let calls = AtomicU32::new(0);
    /// let double = service_fn(|n: u32| {
    ///     let busy = calls.fetch_add(1, Ordering::SeqCst) < 2;
    ///     async move { if busy { Err("busy") } else { Ok(n * 2) } }
    /// });
    /// let backoff = Backoff::fixed(Duration::from_millis(10));
    /// let policy = RetryPolicy::builder().backoff(backoff).build().unwrap();
    /// let layer = RetryLayer::classify_with(policy, |result: &Result<u32, &str>| match result {
    ///     Ok(_) => Outcome::Success,
    ///     Err(_) => Outcome::RetrySafe(Reason::Other("busy")),
    /// })
    /// .unwrap();
    /// assert_eq!(layer.layer(double).oneshot(21).await.unwrap(), 42);
    /// assert_eq!(calls.load(Ordering::SeqCst), 3);
    /// # }
    /// ```
    ///
    /// ```
    /// use stagger::classify::from_fn;
    /// use stagger::{ConfigError, Outcome, RetryLayer, RetryPolicy};
    ///
    /// let http = RetryPolicy::builder().classifier(from_fn(|_, _| Outcome::Fatal)).build()?;
    /// let layer = RetryLayer::classify_with(http, |_: &Result<u32, ()>| Outcome::Success);
    /// assert_eq!(layer.unwrap_err(), ConfigError::ClassifierUnused);
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn classify_with(policy: P, classify: F) -> Result<Self, ConfigError> {
        policy.judged_by_closure()?;
        Ok(Self {
            policy,
            replay: ReplayFn::new(classify),
        })
    }
}

impl<S, R: Clone, P: PolicySource> Layer<S> for RetryLayer<R, P> {
    type Service = Retry<S, R, P>;

    fn layer(&self, inner: S) -> Self::Service {
        Retry::new(inner, self.policy.clone(), self.replay.clone())
    }
}
