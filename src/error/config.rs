//! [`ConfigError`]: why a configuration was refused, and the bounds it enforces.

use std::fmt;
use std::time::Duration;

/// The largest [`RetryBudgetBuilder::ratio`](crate::RetryBudgetBuilder::ratio): one retry per request.
pub(crate) const MAX_RATIO: f64 = 1.0;
/// The shortest [`RetryBudgetBuilder::window`](crate::RetryBudgetBuilder::window).
pub(crate) const MIN_WINDOW: Duration = Duration::from_secs(1);
/// The longest [`RetryBudgetBuilder::window`](crate::RetryBudgetBuilder::window).
pub(crate) const MAX_WINDOW: Duration = Duration::from_secs(60);
/// The shortest window of adaptive throttling: below it, the counts are too few to tell overload from
/// bad luck.
pub(crate) const MIN_THROTTLE_WINDOW: Duration = Duration::from_secs(1);
/// The longest window of adaptive throttling: past it, an overload is remembered for minutes after it
/// has ended.
pub(crate) const MAX_THROTTLE_WINDOW: Duration = Duration::from_secs(300);
pub(crate) const MAX_BREAKER_FAILURES: u32 = 10_000;
pub(crate) const MAX_BREAKER_HOLD: Duration = Duration::from_secs(300);

