//! What a policy keeps of each host it sends to, in one table shared by every clone of the policy:
//! the pause a host asked for (the host cooldown), and whether the host is down (the breaker). Two
//! states of one host, decided together before each attempt.
//!
//! # The cooldown
//!
//! A host enters the table when it refuses a request with a delay (a `429`, or a `503` with
//! `Retry-After`) or says its quota is spent, and goes through three phases ([`cooldown`]):
//!
//! 1. **Held**: until the delay it asked for has passed, no request goes; the requests that wait are
//!    spread over a window as long as the delay after it ends, as `RetryAfterMode::Spread` spreads
//!    retries.
//! 2. **Probing**: the waiters go out spread, and the host's answers measure its rate: once it has
//!    refused one, the gaps between the next requests it accepts are the interval at which it admits
//!    them (a leaky bucket's `1/rate`; a token bucket's too, once its burst is spent). The smallest of
//!    two gaps becomes the pace; a host that refuses nothing while probing leaves the table.
//! 3. **Paced**: every request to the host takes its turn, one pace after the last: a client asking
//!    more than the host admits queues here instead of being refused there. A refusal no longer holds
//!    the host (the request refused waits out its own delay, as any retry): it sends the pace back at
//!    once to the fastest one known good (or 5 % slower), and two rounds without one while requests
//!    queue try a pace halfway down to the slowest known refused, until the two are within 3 %. A host
//!    that has refused nothing for ten seconds and has no request queued leaves the table. When the
//!    host states its rate (`RateLimit-Policy`), that is the pace from the first refusal, with no
//!    probe; only a wait of more than ten seconds (a fixed window's reset) holds a host already paced.
//!
//! Releasing the waiters at once after the delay, or spread over it, fails against a limiter that
//! admits requests at a steady rate (nginx's `limit_req`, a token bucket): the first one gets through,
//! the next, milliseconds later, is refused and holds the host again, one success a second against a
//! quota of five.
//!
//! # The breaker
//!
//! Evidence is counted where it happens. An attempt that fails without an answer (refused, reset,
//! timed out by the policy's own limit, silent long past what the host takes to answer) is the
//! host's failure: its entry is the host's (name and port). A `502`, `503` or `504` (gRPC
//! `UNAVAILABLE`) that names no delay is the host answering that what stands behind it failed: the
//! failure of the route it came from (the host and the request's path; a gRPC method's path), whose
//! entry is of its own, and the host's answer all the same. Enough failures in a row and the entry
//! is down ([`down`]): the requests to it (to the host, or to that path of it) are held or fail at
//! once, one probe per delay goes, and the probe that is answered lets the held requests go at the
//! rate they came. A host answering `503` on one path is down on that path alone: its other paths
//! are sent as ever. The public `Breaker` has the rules.
//!
//! A request reads one atomic flag when no host is in the table, so the success path of a policy with
//! either on costs no lock, no clock read and no allocation; the table is locked only while some
//! host is in it.

mod cooldown;
mod down;
mod pace;
mod place;
mod replicas;
mod report;
mod reshape;
mod table;
mod wait;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Waker;
use std::time::Duration;

use crate::time::Instant;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::attempt::HostSignal;
use crate::classify::RequestView;
use crate::guards::hosts::Host;
use cooldown::Cooldown;
use down::HostHealth;

pub(crate) use down::{
    Change, Deadline, DownTicket, Health, ProbeDelays, ProbeSchedule, Rules, Scope,
};
pub(crate) use place::{Evidence, Place};
pub(crate) use replicas::Placing;
pub use report::{HostReport, HostState};
pub(crate) use table::name_of;
use table::*;
pub(crate) use wait::{Outlasts, wait};

/// The most entries the table holds (hosts, and the routes of hosts that answered gateway
/// failures). Past it, a new entry first evicts those that have ended, then the eighth that end
/// first, never one that requests wait on: a client talking to more hosts than this at once keeps
/// the 4 096 that hold or pace the longest, and a table full of entries with requests waiting takes
/// no new one.
pub(crate) const MAX_HOSTS: usize = 4096;

