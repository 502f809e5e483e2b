//! `stagger::supervise` in virtual time: the schedule of restarts (the backoff of failures in a row,
//! the reset after a healthy run), the restart limit, the stop during a sleep and during a run, a run
//! that returns, the hook, the `tracing` events and the metrics; and the tower `Restarting` make
//! service behind `tower::reconnect`.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stagger::{Backoff, Jitter, RestartEvent, RestartPolicy, RestartPolicyBuilder, StopReason};
use tokio::time::{Instant, sleep};

const MS: Duration = Duration::from_millis(1);
const SECOND: Duration = Duration::from_secs(1);

/// A task whose runs stay up as long as `uptimes` says, in turn, then fail; after the last, every
/// run fails at once. It records when each run started, from the test's start.
struct Script {
    start: Instant,
    uptimes: Vec<Duration>,
    starts: Rc<RefCell<Vec<Duration>>>,
}

impl Script {
    fn new(uptimes: impl IntoIterator<Item = Duration>) -> Self {
        Self {
            start: Instant::now(),
            uptimes: uptimes.into_iter().collect(),
            starts: Rc::default(),
        }
    }

    /// The task for `supervise`: each call is one run.
    fn task(
        &self,
    ) -> impl FnMut() -> std::pin::Pin<Box<dyn Future<Output = Result<(), &'static str>>>> {
        let (start, starts) = (self.start, Rc::clone(&self.starts));
        let mut uptimes = self.uptimes.clone().into_iter();
        move || {
            starts.borrow_mut().push(start.elapsed());
            let uptime = uptimes.next().unwrap_or_default();
            Box::pin(async move {
                sleep(uptime).await;
                Err("connection reset")
            })
        }
    }

    fn starts(&self) -> Vec<Duration> {
        self.starts.borrow().clone()
    }
}

/// Exponential from 100 ms, base 2, without jitter: the delays can be asserted.
fn exact(builder: RestartPolicyBuilder) -> RestartPolicyBuilder {
    builder.backoff(Backoff::exponential(100 * MS).with_jitter(Jitter::None))
}

fn ms(values: impl IntoIterator<Item = u64>) -> Vec<Duration> {
    values.into_iter().map(Duration::from_millis).collect()
}

#[tokio::test(start_paused = true)]
async fn failures_in_a_row_back_off_and_a_healthy_run_restarts_at_once_and_starts_the_delays_over()
{
    let policy = exact(RestartPolicy::builder())
        .healthy_after(SECOND)
        .build()
        .unwrap();
    // Three runs fail at once, one stays up 3 s, then every run fails at once again.
    let script = Script::new([0, 0, 0, 3000].map(Duration::from_millis));
    let stop = sleep(Duration::from_millis(3950));
    stagger::supervise(&policy, script.task(), stop)
        .await
        .unwrap();
    // Waits of 100, 200, 400 ms; the run at 700 ms stays up until 3.7 s, is restarted at once, and the
    // next failure waits 100 ms again, then 200 ms.
    assert_eq!(script.starts(), ms([0, 100, 300, 700, 3700, 3800]));
}

#[tokio::test(start_paused = true)]
async fn runs_shorter_than_healthy_after_keep_backing_off_to_the_cap() {
    let policy = RestartPolicy::builder()
        .backoff(
            Backoff::exponential(100 * MS)
                .with_max_delay(400 * MS)
                .with_jitter(Jitter::None),
        )
        .healthy_after(SECOND)
        .build()
        .unwrap();
    // Every run stays up 900 ms: not healthy.
    let script = Script::new([900 * MS; 6]);
    let stop = sleep(Duration::from_millis(6500));
    stagger::supervise(&policy, script.task(), stop)
        .await
        .unwrap();
    // Each run ends 900 ms after its start, and waits 100, 200, 400, 400, … ms.
    assert_eq!(script.starts(), ms([0, 1000, 2100, 3400, 4700, 6000]));
}

