//! What a call ends with: a retryable status retried and the last response returned intact, a fatal
//! one sent once, and a success (first or after a retry) with its `RetryInfo`.

use stagger::StopReason;
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use super::*;

const RETRYABLE: [u16; 7] = [408, 429, 500, 502, 503, 504, 507];
const FATAL: [u16; 8] = [400, 401, 403, 404, 409, 422, 501, 505];

#[tokio::test]
async fn retryable_statuses_are_retried_and_the_last_response_is_returned_intact() {
    let server = MockServer::start().await;
    let client = client(quick());
    for code in RETRYABLE {
        let route = format!("/{code}");
        Mock::given(path(&route))
            .respond_with(
                ResponseTemplate::new(code)
                    .insert_header("x-attempt", "early")
                    .set_body_string("early"),
            )
            .up_to_n_times(2)
            .mount(&server)
            .await;
        Mock::given(path(&route))
            .respond_with(
                ResponseTemplate::new(code)
                    .insert_header("x-attempt", "last")
                    .set_body_string(format!("last {code}")),
            )
            .mount(&server)
            .await;

        let response = client
            .get(format!("{}{route}", server.uri()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{code}: a response, not an error: {e}"));

        assert_eq!(response.status(), status(code));
        assert_eq!(response.headers()["x-attempt"], "last", "{code}");
        let info = info(&response);
        assert_eq!(info.attempts(), 3, "{code}");
        assert_eq!(info.stop_reason(), Some(StopReason::MaxRetries), "{code}");
        assert_eq!(response.text().await.unwrap(), format!("last {code}"));
        assert_eq!(hits(&server, &route).await, 3, "{code}");
    }
}

#[tokio::test]
async fn fatal_statuses_are_sent_once() {
    let server = MockServer::start().await;
    let client = client(quick());
    for code in FATAL {
        let route = format!("/{code}");
        Mock::given(path(&route))
            .respond_with(
                ResponseTemplate::new(code)
                    .insert_header("x-reason", "fatal")
                    .set_body_string(format!("fatal {code}")),
            )
            .expect(1)
            .mount(&server)
            .await;

        let response = client
            .get(format!("{}{route}", server.uri()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("{code}: a response, not an error: {e}"));

        assert_eq!(response.status(), status(code));
        assert_eq!(response.headers()["x-reason"], "fatal", "{code}");
        let info = info(&response);
        assert_eq!(info.attempts(), 1, "{code}");
        assert_eq!(info.stop_reason(), Some(StopReason::Fatal), "{code}");
        assert_eq!(response.text().await.unwrap(), format!("fatal {code}"));
        assert_eq!(hits(&server, &route).await, 1, "{code}");
    }
}

#[tokio::test]
async fn a_first_success_is_returned_with_retry_info() {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
        .expect(1)
        .mount(&server)
        .await;

    let response = client(quick()).get(server.uri()).send().await.unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    let info = info(&response);
    assert_eq!(info.attempts(), 1);
    assert_eq!(info.slept(), Duration::ZERO);
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    assert_eq!(hits(&server, "/").await, 1);
}

#[tokio::test]
async fn success_after_a_retry_reports_the_attempts() {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(503))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
        .expect(1)
        .mount(&server)
        .await;

    let response = client(quick()).get(server.uri()).send().await.unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    let info = info(&response);
    assert_eq!(info.attempts(), 2);
    assert_eq!(info.retries(), 1);
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    assert_eq!(response.text().await.unwrap(), "ok");
    assert_eq!(hits(&server, "/").await, 2);
}
