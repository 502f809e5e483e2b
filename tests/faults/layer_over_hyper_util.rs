//! Through `RetryLayer` over hyper-util's client: a server that never answers ends the call at the
//! deadline, which closes the attempt's connection; the attempt timeout ends at the response's head and
//! a slower body is read whole; a `503` received before the deadline returned intact when it passes; an
//! attempt past its timeout dropped, a GET retried and a POST not replayed.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use stagger::{RetryInfo, RetryLayer, StopReason};
use tower::{ServiceBuilder, ServiceExt};

use super::slow_body::{SLOW_BODY_TAKES, SLOW_CHUNKS, slow_body_server};
use super::wiremock_servers::{a_503_then_silence, first_answer_late, hits};
use super::*;

type Response = http::Response<hyper::body::Incoming>;

async fn send(
    policy: RetryPolicy,
    method: http::Method,
    url: &str,
) -> Result<Response, stagger::Error<hyper_util::client::legacy::Error>> {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let request = Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(Bytes::from_static(b"x")))
        .unwrap();
    ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(client)
        .oneshot(request)
        .await
}

#[tokio::test]
async fn a_server_that_never_answers_ends_the_call_at_the_deadline() {
    let (url, accepted) = hung_server().await;

    let start = Instant::now();
    let error = send(deadline_300ms(), http::Method::GET, &url)
        .await
        .unwrap_err();
    took(start.elapsed(), ms(300), ms(300) + LATE);

    assert!(error.is_deadline(), "{error:?}");
    assert_eq!(error.info().attempts(), 1);
    assert_eq!(error.info().stop_reason(), Some(StopReason::Deadline));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_deadline_closes_the_connection_of_the_attempt_in_flight() {
    let server = Hung::start().await;

    let start = Instant::now();
    let error = send(deadline_300ms(), http::Method::GET, &server.url)
        .await
        .unwrap_err();
    let ended = Instant::now();

    assert!(error.is_deadline(), "{error:?}");
    assert_closed_at_the_deadline(&server, start, ms(300), ended).await;
}

#[tokio::test]
async fn attempt_timeout_ends_at_the_head_and_a_slower_body_is_read_whole() {
    let (url, accepted) = slow_body_server().await;

    let start = Instant::now();
    let response = send(attempt_timeout_200ms(), http::Method::GET, &url)
        .await
        .expect("the 200");
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("the whole body");

    // The body took longer than the attempt's time limit.
    assert!(start.elapsed() >= SLOW_BODY_TAKES);
    assert_eq!(body.to_bytes(), SLOW_CHUNKS.concat());
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_503_received_before_the_deadline_is_returned_intact_when_it_passes() {
    let server = a_503_then_silence().await;

    let start = Instant::now();
    let response = send(deadline_300ms(), http::Method::GET, &server.uri())
        .await
        .expect("the 503");
    took(start.elapsed(), ms(300), ms(300) + LATE);

    assert_eq!(response.status(), 503);
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
    assert_eq!(info.attempts(), 2);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "overloaded");
    assert_eq!(hits(&server).await, 2);
}

#[tokio::test]
async fn an_attempt_past_its_timeout_is_dropped_and_a_get_retried() {
    let server = first_answer_late().await;

    let start = Instant::now();
    let response = send(attempt_timeout_200ms(), http::Method::GET, &server.uri())
        .await
        .expect("the 200");
    took(start.elapsed(), ms(200), ms(600));

    assert_eq!(response.status(), 200);
    assert_eq!(
        response
            .extensions()
            .get::<RetryInfo>()
            .unwrap()
            .clone()
            .attempts(),
        2
    );
    assert_eq!(hits(&server).await, 2);
}

#[tokio::test]
async fn a_post_past_its_timeout_is_not_replayed_and_says_it_timed_out() {
    let server = first_answer_late().await;

    let error = send(attempt_timeout_200ms(), http::Method::POST, &server.uri())
        .await
        .unwrap_err();

    assert!(error.is_attempt_timeout(), "{error:?}");
    assert_eq!(error.info().attempts(), 1);
    assert_eq!(error.info().stop_reason(), Some(StopReason::NotIdempotent));
    assert_eq!(hits(&server).await, 1);
}
