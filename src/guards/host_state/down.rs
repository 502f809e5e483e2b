//! One entry's health, for the breaker: up (counting the attempts that fail in a row), down (held for
//! or failed fast, one probe per delay), and recovering (the requests held let go at the rate they
//! came). An entry is a host, judged by the attempts it leaves unanswered, or a route (a host and a
//! path), judged by the gateway failures it answers; the parent module decides which evidence goes
//! where. The public `Breaker` has the rules, which reach here as [`Rules`].

use std::collections::BTreeMap;
use std::task::Waker;
use std::time::Duration;

use crate::time::Instant;
use rand::rngs::SmallRng;

use super::pace::Pacer;
use super::report::HostState;
use super::{Admission, MAX_HOLD};
use crate::guards::hosts::Host;

mod deadline;

pub(crate) use deadline::Deadline;

/// The breaker's rules, as the table applies them.
#[derive(Debug)]
pub(crate) struct Rules {
    /// Attempts in a row that fail before the host is down.
    pub(crate) failures: u32,
    /// How long new requests wait for a down host, from when it went down; `None`: they fail fast.
    pub(crate) hold: Option<Duration>,
    /// The probes' delays.
    pub(crate) probes: Box<dyn ProbeSchedule>,
    /// Whether gateway failures count against the host rather than against the route they came
    /// from (`Breaker::with_route_scope(false)`).
    pub(crate) answers_per_host: bool,
}

/// Where the delays between one down host's probes come from (the engine's probe backoff).
pub(crate) trait ProbeSchedule: Send + Sync + std::fmt::Debug {
    /// The delays of one host's probes, jittered from `rng`.
    fn delays(&self, rng: &mut SmallRng) -> Box<dyn ProbeDelays>;
}

/// The delays of one down host's probes: the n-th is the delay before the n-th probe.
pub(crate) trait ProbeDelays: Send + std::fmt::Debug {
    /// The next delay.
    fn next_delay(&mut self) -> Duration;
}

/// How far apart two failures may be and still count as in a row: a client that calls a dead host
/// once an hour does not find it down on the fifth hour.
const IN_A_ROW: Duration = Duration::from_secs(60);

/// A down host that nobody asks about is forgotten after this long: the next request goes, and
/// finds out afresh.
const FORGET_AFTER: Duration = MAX_HOLD;

/// A host marked down by hand stays down until marked up: this far off stands for never.
const MARKED: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The distinct routes a host's gateway failures in a row must come from before they put the host
/// down as a whole: a host that fails every path it is asked for (a gateway whose only backend is
/// gone, asked for paths with ids in them) is down, one that fails a path or two while the others
/// are not asked for meanwhile is not.
const GATEWAY_ROUTES: u8 = 3;

/// What an attempt's end says of one entry's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    /// Nothing.
    Nothing,
    /// It answered.
    Answered,
    /// It failed: no answer (for a host), a gateway failure (for a route).
    Failed,
    /// It failed, its attempt timed out: a failure whose request may have reached the host.
    TimedOut,
    /// No answer yet, long past what the host takes to answer: a failure, unless the answer still
    /// comes, which then says the host is only slow.
    Silent,
    /// To a host's entry, a gateway failure on this route: an answer, and one of a run that puts
    /// the host down when it spans [`GATEWAY_ROUTES`] routes.
    Gateway(Host),
}

/// What a request holds of its host's health: the episode of an entry's being down it met, its
/// place among the requests waiting, whether it went as the probe, its place as they are let go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DownTicket {
    /// The entry that is down: the host's, or a route's.
    pub(crate) key: Host,
    episode: u64,
    waiter: u64,
    /// It went as the probe, the `probe_number`-th; its answer is the probe's.
    probe: bool,
    probe_number: u32,
    /// It has waited for the entry within the hold's bound: it may wait on past the bound, within
    /// its own deadline.
    held: bool,
    /// Its place as the held requests are let go, and whether it went.
    release: Option<(u64, bool)>,
}

