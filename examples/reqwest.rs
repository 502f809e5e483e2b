//! Retrying a `reqwest` client with `RetryMiddleware`.
//!
//! Starts a flaky local server (a 500, then a 429 with `Retry-After: 1`, then a 200), sends one GET
//! through a client with the middleware, and prints every attempt, every delay and the final `RetryInfo`.
//!
//! ```text
//! cargo run --example reqwest --features reqwest-middleware
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use reqwest_middleware::ClientBuilder;
use stagger::{Backoff, RetryInfo, RetryMiddleware, RetryPolicy};

/// Fails twice, differently, then answers.
async fn flaky(State(requests): State<Arc<AtomicU32>>) -> Response {
    let n = requests.fetch_add(1, Ordering::SeqCst) + 1;
    let response = match n {
        1 => (StatusCode::INTERNAL_SERVER_ERROR, "oops").into_response(),
        2 => (
            StatusCode::TOO_MANY_REQUESTS,
            [(header::RETRY_AFTER, "1")],
            "slow down",
        )
            .into_response(),
        _ => "hello, at last".into_response(),
    };
    println!("server: request {n} -> {}", response.status());
    response
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let app = Router::new()
        .route("/", get(flaky))
        .with_state(Arc::new(AtomicU32::new(0)));
    tokio::spawn(async move { axum::serve(listener, app).await });

    let policy = RetryPolicy::builder()
        .backoff(Backoff::exponential(Duration::from_millis(50)))
        .on_retry(|event| {
            let retry_after = match event.retry_after {
                Some(floor) => format!(" (Retry-After {floor:?})"),
                None => String::new(),
            };
            println!(
                "client: attempt {} failed with {}; retrying in {:?}{retry_after}",
                event.attempt, event.reason, event.delay
            );
        })
        .build()?;
    let client = ClientBuilder::new(reqwest::Client::builder().no_proxy().build()?)
        .with(RetryMiddleware::new(policy))
        .build();

    let start = std::time::Instant::now();
    let response = client.get(&url).send().await?;
    let elapsed = start.elapsed();
    let status = response.status();
    let info = response
        .extensions()
        .get::<RetryInfo>()
        .cloned()
        .expect("RetryMiddleware records RetryInfo in every response");
    println!("client: {status}: {:?}", response.text().await?);
    println!(
        "client: {} attempts, {:?} asleep, {:?} in all",
        info.attempts(),
        info.slept(),
        elapsed
    );
    Ok(())
}
