//! hyper-util's legacy client under the layer, against wiremock on loopback.

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use stagger::{Reason, StopReason};
use wiremock::matchers::method;
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;

fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

fn get(uri: &str) -> Request<Full<Bytes>> {
    Request::get(uri).body(Full::new(Bytes::new())).unwrap()
}

#[tokio::test]
async fn fails_twice_then_succeeds() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(2)
        .with_priority(1)
        .expect(2)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
        .with_priority(2)
        .expect(1)
        .mount(&server)
        .await;

    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(exact(ms(1)).build().unwrap()))
        .service(client());
    // Spawned: the future must be `Send + 'static`.
    let response = tokio::spawn(service.oneshot(get(&server.uri())))
        .await
        .unwrap()
        .unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    let info = info(&response);
    assert_eq!(info.attempts(), 3);
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "ok");
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
    server.verify().await;
}

#[tokio::test]
async fn connect_refused_is_classified_as_connect_and_the_error_still_answers_is_connect() {
    let closed = common::ClosedPort::new();
    let (policy, events) = recorded(exact(ms(1)).max_retries(2));

    let error = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(client())
        .oneshot(get(&closed.url()))
        .await
        .unwrap_err();

    assert!(error.inner().unwrap().is_connect(), "{error:?}");
    assert_eq!(error.info().attempts(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.reason == Reason::Connect));
}
