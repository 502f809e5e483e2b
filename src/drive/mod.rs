//! One call's async loop as every adapter drives it, and the only timers: each attempt under its
//! time limit, the pause before a retry, the held copy of the request and the hedged race.
//!
//! # The corridor
//!
//! Every adapter walks a call through the same steps, each one call on [`Call`](call::Call):
//!
//! 1. **start**, before the first attempt: `Call::start` says whether it goes now, after its host's
//!    pause, or not at all (the pause outlasts the limits, adaptive throttling rejects it, the
//!    caller's deadline has passed).
//! 2. **attempt**: the adapter sends it, and `Call::poll_attempt` (or `Hedge::poll`, racing a hedge)
//!    waits for it under its time limit: an [`AttemptEnd`](call::AttemptEnd).
//! 3. **decide**: `Call::decide` judges how the attempt ended (the adapter's `Judge`, over what
//!    [`Held`](held::Held) holds of the request) and asks the state machine, `RetryState::decide`:
//!    retry after a pause, or end the call with its result.
//! 4. **pause**, and 5. **resume**: `Call::poll_resume` waits out the pause, and any pause the host
//!    asked for meanwhile; the tower adapter then waits for its inner service's readiness, under the
//!    deadline.
//! 6. **begin**: `Call::begin_retry` checks the deadline again, commits the retry's budget, and makes
//!    the retry's request from what is held: the one place it is made. Back to step 2.
//!
//! `stagger::retry` and `stagger::blocking::retry`, which have no request, walk the same steps with
//! `Call::decide_judged` and `Call::begin` (`operation.rs`); the blocking one on a timer that sleeps
//! the thread.

pub(crate) mod call;
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
pub(crate) mod hedge;
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
pub(crate) mod held;
mod kept;
pub(crate) mod operation;
pub(crate) mod timer;
