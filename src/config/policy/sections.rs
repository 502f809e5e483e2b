//! The sections of a [`PolicyConfig`]: each a group of the builder's settings, its defaults the
//! builder's; and the two ways between a document and a policy.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::human::{self, codes, jitter, some_codes};
use super::{GrpcMethods, PolicyConfig, path_of};
use crate::classify::{GrpcCodes, GrpcMethod};
use crate::engine::backoff::{Backoff, Jitter};
use crate::engine::breaker::{Breaker, WhenDown};
use crate::engine::builder::RetryPolicyBuilder;
use crate::engine::policy::RetryPolicy;
use crate::error::{ConfigError, PolicyConfigError};
use crate::guards::budget::RetryBudget;

/// A backoff section: the same four fields, each with the defaults of the schedule it sets.
macro_rules! backoff_section {
    ($(#[$doc:meta])* $name:ident, $default:expr) => {
        $(#[$doc])*
        #[non_exhaustive]
        #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            /// The first ceiling ([`Backoff::initial`]).
            #[serde(with = "human::duration")]
            pub initial: Duration,
            /// The multiplier between ceilings ([`Backoff::base`]).
            pub base: f64,
            /// The largest delay ([`Backoff::max_delay`]).
            #[serde(with = "human::duration")]
            pub max_delay: Duration,
            /// `"full"`, `"equal"`, `"decorrelated"` or `"none"` ([`Jitter`]).
            #[serde(with = "jitter")]
            pub jitter: Jitter,
        }

        impl Default for $name {
            fn default() -> Self {
                Self::from($default)
            }
        }

        impl From<Backoff> for $name {
            fn from(backoff: Backoff) -> Self {
                Self {
                    initial: backoff.initial(),
                    base: backoff.base(),
                    max_delay: backoff.max_delay(),
                    jitter: backoff.jitter(),
                }
            }
        }

        impl $name {
            /// The backoff of this section.
            pub fn backoff(&self) -> Backoff {
                Backoff::exponential(self.initial)
                    .with_base(self.base)
                    .with_max_delay(self.max_delay)
                    .with_jitter(self.jitter)
            }
        }
    };
}

backoff_section!(
    /// `backoff`: [`RetryPolicyBuilder::backoff`], exponential from `"100ms"`, base 2, `"20s"` at
    /// most, `"full"` jitter.
    BackoffConfig,
    Backoff::exponential(RetryPolicy::DEFAULT_INITIAL_DELAY)
);
backoff_section!(
    /// `throttle_backoff`: [`RetryPolicyBuilder::throttle_backoff`], from `"500ms"`, base 2, `"20s"`
    /// at most, `"equal"` jitter.
    ThrottleBackoffConfig,
    RetryPolicy::DEFAULT_THROTTLE_BACKOFF
);
backoff_section!(
    /// `breaker.probe_backoff`: [`Breaker::with_probe_backoff`], from `"100ms"`, base 2, `"1s"` at
    /// most, `"equal"` jitter.
    ProbeBackoffConfig,
    Breaker::DEFAULT_PROBE_BACKOFF
);

/// `budget`: [`RetryPolicyBuilder::budget`] and [`RetryBudget::builder`]'s settings.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// `false` for no budget: `true`.
    pub enabled: bool,
    /// Retries per request: `0.2`.
    pub ratio: f64,
    /// The floor: `10`.
    pub min_per_second: u32,
    /// `"10s"`.
    #[serde(with = "human::duration")]
    pub window: Duration,
    /// An account per host: `false`.
    pub per_host: bool,
    /// A starting credit of the budget's own: `false`.
    pub own_starting_credit: bool,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            ratio: RetryBudget::DEFAULT_RATIO,
            min_per_second: RetryBudget::DEFAULT_MIN_PER_SECOND,
            window: RetryBudget::DEFAULT_WINDOW,
            per_host: false,
            own_starting_credit: false,
        }
    }
}

