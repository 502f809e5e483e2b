//! The per-host cooldown: when a host refuses, every request to it through one policy waits, and is
//! then released at the rate the host admits.
//!
//! A table from host to its state, shared by every clone of a policy. A host enters it when it
//! refuses a request with a delay (a `429`, or a `503` with `Retry-After`) or says its quota is
//! spent, and goes through three phases:
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
//! A request reads one atomic flag when no host is in the table, so the success path of a policy with
//! the cooldown on costs no lock, no clock read and no allocation; the table is locked only while some
//! host is in it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::attempt::HostSignal;
use crate::guards::hosts::Host;

mod pace;

use pace::{Pacer, Probe};

/// The most hosts the table holds. Past it, a new host first evicts the entries that have ended,
/// then the eighth that end first: a client talking to more hosts than this at once keeps the
/// 4 096 that hold or pace the longest.
pub(crate) const MAX_HOSTS: usize = 4096;

/// The longest a host is held, whatever it asked: a `Retry-After` of years, from a buggy proxy or a
/// hostile server, must not disable a host until the process restarts. Envoy clamps at the same.
/// After it, requests go out again, and one that is refused holds the host anew.
pub(crate) const MAX_HOLD: Duration = Duration::from_secs(300);

/// The shortest wait that holds a host already in the table: a quota spent until a reset this far
/// off (a fixed window's), or a refusal asking this much (a penalty box), which no pace would get
/// through. A shorter one, from a host that is probed or paced, is a rate limiter's refusal, which
/// the pace answers: nginx's `limit_req` asks for a second, and a token bucket's `RateLimit` header
/// says a second until it is full again.
const LONG_HOLD: Duration = Duration::from_secs(10);

/// How late tokio's timer may wake a request: it rounds every deadline up to the next millisecond.
const TIMER_TICK: Duration = Duration::from_millis(1);

/// How long a paced host stays in the table after its last refusal, with no request queued.
const QUIET: Duration = Duration::from_secs(10);

/// The shortest round over which a pace is judged.
pub(super) const MIN_ROUND: Duration = Duration::from_millis(500);

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
    pacer: u64,
    stage: Stage,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Waiting for this position to come.
    Waiting(u64),
    /// Let go from this position while the pace was at this generation: its answer judges that pace,
    /// and no other; if it is refused, its retry keeps the position, ahead of those who came later.
    Sent { generation: u32, position: u64 },
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
}

