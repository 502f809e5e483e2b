//! [`Replicas`]: a tower service that sends each request through the client of the replica it
//! names (feature `tower`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use ::tower::Service;
use ::tower::util::Oneshot;
use pin_project_lite::pin_project;

use super::clients::{Clients, Counted};
use super::{ReplicaError, ReplicaSet};
use crate::guards::replicas::Replica;

/// A tower service over a client per replica of a [`ReplicaSet`]: each request goes through the
/// client of the [`Replica`] in its extensions (the one [`RetryLayer`](crate::RetryLayer) placed
/// its attempt on), counted among that replica's attempts in flight while it runs.
///
/// `make` makes a replica's client from its address the first time it is sent to: a client
/// pinned to that address that keeps the name for TLS and `Host` (hyper-util's client over an
/// `HttpConnector` with `OneAddress`; a tonic `Channel` from
/// `grpc_channel`; reqwest's `Client` through `Replicas::reqwest`). A
/// replica that leaves the set has its client let go; its calls in flight end as they would have.
/// Each request readies its replica's client itself (`oneshot`), so this service is always ready.
///
/// ```
/// use std::convert::Infallible;
/// use std::net::SocketAddr;
/// use stagger::replicas::Replicas;
/// use stagger::{ReplicaSet, RetryInfo, RetryLayer, RetryPolicy};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let addrs: Vec<SocketAddr> = vec!["127.0.0.2:8080".parse()?, "127.0.0.3:8080".parse()?];
/// let set = ReplicaSet::new("api.internal:8080", addrs)?;
/// // In place of a client pinned to `addr`, one that answers which replica it is.
/// let make = |addr: SocketAddr| {
///     service_fn(move |_: http::Request<()>| async move {
///         Ok::<_, Infallible>(http::Response::new(addr))
///     })
/// };
/// let policy = RetryPolicy::builder().replicas(set.clone()).build()?;
/// let service = RetryLayer::new(policy).layer(Replicas::new(set, make));
/// let request = http::Request::get("http://api.internal:8080/").body(())?;
/// let response = service.oneshot(request).await?;
/// let info = response.extensions().get::<RetryInfo>().unwrap();
/// assert_eq!(info.replicas(), [*response.body()]);
/// # Ok(())
/// # }
/// ```
pub struct Replicas<S, M> {
    clients: Arc<Clients<S, M>>,
}

impl<S, M> Clone for Replicas<S, M> {
    fn clone(&self) -> Self {
        Self {
            clients: Arc::clone(&self.clients),
        }
    }
}

impl<S, M> std::fmt::Debug for Replicas<S, M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replicas").finish_non_exhaustive()
    }
}

impl<S: Clone, M: Fn(SocketAddr) -> S> Replicas<S, M> {
    /// Sends to `set`'s replicas, each through a client `make` makes from its address.
    pub fn new(set: ReplicaSet, make: M) -> Self {
        Self {
            clients: Arc::new(Clients::new(set, make)),
        }
    }

    /// The set it sends to.
    pub fn set(&self) -> &ReplicaSet {
        self.clients.set()
    }
}

#[cfg(feature = "reqwest")]
impl Replicas<ReqwestClient, Box<dyn Fn(SocketAddr) -> ReqwestClient + Send + Sync>> {
    /// Sends `http::Request`s to `set`'s replicas, each through a `reqwest::Client` that `builder`
    /// makes and that is pinned to the replica's address (`ClientBuilder::resolve`: the name stays
    /// the URL's, for TLS and `Host`, and the port is the URL's). `Err` when reqwest cannot build a
    /// client from `builder` (its TLS backend).
    ///
    /// ```
    /// use stagger::replicas::Replicas;
    /// use stagger::{ReplicaSet, RetryLayer, RetryPolicy};
    /// use tower::Layer;
    ///
    /// let set = ReplicaSet::new("api.internal:8080", ["127.0.0.2:8080".parse()?])?;
    /// let policy = RetryPolicy::builder().replicas(set.clone()).build()?;
    /// let sender = Replicas::reqwest(set, reqwest::Client::builder)?;
    /// let service = RetryLayer::new(policy).layer(sender); // over http::Request<Bytes>
    /// # let _ = service;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reqwest(
        set: ReplicaSet,
        builder: impl Fn() -> reqwest::ClientBuilder + Send + Sync + 'static,
    ) -> Result<Self, reqwest::Error> {
        // A client built once now, so that a builder reqwest refuses is an error here, not later.
        builder().build()?;
        let domain = domain(set.name()).to_owned();
        let make = move |addr: SocketAddr| {
            let pinned = builder().resolve(&domain, addr).build();
            ReqwestClient(pinned.map_err(Arc::new))
        };
        Ok(Self::new(set, Box::new(make)))
    }
}

