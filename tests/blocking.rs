//! `stagger::blocking::retry`: a blocking operation retried on the calling thread, which sleeps
//! between attempts, over the same state machine as `stagger::retry`: reqwest's blocking client
//! against a real server on loopback, and the same scripted outcomes through both, which end with
//! the same `RetryInfo` (attempts, time slept, stop reason) under the same seed.
#![cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]

use std::io::{self, BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use stagger::classify::DefaultClassifier;
use stagger::{Backoff, Outcome, Reason, RetryBudget, RetryInfo, RetryPolicy, StopReason};

/// A server on loopback that answers its connections in turn with `answers` (the last one again
/// after the end), each on a connection of its own, and keeps when each request arrived.
fn serve(answers: &'static [&'static str]) -> (String, Arc<Mutex<Vec<Instant>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = format!("http://{}/", listener.local_addr().unwrap());
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&arrivals);
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let mut stream = stream.unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap() > 2 {
                line.clear();
            }
            seen.lock().unwrap().push(Instant::now());
            let answer = answers[n.min(answers.len() - 1)];
            let _ = write!(
                stream,
                "HTTP/1.1 {answer}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    (address, arrivals)
}

/// What a blocking reqwest user classifies with: the default classifier's rules, and a server's
/// delay (`Retry-After`) as a floor.
fn classify(result: &reqwest::Result<reqwest::blocking::Response>) -> Outcome {
    match result {
        Ok(response) => {
            let outcome = DefaultClassifier::status(response.status());
            let asked = stagger::server_delay(response.headers(), SystemTime::now());
            match (outcome, asked) {
                (Outcome::RetrySafe(reason) | Outcome::RetryIfIdempotent(reason), Some(delay)) => {
                    Outcome::RetryAfter(reason, delay)
                }
                (outcome, _) => outcome,
            }
        }
        Err(error) => DefaultClassifier::error(error),
    }
}

#[test]
fn reqwest_blocking_gets_a_200_after_a_503_that_asked_for_a_second() {
    let (url, arrivals) = serve(&["503 Service Unavailable\r\nretry-after: 1", "200 OK"]);
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .unwrap();
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(10)))
        .build()
        .unwrap();
    let response = stagger::blocking::retry(&policy, || client.get(&url).send(), classify).unwrap();
    assert_eq!(response.status(), 200);
    let arrivals = arrivals.lock().unwrap();
    assert_eq!(arrivals.len(), 2);
    let gap = arrivals[1] - arrivals[0];
    assert!(
        gap >= Duration::from_secs(1),
        "the retry came {gap:?} after the 503"
    );
    assert!(
        gap < Duration::from_secs(3),
        "the retry came {gap:?} after the 503"
    );
}

#[test]
fn reqwest_blocking_retries_a_refused_connection_until_max_retries() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", closed.local_addr().unwrap());
    drop(closed);
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .unwrap();
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(20)))
        .max_retries(3)
        .build()
        .unwrap();
    let started = Instant::now();
    let error =
        stagger::blocking::retry(&policy, || client.get(&url).send(), classify).unwrap_err();
    let info = error.info();
    assert_eq!(
        (info.attempts(), info.stop_reason()),
        (4, Some(StopReason::MaxRetries))
    );
    assert_eq!(info.slept(), Duration::from_millis(60));
    assert!(started.elapsed() >= Duration::from_millis(60));
    assert!(error.into_inner().is_some_and(|error| error.is_connect()));
}

/// Runs the outcomes of `script` (one an attempt; the last one again after the end) through
/// `stagger::blocking::retry` and through `stagger::retry` on a tokio runtime, each under a policy
/// `policy` builds, and gives both calls' `RetryInfo`.
fn both(
    policy: impl Fn() -> RetryPolicy,
    script: &'static [Result<(), io::ErrorKind>],
    attempt_takes: Duration,
) -> (RetryInfo, RetryInfo) {
    let info = |result: Result<(), stagger::Error<io::Error>>| match result {
        Ok(()) => None,
        Err(error) => Some(error.info()),
    };
    let judge = |result: &Result<(), io::Error>| match result {
        Ok(()) => Outcome::Success,
        Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
            Outcome::RetrySafe(Reason::Connect)
        }
        Err(_) => Outcome::Fatal,
    };
    let step = |n: usize| script[n.min(script.len() - 1)].map_err(io::Error::from);

    let blocking_policy = policy();
    let mut n = 0;
    let blocking = stagger::blocking::retry(
        &blocking_policy,
        || {
            std::thread::sleep(attempt_takes);
            n += 1;
            step(n - 1)
        },
        judge,
    );
    let blocking = info(blocking).unwrap_or_default();

    let async_policy = policy();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut n = 0;
    let asynchronous = runtime.block_on(stagger::retry(
        &async_policy,
        || {
            n += 1;
            let result = step(n - 1);
            async move {
                tokio::time::sleep(attempt_takes).await;
                result
            }
        },
        judge,
    ));
    let asynchronous = info(asynchronous).unwrap_or_default();
    (blocking, asynchronous)
}

