use std::time::Duration;

use stagger::{Backoff, RetryLayer, RetryPolicy};
use tower::{ServiceBuilder, ServiceExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    call("https://httpbin.org").await
}

async fn call(api: &str) -> Result<(), Box<dyn std::error::Error>> {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::exponential(Duration::from_millis(50)).with_max_delay(Duration::from_secs(2)))
        .max_elapsed(Duration::from_secs(10))
        .build()?;
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(reqwest::Client::new());

    let request = reqwest::Request::new(reqwest::Method::GET, format!("{api}/get").parse()?);
    // An error says why the retries stopped ("gave up after 11 attempts (max retries reached)"),
    // and `error.inner()` is the `reqwest::Error`, if there is one.
    let response = client.oneshot(request).await?;
    println!("{}", response.status());
    Ok(())
}
