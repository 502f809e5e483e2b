//! The state machine's dealings with a name's replicas: the replica each attempt goes to (placed
//! with the breaker's say, `guards/host_state/replicas.rs`), the one its hedge goes to, the ones a
//! call's attempts reached, and what a policy reports of each. With `policy_guards.rs` and
//! `policy_hosts.rs`, the engine's way into `guards/`.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::time::Instant;

use super::schedules::Schedules;
use super::state::RetryState;
use crate::classify::RequestView;
use crate::engine::policy::RetryPolicy;
use crate::guards::host_state::{Admission, HostState, HostStates, HostTickets, Place, Placing};
use crate::guards::hosts::Host;
use crate::guards::replicas::{Replica, ReplicaSet};

/// The part of [`RetryPolicy`]'s inherent `impl` that reports on its replica sets (the rest is in
/// `policy.rs` and `policy_hosts.rs`).
impl RetryPolicy {
    /// The replica sets the policy places attempts on
    /// ([`RetryPolicyBuilder::replicas`](crate::RetryPolicyBuilder::replicas)).
    pub fn replica_sets(&self) -> &[ReplicaSet] {
        self.shared.guards.replica_sets()
    }

    /// What the policy knows of the replica of `host` (`name` or `name:port`, as requests name it)
    /// at `addr`: up (with its failures in a row), down, recovering. Every replica is up for a
    /// policy without a breaker, and for a name it cannot read.
    ///
    /// ```
    /// use stagger::{HostState, ReplicaSet, RetryPolicy};
    ///
    /// let addr = "127.0.0.2:8080".parse()?;
    /// let set = ReplicaSet::new("api.internal:8080", [addr])?;
    /// let policy = RetryPolicy::builder().replicas(set).build()?;
    /// assert_eq!(policy.replica_state("api.internal:8080", addr), HostState::Up { failures: 0 });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn replica_state(&self, host: &str, addr: SocketAddr) -> HostState {
        match Host::named(host) {
            Some((host, _)) => {
                (self.shared.guards.hosts()).state(host.replica(addr), Instant::now())
            }
            None => HostState::Up { failures: 0 },
        }
    }

    /// What the policy says of a name with a replica set: down when every replica is.
    pub(super) fn replicas_down(&self, host: Host) -> Option<HostState> {
        let set = self.shared.guards.replica_set(host)?;
        let hosts = self.shared.guards.hosts();
        hosts.replicas_down(&set.members(), Instant::now())
    }
}

impl RetryState {
    /// The replica the attempt in flight goes to, or its hedge's (`hedge`).
    pub(crate) fn replica_for(&self, hedge: bool) -> Option<&Replica> {
        let calls = self.delays.as_ref()?.replicas.as_deref()?;
        if hedge {
            calls.hedge.as_ref()
        } else {
            calls.current.as_ref()
        }
    }

    /// Where the attempt in flight of `request` goes, as the hosts' table keys it: on the replica
    /// it was placed on, if it was.
    pub(super) fn placed(&self, request: Option<&RequestView<'_>>) -> Option<Place> {
        let view = request?;
        Some(match self.replica_for(false) {
            Some(replica) => {
                let (host, _) = self.policy.shared.guards.host_and_set(view)?;
                let member = replica.member();
                let path = view.path().unwrap_or("/");
                Place::name(host).on_replica(member.key(), member.addr(), path)
            }
            None => Place::of(view)?,
        })
    }