/// The longest a host is held, whatever it asked: a `Retry-After` of years, from a buggy proxy or a
/// hostile server, must not disable a host until the process restarts. Envoy clamps at the same.
/// After it, requests go out again, and one that is refused holds the host anew.
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(300);

/// A host held: no request goes before `left` has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pause {
    /// Time left until the hold ends.
    pub(crate) left: Duration,
    /// How long the host asked for: the window over which the waiters are spread after the hold,
    /// while its rate is not known.
    pub(crate) asked: Duration,
}

/// A request's place in a host's queue, and then the pace it went at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket {
    /// The pacer it was given by: a ticket of an earlier one means nothing to a later one.
    pub(super) pacer: u64,
    pub(super) stage: Stage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// Waiting for this position to come.
    Waiting(u64),
    /// Let go from this position while the pace was at this generation: its answer judges that pace,
    /// and no other; if it is refused, its retry keeps the position, ahead of those who came later.
    Sent { generation: u32, position: u64 },
}

/// What a request holds of its host's state between its admissions and its answers: its place in a
/// paced host's queue, and what it met of the host's (or its route's) being down.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HostTickets {
    pub(crate) slot: Option<Ticket>,
    pub(crate) down: Option<DownTicket>,
}

/// When a request to a host may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Now.
    Go,
    /// After the host's hold, plus a share of a window spread over the waiters.
    Spread(Pause),
    /// At its slot, this long from now.
    Slot(Duration),
    /// The host (or the route) is down: wait this long at most (its next probe, or the end of the
    /// hold), woken sooner if it comes back.
    HeldDown(Duration),
    /// The host (or the route) is down, and the request fails unsent; its next probe is this far off
    /// (`None`: it was marked down by hand).
    Down(Option<Duration>),
}

impl Admission {
    /// How long before the request may go, at the earliest.
    pub(crate) fn left(self) -> Duration {
        match self {
            Self::Go | Self::Down(_) => Duration::ZERO,
            Self::Spread(pause) => pause.left,
            Self::Slot(at) | Self::HeldDown(at) => at,
        }
    }
}

/// One entry's state: a host's (the cooldown's and the breaker's) or a route's (the breaker's), and
/// its name for the reports.
#[derive(Debug)]
struct Entry {
    name: Option<Box<str>>,
    /// The path, for a route's entry.
    route: Option<Box<str>>,
    /// The address, for a replica's entry (or a replica's route's).
    replica: Option<SocketAddr>,
    cooldown: Option<Cooldown>,
    health: HostHealth,
}

impl Entry {
    /// When it may leave the table if nothing else happens.
    fn ends(&self) -> Option<Instant> {
        let cooldown = self.cooldown.as_ref().map(Cooldown::ends);
        cooldown.max(self.health.ends())
    }

    /// Moves it along to `now`; `false` when it has nothing left to keep.
    fn advance(&mut self, now: Instant) -> bool {
        if let Some(cooldown) = &mut self.cooldown
            && !cooldown.advance(now)
        {
            self.cooldown = None;
        }
        self.health.advance(now);
        self.cooldown.is_some() || !self.health.is_idle()
    }

    fn state(&self, now: Instant) -> HostState {
        if let Some(state) = self.health.state(now)
            && !matches!(state, HostState::Up { .. })
        {
            return state;
        }
        match &self.cooldown {
            Some(cooldown) => cooldown.state(now),
            None => self
                .health
                .state(now)
                .unwrap_or(HostState::Up { failures: 0 }),
        }
    }
}

