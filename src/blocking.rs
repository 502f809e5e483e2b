//! Retrying a blocking operation: [`retry`] runs it on the calling thread and sleeps the thread
//! between attempts (not in the browser, whose main thread cannot sleep).

use std::future::{Future, ready};
use std::panic::Location;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

use crate::classify::Outcome;
use crate::drive::call::Call;
use crate::drive::operation::run;
use crate::engine::policy::RetryPolicy;
use crate::error::Error;

/// Runs the blocking `operation` until `classify` calls its result a success or fatal, or the policy
/// stops the retries, sleeping the calling thread between attempts: [`stagger::retry`](crate::retry())
/// for code that is not async (reqwest's blocking client, ureq, a file or a database driver of its
/// own, a CLI's `main`), with no runtime and no tokio.
///
/// The decisions are the same state machine's as every other adapter's, so the outcomes are too:
/// the last attempt's value, or its error inside an [`Error`] with the call's
/// [`RetryInfo`](crate::RetryInfo) (attempts, time slept, why the retries stopped); the backoff,
/// `max_retries`, the retry budget and its hook, adaptive throttling and `backoff_on_refusal` as the
/// policy says. The deadline (`max_elapsed`) runs from the call's start and is checked after each
/// attempt and before each retry: a retry that would end past it is not made, and one due after it
/// is not sent. A blocking attempt cannot be cut short, so `attempt_timeout` does not apply (give
/// the operation its own, as reqwest's and ureq's clients take one), and an attempt that returns
/// after the deadline has its result judged as it came. A policy's own
/// [`timer`](crate::RetryPolicyBuilder::timer) is not used: the thread sleeps. Every outcome is
/// treated as idempotent: `classify` decides what may run again.
///
/// ```
/// use std::io;
/// use std::net::{TcpListener, TcpStream};
/// use std::time::Duration;
/// use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
///
/// let policy = RetryPolicy::builder()
///     .backoff(Backoff::fixed(Duration::from_millis(10)))
///     .max_retries(3)
///     .build()
///     .unwrap();
/// # let closed = TcpListener::bind("127.0.0.1:0").unwrap();
/// # let address = closed.local_addr().unwrap();
/// # drop(closed);
/// // Nothing listens there: refused four times, 30 ms asleep in all.
/// let error = stagger::blocking::retry(
///     &policy,
///     || TcpStream::connect(address),
///     |result| match result {
///         Ok(_) => Outcome::Success,
///         Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Outcome::RetrySafe(Reason::Connect),
///         Err(_) => Outcome::Fatal,
///     },
/// )
/// .unwrap_err();
/// let info = error.info();
/// assert_eq!((info.attempts(), info.stop_reason()), (4, Some(StopReason::MaxRetries)));
/// assert_eq!(info.slept(), Duration::from_millis(30));
/// ```
#[track_caller]
pub fn retry<T, E, Op, C>(
    policy: &RetryPolicy,
    mut operation: Op,
    classify: C,
) -> Result<T, Error<E>>
where
    Op: FnMut() -> Result<T, E>,
    C: FnMut(&Result<T, E>) -> Outcome,
{
    // The clock starts now: an attempt that blocks never says it is waiting, which is what starts it
    // for the async adapters.
    let call = Call::blocking(policy.start());
    let site = Location::caller();
    block_on(run(call, || ready(operation()), classify, site))
}

/// Wakes the thread that waits for the call.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this thread until it is done. Its attempts are ready at their first poll and
/// its pauses sleep the thread, so it never waits here; should it, the thread parks until woken.
///
/// Called inside a tokio task (blocking code in an async test, say), the future runs outside the
/// task's cooperative budget: a zero delay and a call ended unsent spend a unit of it to let the
/// task's neighbours run, which a blocked thread cannot, and the wake tokio defers until the task
/// yields would never come.
fn block_on<F: Future>(future: F) -> F::Output {
    #[cfg(feature = "tokio")]
    let future = tokio::task::coop::unconstrained(future);
    let mut future = pin!(future);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}
