//! [`PolicyConfig`]: every setting of a [`RetryPolicy`] a deployment changes, as a document (TOML,
//! JSON, YAML: any serde format), with durations as people write them, a default for each field
//! left out, and the builder's checks naming the field (feature `serde`).

mod human;
mod sections;

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use crate::classify::GrpcCodes;
use crate::engine::builder::RetryPolicyBuilder;
use crate::engine::policy::{RetryAfterMode, RetryPolicy};
use crate::error::{ConfigError, PolicyConfigError};
use human::{limit, retry_after};

pub use sections::{
    AdaptiveThrottleConfig, BackoffConfig, BreakerConfig, BudgetConfig, GrpcConfig,
    GrpcMethodConfig, ProbeBackoffConfig, ThrottleBackoffConfig,
};

/// A [`RetryPolicy`] as data: each field a setting of [`RetryPolicyBuilder`], its default the
/// builder's, unknown fields refused. Classifiers and hooks stay code: add them to
/// [`builder`](Self::builder)'s result.
///
/// The repository's `docs/configuration.md` shows a document with every field and its default.
/// Durations are written `"250ms"`, `"30s"`, `"1m"` (`h`, `m`, `s`, `ms`, `us`, `ns`, a fraction
/// allowed: `"1.5s"`); a limit that can be off (`max_elapsed`, `attempt_timeout`, `hedge_after`)
/// takes `"none"`; gRPC status codes are their upper-case names.
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use stagger::PolicyConfig;
///
/// let config = PolicyConfig::from_deserializer(&mut serde_json::Deserializer::from_str(
///     r#"{"max_retries": 3, "attempt_timeout": "2s", "backoff": {"initial": "250ms"},
///         "budget": {"ratio": 0.1}}"#,
/// ))?;
/// let policy = config.build()?;
/// assert_eq!(policy.max_retries(), 3);
/// assert_eq!(policy.attempt_timeout(), Some(Duration::from_secs(2)));
/// assert_eq!(policy.backoff().initial(), Duration::from_millis(250));
/// assert_eq!(policy.max_elapsed(), Some(Duration::from_secs(30))); // left out: the default
///
/// // A policy written back: the same document, and the seed its jitter was drawn from.
/// let mut written = PolicyConfig::of(&policy);
/// assert!(written.seed.is_some());
/// written.seed = None;
/// assert_eq!(written, config);
/// # Ok(())
/// # }
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    /// [`RetryPolicyBuilder::max_retries`]: 10.
    pub max_retries: u32,
    /// [`RetryPolicyBuilder::max_elapsed`]: `"30s"`; `"none"` for no deadline.
    #[serde(with = "limit")]
    pub max_elapsed: Option<Duration>,
    /// [`RetryPolicyBuilder::attempt_timeout`]: `"10s"`; `"none"` for none.
    #[serde(with = "limit")]
    pub attempt_timeout: Option<Duration>,
    /// [`RetryPolicyBuilder::backoff`].
    pub backoff: BackoffConfig,
    /// [`RetryPolicyBuilder::throttle_backoff`].
    pub throttle_backoff: ThrottleBackoffConfig,
    /// [`RetryPolicyBuilder::retry_after`]: `"spread"`, `"strict"` or `"ignore"`.
    #[serde(with = "retry_after")]
    pub retry_after: RetryAfterMode,
    /// [`RetryPolicyBuilder::max_retry_after`]: `"30s"`.
    #[serde(with = "human::duration")]
    pub max_retry_after: Duration,
    /// [`RetryPolicyBuilder::idempotency_check`]: `true`.
    pub idempotency_check: bool,
    /// [`RetryPolicyBuilder::replay_buffer`], in bytes: 65536.
    pub replay_buffer: usize,
    /// [`RetryPolicyBuilder::hedge_after`]: `"none"`.
    #[serde(with = "limit")]
    pub hedge_after: Option<Duration>,
    /// [`RetryPolicyBuilder::host_cooldown`]: `false`.
    pub host_cooldown: bool,
    /// [`RetryPolicyBuilder::backoff_on_refusal`]: `false`.
    pub backoff_on_refusal: bool,
    /// [`RetryPolicyBuilder::budget`].
    pub budget: BudgetConfig,
    /// [`RetryPolicyBuilder::breaker`].
    pub breaker: BreakerConfig,
    /// [`RetryPolicyBuilder::adaptive_throttle`].
    pub adaptive_throttle: AdaptiveThrottleConfig,
    /// The gRPC settings: [`RetryPolicyBuilder::grpc_retry_on`], `grpc_method`,
    /// `grpc_send_max_elapsed`.
    pub grpc: GrpcConfig,
    /// [`RetryPolicyBuilder::seed`]: none, a seed from OS entropy. For tests and simulations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl Default for PolicyConfig {
    /// The settings of [`RetryPolicy::default`].
    fn default() -> Self {
        Self {
            max_retries: RetryPolicy::DEFAULT_MAX_RETRIES,
            max_elapsed: Some(RetryPolicy::DEFAULT_MAX_ELAPSED),
            attempt_timeout: Some(RetryPolicy::DEFAULT_ATTEMPT_TIMEOUT),
            backoff: BackoffConfig::default(),
            throttle_backoff: ThrottleBackoffConfig::default(),
            retry_after: RetryAfterMode::Spread,
            max_retry_after: RetryPolicy::DEFAULT_MAX_RETRY_AFTER,
            idempotency_check: true,
            replay_buffer: RetryPolicy::DEFAULT_REPLAY_BUFFER,
            hedge_after: None,
            host_cooldown: false,
            backoff_on_refusal: false,
            budget: BudgetConfig::default(),
            breaker: BreakerConfig::default(),
            adaptive_throttle: AdaptiveThrottleConfig::default(),
            grpc: GrpcConfig::default(),
            seed: None,
        }
    }
}

