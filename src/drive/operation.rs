//! The corridor of an operation without a request, which `stagger::retry` and
//! `stagger::blocking::retry` both walk: no host, so no pause to wait for before the first attempt
//! (adaptive throttling may still reject it), and nothing to copy for a retry.

use std::future::{Future, poll_fn};
use std::ops::ControlFlow;
use std::panic::Location;
use std::pin::pin;

use crate::attempt::Attempt;
use crate::classify::Outcome;
use crate::drive::call::{AttemptEnd, Call, Start};
use crate::error::Error;

/// Runs `operation` under `call` until `classify` calls its result a success or fatal, or the call's
/// state stops the retries: each attempt under its time limit, the pause after it on the call's timer.
/// `site`, the place in the code the operation is retried from, keys the starting credit its
/// timeouts may spend, as a host's keys a request's.
pub(crate) async fn run<T, E, Op, Fut, C>(
    mut call: Call<T, E>,
    mut operation: Op,
    mut classify: C,
    site: &'static Location<'static>,
) -> Result<T, Error<E>>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: FnMut(&Result<T, E>) -> Outcome,
{
    match call.start(|| None) {
        Start::Now => {}
        // A call ending unsent: its result comes from `begin`.
        Start::AfterPause => {
            poll_fn(|cx| call.poll_pause(cx)).await;
            if let Err(result) = call.begin(None) {
                return result;
            }
        }
    }
    loop {
        {
            let mut attempt = pin!(operation());
            let answered = poll_fn(|cx| call.poll_attempt(attempt.as_mut(), cx, || None)).await;
            let judged = match &answered {
                AttemptEnd::Answered(result) => Attempt::new(classify(result)),
                AttemptEnd::TimedOut | AttemptEnd::Deadline => {
                    call.credit_site(site);
                    Attempt::timed_out(true)
                }
            };
            // A failed result (a half-open connection, say) is dropped here, before the sleep.
            if let ControlFlow::Break(result) = call.decide_judged(judged, answered, None, true) {
                return result;
            }
        }
        poll_fn(|cx| call.poll_pause(cx)).await;
        if let Err(result) = call.begin(None) {
            return result;
        }
    }
}
