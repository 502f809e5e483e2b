//! [`ServiceConfigLayer`] and [`ServiceConfigRetry`]: `RetryLayer::grpc` under a gRPC service
//! config, each call under its method's policy and timeout (feature `tonic`).

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use ::tower::{Layer, Service};

use super::future::ResponseFuture;
use super::layer::RetryLayer;
use crate::attempt::{RetryInfo, StopReason};
use crate::classify::GrpcName;
use crate::config::service_config::GrpcServiceConfig;
use crate::config::service_config::policies::GrpcPolicies;
use crate::engine::builder::RetryPolicyBuilder;
use crate::engine::policy::RetryPolicy;
use crate::error::{ConfigError, Error};
use crate::replay::{GrpcReplay, Judge};
use crate::signals::grpc::{encode_timeout, parse_timeout};

type GrpcRequest = http::Request<tonic::body::Body>;

// `RetryLayer`'s inherent impl: `new`, `grpc` and `classify_with` in `layer.rs`; the service
// config's constructor here, beside the layer it makes.
impl RetryLayer {
    /// A layer that retries the calls of a tonic client as a gRPC service config says (feature
    /// `tonic`), as C-core's client would under the same document: each call under its method
    /// config's `retryPolicy` (or `hedgingPolicy`) and `timeout`, matched by its service and method,
    /// its service alone, or the default; the channel's retries throttled by `retryThrottling`.
    ///
    /// `builder` gives what a service config cannot say, for every method: the breaker, the host
    /// cooldown, adaptive throttling, the replay buffer, the attempt timeout and `max_elapsed`, the
    /// classifier and the hook, the budget (which `retryThrottling`, when the config sets it,
    /// replaces). Its backoff, `max_retries`, gRPC codes and hedging are the service config's for
    /// the methods it configures; a call no method config matches is not retried. The repository's
    /// `docs/grpc.md` has the rules, field by field, beside C-core's.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use stagger::{GrpcServiceConfig, RetryLayer, RetryPolicy};
    /// use tower::ServiceBuilder;
    ///
    /// // Handed by the platform team, as every other client of the service gets it.
    /// let config = GrpcServiceConfig::from_json(r#"{
    ///   "methodConfig": [{
    ///     "name": [{"service": "shop.Catalog"}],
    ///     "timeout": "2s",
    ///     "retryPolicy": {"maxAttempts": 4, "initialBackoff": "0.1s", "maxBackoff": "1s",
    ///                     "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}
    ///   }],
    ///   "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
    /// }"#)?;
    /// for notice in config.notices() {
    ///     eprintln!("service config: {notice}");
    /// }
    /// let channel = tonic::transport::Channel::from_static("http://[::1]:50051").connect_lazy();
    /// let channel = ServiceBuilder::new()
    ///     .layer(RetryLayer::grpc_service_config(RetryPolicy::builder(), &config)?)
    ///     .service(channel);
    /// let mut client = tonic::client::Grpc::new(channel); // or `CatalogClient::new(channel)`
    /// client.ready().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// The builder's checks apply ([`ConfigError`]); the service config's were made when it was
    /// read ([`GrpcServiceConfig::from_json`]).
    ///
    /// A new service config from the resolver goes to [`ServiceConfigLayer::reload`].
    pub fn grpc_service_config(
        builder: RetryPolicyBuilder,
        config: &GrpcServiceConfig,
    ) -> Result<ServiceConfigLayer, ConfigError> {
        Ok(ServiceConfigLayer {
            live: Arc::new(Live {
                policies: RwLock::new(Arc::new(GrpcPolicies::new(builder, config)?)),
                reloading: Mutex::new(()),
            }),
        })
    }
}

/// Retries the calls of a tonic client under a gRPC service config, each under its method's policy;
/// made by [`RetryLayer::grpc_service_config`].
///
/// ```
/// use std::time::Duration;
/// use stagger::{GrpcServiceConfig, RetryLayer, RetryPolicy};
///
/// let config = GrpcServiceConfig::from_json(r#"{"methodConfig": [
///   {"name": [{"service": "shop.Catalog"}],
///    "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
///                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}},
///   {"name": [{"service": "shop.Catalog", "method": "Buy"}], "timeout": "5s"}
/// ]}"#)?;
/// let layer = RetryLayer::grpc_service_config(RetryPolicy::builder(), &config)?;
/// assert_eq!(layer.policy_of("/shop.Catalog/List").max_retries(), 2);
/// assert_eq!(layer.policy_of("/shop.Catalog/List").backoff().initial(), Duration::from_millis(100));
/// // Its own method config, without a retryPolicy: not retried.
/// assert_eq!(layer.policy_of("/shop.Catalog/Buy").max_retries(), 0);
/// assert_eq!(layer.policy_of("/shop.Orders/Get").max_retries(), 0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # A new service config
///
/// A clone of the layer is a handle on the services it made: [`reload`](Self::reload) gives them
/// the service config a resolver sends next, as a gRPC channel takes its resolver's, keeping what
/// the guards know.
#[derive(Debug, Clone)]
pub struct ServiceConfigLayer {
    live: Arc<Live>,
}