impl PolicyConfig {
    /// Reads a document from `deserializer` (any serde format: `toml::Deserializer`,
    /// `serde_json::Deserializer`, ...), naming the field of any error: an unknown field
    /// (`budget.ratoi`), a value of the wrong type, a duration or a status code not understood.
    ///
    /// `PolicyConfig` is `Deserialize` too, for a document that embeds it; its errors are then the
    /// format's, which name the field but not always its path.
    pub fn from_deserializer<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Self, PolicyConfigError> {
        serde_path_to_error::deserialize(deserializer).map_err(|error| {
            PolicyConfigError::Document {
                path: error.path().to_string(),
                message: error.inner().to_string(),
            }
        })
    }

    /// The settings of `policy`, as a document would give them: a policy's document, which builds
    /// the same settings back. Its classifier and hook, code, are not in it.
    pub fn of(policy: &RetryPolicy) -> Self {
        sections::of(policy)
    }

    /// The builder of these settings, checked as [`build`](Self::build) checks them, to add what
    /// stays code (a classifier, a hook, a shared [`RetryBudget`](crate::RetryBudget)) before it
    /// builds.
    pub fn builder(&self) -> Result<RetryPolicyBuilder, PolicyConfigError> {
        sections::builder(self)
    }

    /// The policy of these settings, or the first the builder refuses, with its field's path
    /// (`breaker.failures`) and the builder's [`ConfigError`].
    ///
    /// ```
    /// use stagger::{ConfigError, PolicyConfig, PolicyConfigError};
    ///
    /// let mut config = PolicyConfig::default();
    /// config.budget.ratio = 20.0; // a percentage where a ratio belongs
    /// let error = config.build().unwrap_err();
    /// assert_eq!(error.path(), "budget.ratio");
    /// assert!(matches!(
    ///     error,
    ///     PolicyConfigError::Invalid { error: ConfigError::BudgetRatio(_), .. }
    /// ));
    /// ```
    pub fn build(&self) -> Result<RetryPolicy, PolicyConfigError> {
        self.builder()?.build().map_err(sections::invalid)
    }
}

/// The path of the field a builder's [`ConfigError`] is about.
fn path_of(error: &ConfigError) -> String {
    match error {
        ConfigError::MaxElapsed(_) => "max_elapsed".into(),
        ConfigError::AttemptTimeout(_) => "attempt_timeout".into(),
        ConfigError::HedgeAfter(_) => "hedge_after".into(),
        ConfigError::BudgetRatio(_) => "budget.ratio".into(),
        ConfigError::BudgetWindow(_) => "budget.window".into(),
        ConfigError::AdaptiveThrottle(_) => "adaptive_throttle.k".into(),
        ConfigError::AdaptiveThrottleWindow(_) => "adaptive_throttle.window".into(),
        ConfigError::BreakerFailures(_) => "breaker.failures".into(),
        ConfigError::BreakerHold(_) => "breaker.hold".into(),
        ConfigError::BreakerProbe(_) => "breaker.probe_backoff.initial".into(),
        ConfigError::BreakerProbeBackoff(inner) => {
            format!("breaker.probe_backoff.{}", backoff_field(inner))
        }
        ConfigError::GrpcMethodName(name) => format!("grpc.methods.{name}"),
        other => backoff_field(other).into(),
    }
}

/// The field of a backoff a [`ConfigError`] is about.
fn backoff_field(error: &ConfigError) -> &'static str {
    match error {
        ConfigError::InvalidBase(_) => "base",
        ConfigError::MaxDelayBelowInitial { .. } => "max_delay",
        _ => "",
    }
}

/// The gRPC codes a method retries and whether it is safe to send twice, by its full name.
pub(crate) type GrpcMethods = BTreeMap<String, GrpcMethodConfig>;

pub(crate) const DEFAULT_GRPC_CODES: GrpcCodes = GrpcCodes::DEFAULT;
