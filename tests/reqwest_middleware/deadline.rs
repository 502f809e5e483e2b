//! When a call ends: retries stop at the deadline (in virtual time, against a server in process), and
//! dropping the request mid-sleep cancels the retries.

use std::sync::atomic::{AtomicU32, Ordering};

use stagger::StopReason;
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use super::*;

// In virtual time, against a server in process, so that the times are exact: in real time the second
// 503 had to come back within 100 ms for the call to end before the deadline.
#[tokio::test(start_paused = true)]
async fn retries_stop_at_the_deadline() {
    // The first retry ends 200 ms in, within 300 ms; the second would end 400 ms in, past it, and is
    // not taken: the call ends as the second 503 comes back, 200 ms in, rather than at the deadline.
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(200)))
        .max_retries(10)
        .max_elapsed(ms(300))
        .build()
        .unwrap();
    let hits = Arc::new(AtomicU32::new(0));
    let client = ClientBuilder::new(reqwest_client().build().unwrap())
        .with(RetryMiddleware::new(policy))
        .with(common::Answering {
            status: 503,
            hits: Arc::clone(&hits),
        })
        .build();

    let start = tokio::time::Instant::now();
    let response = client.get("http://in-process.test/").send().await.unwrap();

    assert_eq!(start.elapsed(), ms(200));
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let info = info(&response);
    assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
    assert_eq!(info.attempts(), 2);
    assert_eq!(info.slept(), ms(200));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn dropping_the_request_mid_sleep_cancels_the_retries() {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    // The retry is decided when the first 503 is judged, and its 500 ms sleep starts then.
    let sleeping = Arc::new(AtomicU32::new(0));
    let decided = Arc::clone(&sleeping);
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(500)))
        .on_retry(move |_| {
            decided.fetch_add(1, Ordering::SeqCst);
        });
    let client = client(policy);

    let request = tokio::spawn({
        let url = server.uri();
        async move { client.get(url).send().await }
    });
    // Wait for the retry to be decided (not a fixed time, which a loaded machine may outlast, and
    // abort past the sleep), then abort during the sleep that follows it.
    let retrying = common::until(Duration::from_secs(5), || {
        sleeping.load(Ordering::SeqCst) == 1
    });
    assert!(retrying.await, "no retry decided within 5 s");
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled());
    assert_eq!(hits(&server, "/").await, 1);

    // What it would have sent after its sleep, it never sends: 700 ms is past the 500 ms sleep.
    tokio::time::sleep(ms(700)).await;
    assert_eq!(hits(&server, "/").await, 1);
}
