//! [`GrpcServiceConfig`]: gRPC's service config, read and checked as gRPC's C-core reads it, and
//! the per-method policies it makes of a builder's settings.

mod document;
mod load;
mod notice;
pub(crate) mod policies;

use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

use crate::classify::{GrpcCodes, GrpcName};
use crate::error::ServiceConfigError;

pub use notice::ServiceConfigNotice;

/// gRPC's service config, the JSON document that C-core, grpc-go and grpc-java read, per method:
/// its `methodConfig` entries (`name`, `retryPolicy`, `hedgingPolicy`, `timeout`, `waitForReady`,
/// the message limits), its `retryThrottling`, and its load-balancing fields, checked and then left
/// to the channel.
///
/// [`from_json`](Self::from_json) accepts what C-core accepts and refuses what it refuses, naming
/// the field ([`ServiceConfigError`]); where C-core changes what it was given (a `maxAttempts` over
/// 5, clamped to 5) or ignores part of it (a `hedgingPolicy`), it says so in
/// [`notices`](Self::notices). [`RetryLayer::grpc_service_config`](crate::RetryLayer::grpc_service_config)
/// makes a layer of it. The repository's `docs/grpc.md` compares it with C-core field by field.
///
/// ```
/// use stagger::{GrpcServiceConfig, ServiceConfigNotice};
///
/// let config: GrpcServiceConfig = r#"{
///   "methodConfig": [{
///     "name": [{"service": "shop.Catalog"}],
///     "retryPolicy": {
///       "maxAttempts": 10,
///       "initialBackoff": "0.1s",
///       "maxBackoff": "1s",
///       "backoffMultiplier": 2,
///       "retryableStatusCodes": ["UNAVAILABLE"]
///     }
///   }],
///   "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
/// }"#
/// .parse()?;
/// assert_eq!(
///     config.notices(),
///     [ServiceConfigNotice::MaxAttemptsClamped {
///         path: "methodConfig[0].retryPolicy.maxAttempts".into(),
///         given: 10,
///         used: 5,
///     }]
/// );
/// assert_eq!(config.retry_throttling(), Some((10, 0.1)));
/// # Ok::<(), stagger::ServiceConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct GrpcServiceConfig {
    methods: Vec<MethodConfig>,
    /// `/service/method`, or `/service/` for every method of a service, to its method config.
    names: HashMap<String, usize>,
    /// The method config of every method no name matches.
    default: Option<usize>,
    throttling: Option<Throttling>,
    notices: Vec<ServiceConfigNotice>,
}

/// One `methodConfig` entry, as the calls it matches use it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MethodConfig {
    pub(crate) policy: CallPolicy,
    pub(crate) timeout: Option<Duration>,
    pub(crate) wait_for_ready: Option<bool>,
    pub(crate) max_request_bytes: Option<u32>,
    pub(crate) max_response_bytes: Option<u32>,
}

/// What a method config does with a call that fails.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum CallPolicy {
    /// Nothing: no `retryPolicy`, and no `hedgingPolicy` that could be read.
    None,
    Retry(RetryPolicySpec),
    Hedging(HedgingPolicySpec),
}

/// A `retryPolicy`, checked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RetryPolicySpec {
    /// At most 5.
    pub(crate) max_attempts: u32,
    pub(crate) initial_backoff: Duration,
    pub(crate) max_backoff: Duration,
    /// C-core reads it as a 32-bit float: anything above zero, infinity and NaN among them.
    pub(crate) backoff_multiplier: f32,
    pub(crate) retryable: GrpcCodes,
}

/// A `hedgingPolicy`, as A6 and grpc-java read it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct HedgingPolicySpec {
    /// At most 5.
    pub(crate) max_attempts: u32,
    pub(crate) hedging_delay: Duration,
    pub(crate) non_fatal: GrpcCodes,
}

/// `retryThrottling`: `maxTokens`, and `tokenRatio` in thousandths of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Throttling {
    pub(crate) max_tokens: u32,
    pub(crate) milli_ratio: u64,
}

impl GrpcServiceConfig {
    /// Reads a service config, as C-core reads the JSON of its `grpc.service_config` channel
    /// argument or a resolver's: what C-core refuses is refused, with the field's path.
    ///
    /// ```
    /// use stagger::GrpcServiceConfig;
    ///
    /// // Status codes by their upper-case names only, as C-core reads them.
    /// let lower = r#"{"methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 3,
    ///   "initialBackoff": "0.1s", "maxBackoff": "1s", "backoffMultiplier": 2,
    ///   "retryableStatusCodes": ["unavailable"]}}]}"#;
    /// let error = GrpcServiceConfig::from_json(lower).unwrap_err();
    /// assert_eq!(error.path(), "methodConfig[0].retryPolicy.retryableStatusCodes[0]");
    /// ```
    pub fn from_json(json: &str) -> Result<Self, ServiceConfigError> {
        document::read(json)
    }

    /// What was read otherwise than it was written, and why: each `maxAttempts` clamped to 5, each
    /// `hedgingPolicy` not applied. Empty for most documents. C-core logs the first kind and says
    /// nothing of the second.
    pub fn notices(&self) -> &[ServiceConfigNotice] {
        &self.notices
    }

    /// `retryThrottling`'s `maxTokens` and `tokenRatio` (to three decimal places), if it is set.
    pub fn retry_throttling(&self) -> Option<(u32, f64)> {
        self.throttling
            .map(|t| (t.max_tokens, t.milli_ratio as f64 / 1000.0))
    }

    /// The timeout of the method `full_name` (`/package.Service/Method`), if its method config sets
    /// one: its calls' deadline, unless the caller's is sooner.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::GrpcServiceConfig;
    ///
    /// let config = GrpcServiceConfig::from_json(
    ///     r#"{"methodConfig": [{"name": [{"service": "shop.Catalog", "method": "List"}],
    ///        "timeout": "2.5s"}]}"#,
    /// )?;
    /// assert_eq!(config.timeout_of("/shop.Catalog/List"), Some(Duration::from_millis(2500)));
    /// assert_eq!(config.timeout_of("/shop.Catalog/Get"), None);
    /// # Ok::<(), stagger::ServiceConfigError>(())
    /// ```
    pub fn timeout_of(&self, full_name: &str) -> Option<Duration> {
        self.method_config(GrpcName::parse(full_name)?)?.timeout
    }

    /// The method config a call of `name` uses, as A6 and C-core match it: the one that names its
    /// service and method, else the one that names its service alone, else the default (a name
    /// `{}`, or an empty `service`).
    pub(crate) fn method_config(&self, name: GrpcName<'_>) -> Option<&MethodConfig> {
        self.index_of(name).map(|i| &self.methods[i])
    }

    pub(crate) fn index_of(&self, name: GrpcName<'_>) -> Option<usize> {
        let exact = format!("/{}/{}", name.service(), name.method());
        let service = format!("/{}/", name.service());
        (self.names.get(&exact).or_else(|| self.names.get(&service)))
            .copied()
            .or(self.default)
    }

    /// The default method config's index, for a call whose method is not known.
    pub(crate) fn default_index(&self) -> Option<usize> {
        self.default
    }

    pub(crate) fn methods(&self) -> &[MethodConfig] {
        &self.methods
    }

    pub(crate) fn throttling(&self) -> Option<Throttling> {
        self.throttling
    }
}

impl FromStr for GrpcServiceConfig {
    type Err = ServiceConfigError;

    /// [`GrpcServiceConfig::from_json`].
    fn from_str(json: &str) -> Result<Self, Self::Err> {
        Self::from_json(json)
    }
}
