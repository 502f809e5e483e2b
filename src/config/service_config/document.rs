//! A service config's document, field by field, with C-core's checks: the load-balancing fields
//! and `retryThrottling`, then each `methodConfig` (its fields, then its names).

use std::collections::HashMap;

use super::load::{
    Loaded, Path, array, boolean, duration, float32, int32, member, member_or_null, object,
    required, status_codes, string, token_ratio, uint32,
};
use super::{
    CallPolicy, GrpcServiceConfig, HedgingPolicySpec, MethodConfig, RetryPolicySpec,
    ServiceConfigNotice, Throttling,
};
use crate::config::json::{self, Json, JsonProblem};
use crate::error::{FieldProblem, ServiceConfigError};

/// A6's client-side limit on `maxAttempts`, which C-core applies.
const MAX_ATTEMPTS: u32 = 5;

/// The load-balancing policies C-core 1.85 knows by name, and whether each needs a config.
const LB_POLICIES: [(&str, bool); 15] = [
    ("pick_first", false),
    ("round_robin", false),
    ("weighted_round_robin", false),
    ("grpclb", false),
    ("ring_hash_experimental", false),
    ("rls_experimental", true),
    ("outlier_detection_experimental", true),
    ("priority_experimental", true),
    ("weighted_target_experimental", true),
    ("xds_cluster_impl_experimental", true),
    ("xds_cluster_manager_experimental", true),
    ("xds_override_host_experimental", true),
    ("xds_wrr_locality_experimental", true),
    ("cds_experimental", true),
    ("xds_cluster_resolver_experimental", true),
];

pub(super) fn read(text: &str) -> Result<GrpcServiceConfig, ServiceConfigError> {
    let json = json::parse(text).map_err(|error| ServiceConfigError::Json {
        offset: error.offset,
        reason: match error.reason {
            JsonProblem::Syntax => "not json",
            JsonProblem::DuplicateKey => "duplicate key",
            JsonProblem::TooDeep => "nested too deep",
        },
    })?;
    let root = Path::root();
    object(&json, &root)?;
    load_balancing(&json, &root)?;
    let throttling = match member(&json, "retryThrottling") {
        Some(value) => Some(retry_throttling(value, &root.field("retryThrottling"))?),
        None => None,
    };
    let mut config = GrpcServiceConfig {
        methods: Vec::new(),
        names: HashMap::new(),
        default: None,
        throttling,
        notices: Vec::new(),
    };
    let Some(entries) = member_or_null(&json, "methodConfig") else {
        return Ok(config);
    };
    let path = root.field("methodConfig");
    for (i, entry) in array(entries, &path)?.iter().enumerate() {
        let path = path.index(i);
        object(entry, &path)?;
        let method = method_config(entry, &path, &mut config.notices)?;
        config.methods.push(method);
        names(entry, &path, i, &mut config)?;
    }
    Ok(config)
}

/// `loadBalancingPolicy`, `loadBalancingConfig` and `healthCheckConfig`: checked as C-core checks
/// them (a policy it knows, a list that names one), not applied: the channel balances.
fn load_balancing(json: &Json, root: &Path) -> Loaded<()> {
    if let Some(policy) = member(json, "loadBalancingPolicy") {
        let path = root.field("loadBalancingPolicy");
        let name = string(policy, &path)?.to_ascii_lowercase();
        if !name.is_empty() {
            match LB_POLICIES.iter().find(|(known, _)| *known == name) {
                None => return path.refuse(FieldProblem::UnknownLbPolicy(name)),
                Some((_, true)) => return path.refuse(FieldProblem::LbPolicyNeedsConfig(name)),
                Some((_, false)) => {}
            }
        }
    }
    if let Some(list) = member_or_null(json, "loadBalancingConfig") {
        let path = root.field("loadBalancingConfig");
        let Json::Array(entries) = list else {
            return path.refuse(FieldProblem::NotAnArray);
        };
        let mut names = Vec::new();
        let mut known = false;
        for entry in entries {
            let Json::Object(members) = entry else {
                return path.refuse(FieldProblem::LbConfigEntry);
            };
            let [(name, config)] = members.as_slice() else {
                return path.refuse(FieldProblem::LbConfigEntry);
            };
            if !matches!(config, Json::Object(_)) {
                return path.refuse(FieldProblem::LbConfigEntry);
            }
            if LB_POLICIES.iter().any(|(policy, _)| policy == name) {
                known = true;
                break;
            }
            names.push(name.clone());
        }
        if !known {
            return path.refuse(FieldProblem::NoKnownLbPolicy(names.join(" ")));
        }
    }
    if let Some(health) = member(json, "healthCheckConfig") {
        let path = root.field("healthCheckConfig");
        object(health, &path)?;
        if let Some(name) = member(health, "serviceName") {
            string(name, &path.field("serviceName"))?;
        }
    }
    Ok(())
}