/// The host of `name` (`name` or `name:port`, `[v6]:port`), without its port.
#[cfg(feature = "reqwest")]
fn domain(name: &str) -> &str {
    match name.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) && !host.is_empty() => {
            host.trim_start_matches('[').trim_end_matches(']')
        }
        _ => name,
    }
}

/// One replica's `reqwest::Client` (see `Replicas::reqwest`), a tower service over
/// `http::Request`s; or the error reqwest built it with.
#[cfg(feature = "reqwest")]
#[derive(Clone, Debug)]
pub struct ReqwestClient(Result<reqwest::Client, Arc<reqwest::Error>>);

#[cfg(feature = "reqwest")]
impl<B: Into<reqwest::Body>> Service<http::Request<B>> for ReqwestClient {
    type Response = reqwest::Response;
    type Error = ReqwestError;
    type Future = Pin<Box<dyn Future<Output = Result<reqwest::Response, ReqwestError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ReqwestError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let client = match &self.0 {
            Ok(client) => client.clone(),
            Err(error) => {
                let error = ReqwestError::Build(Arc::clone(error));
                return Box::pin(std::future::ready(Err(error)));
            }
        };
        let request = match reqwest::Request::try_from(request) {
            Ok(request) => request,
            Err(error) => return Box::pin(std::future::ready(Err(ReqwestError::Reqwest(error)))),
        };
        Box::pin(async move { client.execute(request).await.map_err(ReqwestError::Reqwest) })
    }
}

/// A [`ReqwestClient`]'s error: reqwest's, as it came, or the error its client was built with.
#[cfg(feature = "reqwest")]
#[non_exhaustive]
#[derive(Debug)]
pub enum ReqwestError {
    /// The request's error, as reqwest returned it.
    Reqwest(reqwest::Error),
    /// reqwest could not build the replica's client.
    Build(Arc<reqwest::Error>),
}

#[cfg(feature = "reqwest")]
impl std::fmt::Display for ReqwestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Reqwest(error) => error.fmt(f),
            Self::Build(error) => write!(f, "building the replica's client: {error}"),
        }
    }
}

#[cfg(feature = "reqwest")]
impl std::error::Error for ReqwestError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Reqwest(error) => error.source(),
            Self::Build(error) => Some(&**error),
        }
    }
}

#[cfg(feature = "reqwest")]
impl crate::classify::AsError for ReqwestError {
    fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        match self {
            Self::Reqwest(error) => error,
            Self::Build(error) => &**error,
        }
    }
}

impl<S, M, B> Service<http::Request<B>> for Replicas<S, M>
where
    S: Service<http::Request<B>> + Clone,
    M: Fn(SocketAddr) -> S,
{
    type Response = S::Response;
    type Error = ReplicaError<S::Error>;
    type Future = ReplicasFuture<S, http::Request<B>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let Some(member) = self.clients.replica(request.extensions().get::<Replica>()) else {
            let error = Some(self.clients.none());
            return ReplicasFuture {
                state: State::None { error },
            };
        };
        let client = self.clients.client(&member);
        let attempt = Counted::new(Oneshot::new(client, request), member);
        ReplicasFuture {
            state: State::Sent { attempt },
        }
    }
}

pin_project! {
    /// The response future of [`Replicas`]: the attempt, through the replica's client, or the error
    /// of a set with no replica.
    pub struct ReplicasFuture<S: Service<Req>, Req> {
        #[pin]
        state: State<S, Req>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S: Service<Req>, Req> {
        Sent { #[pin] attempt: Counted<Oneshot<S, Req>> },
        None { error: Option<ReplicaError<S::Error>> },
    }
}

impl<S: Service<Req>, Req> Future for ReplicasFuture<S, Req> {
    type Output = Result<S::Response, ReplicaError<S::Error>>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Sent { attempt } => attempt.poll(cx).map_err(ReplicaError::Inner),
            StateProj::None { error } => match error.take() {
                Some(error) => Poll::Ready(Err(error)),
                None => panic!("`ReplicasFuture` polled after it completed"),
            },
        }
    }
}

impl<S: Service<Req>, Req> std::fmt::Debug for ReplicasFuture<S, Req> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicasFuture").finish_non_exhaustive()
    }
}

#[cfg(all(test, feature = "reqwest"))]
mod tests {
    #[test]
    fn the_domain_of_a_name_is_its_host_without_its_port() {
        assert_eq!(super::domain("api.internal:8080"), "api.internal");
        assert_eq!(super::domain("api.internal"), "api.internal");
        assert_eq!(super::domain("[::1]:8080"), "::1");
    }
}
