//! stagger on runtimes other than tokio: `stagger::retry`, `RetryLayer` and `supervise` under smol
//! (its executor and async-io's reactor, no tokio runtime anywhere), and under the plainest executor
//! there is (`futures::executor::block_on`) with a timer the caller brings. Every delay is real and
//! measured on the wall clock.
//!
//! Without a policy's own timer a call outside a tokio runtime sleeps on async-io's timer (feature
//! `async-io`) or on stagger's timer thread: the suite passes on either, under every feature set.
#![cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use stagger::time::{Sleep, Timer};
use stagger::{Backoff, Outcome, Reason, RestartPolicy, RetryPolicy, StopReason};

/// No tokio runtime is running the call: what it sleeps on is another runtime's timer or stagger's.
fn outside_tokio() {
    assert!(tokio::runtime::Handle::try_current().is_err());
}

fn refused() -> io::Error {
    io::ErrorKind::ConnectionRefused.into()
}

fn connect(result: &Result<u32, io::Error>) -> Outcome {
    match result {
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::RetrySafe(Reason::Connect),
    }
}

#[test]
fn stagger_retry_under_smol_sleeps_its_delays() {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(100)))
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let start = Instant::now();
    let value = smol::block_on(stagger::retry(
        &policy,
        || async {
            outside_tokio();
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(refused()),
                n => Ok(n),
            }
        },
        connect,
    ))
    .unwrap();
    let took = start.elapsed();
    assert_eq!(value, 2);
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn under_smol_the_attempt_timeout_cuts_a_hanging_attempt_and_the_retry_succeeds() {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(10)))
        .attempt_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let calls = AtomicU32::new(0);
    let start = Instant::now();
    let value = smol::block_on(stagger::retry(
        &policy,
        || async {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                // Hangs, on smol's own timer, far past the attempt timeout.
                smol::Timer::after(Duration::from_secs(60)).await;
            }
            Ok::<_, io::Error>(7)
        },
        |_| Outcome::Success,
    ))
    .unwrap();
    let took = start.elapsed();
    assert_eq!((value, calls.load(Ordering::SeqCst)), (7, 2));
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn under_smol_the_deadline_ends_the_call() {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(50)))
        .max_elapsed(Duration::from_millis(300))
        .max_retries(100)
        .build()
        .unwrap();
    let start = Instant::now();
    let error = smol::block_on(stagger::retry(
        &policy,
        || async { Err::<u32, _>(refused()) },
        connect,
    ))
    .unwrap_err();
    let took = start.elapsed();
    assert_eq!(error.info().stop_reason(), Some(StopReason::Deadline));
    assert!(took < Duration::from_millis(600), "{took:?}");
    assert!(error.info().attempts() >= 3, "{:?}", error.info());
}

#[cfg(feature = "tower")]
#[test]
fn retry_layer_under_smol_retries_a_refused_request() {
    use tower::{Layer, ServiceExt};

    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(50)))
        .build()
        .unwrap();
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let service = tower::service_fn(move |_: http::Request<String>| {
        let n = counted.fetch_add(1, Ordering::SeqCst);
        async move {
            outside_tokio();
            if n == 0 {
                Err(refused())
            } else {
                Ok(http::Response::new(String::from("ok")))
            }
        }
    });
    let service = stagger::RetryLayer::new(policy).layer(service);
    let start = Instant::now();
    let response = smol::block_on(service.oneshot(http::Request::new(String::new()))).unwrap();
    assert!(start.elapsed() >= Duration::from_millis(50));
    let info = response.extensions().get::<stagger::RetryInfo>().unwrap();
    assert_eq!(
        (info.attempts(), info.stop_reason()),
        (2, Some(StopReason::Success))
    );
}

#[test]
fn supervise_under_smol_restarts_after_its_delay() {
    let policy = RestartPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(100)))
        .build()
        .unwrap();
    let runs = AtomicU32::new(0);
    let start = Instant::now();
    smol::block_on(stagger::supervise(
        &policy,
        || async {
            if runs.fetch_add(1, Ordering::SeqCst) < 2 {
                Err(refused())
            } else {
                // The third run stays up until the stop.
                std::future::pending::<io::Result<()>>().await
            }
        },
        async {
            while runs.load(Ordering::SeqCst) < 3 {
                smol::Timer::after(Duration::from_millis(10)).await;
            }
        },
    ))
    .unwrap();
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(200), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// A timer of one's own: each sleep is a thread that sleeps and then completes a channel, and the
/// timer counts the sleeps it was asked for.
#[derive(Debug, Default)]
struct ThreadPerSleep {
    asked: Arc<AtomicU32>,
}

impl Timer for ThreadPerSleep {
    fn sleep(&self, duration: Duration) -> Sleep {
        self.asked.fetch_add(1, Ordering::SeqCst);
        let (done, wait) = futures::channel::oneshot::channel::<()>();
        std::thread::spawn(move || {
            std::thread::sleep(duration);
            let _ = done.send(());
        });
        Box::pin(async move {
            let _ = wait.await;
        })
    }
}

#[test]
fn a_timer_of_ones_own_runs_the_retries_under_futures_block_on() {
    let timer = ThreadPerSleep::default();
    let asked = Arc::clone(&timer.asked);
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(100)))
        .max_retries(3)
        .timer(timer)
        .build()
        .unwrap();
    let start = Instant::now();
    let error = futures::executor::block_on(stagger::retry(
        &policy,
        || async {
            outside_tokio();
            Err::<u32, _>(refused())
        },
        connect,
    ))
    .unwrap_err();
    let took = start.elapsed();
    let info = error.info();
    assert_eq!(
        (info.attempts(), info.stop_reason()),
        (4, Some(StopReason::MaxRetries))
    );
    assert_eq!(info.slept(), Duration::from_millis(300));
    assert!(took >= Duration::from_millis(300), "{took:?}");
    // One sleep for the first pause; each later pause asks for a new sleep from the timer too.
    assert_eq!(asked.load(Ordering::SeqCst), 3);
}

#[test]
fn without_any_runtime_timer_a_call_under_futures_block_on_still_sleeps() {
    // No policy timer and no tokio runtime: async-io's timer or stagger's timer thread.
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(100)))
        .attempt_timeout(Duration::from_millis(150))
        .max_retries(2)
        .build()
        .unwrap();
    let start = Instant::now();
    let error = futures::executor::block_on(stagger::retry(
        &policy,
        std::future::pending::<Result<u32, io::Error>>,
        connect,
    ))
    .unwrap_err();
    let took = start.elapsed();
    assert!(error.is_attempt_timeout(), "{error:?}");
    assert_eq!(error.info().attempts(), 3);
    // Three attempts of 150 ms, two pauses of 100 ms.
    assert!(took >= Duration::from_millis(650), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}
