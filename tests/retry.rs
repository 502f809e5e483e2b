//! `stagger::retry`, the adapter for any async operation: it runs the operation until its classifier
//! calls a result a success or fatal, or the policy stops, and ends with the last value or an error
//! that says what the retries did.
//!
//! Its deadline and attempt timeout against real sockets are in `tests/faults/generic_retry.rs`,
//! beside the other adapters'; its adaptive throttling is in `tests/overload.rs`, and how it judges a
//! body that does not decode in `tests/classify.rs`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use stagger::{Backoff, Jitter, Outcome, Reason, RetryPolicy, StopReason};

const MS: Duration = Duration::from_millis(1);

/// Delays of exactly 100, 200, 400 ms …: no jitter, no budget.
fn base() -> stagger::RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::exponential(100 * MS).with_jitter(Jitter::None))
        .budget(None)
        .seed(7)
}

#[tokio::test(start_paused = true)]
async fn retry_runs_an_operation_until_it_succeeds_sleeping_between_attempts() {
    let policy = base().max_retries(5).build().unwrap();
    let calls = AtomicU32::new(0);
    let start = tokio::time::Instant::now();
    let result = stagger::retry(
        &policy,
        || async {
            let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
            if n < 3 {
                Err("not yet")
            } else {
                Ok::<_, &str>(n)
            }
        },
        |result| match result {
            Ok(_) => Outcome::Success,
            Err(_) => Outcome::RetrySafe(Reason::Other("not yet")),
        },
    )
    .await;
    assert_eq!(result.unwrap(), 3);
    assert_eq!(start.elapsed(), 300 * MS);
}

#[tokio::test(start_paused = true)]
async fn retry_returns_the_last_error_when_the_policy_gives_up() {
    let policy = base().max_retries(2).build().unwrap();
    let calls = AtomicU32::new(0);
    let result = stagger::retry(
        &policy,
        || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
        },
        |result| match result {
            Ok(_) => Outcome::Success,
            Err(e) => stagger::classify::DefaultClassifier::error(e),
        },
    )
    .await;
    let error = result.unwrap_err();
    assert_eq!(error.info().attempts(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
    assert_eq!(
        error.inner().map(std::io::Error::kind),
        Some(std::io::ErrorKind::ConnectionRefused)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

/// The README's "any async operation" quick start, with a 1 ms backoff, against a port nothing listens
/// on: what its `main` prints when it returns the error (`Error: ` and the error's `Debug`, through the
/// `Box<dyn Error>` that `?` makes of it) says why the retries stopped, what they did, and the inner
/// error's own message.
#[tokio::test]
async fn a_main_that_returns_the_error_prints_what_the_retries_did_and_the_inner_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = listener.local_addr().unwrap();
    drop(listener);
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(MS))
        .max_retries(20)
        .max_elapsed(Duration::from_secs(60))
        .budget(None)
        .build()
        .unwrap();

    let connected = stagger::retry(
        &policy,
        || tokio::net::TcpStream::connect(closed),
        |result| match result {
            Ok(_) => Outcome::Success,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                Outcome::RetrySafe(Reason::Connect)
            }
            Err(_) => Outcome::Fatal,
        },
    )
    .await;
    let error: Box<dyn std::error::Error> = connected.map(drop).unwrap_err().into();

    let refused = error.source().expect("the inner error");
    let io = refused
        .downcast_ref::<std::io::Error>()
        .expect("an io::Error");
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(
        format!("{error:?}"),
        format!("gave up after 21 attempts (max retries reached, 20ms asleep): {refused}")
    );
    #[cfg(target_os = "linux")]
    assert_eq!(refused.to_string(), "Connection refused (os error 111)");
    assert_eq!(
        error.to_string(),
        "gave up after 21 attempts (max retries reached)"
    );
}

/// 1 000 operations of `stagger::retry` to a backend that times out, all at once, each through a
/// policy built for it at one place in the code (`operation`), or all through one.
async fn per_operation_policies(shared: bool) -> f64 {
    let reached = AtomicU32::new(0);
    let one = RetryPolicy::builder()
        .attempt_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let operation = |policy: RetryPolicy| {
        let reached = &reached;
        async move {
            let hangs = || async {
                reached.fetch_add(1, Ordering::SeqCst);
                std::future::pending::<Result<(), ()>>().await
            };
            let _ = stagger::retry(&policy, hangs, |_| Outcome::Success).await;
        }
    };
    let calls = (0..1000).map(|_| {
        let policy = if shared {
            one.clone()
        } else {
            RetryPolicy::builder()
                .attempt_timeout(Duration::from_secs(1))
                .build()
                .unwrap()
        };
        operation(policy)
    });
    futures::future::join_all(calls).await;
    f64::from(reached.load(Ordering::SeqCst)) / 1000.0
}

/// Issue 35, item 5: a policy built for each operation of `stagger::retry` brought a fresh starting
/// credit with each (3.00 attempts an operation to a backend that times out, against 1.02 through
/// one policy): an operation has no host, and its credit is now its call site's, the process's.
#[tokio::test(start_paused = true)]
async fn operations_built_each_with_a_policy_of_their_own_share_their_call_site_s_starting_credit()
{
    let each = per_operation_policies(false).await;
    let shared = per_operation_policies(true).await;
    assert!(
        each <= 1.01,
        "{each} attempts an operation, each with a policy of its own"
    );
    assert!(
        shared <= 1.05,
        "{shared} attempts an operation, through one policy"
    );
}
