//! The retry budget shared by every clone of a policy.
//!
//! # Why a budget, and not just a maximum number of retries
//!
//! `max_retries = 3` bounds what one request costs, not what a fleet costs: when a dependency fails
//! outright, every request is retried three times and the failing server sees four times its normal load
//! at the moment it can least take it. A budget bounds the *ratio* of retries to requests instead: each
//! request deposits, each retry withdraws, and when the account is empty retries stop until requests
//! refill it. Under a total outage the extra load stays at the budget's percentage (20 % by default), plus
//! a small floor of retries per second so that a client sending few requests can still retry at all.
//!
//! stagger uses [`tower::retry::budget::TpsBudget`]: it keeps its window on `tokio::time::Instant`
//! (so paused-time tests see it expire), it is lock-free on the fast path but for a short critical section
//! once per window slot, and it is what the tower ecosystem already knows. Its constructor asserts its
//! ranges; [`BudgetConfig::validate`] checks them first so that a bad value is a
//! [`ConfigError`](crate::ConfigError) rather than a panic.

use std::time::Duration;

use tower::retry::budget::TpsBudget;

use crate::error::ConfigError;

/// The shape of a retry budget: how much extra load retries may add.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BudgetConfig {
    /// How long a deposit counts.
    pub(crate) window: Duration,
    /// Retries per second always allowed, whatever the traffic.
    pub(crate) min_per_second: u32,
    /// Retries allowed per 100 requests.
    pub(crate) percent: f32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(10),
            min_per_second: 10,
            percent: 20.0,
        }
    }
}

impl BudgetConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1000.0).contains(&self.percent) {
            return Err(ConfigError::BudgetPercent(self.percent));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&self.window) {
            return Err(ConfigError::BudgetWindow(self.window));
        }
        if self.min_per_second >= i32::MAX as u32 {
            return Err(ConfigError::BudgetMinPerSecond(self.min_per_second));
        }
        Ok(())
    }

    /// Builds the budget; the caller has validated the configuration, so `TpsBudget`'s asserts hold.
    pub(crate) fn build(&self) -> TpsBudget {
        TpsBudget::new(self.window, self.min_per_second, self.percent / 100.0)
    }
}
