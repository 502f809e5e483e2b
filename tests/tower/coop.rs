//! Zero delays: retries without a delay spend tokio's cooperative budget and never touch the timer.

use std::sync::atomic::Ordering;

use http::StatusCode;

use super::*;

#[tokio::test]
async fn zero_delay_retries_spend_the_cooperative_budget_and_then_yield() {
    // On this current-thread runtime the spawned task runs only when the retrying one yields. A service
    // that fails at once, retried without a delay, retries at once while the task has tokio's budget
    // (128 units per poll), and must then let the other task run: it cannot keep the thread to itself.
    let other_ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = Arc::clone(&other_ran);
    tokio::spawn(async move { flag.store(true, Ordering::SeqCst) });
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    let hits = Hits::default();
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::ZERO))
        .max_retries(1000)
        .budget(None)
        .breaker(None)
        .build()
        .unwrap();

    let response = send(
        policy,
        server(&hits, move |_, _| {
            record
                .lock()
                .unwrap()
                .push(other_ran.load(Ordering::SeqCst));
            status(503)
        }),
        get(),
    )
    .await
    .unwrap();

    assert_eq!(hits.count(), 1001);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let seen = seen.lock().unwrap();
    let before = seen.iter().take_while(|&&ran| !ran).count();
    // Zero-delay retries do not wait for the runtime: several go out before the first yield…
    assert!(before > 1, "the other task ran after {before} attempt(s)");
    // …but the budget runs out long before the retries do, and once the other task has run it stays run.
    assert!(
        before <= 129,
        "the other task ran only after {before} attempts"
    );
    assert!(seen[before..].iter().all(|&ran| ran));
}

#[test]
fn a_zero_delay_retry_does_not_go_through_the_timer() {
    // A runtime without a timer: `tokio::time::sleep` would panic in it.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let hits = Hits::default();
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::ZERO))
        .max_retries(3)
        .budget(None)
        .build()
        .unwrap();

    let response = runtime
        .block_on(send(policy, server(&hits, |_, _| status(503)), get()))
        .unwrap();

    assert_eq!(hits.count(), 4);
    assert_eq!(info(&response).slept(), Duration::ZERO);
}
