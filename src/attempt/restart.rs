//! [`RestartEvent`]: a supervised task's restart, as its hook and its observers see it.

use std::fmt;
use std::time::Duration;

/// A restart about to happen, as the hook of
/// [`RestartPolicyBuilder::on_restart`](crate::RestartPolicyBuilder::on_restart) sees it: which
/// restart, how the run before it went (the error it ended with among it), and how long until the
/// task runs again.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use stagger::{Backoff, RestartEvent, RestartPolicy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let events = Arc::new(Mutex::new(Vec::new()));
/// let seen = Arc::clone(&events);
/// let policy = RestartPolicy::builder()
///     .backoff(Backoff::fixed(Duration::from_millis(100)))
///     .healthy_after(Duration::from_secs(1))
///     .on_restart(move |event: &RestartEvent| {
///         let error = event.error.map(|error| error.to_string());
///         seen.lock().unwrap().push((event.restart, event.failures, event.uptime, event.delay, error));
///     })
///     .build()
///     .unwrap();
/// // Up for 2 s, then failing at once twice.
/// let mut run = 0;
/// let task = || {
///     run += 1;
///     let uptime = if run == 1 { Duration::from_secs(2) } else { Duration::ZERO };
///     async move {
///         tokio::time::sleep(uptime).await;
///         Err::<(), _>("connection reset")
///     }
/// };
/// let stop = tokio::time::sleep(Duration::from_millis(2150));
/// stagger::supervise(&policy, task, stop).await.unwrap();
///
/// let events = events.lock().unwrap();
/// let reset = Some("connection reset".to_owned());
/// // A healthy run: restarted at once, no failure in a row.
/// assert_eq!(events[0], (1, 0, Duration::from_secs(2), Duration::ZERO, reset.clone()));
/// // Then one failure, which waits the backoff.
/// assert_eq!(events[1], (2, 1, Duration::ZERO, Duration::from_millis(100), reset));
/// # }
/// ```
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct RestartEvent<'a> {
    /// Which restart this is, counting from 1 over the whole supervision.
    pub restart: u32,
    /// The runs in a row, this one included, that ended before
    /// [`healthy_after`](crate::RestartPolicyBuilder::healthy_after); 0 when the run that ended was
    /// healthy.
    pub failures: u32,
    /// How long the run that ended stayed up.
    pub uptime: Duration,
    /// How long until the task runs again.
    pub delay: Duration,
    /// Whether the run ended with an error; `false` when it returned `Ok` and
    /// [`restart_on_return`](crate::RestartPolicyBuilder::restart_on_return) is on.
    pub failed: bool,
    /// The error the run ended with, when the adapter has it: [`supervise`](crate::supervise())
    /// gives its task's; `stagger::tower::Restarting` has none (tower's `Reconnect` hands a failed
    /// connection's error to the call that met it).
    pub error: Option<&'a dyn fmt::Display>,
}

impl fmt::Debug for RestartEvent<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestartEvent")
            .field("restart", &self.restart)
            .field("failures", &self.failures)
            .field("uptime", &self.uptime)
            .field("delay", &self.delay)
            .field("failed", &self.failed)
            .field("error", &self.error.map(ToString::to_string))
            .finish()
    }
}
