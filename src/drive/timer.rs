//! The one timer of a call, shared by every adapter.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

#[cfg(all(
    feature = "tokio",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
use tokio::task::coop;

pub(crate) use crate::time::after;
use crate::time::{Instant, Sleeping};

/// A call's timer: in turn the time limit of the attempt in flight, the wait before a retry, and the
/// deadline while the inner service gets ready.
///
/// One sleep, allocated the first time it is needed and reset after that: a request that is answered
/// at its first poll never allocates it, and one that retries allocates it once. It lives on the heap so
/// that the futures of every request stay small. Its timer is chosen when it is first set (see
/// [`Sleeping::until`]) and kept.
#[derive(Debug, Default)]
pub(crate) struct Timer {
    sleep: Option<Pin<Box<Sleeping>>>,
}

impl Timer {
    /// A timer that sleeps the calling thread when polled, for a call whose attempts block
    /// (`stagger::blocking`).
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    pub(crate) fn blocking() -> Self {
        Self {
            sleep: Some(Box::pin(Sleeping::blocking(Instant::now()))),
        }
    }

    /// Sets the timer to fire at `deadline`; the first time, on `timer` (a policy's own), or else on
    /// the timer of what runs the call.
    pub(crate) fn set(&mut self, deadline: Instant, timer: Option<&Arc<dyn crate::time::Timer>>) {
        match &mut self.sleep {
            Some(sleep) => sleep.as_mut().reset(deadline),
            None => self.sleep = Some(Box::pin(Sleeping::until(deadline, timer))),
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

/// Waits out a zero delay: no timer, one unit of the task's cooperative budget.
///
/// The retry goes on at once while the task has budget, the way tokio's own always-ready resources
/// (channels, sockets) do, and the task yields to the runtime when the budget runs out, so that an
/// operation that fails at once cannot keep the thread to itself. (A yield before every zero-delay
/// retry was measured first: it polls the task twice per attempt, and made the no-delay row of
/// `examples/herd/` a quarter slower.) Outside a tokio runtime there is no budget, and a zero delay
/// does not wait at all; nor does it without the feature `tokio` (`max_retries`, the deadline and the
/// budget bound such a loop).
pub(crate) fn poll_zero_delay(cx: &mut Context<'_>) -> Poll<()> {
    #[cfg(all(
        feature = "tokio",
        not(all(target_arch = "wasm32", target_os = "unknown"))
    ))]
    std::task::ready!(coop::poll_proceed(cx)).made_progress();
    #[cfg(not(all(
        feature = "tokio",
        not(all(target_arch = "wasm32", target_os = "unknown"))
    )))]
    let _ = cx;
    Poll::Ready(())
}
