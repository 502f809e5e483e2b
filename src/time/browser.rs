//! The browser's clock and timer (wasm32-unknown-unknown), where std's `Instant::now()` and
//! `SystemTime::now()` panic: `performance.now()`, `Date.now()` and `setTimeout`, found on the global
//! object, so that a page and a worker alike have them.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::ops::{Add, AddAssign, Sub, SubAssign};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use js_sys::{Function, Reflect};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

/// What the global object offers, looked up once.
struct Global {
    this: JsValue,
    /// `performance` and its `now`: a monotonic clock in milliseconds. `Date.now()` where it lacks.
    performance: Option<(JsValue, Function)>,
    set_timeout: Option<Function>,
    clear_timeout: Option<Function>,
}

thread_local! {
    static GLOBAL: Global = Global::find();
}

impl Global {
    fn find() -> Self {
        let this: JsValue = js_sys::global().into();
        let function = |on: &JsValue, name: &str| {
            Reflect::get(on, &JsValue::from_str(name))
                .ok()?
                .dyn_into::<Function>()
                .ok()
        };
        let performance = Reflect::get(&this, &JsValue::from_str("performance"))
            .ok()
            .filter(|performance| performance.is_object())
            .and_then(|performance| {
                let now = function(&performance, "now")?;
                Some((performance, now))
            });
        Self {
            set_timeout: function(&this, "setTimeout"),
            clear_timeout: function(&this, "clearTimeout"),
            performance,
            this,
        }
    }

    /// Milliseconds on the monotonic clock.
    fn now(&self) -> f64 {
        (self.performance.as_ref())
            .and_then(|(performance, now)| now.call0(performance).ok()?.as_f64())
            .unwrap_or_else(js_sys::Date::now)
    }
}

/// A moment on the browser's monotonic clock: the time since the page's (or worker's) time origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Instant(Duration);

impl Instant {
    pub(crate) fn now() -> Self {
        Self(millis(GLOBAL.with(Global::now)))
    }

    pub(crate) fn checked_add(&self, duration: Duration) -> Option<Self> {
        self.0.checked_add(duration).map(Self)
    }

    pub(crate) fn checked_sub(&self, duration: Duration) -> Option<Self> {
        self.0.checked_sub(duration).map(Self)
    }

    pub(crate) fn checked_duration_since(&self, earlier: Self) -> Option<Duration> {
        self.0.checked_sub(earlier.0)
    }

    pub(crate) fn saturating_duration_since(&self, earlier: Self) -> Duration {
        self.0.saturating_sub(earlier.0)
    }

    pub(crate) fn elapsed(&self) -> Duration {
        Self::now().saturating_duration_since(*self)
    }
}

impl Add<Duration> for Instant {
    type Output = Self;

    /// As std's, but saturating: a time too far ahead to represent is the farthest there is.
    fn add(self, duration: Duration) -> Self {
        Self(self.0.saturating_add(duration))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, duration: Duration) {
        *self = *self + duration;
    }
}

impl Sub<Duration> for Instant {
    type Output = Self;

    /// As std's, but saturating at the time origin.
    fn sub(self, duration: Duration) -> Self {
        Self(self.0.saturating_sub(duration))
    }
}

impl SubAssign<Duration> for Instant {
    fn sub_assign(&mut self, duration: Duration) {
        *self = *self - duration;
    }
}

impl Sub for Instant {
    type Output = Duration;

    fn sub(self, earlier: Self) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// Milliseconds as a `Duration`: zero for what is not a time (negative, not a number).
fn millis(ms: f64) -> Duration {
    Duration::try_from_secs_f64(ms / 1000.0).unwrap_or_default()
}

/// The wall clock: `Date.now()`.
pub(crate) fn system_now() -> SystemTime {
    UNIX_EPOCH + millis(js_sys::Date::now())
}

/// The longest delay `setTimeout` takes (2³¹ − 1 ms, 24.8 days): a longer one would fire at once. A
/// sleep longer than that sets it again when it fires.
const LONGEST_TIMEOUT_MS: f64 = 2_147_483_647.0;

/// A sleep on the browser's `setTimeout`.
pub(crate) struct Sleep {
    deadline: Instant,
    armed: Option<Armed>,
}

/// A `setTimeout` set: its handle, the callback it calls, and what the callback tells the sleep.
struct Armed {
    handle: JsValue,
    _callback: Closure<dyn FnMut()>,
    fired: Rc<Fired>,
}

#[derive(Default)]
struct Fired {
    done: Cell<bool>,
    waker: RefCell<Option<Waker>>,
}

impl std::fmt::Debug for Sleep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sleep")
            .field("deadline", &self.deadline)
            .field("armed", &self.armed.is_some())
            .finish()
    }
}

impl Sleep {
    pub(crate) const fn until(deadline: Instant) -> Self {
        Self {
            deadline,
            armed: None,
        }
    }

    /// Ends at `deadline` instead; a sleep waiting keeps waiting, for the new time.
    pub(crate) fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
        if let Some(armed) = self.armed.take() {
            let waker = armed.fired.waker.borrow_mut().take();
            disarm(armed);
            if let Some(waker) = waker {
                self.arm(waker);
            }
        }
    }

    /// Sets a `setTimeout` for the time left, which wakes `waker`. Without `setTimeout`, the task is
    /// woken at once, and polls until its time comes.
    fn arm(&mut self, waker: Waker) {
        let left = self.deadline.saturating_duration_since(Instant::now());
        // Rounded up: a timer that fires before the deadline sets itself again.
        let ms = (left.as_secs_f64() * 1000.0).ceil().min(LONGEST_TIMEOUT_MS);
        let fired = Rc::new(Fired::default());
        *fired.waker.borrow_mut() = Some(waker);
        let told = Rc::clone(&fired);
        let callback = Closure::<dyn FnMut()>::new(move || {
            told.done.set(true);
            if let Some(waker) = told.waker.borrow_mut().take() {
                waker.wake();
            }
        });
        let handle = GLOBAL.with(|global| {
            let set = global.set_timeout.as_ref()?;
            set.call2(&global.this, callback.as_ref(), &JsValue::from_f64(ms))
                .ok()
        });
        match handle {
            Some(handle) => {
                self.armed = Some(Armed {
                    handle,
                    _callback: callback,
                    fired,
                });
            }
            None => {
                if let Some(waker) = fired.waker.borrow_mut().take() {
                    waker.wake();
                }
            }
        }
    }
}

/// Clears a `setTimeout` that may not have fired, before its callback is dropped.
fn disarm(armed: Armed) {
    if !armed.fired.done.get() {
        GLOBAL.with(|global| {
            if let Some(clear) = &global.clear_timeout {
                let _ = clear.call1(&global.this, &armed.handle);
            }
        });
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            if let Some(armed) = self.armed.take() {
                disarm(armed);
            }
            return Poll::Ready(());
        }
        match &self.armed {
            Some(armed) if !armed.fired.done.get() => {
                let mut waker = armed.fired.waker.borrow_mut();
                match &mut *waker {
                    Some(waker) => waker.clone_from(cx.waker()),
                    None => *waker = Some(cx.waker().clone()),
                }
            }
            // Not set, or fired before the deadline (the clock's resolution, the longest timeout):
            // set again.
            _ => {
                if let Some(armed) = self.armed.take() {
                    disarm(armed);
                }
                self.arm(cx.waker().clone());
            }
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some(armed) = self.armed.take() {
            disarm(armed);
        }
    }
}
