//! The `tracing` events: the retry and the give-up, each with the request's method, host and path.

use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use super::*;

#[tokio::test]
async fn the_retry_and_the_give_up_are_logged_with_the_request_s_method_host_and_path() {
    let server = MockServer::start().await;
    Mock::given(path("/orders"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let events = common::capture();

    let response = client(quick().max_retries(1))
        .delete(format!("{}/orders", server.uri()))
        .send()
        .await
        .unwrap();

    assert_eq!(info(&response).attempts(), 2);
    let events = events.stagger();
    assert_eq!(events.len(), 2, "{events:#?}");
    let (retry, gave_up) = (&events[0], &events[1]);
    assert_eq!(retry.message, "retrying");
    assert_eq!(gave_up.level, tracing::Level::WARN);
    for event in [retry, gave_up] {
        assert_eq!(event.field("http.request.method"), "DELETE");
        assert_eq!(event.field("server.address"), "127.0.0.1");
        assert_eq!(event.field("url.path"), "/orders");
        assert_eq!(event.field("error.type"), "503");
    }
    assert_eq!(gave_up.field("stop.reason"), "max_retries");
}
