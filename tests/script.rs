//! `stagger::wiremock::Script` (issue 38, item 2): a wiremock responder that answers in order and
//! keeps when each request arrived, through both adapters against a real wiremock server, in real
//! time (a socket's test cannot run on tokio's paused clock: `docs/testing.md`).
#![cfg(all(
    feature = "wiremock",
    feature = "tower",
    feature = "reqwest-middleware"
))]

use std::time::Duration;

use http::StatusCode;
use reqwest_middleware::ClientBuilder;
use stagger::wiremock::Script;
use stagger::{Backoff, RetryInfo, RetryLayer, RetryMiddleware, RetryPolicy};
use tower::{ServiceBuilder, ServiceExt};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(20)))
        .build()
        .unwrap()
}

/// One GET of `url` through `RetryMiddleware`: the status and the attempts.
async fn via_middleware(url: &str) -> (u16, u32) {
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(policy()))
        .build();
    let response = client.get(url).send().await.unwrap();
    let attempts = response
        .extensions()
        .get::<RetryInfo>()
        .unwrap()
        .clone()
        .attempts();
    (response.status().as_u16(), attempts)
}

/// One GET of `url` through `RetryLayer` over `reqwest::Client`: the status and the attempts.
async fn via_layer(url: &str) -> (u16, u32) {
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy()))
        .service(reqwest::Client::new());
    let request = reqwest::Request::new(reqwest::Method::GET, url.parse().unwrap());
    let response = client.oneshot(request).await.unwrap();
    let attempts = response
        .extensions()
        .get::<RetryInfo>()
        .unwrap()
        .clone()
        .attempts();
    (response.status().as_u16(), attempts)
}

#[tokio::test]
async fn five_hundred_and_three_twice_then_200_is_three_attempts_each_20_ms_or_more_apart() {
    let server = MockServer::start().await;
    let unavailable = StatusCode::SERVICE_UNAVAILABLE;
    let script = Script::statuses([unavailable, unavailable, StatusCode::OK]);
    Mock::given(method("GET"))
        .and(path("/items"))
        .respond_with(script.clone())
        .mount(&server)
        .await;
    let url = format!("{}/items", server.uri());
    assert_eq!(via_middleware(&url).await, (200, 3));
    // The script's last answer, again for every request after it.
    assert_eq!(via_layer(&url).await, (200, 1));
    assert_eq!(script.received(), 4);
    let gaps = script.gaps();
    assert!(
        gaps[..2]
            .iter()
            .all(|gap| *gap >= Duration::from_millis(20)),
        "{gaps:?}"
    );
    let arrivals = script.arrivals();
    assert!(arrivals.iter().all(|a| a.request().url.path() == "/items"));
    assert!(arrivals.windows(2).all(|pair| pair[0].at() <= pair[1].at()));
}

#[tokio::test]
async fn a_429_with_retry_after_1_is_retried_no_sooner_than_1_s_later_through_both_adapters() {
    let server = MockServer::start().await;
    let script = || {
        Script::new(ResponseTemplate::new(429).insert_header("retry-after", "1"))
            .then(ResponseTemplate::new(200))
    };
    let (first, second) = (script(), script());
    Mock::given(path("/a"))
        .respond_with(first.clone())
        .mount(&server)
        .await;
    Mock::given(path("/b"))
        .respond_with(second.clone())
        .mount(&server)
        .await;
    assert_eq!(
        via_middleware(&format!("{}/a", server.uri())).await,
        (200, 2)
    );
    assert_eq!(via_layer(&format!("{}/b", server.uri())).await, (200, 2));
    for script in [first, second] {
        let gap = script.gaps()[0];
        assert!(
            gap >= Duration::from_secs(1),
            "retried {gap:?} after the 429"
        );
    }
}
