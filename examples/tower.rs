//! hyper-util's client behind `RetryLayer`, riding out a server that is still warming up.
//!
//! The example starts its own server on loopback, which answers its first two requests with
//! `503 Service Unavailable` and then `200 OK`. The client stacks a per-attempt timeout inside the retry
//! layer, so a hung attempt is cut short and retried, and prints each retry and the final `RetryInfo`.
//!
//! ```text
//! cargo run --example tower --all-features
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use stagger::{Backoff, RetryInfo, RetryLayer, RetryPolicy};
use tower::timeout::TimeoutLayer;
use tower::{BoxError, ServiceBuilder, ServiceExt};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let addr = start_flaky_server(2).await?;

    let policy = RetryPolicy::builder()
        .backoff(Backoff::exponential(Duration::from_millis(10)))
        .max_retries(4)
        .max_elapsed(Duration::from_secs(2))
        .on_retry(|event| {
            println!(
                "attempt {} failed ({}), retrying in {:?}",
                event.attempt, event.reason, event.delay
            );
        })
        .build()?;

    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        // Inside the retry layer, so that each attempt has its own 500 ms and a timeout is retried.
        // Outside it, the timeout would bound the whole request instead (see `max_elapsed`).
        .layer(TimeoutLayer::new(Duration::from_millis(500)))
        .service(client);

    let request = Request::get(format!("http://{addr}/")).body(Full::default())?;
    let start = std::time::Instant::now();
    let response = service.oneshot(request).await?;
    let elapsed = start.elapsed();

    let info = response
        .extensions()
        .get::<RetryInfo>()
        .expect("the retry layer records RetryInfo in every response")
        .clone();
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    println!(
        "{status} {body:?} after {} attempts: slept {:?} of {:?}, stopped on {}",
        info.attempts(),
        info.slept(),
        elapsed,
        info.stop_reason()
            .map_or_else(|| "nothing".to_owned(), |r| r.to_string()),
    );
    Ok(())
}

/// Serves `GET /` on a free loopback port: `503` to the first `failures` requests, `200` after.
async fn start_flaky_server(failures: usize) -> std::io::Result<SocketAddr> {
    async fn flaky(
        State((seen, failures)): State<(Arc<AtomicUsize>, usize)>,
    ) -> (StatusCode, &'static str) {
        if seen.fetch_add(1, Ordering::SeqCst) < failures {
            (StatusCode::SERVICE_UNAVAILABLE, "warming up")
        } else {
            (StatusCode::OK, "hello")
        }
    }

    let app = Router::new()
        .route("/", get(flaky))
        .with_state((Arc::new(AtomicUsize::new(0)), failures));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}
