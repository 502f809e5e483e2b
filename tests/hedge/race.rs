//! In virtual time, over an in-process service: the race's rules.

use std::convert::Infallible;
use std::sync::Mutex;

use http::{Request, Response};
use tower::{Layer, service_fn};

use super::*;

/// Which calls answered, in the order they did.
type Answered = Arc<Mutex<Vec<usize>>>;

/// A service that answers the n-th call after `script[n].0` ms with status `script[n].1`.
fn scripted(
    script: &'static [(u64, u16)],
) -> (
    impl tower::Service<Request<()>, Response = Response<&'static str>, Error = Infallible> + Clone,
    Answered,
) {
    let calls = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&answered);
    let service = service_fn(move |_: Request<()>| {
        let n = calls.fetch_add(1, Ordering::SeqCst);
        let (delay, status) = script[n.min(script.len() - 1)];
        let log = Arc::clone(&log);
        async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            log.lock().unwrap().push(n);
            Ok(Response::builder().status(status).body("").unwrap())
        }
    });
    (service, answered)
}

fn get() -> Request<()> {
    Request::get("http://api.test/").body(()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_failure_while_the_other_attempt_runs_is_set_aside_for_its_answer() {
    // The first attempt answers 200 at 300 ms; the hedge, started at 100 ms, fails at 150 ms.
    let (service, answered) = scripted(&[(300, 200), (50, 503)]);
    let policy = hedging().max_retries(3).build().unwrap();
    let start = tokio::time::Instant::now();
    let response = RetryLayer::new(policy)
        .layer(service)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(start.elapsed(), Duration::from_millis(300));
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (2, 1));
    assert_eq!(*answered.lock().unwrap(), [1, 0]);
}

#[tokio::test(start_paused = true)]
async fn when_both_attempts_of_a_race_fail_the_call_retries_as_usual() {
    // First: 503 at 150 ms; hedge (100 ms): 503 at 120 ms, set aside; then a retry succeeds.
    let (service, _) = scripted(&[(150, 503), (20, 503), (10, 200)]);
    let policy = hedging()
        .backoff(stagger::Backoff::fixed(Duration::from_millis(10)))
        .max_retries(3)
        .build()
        .unwrap();
    let response = RetryLayer::new(policy)
        .layer(service)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (3, 1));
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_a_lost_race_is_hedged_while_within_max_retries() {
    // Race 1: the first attempt and its hedge both fail. The retry (attempt 3 of 4 allowed) is
    // slow, and its hedge (the 4th) answers: earlier hedges count once towards max_retries.
    let (service, _) = scripted(&[(150, 503), (20, 503), (300, 200), (10, 200)]);
    let policy = hedging()
        .backoff(stagger::Backoff::fixed(Duration::from_millis(10)))
        .max_retries(3)
        .build()
        .unwrap();
    let response = RetryLayer::new(policy)
        .layer(service)
        .oneshot(get())
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (4, 2));
}

#[tokio::test(start_paused = true)]
async fn a_hedge_counts_towards_max_retries() {
    let (service, answered) = scripted(&[(300, 200)]);
    let policy = hedging().max_retries(0).build().unwrap();
    let response = RetryLayer::new(policy)
        .layer(service)
        .oneshot(get())
        .await
        .unwrap();
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (1, 0));
    assert_eq!(answered.lock().unwrap().len(), 1);
}

#[test]
fn hedge_after_zero_is_refused() {
    assert_eq!(
        RetryPolicy::builder()
            .hedge_after(Duration::ZERO)
            .build()
            .unwrap_err(),
        stagger::ConfigError::HedgeAfter(Duration::ZERO)
    );
}
