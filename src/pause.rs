//! The wait between attempts, shared by every adapter.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Sleep;

/// Waits out a retry's delay on tokio's timer.
///
/// A zero delay needs no timer, only one yield to the runtime, so that an operation that fails at once
/// cannot keep the thread to itself. The `Sleep` is boxed: it lives on the heap of a request that
/// retries rather than in the future of every request.
#[derive(Debug)]
pub(crate) enum Pause {
    /// A zero delay: pending once, ready the next time.
    Yield { yielded: bool },
    /// A delay on the timer.
    Sleep(Pin<Box<Sleep>>),
}

impl Pause {
    pub(crate) fn new(delay: Duration) -> Self {
        if delay.is_zero() {
            Pause::Yield { yielded: false }
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
            Pause::Yield { yielded: true } => Poll::Ready(()),
            Pause::Yield { yielded } => {
                *yielded = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
        }
    }
}
