//! Timers: [`Timer`], for a call to sleep on a runtime's timer of one's own.
//!
//! Without one, a call sleeps on the timer of what runs it: tokio's inside a tokio runtime (feature
//! `tokio`), else async-io's (feature `async-io`), else one thread of stagger's own; the browser's
//! `setTimeout` in the browser (the repository's `docs/runtimes.md`).

// Inside the crate, everything above reads the time here: `Instant` is tokio's with the feature `tokio`
// (a paused runtime's tests move it), std's without it, and the browser's clock (`performance.now()`)
// on wasm32-unknown-unknown, where std's panics; `system_now` is the wall clock an HTTP date is read
// against. Nothing here decides to sleep: `drive/`, `supervise.rs` and `chaos/` do, through `Sleeping`.

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
mod browser;
#[cfg(all(
    not(feature = "async-io"),
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
mod thread;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
pub(crate) use browser::{Instant, system_now};
#[cfg(all(
    not(feature = "tokio"),
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub(crate) use std::time::Instant;
#[cfg(all(
    feature = "tokio",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub(crate) use tokio::time::Instant;

/// A timer of one's own: how a call of a [`RetryPolicy`](crate::RetryPolicy) given it with
/// [`RetryPolicyBuilder::timer`](crate::RetryPolicyBuilder::timer) (or a
/// [`RestartPolicy`](crate::RestartPolicy), with
/// [`RestartPolicyBuilder::timer`](crate::RestartPolicyBuilder::timer)) sleeps: the pause before a
/// retry, and the time limits of an attempt (`attempt_timeout`, the deadline).
///
/// Without one, a call sleeps on the timer of what runs it: tokio's inside a tokio runtime (feature
/// `tokio`, on by default), else async-io's (feature `async-io`), else, on a native target, on one
/// thread of stagger's own that it starts when first needed; in the browser (wasm32-unknown-unknown),
/// on the browser's (`setTimeout`). A runtime of another kind (embassy, glommio, a game loop's)
/// brings its own:
///
/// ```
/// use std::time::Duration;
/// use stagger::time::{Sleep, Timer};
/// use stagger::{Outcome, Reason, RetryPolicy};
///
/// /// Sleeps on tokio's timer, as the runtime of one's own would on its own.
/// #[derive(Debug)]
/// struct MyTimer;
///
/// impl Timer for MyTimer {
///     fn sleep(&self, duration: Duration) -> Sleep {
///         Box::pin(tokio::time::sleep(duration))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let policy = RetryPolicy::builder().timer(MyTimer).max_retries(2).build().unwrap();
/// let error = stagger::retry(
///     &policy,
///     || async { Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)) },
///     |_| Outcome::RetrySafe(Reason::Connect),
/// )
/// .await
/// .unwrap_err();
/// assert_eq!(error.info().attempts(), 3);
/// # }
/// ```
///
/// The engine reads its clock, not the timer's: a timer of one's own should keep real time (or tokio's
/// paused time, inside a paused tokio runtime).
pub trait Timer: fmt::Debug + Send + Sync + 'static {
    /// A future that completes once `duration` has passed. A call drops it when it no longer needs
    /// it, and asks for a new one when its wait changes.
    fn sleep(&self, duration: Duration) -> Sleep;
}

/// What a [`Timer`] returns: a future that completes when its time has come.
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// What a [`Timer`] returns: a future that completes when its time has come (in the browser, where
/// nothing is sent to another thread, it need not be `Send`).
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
pub type Sleep = Pin<Box<dyn Future<Output = ()> + 'static>>;

/// The wall clock, for reading an HTTP date (`Retry-After: Wed, 21 Oct 2015 07:28:00 GMT`): std's, and
/// in the browser the browser's (`Date.now()`), where std's panics.
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub(crate) fn system_now() -> std::time::SystemTime {
    std::time::SystemTime::now()
}

/// The instant `delay` from now, or, if that cannot be represented, one so far ahead that it never comes
/// (as `tokio::time::sleep` does).
pub(crate) fn after(delay: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(delay)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
}

/// Where a kind of timer this build does not have would be: a type with no value.
#[derive(Debug)]
pub(crate) enum Unavailable {}

impl Future for Unavailable {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
        match *self {}
    }
}

#[cfg(all(
    feature = "tokio",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