impl Admission {
    /// How long before the request may go, at the earliest.
    pub(crate) fn left(self) -> Duration {
        match self {
            Self::Go => Duration::ZERO,
            Self::Spread(pause) => pause.left,
            Self::Slot(at) => at,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// No request before this.
    until: Instant,
    /// The delay asked for by the refusal that started the last hold.
    asked: Duration,
    phase: Phase,
    last_refusal: Instant,
}

#[derive(Debug, Clone, Copy)]
enum Phase {
    /// The rate is being measured from the host's answers.
    Probing(Probe),
    /// Requests are released one `pace` apart.
    Paced(Pacer),
}

impl Entry {
    /// A host that refused at `now`, asking for `asked`.
    fn refused(now: Instant, asked: Duration, pace: Option<Duration>) -> Self {
        let until = now + asked.min(MAX_HOLD);
        Self {
            until,
            asked,
            phase: match pace {
                Some(pace) => Phase::Paced(Pacer::new(pace, now, until, None)),
                None => Phase::Probing(Probe::default()),
            },
            last_refusal: now,
        }
    }

    /// When the entry may leave the table, if nothing else happens to it.
    fn ends(&self) -> Instant {
        let probe_over = self.until + self.asked.min(MAX_HOLD);
        match self.phase {
            Phase::Probing(_) => probe_over.max(self.last_refusal + QUIET),
            Phase::Paced(pacer) => pacer.tail().max(self.last_refusal + QUIET),
        }
    }

    /// Holds the host until `asked` from `now`, unless a longer hold is in force; a queue waits
    /// until the hold ends.
    fn hold(&mut self, now: Instant, asked: Duration) {
        let until = now + asked.min(MAX_HOLD);
        if until > self.until {
            self.until = until;
            self.asked = asked;
            if let Phase::Paced(pacer) = &mut self.phase {
                pacer.respace(pacer.pace, now, until);
            }
        }
    }

    /// Moves the phase along to `now`: a probe whose window has passed sets the pace (or, without a
    /// refusal in it, says the host is fine), a round of the pace that has passed is judged.
    /// `false` when the entry should leave the table.
    fn advance(&mut self, now: Instant) -> bool {
        match &mut self.phase {
            Phase::Probing(probe) => {
                let window = self.asked.clamp(MIN_ROUND, MAX_HOLD);
                if now < self.until + window {
                    return true;
                }
                if !probe.refused {
                    // Nothing refused while probing: the host admits what is sent.
                    return false;
                }
                // Too few accepts to measure two gaps: one gap, or, without one, a request per
                // delay asked.
                let pace = probe.smallest_gap.unwrap_or(window);
                self.phase = Phase::Paced(probe.pacer(pace, now));
                true
            }
            Phase::Paced(pacer) => {
                pacer.judge_round(now);
                now < self.ends()
            }
        }
    }
}

/// The hosts that refused lately.
#[derive(Debug, Default)]
pub(crate) struct Cooldowns {
    /// Whether any host may be in the table. Set under the lock when one enters, cleared under it
    /// when the table empties; read without it by every request.
    armed: AtomicBool,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    hosts: HashMap<Host, Entry>,
    /// When the last entry may end, at the latest: past it the table is emptied at once.
    latest: Option<Instant>,
}

impl Cooldowns {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Whether any host may be in the table.
    #[inline]
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// Records what `host` answered at `now` to a request that went with `sent` (the ticket its
    /// admission left, if the host was paced).
    pub(crate) fn observe(
        &self,
        host: Host,
        signal: HostSignal,
        now: Instant,
        sent: Option<Ticket>,
    ) {
        if signal == HostSignal::Nothing {
            return;
        }
        let starts = signal.starts_a_cooldown();
        if !starts && !self.is_armed() {
            return;
        }
        let mut table = self.lock();
        let entry = match table.live(host, now) {
            Some(entry) => entry,
            None if !starts => return,
            None => {
                if table.hosts.len() >= MAX_HOSTS {
                    table.make_room(now);
                }
                let entry = match signal {
                    HostSignal::Refused { asked, pace, .. } => Entry::refused(now, asked, pace),
                    HostSignal::Accepted { spent, pace } => {
                        Entry::refused(now, spent.unwrap_or_default(), pace)
                    }
                    HostSignal::Nothing => return,
                };
                table.hosts.insert(host, entry);
                let ends = entry.ends();
                table.extend(ends);
                self.armed.store(true, Ordering::Release);
                return;
            }
        };
        match signal {
            HostSignal::Nothing => {}
            HostSignal::Accepted { spent, .. } => {
                if let Some(asked) = spent.filter(|&asked| asked > LONG_HOLD) {
                    entry.hold(now, asked);
                }
                if let Phase::Probing(probe) = &mut entry.phase
                    && now >= entry.until
                    && let Some(pace) = probe.accepted(now)
                {
                    entry.phase = Phase::Paced(probe.pacer(pace, now));
                }
            }
            HostSignal::Refused { asked, pace } => {
                entry.last_refusal = now;
                match &mut entry.phase {
                    // Refused before the hold ends: a request sent before it began.
                    Phase::Probing(_) if now < entry.until => entry.hold(now, asked),
                    Phase::Probing(probe) => {
                        probe.refused(now);
                        if let Some(pace) = pace {
                            entry.phase = Phase::Paced(Pacer::new(pace, now, now, None));
                        }
                    }
                    Phase::Paced(pacer) => {
                        pacer.refused(now, sent);
                        if let Some(pace) = pace.filter(|&pace| pace > pacer.pace) {
                            pacer.respace(pace, now, now);
                        }
                    }
                }
                if asked > LONG_HOLD {
                    entry.hold(now, asked);
                }
            }
        }
        let ends = entry.ends();
        table.extend(ends);
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
        let entry = table.live(host, now)?;
        (entry.until > now).then(|| Pause {
            left: entry.until - now,
            asked: entry.asked,
        })
    }

    /// Whether requests to `host` are held or paced: a hedge, which would go past the queue, is not
    /// sent to it.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn holds_or_paces(&self, host: Host, now: impl FnOnce() -> Instant) -> bool {
        if !self.is_armed() {
            return false;
        }
        let now = now();
        let mut table = self.lock();
        table.live(host, now).is_some_and(|entry| {
            entry.until > now || matches!(entry.phase, Phase::Paced(pacer) if pacer.tail() > now)
        })
    }

    /// When a request to `host` may go, at `now`. `ticket` is the place in the host's queue the
    /// request was given by an earlier admission, if any: a request that waited goes when its place
    /// comes (later, if the pace slowed meanwhile), and one that goes gives its ticket up, so that its
    /// retry queues anew.
    pub(crate) fn admit(&self, host: Host, now: Instant, ticket: &mut Option<Ticket>) -> Admission {
        let given = ticket.take();
        if !self.is_armed() {
            return Admission::Go;
        }
        let mut table = self.lock();
        let Some(entry) = table.live(host, now) else {
            return Admission::Go;
        };
        let held = entry.until > now;
        let admission = match &mut entry.phase {
            Phase::Probing(_) if held => Admission::Spread(Pause {
                left: entry.until - now,
                asked: entry.asked.min(MAX_HOLD),
            }),
            Phase::Probing(_) => Admission::Go,
            Phase::Paced(pacer) => {
                let mut earliest = now.max(entry.until);
                if let Some(last) = pacer.last_release {
                    earliest = earliest.max(last + pacer.pace);
                }
                let waiting =
                    given
                        .filter(|given| given.pacer == pacer.id)
                        .map(|given| match given.stage {
                            Stage::Waiting(position) | Stage::Sent { position, .. } => position,
                        });
                let (position, at) = match waiting {
                    // Overdue: passed over while it slept, or refused and back for its retry. It
                    // goes at the next turn, and the queue behind it one turn later.
                    Some(position) if position < pacer.anchor.1 => {
                        pacer.anchor.0 = pacer.anchor.0.max(earliest + pacer.pace);
                        (position, earliest)
                    }
                    Some(position) => (position, pacer.time_of(position).max(earliest)),
                    None => pacer.take(earliest),
                };
                if at <= now {
                    pacer.round.released += 1;
                    pacer.round.in_round += 1;
                    *ticket = Some(Ticket {
                        pacer: pacer.id,
                        stage: Stage::Sent {
                            generation: pacer.generation,
                            position,
                        },
                    });
                    // A tick of lateness is made up only where it matters to the rate: at 200 ms
                    // a tick is half a percent, and making it up would send requests a tick closer
                    // than the pace to a limiter that counts in milliseconds.
                    let tick = if pacer.pace < TIMER_TICK * 20 {
                        TIMER_TICK
                    } else {
                        Duration::ZERO
                    };
                    let late = now.checked_sub(tick).unwrap_or(now);
                    let released = match pacer.last_release {
                        Some(last) => (last + pacer.pace).max(late),
                        None => now,
                    };
                    pacer.last_release = Some(released);
                    // The places after this one are counted from when it went, not from when it
                    // was due: a request that goes late (a timer's tick, a waiter asleep since a
                    // change of pace) would otherwise leave the places after it due together, and
                    // their waiters racing for each turn in no order.
                    if position >= pacer.anchor.1 {
                        pacer.anchor = (released, position);
                    }
                    Admission::Go
                } else {
                    *ticket = Some(Ticket {
                        pacer: pacer.id,
                        stage: Stage::Waiting(position),
                    });
                    // No longer than a round before looking again: a pace that speeds up moves the
                    // place forward, which a waiter asleep until its old time would miss.
                    Admission::Slot((at - now).min(pacer.round_length()))
                }
            }
        };
        let ends = entry.ends();
        table.extend(ends);
        admission
    }

    /// How many hosts the table holds.
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

/// The table, locked; when the lock is let go with the table empty, requests skip it again.
struct Guard<'a> {
    table: std::sync::MutexGuard<'a, Table>,
    armed: &'a AtomicBool,
}

impl std::ops::Deref for Guard<'_> {
    type Target = Table;

