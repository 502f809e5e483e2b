//! stagger's own timer, for a native build with no runtime's timer to use (no tokio runtime around
//! the call, no async-io): one thread, started when first needed, that wakes each sleep when its time
//! comes. Any executor then runs a call, `futures::executor::block_on` included.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

/// The sleeps waiting, by when they end, and the thread that wakes them.
#[derive(Debug, Default)]
struct Wheel {
    state: Mutex<State>,
    /// Told when a sleep that ends sooner than every other begins.
    sooner: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Each sleep waiting: when it ends and its number, and whom to wake then.
    due: BTreeMap<(Instant, u64), Waker>,
    next: u64,
}

/// The wheel, and whether its thread runs: a process that cannot start a thread gets none.
static WHEEL: OnceLock<Option<Arc<Wheel>>> = OnceLock::new();

fn wheel() -> Option<&'static Arc<Wheel>> {
    WHEEL
        .get_or_init(|| {
            let wheel = Arc::new(Wheel::default());
            let turning = Arc::clone(&wheel);
            let started = std::thread::Builder::new()
                .name("stagger-timer".into())
                .spawn(move || turning.turn());
            match started {
                Ok(_) => Some(wheel),
                Err(error) => {
                    tracing::warn!(
                        error = %error,
                        "stagger could not start its timer thread: its sleeps poll until their time comes"
                    );
                    None
                }
            }
        })
        .as_ref()
}

impl Wheel {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The thread's loop: wakes every sleep whose time has come, then waits for the next one, or for
    /// a sooner one to begin.
    fn turn(&self) {
        let mut state = self.lock();
        loop {
            let now = Instant::now();
            let mut woken = Vec::new();
            while let Some(entry) = state.due.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                woken.push(entry.remove());
            }
            if !woken.is_empty() {
                drop(state);
                woken.into_iter().for_each(Waker::wake);
                state = self.lock();
                continue;
            }
            state = match state.due.first_key_value() {
                Some(((at, _), _)) => {
                    let left = at.saturating_duration_since(now);
                    (self.sooner.wait_timeout(state, left))
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => (self.sooner.wait(state)).unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

/// A sleep on stagger's timer thread.
#[derive(Debug)]
pub(crate) struct Sleep {
    deadline: Instant,
    /// Its place among the sleeps waiting, once it waits.
    waiting: Option<(Instant, u64)>,
}

impl Sleep {
    pub(crate) const fn until(deadline: Instant) -> Self {
        Self {
            deadline,
            waiting: None,
        }
    }

    /// Ends at `deadline` instead; a sleep waiting keeps waiting, for the new time.
    pub(crate) fn reset(&mut self, deadline: Instant) {
        self.deadline = deadline;
        let Some(key) = self.waiting.take() else {
            return;
        };
        let Some(wheel) = wheel() else {
            return;
        };
        let mut state = wheel.lock();
        if let Some(waker) = state.due.remove(&key) {
            self.wait(wheel, &mut state, waker);
        }
    }

    fn wait(&mut self, wheel: &Wheel, state: &mut State, waker: Waker) {
        let key = (self.deadline, state.next);
        state.next += 1;
        let soonest = state
            .due
            .first_key_value()
            .is_none_or(|(first, _)| key < *first);
        state.due.insert(key, waker);
        self.waiting = Some(key);
        if soonest {
            wheel.sooner.notify_one();
        }
    }

    fn forget(&mut self) {
        if let Some(key) = self.waiting.take()
            && let Some(wheel) = wheel()
        {
            wheel.lock().due.remove(&key);
        }
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            self.forget();
            return Poll::Ready(());
        }
        let Some(wheel) = wheel() else {
            // No thread to wake it: polled again at once, until its time comes.
            cx.waker().wake_by_ref();
            return Poll::Pending;
        };
        let mut state = wheel.lock();
        match self.waiting.and_then(|key| state.due.get_mut(&key)) {
            Some(waker) => waker.clone_from(cx.waker()),
            None => self.wait(wheel, &mut state, cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.forget();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::Wake;
    use std::time::Duration;

    use super::*;

    struct Count(AtomicUsize, std::thread::Thread);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
            self.1.unpark();
        }
    }

    /// Polls `sleep` on this thread until it is ready, parked between polls: how long that took, and
    /// how many times it was woken.
    fn wait(mut sleep: Sleep) -> (Duration, usize) {
        let count = Arc::new(Count(AtomicUsize::new(0), std::thread::current()));
        let waker = Waker::from(Arc::clone(&count));
        let mut cx = Context::from_waker(&waker);
        let start = Instant::now();
        while Pin::new(&mut sleep).poll(&mut cx).is_pending() {
            std::thread::park();
        }
        (start.elapsed(), count.0.load(Ordering::SeqCst))
    }

    #[test]
    fn a_sleep_ends_at_its_deadline_woken_once() {
        let (took, woken) = wait(Sleep::until(Instant::now() + Duration::from_millis(50)));
        assert!(took >= Duration::from_millis(50), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        assert_eq!(woken, 1);
    }

    #[test]
    fn a_sleep_reset_while_waiting_ends_at_the_new_deadline() {
        let mut sleep = Sleep::until(Instant::now() + Duration::from_secs(60));
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0), std::thread::current())));
        assert!(
            Pin::new(&mut sleep)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        sleep.reset(Instant::now() + Duration::from_millis(30));
        let (took, _) = wait(sleep);
        assert!(took < Duration::from_secs(2), "{took:?}");
    }

    #[test]
    fn a_dropped_sleep_leaves_nothing_waiting() {
        let mut sleep = Sleep::until(Instant::now() + Duration::from_secs(60));
        let waker = Waker::from(Arc::new(Count(AtomicUsize::new(0), std::thread::current())));
        assert!(
            Pin::new(&mut sleep)
                .poll(&mut Context::from_waker(&waker))
                .is_pending()
        );
        let key = sleep.waiting.expect("waiting");
        drop(sleep);
        let wheel = wheel().expect("a timer thread");
        assert!(!wheel.lock().due.contains_key(&key));
    }
}
