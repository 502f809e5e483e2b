//! The policies of a service config: one per method config, and one for the calls no method config
//! matches, all made from one builder's settings and drawing on one set of guards, which the
//! policies of the next service config (a reload) draw on too.

use std::time::Duration;

use super::{CallPolicy, GrpcServiceConfig};
use crate::classify::{GrpcCodes, GrpcName};
use crate::engine::backoff::{Backoff, Jitter};
use crate::engine::builder::RetryPolicyBuilder;
use crate::engine::derive::Derivation;
use crate::engine::policy::{GuardShapes, RetryPolicy};
use crate::error::ConfigError;

/// What a call of a service config's channel runs under: its method's policy and timeout.
#[derive(Debug)]
pub(crate) struct GrpcPolicies {
    config: GrpcServiceConfig,
    /// The builder's policy, which every method's is made from: its settings, its budget, and the
    /// guards they all share.
    root: RetryPolicy,
    /// The policy of each method config, by its index.
    methods: Vec<RetryPolicy>,
    /// The policy of a call no method config matches: no retries (transparent ones aside).
    unmatched: RetryPolicy,
}

impl GrpcPolicies {
    /// The policies of `config`, made of `builder`'s settings: its guards (the breaker, the
    /// cooldown, adaptive throttling, and the budget unless the config sets `retryThrottling`,
    /// which takes its place), its limits, classifier and hook; each method config's retry or
    /// hedging policy on top.
    pub(crate) fn new(
        builder: RetryPolicyBuilder,
        config: &GrpcServiceConfig,
    ) -> Result<Self, ConfigError> {
        Ok(Self::made(builder.build()?, config))
    }

    /// The policies of `config` made of the same builder's settings, drawing on the same guards,
    /// whose retry throttling takes `config`'s shape: what a reload of the service config makes.
    pub(crate) fn reloaded(&self, config: &GrpcServiceConfig) -> Self {
        Self::made(self.root.clone(), config)
    }

    fn made(root: RetryPolicy, config: &GrpcServiceConfig) -> Self {
        let throttling = config.throttling().map(|t| (t.max_tokens, t.milli_ratio));
        let shared = &root.shared;
        shared.guards.reshape(&GuardShapes {
            retry_throttling: throttling,
            ..shared.settings.shapes
        });
        let budget = throttling.is_none();
        let methods = config
            .methods()
            .iter()
            .map(|method| root.derive(derivation(&root, method.policy, budget)))
            .collect();
        let unmatched = root.derive(derivation(&root, CallPolicy::None, budget));
        Self {
            config: config.clone(),
            root,
            methods,
            unmatched,
        }
    }

    /// The policy and the timeout of a call of `name` (`None`: a call whose method is not known,
    /// which the default method config governs, if there is one).
    pub(crate) fn of(&self, name: Option<GrpcName<'_>>) -> (&RetryPolicy, Option<Duration>) {
        let index = match name {
            Some(name) => self.config.index_of(name),
            None => self.config.default_index(),
        };
        match index {
            Some(i) => (&self.methods[i], self.config.methods()[i].timeout),
            None => (&self.unmatched, None),
        }
    }

    pub(crate) fn config(&self) -> &GrpcServiceConfig {
        &self.config
    }
}

/// How a method config's policy changes the base policy.
fn derivation(base: &RetryPolicy, policy: CallPolicy, budget: bool) -> Derivation {
    match policy {
        CallPolicy::Retry(retry) => Derivation {
            // A6: attempt n waits random(0, min(initialBackoff · backoffMultiplier^(n−1),
            // maxBackoff)), which `Backoff::ceiling` computes for any multiplier C-core accepts.
            backoff: Backoff::exponential(retry.initial_backoff)
                .with_base(f64::from(retry.backoff_multiplier))
                .with_max_delay(retry.max_backoff)
                .with_jitter(Jitter::Full),
            max_retries: retry.max_attempts - 1,
            grpc_codes: retry.retryable,
            hedge_after: None,
            safe_to_send_twice: false,
            budget,
        },
        CallPolicy::Hedging(hedging) => Derivation {
            // A6: a non-fatal status sends the next hedge at once.
            backoff: Backoff::fixed(Duration::ZERO),
            max_retries: hedging.max_attempts - 1,
            grpc_codes: hedging.non_fatal,
            hedge_after: Some(hedging.hedging_delay),
            safe_to_send_twice: true,
            budget,
        },
        CallPolicy::None => Derivation {
            backoff: *base.backoff(),
            max_retries: 0,
            grpc_codes: GrpcCodes::NONE,
            hedge_after: None,
            safe_to_send_twice: false,
            budget,
        },
    }
}
