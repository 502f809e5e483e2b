//! The tower integration: [`RetryLayer`], the [`Retry`] service and its future.

mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::RetryLayer;
pub use service::Retry;
