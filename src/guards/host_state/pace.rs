//! The pace of a host that refused: measured from its answers while probing, then held and searched
//! for while requests are released one pace apart (see the parent module for the three phases).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::time::Instant;

use super::cooldown::MIN_ROUND;
use super::{Stage, Ticket};

/// The search for a faster pace stops once the pace is within this factor of the slowest refused:
/// each step below the host's rate costs a refusal, and a request's turn.
const BISECT_UNTIL: f64 = 1.03;

/// Gaps between accepted requests measured while probing before the pace is set.
const PROBE_GAPS: u32 = 2;

#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Probe {
    /// The host has refused since the hold ended: from here on, accepts are spaced by its rate.
    pub(super) refused: bool,
    pub(super) last_accept: Option<Instant>,
    pub(super) gaps: u32,
    /// The smallest gap between two accepts: the host admits a request that far after another.
    pub(super) smallest_gap: Option<Duration>,
    /// The largest gap between an accept and a refusal after it: the host does not admit a request
    /// that close after another.
    pub(super) largest_refused: Option<Duration>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Pacer {
    /// Which pacer a [`Ticket`] was taken from: a ticket of an earlier one means nothing here.
    pub(super) id: u64,
    pub(super) pace: Duration,
    /// Counts the changes of pace, so that an answer judges only the pace its request went at: with a
    /// round trip longer than the pace, refusals of the old pace come in after a change.
    pub(super) generation: u32,
    /// Position `anchor.1` goes at `anchor.0`, and each later one a pace after the one before, so
    /// that a change of pace moves every request still waiting.
    pub(super) anchor: (Instant, u64),
    /// The next position to give out.
    pub(super) next: u64,
    /// When the last request went, as the pace reckons it: the next goes a pace later at the
    /// earliest, whatever the positions say (a waiter asleep since before a change of pace goes at
    /// its old time). At a pace under 20 ms, a request that goes up to a timer tick late, as timers
    /// do, moves it by one pace, not to the time it went, so that the rate is the pace's, not a tick
    /// slower.
    pub(super) last_release: Option<Instant>,
    /// The slowest pace known to be refused too often, or, before any was, where the search for a
    /// faster pace stops for now.
    pub(super) refused_at: Option<Duration>,
    /// Whether `refused_at` was refused, or is a guess that a good round moves further down.
    pub(super) refusal_seen: bool,
    /// The fastest pace rounds with requests queued went through refused no more than tolerated.
    pub(super) good: Option<Duration>,
    pub(super) round: Round,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Round {
    pub(super) start: Instant,
    /// Requests let go in this round.
    pub(super) in_round: u32,
    /// Requests let go since the pace was set.
    pub(super) released: u32,
    /// Refusals since the pace was set, of requests let go at it.
    pub(super) refused: u32,
}

impl Round {
    pub(super) fn new(start: Instant) -> Self {
        Self {
            start,
            in_round: 0,
            released: 0,
            refused: 0,
        }
    }

    /// The refusals a round at a good pace may see: one in twenty of what it let go. A pace that
    /// gets nothing refused at all is, against a limiter whose interval is close to the network's
    /// jitter (two requests sent an interval apart arrive closer), far slower than the limiter.
    pub(super) fn tolerated(&self) -> u32 {
        self.released / 20
    }

    /// Refused so often that the pace is too fast: more than tolerated, and more than one (a round of
    /// a few requests may lose one to the network's jitter).
    pub(super) fn too_fast(&self) -> bool {
        self.refused > self.tolerated().max(1)
    }
}

impl Probe {
    /// A refusal at `now`: the first starts the measure; a later one bounds the interval from below.
    pub(super) fn refused(&mut self, now: Instant) {
        if !self.refused {
            // The accepts before the first refusal may be a burst.
            self.refused = true;
            self.last_accept = None;
        } else if let Some(last) = self.last_accept {
            let gap = now.saturating_duration_since(last);
            self.largest_refused = Some(self.largest_refused.map_or(gap, |g| g.max(gap)));
        }
    }

    /// The pacer this probe's measure makes, at `now`: `pace` apart from the last accept on.
    pub(super) fn pacer(&self, pace: Duration, now: Instant) -> Pacer {
        let first = self.last_accept.map_or(now, |last| (last + pace).max(now));
        // The gap measured is the host's interval plus the wait for the next request after it: the
        // search starts 5 % below, and goes further down while it meets no refusal.
        let refused_at = Some(pace.mul_f64(0.95));
        Pacer::new(pace, now, first, refused_at)
    }

    /// An accept at `now`: after a refusal, its gap to the previous accept is the host's interval.
    /// The pace, once two gaps are in.
    pub(super) fn accepted(&mut self, now: Instant) -> Option<Duration> {
        if !self.refused {
            return None;
        }
        if let Some(last) = self.last_accept {
            let gap = now.saturating_duration_since(last);
            self.smallest_gap = Some(self.smallest_gap.map_or(gap, |g| g.min(gap)));
            self.gaps += 1;
        }
        self.last_accept = Some(now);
        self.smallest_gap.filter(|_| self.gaps >= PROBE_GAPS)
    }
}

impl Pacer {
    /// A pace set at `now`, whose first slot is `first`.
    pub(super) fn new(
        pace: Duration,
        now: Instant,
        first: Instant,
        refused_at: Option<Duration>,
    ) -> Self {
        static PACERS: AtomicU64 = AtomicU64::new(0);
        Self {
            id: PACERS.fetch_add(1, Ordering::Relaxed),
            pace: pace.max(Duration::from_micros(1)),
            generation: 0,
            anchor: (first, 0),
            next: 0,
            last_release: None,
            refused_at,
            refusal_seen: false,
            good: None,
            round: Round::new(now),
        }
    }

    /// A refusal, at `now`, of a request `sent` at this pace (an answer to one sent at another is not
    /// this pace's). Refusals are judged when the round ends; so many that a round at this pace
    /// cannot be good send the pace back at once.
    pub(super) fn refused(&mut self, now: Instant, sent: Option<Ticket>) {
        if !self.sent_at_this_pace(sent) {
            return;
        }
        self.round.refused += 1;
        let round = &self.round;
        // A step of the search below a good pace pays one refusal to learn it is too fast, not two.
        let trying = self.good.is_some_and(|good| self.pace < good);
        if trying || round.too_fast() && round.refused * 4 > round.released {
            self.too_fast(now);
        }
    }

    /// Whether `sent` went at the present pace.
    pub(super) fn sent_at_this_pace(&self, sent: Option<Ticket>) -> bool {
        sent.is_some_and(|ticket| {
            ticket.pacer == self.id
                && matches!(ticket.stage, Stage::Sent { generation, .. } if generation == self.generation)
        })
    }

    /// Back to the fastest pace known good, or 5 % slower without one.
    pub(super) fn too_fast(&mut self, now: Instant) {
        let refused = match self.refused_at {
            Some(earlier) if self.refusal_seen => earlier.max(self.pace),
            _ => self.pace,
        };
        self.refused_at = Some(refused);
        self.refusal_seen = true;
        let back = match self.good {
            Some(good) if good > refused => good,
            _ => self.pace.mul_f64(1.05),
        };
        self.respace(back, now, now);
    }

    pub(super) fn round_length(&self) -> Duration {
        (self.pace * 4).max(MIN_ROUND)
    }

    /// When `position` goes.
    pub(super) fn time_of(&self, position: u64) -> Instant {
        let ahead = u32::try_from(position.saturating_sub(self.anchor.1)).unwrap_or(u32::MAX);
        self.anchor.0 + self.pace.saturating_mul(ahead)
    }

    /// When the next request to join the queue would go.
    pub(super) fn tail(&self) -> Instant {
        self.time_of(self.next)
    }

    /// The next position and its time, not before `earliest`.
    pub(super) fn take(&mut self, earliest: Instant) -> (u64, Instant) {
        let position = self.next;
        let mut at = self.time_of(position);
        if at < earliest {
            // The queue ran dry: it starts again from here.
            self.anchor = (earliest, position);
            at = earliest;
        }
        self.next += 1;
        (position, at)
    }

    /// Sets the pace to `pace` at `now`, spacing by it the positions not yet due, none of them
    /// before `earliest` (those already due keep their time), and starts a round of it.
    pub(super) fn respace(&mut self, pace: Duration, now: Instant, earliest: Instant) {
        let pace = pace.max(Duration::from_micros(1));
        let due = now.saturating_duration_since(self.anchor.0).as_nanos();
        let steps = due.div_ceil(self.pace.as_nanos().max(1));
        let first = (self.anchor.1)
            .saturating_add(u64::try_from(steps).unwrap_or(u64::MAX))
            .min(self.next);
        // The first one waiting goes a new pace after the last one due, not an old one.
        let at = match first.checked_sub(1).filter(|&last| last >= self.anchor.1) {
            Some(last) => self.time_of(last) + pace,
            None => self.time_of(first),
        };
        self.anchor = (at.max(earliest), first);
        if pace != self.pace {
            self.pace = pace;
            self.generation = self.generation.wrapping_add(1);
            self.round = Round::new(now);
        }
    }

    /// Ends the round if it has lasted its length. Refused more than it tolerates since the pace was
    /// set: too fast. Within the tolerance, and with at least three quarters of the requests the pace
    /// lets go in a round
    /// (the queue kept it busy, and the waiters asleep since before the change looked again: see
    /// `admit`), the pace is good, and when it is more than 2 % above the slowest pace known too fast,
    /// the next is halfway between: a search that costs a few refusals for each step below the host's
    /// rate. A pace with nothing known too fast below it (a stated rate) stays.
    pub(super) fn judge_round(&mut self, now: Instant) {
        if now < self.round.start + self.round_length() {
            return;
        }
        if self.round.too_fast() {
            self.too_fast(now);
            return;
        }
        let full = self.round_length().as_nanos() / self.pace.as_nanos().max(1);
        let in_round = std::mem::take(&mut self.round.in_round);
        let busy = u128::from(in_round) * 4 >= full * 3;
        let good = busy && self.round.refused <= self.round.tolerated();
        self.round.start = now;
        if good {
            self.good = Some(self.good.map_or(self.pace, |good| good.min(self.pace)));
            if let Some(refused) = self.refused_at {
                if self.pace > refused.mul_f64(BISECT_UNTIL) {
                    self.respace((self.pace + refused) / 2, now, now);
                } else if !self.refusal_seen {
                    // The guess was too cautious: 5 % further down.
                    let guess = self.pace.mul_f64(0.95);
                    self.refused_at = Some(guess);
                    self.respace((self.pace + guess) / 2, now, now);
                }
            }
        }
    }
}
