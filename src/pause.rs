//! The wait between attempts, shared by every adapter.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::task::coop;
use tokio::time::Sleep;

/// Waits out a retry's delay on tokio's timer.
///
/// A zero delay needs no timer. It spends one unit of the task's cooperative budget, the way tokio's own
/// always-ready resources (channels, sockets) do: the retry goes on at once while the task has budget,
/// and the task yields to the runtime when the budget runs out, so that an operation that fails at once
/// cannot keep the thread to itself. (A yield before every zero-delay retry was measured first: it polls
/// the task twice per attempt, and made the no-delay row of `examples/herd.rs` a quarter slower.) Outside
/// a tokio runtime there is no budget, and a zero delay does not wait at all.
///
/// The `Sleep` is boxed: it lives on the heap of a request that retries rather than in the future of
/// every request.
#[derive(Debug)]
pub(crate) enum Pause {
    /// A zero delay: ready as soon as the task has budget.
    Budget,
    /// A delay on the timer.
    Sleep(Pin<Box<Sleep>>),
}

impl Pause {
    pub(crate) fn new(delay: Duration) -> Self {
        if delay.is_zero() {
            Pause::Budget
        } else {
            Pause::Sleep(Box::pin(tokio::time::sleep(delay)))
        }
    }
}

impl Future for Pause {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut *self {
            Pause::Sleep(sleep) => sleep.as_mut().poll(cx),
            Pause::Budget => {
                ready!(coop::poll_proceed(cx)).made_progress();
                Poll::Ready(())
            }
        }
    }
}
