//! Errors and client timeouts: a refused connection retried and reqwest's error returned as it came, a
//! GET that timed out retried and its timeout returned, a POST that timed out sent once.

use std::sync::atomic::{AtomicU32, Ordering};

use stagger::{Reason, RetryReport, StopReason};
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use super::*;

#[tokio::test]
async fn connection_refused_is_retried_and_the_reqwest_error_returned() {
    let closed = common::ClosedPort::new();
    let retries = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&retries);
    let events = Events::default();
    let hook = events.hook();
    let client = client(
        RetryPolicy::builder()
            .backoff(Backoff::exponential(ms(1)).with_jitter(Jitter::None))
            .on_retry(move |event| {
                counter.fetch_add(1, Ordering::SeqCst);
                hook(event);
            }),
    );

    let report = RetryReport::new();
    let result = client
        .get(closed.url())
        .with_extension(report.clone())
        .send()
        .await;

    match result {
        Err(reqwest_middleware::Error::Reqwest(e)) => {
            assert!(e.is_connect(), "a connect error: {e:?}")
        }
        other => panic!("expected the reqwest connect error, got {other:?}"),
    }
    let info = report.get().expect("the report is written");
    assert_eq!(info.attempts(), 11);
    assert_eq!(info.stop_reason(), Some(StopReason::MaxRetries));
    assert_eq!(
        retries.load(Ordering::SeqCst),
        RetryPolicy::DEFAULT_MAX_RETRIES,
        "11 attempts in all"
    );
    assert!(events.all().iter().all(|e| e.reason == Reason::Connect));
}

#[tokio::test]
async fn client_timeouts_are_returned_as_reqwest_errors_after_retrying_a_get() {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(200).set_delay(NEVER))
        .mount(&server)
        .await;
    let events = Events::default();
    // The default budget: a new client's starting credit pays for retrying its first two timeouts.
    let client = client_with(
        reqwest_client().timeout(CLIENT_TIMEOUT).build().unwrap(),
        quick().on_retry(events.hook()).build().unwrap(),
    );

    let report = RetryReport::new();
    let result = client
        .get(server.uri())
        .with_extension(report.clone())
        .send()
        .await;

    match result {
        Err(reqwest_middleware::Error::Reqwest(e)) => {
            assert!(e.is_timeout(), "a timeout: {e:?}")
        }
        other => panic!("expected the reqwest timeout, got {other:?}"),
    }
    assert_eq!(hits(&server, "/").await, 3);
    let info = report.get().expect("the report is written");
    assert_eq!(info.attempts(), 3);
    assert_eq!(info.stop_reason(), Some(StopReason::MaxRetries));
    let events = events.all();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.reason == Reason::Timeout));
}

#[tokio::test]
async fn a_post_that_timed_out_is_not_replayed() {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(200).set_delay(NEVER))
        .mount(&server)
        .await;
    let client = client_with(
        reqwest_client().timeout(CLIENT_TIMEOUT).build().unwrap(),
        quick().build().unwrap(),
    );

    let report = RetryReport::new();
    let result = client
        .post(server.uri())
        .body("charge")
        .with_extension(report.clone())
        .send()
        .await;

    assert!(
        matches!(&result, Err(reqwest_middleware::Error::Reqwest(e)) if e.is_timeout()),
        "{result:?}"
    );
    assert_eq!(hits(&server, "/").await, 1);
    let info = report.get().expect("the report is written");
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::NotIdempotent));
}
