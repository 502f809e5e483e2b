//! The I/O-free engine: delay arithmetic, jitter bounds and statistics, configuration errors, and the
//! state machine's decisions.
//!
//! One module per subject, under `tests/core/`; this file holds what they share.

use std::time::Duration;

use http::StatusCode;
use stagger::{Backoff, Jitter, Outcome, Reason, RetryBudget, RetryPolicy};

// One module per subject; docs/rules.md says which test pins down which promise.
#[path = "core/budget.rs"]
mod budget;
#[path = "core/config.rs"]
mod config;
#[path = "core/delays.rs"]
mod delays;
#[path = "core/state_machine.rs"]
mod state_machine;
#[path = "core/statistics.rs"]
mod statistics;

// What the modules share: the unit of time, the failures most tests meet, the policy they start from,
// and a budget of one retry.

const MS: Duration = Duration::from_millis(1);

fn unavailable() -> Outcome {
    Outcome::RetrySafe(Reason::Status(StatusCode::SERVICE_UNAVAILABLE))
}

fn internal_error() -> Outcome {
    Outcome::RetryIfIdempotent(Reason::Status(StatusCode::INTERNAL_SERVER_ERROR))
}

fn base() -> stagger::RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::exponential(100 * MS).with_jitter(Jitter::None))
        .budget(None)
        .seed(7)
}

/// Exactly one retry: no ratio, a floor of one retry a second over a one-second window.
fn budget_of_one() -> RetryBudget {
    RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(1)
        .window(Duration::from_secs(1))
        .build()
        .unwrap()
}