/// `breaker`: [`RetryPolicyBuilder::breaker`] and [`Breaker`]'s settings.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BreakerConfig {
    /// `false` for no breaker: `true`.
    pub enabled: bool,
    /// Failures in a row that put a host down: `5`.
    pub failures: u32,
    /// `true`: requests to a down host fail at once ([`Breaker::fail_fast`]); `false`.
    pub fail_fast: bool,
    /// How long requests wait for a down host ([`Breaker::hold`]): `"10s"`.
    #[serde(with = "human::duration")]
    pub hold: Duration,
    /// The probes' schedule.
    pub probe_backoff: ProbeBackoffConfig,
    /// Whether gateway failures count against the route (path) they came from
    /// ([`Breaker::with_route_scope`]): `true`.
    pub route_scope: bool,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            failures: Breaker::DEFAULT_FAILURES,
            fail_fast: false,
            hold: Breaker::DEFAULT_HOLD,
            probe_backoff: ProbeBackoffConfig::default(),
            route_scope: true,
        }
    }
}

/// `adaptive_throttle`: [`RetryPolicyBuilder::adaptive_throttle`] and its window.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdaptiveThrottleConfig {
    /// `false`.
    pub enabled: bool,
    /// The multiplier `k`: `2.0`.
    pub k: f64,
    /// `"10s"`.
    #[serde(with = "human::duration")]
    pub window: Duration,
}

impl Default for AdaptiveThrottleConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            k: 2.0,
            window: RetryPolicy::DEFAULT_ADAPTIVE_THROTTLE_WINDOW,
        }
    }
}

/// `grpc`: the gRPC settings of [`RetryPolicyBuilder`].
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcConfig {
    /// [`RetryPolicyBuilder::grpc_retry_on`]: `["UNAVAILABLE", "RESOURCE_EXHAUSTED"]`.
    #[serde(with = "codes")]
    pub retry_on: GrpcCodes,
    /// [`RetryPolicyBuilder::grpc_send_max_elapsed`]: `false`.
    pub send_max_elapsed: bool,
    /// [`RetryPolicyBuilder::grpc_method`], by full name (`"shop.Payments/Charge"`): none.
    pub methods: GrpcMethods,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        Self {
            retry_on: super::DEFAULT_GRPC_CODES,
            send_max_elapsed: false,
            methods: GrpcMethods::new(),
        }
    }
}

/// One method's rule in `grpc.methods`: [`GrpcMethod`].
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcMethodConfig {
    /// Its own codes ([`GrpcMethod::retry_on`]; `[]` is [`GrpcMethod::no_retries`]): left out, the
    /// policy's.
    #[serde(with = "some_codes", skip_serializing_if = "Option::is_none")]
    pub retry_on: Option<GrpcCodes>,
    /// Safe to send twice ([`GrpcMethod::idempotent`]): `false`.
    pub idempotent: bool,
}

/// The settings of `policy`.
pub(super) fn of(policy: &RetryPolicy) -> PolicyConfig {
    let settings = &policy.shared.settings;
    let budget = policy.budget().map_or(
        BudgetConfig {
            enabled: false,
            ..BudgetConfig::default()
        },
        |budget| BudgetConfig {
            enabled: true,
            ratio: budget.ratio(),
            min_per_second: budget.min_per_second(),
            window: budget.window(),
            per_host: budget.per_host(),
            own_starting_credit: budget.own_starting_credit(),
        },
    );
    let breaker = policy.breaker().map_or(
        BreakerConfig {
            enabled: false,
            ..BreakerConfig::default()
        },
        |breaker| BreakerConfig {
            enabled: true,
            failures: breaker.failures(),
            fail_fast: breaker.when_down() == WhenDown::FailFast,
            hold: match breaker.when_down() {
                WhenDown::Hold(hold) => hold,
                _ => Breaker::DEFAULT_HOLD,
            },
            probe_backoff: ProbeBackoffConfig::from(*breaker.probe_backoff()),
            route_scope: breaker.route_scope(),
        },
    );
    let adaptive_throttle = AdaptiveThrottleConfig {
        enabled: policy.adaptive_throttle().is_some(),
        k: policy.adaptive_throttle().unwrap_or(2.0),
        window: policy
            .adaptive_throttle_window()
            .unwrap_or(RetryPolicy::DEFAULT_ADAPTIVE_THROTTLE_WINDOW),
    };
    let methods = settings
        .grpc
        .methods()
        .map(|(name, rule)| {
            let rule = GrpcMethodConfig {
                retry_on: rule.codes,
                idempotent: rule.idempotent,
            };
            (name.to_owned(), rule)
        })
        .collect();
    PolicyConfig {
        max_retries: settings.max_retries,
        max_elapsed: settings.max_elapsed,
        attempt_timeout: settings.attempt_timeout,
        backoff: BackoffConfig::from(settings.backoff),
        throttle_backoff: ThrottleBackoffConfig::from(settings.throttle_backoff),
        retry_after: settings.retry_after,
        max_retry_after: settings.max_retry_after,
        idempotency_check: settings.idempotency,
        replay_buffer: settings.replay_buffer,
        hedge_after: settings.hedge_after,
        host_cooldown: policy.host_cooldown(),
        backoff_on_refusal: settings.backoff_on_refusal,
        budget,
        breaker,
        adaptive_throttle,
        grpc: GrpcConfig {
            retry_on: settings.grpc.codes,
            send_max_elapsed: settings.grpc_send_max_elapsed,
            methods,
        },
        seed: Some(policy.shared.guards.seed()),
    }
}

