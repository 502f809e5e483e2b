//! reqwest's own retry beneath the middleware: its defaults, a `for_host` policy that retries a `503`,
//! and `never()`.

use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use super::*;

#[tokio::test]
async fn reqwest_s_own_retry_beneath_the_middleware_multiplies_its_attempts_unless_turned_off() {
    // reqwest 0.13 retries by itself, beneath every middleware (`reqwest::retry`). Its default resends
    // only what a server refused unprocessed, never a 503; a `for_host` policy that retries a 503
    // resends it twice at once, under each of stagger's attempts; `never()` turns it off (README,
    // "Quick start: reqwest").
    let server = MockServer::start().await;
    Mock::given(path("/busy"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let host = server.address().ip().to_string();
    let retry_503 = || {
        reqwest::retry::for_host(host.clone()).classify_fn(|attempt| {
            if attempt.status() == Some(StatusCode::SERVICE_UNAVAILABLE) {
                attempt.retryable()
            } else {
                attempt.success()
            }
        })
    };
    let stacks = [
        ("reqwest's defaults", reqwest_client(), 3),
        (
            "for_host, 503 retried",
            reqwest_client().retry(retry_503()),
            9,
        ),
        ("never", reqwest_client().retry(reqwest::retry::never()), 3),
    ];
    let mut seen = 0;
    for (name, builder, sends) in stacks {
        let client = client_with(builder.build().unwrap(), quick().build().unwrap());
        let response = client
            .get(format!("{}/busy", server.uri()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{name}");
        // stagger counts its own attempts; the server sees every send.
        assert_eq!(info(&response).attempts(), 3, "{name}");
        let hits = hits(&server, "/busy").await;
        assert_eq!(hits - seen, sends, "{name}");
        seen = hits;
    }
}