impl DownTicket {
    /// Whether the request went as its host's probe, and its answer is awaited.
    pub(crate) const fn is_probe(&self) -> bool {
        self.probe
    }

    /// Which probe of the host's being down it was.
    pub(crate) const fn probe_number(&self) -> u32 {
        self.probe_number
    }

    /// Whether it waits for its turn as the requests held for a host come back are let go.
    pub(crate) const fn is_releasing(&self) -> bool {
        matches!(self.release, Some((_, false)))
    }
}

/// A host's (or a route's) health, as its entry in the table keeps it.
#[derive(Debug, Default)]
pub(super) struct HostHealth {
    /// Attempts in a row that failed, the last at `last_failure`: unanswered (a host's), or
    /// answered with a gateway failure (a route's).
    failures: u32,
    last_failure: Option<Instant>,
    /// The last failure in a row left its attempt hanging: a timeout or a silence. A probe of an
    /// entry found down so may hang too, and its request not be safe to send again.
    hung: bool,
    /// The last failure in a row was a silence (see [`Health::Silent`]).
    silent: bool,
    /// A host's gateway failures in a row, with no other answer between them, and the routes they
    /// came from.
    gateway: Gateway,
    state: State,
}

/// A host's gateway failures in a row, and how many routes they came from (up to
/// [`GATEWAY_ROUTES`]).
#[derive(Debug, Default, Clone, Copy)]
struct Gateway {
    failures: u32,
    routes: [Option<Host>; 2],
    distinct: u8,
}

impl Gateway {
    /// One more failure, on `route`.
    fn failed(&mut self, route: Host) {
        self.failures = self.failures.saturating_add(1);
        if self.distinct >= GATEWAY_ROUTES || self.routes.contains(&Some(route)) {
            return;
        }
        if let Some(slot) = self.routes.iter_mut().find(|seen| seen.is_none()) {
            *slot = Some(route);
        }
        self.distinct += 1;
    }
}

#[derive(Debug, Default)]
enum State {
    #[default]
    Up,
    Down(Box<Down>),
    Recovering(Recovering),
}

#[derive(Debug)]
struct Down {
    episode: u64,
    since: Instant,
    /// When a request last asked for the host: one nobody asks about ends [`FORGET_AFTER`] later.
    last_asked: Instant,
    probes: u32,
    /// No probe before this; `None` for a host marked down by hand.
    next_probe: Option<Instant>,
    probe_delays: Box<dyn ProbeDelays>,
    /// Requests that asked while the host was down, each once: the rate they came at is the rate
    /// the held ones are let go at.
    asked: u32,
    /// Past this, no new request waits for the host; `None` to fail fast.
    hold_until: Option<Instant>,
    /// Found down by attempts that went silent: any answer says it is only slow, and up.
    by_silence: bool,
    /// Found down by attempts that hung (timed out or went silent).
    hung: bool,
    /// The requests waiting, oldest first, each woken when the host is back. A request that gives
    /// up (its caller dropped it) takes itself out ([`HostHealth::forget`]).
    waiters: BTreeMap<u64, Waker>,
    /// When each waiting request's own deadline passes: one past it when the host is back takes no
    /// turn from those that can still go.
    deadlines: BTreeMap<u64, Instant>,
}

impl Down {
    /// The request `waiter` waits no more: it went, failed or gave up.
    fn stop_waiting(&mut self, waiter: u64) {
        self.waiters.remove(&waiter);
        self.deadlines.remove(&waiter);
    }
}

#[derive(Debug)]
struct Recovering {
    episode: u64,
    /// Lets the held requests go, one `pace` apart.
    pacer: Pacer,
    /// The held requests' waiters, oldest first: the `n`-th goes at the pacer's position `n`, so that
    /// they go in the order they came whatever the order they ask in, and the oldest, which have the
    /// least time left, first.
    held: Vec<u64>,
    /// When the last of them will have gone.
    until: Instant,
}

