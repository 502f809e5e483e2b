//! A delay the server gives in a form stagger does not read, named by a classifier of one's own
//! with `Outcome::RetryAfter`, and then treated exactly as a `Retry-After`:
//!
//! - OpenAI's `x-ratelimit-reset-*` headers, Go durations, one per limit (`openai.rs`);
//! - `google.rpc.RetryInfo`'s `retryDelay` in a JSON error body, read once by a middleware below
//!   the retry layer (`body.rs`, which says where a body can be read and where it cannot).
//!
//! ```text
//! cargo run --all-features --example server_delay
//! ```

mod body;
mod openai;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use reqwest_middleware::ClientBuilder;
use stagger::{RetryInfo, RetryMiddleware, RetryPolicy};

use body::{BodyDelays, ReadRetryDelay};
use openai::OpenAiRateLimits;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let chat_calls = Arc::new(AtomicU32::new(0));
    let translate_calls = Arc::new(AtomicU32::new(0));
    let app = Router::new()
        .route(
            "/v1/chat/completions",
            post({
                let calls = Arc::clone(&chat_calls);
                // The token limit is spent and resets in 2 s; the request limit has 59 left.
                move || async move {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        let headers = [
                            ("x-ratelimit-remaining-requests", "59"),
                            ("x-ratelimit-reset-requests", "12ms"),
                            ("x-ratelimit-remaining-tokens", "0"),
                            ("x-ratelimit-reset-tokens", "2s"),
                        ];
                        (StatusCode::TOO_MANY_REQUESTS, headers, "rate limited").into_response()
                    } else {
                        (StatusCode::OK, "a completion").into_response()
                    }
                }
            }),
        )
        .route(
            "/v2/translate",
            post({
                let calls = Arc::clone(&translate_calls);
                move || async move {
                    if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                        let body = r#"{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}]}}"#;
                        let json = [("content-type", "application/json")];
                        (StatusCode::TOO_MANY_REQUESTS, json, body).into_response()
                    } else {
                        (StatusCode::OK, "a translation").into_response()
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });

    // A POST to OpenAI is retried after a 429, which it was not processed for: its
    // `Idempotency-Key` is not needed for that, but a 5xx would need it.
    let openai = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(
            RetryPolicy::builder()
                .classifier(OpenAiRateLimits)
                .build()?,
        ))
        .build();
    let start = Instant::now();
    let response = openai
        .post(format!("http://{address}/v1/chat/completions"))
        .body("{}")
        .send()
        .await?;
    report("OpenAI's reset headers", &response, start);

    // The body reader goes after the retry middleware: it runs on every attempt.
    let google = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(
            RetryPolicy::builder().classifier(BodyDelays).build()?,
        ))
        .with(ReadRetryDelay)
        .build();
    let start = Instant::now();
    let response = google
        .post(format!("http://{address}/v2/translate"))
        .body("{}")
        .send()
        .await?;
    report("RetryInfo in a JSON body", &response, start);
    Ok(())
}

fn report(what: &str, response: &reqwest::Response, start: Instant) {
    let info = response
        .extensions()
        .get::<RetryInfo>()
        .expect("stagger's RetryInfo")
        .clone();
    println!(
        "{what}: {} after {} attempt(s), {:?} asleep, {:.2?} in all",
        response.status(),
        info.attempts(),
        info.slept(),
        start.elapsed()
    );
}