    /// Places the next attempt of a request to `place` (its host's place; `view` the request's) on
    /// one of `set`'s replicas: with the breaker's say when the policy keeps the hosts' states
    /// (`hosts`), the cheaper of two otherwise. When it may go, and the replica is kept for the
    /// adapter to send it there ([`replica_for`](Self::replica_for)).
    pub(super) fn place_attempt(
        &mut self,
        hosts: Option<(&HostStates, Instant)>,
        set: &ReplicaSet,
        (place, view): (Place, &RequestView<'_>),
        tickets: &mut HostTickets,
    ) -> Admission {
        let first = self.attempts == 0;
        // A probe that hangs ends as a timeout, retried only for a request safe to send again.
        let idempotent = self.is_idempotent(view) || !self.policy.shared.settings.idempotency;
        let deadline = self.time_left();
        let policy = self.policy.clone();
        let calls =
            (Schedules::of(&mut self.delays, &policy.shared).replicas).get_or_insert_default();
        // A new race: those since the last one began were its.
        if calls.trail.len() > calls.race_start {
            calls.last_start = calls.race_start;
            calls.race_start = calls.trail.len();
        }
        let members = set.members();
        let key = |replica: &Replica| replica.member().key();
        let tried: Vec<Host> = calls.trail.iter().map(key).collect();
        let last = &tried[calls.last_start..calls.race_start];
        let placing = Placing {
            set,
            members: &members,
            path: view.path().unwrap_or("/"),
            tried: &tried,
            last,
            first,
            idempotent,
        };
        let (admission, chosen) = match hosts {
            Some((hosts, now)) => hosts.admit_replica(place, &placing, now, tickets, deadline),
            None => {
                tickets.slot = None;
                (Admission::Go, placing.spread(|_| true))
            }
        };
        calls.current = chosen.map(|i| Replica::new(Arc::clone(&members[i])));
        admission
    }

    /// Places the hedge of the attempt in flight of `request` on a replica that is up, one the call
    /// has not tried if there is one: `false` when none is up, and no hedge goes. `true` for a
    /// request to a name without a replica set.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn place_hedge(&mut self, request: Option<&RequestView<'_>>) -> bool {
        let Some(view) = request else {
            return true;
        };
        let policy = self.policy.clone();
        let shared = &*policy.shared;
        let Some((_, Some(set))) = shared.guards.host_and_set(view) else {
            return true;
        };
        let members = set.members();
        let path = view.path().unwrap_or("/");
        let up = (shared.guards.hosts()).replicas_up(&members, path, Instant::now());
        let calls = (Schedules::of(&mut self.delays, shared).replicas).get_or_insert_default();
        let key = |replica: &Replica| replica.member().key();
        let mut tried: Vec<Host> = calls.trail.iter().map(key).collect();
        let racing: Vec<Host> = calls.current.iter().map(key).collect();
        tried.extend_from_slice(&racing);
        let placing = Placing {
            set,
            members: &members,
            path,
            tried: &tried,
            last: &racing,
            first: false,
            idempotent: false,
        };
        let chosen = placing.spread(|i| up[i]);
        calls.hedge = chosen.map(|i| Replica::new(Arc::clone(&members[i])));
        chosen.is_some()
    }

    /// Whether every replica of `request`'s name fails fast (the name has a replica set): then a
    /// retry is not decided. `None` for a name without a set.
    pub(super) fn replicas_fail_fast(&self, request: Option<&RequestView<'_>>) -> Option<bool> {
        let view = request?;
        let guards = &self.policy.shared.guards;
        let (_, set) = guards.host_and_set(view)?;
        let set = set?;
        let hosts = guards.hosts();
        Some(hosts.replicas_fail_fast(&set.members(), view.path().unwrap_or("/"), Instant::now()))
    }

    /// Whether the attempt in flight went to its replica as the probe of the replica (or of its
    /// route), down: asked before its answer is recorded, which ends the probe. A ticket's probe
    /// is the attempt's own: it is taken when the attempt is placed, and ended by its answer.
    pub(super) fn probing_replica(&self) -> bool {
        let Some(delays) = &self.delays else {
            return false;
        };
        (delays.replicas.as_ref()).is_some_and(|calls| calls.current.is_some())
            && delays.hosts.down.is_some_and(|t| t.is_probe())
    }

    /// The attempt in flight was judged (`probing`: as a down replica's probe): its replica is one
    /// the call reached.
    pub(super) fn replica_judged(&mut self, probing: bool) {
        if let Some(calls) = self.delays.as_mut().and_then(|d| d.replicas.as_deref_mut()) {
            calls.requeue = probing;
            if let Some(replica) = calls.current.take() {
                calls.trail.push(replica);
            }
        }
    }

    /// Whether the retry being decided follows a failed probe of a down replica: then it goes at
    /// once, to a replica that is up.
    pub(super) fn requeue(&self) -> bool {
        (self.delays.as_ref())
            .is_some_and(|d| d.replicas.as_ref().is_some_and(|calls| calls.requeue))
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// The other attempt of a hedged race was dropped: its replica is one the call reached.
    pub(crate) fn replica_dropped(&mut self) {
        if let Some(calls) = self.delays.as_mut().and_then(|d| d.replicas.as_deref_mut())
            && let Some(replica) = calls.hedge.take()
        {
            calls.trail.push(replica);
        }
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// The hedge's answer is about to be judged: its replica is the one in flight, and the other
    /// attempt's the hedge's.
    pub(crate) fn swap_replicas(&mut self) {
        if let Some(calls) = self.delays.as_mut().and_then(|d| d.replicas.as_deref_mut()) {
            std::mem::swap(&mut calls.current, &mut calls.hedge);
        }
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// The attempt in flight was judged and set aside: the other one, still running, is the one
    /// in flight.
    pub(crate) fn hedge_becomes_current(&mut self) {
        if let Some(calls) = self.delays.as_mut().and_then(|d| d.replicas.as_deref_mut())
            && calls.current.is_none()
        {
            calls.current = calls.hedge.take();
        }
    }

    /// The addresses of the replicas the call's attempts reached, in the order they ended; `None`
    /// for a call to a name without a replica set.
    pub(super) fn replicas_reached(&self) -> Option<Arc<Vec<SocketAddr>>> {
        let trail = &self.delays.as_ref()?.replicas.as_ref()?.trail;
        if let Some(only) = trail.only() {
            return Some(only.reached());
        }
        if trail.len() == 0 {
            return None;
        }
        Some(Arc::new(trail.iter().map(Replica::addr).collect()))
    }
}