/// The hosts a policy keeps a state for.
#[derive(Debug)]
pub(crate) struct HostStates {
    /// Whether any host may be in the table. Set under the lock when one enters, cleared under it
    /// when the table empties; read without it by every request.
    armed: AtomicBool,
    table: Mutex<Table>,
    /// Whether the host cooldown is on.
    cooldown: AtomicBool,
    /// Whether there is a breaker, whose rules the table holds: read without the lock.
    breaker: AtomicBool,
}

#[derive(Debug)]
struct Table {
    hosts: HashMap<Host, Entry>,
    /// When the last entry may end, at the latest: past it the table is emptied at once.
    latest: Option<Instant>,
    /// The probes' jitter.
    rng: SmallRng,
    /// Numbers the episodes of a host's being down and the requests waiting for one.
    ids: u64,
    /// The breaker's rules, if there is one: under the lock, since a reload changes them
    /// (`reshape.rs`).
    rules: Option<Rules>,
}

impl HostStates {
    /// The table of a policy with the host cooldown on or not, and a breaker or not; `seed` seeds
    /// the probes' jitter.
    pub(crate) fn new(cooldown: bool, breaker: Option<Rules>, seed: u64) -> Self {
        Self {
            armed: AtomicBool::new(false),
            table: Mutex::new(Table {
                hosts: HashMap::new(),
                latest: None,
                rng: SmallRng::seed_from_u64(seed ^ 0x6272_6561_6b65_7221),
                ids: 0,
                rules: None,
            }),
            cooldown: AtomicBool::new(false),
            breaker: AtomicBool::new(false),
        }
        .shaped(cooldown, breaker)
    }

    /// This table, given the cooldown's switch and the breaker's rules.
    fn shaped(self, cooldown: bool, breaker: Option<Rules>) -> Self {
        self.reshape(cooldown, breaker, Instant::now());
        self
    }

    /// Whether the host cooldown is on.
    pub(crate) fn cooldown(&self) -> bool {
        self.cooldown.load(Ordering::Relaxed)
    }

    /// Whether there is a breaker.
    pub(crate) fn has_breaker(&self) -> bool {
        self.breaker.load(Ordering::Relaxed)
    }

