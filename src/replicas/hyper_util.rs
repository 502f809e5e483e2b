//! A resolver of one address for hyper-util's `HttpConnector`, and a tonic `Channel` whose
//! connections go to one address (features `hyper-util`, `tonic`).

use std::future::{Ready, ready};
use std::io;
use std::iter::Once;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;

/// A resolver that answers every name with one address: hyper-util's `HttpConnector` over it
/// (`HttpConnector::new_with_resolver`) connects to one replica whatever the URI names, and the
/// URI's name stays the request's, for TLS and `Host`. The URI's port, when it has one, is the
/// port connected to (`HttpConnector` sets it); give the replicas the name's port.
///
/// With the feature `tower`, a client per replica beneath `RetryLayer`:
///
/// ```
/// # #[cfg(feature = "tower")] {
/// use hyper_util::client::legacy::Client;
/// use hyper_util::client::legacy::connect::HttpConnector;
/// use hyper_util::rt::TokioExecutor;
/// use stagger::replicas::{OneAddress, Replicas};
/// use stagger::ReplicaSet;
///
/// let set = ReplicaSet::new("api.internal:8080", ["127.0.0.2:8080".parse()?])?;
/// let sender = Replicas::new(set, |addr| {
///     let connector = HttpConnector::new_with_resolver(OneAddress::new(addr));
///     Client::builder(TokioExecutor::new()).build::<_, String>(connector)
/// });
/// # let _ = sender;
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OneAddress(SocketAddr);

impl OneAddress {
    /// A resolver that answers `addr`.
    pub const fn new(addr: SocketAddr) -> Self {
        Self(addr)
    }

    /// The address it answers.
    pub const fn addr(&self) -> SocketAddr {
        self.0
    }
}

impl tower::Service<Name> for OneAddress {
    type Response = Once<SocketAddr>;
    type Error = io::Error;
    type Future = Ready<Result<Once<SocketAddr>, io::Error>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _name: Name) -> Self::Future {
        ready(Ok(std::iter::once(self.0)))
    }
}

/// A tonic `Channel` for `endpoint` (its URI, TLS and timeouts) whose connections go to `addr`:
/// the endpoint's URI stays the requests' (`:authority`, TLS's name), as `Endpoint::origin` would
/// keep it, and only the address connected to changes. Connects when first used.
///
/// ```
/// use stagger::replicas::{Replicas, grpc_channel};
/// use stagger::ReplicaSet;
/// use tonic::transport::Endpoint;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let endpoint = Endpoint::from_static("http://api.internal:50051");
/// let set = ReplicaSet::new("api.internal:50051", ["127.0.0.2:50051".parse()?])?;
/// let sender = Replicas::new(set, move |addr| grpc_channel(&endpoint, addr));
/// # let _ = sender;
/// # Ok(())
/// # }
/// ```
#[cfg(feature = "tonic")]
pub fn grpc_channel(
    endpoint: &tonic::transport::Endpoint,
    addr: SocketAddr,
) -> tonic::transport::Channel {
    let mut connector =
        hyper_util::client::legacy::connect::HttpConnector::new_with_resolver(OneAddress(addr));
    // As tonic's own connector: any scheme (TLS is the endpoint's), no Nagle.
    connector.enforce_http(false);
    connector.set_nodelay(true);
    endpoint.connect_with_connector_lazy(connector)
}
