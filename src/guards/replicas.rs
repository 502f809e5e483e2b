//! A name's replicas: the addresses one name stands for (a DNS name with several addresses, a
//! Kubernetes headless service, a list of endpoints), what each one's attempts cost lately, and the
//! choice of two (p2c) that places an attempt on the cheaper. Their health is the breaker's, in the
//! hosts' table, one entry per replica (`host_state`); the budget and the cooldown stay the name's.
//!
//! The cost of a replica is its latency, smoothed with a peak (an answer slower than the estimate
//! is the estimate at once, a faster one moves it an eighth of the way), times its attempts in
//! flight plus one, as Finagle's and tower's peak-EWMA balancers weigh an endpoint. A replica that
//! loses a comparison sheds 1/128 of its latency, so that one found slow is tried again now and
//! then, after some hundreds of choices, and its next answers say whether it still is: it is weighed
//! down, never shut out.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::error::ConfigError;
use crate::guards::hosts::Host;

/// The replicas behind one name, each reached at an address of its own, shared by the policies it
/// is given to ([`RetryPolicyBuilder::replicas`](crate::RetryPolicyBuilder::replicas)) and the
/// senders that reach each one (`stagger::replicas`). Cheap to clone: clones are one set.
///
/// Each attempt of a call to the name is placed on one replica: one the call has not tried, among
/// those the breaker does not hold down, the cheaper of two drawn at random (its latency times its
/// attempts in flight). A replica that fails is found down alone; the name is held or refused only
/// when every replica is down. Replicas come and go while calls run
/// ([`insert`](Self::insert), [`remove`](Self::remove), [`replace`](Self::replace)): the others
/// keep what is known of them, and the calls in flight run to their end.
///
/// ```
/// use std::net::SocketAddr;
/// use stagger::ReplicaSet;
///
/// let addrs: Vec<SocketAddr> = vec!["10.0.0.2:8080".parse()?, "10.0.0.3:8080".parse()?];
/// let set = ReplicaSet::new("api.internal:8080", addrs)?;
/// assert_eq!(set.name(), "api.internal:8080");
/// assert_eq!(set.len(), 2);
/// assert!(set.insert("10.0.0.4:8080".parse()?));
/// assert!(set.remove("10.0.0.2:8080".parse()?));
/// assert_eq!(set.addrs(), ["10.0.0.3:8080".parse::<SocketAddr>()?, "10.0.0.4:8080".parse()?]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ReplicaSet {
    inner: Arc<SetInner>,
}

struct SetInner {
    /// The name as requests write it: `name`, or `name:port` for a port that is not a default one.
    name: Box<str>,
    host: Host,
    /// The replicas now, in the order they came: replaced whole on a change, so that a choice reads
    /// one consistent list without holding the lock.
    members: RwLock<Arc<[Arc<Member>]>>,
    /// Counts the changes of `members`.
    generation: AtomicU64,
    /// Numbers the replicas as they come, for the senders' tables.
    next_slot: AtomicU64,
    /// The choices' random numbers (a SplitMix64 stream): no lock, no clock.
    draws: AtomicU64,
}

/// One replica, and what its attempts cost lately.
pub(crate) struct Member {
    addr: SocketAddr,
    /// The key of its own entries in the hosts' table.
    key: Host,
    /// Its number in the set, unique for the set's life.
    #[cfg_attr(all(target_arch = "wasm32", target_os = "unknown"), allow(dead_code))]
    slot: u64,
    in_flight: AtomicU32,
    /// The smoothed latency of its answers, in nanoseconds; 0 before the first.
    latency: AtomicU64,
    /// Its address alone, what a call that reached it alone reports, shared rather than made per call.
    alone: Arc<Vec<SocketAddr>>,
}

/// The replica an attempt goes to: what the retry layer puts in the attempt's request (its
/// extensions, or reqwest-middleware's), for the sender beneath it (`stagger::replicas`) to send it
/// there.
#[derive(Clone)]
pub struct Replica {
    member: Arc<Member>,
}