type TokioSleep = tokio::time::Sleep;
#[cfg(not(all(
    feature = "tokio",
    not(all(target_arch = "wasm32", target_os = "unknown"))
)))]
type TokioSleep = Unavailable;

#[cfg(all(
    feature = "async-io",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
type AsyncIoTimer = async_io::Timer;
#[cfg(not(all(
    feature = "async-io",
    not(all(target_arch = "wasm32", target_os = "unknown"))
)))]
type AsyncIoTimer = Unavailable;

#[cfg(all(
    not(feature = "async-io"),
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
type ThreadSleep = thread::Sleep;
#[cfg(any(
    feature = "async-io",
    all(target_arch = "wasm32", target_os = "unknown")
))]
type ThreadSleep = Unavailable;

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
type BrowserSleep = browser::Sleep;
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
type BrowserSleep = Unavailable;

pin_project! {
    /// A sleep in progress, on the timer chosen when it began: it keeps that timer when it is reset.
    ///
    /// Every kind is a variant, the kinds this build lacks of a type with no value, so that the one
    /// that is not `Unpin` (tokio's) is polled in place: a call's timer is one allocation, as it was
    /// when it could only be tokio's.
    #[project = SleepingProj]
    // The kinds this build lacks are never made.
    #[allow(dead_code)]
    pub(crate) enum Sleeping {
        /// tokio's timer, inside a tokio runtime.
        Tokio { #[pin] sleep: TokioSleep },
        /// async-io's timer.
        AsyncIo { timer: AsyncIoTimer },
        /// stagger's own timer thread.
        Thread { sleep: ThreadSleep },
        /// The browser's `setTimeout`.
        Browser { sleep: BrowserSleep },
        /// The calling thread sleeps when polled (`stagger::blocking`).
        Blocking { until: Instant },
        /// A timer of one's own, asked for a new sleep when the time changes.
        Custom { timer: Arc<dyn Timer>, sleep: Sleep, until: Instant },
    }
}

impl fmt::Debug for Sleeping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Tokio { .. } => "Sleeping::Tokio",
            Self::AsyncIo { .. } => "Sleeping::AsyncIo",
            Self::Thread { .. } => "Sleeping::Thread",
            Self::Browser { .. } => "Sleeping::Browser",
            Self::Blocking { .. } => "Sleeping::Blocking",
            Self::Custom { .. } => "Sleeping::Custom",
        })
    }
}

impl Sleeping {
    /// A sleep until `deadline` on `timer`, or, without one, on the timer of what runs the call: tokio's
    /// inside a tokio runtime, else async-io's, else stagger's own thread (the browser's in the browser).
    pub(crate) fn until(deadline: Instant, timer: Option<&Arc<dyn Timer>>) -> Self {
        match timer {
            Some(timer) => Self::Custom {
                sleep: timer.sleep(deadline.saturating_duration_since(Instant::now())),
                timer: Arc::clone(timer),
                until: deadline,
            },
            None => Self::on_runtime(deadline),
        }
    }

    /// In the browser, on its timer.
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    fn on_runtime(deadline: Instant) -> Self {
        Self::Browser {
            sleep: browser::Sleep::until(deadline),
        }
    }

    /// Inside a tokio runtime (feature `tokio`), on its timer; outside one, on the timer there is.
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    fn on_runtime(deadline: Instant) -> Self {
        #[cfg(feature = "tokio")]
        if tokio::runtime::Handle::try_current().is_ok() {
            return Self::Tokio {
                sleep: tokio::time::sleep_until(deadline),
            };
        }
        Self::off_runtime(deadline)
    }

