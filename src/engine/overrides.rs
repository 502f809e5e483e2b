//! One request's own settings: [`Overrides`], read from its extensions by every adapter.

use std::time::Duration;

use crate::error::ConfigError;

/// Settings for one request, in place of its policy's: put it in the request's extensions and the
/// adapters read it (one `Copy` value; a request without one costs a lookup in its extensions,
/// nothing allocated).
///
/// What one request may change: its deadline, its `max_retries`, its attempt timeout, its hedging,
/// and whether it may be sent again after an ambiguous failure. What it cannot: the guards the
/// policy's clones share (the retry budget, the host cooldown, adaptive throttling, the breaker), which
/// every retry of it still meets, so that one request cannot spend what protects the others.
///
/// Where it is read: in a reqwest-middleware call's extensions (`.with_extension(overrides)`), in an
/// `http::Request`'s beneath [`RetryLayer`](crate::RetryLayer), and in a tonic request's
/// (`tonic::Request::extensions_mut`) beneath `RetryLayer::grpc`. Not
/// beneath `RetryLayer` over `reqwest::Client`: reqwest keeps a `reqwest::Request`'s extensions to
/// itself.
///
/// ```
/// use std::time::Duration;
/// use stagger::Overrides;
///
/// // A health check: one attempt, 2 s at most.
/// let quick = Overrides::builder().deadline(Duration::from_secs(2)).max_retries(0).build()?;
/// assert_eq!((quick.deadline(), quick.max_retries()), (Some(Duration::from_secs(2)), Some(0)));
/// // A POST that the server deduplicates by other means: retried like a GET.
/// let safe = Overrides::builder().idempotent(true).build()?;
/// assert_eq!(safe.idempotent(), Some(true));
/// // Not retried at all, nor hedged.
/// assert_eq!(Overrides::no_retries().max_retries(), Some(0));
/// assert_eq!(Overrides::no_retries().hedge_after(), Some(None));
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Overrides {
    deadline: Option<Duration>,
    max_retries: Option<u32>,
    attempt_timeout: Option<Option<Duration>>,
    hedge_after: Option<Option<Duration>>,
    idempotent: Option<bool>,
    backoff_on_refusal: Option<bool>,
}

impl Overrides {
    /// A builder with nothing overridden.
    pub const fn builder() -> OverridesBuilder {
        OverridesBuilder {
            overrides: Overrides {
                deadline: None,
                max_retries: None,
                attempt_timeout: None,
                hedge_after: None,
                idempotent: None,
                backoff_on_refusal: None,
            },
        }
    }

    /// One attempt, not hedged: no retry of any kind.
    pub const fn no_retries() -> Self {
        Self {
            deadline: None,
            max_retries: Some(0),
            attempt_timeout: None,
            hedge_after: Some(None),
            idempotent: None,
            backoff_on_refusal: None,
        }
    }

    /// The request's deadline, for all its attempts and sleeps, in place of the policy's
    /// `max_elapsed`; `None`: the policy's.
    pub const fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// The request's `max_retries`; `None`: the policy's.
    pub const fn max_retries(&self) -> Option<u32> {
        self.max_retries
    }

    /// The request's attempt timeout (`Some(None)`: none); `None`: the policy's.
    pub const fn attempt_timeout(&self) -> Option<Option<Duration>> {
        self.attempt_timeout
    }

    /// The request's hedging delay (`Some(None)`: not hedged); `None`: the policy's.
    pub const fn hedge_after(&self) -> Option<Option<Duration>> {
        self.hedge_after
    }

    /// Whether the request, refused by a guard, waits the delay its retry would have waited before
    /// it ends; `None`: as its policy says.
    pub const fn backoff_on_refusal(&self) -> Option<bool> {
        self.backoff_on_refusal
    }

    /// Whether the request may be sent again after an ambiguous failure, whatever its method and
    /// headers say; `None`: as they say.
    pub const fn idempotent(&self) -> Option<bool> {
        self.idempotent
    }
}

/// Builds [`Overrides`], checked as [`RetryPolicyBuilder`](crate::RetryPolicyBuilder) checks the
/// same settings.
#[derive(Debug, Clone, Copy)]
#[must_use = "a builder does nothing until `build()`"]
pub struct OverridesBuilder {
    overrides: Overrides,
}

impl OverridesBuilder {
    /// One deadline for the request's attempts and sleeps, in place of the policy's `max_elapsed`.
    /// A caller's own deadline on the request (gRPC's `grpc-timeout`) still ends it sooner.
    pub const fn deadline(mut self, deadline: Duration) -> Self {
        self.overrides.deadline = Some(deadline);
        self
    }

    /// The most retries of the request, in place of the policy's; `0`: one attempt.
    pub const fn max_retries(mut self, max_retries: u32) -> Self {
        self.overrides.max_retries = Some(max_retries);
        self
    }

    /// Each attempt's limit, to the response's head (`None`: none), in place of the policy's.
    pub fn attempt_timeout(mut self, timeout: impl Into<Option<Duration>>) -> Self {
        self.overrides.attempt_timeout = Some(timeout.into());
        self
    }

    /// The request's hedging delay (`None`: not hedged), in place of the policy's. A hedge obeys a
    /// retry's rules: an idempotent request only, within `max_retries` and the guards.
    pub fn hedge_after(mut self, delay: impl Into<Option<Duration>>) -> Self {
        self.overrides.hedge_after = Some(delay.into());
        self
    }

    /// Whether the request may be sent again after an ambiguous failure (a `502`, a timeout, a
    /// reset), whatever its method and an `Idempotency-Key` say: `true` for a `POST` the server
    /// deduplicates by other means, `false` for a `GET` with side effects.
    pub const fn idempotent(mut self, idempotent: bool) -> Self {
        self.overrides.idempotent = Some(idempotent);
        self
    }

    /// Whether the request, refused by a guard, still waits the delay its retry would have waited
    /// before it ends, in place of the policy's
    /// [`backoff_on_refusal`](crate::RetryPolicyBuilder::backoff_on_refusal): `true` for a call in a
    /// loop that must not turn faster while a dependency is down.
    pub const fn backoff_on_refusal(mut self, wait: bool) -> Self {
        self.overrides.backoff_on_refusal = Some(wait);
        self
    }

    /// The overrides, or the first setting the policy's builder would refuse: a zero deadline
    /// ([`ConfigError::MaxElapsed`]), attempt timeout ([`ConfigError::AttemptTimeout`]) or hedging
    /// delay ([`ConfigError::HedgeAfter`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{ConfigError, Overrides};
    ///
    /// let zero = Overrides::builder().deadline(Duration::ZERO).build();
    /// assert_eq!(zero, Err(ConfigError::MaxElapsed(Duration::ZERO)));
    /// ```
    pub fn build(self) -> Result<Overrides, ConfigError> {
        let o = self.overrides;
        if let Some(zero) = o.deadline.filter(Duration::is_zero) {
            return Err(ConfigError::MaxElapsed(zero));
        }
        if let Some(zero) = o.attempt_timeout.flatten().filter(Duration::is_zero) {
            return Err(ConfigError::AttemptTimeout(zero));
        }
        if let Some(zero) = o.hedge_after.flatten().filter(Duration::is_zero) {
            return Err(ConfigError::HedgeAfter(zero));
        }
        Ok(o)
    }
}