/// A change of a [`ReplicaSet`], as a stream of discovery gives it (`ReplicaSet::follow`, with the
/// feature `tokio`, on native targets).
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaChange {
    /// A replica at this address joins the set.
    Insert(SocketAddr),
    /// The replica at this address leaves it.
    Remove(SocketAddr),
}

/// A member's share of its latency shed each time it loses a comparison: 1/`DECAY`.
const DECAY: u64 = 128;

impl ReplicaSet {
    /// The replicas of `name` (`name` or `name:port`, as requests write it), at `addrs` (duplicates
    /// counted once). [`ConfigError::ReplicaName`] if `name` names no host.
    pub fn new(
        name: &str,
        addrs: impl IntoIterator<Item = SocketAddr>,
    ) -> Result<Self, ConfigError> {
        // An empty name is the unnamed host's, to a `host_state` query: no set's.
        let (host, shown) = (Host::named(name).filter(|_| !name.is_empty()))
            .ok_or_else(|| ConfigError::ReplicaName(name.to_owned()))?;
        let set = Self {
            inner: Arc::new(SetInner {
                name: shown,
                host,
                members: RwLock::new(Arc::from(Vec::new())),
                generation: AtomicU64::new(0),
                next_slot: AtomicU64::new(0),
                draws: AtomicU64::new(0x0005_eed0_f5e7),
            }),
        };
        set.replace(addrs);
        Ok(set)
    }

    /// The name, as the reports write it: lower case, a default port left out.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The replicas' addresses, in the order they joined.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.members().iter().map(|member| member.addr).collect()
    }

    /// How many replicas the set has.
    pub fn len(&self) -> usize {
        self.members().len()
    }

    /// Whether it has none: calls to the name then fail as a refused connection would, and are
    /// retried as one.
    pub fn is_empty(&self) -> bool {
        self.members().is_empty()
    }

    /// Adds the replica at `addr`; `false` if it is in the set already.
    pub fn insert(&self, addr: SocketAddr) -> bool {
        self.change(|members| {
            if members.iter().any(|member| member.addr == addr) {
                return false;
            }
            members.push(self.member(addr));
            true
        })
    }

    /// Takes the replica at `addr` out of the set: no attempt goes to it any more; those in flight
    /// end as they would have. `false` if it was not in the set.
    pub fn remove(&self, addr: SocketAddr) -> bool {
        self.change(|members| {
            let before = members.len();
            members.retain(|member| member.addr != addr);
            members.len() != before
        })
    }

    /// Makes `addrs` the set: the replicas already in it keep what is known of them, the others
    /// leave, the new ones join. `true` if anything changed.
    pub fn replace(&self, addrs: impl IntoIterator<Item = SocketAddr>) -> bool {
        let mut wanted: Vec<SocketAddr> = Vec::new();
        for addr in addrs {
            if !wanted.contains(&addr) {
                wanted.push(addr);
            }
        }
        self.change(|members| {
            let before: Vec<SocketAddr> = members.iter().map(|member| member.addr).collect();
            members.retain(|member| wanted.contains(&member.addr));
            for &addr in &wanted {
                if !members.iter().any(|member| member.addr == addr) {
                    members.push(self.member(addr));
                }
            }
            before.len() != members.len()
                || before.iter().zip(members.iter()).any(|(a, m)| *a != m.addr)
        })
    }

    /// Applies one change of a discovery stream; `true` if it changed the set.
    pub fn apply(&self, change: ReplicaChange) -> bool {
        match change {
            ReplicaChange::Insert(addr) => self.insert(addr),
            ReplicaChange::Remove(addr) => self.remove(addr),
        }
    }

    fn member(&self, addr: SocketAddr) -> Arc<Member> {
        Arc::new(Member {
            addr,
            key: self.inner.host.replica(addr),
            slot: self.inner.next_slot.fetch_add(1, Ordering::Relaxed),
            in_flight: AtomicU32::new(0),
            latency: AtomicU64::new(0),
            alone: Arc::new(vec![addr]),
        })
    }

    /// Changes the members with `edit`, which says whether it changed anything.
    fn change(&self, edit: impl FnOnce(&mut Vec<Arc<Member>>) -> bool) -> bool {
        let mut members = self
            .inner
            .members
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut edited = members.to_vec();
        if !edit(&mut edited) {
            return false;
        }
        *members = Arc::from(edited);
        self.inner.generation.fetch_add(1, Ordering::Release);
        true
    }

    /// The name's key in the hosts' table.
    pub(crate) fn host(&self) -> Host {
        self.inner.host
    }

    /// Whether `authority`, as a request's target writes it, is the set's name as written (any
    /// case): what most requests to the set are, told without parsing or hashing their host.
    pub(crate) fn written_as(&self, authority: &str) -> bool {
        // Byte for byte first: most requests write the name as the set does.
        authority == &*self.inner.name || authority.eq_ignore_ascii_case(&self.inner.name)
    }

    /// The replicas now.
    pub(crate) fn members(&self) -> Arc<[Arc<Member>]> {
        Arc::clone(
            &self
                .inner
                .members
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }

    /// Counts the changes of the set: a sender's table of clients is pruned when it moves.
    #[cfg_attr(all(target_arch = "wasm32", target_os = "unknown"), allow(dead_code))]
    pub(crate) fn generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }

    /// One draw of 64 random bits.
    fn draw(&self) -> u64 {
        let mut z = (self.inner.draws)
            .fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The index of the cheaper of two of `members` drawn at random among those `eligible` says;
    /// the only one when one is; `None` when none is. The one that loses sheds a little of its
    /// latency (see the module's docs).
    pub(crate) fn choose(
        &self,
        members: &[Arc<Member>],
        eligible: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let count = (0..members.len()).filter(|&i| eligible(i)).count();
        let nth = |n: usize| (0..members.len()).filter(|&i| eligible(i)).nth(n);
        match count {
            0 => None,
            1 => nth(0),
            _ => {
                let draw = self.draw();
                let first = (draw % count as u64) as usize;
                let step = 1 + ((draw >> 32) % (count as u64 - 1)) as usize;
                let (a, b) = (nth(first)?, nth((first + step) % count)?);
                let (won, lost) = if members[b].cheaper_than(&members[a]) {
                    (b, a)
                } else {
                    (a, b)
                };
                members[lost].shed();
                Some(won)
            }
        }
    }

    /// The replica at `addr`, if it is in the set.
    #[cfg(test)]
    pub(crate) fn find(&self, addr: SocketAddr) -> Option<Arc<Member>> {
        self.members().iter().find(|m| m.addr == addr).cloned()
    }
}

