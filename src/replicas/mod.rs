//! Sending each attempt to the replica the retry layer placed it on: a client per replica, each
//! pinned to its address with the name kept for TLS and `Host`, and the discovery that keeps a
//! [`ReplicaSet`] current.
//!
//! Why stagger owns the pick, and here: reqwest and hyper-util pool connections per name, not per
//! address, so a retry through one client reaches the replica that just failed (one HTTP/2
//! connection carries every attempt; an HTTP/1 retry takes the idle connection, or walks the
//! resolver's addresses in the same order), and a failed connect does not say which address it
//! tried. tonic's balancers pick in `poll_ready`, before the request is seen. With a client per
//! replica beneath the retry layer, the engine places each attempt on a replica
//! ([`RetryPolicyBuilder::replicas`](crate::RetryPolicyBuilder::replicas)), the adapter puts it in
//! the request ([`Replica`]), and the sender sends it there: the replica of every attempt is known,
//! an attempt that timed out or a connect that failed included, and a retry goes to another.
//!
//! - `Replicas`: a tower service over a client per replica (`http::Request`s: hyper-util's
//!   client, a tonic `Channel`, reqwest's `Client` through `Replicas::reqwest`), beneath
//!   [`RetryLayer`](crate::RetryLayer).
//! - `ReplicaMiddleware`: reqwest-middleware's last middleware, after
//!   `RetryMiddleware`, which sends through a `reqwest::Client` per
//!   replica instead of the chain's own.
//! - `OneAddress`: a resolver for hyper-util's `HttpConnector` that answers one address, and
//!   `grpc_channel`: a tonic `Channel` whose connections go to one address.
//! - `Discovery` (feature `tokio`, native targets: its tasks are tokio's): the system resolver asked again on a period, a resolver of your own, or a stream
//!   of [`ReplicaChange`]s, as tonic's `balance_channel` takes.
//!
//! In the browser (wasm32-unknown-unknown) none of the senders is built: `fetch` chooses the
//! connection, and no client can be pinned to an address there.
//!
//! A request that names no replica (sent around the retry layer, or by a policy that does not have
//! the set) goes to the cheaper of two replicas drawn at random. A set with no replica fails the
//! request as a refused connection would (`ReplicaError::NoReplica`), which is retried as one.

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
mod clients;
#[cfg(all(
    feature = "tokio",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
mod discover;
#[cfg(all(
    feature = "hyper-util",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
mod hyper_util;
#[cfg(all(
    feature = "reqwest-middleware",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
mod middleware;
#[cfg(all(
    feature = "tower",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
mod service;

pub use crate::guards::replicas::{Replica, ReplicaChange, ReplicaSet};
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub use clients::{NoReplica, ReplicaError};
#[cfg(all(
    feature = "tokio",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub use discover::Discovery;
#[cfg(all(
    feature = "hyper-util",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub use hyper_util::OneAddress;
#[cfg(all(
    feature = "tonic",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub use hyper_util::grpc_channel;
#[cfg(all(
    feature = "reqwest-middleware",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub use middleware::ReplicaMiddleware;
#[cfg(all(
    feature = "tower",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub use service::{Replicas, ReplicasFuture};
