//! What a waiting call costs in memory: 100 000 calls through `RetryLayer`, each spawned as a tokio
//! task, all waiting at once, measured by the growth of the process's resident memory (Linux's
//! `/proc/self/statm`, as the herd measures its peak). Three ways to wait: an attempt in flight under
//! its time limits (the deadline and the attempt timeout armed), the sleep before a retry (the
//! delay state on the heap, a timer armed), and held for a down host before the first attempt (the
//! breaker's, the request itself kept uncopied). Each figure is of calls all still waiting. The inner service is a `service_fn` whose future is small,
//! so the figure is the layer's, tokio's task and timer included, not a client's connection.
//!
//! `cargo test --test footprint -- --nocapture` prints the figures.
#![cfg(all(feature = "tower", target_os = "linux"))]

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use stagger::{Breaker, RetryLayer, RetryPolicy};
use tower::{Layer, Service, ServiceExt, service_fn};

const CALLS: usize = 100_000;

/// The process's resident memory, in bytes.
fn resident() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = (statm.split_whitespace().nth(1))
        .and_then(|field| field.parse().ok())
        .expect("a resident page count");
    pages * 4096
}

/// The resident memory each of `CALLS` calls adds while they all wait, in bytes, and the calls, still
/// waiting: they stay alive until the test ends, so that a later measure is not made on memory an
/// earlier one freed.
async fn per_waiting_call<S, F>(
    policy: RetryPolicy,
    make: impl Fn() -> S,
) -> (usize, Vec<tokio::task::JoinHandle<()>>)
where
    S: Service<http::Request<String>, Response = http::Response<String>, Future = F>
        + Clone
        + Send
        + 'static,
    S::Error: stagger::adapter::AsError + Send + 'static,
    F: Future<Output = Result<http::Response<String>, S::Error>> + Send + 'static,
{
    let layer = RetryLayer::new(policy);
    // A warm-up call, so that the runtime's and the policy's first allocations are not counted.
    let warm = layer.layer(make());
    let _warm = tokio::spawn(async move {
        let _ = warm.oneshot(request()).await;
    });
    tokio::time::sleep(Duration::from_millis(1)).await;

    let before = resident();
    let mut tasks = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let service = layer.layer(make());
        tasks.push(tokio::spawn(async move {
            let _ = service.oneshot(request()).await;
        }));
    }
    // The clock is paused: it moves only once every task has been polled and waits. A millisecond
    // ends no attempt (10 s) and at most a few of the sleeps before a retry, whose calls then wait
    // again.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let grown = resident().saturating_sub(before);
    // Every call is still waiting: none has ended and given its memory back.
    let ended = tasks.iter().filter(|task| task.is_finished()).count();
    assert_eq!(
        ended, 0,
        "calls ended: the figure would be per call, not per waiting call"
    );
    (grown / CALLS, tasks)
}

fn request() -> http::Request<String> {
    http::Request::get("http://api.example.test/items")
        .header("accept", "application/json")
        .body(String::new())
        .expect("a valid request")
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_waiting_call_costs_at_most_2_kib() {
    let unavailable = || {
        service_fn(|_: http::Request<String>| async {
            let mut response = http::Response::new(String::new());
            *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
            Ok::<_, Infallible>(response)
        })
    };
    let (in_flight, _calls) = per_waiting_call(RetryPolicy::default(), || {
        service_fn(|_: http::Request<String>| std::future::pending::<Result<_, Infallible>>())
    })
    .await;
    // Without a budget, so that every call sleeps before its retry rather than ending.
    let no_budget = RetryPolicy::builder().budget(None).build().unwrap();
    let (in_backoff, _more_calls) = per_waiting_call(no_budget, unavailable).await;
    // The host is found down after five 503s: every later call waits for it, unsent.
    let holding = RetryPolicy::builder()
        .breaker(Breaker::default())
        .build()
        .unwrap();
    let (held, _held_calls) = per_waiting_call(holding, unavailable).await;
    println!(
        "resident memory per waiting call: {in_flight} B with its attempt in flight, \
         {in_backoff} B asleep before a retry, {held} B held for a down host ({CALLS} calls each)"
    );
    assert!(in_flight <= 2048, "{in_flight} B per call in flight");
    assert!(in_backoff <= 2048, "{in_backoff} B per call asleep");
    assert!(held <= 2048, "{held} B per call held");
}
