//! The builder's setting that only a gRPC service config gives: A6's retry throttling, in place of
//! the budget.

use crate::engine::builder::{Budget, RetryPolicyBuilder};

impl RetryPolicyBuilder {
    /// Throttles retries and hedges with gRPC's token bucket per server name (A6's `retryThrottling`):
    /// buckets of `max_tokens`, given back `milli_ratio` thousandths of a token per success. It takes
    /// the place of the budget: both bound the extra load of retries, and a service config that sets
    /// it is held to it as every gRPC client holds it.
    pub(crate) fn grpc_retry_throttling(mut self, max_tokens: u32, milli_ratio: u64) -> Self {
        self.retry_throttling = Some((max_tokens, milli_ratio));
        self.budget = Budget::Off;
        self
    }
}