/// Why [`RetryPolicyBuilder::build`](crate::RetryPolicyBuilder::build) refused a configuration.
///
/// Each message names the field and the value it was given.
///
/// ```
/// use std::time::Duration;
/// use stagger::{ConfigError, RetryPolicy};
///
/// match RetryPolicy::builder().attempt_timeout(Duration::ZERO).build() {
///     Err(ConfigError::AttemptTimeout(timeout)) => assert_eq!(timeout, Duration::ZERO),
///     other => panic!("expected AttemptTimeout, got {other:?}"),
/// }
///
/// let error = RetryPolicy::builder().max_elapsed(Duration::ZERO).build().unwrap_err();
/// assert_eq!(
///     error.to_string(),
///     "max_elapsed must be greater than zero, got 0ns (use max_elapsed(None) for no deadline)"
/// );
/// ```
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
    /// The retry budget's [`ratio`](crate::RetryBudgetBuilder::ratio) is outside `0.0..=1.0`, or NaN:
    /// often a percentage where a ratio belongs (`20.0` for `0.2`).
    BudgetRatio(f64),
    /// The retry budget's [`window`](crate::RetryBudgetBuilder::window) is outside 1 s to 60 s.
    BudgetWindow(Duration),
    /// `max_elapsed` is zero: no attempt could ever be made.
    MaxElapsed(Duration),
    /// `attempt_timeout` is zero: every attempt would time out before it started.
    AttemptTimeout(Duration),
    /// Adaptive throttling's `k` is below `1.0`, NaN or infinite.
    AdaptiveThrottle(f64),
    /// Adaptive throttling's window is outside 1 s to 300 s.
    AdaptiveThrottleWindow(Duration),
    /// `hedge_after` is zero: every request would be sent twice.
    HedgeAfter(Duration),
    /// [`RetryLayer::classify_with`](crate::RetryLayer::classify_with) was given a policy built with
    /// [`classifier`](crate::RetryPolicyBuilder::classifier), which it would never ask.
    ClassifierUnused,
    /// A restart policy's [`healthy_after`](crate::RestartPolicyBuilder::healthy_after) is zero: every
    /// run would be healthy, and a task that fails at once would be restarted at once, forever.
    HealthyAfter(Duration),
    /// The window of a restart policy's [`max_restarts`](crate::RestartPolicyBuilder::max_restarts)
    /// is zero: no restart would count against the limit.
    RestartWindow(Duration),
    /// A restart policy's [`backoff`](crate::RestartPolicyBuilder::backoff) starts from zero, so that
    /// every delay is zero: a task that fails at once would be restarted at once, forever.
    RestartBackoff(Duration),
    /// A name given to [`grpc_method`](crate::RetryPolicyBuilder::grpc_method) is not a gRPC
    /// method's: neither `/package.Service/Method` nor `package.Service/Method`. No call would match
    /// its rule.
    GrpcMethodName(String),
    /// [`Breaker::with_failures`](crate::Breaker::with_failures) must be within
    /// 1..=[`Breaker::MAX_FAILURES`](crate::Breaker::MAX_FAILURES).
    BreakerFailures(u32),
    /// [`Breaker::hold`](crate::Breaker::hold) must be above zero (use
    /// [`Breaker::fail_fast`](crate::Breaker::fail_fast)) and at most
    /// [`Breaker::MAX_HOLD`](crate::Breaker::MAX_HOLD).
    BreakerHold(Duration),
    /// The breaker's probe backoff must start above zero.
    BreakerProbe(Duration),
    /// The breaker's probe backoff is not a valid backoff: why.
    BreakerProbeBackoff(Box<ConfigError>),
    /// A [`ReplicaSet`](crate::ReplicaSet)'s name is not a host's name (`name` or `name:port`): no
    /// request would go to its replicas.
    ReplicaName(String),
    /// A chaos rule's injection rate is outside `0.0..=1.0`, or NaN: often a percentage where a share
    /// belongs (`5.0` for `0.05`). Feature `chaos`.
    InjectionRate(f64),
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
            Self::BudgetRatio(ratio) => {
                write!(
                    f,
                    "budget ratio must be within 0.0..={MAX_RATIO:?}, got {ratio}: it is retries per \
                     request, not a percentage, so 20 % is 0.2"
                )?;
                if *ratio > MAX_RATIO {
                    f.write_str(
                        ", and over 1.0 retries would more than double the load on a failing server \
                         (use budget(None) for no budget)",
                    )?;
                }
                Ok(())
            }
            Self::BudgetWindow(window) => {
                write!(
                    f,
                    "budget window must be within {MIN_WINDOW:?}..={MAX_WINDOW:?}, got {window:?}: "
                )?;
                if *window < MIN_WINDOW {
                    f.write_str(
                        "the floor of min_per_second is held as whole retries per window, and under \
                         1s it can round to none (1 retry/s over 500ms is half a retry)",
                    )
                } else {
                    f.write_str(
                        "the window banks the deposits of calm spells, and over 60s the first \
                         moments of an outage could spend more than a minute's worth of them at once",
                    )
                }
            }
            Self::MaxElapsed(max_elapsed) => write!(
                f,
                "max_elapsed must be greater than zero, got {max_elapsed:?} (use max_elapsed(None) for no deadline)"
            ),
            Self::AdaptiveThrottle(k) => write!(
                f,
                "adaptive_throttle's k must be a finite number >= 1.0, got {k}: below 1.0 a backend \
                 that accepts every request would still be throttled (2.0 is the SRE book's choice)"
            ),
            Self::AdaptiveThrottleWindow(window) => write!(
                f,
                "adaptive_throttle_window must be within 1s..=300s, got {window:?}"
            ),
            Self::HealthyAfter(after) => write!(
                f,
                "healthy_after must be greater than zero, got {after:?}: a task that fails at once would \
                 be restarted at once, forever (use healthy_after(None) for delays that never start over)"
            ),
            Self::RestartWindow(within) => write!(
                f,
                "max_restarts' window must be greater than zero, got {within:?}: no restart would count \
                 against the limit (use max_restarts(None, ..) for no limit)"
            ),
            Self::RestartBackoff(initial) => write!(
                f,
                "the restart backoff's initial delay must be greater than zero, got {initial:?}: a task \
                 that fails at once would be restarted at once, forever"
            ),
            Self::GrpcMethodName(name) => write!(
                f,
                "grpc_method's name must be /package.Service/Method (or package.Service/Method), \
                 got {name:?}: no call would match its rule"
            ),
            Self::BreakerFailures(failures) => write!(
                f,
                "the breaker's failures in a row must be within 1..={}, got {failures}",
                MAX_BREAKER_FAILURES
            ),
            Self::BreakerHold(bound) => {
                if bound.is_zero() {
                    write!(
                        f,
                        "the breaker's hold must be greater than zero, got {bound:?} \
                         (use Breaker::fail_fast() for requests that fail at once)"
                    )
                } else {
                    write!(
                        f,
                        "the breaker's hold must be at most {:?}, got {bound:?}: past it a request \
                         would wait longer than any host's pause is ever held",
                        MAX_BREAKER_HOLD
                    )
                }
            }
            Self::BreakerProbe(initial) => write!(
                f,
                "the breaker's probe backoff must start above zero, got {initial:?}: a down host \
                 would be probed by every request"
            ),
            Self::BreakerProbeBackoff(error) => write!(f, "the breaker's probe backoff: {error}"),
            Self::ReplicaName(name) => write!(
                f,
                "a replica set's name must be a host's name, name or name:port, got {name:?}: no \
                 request would go to its replicas"
            ),
            Self::InjectionRate(rate) => write!(
                f,
                "the injection rate must be within 0.0..=1.0, got {rate}: it is a share of calls, \
                 not a percentage, so 5 % is 0.05"
            ),
            Self::ClassifierUnused => f.write_str(
                "the policy's classifier would never be asked: classify_with judges every result \
                 with its closure (build the policy without classifier(), or use RetryLayer::new)",
            ),
            Self::HedgeAfter(delay) => write!(
                f,
                "hedge_after must be greater than zero, got {delay:?}: every request would be sent twice"
            ),
            Self::AttemptTimeout(timeout) => write!(
                f,
                "attempt_timeout must be greater than zero, got {timeout:?} (use attempt_timeout(None) for none)"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}
