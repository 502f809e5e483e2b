//! The tail scenario's clients: when each new request is made, by whom, and each client's policy.

use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use stagger::RetryPolicy;

use super::{ARRIVALS, POLICY, SEND_FOR, Scenario};
use crate::sim::mix;

/// A seed of its own for `stream` of a run seeded with `seed`.
pub(super) fn stream(seed: u64, stream: u64) -> u64 {
    mix(mix(seed) ^ stream)
}

/// The new requests: when each is made, and by which client. A Poisson stream at the scenario's rate.
pub(super) fn arrivals(scenario: &Scenario) -> Vec<(Duration, usize)> {
    let mut rng = SmallRng::seed_from_u64(stream(scenario.seed, ARRIVALS));
    let rate = scenario.rate();
    let mut at = 0.0;
    let mut arrivals = Vec::with_capacity((rate * SEND_FOR.as_secs_f64() * 1.1) as usize);
    loop {
        at += -(1.0 - rng.random::<f64>()).ln() / rate;
        if at >= SEND_FOR.as_secs_f64() {
            return arrivals;
        }
        let client = rng.random_range(0..scenario.clients);
        arrivals.push((Duration::from_secs_f64(at), client));
    }
}

/// The policy of client `client`: stagger's defaults, one retry for the hedge, and the hedge.
pub(super) fn policy(
    scenario: &Scenario,
    client: usize,
    hedge_after: Option<Duration>,
) -> RetryPolicy {
    let seed = stream(stream(scenario.seed, POLICY), client as u64);
    let builder = RetryPolicy::builder().max_retries(1).seed(seed);
    let builder = match hedge_after {
        Some(delay) => builder.hedge_after(delay),
        None => builder,
    };
    builder.build().expect("a valid policy")
}
