//! The tail scenario's clients: when each new request is made, by whom, and each client's policy.

use std::time::Duration;

use stagger::RetryPolicy;

use super::{ARRIVALS, POLICY, SEND_FOR, Scenario};
use crate::sim::{poisson_arrivals, stream};

/// The new requests: when each is made, and by which client. A Poisson stream at the scenario's rate.
pub(super) fn arrivals(scenario: &Scenario) -> Vec<(Duration, usize)> {
    poisson_arrivals(
        stream(scenario.seed, ARRIVALS),
        scenario.rate(),
        SEND_FOR,
        scenario.clients,
    )
}

/// The policy of client `client`: stagger's defaults, one retry for the hedge, and the hedge.
pub(super) fn policy(
    scenario: &Scenario,
    client: usize,
    hedge_after: Option<Duration>,
) -> RetryPolicy {
    let seed = stream(stream(scenario.seed, POLICY), client as u64);
    let builder = crate::sim::own_process(RetryPolicy::builder().max_retries(1).seed(seed));
    let builder = match hedge_after {
        Some(delay) => builder.hedge_after(delay),
        None => builder,
    };
    builder.build().expect("a valid policy")
}
