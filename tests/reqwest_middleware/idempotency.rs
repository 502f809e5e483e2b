//! Which requests are replayed: a POST or a PATCH only where the server did not act or with an
//! `Idempotency-Key`, a PUT or a DELETE always, with its body whole, and the check turned off.

use reqwest::Method;
use stagger::StopReason;
use wiremock::matchers::{method, path};
use wiremock::{Mock, ResponseTemplate};

use super::*;

/// Mounts `code` on `/{method}/{code}` and sends one `method` request with a body there.
async fn send_and_count(
    client: &ClientWithMiddleware,
    server: &MockServer,
    verb: Method,
    code: u16,
    idempotency_key: Option<&str>,
) -> (reqwest::Response, usize) {
    let route = format!("/{verb}/{code}/{}", idempotency_key.unwrap_or("-"));
    Mock::given(method(verb.as_str()))
        .and(path(&route))
        .respond_with(ResponseTemplate::new(code))
        .mount(server)
        .await;
    let mut request = client
        .request(verb.clone(), format!("{}{route}", server.uri()))
        .body("{\"amount\": 100}");
    if let Some(key) = idempotency_key {
        request = request.header("idempotency-key", key);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("{verb} {code}: a response, not an error: {e}"));
    assert_eq!(response.status(), status(code), "{verb} {code}");
    let hits = hits(server, &route).await;
    (response, hits)
}

#[tokio::test]
async fn post_and_patch_are_not_replayed_after_a_failure_the_server_may_have_acted_on() {
    let server = MockServer::start().await;
    let client = client(quick());
    for verb in [Method::POST, Method::PATCH] {
        for code in [500, 502, 504] {
            let (response, hits) = send_and_count(&client, &server, verb.clone(), code, None).await;
            assert_eq!(hits, 1, "{verb} {code}");
            let info = info(&response);
            assert_eq!(info.attempts(), 1, "{verb} {code}");
            assert_eq!(
                info.stop_reason(),
                Some(StopReason::NotIdempotent),
                "{verb} {code}"
            );
        }
    }
}

#[tokio::test]
async fn post_and_patch_are_replayed_when_the_server_did_not_act() {
    let server = MockServer::start().await;
    let client = client(quick());
    for verb in [Method::POST, Method::PATCH] {
        for code in [503, 429] {
            let (response, hits) = send_and_count(&client, &server, verb.clone(), code, None).await;
            assert_eq!(hits, 3, "{verb} {code}");
            assert_eq!(
                info(&response).stop_reason(),
                Some(StopReason::MaxRetries),
                "{verb} {code}"
            );
        }
    }
}

#[tokio::test]
async fn post_with_an_idempotency_key_is_replayed_after_a_500() {
    let server = MockServer::start().await;
    let client = client(quick());
    let (response, hits) =
        send_and_count(&client, &server, Method::POST, 500, Some("8e03978e")).await;
    assert_eq!(hits, 3);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::MaxRetries));
    // Every attempt carried the key.
    let requests = server.received_requests().await.unwrap();
    assert!(
        requests
            .iter()
            .all(|r| r.headers["idempotency-key"] == "8e03978e")
    );
}

#[tokio::test]
async fn put_and_delete_are_replayed_after_a_500() {
    let server = MockServer::start().await;
    let client = client(quick());
    for verb in [Method::PUT, Method::DELETE] {
        let (response, hits) = send_and_count(&client, &server, verb.clone(), 500, None).await;
        assert_eq!(hits, 3, "{verb}");
        assert_eq!(
            info(&response).stop_reason(),
            Some(StopReason::MaxRetries),
            "{verb}"
        );
    }
    // The body is sent again, whole, with every attempt.
    let requests = server.received_requests().await.unwrap();
    assert!(requests.iter().all(|r| r.body == b"{\"amount\": 100}"));
}

#[tokio::test]
async fn without_the_idempotency_check_a_post_is_replayed_after_a_500() {
    let server = MockServer::start().await;
    let client = client(quick().idempotency_check(false));
    let (response, hits) = send_and_count(&client, &server, Method::POST, 500, None).await;
    assert_eq!(hits, 3);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::MaxRetries));
}
