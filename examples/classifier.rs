//! A classifier of your own: three rules a real API needs, on top of the default ones.
//!
//! - `POST /orders` answers `409 Conflict` for "try again": retried, since the request carries an
//!   `Idempotency-Key`;
//! - `POST /payments` is never retried, not even after a `503` that the default rules would retry;
//! - `GET /report` answers `400` with a JSON body `{"retryable": true}` while it warms up: a flag in the
//!   body, which a middleware after `RetryMiddleware` reads, leaving the body intact for the caller and
//!   its verdict in the response's extensions, where the classifier finds it.
//!
//! ```text
//! cargo run --all-features --example classifier
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use http::Extensions;
use http_body_util::BodyExt;
use reqwest::ResponseBuilderExt;
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use stagger::classify::{self, AttemptResult, ClassifyHttp, DefaultClassifier};
use stagger::{Backoff, RetryInfo, RetryMiddleware, RetryPolicy};
use stagger::{Outcome, Reason};

/// Left in a response's extensions by [`BodyFlag`] when its JSON body says `"retryable": true`.
#[derive(Debug, Clone, Copy)]
struct BodySaysRetryable;

/// Reads the JSON body of a failed response, up to [`BodyFlag::LIMIT`] bytes, and hands the response
/// on with the same body. Placed after `RetryMiddleware`, it runs on every attempt.
struct BodyFlag;

impl BodyFlag {
    /// Larger bodies, or bodies of unknown length, are passed on unread.
    const LIMIT: u64 = 64 * 1024;
}

#[async_trait::async_trait]
impl Middleware for BodyFlag {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let response = next.run(request, extensions).await?;
        let is_json = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
        let small = response.content_length().is_some_and(|n| n <= Self::LIMIT);
        if response.status().is_success() || !is_json || !small {
            return Ok(response);
        }
        // Take the response apart, read its body, and put it back together with the same body.
        let url = response.url().clone();
        let (parts, body) = http::Response::<reqwest::Body>::from(response).into_parts();
        let body = body
            .collect()
            .await
            .map_err(reqwest_middleware::Error::middleware)?
            .to_bytes();
        let retryable = serde_json::from_slice::<serde_json::Value>(&body)
            .is_ok_and(|json| json["retryable"] == serde_json::Value::Bool(true));
        let mut rebuilt = http::Response::builder()
            .status(parts.status)
            .version(parts.version);
        if let Some(headers) = rebuilt.headers_mut() {
            *headers = parts.headers;
        }
        if let Some(found) = rebuilt.extensions_mut() {
            *found = parts.extensions;
            if retryable {
                found.insert(BodySaysRetryable);
            }
        }
        let rebuilt = rebuilt
            .url(url)
            .body(body)
            .map_err(reqwest_middleware::Error::middleware)?;
        Ok(reqwest::Response::from(rebuilt))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = start_server().await?;

    let policy = RetryPolicy::builder()
        .backoff(Backoff::exponential(Duration::from_millis(20)))
        .classifier(classify::from_fn(|request, result| match result {
            // Never retry the payment endpoint, whatever happened.
            _ if request.path() == Some("/payments") => Outcome::Fatal,
            // This API answers 409 on /orders for "try again"; the server may have acted, so only an
            // idempotent request (or one with an Idempotency-Key) is sent again.
            AttemptResult::Response {
                status: StatusCode::CONFLICT,
                ..
            } if request.path() == Some("/orders") => {
                Outcome::RetryIfIdempotent(Reason::Status(StatusCode::CONFLICT))
            }
            // The body said so (see `BodyFlag`).
            AttemptResult::Response {
                status, extensions, ..
            } if extensions.get::<BodySaysRetryable>().is_some() => {
                Outcome::RetryIfIdempotent(Reason::Status(*status))
            }
            _ => DefaultClassifier.classify(request, result),
        }))
        .on_retry(|event| {
            println!(
                "  attempt {} failed ({}), retrying in {:?}",
                event.attempt, event.reason, event.delay
            );
        })
        .build()?;
    let client = ClientBuilder::new(reqwest::Client::builder().no_proxy().build()?)
        .with(RetryMiddleware::new(policy))
        .with(BodyFlag)
        .build();

    println!("POST /orders with an Idempotency-Key");
    let response = client
        .post(format!("{base}/orders"))
        .header("Idempotency-Key", "order-7f3a")
        .body("1 widget")
        .send()
        .await?;
    report(response).await?;

    println!("POST /payments");
    let response = client
        .post(format!("{base}/payments"))
        .body("12.00 EUR")
        .send()
        .await?;
    report(response).await?;

    println!("GET /report");
    let response = client.get(format!("{base}/report")).send().await?;
    report(response).await?;
    Ok(())
}

async fn report(response: reqwest::Response) -> reqwest::Result<()> {
    let info = response
        .extensions()
        .get::<RetryInfo>()
        .expect("RetryMiddleware records RetryInfo in every response")
        .clone();
    let status = response.status();
    let body = response.text().await?;
    println!(
        "  -> {status} {body:?} after {} attempt(s), stopped: {}",
        info.attempts(),
        info.stop_reason().expect("the call has ended"),
    );
    Ok(())
}

/// Serves the three endpoints on a free loopback port; each fails its first request.
async fn start_server() -> std::io::Result<String> {
    fn first_time(seen: &AtomicU32) -> bool {
        seen.fetch_add(1, Ordering::SeqCst) == 0
    }
    let orders = Arc::new(AtomicU32::new(0));
    let reports = Arc::new(AtomicU32::new(0));
    let app = Router::new()
        .route(
            "/orders",
            post(move || async move {
                if first_time(&orders) {
                    (StatusCode::CONFLICT, "busy, try again").into_response()
                } else {
                    (StatusCode::CREATED, "order 7f3a placed").into_response()
                }
            }),
        )
        .route(
            "/payments",
            post(|| async { (StatusCode::SERVICE_UNAVAILABLE, "payments are down") }),
        )
        .route(
            "/report",
            get(move || async move {
                if first_time(&reports) {
                    let json = r#"{"error": "warming up", "retryable": true}"#;
                    let headers = [(http::header::CONTENT_TYPE, "application/json")];
                    (StatusCode::BAD_REQUEST, headers, json).into_response()
                } else {
                    "report ready".into_response()
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}
