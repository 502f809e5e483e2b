//! The tower integration: [`RetryLayer`], the [`Retry`] service and its future; and [`Restarting`],
//! which remakes `tower::reconnect`'s connections on a restart schedule.

mod future;
mod layer;
mod restarting;
mod service;

pub use future::ResponseFuture;
pub use layer::RetryLayer;
pub use restarting::{Restarting, RestartingFuture};
pub use service::Retry;