impl fmt::Debug for ReplicaSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicaSet")
            .field("name", &self.inner.name)
            .field("replicas", &self.addrs())
            .finish()
    }
}

impl Member {
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn key(&self) -> Host {
        self.key
    }

    #[cfg_attr(all(target_arch = "wasm32", target_os = "unknown"), allow(dead_code))]
    pub(crate) fn slot(&self) -> u64 {
        self.slot
    }

    /// An attempt to it starts; [`finished`](Self::finished) when it ends, however.
    #[cfg_attr(all(target_arch = "wasm32", target_os = "unknown"), allow(dead_code))]
    pub(crate) fn started(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    #[cfg_attr(all(target_arch = "wasm32", target_os = "unknown"), allow(dead_code))]
    pub(crate) fn finished(&self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// Attempts to it in flight.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Its smoothed latency; `None` before its first answer.
    pub(crate) fn latency(&self) -> Option<Duration> {
        match self.latency.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    /// An attempt to it was answered after `took`: the estimate jumps to a slower answer, and moves
    /// an eighth of the way to a faster one.
    pub(crate) fn answered(&self, took: Duration) {
        let took = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX).max(1);
        let old = self.latency.load(Ordering::Relaxed);
        let new = if old == 0 || took >= old {
            took
        } else {
            old - old / 8 + took / 8
        };
        self.latency.store(new.max(1), Ordering::Relaxed);
    }

    /// It lost a comparison: it sheds 1/[`DECAY`] of its latency.
    fn shed(&self) {
        let old = self.latency.load(Ordering::Relaxed);
        if old > DECAY {
            self.latency.store(old - old / DECAY, Ordering::Relaxed);
        }
    }

    /// Whether it is the cheaper: its latency times its attempts in flight plus one, or its attempts
    /// in flight alone while either has no latency yet.
    fn cheaper_than(&self, other: &Self) -> bool {
        let (mine, theirs) = (self.in_flight() as u128 + 1, other.in_flight() as u128 + 1);
        match (
            self.latency.load(Ordering::Relaxed),
            other.latency.load(Ordering::Relaxed),
        ) {
            (0, _) | (_, 0) => mine < theirs,
            (a, b) => a as u128 * mine < b as u128 * theirs,
        }
    }
}

impl fmt::Debug for Member {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Member")
            .field("addr", &self.addr)
            .field("in_flight", &self.in_flight())
            .field("latency", &self.latency())
            .finish()
    }
}

impl Replica {
    pub(crate) fn new(member: Arc<Member>) -> Self {
        Self { member }
    }

