//! The breaker's say in placing an attempt on one of a name's replicas: each replica has entries of
//! its own (its health, and its routes'), and the name is held or refused only when every replica
//! is down — a panic rule, as Envoy's and gRPC's outlier detection (A50) have, so that finding
//! replicas down never empties the set.
//!
//! An attempt goes, in this order: as the probe of a down replica whose probe is due, if it is a
//! call's first attempt (a retry never probes while a replica is up, so that no call meets two bad
//! replicas in a row for a probe) and, for a replica found down by attempts that hung, of a request
//! safe to send again (a probe that hangs ends as a timeout, which a `POST` does not retry: a probe
//! costs no call); else to a replica that is up, the cheaper of two drawn among
//! those the call has not tried, or, when it has tried them all, among those its last attempt did
//! not go to, or else among all that are up; else, every replica down, as the probe of one whose
//! probe is due; else it is held for (or refused by) the replica whose probe comes first.

use std::sync::Arc;

use crate::time::Instant;

use super::down::{Deadline, Standing};
use super::{
    Admission, HostState, HostStates, HostTickets, Place, Table, extend_to, live, next_id,
};
use crate::guards::hosts::Host;
use crate::guards::replicas::{Member, ReplicaSet};

/// What a call brings to the placing of its attempt on a replica.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Placing<'a> {
    pub(crate) set: &'a ReplicaSet,
    pub(crate) members: &'a [Arc<Member>],
    /// The request's path: the replicas' routes are theirs and the path.
    pub(crate) path: &'a str,
    /// The replicas the call's attempts went to.
    pub(crate) tried: &'a [Host],
    /// The replicas of its last attempt (and of the hedge that raced it).
    pub(crate) last: &'a [Host],
    /// Whether this is the call's first attempt: only a first attempt probes while another replica
    /// is up.
    pub(crate) first: bool,
    /// Whether the request may be sent again whatever its attempt's end (it is idempotent): only
    /// such a request probes a replica found down by attempts that hung, so that a probe that hangs
    /// costs no call.
    pub(crate) idempotent: bool,
}

impl Placing<'_> {
    /// The cheaper of two replicas among those `up` says, spread as the module's docs say.
    pub(crate) fn spread(&self, up: impl Fn(usize) -> bool) -> Option<usize> {
        let (set, members) = (self.set, self.members);
        let key = |i: usize| members[i].key();
        set.choose(members, |i| up(i) && !self.tried.contains(&key(i)))
            .or_else(|| set.choose(members, |i| up(i) && !self.last.contains(&key(i))))
            .or_else(|| set.choose(members, &up))
    }
}

