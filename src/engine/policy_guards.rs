//! The state machine's way into `guards/`: the guards the requests of a policy share ([`Guards`]),
//! what one request holds of them ([`Holdings`]), and the parts of [`RetryState`]'s `impl` that ask
//! them — the host's pause, adaptive throttling, hedging, and the budget's accounts. No other file of
//! the engine reads `guards/`.

use std::sync::Arc;
use std::time::Duration;

use crate::time::Instant;

use rand::rngs::SmallRng;

use super::rng::StreamSource;
use super::schedules::Schedules;
use super::state::RetryState;
use crate::attempt::{Attempt, StopReason};
use crate::classify::{Reason, RequestView};
use crate::engine::policy::{GuardShapes, Shared};
use crate::engine::policy_hosts::rules;
use crate::error::Rejected;
use crate::guards::budget::{Account, RetryKind, Withdrawal};
use crate::guards::host_state::HostStates;
use crate::guards::hosts::Host;
use crate::guards::latency::Latencies;
use crate::guards::retry_throttling::RetryThrottling;
use crate::guards::throttle::Throttles;
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
use crate::observe::{log, metrics};

pub(crate) use crate::guards::budget::RetryBudget;
pub(crate) use crate::guards::host_state::HostTickets as Tickets;
pub(crate) use crate::guards::replicas::{Replica, ReplicaSet};

/// What the requests of a policy (and of its clones) keep together as they run: the hosts' states
/// (their pauses and their health), their round trips, the adaptive throttles, gRPC's retry
/// throttling, and the source of each request's jitter stream. (The budget is beside them, in the
/// policy: see `Shared::budget`.)
///
/// Every guard is there, whether the policy has it on or not, each with its shape: a
/// [`LivePolicy`](crate::LivePolicy) reloaded with a policy whose guards have other shapes reshapes
/// these in place ([`reshape`](Self::reshape)), for every call of every policy that holds them, so
/// that what they know stays. A guard that is off costs a request the check of one flag, as an
/// `Option` that is `None` did: the table of hosts is not armed, the throttles are not on.
pub(crate) struct Guards {
    /// The pauses hosts asked for, when `host_cooldown` is on, and their health, with a breaker.
    hosts: HostStates,
    /// What each host takes to answer, learnt with a breaker: how long before its silence is a
    /// failure.
    latencies: Latencies,
    /// Each host's adaptive throttle, on with `adaptive_throttle`.
    pub(super) throttles: Throttles,
    /// gRPC's retry throttling (A6's token bucket per server name), on under a service config that
    /// sets `retryThrottling`, in place of the budget.
    pub(super) retry_throttling: RetryThrottling,
    streams: StreamSource,
    /// The replica sets of the names the policy sends to: each attempt to one of them is placed on a
    /// replica.
    replicas: Box<[ReplicaSet]>,
}

impl Guards {
    /// The guards of a policy just built, of `shapes`; `seed` seeds the jitter, `replicas` are the
    /// replica sets of the names the policy sends to.
    pub(crate) fn new(shapes: &GuardShapes, seed: u64, replicas: Vec<ReplicaSet>) -> Self {
        Self {
            hosts: HostStates::new(
                shapes.host_cooldown,
                shapes.breaker.as_ref().map(rules),
                seed,
            ),
            latencies: Latencies::default(),
            throttles: Throttles::new(shapes.adaptive_throttle),
            retry_throttling: RetryThrottling::new(shapes.retry_throttling),
            streams: StreamSource::new(seed),
            replicas: replicas.into_boxed_slice(),
        }
    }

    /// Gives the guards `shapes`, keeping what they know where it means the same under them (the
    /// repository's `docs/configuration.md`, "Reloading", says what each keeps): a guard turned on
    /// starts afresh, one turned off forgets, one of another shape is reshaped in place. The
    /// replica sets stay as they are: they are what the names resolve to, not settings.
    pub(crate) fn reshape(&self, shapes: &GuardShapes) {
        let now = Instant::now();
        let rules = shapes.breaker.as_ref().map(rules);
        self.hosts.reshape(shapes.host_cooldown, rules, now);
        self.throttles.reshape(shapes.adaptive_throttle, now);
        self.retry_throttling.reshape(shapes.retry_throttling);
    }

