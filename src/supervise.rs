//! Keeping a long-running task alive: runs it, restarts it on the schedule of a [`RestartPolicy`],
//! sleeps in between (on the timer of what runs it: see `time`), and ends at a stop signal.

use std::any::Any;
use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::time::Instant;

use crate::attempt::{RetryInfo, StopReason};
use crate::classify::known_error;
use crate::drive::timer;
use crate::engine::restart::{RestartDecision, RestartState, RunEnd};
use crate::engine::restart_policy::RestartPolicy;
use crate::error::Error;
use crate::observe::log;
use crate::time::Sleeping;

/// Runs `task` until `stop` completes, restarting it when a run fails, on the schedule of `policy`.
///
/// `task` makes one run: a future that should keep going until something breaks (a connection
/// dropped, a consumer's stream ended in error). When a run fails it is started again after the
/// policy's delay: a run that stayed up for
/// [`healthy_after`](crate::RestartPolicyBuilder::healthy_after) is restarted at once and the delays
/// start over; each failure in a row after that waits a jittered delay of the backoff, growing to its
/// cap. There is no deadline and no limit on a run.
///
/// It ends with:
///
/// - `Ok(())` when `stop` completes, at once if it does during the sleep before a restart; a run in
///   progress is dropped, or left to finish with
///   [`finish_on_stop`](crate::RestartPolicyBuilder::finish_on_stop); no run starts once it has;
/// - `Ok(())` when a run returns `Ok(())`, unless
///   [`restart_on_return`](crate::RestartPolicyBuilder::restart_on_return) restarts it too;
/// - an [`Error`] when the [restart limit](crate::RestartPolicyBuilder::max_restarts) is reached: the
///   last run's error ([`inner`](Error::inner)), and in its [`info`](Error::info) the runs made
///   ([`attempts`](RetryInfo::attempts)), the restarts ([`retries`](RetryInfo::retries)), the time
///   slept and [`StopReason::MaxRestarts`].
///
/// `stop` is any future: a `CancellationToken`'s `cancelled()`, a channel's receiver,
/// `tokio::signal::ctrl_c()`, a `tokio::time::sleep` for a deadline, or `std::future::pending()` for
/// none; its output is ignored. The task runs inside the future `supervise` returns, not on a task of
/// its own: it need not be `Send` or `'static`, and a panic unwinds through `supervise` as through any
/// future (to restart after a panic, spawn the run with `tokio::spawn` and return its `JoinError`).
///
/// Each restart after a failed run is a `warn` event of target `stagger::log` (the restart, the
/// failures in a row, the run's uptime, the delay and the run's error), and
/// the restart limit a `warn` one too; with the feature `metrics`, the counters and histograms of
/// [`metrics`](crate::observe::metrics) count them. The hook of
/// [`on_restart`](crate::RestartPolicyBuilder::on_restart) gets the same, the error included.
///
/// ```
/// use std::time::Duration;
/// use stagger::RestartPolicy;
/// use tokio::io::AsyncReadExt;
/// use tokio::net::TcpStream;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
/// # let addr = listener.local_addr().unwrap();
/// # drop(listener);
/// /// Reads from the server until the connection ends, which is a failure: it should not.
/// async fn consume(addr: std::net::SocketAddr) -> std::io::Result<()> {
///     let mut stream = TcpStream::connect(addr).await?;
///     let mut buffer = [0; 1024];
///     while stream.read(&mut buffer).await? > 0 {}
///     Err(std::io::ErrorKind::UnexpectedEof.into())
/// }
///
/// let policy = RestartPolicy::default();
/// let shutdown = tokio::time::sleep(Duration::from_millis(100)); // or ctrl_c(), a token, …
/// stagger::supervise(&policy, || consume(addr), shutdown).await.unwrap();
/// # }
/// ```
pub async fn supervise<E, F, Fut, S>(
    policy: &RestartPolicy,
    mut task: F,
    stop: S,
) -> Result<(), Error<E>>
where
    E: fmt::Debug + 'static,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    S: Future,
{
    let mut stop = pin!(stop);
    let mut state = policy.start();
    loop {
        // A stop that came as the last run ended, or while it was restarted at once: no run starts
        // after it.
        if poll_fn(|cx| Poll::Ready(stop.as_mut().poll(cx).is_ready())).await {
            log::supervision_stopped(state.restarts());
            return Ok(());
        }
        let started = Instant::now();
        let ended = {
            let mut run = pin!(task());
            match poll_fn(|cx| until_stop(run.as_mut(), stop.as_mut(), cx)).await {
                Raced::Stopped => {
                    if policy.finish_on_stop() {
                        // What the run returns after the stop is not a failure to restart.
                        let _ = run.await;
                    }
                    log::supervision_stopped(state.restarts());
                    return Ok(());
                }
                Raced::Ended(ended) => ended,
            }
        };
        let failed = ended.is_err();
        if !failed && !policy.restart_on_return() {
            log::supervision_returned(state.restarts());
            return Ok(());
        }
        let now = Instant::now();
        let shown = ended.as_ref().err().map(Shown);
        let run = RunEnd {
            at: now,
            uptime: now.saturating_duration_since(started),
            failed,
            error: shown.as_ref().map(|error| error as &dyn fmt::Display),
        };
        let delay = match state.run_ended(policy, run) {
            RestartDecision::Restart(delay) => delay,
            RestartDecision::GiveUp => return Err(gave_up(&state, ended)),
        };
        // The failed run's error is the task's to report; the restart does not need it.
        drop(ended);
        if delay.is_zero() {
            // A restart at once follows a healthy run only: at most one per `healthy_after`, but a
            // task that yields nothing while it fails must still let the others run.
            poll_fn(timer::poll_zero_delay).await;
        } else {
            let mut sleep = pin!(Sleeping::until(timer::after(delay), policy.timer()));
            if let Raced::Stopped =
                poll_fn(|cx| until_stop(sleep.as_mut(), stop.as_mut(), cx)).await
            {
                log::supervision_stopped(state.restarts());
                return Ok(());
            }
        }
    }
}

