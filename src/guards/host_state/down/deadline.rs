//! [`Deadline`]: what a request asking to go has left of its deadline, and what that leaves it room
//! for (a probe's answer).

use std::time::Duration;

use crate::time::Instant;

/// What a request asking to go has left of its deadline, as the breaker's admission reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// It has none.
    None,
    /// `left` of `of` is left.
    Left { left: Duration, of: Duration },
}

/// The room a request leaves before its deadline for an answer (or a quarter of its deadline, if
/// that is less). A request with less left does not go as a down host's probe: a probe cut by its
/// caller's deadline says nothing of the host, and the next one waits its delay. (Against a real
/// blackhole, the oldest held calls took the probes with 2 to 7 ms left, and the host was found back
/// up to 2.9 s after its return, not within 1 s.) And a request held for a host that is back goes
/// no later than this before its deadline, whatever its turn.
const ANSWER_ROOM: Duration = Duration::from_millis(100);

impl Deadline {
    /// Whether it has one.
    pub(crate) const fn is_some(self) -> bool {
        matches!(self, Self::Left { .. })
    }

    /// Whether a probe sent now would have time for its answer.
    pub(crate) fn leaves_room_for_a_probe(self) -> bool {
        match self {
            Self::None => true,
            Self::Left { left, of } => left >= room(of),
        }
    }

    /// The latest a request asking at `now` may go and leave room for its answer before its
    /// deadline; `now` if it has less left, and `None` without a deadline.
    pub(crate) fn latest_start(self, now: Instant) -> Option<Instant> {
        match self {
            Self::None => None,
            Self::Left { left, of } => now.checked_add(left.saturating_sub(room(of))),
        }
    }

    /// When a request that left a due probe to others asks again, from `now`: halfway to its
    /// deadline, so that it waits (for the probe another request sends, whose answer wakes it) rather
    /// than fail at once, as a wait to its very deadline would.
    pub(crate) fn halfway(self, now: Instant) -> Option<Instant> {
        match self {
            Self::None => None,
            Self::Left { left, .. } => now.checked_add(left / 2),
        }
    }
}

/// The room a request with a deadline of `of` leaves for an answer: [`ANSWER_ROOM`], or a quarter
/// of its deadline if that is less.
fn room(of: Duration) -> Duration {
    ANSWER_ROOM.min(of / 4)
}

/// In tests: `true` is a deadline far off.
#[cfg(test)]
impl From<bool> for Deadline {
    fn from(deadline: bool) -> Self {
        match deadline {
            true => Self::Left {
                left: Duration::from_secs(3600),
                of: Duration::from_secs(3600),
            },
            false => Self::None,
        }
    }
}