fn retry_throttling(json: &Json, path: &Path) -> Loaded<Throttling> {
    object(json, path)?;
    let max_path = path.field("maxTokens");
    let max_tokens = uint32(
        required(member_or_null(json, "maxTokens"), &max_path)?,
        &max_path,
    )?;
    if max_tokens == 0 {
        return max_path.refuse(FieldProblem::NotPositive);
    }
    let ratio_path = path.field("tokenRatio");
    let milli_ratio = token_ratio(
        required(member_or_null(json, "tokenRatio"), &ratio_path)?,
        &ratio_path,
    )?;
    Ok(Throttling {
        max_tokens,
        milli_ratio,
    })
}

fn method_config(
    json: &Json,
    path: &Path,
    notices: &mut Vec<ServiceConfigNotice>,
) -> Loaded<MethodConfig> {
    let timeout = optional(json, "timeout", path, duration)?;
    let wait_for_ready = optional(json, "waitForReady", path, boolean)?;
    let max_request_bytes = optional(json, "maxRequestMessageBytes", path, uint32)?;
    let max_response_bytes = optional(json, "maxResponseMessageBytes", path, uint32)?;
    let retry = optional(json, "retryPolicy", path, |value, path| {
        retry_policy(value, path, notices)
    })?;
    let hedging = member(json, "hedgingPolicy");
    let policy = match (retry, hedging) {
        (Some(retry), Some(_)) => {
            notices.push(ServiceConfigNotice::HedgingBesideRetry {
                path: path.as_str().to_owned(),
            });
            CallPolicy::Retry(retry)
        }
        (Some(retry), None) => CallPolicy::Retry(retry),
        (None, Some(hedging)) => {
            let path = path.field("hedgingPolicy");
            let mut read = Vec::new();
            match hedging_policy(hedging, &path, &mut read) {
                Ok(spec) => {
                    notices.append(&mut read);
                    CallPolicy::Hedging(spec)
                }
                Err(error) => {
                    notices.push(ServiceConfigNotice::HedgingIgnored {
                        path: error.path().to_owned(),
                        why: match &error {
                            ServiceConfigError::Field { problem, .. } => problem.to_string(),
                            other => other.to_string(),
                        },
                    });
                    CallPolicy::None
                }
            }
        }
        (None, None) => CallPolicy::None,
    };
    Ok(MethodConfig {
        policy,
        timeout,
        wait_for_ready,
        max_request_bytes,
        max_response_bytes,
    })
}

/// An optional field read by `load` (absent and `null` are the same).
fn optional<T>(
    json: &Json,
    key: &str,
    path: &Path,
    load: impl FnOnce(&Json, &Path) -> Loaded<T>,
) -> Loaded<Option<T>> {
    member(json, key)
        .map(|value| load(value, &path.field(key)))
        .transpose()
}

/// `maxAttempts`: at least 2, clamped to 5 with a notice.
fn max_attempts(json: &Json, path: &Path, notices: &mut Vec<ServiceConfigNotice>) -> Loaded<u32> {
    let path = path.field("maxAttempts");
    let given = int32(required(member(json, "maxAttempts"), &path)?, &path)?;
    if given <= 1 {
        return path.refuse(FieldProblem::AtLeastTwo(i64::from(given)));
    }
    let given = given.unsigned_abs();
    if given > MAX_ATTEMPTS {
        notices.push(ServiceConfigNotice::MaxAttemptsClamped {
            path: path.as_str().to_owned(),
            given: i64::from(given),
            used: MAX_ATTEMPTS,
        });
    }
    Ok(given.min(MAX_ATTEMPTS))
}

