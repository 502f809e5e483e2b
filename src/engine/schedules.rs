//! What a request keeps on the heap once it needs it: its delay schedules, and the rarer state that
//! goes with them (a caller's deadline, the host's queue, what a hedged race set aside).

use std::time::Duration;

use crate::classify::Reason;
use crate::engine::backoff::DelayState;
use crate::engine::overrides::Overrides;
use crate::engine::policy::Shared;
use crate::time::Instant;

use crate::engine::policy_guards::{Replica, Tickets};
use crate::guards::hosts::Host;

/// A request's delay schedules: the backoff's, and the throttle schedule's once a throttled attempt
/// needs it. Made at the first draw: a request that succeeds at once seeds no generator.
#[derive(Debug, Clone)]
pub(super) struct Schedules {
    pub(super) transient: DelayState,
    /// Boxed: rare, and a request held for its host keeps its schedules too.
    pub(super) throttle: Option<Box<DelayState>>,
    /// Time waited for the host's pause before the first attempt: here rather than inline, since
    /// only a request that waited (and drew its wait's spread from here) has any.
    pub(super) cooldown: Duration,
    /// What the request holds of its host's state: its place in the host's queue while it waits for
    /// it, what it met of the host's being down.
    pub(super) hosts: Tickets,
    /// Held for its down host (or route), which it waits for since then.
    pub(super) held: Option<Instant>,
    /// What the answers set aside in the hedged race in flight asked of the retry after it.
    pub(super) set_aside: Option<SetAside>,
    /// Why the last retry decided is due: the failure a call that ends before sending it gives up on.
    pub(super) failing: Option<Reason>,
    /// The call's deadline, from its start, when the caller set one sooner than the policy's
    /// `max_elapsed` ([`RetryState::limit_deadline`]).
    pub(super) deadline: Option<Duration>,
    /// The request's own settings, from its extensions: boxed, since few requests have any, and every
    /// request that sleeps before a retry keeps its schedules.
    pub(super) overrides: Option<Box<Overrides>>,
    /// How long a call a guard refused waits before it ends (`backoff_on_refusal`).
    pub(super) linger: Option<Duration>,
    /// The place in the code that called `stagger::retry`, for a call without a host: whose
    /// starting credit its timeouts may spend.
    pub(super) site: Option<Host>,
    /// The replicas of a call to a name with a replica set: boxed, since a call to any other name
    /// would carry their room for nothing (and a call asleep is to cost at most 2 KiB).
    pub(super) replicas: Option<Box<CallReplicas>>,
}

/// Which replicas a call's attempts go to, for a name with a replica set.
#[derive(Debug, Clone, Default)]
pub(super) struct CallReplicas {
    /// The replica of the attempt in flight (or about to be sent).
    pub(super) current: Option<Replica>,
    /// The replica of the hedge racing it.
    pub(super) hedge: Option<Replica>,
    /// The replica of every attempt that ended, in the order they ended.
    pub(super) trail: Trail,
    /// Where in `trail` the attempts of the race in flight begin: those before it, back to the
    /// previous race's start, are the last attempt's.
    pub(super) race_start: usize,
    pub(super) last_start: usize,
    /// The attempt just judged went to a down replica as its probe: its retry, on a replica that
    /// is up, goes at once (the call pays nothing for the breaker's probing).
    pub(super) requeue: bool,
}

/// The replicas a call's attempts reached: the first inline, so that a call answered at once
/// allocates nothing for it.
#[derive(Debug, Clone, Default)]
pub(super) struct Trail {
    first: Option<Replica>,
    rest: Vec<Replica>,
}

impl Trail {
    pub(super) fn push(&mut self, replica: Replica) {
        match self.first {
            None => self.first = Some(replica),
            Some(_) => self.rest.push(replica),
        }
    }

    pub(super) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = &Replica> {
        self.first.iter().chain(&self.rest)
    }

    /// The only replica, when there is one.
    pub(super) fn only(&self) -> Option<&Replica> {
        self.first.as_ref().filter(|_| self.rest.is_empty())
    }
}

/// What a server asked of the retry, kept from an answer set aside in a hedged race until the race
/// ends: the retry after the race obeys every answer of it, not only the last.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SetAside {
    /// The longest server delay asked for.
    pub(super) retry_after: Option<Duration>,
    /// An answer was throttling.
    pub(super) throttled: bool,
    /// An answer asked for no retry (gRPC's pushback).
    pub(super) refused_retry: bool,
}

impl Schedules {
    pub(super) fn of<'a>(slot: &'a mut Option<Box<Self>>, s: &Shared) -> &'a mut Self {
        slot.get_or_insert_with(|| {
            Box::new(Self {
                transient: DelayState::new(&s.settings.backoff, s.guards.next_stream()),
                throttle: None,
                cooldown: Duration::ZERO,
                hosts: Tickets::default(),
                held: None,
                set_aside: None,
                failing: None,
                deadline: None,
                overrides: None,
                linger: None,
                site: None,
                replicas: None,
            })
        })
    }
}