/// Where an entry stands, for a choice between replicas ([`HostHealth::standing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// Requests go.
    Up,
    /// Down, and the next request goes as its probe; `hangs`: it was found down by attempts that
    /// hung, and its probe may hang too.
    ProbeDue { hangs: bool },
    /// Down until its next probe, if it has one.
    Down(Option<Instant>),
}

impl Standing {
    /// The worse of two: a replica is down if its entry or its route's is.
    pub(super) fn worse(self, other: Self) -> Self {
        match (self, other) {
            (Self::Down(a), Self::Down(b)) => Self::Down(a.max(b)),
            (Self::Down(a), _) | (_, Self::Down(a)) => Self::Down(a),
            (Self::ProbeDue { hangs: a }, Self::ProbeDue { hangs: b }) => {
                Self::ProbeDue { hangs: a || b }
            }
            (Self::ProbeDue { hangs }, _) | (_, Self::ProbeDue { hangs }) => {
                Self::ProbeDue { hangs }
            }
            (Self::Up, Self::Up) => Self::Up,
        }
    }
}

/// Which entry of the table a [`Change`] is of: a host's (name and port), one of a name's replicas',
/// or a route's (the host or replica and a path, which gateway failures put down alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Host,
    Replica,
    Route,
}

impl Scope {
    /// As the events' `host.scope` says it.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Host => "host",
            Self::Replica => "replica",
            Self::Route => "route",
        }
    }
}

/// A change of a host's health, for the events and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Change {
    /// Found down after this many failures in a row.
    Down { failures: u32 },
    /// A probe answered after the host was down this long; this many requests were held.
    Up { down_for: Duration, held: usize },
}

impl HostHealth {
    /// Whether it has nothing to remember.
    pub(super) fn is_idle(&self) -> bool {
        self.failures == 0 && self.gateway.failures == 0 && matches!(self.state, State::Up)
    }

    /// Whether requests wait for it: an entry they wait on is not evicted from a full table.
    pub(super) fn has_waiters(&self) -> bool {
        matches!(&self.state, State::Down(down) if !down.waiters.is_empty())
    }

    /// When it may be forgotten if nothing else happens.
    pub(super) fn ends(&self) -> Option<Instant> {
        match &self.state {
            State::Up => self.last_failure.map(|last| last + IN_A_ROW),
            State::Down(down) if down.next_probe.is_none() => Some(down.since + MARKED),
            State::Down(down) => Some(down.last_asked + FORGET_AFTER),
            State::Recovering(recovering) => Some(recovering.until),
        }
    }

    /// Moves along to `now`: failures too far apart are forgotten, a recovery whose held requests
    /// have all gone is over.
    pub(super) fn advance(&mut self, now: Instant) {
        if self.last_failure.is_some_and(|last| now >= last + IN_A_ROW) {
            self.failures = 0;
            self.gateway = Gateway::default();
            self.last_failure = None;
        }
        if let State::Recovering(recovering) = &self.state
            && now >= recovering.until
        {
            self.state = State::Up;
        }
    }