    /// The replica's address.
    pub fn addr(&self) -> SocketAddr {
        self.member.addr
    }

    pub(crate) fn member(&self) -> &Arc<Member> {
        &self.member
    }

    /// Its address alone, for a call whose only attempt reached it.
    pub(crate) fn reached(&self) -> Arc<Vec<SocketAddr>> {
        Arc::clone(&self.member.alone)
    }
}

impl fmt::Debug for Replica {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Replica").field(&self.member.addr).finish()
    }
}

impl PartialEq for Replica {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.member, &other.member)
    }
}

impl Eq for Replica {}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(n: u8) -> ReplicaSet {
        let addrs = (0..n).map(|i| SocketAddr::from(([127, 0, 0, 2 + i], 8080)));
        ReplicaSet::new("api.internal:8080", addrs).unwrap()
    }

    #[test]
    fn a_name_that_is_no_host_is_a_typed_error() {
        assert_eq!(
            ReplicaSet::new("", []).unwrap_err(),
            ConfigError::ReplicaName(String::new())
        );
        assert!(ReplicaSet::new("api internal", []).is_err());
    }

    #[test]
    fn a_replica_kept_through_a_change_keeps_what_is_known_of_it() {
        let set = set(3);
        let kept = set.find(SocketAddr::from(([127, 0, 0, 3], 8080))).unwrap();
        kept.answered(Duration::from_millis(7));
        let generation = set.generation();
        assert!(set.replace([
            SocketAddr::from(([127, 0, 0, 3], 8080)),
            SocketAddr::from(([127, 0, 0, 9], 8080))
        ]));
        assert!(set.generation() > generation);
        let again = set.find(SocketAddr::from(([127, 0, 0, 3], 8080))).unwrap();
        assert!(Arc::ptr_eq(&kept, &again));
        assert_eq!(again.latency(), Some(Duration::from_millis(7)));
        assert_eq!(set.len(), 2);
        assert!(!set.replace(set.addrs()), "no change");
    }

    #[test]
    fn the_cheaper_of_two_wins_and_a_slow_one_is_weighed_down_not_shut_out() {
        let set = set(3);
        let members = set.members();
        for member in members.iter() {
            member.answered(Duration::from_millis(1));
        }
        members[2].answered(Duration::from_millis(10));
        let mut picks = [0u32; 3];
        for _ in 0..100_000 {
            let i = set.choose(&members, |_| true).unwrap();
            picks[i] += 1;
            if i == 2 {
                // Its answers stay slow.
                members[2].answered(Duration::from_millis(10));
            }
        }
        // Fair would be a third each: the slow one gets a small share, but some.
        assert!(picks[2] > 0, "{picks:?}");
        assert!(picks[2] < 1_000, "{picks:?}");
    }

    #[test]
    fn attempts_in_flight_weigh_a_replica_down_before_any_answer() {
        let set = set(2);
        let members = set.members();
        for _ in 0..10 {
            members[0].started();
        }
        for _ in 0..100 {
            assert_eq!(set.choose(&members, |_| true), Some(1));
        }
        assert_eq!(set.choose(&members, |i| i == 0), Some(0), "the only one");
        assert_eq!(set.choose(&members, |_| false), None);
    }
}