    fn deref(&self) -> &Table {
        &self.table
    }
}

impl std::ops::DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut Table {
        &mut self.table
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if self.table.hosts.is_empty() {
            self.armed.store(false, Ordering::Release);
        }
    }
}

impl Table {
    /// `host`'s entry at `now`, moved along to it; `None` if it has none, or it has ended (and is
    /// removed). Past the latest end of any entry the table is emptied first.
    fn live(&mut self, host: Host, now: Instant) -> Option<&mut Entry> {
        if self.latest.is_none_or(|latest| latest <= now) {
            self.hosts.clear();
            self.latest = None;
            return None;
        }
        let entry = self.hosts.get_mut(&host)?;
        if entry.advance(now) {
            return self.hosts.get_mut(&host);
        }
        self.hosts.remove(&host);
        None
    }

    fn extend(&mut self, ends: Instant) {
        self.latest = Some(self.latest.map_or(ends, |latest| latest.max(ends)));
    }

    /// Frees slots: the entries that have ended, or else the eighth of them that end first, so that a
    /// stream of new hosts costs a scan of the table once per `MAX_HOSTS / 8` of them, not each time.
    fn make_room(&mut self, now: Instant) {
        self.hosts.retain(|_, entry| entry.ends() > now);
        if self.hosts.len() < MAX_HOSTS {
            return;
        }
        let mut ends: Vec<Instant> = self.hosts.values().map(Entry::ends).collect();
        let (_, &mut last_evicted, _) = ends.select_nth_unstable(MAX_HOSTS / 8);
        self.hosts.retain(|_, entry| entry.ends() > last_evicted);
    }
}

