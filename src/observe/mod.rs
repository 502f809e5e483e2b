//! What the retries tell the world: `tracing` events and metrics.

pub(crate) mod log;
pub mod metrics;
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
pub(crate) mod span;