/// The builder's [`ConfigError`] with the path of its field.
pub(super) fn invalid(error: ConfigError) -> PolicyConfigError {
    PolicyConfigError::Invalid {
        path: path_of(&error),
        error,
    }
}

/// `backoff` checked, its errors under `section`.
fn check_backoff(section: &str, backoff: Backoff) -> Result<Backoff, PolicyConfigError> {
    backoff
        .validate()
        .map_err(|error| PolicyConfigError::Invalid {
            path: format!("{section}.{}", super::backoff_field(&error)),
            error,
        })?;
    Ok(backoff)
}

/// The builder of `config`'s settings; the budget's checked, the others left to `build()`.
pub(super) fn builder(config: &PolicyConfig) -> Result<RetryPolicyBuilder, PolicyConfigError> {
    let mut builder = RetryPolicy::builder()
        .max_retries(config.max_retries)
        .max_elapsed(config.max_elapsed)
        .attempt_timeout(config.attempt_timeout)
        .backoff(check_backoff("backoff", config.backoff.backoff())?)
        .throttle_backoff(check_backoff(
            "throttle_backoff",
            config.throttle_backoff.backoff(),
        )?)
        .retry_after(config.retry_after)
        .max_retry_after(config.max_retry_after)
        .idempotency_check(config.idempotency_check)
        .replay_buffer(config.replay_buffer)
        .hedge_after(config.hedge_after)
        .host_cooldown(config.host_cooldown)
        .backoff_on_refusal(config.backoff_on_refusal)
        .grpc_retry_on(config.grpc.retry_on)
        .grpc_send_max_elapsed(config.grpc.send_max_elapsed);
    let budget = &config.budget;
    builder = if budget.enabled {
        let budget = RetryBudget::builder()
            .ratio(budget.ratio)
            .min_per_second(budget.min_per_second)
            .window(budget.window)
            .per_host(budget.per_host)
            .own_starting_credit(budget.own_starting_credit)
            .build()
            .map_err(invalid)?;
        builder.budget(budget)
    } else {
        builder.budget(None)
    };
    let breaker = &config.breaker;
    builder = builder.breaker(breaker.enabled.then(|| {
        let when_down = if breaker.fail_fast {
            Breaker::fail_fast()
        } else {
            Breaker::hold(breaker.hold)
        };
        when_down
            .with_failures(breaker.failures)
            .with_probe_backoff(breaker.probe_backoff.backoff())
            .with_route_scope(breaker.route_scope)
    }));
    let throttle = &config.adaptive_throttle;
    if throttle.enabled {
        builder = builder
            .adaptive_throttle(throttle.k)
            .adaptive_throttle_window(throttle.window);
    }
    for (name, rule) in &config.grpc.methods {
        let method = match rule.retry_on {
            Some(codes) => GrpcMethod::retry_on(codes),
            None => GrpcMethod {
                codes: None,
                idempotent: false,
            },
        };
        let method = if rule.idempotent {
            method.and_idempotent()
        } else {
            method
        };
        builder = builder.grpc_method(name.clone(), method);
    }
    if let Some(seed) = config.seed {
        builder = builder.seed(seed);
    }
    Ok(builder)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_document_is_the_default_policy() {
        assert!(PolicyConfig::of(&RetryPolicy::default()).seed.is_some());
        let written = PolicyConfig {
            seed: None,
            ..PolicyConfig::of(&RetryPolicy::default())
        };
        assert_eq!(written, PolicyConfig::default());
    }
}
