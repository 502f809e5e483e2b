//! The tower integration: the [`Retry`] service that [`RetryLayer`](crate::RetryLayer) makes, and its
//! future; and [`Restarting`], which remakes `tower::reconnect`'s connections on a restart schedule.

mod future;
pub(crate) mod layer;
mod restarting;
mod service;
#[cfg(feature = "tonic")]
mod service_config;

pub use future::ResponseFuture;
pub use restarting::{Restarting, RestartingFuture};
pub use service::Retry;
#[cfg(feature = "tonic")]
pub use service_config::{ServiceConfigLayer, ServiceConfigRetry};