    /// Whether any host may be in the table.
    #[inline]
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// Records what `place` answered at `now` (`signal`, for the host's cooldown; `evidence`, for
    /// the breaker) to a request that went holding `tickets`. `name` names the host and the path,
    /// should either enter the table. The change of health it makes, if any: the host's, or else the
    /// route's.
    pub(crate) fn observe(
        &self,
        place: Place,
        name: impl FnOnce() -> (Option<Box<str>>, Option<Box<str>>),
        signal: HostSignal,
        evidence: Evidence,
        now: Instant,
        tickets: &mut HostTickets,
    ) -> Option<(Scope, Change)> {
        let evidence = if self.has_breaker() {
            evidence
        } else {
            Evidence::Nothing
        };
        // A request of a policy reloaded since it started may still speak of a pause.
        let signal = if self.cooldown() {
            signal
        } else {
            HostSignal::Nothing
        };
        if signal == HostSignal::Nothing && evidence == Evidence::Nothing {
            return None;
        }
        let starts = signal.starts_a_cooldown() || evidence.fails();
        if !starts && !self.is_armed() {
            return None;
        }
        let mut table = self.lock();
        let Table {
            hosts,
            latest,
            rng,
            ids,
            rules,
        } = &mut *table;
        let rules = rules.as_ref();
        let (host_health, route_health) = evidence.split(place.route);
        // Counted against the host alone, gateway failures put no route down.
        let route_health = if rules.is_some_and(|rules| rules.answers_per_host) {
            Health::Nothing
        } else {
            route_health
        };
        let mut make = Some(name);
        let mut named = None;
        let mut name = || {
            if named.is_none() {
                named = make.take().map(|make| make());
            }
            named.clone().unwrap_or_default()
        };
        // The host's entry: its cooldown, and, when the attempt went to the host itself, what it
        // says of the host's health.
        let same = place.health == place.host;
        let host_starts = signal.starts_a_cooldown() || (same && host_health_fails(host_health));
        let mut change = None;
        if live(hosts, latest, place.host, now).is_some()
            || host_starts && insert_new(hosts, place.host, name().0, None, None, now)
        {
            self.armed.store(true, Ordering::Release);
            let entry = hosts.get_mut(&place.host).expect("just looked up or made");
            match &mut entry.cooldown {
                Some(cooldown) => cooldown.observe(signal, now, tickets.slot),
                None => entry.cooldown = Cooldown::start(signal, now),
            }
            if same {
                change = rules.and_then(|breaker| {
                    let ticket = &mut mine(&mut tickets.down, place.host);
                    let episode = || next_id(ids);
                    let change =
                        (entry.health).observe(host_health, now, ticket, breaker, episode, rng);
                    put_back(&mut tickets.down, *ticket);
                    change.map(|change| (Scope::Host, change))
                });
            }
            settle(hosts, latest, place.host, now);
        }
        // A replica's entry: what the attempt says of the replica it went to.
        if let (false, Some(breaker)) = (same, rules)
            && host_health != Health::Nothing
            && (live(hosts, latest, place.health, now).is_some()
                || host_health_fails(host_health)
                    && insert_new(hosts, place.health, name().0, None, place.replica, now))
        {
            self.armed.store(true, Ordering::Release);
            let entry = hosts
                .get_mut(&place.health)
                .expect("just looked up or made");
            let ticket = &mut mine(&mut tickets.down, place.health);
            let episode = || next_id(ids);
            let replica = (entry.health).observe(host_health, now, ticket, breaker, episode, rng);
            change = replica.map(|change| (Scope::Replica, change));
            put_back(&mut tickets.down, *ticket);
            settle(hosts, latest, place.health, now);
        }
        // The route's entry: what the answer says of the path.
        if let (Some(route), Some(breaker)) = (place.route, rules)
            && route_health != Health::Nothing
            && (live(hosts, latest, route, now).is_some()
                || host_health_fails(route_health) && {
                    let (host, path) = name();
                    insert_new(hosts, route, host, path, place.replica, now)
                })
        {
            self.armed.store(true, Ordering::Release);
            let entry = hosts.get_mut(&route).expect("just looked up or made");
            let ticket = &mut mine(&mut tickets.down, route);
            let episode = || next_id(ids);
            let routed = (entry.health).observe(route_health, now, ticket, breaker, episode, rng);
            put_back(&mut tickets.down, *ticket);
            change = change.or(routed.map(|change| (Scope::Route, change)));
            settle(hosts, latest, route, now);
        }
        change
    }

    /// The hold `host` is in at `now`, if any: no request to it goes before it ends. One atomic load
    /// when no host is in the table.
    #[inline]
    pub(crate) fn hold(&self, host: Host, now: impl FnOnce() -> Instant) -> Option<Pause> {
        if !self.is_armed() {
            return None;
        }
        self.hold_slow(host, now())
    }

    #[cold]
    fn hold_slow(&self, host: Host, now: Instant) -> Option<Pause> {
        let mut table = self.lock();
        let Table { hosts, latest, .. } = &mut *table;
        live(hosts, latest, host, now)?
            .cooldown
            .as_ref()?
            .pause(now)
    }

