//! How long a request waits for its host, given its admission.

use super::*;

/// What a wait outlasts when a request does not wait for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outlasts {
    /// The policy's `max_retry_after`.
    MaxRetryAfter,
    /// The time left before the deadline.
    Deadline,
    /// Nothing: the host is down, and the request fails fast.
    HostDown,
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
        // A request held for a down host waits until it is woken, or its deadline: the hold's own
        // bound is the breaker's, not `max_retry_after`.
        Admission::HeldDown(left) => {
            return match remaining {
                Some(remaining) if remaining.is_zero() => Err(Outlasts::Deadline),
                Some(remaining) => Ok(left.min(remaining)),
                None => Ok(left),
            };
        }
        Admission::Down(_) => return Err(Outlasts::HostDown),
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
