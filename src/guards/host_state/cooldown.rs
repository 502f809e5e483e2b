//! The host cooldown's part of a host's state: held until the pause it asked for ends, probed for
//! its rate, then paced (see the parent module for the three phases).

use std::time::Duration;

use crate::time::Instant;

use super::pace::{Pacer, Probe};
use super::report::HostState;
use super::{Admission, MAX_HOLD, Pause, Stage, Ticket};
use crate::attempt::HostSignal;

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

#[derive(Debug, Clone, Copy)]
pub(super) struct Cooldown {
    /// No request before this.
    pub(super) until: Instant,
    /// The delay asked for by the refusal that started the last hold.
    pub(super) asked: Duration,
    pub(super) phase: Phase,
    last_refusal: Instant,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum Phase {
    /// The rate is being measured from the host's answers.
    Probing(Probe),
    /// Requests are released one `pace` apart.
    Paced(Pacer),
}

impl Cooldown {
    /// A host that refused at `now`, asking for `asked`.
    pub(super) fn refused(now: Instant, asked: Duration, pace: Option<Duration>) -> Self {
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
    pub(super) fn ends(&self) -> Instant {
        let probe_over = self.until + self.asked.min(MAX_HOLD);
        match self.phase {
            Phase::Probing(_) => probe_over.max(self.last_refusal + QUIET),
            Phase::Paced(pacer) => pacer.tail().max(self.last_refusal + QUIET),
        }
    }

    /// Holds the host until `asked` from `now`, unless a longer hold is in force; a queue waits
    /// until the hold ends.
    pub(super) fn hold(&mut self, now: Instant, asked: Duration) {
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
    pub(super) fn advance(&mut self, now: Instant) -> bool {
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

impl Cooldown {
    /// A cooldown that `signal`, which starts one, starts at `now`.
    pub(super) fn start(signal: HostSignal, now: Instant) -> Option<Self> {
        match signal {
            HostSignal::Refused { asked, pace } => Some(Self::refused(now, asked, pace)),
            HostSignal::Accepted {
                spent: Some(spent),
                pace,
            } => Some(Self::refused(now, spent, pace)),
            HostSignal::Accepted { spent: None, .. } | HostSignal::Nothing => None,
        }
    }

    /// Records what the host answered at `now` to a request that went with `sent` (the ticket its
    /// admission left, if the host was paced).
    pub(super) fn observe(&mut self, signal: HostSignal, now: Instant, sent: Option<Ticket>) {
        match signal {
            HostSignal::Nothing => {}
            HostSignal::Accepted { spent, .. } => {
                if let Some(asked) = spent.filter(|&asked| asked > LONG_HOLD) {
                    self.hold(now, asked);
                }
                if let Phase::Probing(probe) = &mut self.phase
                    && now >= self.until
                    && let Some(pace) = probe.accepted(now)
                {
                    self.phase = Phase::Paced(probe.pacer(pace, now));
                }
            }
            HostSignal::Refused { asked, pace } => {
                self.last_refusal = now;
                match &mut self.phase {
                    // Refused before the hold ends: a request sent before it began.
                    Phase::Probing(_) if now < self.until => self.hold(now, asked),
                    Phase::Probing(probe) => {
                        probe.refused(now);
                        if let Some(pace) = pace {
                            self.phase = Phase::Paced(Pacer::new(pace, now, now, None));
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
                    self.hold(now, asked);
                }
            }
        }
    }

    /// The hold in force at `now`, if any.
    pub(super) fn pause(&self, now: Instant) -> Option<Pause> {
        (self.until > now).then(|| Pause {
            left: self.until - now,
            asked: self.asked,
        })
    }

    /// Whether requests are held or paced at `now`.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(super) fn holds_or_paces(&self, now: Instant) -> bool {
        self.until > now || matches!(self.phase, Phase::Paced(pacer) if pacer.tail() > now)
    }

    /// What it says of the host at `now`.
    pub(super) fn state(&self, now: Instant) -> HostState {
        match self.phase {
            _ if self.until > now => HostState::Held {
                left: self.until - now,
            },
            Phase::Paced(pacer) => HostState::Paced { pace: pacer.pace },
            Phase::Probing(_) => HostState::Up { failures: 0 },
        }
    }

    /// When a request may go at `now`. `given` is the place in the host's queue the request was
    /// given by an earlier admission, if any (see [`HostStates::admit`](super::HostStates::admit)).
    pub(super) fn admit(
        &mut self,
        now: Instant,
        given: Option<Ticket>,
        ticket: &mut Option<Ticket>,
    ) -> Admission {
        let held = self.until > now;
        match &mut self.phase {
            Phase::Probing(_) if held => Admission::Spread(Pause {
                left: self.until - now,
                asked: self.asked.min(MAX_HOLD),
            }),
            Phase::Probing(_) => Admission::Go,
            Phase::Paced(pacer) => {
                let mut earliest = now.max(self.until);
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
        }
    }
}