#[tokio::test(start_paused = true)]
async fn full_jitter_draws_each_restart_under_its_ceiling() {
    let policy = RestartPolicy::builder().seed(3).build().unwrap();
    let script = Script::new([]);
    let stop = sleep(Duration::from_secs(300));
    stagger::supervise(&policy, script.task(), stop)
        .await
        .unwrap();
    let starts = script.starts();
    assert!(starts.len() > 20, "{} runs", starts.len());
    for (n, pair) in (1..).zip(starts.windows(2)) {
        let waited = pair[1] - pair[0];
        assert!(
            waited <= policy.backoff().ceiling(n),
            "restart {n} waited {waited:?}"
        );
    }
    // The default cap, 20 s, bounds every wait.
    assert!(
        starts
            .windows(2)
            .all(|pair| pair[1] - pair[0] <= 20 * SECOND)
    );
}

#[tokio::test(start_paused = true)]
async fn more_restarts_than_the_limit_within_its_window_give_up_with_the_last_error() {
    let policy = RestartPolicy::builder()
        .backoff(Backoff::fixed(SECOND))
        .max_restarts(3, 10 * SECOND)
        .build()
        .unwrap();
    let script = Script::new([]);
    let started = Instant::now();
    let error = stagger::supervise(&policy, script.task(), std::future::pending::<()>())
        .await
        .unwrap_err();
    // Restarts at 1, 2 and 3 s; a fourth at 4 s would be the fourth within 10 s: not made.
    assert_eq!(script.starts(), ms([0, 1000, 2000, 3000]));
    assert_eq!(started.elapsed(), 3 * SECOND);
    assert_eq!(error.inner(), Some(&"connection reset"));
    let info = error.info();
    assert_eq!((info.attempts(), info.retries()), (4, 3));
    assert_eq!(info.slept(), 3 * SECOND);
    assert_eq!(info.stop_reason(), Some(StopReason::MaxRestarts));
    assert_eq!(
        error.to_string(),
        "gave up after 3 restarts (restart limit reached)"
    );
    assert_eq!(
        format!("{error:?}"),
        "gave up after 3 restarts (restart limit reached, 3s asleep): \"connection reset\""
    );
}

#[tokio::test(start_paused = true)]
async fn restarts_spread_wider_than_the_window_never_reach_the_limit() {
    let policy = RestartPolicy::builder()
        .backoff(Backoff::fixed(6 * SECOND))
        .max_restarts(1, 5 * SECOND)
        .build()
        .unwrap();
    let script = Script::new([]);
    let stop = sleep(Duration::from_secs(61));
    stagger::supervise(&policy, script.task(), stop)
        .await
        .unwrap();
    assert_eq!(script.starts().len(), 11); // 0, 6, …, 60 s
}