impl HostStates {
    /// When an attempt of a request to `name` (its host's place) may go, and to which of
    /// `placing`'s replicas (an index of its members; `None` when the set is empty). `tickets` and
    /// `deadline` are [`admit`](Self::admit)'s; the host's cooldown is the name's.
    pub(crate) fn admit_replica(
        &self,
        name: Place,
        placing: &Placing<'_>,
        now: Instant,
        tickets: &mut HostTickets,
        deadline: Deadline,
    ) -> (Admission, Option<usize>) {
        let given = tickets.slot.take();
        if !self.is_armed() {
            return (Admission::Go, placing.spread(|_| true));
        }
        let members = placing.members;
        let mut table = self.lock();
        let Table {
            hosts,
            latest,
            ids,
            rules,
            ..
        } = &mut *table;
        let breaker = rules.is_some();
        // The name itself is down only when marked so by hand (its replicas take the evidence):
        // then nothing goes to any of them.
        if breaker
            && let Some(entry) = live(hosts, latest, name.host, now)
            && let Some(admission) =
                (entry.health).admit(name.host, now, &mut tickets.down, deadline, || next_id(ids))
        {
            extend_to(latest, entry.ends());
            return (admission, None);
        }
        let chosen = if breaker {
            let standings: Vec<Standing> = (members.iter())
                .map(|member| {
                    let keys = [member.key(), member.key().route(placing.path)];
                    keys.iter().fold(Standing::Up, |standing, &key| {
                        let entry = live(hosts, latest, key, now);
                        standing.worse(entry.map_or(Standing::Up, |e| e.health.standing(now)))
                    })
                })
                .collect();
            let up = |i: usize| standings[i] == Standing::Up;
            let any_up = (0..members.len()).any(up);
            let due = |i: usize| matches!(standings[i], Standing::ProbeDue { .. });
            // While another replica is up, a probe is a first attempt, and one that may hang is
            // sent only by a request whose retry its timeout would not refuse.
            let safe = |i: usize| {
                !any_up
                    || placing.first
                        && (placing.idempotent
                            || standings[i] == Standing::ProbeDue { hangs: false })
            };
            // A request too near its deadline to see a probe's answer sends none (`admit` would
            // hold it on that replica): it goes to a replica that is up, if one is.
            let room = deadline.leaves_room_for_a_probe();
            let probe = (0..members.len())
                .find(|&i| room && due(i) && safe(i) && !placing.tried.contains(&members[i].key()));
            let down_soonest = || {
                (0..members.len()).min_by_key(|&i| match standings[i] {
                    Standing::Down(Some(wake)) => wake,
                    _ => now + super::MAX_HOLD,
                })
            };
            match probe {
                Some(probe) => Some(probe),
                None if any_up => placing.spread(up),
                None => (0..members.len()).find(|&i| due(i)).or_else(down_soonest),
            }
        } else {
            placing.spread(|_| true)
        };
        let Some(chosen) = chosen else {
            return (Admission::Go, None);
        };
        if breaker {
            let key = members[chosen].key();
            for key in [key, key.route(placing.path)] {
                let Some(entry) = live(hosts, latest, key, now) else {
                    continue;
                };
                let health = &mut entry.health;
                if let Some(admission) =
                    health.admit(key, now, &mut tickets.down, deadline, || next_id(ids))
                {
                    extend_to(latest, entry.ends());
                    return (admission, Some(chosen));
                }
            }
        }
        let Some(entry) = live(hosts, latest, name.host, now) else {
            return (Admission::Go, Some(chosen));
        };
        let admission = match &mut entry.cooldown {
            Some(cooldown) => cooldown.admit(now, given, &mut tickets.slot),
            None => Admission::Go,
        };
        extend_to(latest, entry.ends());
        (admission, Some(chosen))
    }

    /// Which of `members` (a name's replicas) are up for a request to `path` at `now`: neither
    /// its entry nor its route's down.
    pub(crate) fn replicas_up(
        &self,
        members: &[Arc<Member>],
        path: &str,
        now: Instant,
    ) -> Vec<bool> {
        if !self.is_armed() || !self.has_breaker() {
            return vec![true; members.len()];
        }
        let mut table = self.lock();
        let Table { hosts, latest, .. } = &mut *table;
        (members.iter())
            .map(|member| {
                let keys = [member.key(), member.key().route(path)];
                (keys.iter()).all(|&key| {
                    live(hosts, latest, key, now)
                        .is_none_or(|e| e.health.standing(now) == Standing::Up)
                })
            })
            .collect()
    }

    /// Whether a request to `members` (a name's replicas) on `path` would fail at `now` unsent:
    /// every replica is down, and none holds new requests or has a probe due.
    pub(crate) fn replicas_fail_fast(
        &self,
        members: &[Arc<Member>],
        path: &str,
        now: Instant,
    ) -> bool {
        if !self.is_armed() || members.is_empty() {
            return false;
        }
        let mut table = self.lock();
        let Table { hosts, latest, .. } = &mut *table;
        members.iter().all(|member| {
            let keys = [member.key(), member.key().route(path)];
            (keys.iter())
                .any(|&key| live(hosts, latest, key, now).is_some_and(|e| e.health.fails_fast(now)))
        })
    }

    /// What the policy says of a name whose replicas are `members`, at `now`: down when every one
    /// is (the longest down, their probes and held requests added up, the soonest next probe),
    /// `None` otherwise.
    pub(crate) fn replicas_down(&self, members: &[Arc<Member>], now: Instant) -> Option<HostState> {
        if members.is_empty() {
            return None;
        }
        let mut all = HostState::Down {
            down_for: std::time::Duration::ZERO,
            probes: 0,
            next_probe: None,
            held: 0,
        };
        for member in members {
            let HostState::Down {
                down_for,
                probes,
                next_probe,
                held,
            } = self.state(member.key(), now)
            else {
                return None;
            };
            if let HostState::Down {
                down_for: d,
                probes: p,
                next_probe: n,
                held: h,
            } = &mut all
            {
                *d = (*d).max(down_for);
                *p = p.saturating_add(probes);
                *n = match (*n, next_probe) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                *h = h.saturating_add(held);
            }
        }
        Some(all)
    }
}