/// What a wait outlasts when a request does not wait for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outlasts {
    /// The policy's `max_retry_after`.
    MaxRetryAfter,
    /// The time left before the deadline.
    Deadline,
}

/// How long a request waits before its attempt to a host, given its admission: until the hold ends
/// plus `U[0, w]` drawn by `uniform`, with `w = min(asked, max_retry_after − left, time left − left)`
/// (the rule of `RetryAfterMode::Spread`), or until its slot. `Err` when the hold or the slot
/// outlasts `max_retry_after` or the time left (`remaining`), or the wait would end at the deadline.
pub(crate) fn wait(
    admission: Admission,
    max_retry_after: Duration,
    remaining: Option<Duration>,
    uniform: impl FnOnce(Duration) -> Duration,
) -> Result<Duration, Outlasts> {
    let (left, window) = match admission {
        Admission::Go => return Ok(Duration::ZERO),
        Admission::Spread(pause) => (pause.left, pause.asked),
        Admission::Slot(at) => (at, Duration::ZERO),
    };
    if left > max_retry_after {
        return Err(Outlasts::MaxRetryAfter);
    }
    let mut window = window.min(max_retry_after - left);
    if let Some(remaining) = remaining {
        if left >= remaining {
            return Err(Outlasts::Deadline);
        }
        window = window.min(remaining - left);
    }
    let wait = left
        + if window.is_zero() {
            window
        } else {
            uniform(window)
        };
    // An attempt due at the deadline itself would have no time to run.
    if remaining.is_some_and(|remaining| wait >= remaining) {
        return Err(Outlasts::Deadline);
    }
    Ok(wait)
}

#[cfg(test)]
mod tests;
