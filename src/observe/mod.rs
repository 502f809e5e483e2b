//! What the retries tell the world: `tracing` events and metrics.

pub(crate) mod log;
pub mod metrics;
pub(crate) mod span;