#[tokio::test(start_paused = true)]
async fn healthy_restarts_count_against_the_limit_too() {
    let policy = RestartPolicy::builder()
        .healthy_after(SECOND)
        .max_restarts(2, 10 * SECOND)
        .build()
        .unwrap();
    let script = Script::new([2 * SECOND; 4]);
    let error = stagger::supervise(&policy, script.task(), std::future::pending::<()>())
        .await
        .unwrap_err();
    // Healthy runs restarted at once at 2 and 4 s; a third restart at 6 s would be one too many.
    assert_eq!(script.starts(), ms([0, 2000, 4000]));
    assert_eq!(error.info().slept(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_the_sleep_ends_it_at_once() {
    let policy = RestartPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_secs(3600)))
        .build()
        .unwrap();
    let script = Script::new([]);
    let started = Instant::now();
    let stop = sleep(5 * SECOND);
    stagger::supervise(&policy, script.task(), stop)
        .await
        .unwrap();
    assert_eq!(started.elapsed(), 5 * SECOND);
    assert_eq!(script.starts(), ms([0]));
}

/// Sets its flag when dropped: a run's future was dropped, not polled to its end.
struct DropGuard(Arc<AtomicBool>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_a_run_drops_the_run_by_default() {
    let dropped = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let task = || {
        let guard = DropGuard(Arc::clone(&dropped));
        let finished = Arc::clone(&finished);
        async move {
            let _guard = guard;
            sleep(Duration::from_secs(3600)).await;
            finished.store(true, Ordering::Relaxed);
            Ok::<(), ()>(())
        }
    };
    let started = Instant::now();
    let policy = RestartPolicy::default();
    stagger::supervise(&policy, task, sleep(2 * SECOND))
        .await
        .unwrap();
    assert_eq!(started.elapsed(), 2 * SECOND);
    assert!(dropped.load(Ordering::Relaxed));
    assert!(!finished.load(Ordering::Relaxed));
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_a_run_lets_it_finish_with_finish_on_stop() {
    let finished = Arc::new(AtomicBool::new(false));
    let task = || {
        let finished = Arc::clone(&finished);
        async move {
            sleep(5 * SECOND).await;
            finished.store(true, Ordering::Relaxed);
            // Its error after the stop is not restarted.
            Err::<(), _>("closed while finishing")
        }
    };
    let started = Instant::now();
    let policy = RestartPolicy::builder()
        .finish_on_stop(true)
        .build()
        .unwrap();
    stagger::supervise(&policy, task, sleep(2 * SECOND))
        .await
        .unwrap();
    assert_eq!(started.elapsed(), 5 * SECOND);
    assert!(finished.load(Ordering::Relaxed));
}

#[tokio::test(start_paused = true)]
async fn a_stop_already_complete_ends_it_before_the_first_run_is_polled() {
    let polled = Arc::new(AtomicBool::new(false));
    let task = || {
        let polled = Arc::clone(&polled);
        async move {
            polled.store(true, Ordering::Relaxed);
            Err::<(), ()>(())
        }
    };
    let policy = RestartPolicy::default();
    stagger::supervise(&policy, task, std::future::ready(()))
        .await
        .unwrap();
    // The first run's future was made, but the stop is polled first.
    assert!(!polled.load(Ordering::Relaxed));
}

#[tokio::test(start_paused = true)]
async fn a_run_that_returns_ends_it_unless_restart_on_return() {
    let returns_after = |uptime: Duration| {
        let runs = Rc::new(RefCell::new(0));
        let counted = Rc::clone(&runs);
        let task = move || {
            *counted.borrow_mut() += 1;
            async move {
                sleep(uptime).await;
                Ok::<(), ()>(())
            }
        };
        (runs, task)
    };
    let (runs, task) = returns_after(SECOND);
    let policy = RestartPolicy::default();
    stagger::supervise(&policy, task, std::future::pending::<()>())
        .await
        .unwrap();
    assert_eq!(*runs.borrow(), 1);

    // Restarted like a failure: a run of 1 s is short of healthy_after (10 s), so it backs off.
    let (runs, task) = returns_after(SECOND);
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let policy = exact(RestartPolicy::builder())
        .restart_on_return(true)
        .on_restart(move |event: &RestartEvent| {
            assert!(event.error.is_none(), "a run that returned has no error");
            seen.lock().unwrap().push((event.failed, event.delay));
        })
        .build()
        .unwrap();
    stagger::supervise(&policy, task, sleep(Duration::from_millis(3500)))
        .await
        .unwrap();
    // Runs at 0, 1.1 and 2.3 s; the third ends at 3.3 s and the stop comes during its 400 ms wait.
    assert_eq!(*runs.borrow(), 3);
    let events = events.lock().unwrap();
    assert!(events.iter().all(|(failed, _)| !failed));
    assert_eq!(
        events.iter().map(|(_, delay)| *delay).collect::<Vec<_>>(),
        ms([100, 200, 400])
    );
}

#[tokio::test(start_paused = true)]
async fn a_restart_limit_reached_by_runs_that_return_has_no_inner_error() {
    let policy = RestartPolicy::builder()
        .restart_on_return(true)
        .max_restarts(0, SECOND)
        .build()
        .unwrap();
    let task = || async { Ok::<(), std::io::Error>(()) };
    let error = stagger::supervise(&policy, task, std::future::pending::<()>())
        .await
        .unwrap_err();
    assert!(error.inner().is_none());
    assert_eq!(
        error.to_string(),
        "gave up after 0 restarts (restart limit reached)"
    );
}

#[tokio::test(start_paused = true)]
async fn the_hook_sees_each_restart_its_failures_in_a_row_and_the_uptime() {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let policy = exact(RestartPolicy::builder())
        .healthy_after(SECOND)
        .on_restart(move |event: &RestartEvent| {
            let error = event.error.map(|error| error.to_string());
            let e = (event.restart, event.failures, event.uptime, event.delay);
            seen.lock().unwrap().push((e, event.failed, error));
        })
        .build()
        .unwrap();
    let script = Script::new([0, 2000, 0].map(Duration::from_millis));
    stagger::supervise(&policy, script.task(), sleep(Duration::from_millis(2250)))
        .await
        .unwrap();
    let events = events.lock().unwrap();
    assert!(
        events
            .iter()
            .all(|(_, _, error)| error.as_deref() == Some("connection reset")),
        "the hook sees the error that ended each run: {events:?}"
    );
    let seen: Vec<_> = events
        .iter()
        .map(|((restart, failures, uptime, delay), failed, _)| {
            (*restart, *failures, *uptime, *delay, *failed)
        })
        .collect();
    assert_eq!(
        seen,
        [
            (1, 1, Duration::ZERO, 100 * MS, true),
            (2, 0, 2 * SECOND, Duration::ZERO, true),
            (3, 1, Duration::ZERO, 100 * MS, true),
            (4, 2, Duration::ZERO, 200 * MS, true),
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_task_that_fails_at_once_does_not_keep_the_thread() {
    // Zero delays only follow healthy runs; with jitter, delays near zero follow failures. Either way
    // another task on the same thread gets to run.
    let policy = RestartPolicy::builder()
        .backoff(
            Backoff::exponential(Duration::from_nanos(1)).with_max_delay(Duration::from_nanos(1)),
        )
        .healthy_after(None)
        .build()
        .unwrap();
    let other = tokio::spawn(async {});
    let stop = async {
        let _ = other.await;
    };
    stagger::supervise(&policy, || async { Err::<(), ()>(()) }, stop)
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn each_restart_after_a_failure_is_a_warning_with_its_error_and_so_is_the_limit() {
    let events = common::capture();
    let policy = exact(RestartPolicy::builder())
        .healthy_after(SECOND)
        .max_restarts(2, 60 * SECOND)
        .build()
        .unwrap();
    let script = Script::new([2 * SECOND]);
    let _ = stagger::supervise(&policy, script.task(), std::future::pending::<()>()).await;
    let events = events.stagger();
    let seen: Vec<_> = events
        .iter()
        .map(|e| (e.level, e.target.as_str(), e.message.as_str()))
        .collect();
    use tracing::Level;
    assert_eq!(
        seen,
        [
            (Level::WARN, "stagger::log", "restarting"),
            (Level::WARN, "stagger::log", "restarting"),
            (Level::WARN, "stagger::log", "gave up restarting"),
        ]
    );
    let fields = |e: &common::Captured, names: &[&str]| -> Vec<String> {
        names.iter().map(|name| e.field(name).to_owned()).collect()
    };
    let restart = [
        "restart",
        "failures",
        "uptime_ms",
        "delay_ms",
        "run.outcome",
        "error",
    ];
    assert_eq!(
        fields(&events[0], &restart),
        ["1", "0", "2000", "0", "failed", "connection reset"]
    );
    assert_eq!(
        fields(&events[1], &restart),
        ["2", "1", "0", "100", "failed", "connection reset"]
    );
    let gave_up = [
        "runs",
        "failures",
        "uptime_ms",
        "slept_ms",
        "stop.reason",
        "error",
    ];
    assert_eq!(
        fields(&events[2], &gave_up),
        ["3", "2", "0", "100", "max_restarts", "connection reset"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_stop_is_a_debug_event() {
    let events = common::capture();
    let policy = RestartPolicy::default();
    stagger::supervise(
        &policy,
        std::future::pending::<Result<(), ()>>,
        sleep(SECOND),
    )
    .await
    .unwrap();
    let events = events.stagger();
    let [stopped] = events.as_slice() else {
        panic!("one event: {events:#?}");
    };
    assert_eq!(stopped.message, "supervision stopped");
    assert_eq!(stopped.field("restarts"), "0");
}

/// The metrics of supervised tasks, seen by `metrics-util`'s debugging recorder.
#[cfg(feature = "metrics")]
#[test]
fn restarts_failures_in_a_row_uptimes_and_the_limit_are_recorded() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use stagger::metrics as names;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let policy = exact(RestartPolicy::builder())
        .healthy_after(SECOND)
        .max_restarts(2, 60 * SECOND)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let script = Script::new([2 * SECOND]);
            let _ = stagger::supervise(&policy, script.task(), std::future::pending::<()>()).await;
        })
    });
    let metrics: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let labels: Vec<_> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            (key.name().to_owned(), labels, value)
        })
        .collect();
    let get = |name: &str| {
        let found: Vec<_> = metrics.iter().filter(|(n, _, _)| n == name).collect();
        assert_eq!(found.len(), 1, "{name}: {metrics:?}");
        (&found[0].1, &found[0].2)
    };
    let (labels, restarts) = get(names::RESTARTS);
    assert_eq!(labels, &["run.outcome=failed"]);
    assert!(matches!(restarts, DebugValue::Counter(2)), "{restarts:?}");
    let (labels, failures) = get(names::RESTART_FAILURES);
    assert!(labels.is_empty());
    let DebugValue::Histogram(failures) = failures else {
        panic!("{failures:?}");
    };
    assert_eq!(
        failures.iter().map(|v| v.into_inner()).collect::<Vec<_>>(),
        [0.0, 1.0]
    );
    // Each run that ended: the two restarted, and the last, given up.
    let (labels, uptimes) = get(names::RUN_UPTIME);
    assert_eq!(labels, &["run.outcome=failed"]);
    let DebugValue::Histogram(uptimes) = uptimes else {
        panic!("{uptimes:?}");
    };
    assert_eq!(
        uptimes.iter().map(|v| v.into_inner()).collect::<Vec<_>>(),
        [2.0, 0.0, 0.0]
    );
    let (_, given_up) = get(names::RESTARTS_GIVEN_UP);
    assert!(matches!(given_up, DebugValue::Counter(1)), "{given_up:?}");
}

/// The tower adapter: `Restarting` delays the connections `tower::reconnect::Reconnect` makes.
#[cfg(feature = "tower")]
mod tower_reconnect {
    use std::future::Ready;
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use stagger::tower::Restarting;
    use tower::reconnect::Reconnect;
    use tower::{Service, ServiceExt, service_fn};

    use super::*;

    /// A connection: answers until its flag is cleared, then fails its `poll_ready`.
    struct Connection {
        alive: Arc<AtomicBool>,
    }

    impl Service<u32> for Connection {
        type Response = u32;
        type Error = io::Error;
        type Future = Ready<Result<u32, io::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
            Poll::Ready(match self.alive.load(Ordering::Relaxed) {
                true => Ok(()),
                false => Err(io::ErrorKind::ConnectionReset.into()),
            })
        }

        fn call(&mut self, request: u32) -> Self::Future {
            std::future::ready(Ok(request))
        }
    }

    type Made = Pin<Box<dyn Future<Output = io::Result<Connection>> + Send>>;

    #[tokio::test(start_paused = true)]
    async fn reconnects_wait_the_restart_schedule_and_start_over_after_a_healthy_connection() {
        let start = Instant::now();
        let makes = Arc::new(Mutex::new(Vec::new()));
        let current = Arc::new(Mutex::new(Arc::new(AtomicBool::new(true))));
        // Refuses its first three connections and its sixth, and connects otherwise.
        let make = {
            let (makes, current) = (Arc::clone(&makes), Arc::clone(&current));
            service_fn(move |_target: &'static str| -> Made {
                let mut makes = makes.lock().unwrap();
                makes.push(start.elapsed());
                if makes.len() <= 3 || makes.len() == 6 {
                    return Box::pin(async { Err(io::ErrorKind::ConnectionRefused.into()) });
                }
                let alive = Arc::new(AtomicBool::new(true));
                *current.lock().unwrap() = Arc::clone(&alive);
                Box::pin(async move { Ok(Connection { alive }) })
            })
        };
        let policy = exact(RestartPolicy::builder())
            .healthy_after(SECOND)
            .build()
            .unwrap();
        let mut service = Reconnect::new(Restarting::new(&policy, make), "db");
        // Each refusal fails the call that met it; the next connection waits its delay.
        for _ in 0..3 {
            assert!(service.ready().await.unwrap().call(7).await.is_err());
        }
        assert_eq!(service.ready().await.unwrap().call(7).await.unwrap(), 7);
        assert_eq!(*makes.lock().unwrap(), ms([0, 100, 300, 700]));

        // Up 5 s, then lost: a healthy connection, remade at once.
        sleep(5 * SECOND).await;
        current.lock().unwrap().store(false, Ordering::Relaxed);
        assert_eq!(service.ready().await.unwrap().call(8).await.unwrap(), 8);
        // Lost again after 500 ms, short of healthy: the next make waits 100 ms, is refused, and the
        // one after it waits 200 ms.
        sleep(500 * MS).await;
        current.lock().unwrap().store(false, Ordering::Relaxed);
        assert!(service.ready().await.unwrap().call(9).await.is_err());
        assert_eq!(service.ready().await.unwrap().call(9).await.unwrap(), 9);
        assert_eq!(
            *makes.lock().unwrap(),
            ms([0, 100, 300, 700, 5700, 6300, 6500])
        );
    }
}

/// Issue 29: a stop that comes as a run ends (here, the run itself sends it) starts no new run, even
/// when the run was healthy and would be restarted at once, and `finish_on_stop` waits for nothing.
#[tokio::test(start_paused = true)]
async fn a_stop_as_a_healthy_run_ends_starts_no_new_run() {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let stop = Rc::new(RefCell::new(Some(stop)));
    let runs = Rc::new(RefCell::new(0));
    let task = || {
        *runs.borrow_mut() += 1;
        let stop = Rc::clone(&stop);
        async move {
            sleep(2 * SECOND).await;
            if let Some(stop) = stop.borrow_mut().take() {
                stop.send(()).unwrap();
            }
            Err::<(), _>("connection reset")
        }
    };
    let policy = RestartPolicy::builder()
        .healthy_after(SECOND)
        .finish_on_stop(true)
        .build()
        .unwrap();
    let started = Instant::now();
    stagger::supervise(&policy, task, stopped).await.unwrap();
    assert_eq!(*runs.borrow(), 1);
    assert_eq!(started.elapsed(), 2 * SECOND);
}

/// Issue 29: a backoff from zero restarts a failing task in a busy loop, as a zero `healthy_after`
/// would: refused.
#[test]
fn a_restart_backoff_from_zero_is_refused() {
    for backoff in [
        Backoff::fixed(Duration::ZERO),
        Backoff::exponential(Duration::ZERO),
    ] {
        let error = RestartPolicy::builder()
            .backoff(backoff)
            .build()
            .unwrap_err();
        assert_eq!(error, stagger::ConfigError::RestartBackoff(Duration::ZERO));
    }
}
