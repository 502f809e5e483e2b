//! `ReplicaMiddleware`: reqwest-middleware's last middleware, sending each request through the
//! `reqwest::Client` of the replica it names (feature `reqwest-middleware`).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use super::ReplicaSet;
use super::clients::{Clients, Counted};
use crate::guards::replicas::Replica;

type MakeClient =
    Box<dyn Fn(SocketAddr) -> Result<reqwest::Client, Arc<reqwest::Error>> + Send + Sync>;

/// The last middleware of a reqwest-middleware chain that reaches a [`ReplicaSet`]: it sends each
/// request through a `reqwest::Client` of the replica in its extensions (the one
/// `RetryMiddleware` placed the attempt on), pinned to that replica's
/// address (`ClientBuilder::resolve`: the name stays the URL's, for TLS and `Host`; the port is the
/// URL's), and not through the chain's own client, which it never calls.
///
/// ```
/// use reqwest_middleware::ClientBuilder;
/// use stagger::replicas::ReplicaMiddleware;
/// use stagger::{ReplicaSet, RetryMiddleware, RetryPolicy};
///
/// let set = ReplicaSet::new("api.internal:8080", ["127.0.0.2:8080".parse()?, "127.0.0.3:8080".parse()?])?;
/// let policy = RetryPolicy::builder().replicas(set.clone()).build()?;
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(policy))
///     .with(ReplicaMiddleware::new(set, reqwest::Client::builder)?)
///     .build();
/// # let _ = client;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct ReplicaMiddleware {
    clients: Arc<Clients<Result<reqwest::Client, Arc<reqwest::Error>>, MakeClient>>,
}

impl std::fmt::Debug for ReplicaMiddleware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaMiddleware")
            .field("set", self.clients.set())
            .finish()
    }
}

impl ReplicaMiddleware {
    /// Sends to `set`'s replicas, each through a client `builder` makes, pinned to its address.
    /// `Err` when reqwest cannot build a client from `builder` (its TLS backend).
    pub fn new(
        set: ReplicaSet,
        builder: impl Fn() -> reqwest::ClientBuilder + Send + Sync + 'static,
    ) -> Result<Self, reqwest::Error> {
        builder().build()?;
        let name = set.name();
        let domain = match name.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            _ => name,
        };
        let domain = domain
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let make: MakeClient =
            Box::new(move |addr| builder().resolve(&domain, addr).build().map_err(Arc::new));
        Ok(Self {
            clients: Arc::new(Clients::new(set, make)),
        })
    }

    /// The set it sends to.
    pub fn set(&self) -> &ReplicaSet {
        self.clients.set()
    }
}

impl Middleware for ReplicaMiddleware {
    fn handle<'s, 'e, 'n, 'f>(
        &'s self,
        request: Request,
        extensions: &'e mut Extensions,
        _next: Next<'n>,
    ) -> Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'f>>
    where
        's: 'f,
        'e: 'f,
        'n: 'f,
        Self: 'f,
    {
        let Some(member) = self.clients.replica(extensions.get::<Replica>()) else {
            let none = self.clients.none::<()>();
            let error = match none {
                super::ReplicaError::NoReplica(none) => reqwest_middleware::Error::middleware(none),
                super::ReplicaError::Inner(()) => unreachable!("made as none"),
            };
            return Box::pin(std::future::ready(Err(error)));
        };
        let client = match self.clients.client(&member) {
            Ok(client) => client,
            Err(error) => {
                let error = reqwest_middleware::Error::middleware(BuildError(error));
                return Box::pin(std::future::ready(Err(error)));
            }
        };
        Box::pin(async move {
            Counted::new(client.execute(request), member)
                .await
                .map_err(reqwest_middleware::Error::Reqwest)
        })
    }
}

/// reqwest could not build a replica's client.
#[derive(Debug)]
struct BuildError(Arc<reqwest::Error>);

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "building the replica's client: {}", self.0)
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}