    /// The replica sets the policy places attempts on.
    pub(crate) fn replica_sets(&self) -> &[ReplicaSet] {
        &self.replicas
    }

    /// The replica set of `host`, if the policy has one.
    pub(crate) fn replica_set(&self, host: Host) -> Option<&ReplicaSet> {
        self.replicas.iter().find(|set| set.host() == host)
    }

    /// The host of `view`, and its replica set if the policy has one: a target written as a set's
    /// name is that set's without its host being parsed or hashed.
    pub(crate) fn host_and_set(
        &self,
        view: &RequestView<'_>,
    ) -> Option<(Host, Option<&ReplicaSet>)> {
        if let Some(authority) = view.authority()
            && let Some(set) = self.replicas.iter().find(|set| set.written_as(authority))
        {
            return Some((set.host(), Some(set)));
        }
        // A gRPC call that names no host is at the unnamed one (see `Place::of`).
        let host = match Host::of(view) {
            Some(host) => host,
            None if view.grpc_method().is_some() => Host::unnamed(),
            None => return None,
        };
        Some((host, self.replica_set(host)))
    }

    /// The hosts' states: empty, and not armed, while neither the cooldown nor the breaker has put
    /// a host in.
    #[inline]
    pub(crate) fn hosts(&self) -> &HostStates {
        &self.hosts
    }

    /// The hosts' round trips, for the breaker.
    pub(crate) fn latencies(&self) -> &Latencies {
        &self.latencies
    }

    pub(crate) fn seed(&self) -> u64 {
        self.streams.seed()
    }

    /// The jitter stream of one more request.
    pub(crate) fn next_stream(&self) -> SmallRng {
        self.streams.next_stream()
    }
}

impl Shared {
    /// A request starts: it deposits into a budget shared by every host. (A budget kept per host
    /// takes the deposit in the host's account, once the host is known.)
    #[inline]
    pub(crate) fn deposit(&self) {
        if let Some(budget) = &self.budget
            && !budget.per_host()
        {
            budget.deposit();
        }
    }
}

/// What one request holds of the guards: its host's account of a budget kept per host, and a retry's
/// withdrawal not yet spent.
#[derive(Debug, Default)]
pub(crate) struct Holdings {
    /// The host's account of a budget kept per host, once the request's host is known.
    partition: Option<Arc<Account>>,
    /// A retry was allowed and its budget withdrawn, but it has not been sent yet: given back if the
    /// state is dropped first.
    withdrawn: Option<Withdrawal>,
}

impl Clone for Holdings {
    /// A pending withdrawal stays with the original, so that it is given back at most once.
    fn clone(&self) -> Self {
        Self {
            partition: self.partition.clone(),
            withdrawn: None,
        }
    }
}

/// What paying for a retry (or a hedge) came to.
#[derive(Debug)]
pub(super) enum Payment {
    /// The policy has no budget: the retry is free.
    Free,
    /// Paid: the withdrawal is given back if the retry is not sent.
    Paid(Withdrawal),
    /// The budget refused it.
    Refused,
}

