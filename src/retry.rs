//! Retrying any async operation under a policy: reconnect loops, a query until it succeeds (a task that
//! should keep running is [`supervise`](crate::supervise())'s).

use std::future::Future;
use std::panic::Location;

use crate::classify::Outcome;
use crate::drive::call::Call;
use crate::drive::operation::run;
use crate::engine::live::PolicySource;
#[cfg(doc)]
use crate::engine::policy::RetryPolicy;
use crate::error::Error;

/// Runs `operation` until `classify` calls its result a success or fatal, or the policy stops the
/// retries, sleeping between attempts on the timer of what runs it (tokio's inside a tokio
/// runtime; see [`RetryPolicyBuilder::timer`](crate::RetryPolicyBuilder::timer) for the others).
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
    let site = Location::caller();
    async move { run(Call::new(policy.start_call()), operation, classify, site).await }
}