/// The policies the services of one layer follow, which a reload replaces.
#[derive(Debug)]
struct Live {
    policies: RwLock<Arc<GrpcPolicies>>,
    /// One reload at a time: each reshapes the guards from the shapes the last one left.
    reloading: Mutex<()>,
}

impl Live {
    fn policies(&self) -> std::sync::RwLockReadGuard<'_, Arc<GrpcPolicies>> {
        self.policies.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ServiceConfigLayer {
    /// The policy the calls of the method `full_name` (`/package.Service/Method`) that start now
    /// run under; a name that is not a method's gets the default method config's, if there is one.
    pub fn policy_of(&self, full_name: &str) -> RetryPolicy {
        self.live
            .policies()
            .of(GrpcName::parse(full_name))
            .0
            .clone()
    }

    /// The service config the layer follows.
    pub fn service_config(&self) -> GrpcServiceConfig {
        self.live.policies().config().clone()
    }

    /// Makes `config` the service config of the calls that start from now on, through every
    /// service this layer (or a clone of it) made; the calls in flight end under the one they
    /// started with. The builder's settings stay, and so do the guards and what they know: a host
    /// the breaker found down stays down, its calls held; the budget's account, or, when both
    /// configs set `retryThrottling`, each server's tokens, scaled to the new `maxTokens` as
    /// C-core scales them (a server whose retries were throttled stays throttled).
    ///
    /// ```
    /// use stagger::{GrpcServiceConfig, RetryLayer, RetryPolicy};
    ///
    /// let retry = |attempts: u32| GrpcServiceConfig::from_json(&format!(r#"{{"methodConfig": [
    ///   {{"name": [{{"service": "shop.Catalog"}}],
    ///    "retryPolicy": {{"maxAttempts": {attempts}, "initialBackoff": "0.1s", "maxBackoff": "1s",
    ///                    "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}}}
    /// ]}}"#));
    /// let layer = RetryLayer::grpc_service_config(RetryPolicy::builder(), &retry(3)?)?;
    /// assert_eq!(layer.policy_of("/shop.Catalog/List").max_retries(), 2);
    /// layer.reload(&retry(5)?);
    /// assert_eq!(layer.policy_of("/shop.Catalog/List").max_retries(), 4);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reload(&self, config: &GrpcServiceConfig) {
        let _one_at_a_time = (self.live.reloading)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let next = Arc::new(self.live.policies().reloaded(config));
        let previous = std::mem::replace(
            &mut *(self.live.policies)
                .write()
                .unwrap_or_else(PoisonError::into_inner),
            next,
        );
        drop(previous);
    }
}

impl<S> Layer<S> for ServiceConfigLayer {
    type Service = ServiceConfigRetry<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ServiceConfigRetry {
            inner,
            live: Arc::clone(&self.live),
        }
    }
}

/// The service of [`ServiceConfigLayer`]: [`Retry`](super::Retry) with [`GrpcReplay`], each call
/// under its method's policy, with its method config's timeout as its deadline when the caller's is
/// not sooner.
#[derive(Debug, Clone)]
pub struct ServiceConfigRetry<S> {
    inner: S,
    live: Arc<Live>,
}

impl<S> ServiceConfigRetry<S> {
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

impl<S> Service<GrpcRequest> for ServiceConfigRetry<S>
where
    S: Service<GrpcRequest> + Clone,
    GrpcReplay: Judge<GrpcRequest, S::Response, S::Error>,
{
    type Response = S::Response;
    type Error = Error<S::Error>;
    type Future = ResponseFuture<S, GrpcRequest, GrpcReplay>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(|error| {
            Error::from_inner(
                error,
                RetryInfo::stopped_before_sending(StopReason::NotReady),
            )
        })
    }

    fn call(&mut self, mut request: GrpcRequest) -> Self::Future {
        let state = {
            let policies = self.live.policies();
            let (policy, timeout) = policies.of(method_of(&request));
            if let Some(timeout) = timeout {
                shorten_deadline(&mut request, timeout);
            }
            policy.start_unclocked()
        };
        // As `Retry::call`: the service driven ready takes the call, a clone stays behind.
        let clone = self.inner.clone();
        let service = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::new(service, state, GrpcReplay, request)
    }
}

/// The method a call names: tonic's `GrpcMethod` in its extensions, or its path's last two
/// segments.
fn method_of(request: &GrpcRequest) -> Option<GrpcName<'_>> {
    match request.extensions().get::<tonic::GrpcMethod<'static>>() {
        Some(named) => GrpcName::of(named.service(), named.method()),
        None => GrpcName::from_path(request.uri().path()),
    }
}

/// The method config's timeout as the call's deadline, unless the caller's (`grpc-timeout`) is
/// sooner: the deadline the retries keep and the server is told.
fn shorten_deadline(request: &mut GrpcRequest, timeout: Duration) {
    let headers = request.headers_mut();
    let caller = headers.get("grpc-timeout").and_then(parse_timeout);
    if caller.is_none_or(|caller| timeout < caller) {
        headers.insert("grpc-timeout", encode_timeout(timeout));
    }
}