fn seeded() -> stagger::RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::exponential(Duration::from_millis(5)))
        .seed(7)
}

#[test]
fn max_retries_end_both_alike_after_the_same_jittered_sleeps() {
    use io::ErrorKind::ConnectionRefused;
    let (blocking, asynchronous) = both(
        || seeded().max_retries(4).build().unwrap(),
        &[Err(ConnectionRefused)],
        Duration::ZERO,
    );
    assert_eq!(blocking.stop_reason(), Some(StopReason::MaxRetries));
    assert_eq!(blocking.attempts(), 5);
    assert_eq!(blocking, asynchronous);
}

#[test]
fn a_fatal_error_ends_both_alike() {
    use io::ErrorKind::{ConnectionRefused, PermissionDenied};
    let (blocking, asynchronous) = both(
        || seeded().build().unwrap(),
        &[Err(ConnectionRefused), Err(PermissionDenied)],
        Duration::ZERO,
    );
    assert_eq!(
        (blocking.attempts(), blocking.stop_reason()),
        (2, Some(StopReason::Fatal))
    );
    assert_eq!(blocking, asynchronous);
}

#[test]
fn the_budget_ends_both_alike() {
    use io::ErrorKind::ConnectionRefused;
    let budget = || {
        RetryBudget::builder()
            .ratio(0.0)
            .min_per_second(2)
            .window(Duration::from_secs(1))
            .own_starting_credit(true)
            .build()
            .unwrap()
    };
    let (blocking, asynchronous) = both(
        || seeded().budget(budget()).build().unwrap(),
        &[Err(ConnectionRefused)],
        Duration::ZERO,
    );
    assert_eq!(blocking.stop_reason(), Some(StopReason::Budget));
    assert_eq!(blocking.retries(), 2);
    assert_eq!(blocking, asynchronous);
}

#[test]
fn the_deadline_ends_both_after_the_attempts_it_had_room_for() {
    use io::ErrorKind::ConnectionRefused;
    // Attempts of 100 ms, 10 ms apart, within 300 ms: the third ends at 320 ms, past it (and the
    // second's retry has 80 ms of room to spare, for a loaded machine).
    let (blocking, asynchronous) = both(
        || {
            RetryPolicy::builder()
                .backoff(Backoff::fixed(Duration::from_millis(10)))
                .max_elapsed(Duration::from_millis(300))
                .build()
                .unwrap()
        },
        &[Err(ConnectionRefused)],
        Duration::from_millis(100),
    );
    assert_eq!(blocking.stop_reason(), Some(StopReason::Deadline));
    assert_eq!(asynchronous.stop_reason(), Some(StopReason::Deadline));
    // The async call cuts its third attempt at the deadline; the blocking one cannot, and judges
    // it when it returns: three attempts both.
    assert_eq!((blocking.attempts(), asynchronous.attempts()), (3, 3));
    assert_eq!(blocking.slept(), asynchronous.slept());
}

/// Blocking code called inside a tokio task, as a `#[tokio::test]` of it would: more zero-delay
/// retries than the task's cooperative budget (128) do not stop the call. (The async adapters spend
/// a unit of it on each zero delay, to let the task's neighbours run; a blocked thread cannot yield,
/// and it parked for good at the 129th, its wake deferred until the task yielded.)
#[test]
fn called_inside_a_tokio_task_zero_delay_retries_past_the_task_s_budget_do_not_hang() {
    let (ended, attempts) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let policy = RetryPolicy::builder()
            .backoff(Backoff::fixed(Duration::ZERO))
            .max_retries(300)
            .budget(None)
            .build()
            .unwrap();
        let refused = || Err::<(), _>(io::Error::from(io::ErrorKind::ConnectionRefused));
        let connect = |_: &Result<(), io::Error>| Outcome::RetrySafe(Reason::Connect);
        let error = runtime
            .block_on(async { stagger::blocking::retry(&policy, refused, connect) })
            .unwrap_err();
        ended.send(error.info().attempts()).unwrap();
    });
    let attempts = attempts.recv_timeout(Duration::from_secs(10));
    assert_eq!(
        attempts,
        Ok(301),
        "the call returned, after its 300 retries"
    );
}