    /// Whether requests to the host are held back: a hedge would not be sent.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(super) fn holds(&self) -> bool {
        !matches!(self.state, State::Up)
    }

    /// Records an attempt's end at `now`, of a request holding `ticket`. Returns the change it
    /// makes, if any.
    pub(super) fn observe(
        &mut self,
        health: Health,
        now: Instant,
        ticket: &mut Option<DownTicket>,
        rules: &Rules,
        episode: impl FnOnce() -> u64,
        rng: &mut SmallRng,
    ) -> Option<Change> {
        if let State::Down(down) = &mut self.state {
            // An entry found down by silence that answers after all is slow, not down.
            if down.by_silence && health == Health::Answered {
                return self.come_back(now);
            }
            // Only the probe's answer counts otherwise: the others were sent before it was found
            // down. A probe whose end says nothing (cut by its caller's own limit) is over too.
            let probe = ticket
                .as_mut()
                .filter(|ticket| ticket.episode == down.episode && ticket.probe)?;
            probe.probe = false;
            if health != Health::Answered {
                return None;
            }
            return self.come_back(now);
        }
        let health = match health {
            Health::Gateway(_) if rules.answers_per_host => Health::Failed,
            health => health,
        };
        match health {
            Health::Nothing => return None,
            Health::Answered => {
                self.failures = 0;
                self.gateway = Gateway::default();
                self.last_failure = None;
                self.silent = false;
                self.hung = false;
                return None;
            }
            Health::Gateway(route) => {
                // The host answered: its unanswered failures are no longer in a row.
                self.failures = 0;
                self.silent = false;
                self.hung = false;
                self.gateway.failed(route);
                self.last_failure = Some(now);
                if self.gateway.failures < rules.failures || self.gateway.distinct < GATEWAY_ROUTES
                {
                    return None;
                }
                let failures = self.gateway.failures;
                self.trip(now, rules, episode(), rng, false);
                return Some(Change::Down { failures });
            }
            Health::Failed | Health::TimedOut | Health::Silent => {}
        }
        self.failures = self.failures.saturating_add(1);
        self.last_failure = Some(now);
        self.silent = health == Health::Silent;
        self.hung = matches!(health, Health::TimedOut | Health::Silent);
        if self.failures < rules.failures {
            return None;
        }
        let failures = self.failures;
        self.trip(now, rules, episode(), rng, false);
        Some(Change::Down { failures })
    }

    /// The host is down from `now`: by its failures, or `marked` by hand.
    pub(super) fn trip(
        &mut self,
        now: Instant,
        rules: &Rules,
        episode: u64,
        rng: &mut SmallRng,
        marked: bool,
    ) {
        let mut probe_delays = rules.probes.delays(rng);
        let first = probe_delays.next_delay();
        self.state = State::Down(Box::new(Down {
            episode,
            since: now,
            last_asked: now,
            probes: 0,
            next_probe: (!marked).then(|| now + first),
            probe_delays,
            asked: 0,
            hold_until: rules.hold.filter(|_| !marked).map(|bound| now + bound),
            by_silence: self.silent && !marked,
            hung: self.hung,
            waiters: BTreeMap::new(),
            deadlines: BTreeMap::new(),
        }));
        self.gateway = Gateway::default();
    }

    /// The breaker is turned off: nothing is known of the entry's health any more, and the requests
    /// held for it go at once.
    pub(super) fn release(&mut self) {
        if let State::Down(down) = &mut self.state {
            for waker in std::mem::take(&mut down.waiters).into_values() {
                waker.wake();
            }
        }
        *self = Self::default();
    }

    /// The breaker's hold is now `hold` (`None`: failing fast): a down entry's bound counts from
    /// when it went down. The requests held for it meet the new bound when they next look, at the
    /// entry's next probe at the latest (a bound already past keeps them waiting only within their
    /// own deadlines, as after any bound). An entry marked down by hand has no bound, and keeps
    /// none.
    pub(super) fn rehold(&mut self, hold: Option<Duration>) {
        let State::Down(down) = &mut self.state else {
            return;
        };
        if down.next_probe.is_some() {
            down.hold_until = hold.map(|bound| down.since + bound);
        }
    }

    /// Marked up by hand: requests go at once; those held go paced, as after a probe.
    pub(super) fn mark_up(&mut self, now: Instant) -> Option<Change> {
        self.failures = 0;
        self.last_failure = None;
        self.come_back(now)
    }

    /// A down host is back at `now`: the requests held go at the rate they came, oldest first.
    fn come_back(&mut self, now: Instant) -> Option<Change> {
        let State::Down(down) = &mut self.state else {
            return None;
        };
        let down_for = now.saturating_duration_since(down.since);
        // Only the live: a request whose caller gave up took itself out.
        let held = down.waiters.len();
        let pace = down_for
            .checked_div(down.asked.max(1))
            .unwrap_or_default()
            .min(Duration::from_secs(1));
        let episode = down.episode;
        let waiters = std::mem::take(&mut down.waiters);
        let until = now + pace.saturating_mul(u32::try_from(held).unwrap_or(u32::MAX));
        let mut pacer = Pacer::new(pace, now, now, None);
        // A request that was not waiting goes after them.
        pacer.next = held as u64;
        self.state = State::Recovering(Recovering {
            episode,
            pacer,
            held: (waiters.keys())
                .filter(|id| {
                    down.deadlines
                        .get(id)
                        .is_none_or(|&deadline| deadline > now)
                })
                .copied()
                .collect(),
            until,
        });
        self.failures = 0;
        self.gateway = Gateway::default();
        self.last_failure = None;
        self.silent = false;
        self.hung = false;
        for waker in waiters.into_values() {
            waker.wake();
        }
        Some(Change::Up { down_for, held })
    }

    /// When a request holding `ticket` may go to the entry `key` at `now`, as far as its health
    /// says: `None` when it says nothing (it is up), and the cooldown decides. `deadline`: whether
    /// the request has a deadline of its own, within which it may wait on past the hold's bound.
    pub(super) fn admit(
        &mut self,
        key: Host,
        now: Instant,
        ticket: &mut Option<DownTicket>,
        deadline: Deadline,
        next_id: impl FnOnce() -> u64,
    ) -> Option<Admission> {
        match &mut self.state {
            State::Up => None,
            State::Recovering(recovering) => {
                // A request held while the host was down takes its turn; any other goes.
                let held = ticket
                    .as_mut()
                    .filter(|ticket| ticket.episode == recovering.episode)?;
                let pacer = &mut recovering.pacer;
                let (position, at) = match held.release {
                    Some((position, false)) => (position, pacer.time_of(position)),
                    Some((_, true)) => return None,
                    None => match recovering.held.binary_search(&held.waiter) {
                        Ok(rank) => (rank as u64, pacer.time_of(rank as u64)),
                        Err(_) => pacer.take(now),
                    },
                };
                // A turn that would leave no room for the answer before the request's own deadline
                // comes sooner: the held requests' deadlines are as far apart as they came, so
                // they still go no faster than they came. (Let go at their turns, which come about
                // as near their deadlines as the oldest's when the host came back, 15 of 486 held
                // calls behind a real blackhole reached their deadlines unsent.)
                let at = (deadline.latest_start(now)).map_or(at, |latest| at.min(latest));
                held.release = Some((position, at <= now));
                (at > now).then(|| Admission::Slot(at - now))
            }
            State::Down(down) => {
                down.last_asked = now;
                let mine = match ticket {
                    Some(ticket) if ticket.episode == down.episode => ticket,
                    _ => {
                        down.asked = down.asked.saturating_add(1);
                        ticket.insert(DownTicket {
                            key,
                            episode: down.episode,
                            waiter: next_id(),
                            probe: false,
                            probe_number: 0,
                            held: false,
                            release: None,
                        })
                    }
                };
                let probe_due = down.next_probe.is_some_and(|next| now >= next);
                if probe_due && deadline.leaves_room_for_a_probe() {
                    // The probe: it goes, and the next one waits its delay from now.
                    down.probes = down.probes.saturating_add(1);
                    let delay = down.probe_delays.next_delay();
                    down.next_probe = Some(now + delay);
                    down.stop_waiting(mine.waiter);
                    mine.probe = true;
                    mine.probe_number = down.probes;
                    return Some(Admission::Go);
                }
                // The bound stops new requests from waiting; one already waiting waits on, within
                // its own deadline, for it can still succeed when the host is back.
                // A request too near its deadline to see a probe's answer leaves the probe due for
                // the next to ask, and waits for its answer, asking again halfway to its deadline.
                let next_probe = match probe_due {
                    true => deadline.halfway(now),
                    false => down.next_probe,
                };
                let within_bound = down.hold_until.is_some_and(|until| now < until);
                let waits_on = mine.held && deadline.is_some() && down.hold_until.is_some();
                if within_bound || waits_on {
                    mine.held = true;
                    if let Deadline::Left { left, .. } = deadline
                        && let Some(passes) = now.checked_add(left)
                    {
                        down.deadlines.insert(mine.waiter, passes);
                    }
                    let until = down.hold_until.filter(|_| within_bound);
                    let wake = match (next_probe, until) {
                        (Some(next), Some(until)) => next.min(until),
                        (Some(next), None) => next,
                        (None, Some(until)) => until,
                        (None, None) => now + FORGET_AFTER,
                    };
                    return Some(Admission::HeldDown(wake - now));
                }
                down.stop_waiting(mine.waiter);
                Some(Admission::Down(down.next_probe.map(|next| next - now)))
            }
        }
    }

    /// Where it stands at `now`, for a choice between replicas, without changing anything: up (or
    /// letting its held requests go), down with a probe due, or down until `wake` (its next probe,
    /// `None` for one marked down by hand).
    pub(super) fn standing(&self, now: Instant) -> Standing {
        match &self.state {
            State::Up | State::Recovering(_) => Standing::Up,
            State::Down(down) => match down.next_probe {
                Some(next) if now >= next => Standing::ProbeDue { hangs: down.hung },
                next => Standing::Down(next),
            },
        }
    }

    /// Whether a request to the host fails at `now` without being sent: it is down, no new request
    /// waits for it, and no probe is due.
    pub(super) fn fails_fast(&self, now: Instant) -> bool {
        let State::Down(down) = &self.state else {
            return false;
        };
        let held = down.hold_until.is_some_and(|until| now < until);
        let probe_due = down.next_probe.is_some_and(|next| now >= next);
        !held && !probe_due
    }

    /// Whether a request holding `ticket` is still held: if so, `waker` is woken when the host is back.
    pub(super) fn still_held(&mut self, ticket: Option<&DownTicket>, waker: &Waker) -> bool {
        let (State::Down(down), Some(ticket)) = (&mut self.state, ticket) else {
            return false;
        };
        if ticket.episode != down.episode {
            return false;
        }
        match down.waiters.get_mut(&ticket.waiter) {
            Some(known) => known.clone_from(waker),
            None => {
                down.waiters.insert(ticket.waiter, waker.clone());
            }
        }
        true
    }

    /// A request holding `ticket` is gone (its caller dropped it): it no longer waits, and keeps
    /// no waker alive.
    pub(super) fn forget(&mut self, ticket: &DownTicket) {
        if let State::Down(down) = &mut self.state
            && ticket.episode == down.episode
        {
            down.stop_waiting(ticket.waiter);
        }
    }

    /// What it says of the host at `now`, if anything beyond "up".
    pub(super) fn state(&self, now: Instant) -> Option<HostState> {
        match &self.state {
            // The gateway failures of a host's routes are theirs to report, unless they come from
            // enough routes to put the host down: then they are the host's too.
            State::Up if self.failures == 0 && self.gateway.distinct < GATEWAY_ROUTES => None,
            State::Up if self.failures == 0 => Some(HostState::Up {
                failures: self.gateway.failures,
            }),
            State::Up => Some(HostState::Up {
                failures: self.failures,
            }),
            State::Down(down) => Some(HostState::Down {
                down_for: now.saturating_duration_since(down.since),
                probes: down.probes,
                next_probe: down
                    .next_probe
                    .map(|next| next.saturating_duration_since(now)),
                held: down.waiters.len(),
            }),
            State::Recovering(recovering) => Some(HostState::Recovering {
                left: recovering.until.saturating_duration_since(now),
            }),
        }
    }
}

#[cfg(test)]
mod tests;
