//! The tower integration: the [`Retry`] service that [`RetryLayer`](crate::RetryLayer) makes, and its
//! future; [`Restarting`], which remakes `tower::reconnect`'s connections on a restart schedule; and
//! `WithExtensions`, a `reqwest::Request` with extensions of its own beside it (feature `reqwest`).

mod future;
pub(crate) mod layer;
// reqwest's browser client is no `tower::Service`.
#[cfg(all(
    feature = "reqwest",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
mod reqwest_client;
mod restarting;
mod service;
#[cfg(feature = "tonic")]
mod service_config;

#[cfg(all(
    feature = "reqwest",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub use crate::replay::WithExtensions;
pub use future::ResponseFuture;
pub use restarting::{Restarting, RestartingFuture};
pub use service::Retry;
#[cfg(feature = "tonic")]
pub use service_config::{ServiceConfigLayer, ServiceConfigRetry};
