//! `reqwest::Client` under the layer, against wiremock on loopback.

use bytes::Bytes;
use http::{Method, StatusCode};
use http_body_util::StreamBody;
use hyper::body::Frame;
use stagger::{Reason, StopReason};
use wiremock::matchers::{body_string, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;

/// Real time on loopback: delays of 1, 2, 4 ms.
fn quick() -> RetryPolicyBuilder {
    exact(ms(1))
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn send(
    policy: RetryPolicy,
    client: reqwest::Client,
    request: reqwest::Request,
) -> Result<reqwest::Response, stagger::Error<reqwest::Error>> {
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(client);
    // Spawned, because that is how a client is used: the future must be `Send + 'static`.
    tokio::spawn(service.oneshot(request)).await.unwrap()
}

fn info(response: &reqwest::Response) -> RetryInfo {
    RetryInfo::of(response.extensions())
}

#[tokio::test]
async fn every_retryable_status_is_retried() {
    let server = MockServer::start().await;
    let codes = [408, 429, 500, 502, 503, 504, 507];
    for code in codes {
        Mock::given(path(format!("/{code}")))
            .respond_with(ResponseTemplate::new(code))
            .expect(3)
            .named(format!("status {code}"))
            .mount(&server)
            .await;
    }
    let client = client();

    for code in codes {
        let request = client
            .get(format!("{}/{code}", server.uri()))
            .build()
            .unwrap();
        let policy = quick().max_retries(2).build().unwrap();
        let response = send(policy, client.clone(), request).await.unwrap();
        assert_eq!(response.status().as_u16(), code);
        assert_eq!(info(&response).attempts(), 3, "{code}");
        assert_eq!(
            info(&response).stop_reason(),
            Some(StopReason::MaxRetries),
            "{code}"
        );
    }
    server.verify().await;
}

#[tokio::test]
async fn fatal_statuses_are_not_retried() {
    let server = MockServer::start().await;
    let codes = [400, 401, 403, 404, 409, 422, 501, 505];
    for code in codes {
        Mock::given(path(format!("/{code}")))
            .respond_with(ResponseTemplate::new(code))
            .expect(1)
            .named(format!("status {code}"))
            .mount(&server)
            .await;
    }
    let client = client();

    for code in codes {
        let request = client
            .get(format!("{}/{code}", server.uri()))
            .build()
            .unwrap();
        let response = send(quick().build().unwrap(), client.clone(), request)
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), code);
        assert_eq!(info(&response).attempts(), 1, "{code}");
        assert_eq!(
            info(&response).stop_reason(),
            Some(StopReason::Fatal),
            "{code}"
        );
    }
    server.verify().await;
}

#[tokio::test]
async fn only_idempotent_requests_are_replayed_after_a_failure_the_server_may_have_acted_on() {
    // (method, status, Idempotency-Key, attempts the server sees)
    let cases = [
        (Method::POST, 500, None, 1),
        (Method::POST, 502, None, 1),
        (Method::PATCH, 504, None, 1),
        (Method::POST, 408, None, 1),
        (Method::POST, 503, None, 3),
        (Method::POST, 429, None, 3),
        (Method::POST, 500, Some("key-1"), 3),
        (Method::PATCH, 502, Some("key-2"), 3),
        (Method::GET, 500, None, 3),
        (Method::PUT, 502, None, 3),
        (Method::DELETE, 504, None, 3),
    ];
    let server = MockServer::start().await;
    for (i, (verb, code, key, attempts)) in cases.iter().enumerate() {
        let mut mock = Mock::given(path(format!("/case/{i}")))
            .and(method(verb.as_str()))
            .and(body_string("payload"));
        if let Some(key) = key {
            // Every replay carries the key.
            mock = mock.and(header("idempotency-key", *key));
        }
        mock.respond_with(ResponseTemplate::new(*code))
            .expect(*attempts)
            .named(format!("{verb} {code} key {key:?}"))
            .mount(&server)
            .await;
    }
    let client = client();

    for (i, (verb, code, key, attempts)) in cases.into_iter().enumerate() {
        let mut request = client
            .request(verb.clone(), format!("{}/case/{i}", server.uri()))
            .body("payload");
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let policy = quick().max_retries(2).build().unwrap();
        let response = send(policy, client.clone(), request.build().unwrap())
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), code);
        assert_eq!(
            u64::from(info(&response).attempts()),
            attempts,
            "{verb} {code} {key:?}"
        );
        let stop = if attempts == 1 {
            StopReason::NotIdempotent
        } else {
            StopReason::MaxRetries
        };
        assert_eq!(info(&response).stop_reason(), Some(stop));
    }
    server.verify().await;
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
    let client = client();
    let request = client.get(server.uri()).build().unwrap();

    let response = send(quick().build().unwrap(), client, request)
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    let info = info(&response);
    assert_eq!(info.attempts(), 3);
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    assert_eq!(response.text().await.unwrap(), "ok");
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
    server.verify().await;
}

#[tokio::test]
async fn connect_refused_is_retried_and_the_error_still_answers_is_connect() {
    let (policy, events) = recorded(quick().max_retries(2));
    let client = client();
    let closed = common::ClosedPort::new();
    let request = client
        .post(closed.url())
        .body("never sent")
        .build()
        .unwrap();

    let error = send(policy, client, request).await.unwrap_err();

    assert!(error.inner().unwrap().is_connect(), "{error:?}");
    assert_eq!(error.info().attempts(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
    // Refused before the server could act: even a POST is tried three times.
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e.reason == Reason::Connect));
}

#[tokio::test]
async fn a_client_timeout_is_retried_and_the_error_still_answers_is_timeout() {
    let server = MockServer::start().await;
    // Answered after a minute, which no test waits out. reqwest's timeout is long enough for every
    // attempt to reach the server, which counts them, before it times out: at 50 ms, with every
    // test binary running at once on two cores, the third attempt once timed out before wiremock
    // had received it.
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_delay(ms(60_000)))
        .expect(3)
        .mount(&server)
        .await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(ms(1000))
        .build()
        .unwrap();
    let (policy, events) = recorded(quick().max_retries(2));
    let request = client.get(server.uri()).build().unwrap();

    let error = send(policy, client, request).await.unwrap_err();

    assert!(error.inner().unwrap().is_timeout(), "{error:?}");
    assert_eq!(error.info().attempts(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
    assert!(
        events
            .lock()
            .unwrap()
            .iter()
            .all(|e| e.reason == Reason::Timeout)
    );
    server.verify().await;
}

#[tokio::test]
async fn without_a_replay_buffer_a_streaming_body_is_sent_once_and_its_503_returned_as_received() {
    let server = MockServer::start().await;
    Mock::given(method("PUT"))
        .and(body_string("chunk one, chunk two"))
        .respond_with(
            ResponseTemplate::new(503)
                .insert_header("x-served-by", "replica-3")
                .set_body_string("busy"),
        )
        .expect(1)
        .mount(&server)
        .await;
    let chunks = ["chunk one, ", "chunk two"]
        .map(|c| Ok::<_, io::Error>(Frame::data(Bytes::from_static(c.as_bytes()))));
    let body = reqwest::Body::wrap(StreamBody::new(futures::stream::iter(chunks)));
    let client = client();
    let request = client.put(server.uri()).body(body).build().unwrap();

    let response = send(quick().replay_buffer(0).build().unwrap(), client, request)
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["x-served-by"], "replica-3");
    let info = info(&response);
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::NotReplayable));
    assert_eq!(response.text().await.unwrap(), "busy");
    server.verify().await;
}