impl RetryState {
    /// Before the first attempt of `request`: how long to wait for its host's pause to end, if the
    /// policy has `host_cooldown` on and the host asked for one; or the [`Rejected`] the call ends
    /// with, unsent, when the pause outlasts `max_retry_after` or the time left, or adaptive throttling
    /// rejects the request.
    ///
    /// `view` gives the request's HTTP view (`None` for work that is not HTTP); with neither guard
    /// on, or with the cooldown on and no pause in force anywhere, it is not asked for, and this is at
    /// most one atomic load: no clock read, no lock. Call it once, before the first attempt; after a
    /// wait, call [`recheck_pause`](Self::recheck_pause).
    #[inline]
    pub fn before_first<'v>(
        &mut self,
        view: impl FnOnce() -> Option<RequestView<'v>>,
    ) -> Result<Option<Duration>, Rejected> {
        let shared = &*self.policy.shared;
        let guards = &shared.guards;
        let cooling = guards.hosts.is_armed();
        let per_host = shared.budget.as_ref().is_some_and(RetryBudget::per_host);
        if !cooling && !per_host && !guards.throttles.is_on() && guards.replicas.is_empty() {
            return Ok(None);
        }
        let placing = !guards.replicas.is_empty();
        self.before_first_slow(view().as_ref(), cooling || placing)
    }

    #[cold]
    pub(super) fn before_first_slow(
        &mut self,
        request: Option<&RequestView<'_>>,
        cooling: bool,
    ) -> Result<Option<Duration>, Rejected> {
        self.resolve_partition(request);
        if let Err(p) = self.admit(request) {
            self.stop(StopReason::Throttled, None, request);
            self.linger(None);
            return Err(Rejected::throttled(p, self.info()));
        }
        if cooling {
            return self.wait_for_host(request);
        }
        Ok(None)
    }

    /// Asks `request`'s adaptive throttle whether an attempt may go out beside `in_flight` others of
    /// this call (a hedge, beside the attempt it races): `Err(p)` if it is rejected locally, with
    /// probability `p`. Always `Ok` without adaptive throttling.
    pub(super) fn admit(&mut self, request: Option<&RequestView<'_>>) -> Result<(), f64> {
        let shared = &*self.policy.shared;
        let throttles = &shared.guards.throttles;
        if !throttles.is_on() {
            return Ok(());
        }
        let delays = &mut self.delays;
        throttles.admit(request.and_then(Host::of), Instant::now(), || {
            Schedules::of(delays, shared).transient.unit()
        })
    }

    /// Tells `request`'s adaptive throttle, if the policy keeps one, that an attempt of it was
    /// answered, `accepted` or not (a time limit, for one: the backend did not answer in time).
    pub(crate) fn count_answered(&self, request: Option<&RequestView<'_>>, accepted: bool) {
        let throttles = &self.policy.shared.guards.throttles;
        if throttles.is_on() {
            throttles.answered(request.and_then(Host::of), Instant::now(), accepted);
        }
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// Whether the attempt in flight may be hedged, as far as can be told without counting or paying
    /// for anything: the request is safe to send twice (idempotent, or it carries an
    /// `Idempotency-Key`), another attempt is within `max_retries`, the deadline is ahead and its host
    /// is not pausing. [`begin_hedge`](Self::begin_hedge) asks again.
    pub(crate) fn may_hedge(&self, request: Option<&RequestView<'_>>) -> bool {
        let s = &self.policy.shared.settings;
        let idempotent = request.is_none_or(|view| self.is_idempotent(view)) || !s.idempotency;
        self.stop.is_none()
            && idempotent
            // `attempts` counts every attempt judged so far, earlier hedges included; this race's
            // first attempt and its hedge will make `attempts + 2`, that is `attempts + 1` retries.
            && self.counted() < self.max_retries()
            && self.remaining() != Some(Duration::ZERO)
            && !self.host_busy(request)
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// Whether the attempt in flight may be hedged now: [`may_hedge`](Self::may_hedge), and adaptive
    /// throttling admits it and the budget pays for it, as for a retry. If so, the hedge is counted
    /// and its withdrawal is final: call this only when the hedge can be sent at once.
    pub(crate) fn begin_hedge(&mut self, request: Option<&RequestView<'_>>) -> bool {
        // Judged beside the attempt it races, which is not answered yet; placed on a replica of
        // its own when its name has replicas, and not sent when none is up.
        if !self.may_hedge(request) || !self.place_hedge(request) || self.admit(request).is_err() {
            return false;
        }
        match self.pay(request, None, false) {
            // Sent now: nothing to give back.
            Payment::Free | Payment::Paid(_) => {}
            Payment::Refused => return false,
        }
        self.hedges = self.hedges.saturating_add(1);
        log::hedging(request, self.attempts.saturating_add(1));
        metrics::hedge(request);
        true
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// Counts the attempt of a hedged race that a time limit cut while the other attempt, which the
    /// limit is judged for, ran too: made, and never answered.
    pub(crate) fn count_cancelled(&mut self) {
        self.attempts = self.attempts.saturating_add(1);
        self.replica_dropped();
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// Counts the attempt of a hedged race that lost to an answer not worth retrying, dropped while
    /// it ran: made, and, to adaptive throttling, accepted. The backend refused it nothing; the client
    /// dropped it because the other answer made it needless. So a race won counts as many accepts
    /// as it sent requests, as a call that was not hedged does, and hedging a healthy backend does
    /// not make it look as if it refused half of what it was sent.
    pub(crate) fn count_lost(&mut self, request: Option<&RequestView<'_>>) {
        self.attempts = self.attempts.saturating_add(1);
        self.replica_dropped();
        self.count_answered(request, true);
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// Records an attempt of a hedged race that failed in a way worth retrying while the other attempt
    /// still ran: made, and set aside for the other's answer. What it asked of a retry (a server
    /// delay, throttling) is kept for the decision that ends the race.
    pub(crate) fn set_aside(&mut self, attempt: Attempt, request: Option<&RequestView<'_>>) {
        self.attempts = self.attempts.saturating_add(1);
        self.record_response(&attempt, request);
        if attempt.retry_after.is_some() || attempt.throttled || attempt.refused_retry {
            let shared = &*self.policy.shared;
            let kept = Schedules::of(&mut self.delays, shared)
                .set_aside
                .get_or_insert_default();
            kept.retry_after = kept.retry_after.max(attempt.retry_after);
            kept.throttled |= attempt.throttled;
            kept.refused_retry |= attempt.refused_retry;
        }
    }

    /// Adds to `attempt`, the failure that ended its race, what the answers set aside in the race
    /// asked of the retry: the longest server delay of them all, the throttle schedule if one was
    /// throttling, and no retry at all if one said so (gRPC's pushback). (A race that ends otherwise ends the call, and what was set aside with it.)
    pub(super) fn add_set_aside(&mut self, attempt: &mut Attempt) {
        let Some(kept) = self.delays.as_mut().and_then(|d| d.set_aside.take()) else {
            return;
        };
        attempt.retry_after = attempt.retry_after.max(kept.retry_after);
        attempt.throttled |= kept.throttled;
        attempt.refused_retry |= kept.refused_retry;
    }

    /// Pays for one retry of a failure for `failure` (a hedge: `None`) from the budget: from the
    /// host's own account when the budget is kept per host (the host's request deposits there when
    /// first seen), from the shared one otherwise.
    ///
    /// A timeout's retry is the one that can keep an overloaded server overloaded: the attempt it
    /// replaces may still be in the server's queue, to be served for nobody. It is paid from the
    /// requests' deposits only, never the floor (see `RetryBudget`).
    ///
    /// `spread`: the host's cooldown spreads the retry (its host refused the attempt and asked for a
    /// pause, and the cooldown is on): the budget's pace does not hold it as well
    /// ([`RetryBudget::withdraw_spread`]).
    pub(super) fn pay(
        &mut self,
        request: Option<&RequestView<'_>>,
        failure: Option<Reason>,
        spread: bool,
    ) -> Payment {
        // gRPC's retry throttling, which takes the budget's place under a service config.
        let throttling = &self.policy.shared.guards.retry_throttling;
        if throttling.is_on() && !throttling.allows(request.and_then(Host::of)) {
            return Payment::Refused;
        }
        let Some(budget) = &self.policy.shared.budget else {
            return Payment::Free;
        };
        // A retry placed on another replica of its name goes around the one that failed: the
        // window bounds it, the pace (which keeps a failing server's retries from coming back in
        // a burst) does not hold it as well.
        let failover = !self.policy.shared.guards.replica_sets().is_empty()
            && request
                .and_then(|view| self.policy.shared.guards.host_and_set(view))
                .is_some_and(|(_, set)| set.is_some_and(|set| set.members().len() > 1));
        let spread = spread || failover;
        let kind = match failure {
            Some(Reason::Timeout) => RetryKind::Timeout,
            _ => RetryKind::Plain,
        };
        // A call whose start is not known (an adapter of one's own, without a deadline) is judged
        // as if it started now.
        let started = self.started.unwrap_or_else(Instant::now);
        // A timeout's retry may spend its host's starting credit; `stagger::retry`'s, which has no
        // host, its call site's.
        let host = match kind {
            RetryKind::Timeout => request
                .and_then(Host::of)
                .or_else(|| self.delays.as_ref().and_then(|d| d.site)),
            RetryKind::Plain => None,
        };
        let withdrawal = if budget.per_host() {
            self.resolve_partition(request);
            self.holdings
                .partition
                .as_ref()
                .and_then(|partition| partition.withdraw_spread(kind, host, started, spread))
        } else {
            budget.withdraw_spread(kind, host, started, spread)
        };
        withdrawal.map_or(Payment::Refused, Payment::Paid)
    }

    /// Tells gRPC's retry throttling, if the policy keeps it, how `attempt` ended (A6): a failure
    /// worth retrying (a retryable status, or a pushback that refuses the retry) takes a token, a
    /// success gives `tokenRatio` back, anything else, and an attempt retried transparently, nothing.
    pub(super) fn count_for_retry_throttling(
        &self,
        attempt: &Attempt,
        request: Option<&RequestView<'_>>,
    ) {
        let throttling = &self.policy.shared.guards.retry_throttling;
        if !throttling.is_on() || attempt.transparent {
            return;
        }
        let host = request.and_then(Host::of);
        match attempt.outcome {
            crate::classify::Outcome::Success => throttling.succeeded(host),
            outcome if outcome.is_retryable() => throttling.failed(host),
            _ => {}
        }
    }

    /// The call is `stagger::retry`'s, made at `site`: its timeouts may spend that place's starting
    /// credit, the process's, whatever policy each of its calls is built with.
    pub(crate) fn credit_site(&mut self, site: &std::panic::Location<'_>) {
        Schedules::of(&mut self.delays, &self.policy.shared).site = Some(Host::site(site));
    }

    /// Holds a retry's withdrawal until the retry is sent, or given back.
    pub(super) fn hold_payment(&mut self, withdrawal: Withdrawal) {
        self.holdings.withdrawn = Some(withdrawal);
    }

    /// The retry decided was sent (or is about to be): its withdrawal is spent.
    pub(super) fn spend_payment(&mut self) {
        self.holdings.withdrawn = None;
    }

    /// Gives back the withdrawal of a retry decided and never sent.
    pub(super) fn give_back(&mut self) {
        let Some(withdrawal) = self.holdings.withdrawn.take() else {
            return;
        };
        match (&self.holdings.partition, &self.policy.shared.budget) {
            (Some(partition), _) => partition.refund(withdrawal),
            (None, Some(budget)) => budget.refund(withdrawal),
            (None, None) => {}
        }
    }

    /// With a budget kept per host, finds the request's host's account and deposits the request in it,
    /// once.
    pub(super) fn resolve_partition(&mut self, request: Option<&RequestView<'_>>) {
        if self.holdings.partition.is_some() {
            return;
        }
        // The host is read only for a budget kept per host: reading it parses the request's target.
        if let Some(partition) = (self.policy.shared.budget.as_ref())
            .filter(|budget| budget.per_host())
            .and_then(|budget| budget.partition(request.and_then(Host::of)))
        {
            partition.deposit();
            self.holdings.partition = Some(partition);
        }
    }
}
