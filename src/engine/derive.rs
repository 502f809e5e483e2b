//! A policy of other settings that keeps another's guards, classifier and hook: the policies of one
//! gRPC service config, one per method config, drawing on the same breaker, cooldown, throttles and
//! retry throttling (or budget); and the settings of a policy, for another that takes them over
//! (a [`LivePolicy`](crate::LivePolicy)'s reload).

#[cfg(feature = "tonic")]
use std::sync::Arc;
#[cfg(feature = "tonic")]
use std::time::Duration;

#[cfg(feature = "tonic")]
use crate::classify::GrpcCodes;
use crate::classify::Outcome;
use crate::classify::{AttemptResult, ClassifyHttp, DefaultClassifier, RequestView};
#[cfg(feature = "tonic")]
use crate::engine::backoff::Backoff;
#[cfg(feature = "tonic")]
use crate::engine::policy::Shared;
use crate::engine::policy::{RetryEvent, RetryHook, RetryPolicy, Settings};

/// What a derived policy changes of the one it comes from.
#[cfg(feature = "tonic")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Derivation {
    /// Its backoff, taken as given: A6's formula (`Backoff::ceiling`) for any multiplier C-core
    /// accepts, a shrinking one, NaN or infinity among them (the builder's checks are not a service
    /// config's).
    pub(crate) backoff: Backoff,
    pub(crate) max_retries: u32,
    /// The gRPC codes retried, for every method: a builder's per-method codes are dropped, its marks
    /// of idempotence kept.
    pub(crate) grpc_codes: GrpcCodes,
    /// Its hedging delay: `None` keeps the base policy's.
    pub(crate) hedge_after: Option<Duration>,
    /// Every call of it is safe to send twice (a hedging policy): its timeouts are retried, and it
    /// may be hedged.
    pub(crate) safe_to_send_twice: bool,
    /// It draws on the base policy's budget; `false`: on none (gRPC's retry throttling takes its
    /// place).
    pub(crate) budget: bool,
}

/// The classifier of the base policy, asked through it.
struct Inherited(RetryPolicy);

impl ClassifyHttp for Inherited {
    fn classify(&self, request: &RequestView<'_>, result: &AttemptResult<'_>) -> Outcome {
        self.0.classifier().classify(request, result)
    }
}

impl RetryPolicy {
    /// A policy of `change`'s settings and this one's for the rest, which keeps this one's guards
    /// (one account for both), its classifier and its hook.
    #[cfg(feature = "tonic")]
    pub(crate) fn derive(&self, change: Derivation) -> RetryPolicy {
        let base = &self.shared.settings;
        let settings = Settings {
            backoff: change.backoff,
            max_retries: change.max_retries,
            idempotency: base.idempotency && !change.safe_to_send_twice,
            hedge_after: change.hedge_after.or(base.hedge_after),
            grpc: base.grpc.with_codes(change.grpc_codes),
            ..self.settings_shared()
        };
        RetryPolicy {
            shared: Arc::new(Shared {
                settings,
                budget: self.shared.budget.clone().filter(|_| change.budget),
                guards: Arc::clone(&self.shared.guards),
            }),
        }
    }

    /// This policy's settings, for another policy: its classifier and hook asked through a clone of
    /// it (they are code, and shared).
    pub(crate) fn settings_shared(&self) -> Settings {
        let base = &self.shared.settings;
        let classifier: Box<dyn ClassifyHttp> = if base.custom_classifier {
            Box::new(Inherited(self.clone()))
        } else {
            Box::new(DefaultClassifier)
        };
        let on_retry = base.on_retry.as_ref().map(|_| {
            let base = self.clone();
            Box::new(move |event: &RetryEvent| {
                if let Some(hook) = &base.shared.settings.on_retry {
                    hook(event);
                }
            }) as Box<RetryHook>
        });
        Settings {
            backoff: base.backoff,
            throttle_backoff: base.throttle_backoff,
            max_retries: base.max_retries,
            max_elapsed: base.max_elapsed,
            attempt_timeout: base.attempt_timeout,
            max_retry_after: base.max_retry_after,
            retry_after: base.retry_after,
            idempotency: base.idempotency,
            replay_buffer: base.replay_buffer,
            hedge_after: base.hedge_after,
            classifier,
            custom_classifier: base.custom_classifier,
            on_retry,
            grpc: base.grpc.clone(),
            grpc_send_max_elapsed: base.grpc_send_max_elapsed,
            backoff_on_refusal: base.backoff_on_refusal,
            shapes: base.shapes,
            timer: base.timer.clone(),
        }
    }
}
