//! The one timer of a call, shared by every adapter.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::task::coop;
use tokio::time::{Instant, Sleep};

/// A call's timer: in turn the time limit of the attempt in flight, the wait before a retry, and the
/// deadline while the inner service gets ready.
///
/// One `Sleep`, allocated the first time it is needed and reset after that: a request that is answered
/// at its first poll never allocates it, and one that retries allocates it once. It lives on the heap so
/// that the futures of every request stay small.
#[derive(Debug, Default)]
pub(crate) struct Timer {
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Timer {
    /// Sets the timer to fire at `deadline`.
    pub(crate) fn set(&mut self, deadline: Instant) {
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().reset(deadline),
            None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
    }

    /// Ready once the time set has come; pending forever if the timer was never set.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().poll(cx),
            None => Poll::Pending,
        }
    }
}

/// The instant `delay` from now, or, if that cannot be represented, one so far ahead that it never comes
/// (as `tokio::time::sleep` does).
pub(crate) fn after(delay: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(delay)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
}

/// Waits out a zero delay: no timer, one unit of the task's cooperative budget.
///
/// The retry goes on at once while the task has budget, the way tokio's own always-ready resources
/// (channels, sockets) do, and the task yields to the runtime when the budget runs out, so that an
/// operation that fails at once cannot keep the thread to itself. (A yield before every zero-delay
/// retry was measured first: it polls the task twice per attempt, and made the no-delay row of
/// `examples/herd/` a quarter slower.) Outside a tokio runtime there is no budget, and a zero delay
/// does not wait at all.
pub(crate) fn poll_zero_delay(cx: &mut Context<'_>) -> Poll<()> {
    ready!(coop::poll_proceed(cx)).made_progress();
    Poll::Ready(())
}