    /// Whether requests to `place` are held, paced, or waiting for it to come back: a hedge, which
    /// would go past the queue, is not sent to it.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn holds_or_paces(&self, place: Place, now: impl FnOnce() -> Instant) -> bool {
        if !self.is_armed() {
            return false;
        }
        let now = now();
        let mut table = self.lock();
        let Table { hosts, latest, .. } = &mut *table;
        let route = place
            .route
            .and_then(|route| live(hosts, latest, route, now))
            .is_some_and(|entry| entry.health.holds());
        let health = place.health != place.host
            && live(hosts, latest, place.health, now).is_some_and(|entry| entry.health.holds());
        route
            || health
            || live(hosts, latest, place.host, now).is_some_and(|entry| {
                entry.health.holds()
                    || (entry.cooldown.as_ref())
                        .is_some_and(|cooldown| cooldown.holds_or_paces(now))
            })
    }

    /// When a request to `place` may go, at `now`. `tickets.slot` is the place in the host's queue
    /// the request was given by an earlier admission, if any: a request that waited goes when its
    /// place comes (later, if the pace slowed meanwhile), and one that goes gives its ticket up, so
    /// that its retry queues anew. `tickets.down` is what it met of the host's (or the route's) being
    /// down. `deadline`: what the request has left of its deadline, within which a request already
    /// held may wait on past the hold's bound, and without enough of which it does not go as a
    /// probe.
    pub(crate) fn admit(
        &self,
        place: Place,
        now: Instant,
        tickets: &mut HostTickets,
        deadline: impl Into<Deadline>,
    ) -> Admission {
        let deadline = deadline.into();
        let given = tickets.slot.take();
        if !self.is_armed() {
            return Admission::Go;
        }
        let mut table = self.lock();
        let Table {
            hosts,
            latest,
            ids,
            rules,
            ..
        } = &mut *table;
        // The host first: a host that is down holds every path of it.
        if rules.is_some() {
            for key in [Some(place.health), place.route].into_iter().flatten() {
                let Some(entry) = live(hosts, latest, key, now) else {
                    continue;
                };
                let health = &mut entry.health;
                if let Some(admission) =
                    health.admit(key, now, &mut tickets.down, deadline, || next_id(ids))
                {
                    extend_to(latest, entry.ends());
                    return admission;
                }
            }
        }
        let Some(entry) = live(hosts, latest, place.host, now) else {
            return Admission::Go;
        };
        let admission = match &mut entry.cooldown {
            Some(cooldown) => cooldown.admit(now, given, &mut tickets.slot),
            None => Admission::Go,
        };
        extend_to(latest, entry.ends());
        admission
    }

    /// Whether a request to `place` would fail at `now` without being sent, the host (or the route)
    /// being down.
    pub(crate) fn fails_fast(&self, place: Place, now: Instant) -> bool {
        let mut table = self.lock();
        let Table { hosts, latest, .. } = &mut *table;
        [Some(place.health), place.route]
            .into_iter()
            .flatten()
            .any(|key| live(hosts, latest, key, now).is_some_and(|e| e.health.fails_fast(now)))
    }

    /// Whether a request holding `tickets` is still held for the entry it waits on to come back; if
    /// so, `waker` is woken when it does.
    pub(crate) fn still_held(&self, tickets: &HostTickets, waker: &Waker) -> bool {
        let Some(ticket) = &tickets.down else {
            return false;
        };
        if !self.is_armed() {
            return false;
        }
        let now = Instant::now();
        let mut table = self.lock();
        let Table { hosts, latest, .. } = &mut *table;
        live(hosts, latest, ticket.key, now)
            .is_some_and(|entry| entry.health.still_held(Some(ticket), waker))
    }

    /// A request holding `tickets` is gone: its caller dropped it. It leaves no waker behind, and is
    /// no longer counted among the held.
    pub(crate) fn forget(&self, tickets: &HostTickets) {
        let Some(ticket) = &tickets.down else {
            return;
        };
        if !self.is_armed() {
            return;
        }
        let mut table = self.lock();
        if let Some(entry) = table.hosts.get_mut(&ticket.key) {
            entry.health.forget(ticket);
        }
    }

    /// What the policy knows of `key` (a host's, or a route's) at `now`.
    pub(crate) fn state(&self, key: Host, now: Instant) -> HostState {
        let up = HostState::Up { failures: 0 };
        if !self.is_armed() {
            return up;
        }
        let mut table = self.lock();
        let Table { hosts, latest, .. } = &mut *table;
        live(hosts, latest, key, now).map_or(up, |entry| entry.state(now))
    }

    /// Every host and route the table holds, by name, with its state at `now`.
    pub(crate) fn report(&self, now: Instant) -> Vec<HostReport> {
        if !self.is_armed() {
            return Vec::new();
        }
        let mut table = self.lock();
        let Table { hosts, latest, .. } = &mut *table;
        if latest.is_none_or(|latest| latest <= now) {
            hosts.clear();
            *latest = None;
        }
        hosts.retain(|_, entry| entry.advance(now));
        let mut report: Vec<HostReport> = (hosts.values())
            .filter(|entry| entry.state(now) != HostState::Up { failures: 0 })
            .map(|entry| HostReport {
                host: entry.name.as_deref().unwrap_or("").to_owned(),
                replica: entry.replica,
                route: entry.route.as_deref().map(str::to_owned),
                state: entry.state(now),
            })
            .collect();
        report.sort_by(|a, b| (&a.host, a.replica, &a.route).cmp(&(&b.host, b.replica, &b.route)));
        report
    }

    /// Marks `host` down at `now`, by hand: nothing goes to it, and it is not probed, until it is
    /// marked up. `false` without a breaker, or with the table full of hosts that requests wait on.
    pub(crate) fn mark_down(&self, host: Host, name: Box<str>, now: Instant) -> bool {
        let mut table = self.lock();
        let Table {
            hosts,
            latest,
            rng,
            ids,
            rules,
        } = &mut *table;
        let Some(breaker) = rules.as_ref() else {
            return false;
        };
        if live(hosts, latest, host, now).is_none()
            && !insert_new(hosts, host, Some(name), None, None, now)
        {
            return false;
        }
        self.armed.store(true, Ordering::Release);
        let entry = hosts.get_mut(&host).expect("just looked up or made");
        (entry.health).trip(now, breaker, next_id(ids), rng, true);
        extend_to(latest, entry.ends());
        true
    }

    /// Marks `host` up at `now`, by hand: the requests held for it go, paced, and new ones at once.
    pub(crate) fn mark_up(&self, host: Host, now: Instant) -> Option<Change> {
        if !self.is_armed() {
            return None;
        }
        let mut table = self.lock();
        let Table { hosts, latest, .. } = &mut *table;
        let entry = live(hosts, latest, host, now)?;
        let change = entry.health.mark_up(now);
        settle(hosts, latest, host, now);
        change
    }

    /// A table with the host cooldown on and no breaker, for the cooldown's tests.
    #[cfg(test)]
    pub(crate) fn for_cooldown() -> Self {
        Self::new(true, None, 0)
    }

    /// [`observe`](Self::observe) as the cooldown alone sees it.
    #[cfg(test)]
    pub(crate) fn observe_cooldown(
        &self,
        host: Host,
        signal: HostSignal,
        now: Instant,
        sent: Option<Ticket>,
    ) {
        let mut tickets = HostTickets {
            slot: sent,
            down: None,
        };
        let place = Place::host(host);
        let none = || (None, None);
        self.observe(place, none, signal, Evidence::Nothing, now, &mut tickets);
    }

    /// [`admit`](Self::admit) as the cooldown alone sees it.
    #[cfg(test)]
    pub(crate) fn admit_cooldown(
        &self,
        host: Host,
        now: Instant,
        ticket: &mut Option<Ticket>,
    ) -> Admission {
        let mut tickets = HostTickets {
            slot: ticket.take(),
            down: None,
        };
        let admission = self.admit(Place::host(host), now, &mut tickets, true);
        *ticket = tickets.slot;
        admission
    }

    /// How many entries the table holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().hosts.len()
    }

    fn lock(&self) -> Guard<'_> {
        // The table holds no invariant a panic could break halfway.
        let table = self
            .table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Guard {
            table,
            armed: &self.armed,
        }
    }
}

#[cfg(test)]
mod tests;