    /// Outside a tokio runtime, on async-io's timer.
    #[cfg(all(
        feature = "async-io",
        not(all(target_arch = "wasm32", target_os = "unknown"))
    ))]
    fn off_runtime(deadline: Instant) -> Self {
        Self::AsyncIo {
            timer: async_io::Timer::at(std_instant(deadline)),
        }
    }

    /// Outside a tokio runtime, without async-io: on stagger's own timer thread.
    #[cfg(all(
        not(feature = "async-io"),
        not(all(target_arch = "wasm32", target_os = "unknown"))
    ))]
    fn off_runtime(deadline: Instant) -> Self {
        Self::Thread {
            sleep: thread::Sleep::until(std_instant(deadline)),
        }
    }

    /// A sleep that sleeps the calling thread when it is polled, until `deadline`.
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    pub(crate) const fn blocking(deadline: Instant) -> Self {
        Self::Blocking { until: deadline }
    }

    /// The same sleep, on the same timer, now until `deadline`.
    pub(crate) fn reset(self: Pin<&mut Self>, deadline: Instant) {
        match self.project() {
            SleepingProj::Tokio { sleep } => reset_tokio(sleep, deadline),
            SleepingProj::AsyncIo { timer } => reset_async_io(timer, deadline),
            SleepingProj::Thread { sleep } => reset_thread(sleep, deadline),
            SleepingProj::Browser { sleep } => reset_browser(sleep, deadline),
            SleepingProj::Blocking { until } => *until = deadline,
            SleepingProj::Custom {
                timer,
                sleep,
                until,
            } => {
                *sleep = timer.sleep(deadline.saturating_duration_since(Instant::now()));
                *until = deadline;
            }
        }
    }
}

impl Future for Sleeping {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.project() {
            SleepingProj::Tokio { sleep } => sleep.poll(cx),
            SleepingProj::AsyncIo { timer } => poll_async_io(timer, cx),
            SleepingProj::Thread { sleep } => Pin::new(sleep).poll(cx),
            SleepingProj::Browser { sleep } => Pin::new(sleep).poll(cx),
            SleepingProj::Blocking { until } => {
                sleep_thread(*until);
                Poll::Ready(())
            }
            SleepingProj::Custom { sleep, .. } => sleep.as_mut().poll(cx),
        }
    }
}

#[cfg(all(
    feature = "tokio",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
fn reset_tokio(sleep: Pin<&mut TokioSleep>, deadline: Instant) {
    sleep.reset(deadline);
}

#[cfg(not(all(
    feature = "tokio",
    not(all(target_arch = "wasm32", target_os = "unknown"))
)))]
fn reset_tokio(sleep: Pin<&mut TokioSleep>, _: Instant) {
    match *sleep {}
}

#[cfg(all(
    feature = "async-io",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
fn reset_async_io(timer: &mut AsyncIoTimer, deadline: Instant) {
    timer.set_at(std_instant(deadline));
}

#[cfg(not(all(
    feature = "async-io",
    not(all(target_arch = "wasm32", target_os = "unknown"))
)))]
fn reset_async_io(timer: &mut AsyncIoTimer, _: Instant) {
    match *timer {}
}

#[cfg(all(
    feature = "async-io",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
fn poll_async_io(timer: &mut AsyncIoTimer, cx: &mut Context<'_>) -> Poll<()> {
    Pin::new(timer).poll(cx).map(drop)
}

#[cfg(not(all(
    feature = "async-io",
    not(all(target_arch = "wasm32", target_os = "unknown"))
)))]
fn poll_async_io(timer: &mut AsyncIoTimer, _: &mut Context<'_>) -> Poll<()> {
    match *timer {}
}

#[cfg(all(
    not(feature = "async-io"),
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
fn reset_thread(sleep: &mut ThreadSleep, deadline: Instant) {
    sleep.reset(std_instant(deadline));
}

#[cfg(any(
    feature = "async-io",
    all(target_arch = "wasm32", target_os = "unknown")
))]
fn reset_thread(sleep: &mut ThreadSleep, _: Instant) {
    match *sleep {}
}

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
fn reset_browser(sleep: &mut BrowserSleep, deadline: Instant) {
    sleep.reset(deadline);
}

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
fn reset_browser(sleep: &mut BrowserSleep, _: Instant) {
    match *sleep {}
}

/// Sleeps the calling thread until `deadline` (a blocking call's pause).
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
fn sleep_thread(deadline: Instant) {
    let left = deadline.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        std::thread::sleep(left);
    }
}

/// Never called: a blocking sleep is made on native targets only (`stagger::blocking`).
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
fn sleep_thread(_: Instant) {}

/// `deadline` as std's, which async-io's timer and stagger's thread read.
#[cfg(all(
    feature = "tokio",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
fn std_instant(deadline: Instant) -> std::time::Instant {
    deadline.into_std()
}

/// `deadline` as std's, which it is.
#[cfg(all(
    not(feature = "tokio"),
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
const fn std_instant(deadline: Instant) -> std::time::Instant {
    deadline
}
