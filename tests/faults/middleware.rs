//! Through `RetryMiddleware` over `reqwest::Client`: a server that never answers ends the call at the
//! deadline, which closes the attempt's connection; the attempt timeout ends at the response's head and
//! a slower body is read whole; a failure's `RetryInfo` in the request's extensions; a `503` received
//! before the deadline returned intact when it passes; an attempt past its timeout dropped, a GET
//! retried and a POST not replayed.

use http::Extensions;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use stagger::{Elapsed, RetryInfo, RetryMiddleware, RetryPolicy, RetryReport, StopReason};

use super::slow_body::{SLOW_BODY_TAKES, SLOW_CHUNKS, slow_body_server};
use super::wiremock_servers::{a_503_then_silence, first_answer_late, hits};
use super::*;

fn client(policy: RetryPolicy) -> ClientWithMiddleware {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    ClientBuilder::new(client)
        .with(RetryMiddleware::new(policy))
        .build()
}

fn elapsed_error(error: &reqwest_middleware::Error) -> Elapsed {
    match error {
        reqwest_middleware::Error::Middleware(e) => e
            .downcast_ref::<Elapsed>()
            .unwrap_or_else(|| panic!("a stagger::Elapsed: {e:?}"))
            .clone(),
        other => panic!("expected Error::Middleware(Elapsed), got {other:?}"),
    }
}

#[tokio::test]
async fn a_server_that_never_answers_ends_the_call_at_the_deadline() {
    let (url, accepted) = hung_server().await;
    let client = client(deadline_300ms());
    let report = RetryReport::new();

    let start = Instant::now();
    let result = client.get(&url).with_extension(report.clone()).send().await;
    took(start.elapsed(), ms(300), ms(300) + LATE);

    let error = result.unwrap_err();
    let elapsed = elapsed_error(&error);
    assert!(elapsed.is_deadline());
    assert_eq!(elapsed.limit(), ms(300));
    assert_eq!(elapsed.info().attempts(), 1);
    assert_eq!(
        error.to_string(),
        "deadline of 300ms passed after 1 attempt"
    );
    let info = report.get().expect("the report is written");
    assert_eq!(info, elapsed.info());
    assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_deadline_closes_the_connection_of_the_attempt_in_flight() {
    let server = Hung::start().await;
    let client = client(deadline_300ms());

    let start = Instant::now();
    let result = client.get(&server.url).send().await;
    let ended = Instant::now();

    assert!(elapsed_error(&result.unwrap_err()).is_deadline());
    assert_closed_at_the_deadline(&server, start, ms(300), ended).await;
}

#[tokio::test]
async fn attempt_timeout_ends_at_the_head_and_a_slower_body_is_read_whole() {
    let (url, accepted) = slow_body_server().await;
    let client = client(attempt_timeout_200ms());

    let start = Instant::now();
    let response = client.get(&url).send().await.expect("the 200");
    let info = RetryInfo::of(response.extensions());
    let body = response.bytes().await.expect("the whole body");

    // The body took longer than the attempt's time limit.
    assert!(start.elapsed() >= SLOW_BODY_TAKES);
    assert_eq!(body, SLOW_CHUNKS.concat());
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn execute_with_extensions_gives_the_retry_info_of_a_failure() {
    let (url, _) = hung_server().await;
    let client = client(deadline_300ms());
    let request = client.get(&url).build().unwrap();
    let mut extensions = Extensions::new();

    let result = client
        .execute_with_extensions(request, &mut extensions)
        .await;

    assert!(result.is_err());
    let info = extensions
        .get::<RetryInfo>()
        .expect("RetryInfo in the extensions")
        .clone();
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
}

#[tokio::test]
async fn a_503_received_before_the_deadline_is_returned_intact_when_it_passes() {
    let server = a_503_then_silence().await;
    let client = client(deadline_300ms());

    let start = Instant::now();
    let response = client.get(server.uri()).send().await.expect("the 503");
    took(start.elapsed(), ms(300), ms(300) + LATE);

    assert_eq!(response.status(), 503);
    let info = RetryInfo::of(response.extensions());
    assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
    assert_eq!(
        info.attempts(),
        2,
        "the second was cut short at the deadline"
    );
    assert_eq!(response.headers()["x-attempt"], "first");
    assert_eq!(response.text().await.unwrap(), "overloaded");
    assert_eq!(hits(&server).await, 2);
}

#[tokio::test]
async fn an_attempt_past_its_timeout_is_dropped_and_a_get_retried() {
    let server = first_answer_late().await;
    let client = client(attempt_timeout_200ms());

    let start = Instant::now();
    let response = client.get(server.uri()).send().await.expect("the 200");
    took(start.elapsed(), ms(200), ms(600));

    assert_eq!(response.status(), 200);
    let info = RetryInfo::of(response.extensions());
    assert_eq!(info.attempts(), 2);
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    assert_eq!(response.text().await.unwrap(), "ok");
    assert_eq!(hits(&server).await, 2);
}

#[tokio::test]
async fn a_post_past_its_timeout_is_not_replayed_and_says_it_timed_out() {
    let server = first_answer_late().await;
    let client = client(attempt_timeout_200ms());
    let report = RetryReport::new();

    let start = Instant::now();
    let result = client
        .post(server.uri())
        .body("charge")
        .with_extension(report.clone())
        .send()
        .await;
    took(start.elapsed(), ms(200), ms(600));

    let elapsed = elapsed_error(&result.unwrap_err());
    assert!(elapsed.is_attempt_timeout());
    assert_eq!(elapsed.limit(), ms(200));
    let info = report.get().unwrap();
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::NotIdempotent));
    assert_eq!(hits(&server).await, 1);
}
