//! The builder's setting of the breaker: per-host failure detection.

use std::time::Duration;

use crate::engine::breaker::{Breaker, WhenDown};
use crate::engine::builder::RetryPolicyBuilder;
use crate::engine::policy_guards::ReplicaSet;
use crate::error::ConfigError;

impl RetryPolicyBuilder {
    /// Sets per-host failure detection (on by default, [`Breaker::default()`]; `None` turns it off): a
    /// host whose attempts keep failing without an answer is *down*, requests to it are held for it or
    /// fail at once, and one probe per delay finds out when it is back. [`Breaker`] has the rules and
    /// the settings.
    ///
    /// What it saves: a dead host costs a caller its whole deadline (three 10 s attempts to a host
    /// that drops SYNs, with the defaults), and a busy one its attempt timeout on every call, while
    /// every call still sends an attempt to it. With a breaker, once the host is found down, nothing
    /// but a probe a second reaches it, and a call to it waits for it (up to
    /// [`Breaker::DEFAULT_HOLD`]) or fails in microseconds; when it is back, the calls held go at the
    /// rate they came. The repository's `docs/dead-host.md` has the figures, beside
    /// tower-resilience's breaker and the published defaults of Microsoft's resilience handler and
    /// resilience4j.
    ///
    /// The breaker keeps its hosts in the same table as the host cooldown (one lock while some host
    /// is in it, one atomic load per request while none is), at most 4 096 hosts; a policy's clones
    /// share it, and policies do not. A host's state is [`RetryPolicy::host_state`]; one can be marked
    /// down or up by hand ([`RetryPolicy::mark_down`]).
    ///
    /// `build()` refuses a [`Breaker::with_failures`] of 0 or over [`Breaker::MAX_FAILURES`]
    /// ([`ConfigError::BreakerFailures`]), a [`Breaker::hold`] of zero or over
    /// [`Breaker::MAX_HOLD`] ([`ConfigError::BreakerHold`]), and a probe backoff that starts at zero
    /// ([`ConfigError::BreakerProbe`]) or is otherwise invalid ([`ConfigError::BreakerProbeBackoff`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Breaker, ConfigError, RetryPolicy};
    ///
    /// assert_eq!(RetryPolicy::default().breaker(), Some(Breaker::hold(Duration::from_secs(10))));
    /// let policy = RetryPolicy::builder().breaker(Breaker::fail_fast()).build()?;
    /// assert_eq!(policy.breaker(), Some(Breaker::fail_fast()));
    /// assert_eq!(RetryPolicy::builder().breaker(None).build()?.breaker(), None);
    /// assert_eq!(
    ///     RetryPolicy::builder().breaker(Breaker::fail_fast().with_failures(0)).build().unwrap_err(),
    ///     ConfigError::BreakerFailures(0)
    /// );
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    ///
    /// [`RetryPolicy::host_state`]: crate::RetryPolicy::host_state
    /// [`RetryPolicy::mark_down`]: crate::RetryPolicy::mark_down
    pub fn breaker(mut self, breaker: impl Into<Option<Breaker>>) -> Self {
        self.breaker = breaker.into();
        self
    }
}

impl RetryPolicyBuilder {
    /// Places each attempt of a request to `set`'s name on one of its replicas (off by default; call
    /// once per name, a later set of the same name replacing the earlier): one the call has not
    /// tried, among those the breaker does not hold down, the cheaper of two drawn at random (its
    /// latency times its attempts in flight). The breaker judges each replica apart: a replica that
    /// refuses, hangs or answers `503` is found down alone, and the name is held or refused only
    /// when every replica is down. The budget and the cooldown stay the name's.
    ///
    /// The retry layer puts the replica an attempt goes to in its request
    /// ([`Replica`](crate::Replica)); a sender beneath it sends it there (`stagger::replicas`: a
    /// client per replica, each pinned to its address, the name kept for TLS and `Host`). A call's
    /// [`RetryInfo::replicas`](crate::RetryInfo::replicas) says which replicas its attempts reached;
    /// [`RetryPolicy::replica_state`](crate::RetryPolicy::replica_state) and
    /// [`RetryPolicy::hosts`](crate::RetryPolicy::hosts) what is known of each.
    ///
    /// ```
    /// use stagger::{ReplicaSet, RetryPolicy};
    ///
    /// let set = ReplicaSet::new("api.internal:8080", ["127.0.0.2:8080".parse()?, "127.0.0.3:8080".parse()?])?;
    /// let policy = RetryPolicy::builder().replicas(set.clone()).build()?;
    /// assert_eq!(policy.replica_sets()[0].name(), "api.internal:8080");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn replicas(mut self, set: ReplicaSet) -> Self {
        self.replicas.retain(|known| known.host() != set.host());
        self.replicas.push(set);
        self
    }
}

/// The breaker's settings, checked by `build()`.
pub(super) fn check_breaker(breaker: &Breaker) -> Result<(), ConfigError> {
    if !(1..=Breaker::MAX_FAILURES).contains(&breaker.failures()) {
        return Err(ConfigError::BreakerFailures(breaker.failures()));
    }
    if let WhenDown::Hold(bound) = breaker.when_down()
        && (bound.is_zero() || bound > Breaker::MAX_HOLD)
    {
        return Err(ConfigError::BreakerHold(bound));
    }
    let probe = breaker.probe_backoff();
    if probe.initial() == Duration::ZERO {
        return Err(ConfigError::BreakerProbe(probe.initial()));
    }
    probe
        .validate()
        .map_err(|error| ConfigError::BreakerProbeBackoff(Box::new(error)))
}
