//! The typed error of an invalid configuration.

use std::fmt;
use std::time::Duration;

/// Why [`RetryPolicyBuilder::build`](crate::RetryPolicyBuilder::build) refused a configuration.
///
/// Each message names the field and the value it was given.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigError {
    /// The backoff base is below `1.0`, NaN or infinite.
    InvalidBase(f64),
    /// The backoff's `max_delay` is smaller than its initial delay.
    MaxDelayBelowInitial {
        /// The configured cap.
        max_delay: Duration,
        /// The configured initial delay.
        initial: Duration,
    },
    /// The retry budget's percentage of extra load is outside `0..=1000`, or NaN.
    BudgetPercent(f32),
    /// The retry budget's window is outside `1 s..=60 s`.
    BudgetWindow(Duration),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidBase(base) => {
                write!(f, "backoff base must be a finite number >= 1.0, got {base}")
            }
            Self::MaxDelayBelowInitial { max_delay, initial } => write!(
                f,
                "backoff max_delay ({max_delay:?}) must not be below the initial delay ({initial:?})"
            ),
            Self::BudgetPercent(percent) => {
                write!(f, "budget percent must be within 0..=1000, got {percent}")
            }
            Self::BudgetWindow(window) => {
                write!(f, "budget window must be within 1s..=60s, got {window:?}")
            }
        }
    }
}

impl std::error::Error for ConfigError {}
