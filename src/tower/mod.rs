//! The tower integration: the [`Retry`] service that [`RetryLayer`](crate::RetryLayer) makes, and its
//! future.

mod future;
pub(crate) mod layer;
mod service;

pub use future::ResponseFuture;
pub use service::Retry;
