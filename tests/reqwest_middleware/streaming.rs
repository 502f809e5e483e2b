//! A streaming body without a replay buffer: sent once, and its `503` returned as received.

use stagger::StopReason;
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use super::*;

#[tokio::test]
async fn without_a_replay_buffer_a_streaming_body_is_sent_once_and_its_503_returned_as_received() {
    let server = MockServer::start().await;
    Mock::given(path("/upload"))
        .respond_with(
            ResponseTemplate::new(503)
                .insert_header("x-reason", "overloaded")
                .set_body_string("try later"),
        )
        .expect(1)
        .mount(&server)
        .await;
    let chunks: Vec<Result<&'static str, std::io::Error>> =
        vec![Ok("chunk one, "), Ok("chunk two")];
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));

    let response = client(quick().replay_buffer(0))
        .put(format!("{}/upload", server.uri()))
        .body(body)
        .send()
        .await
        .expect("the 503, not an error");

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["x-reason"], "overloaded");
    let info = info(&response);
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::NotReplayable));
    assert_eq!(response.text().await.unwrap(), "try later");
    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body, b"chunk one, chunk two");
}