fn retry_policy(
    json: &Json,
    path: &Path,
    notices: &mut Vec<ServiceConfigNotice>,
) -> Loaded<RetryPolicySpec> {
    object(json, path)?;
    let max_attempts = max_attempts(json, path, notices)?;
    let positive = |key: &str| -> Loaded<std::time::Duration> {
        let path = path.field(key);
        let value = duration(required(member(json, key), &path)?, &path)?;
        if value.is_zero() {
            return path.refuse(FieldProblem::NotPositive);
        }
        Ok(value)
    };
    let initial_backoff = positive("initialBackoff")?;
    let max_backoff = positive("maxBackoff")?;
    let multiplier_path = path.field("backoffMultiplier");
    let backoff_multiplier = float32(
        required(member(json, "backoffMultiplier"), &multiplier_path)?,
        &multiplier_path,
    )?;
    // C-core's check, which lets a NaN through.
    if backoff_multiplier <= 0.0 {
        return multiplier_path.refuse(FieldProblem::NotPositive);
    }
    let retryable = status_codes(json, "retryableStatusCodes", path)?;
    if retryable == crate::classify::GrpcCodes::NONE {
        return path
            .field("retryableStatusCodes")
            .refuse(FieldProblem::Empty);
    }
    Ok(RetryPolicySpec {
        max_attempts,
        initial_backoff,
        max_backoff,
        backoff_multiplier,
        retryable,
    })
}

/// A `hedgingPolicy` as A6 and grpc-java read one: `maxAttempts` at least 2 (clamped to 5),
/// `hedgingDelay` a duration (zero if absent), `nonFatalStatusCodes` status names.
fn hedging_policy(
    json: &Json,
    path: &Path,
    notices: &mut Vec<ServiceConfigNotice>,
) -> Loaded<HedgingPolicySpec> {
    object(json, path)?;
    let max_attempts = max_attempts(json, path, notices)?;
    let mut hedging_delay = optional(json, "hedgingDelay", path, duration)?.unwrap_or_default();
    if hedging_delay.is_zero() {
        notices.push(ServiceConfigNotice::HedgingDelayRaised {
            path: path.field("hedgingDelay").as_str().to_owned(),
        });
        hedging_delay = std::time::Duration::from_millis(1);
    }
    let non_fatal = status_codes(json, "nonFatalStatusCodes", path)?;
    Ok(HedgingPolicySpec {
        max_attempts,
        hedging_delay,
        non_fatal,
    })
}

/// The names of method config `index`: each a path `/service/method`, `/service/` for a whole
/// service, or the default (`{}`, an empty `service`); none twice in the document.
fn names(json: &Json, path: &Path, index: usize, config: &mut GrpcServiceConfig) -> Loaded<()> {
    let Some(names) = member(json, "name") else {
        return Ok(());
    };
    let path = path.field("name");
    for (j, name) in array(names, &path)?.iter().enumerate() {
        let path = path.index(j);
        object(name, &path)?;
        let service = optional(name, "service", &path, |v, p| {
            string(v, p).map(str::to_owned)
        })?;
        let method = optional(name, "method", &path, |v, p| {
            string(v, p).map(str::to_owned)
        })?;
        let key = match (service, method) {
            (None, Some(_)) => return path.refuse(FieldProblem::MethodWithoutService),
            (None, None) => None,
            (Some(service), _) if service.is_empty() => None,
            (Some(service), method) => Some(format!("/{service}/{}", method.unwrap_or_default())),
        };
        match key {
            None if config.default.is_some() => {
                return path.refuse(FieldProblem::DuplicateDefault);
            }
            None => config.default = Some(index),
            Some(key) if config.names.contains_key(&key) => {
                return path.refuse(FieldProblem::DuplicateName(key));
            }
            Some(key) => {
                config.names.insert(key, index);
            }
        }
    }
    Ok(())
}