/// A run's error as the restart's event shows it: the messages of an error type the classifier
/// reads (`std::io::Error`, reqwest's, hyper's, a boxed error: see `AsError`), with its causes; a
/// string as it is; any other by its `Debug`.
struct Shown<'e, E>(&'e E);

impl<E: fmt::Debug + 'static> fmt::Display for Shown<'_, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let error: &dyn Any = self.0;
        if let Some(error) = known_error(error) {
            write!(f, "{error}")?;
            let mut source = error.source();
            while let Some(cause) = source {
                write!(f, ": {cause}")?;
                source = cause.source();
            }
            return Ok(());
        }
        if let Some(text) = error.downcast_ref::<&str>() {
            return f.write_str(text);
        }
        if let Some(text) = error.downcast_ref::<String>() {
            return f.write_str(text);
        }
        write!(f, "{:?}", self.0)
    }
}

/// The error of a supervision that reached its restart limit, with the last run's error if it failed.
fn gave_up<E>(state: &RestartState, ended: Result<(), E>) -> Error<E> {
    let info = RetryInfo {
        replicas: None,
        attempts: state.runs(),
        transparent: 0,
        slept: state.slept(),
        cooldown: Duration::ZERO,
        hedges: 0,
        stop: Some(StopReason::MaxRestarts),
    };
    match ended {
        Err(error) => Error::from_inner(error, info),
        Ok(()) => Error::unsent(info),
    }
}

/// What came first: the future's output, or the stop.
enum Raced<T> {
    Ended(T),
    Stopped,
}

/// Polls `stop` first, so that a stop is never missed behind a future that is always ready.
fn until_stop<F: Future, S: Future>(
    future: Pin<&mut F>,
    stop: Pin<&mut S>,
    cx: &mut Context<'_>,
) -> Poll<Raced<F::Output>> {
    if stop.poll(cx).is_ready() {
        return Poll::Ready(Raced::Stopped);
    }
    future.poll(cx).map(Raced::Ended)
}
