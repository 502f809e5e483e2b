//! A classifier written as a closure, through `classify::from_fn` with no type annotations, against a
//! real loopback server (wiremock) through both adapters: `RetryMiddleware` and `RetryLayer` over
//! `reqwest::Client`. The features are the README's quick start (`reqwest-middleware`, default on).
#![cfg(all(feature = "reqwest-middleware", feature = "tower"))]

use std::time::Duration;

use reqwest::StatusCode;
use reqwest_middleware::ClientBuilder;
use stagger::classify::{self, AttemptResult, ClassifyHttp, DefaultClassifier};
use stagger::{Backoff, Jitter, RetryInfo, RetryLayer, RetryMiddleware, RetryPolicy, StopReason};
use stagger::{Outcome, Reason};
use tower::{ServiceBuilder, ServiceExt};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// The README's rules: `/payments` is never retried, a `409` on `/orders` is retried like a `5xx`, and
/// everything else as by default. Not one argument type is written out.
fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::exponential(Duration::from_millis(1)).with_jitter(Jitter::None))
        .max_retries(2)
        .classifier(classify::from_fn(|request, result| match result {
            _ if request.path() == Some("/payments") => Outcome::Fatal,
            AttemptResult::Response {
                status: StatusCode::CONFLICT,
                ..
            } if request.path() == Some("/orders") => {
                Outcome::RetryIfIdempotent(Reason::Status(StatusCode::CONFLICT))
            }
            _ => DefaultClassifier.classify(request, result),
        }))
        .build()
        .unwrap()
}

/// `POST /orders` answers `409` once, then `201`; `POST /payments` always answers `503`.
async fn server() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/orders"))
        .respond_with(ResponseTemplate::new(409))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/orders"))
        .respond_with(ResponseTemplate::new(201).set_body_string("placed"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/payments"))
        .respond_with(ResponseTemplate::new(503).set_body_string("down"))
        .mount(&server)
        .await;
    server
}

async fn hits(server: &MockServer, route: &str) -> usize {
    let requests = server.received_requests().await.unwrap_or_default();
    requests.iter().filter(|r| r.url.path() == route).count()
}

fn reqwest_client() -> reqwest::Client {
    // A proxy from the environment must not stand between the client and the loopback server.
    reqwest::Client::builder().no_proxy().build().unwrap()
}

fn info(response: &reqwest::Response) -> RetryInfo {
    response.extensions().get::<RetryInfo>().unwrap().clone()
}

mod middleware {
    use super::*;

    #[tokio::test]
    async fn a_409_on_orders_is_retried_for_a_request_with_an_idempotency_key() {
        let server = server().await;
        let client = ClientBuilder::new(reqwest_client())
            .with(RetryMiddleware::new(policy()))
            .build();
        let response = client
            .post(format!("{}/orders", server.uri()))
            .header("Idempotency-Key", "order-1")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(info(&response).attempts(), 2);
        assert_eq!(hits(&server, "/orders").await, 2);
    }

    #[tokio::test]
    async fn a_409_on_orders_is_not_replayed_for_a_post_without_a_key() {
        let server = server().await;
        let client = ClientBuilder::new(reqwest_client())
            .with(RetryMiddleware::new(policy()))
            .build();
        let response = client
            .post(format!("{}/orders", server.uri()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CONFLICT);
        assert_eq!(
            info(&response).stop_reason(),
            Some(StopReason::NotIdempotent)
        );
        assert_eq!(hits(&server, "/orders").await, 1);
    }

    #[tokio::test]
    async fn a_503_from_payments_is_never_retried_and_returned_intact() {
        let server = server().await;
        let client = ClientBuilder::new(reqwest_client())
            .with(RetryMiddleware::new(policy()))
            .build();
        let response = client
            .post(format!("{}/payments", server.uri()))
            .header("Idempotency-Key", "payment-1")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(info(&response).stop_reason(), Some(StopReason::Fatal));
        assert_eq!(response.text().await.unwrap(), "down");
        assert_eq!(hits(&server, "/payments").await, 1);
    }
}

mod layer {
    use super::*;

    fn request(server: &MockServer, route: &str, key: &str) -> reqwest::Request {
        let mut request = reqwest::Request::new(
            reqwest::Method::POST,
            format!("{}{route}", server.uri()).parse().unwrap(),
        );
        request
            .headers_mut()
            .insert("idempotency-key", key.parse().unwrap());
        request
    }

    #[tokio::test]
    async fn a_409_on_orders_is_retried_for_a_request_with_an_idempotency_key() {
        let server = server().await;
        let client = ServiceBuilder::new()
            .layer(RetryLayer::new(policy()))
            .service(reqwest_client());
        let response = client
            .oneshot(request(&server, "/orders", "order-1"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        assert_eq!(info(&response).attempts(), 2);
        assert_eq!(hits(&server, "/orders").await, 2);
    }

    #[tokio::test]
    async fn a_503_from_payments_is_never_retried_and_returned_intact() {
        let server = server().await;
        let client = ServiceBuilder::new()
            .layer(RetryLayer::new(policy()))
            .service(reqwest_client());
        let response = client
            .oneshot(request(&server, "/payments", "payment-1"))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(info(&response).stop_reason(), Some(StopReason::Fatal));
        assert_eq!(response.text().await.unwrap(), "down");
        assert_eq!(hits(&server, "/payments").await, 1);
    }
}
