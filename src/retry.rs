//! Retrying any async operation under a policy: reconnect loops, a query until it succeeds (a task that
//! should keep running is [`supervise`](crate::supervise())'s).

use std::future::{Future, poll_fn};
use std::ops::ControlFlow;
use std::panic::Location;
use std::pin::pin;

use crate::attempt::Attempt;
use crate::classify::Outcome;
use crate::drive::call::{AttemptEnd, Call, Start};
use crate::engine::live::PolicySource;
#[cfg(doc)]
use crate::engine::policy::RetryPolicy;
use crate::error::Error;

/// Runs `operation` until `classify` calls its result a success or fatal, or the policy stops the
/// retries, sleeping on tokio's timer between attempts.
///
/// Returns the last attempt's value (`Ok`, whatever `classify` said of it) or its error inside an
/// [`Error`] that also tells the attempts made, the time slept and why the retries stopped. The
/// policy's backoff, `max_retries`, budget and hook apply as they do to HTTP requests, and so do its time
/// limits: an attempt that runs past `attempt_timeout` is dropped (cancelled) and retried, and when the
/// deadline (`max_elapsed`) passes the attempt in flight is dropped and the call ends with the last
/// `Ok` value received, or an error whose [`is_deadline`](Error::is_deadline) is true. The HTTP
/// classifier does not apply. `policy` is a [`RetryPolicy`], or a [`LivePolicy`](crate::LivePolicy),
/// whose current policy the call runs under. Every outcome is treated as idempotent: `classify` decides what may run
/// again (return [`Outcome::Fatal`] for what may not).
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, Outcome, Reason, RetryPolicy};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// # let addr = listener.local_addr()?;
/// let policy = RetryPolicy::builder()
///     .backoff(Backoff::exponential(Duration::from_millis(10)))
///     .max_retries(10)
///     .build()
///     .unwrap();
/// let stream = stagger::retry(
///     &policy,
///     || tokio::net::TcpStream::connect(addr),
///     |result| match result {
///         Ok(_) => Outcome::Success,
///         Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
///             Outcome::RetrySafe(Reason::Connect)
///         }
///         Err(_) => Outcome::Fatal,
///     },
/// )
/// .await
/// .map_err(|error| error.into_inner().unwrap_or_else(|| std::io::ErrorKind::TimedOut.into()))?;
/// # drop(stream);
/// # Ok(())
/// # }
/// ```
#[track_caller]
pub fn retry<T, E, Op, Fut, C, P>(
    policy: &P,
    operation: Op,
    classify: C,
) -> impl Future<Output = Result<T, Error<E>>>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: FnMut(&Result<T, E>) -> Outcome,
    P: PolicySource,
{
    // The place in the code it is called from keys the starting credit its timeouts may spend, as a
    // host's keys a request's: operations built each with a policy of its own, at one place, share
    // one credit, not one each.
    run(policy, operation, classify, Location::caller())
}

async fn run<T, E, Op, Fut, C, P>(
    policy: &P,
    mut operation: Op,
    mut classify: C,
    site: &'static Location<'static>,
) -> Result<T, Error<E>>
where
    Op: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    C: FnMut(&Result<T, E>) -> Outcome,
    P: PolicySource,
{
    // The corridor of `drive`, without a request: no host, so no pause to wait for before the first
    // attempt (adaptive throttling may still reject it), and nothing to copy for a retry.
    let mut call = Call::new(policy.start_call());
    match call.start(|| None) {
        Start::Now => {}
        Start::End(result) => return result,
        // A refusal waited out (`backoff_on_refusal`): its result comes from `begin`.
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
