use std::time::Duration;

use reqwest_middleware::ClientBuilder;
use stagger::{Overrides, RetryInfo, RetryMiddleware, RetryPolicy};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    call("https://httpbin.org").await
}

async fn call(api: &str) -> Result<(), Box<dyn std::error::Error>> {
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(RetryPolicy::default()))
        .build();

    // /status/503 answers 503 every time. Retried with backoff; five 503s in a row put this path
    // down (the host's other paths still go), the call waits up to 10 s for it while its own
    // retries go as probes, then it is handed back as it came, with what the retries did beside it.
    let response = client.get(format!("{api}/status/503")).send().await?;
    let info = RetryInfo::of(response.extensions());
    println!("{} after {} attempts, {:?} asleep", response.status(), info.attempts(), info.slept());
    println!("stopped: {:?}", info.stop_reason()); // HostDown (down 10 s), or MaxRetries

    // One request with settings of its own, through the same client: 2 s in all, one retry.
    let quick = Overrides::builder().deadline(Duration::from_secs(2)).max_retries(1).build()?;
    let health = client.get(format!("{api}/status/200")).with_extension(quick).send().await?;
    println!("health: {}", health.status());
    Ok(())
}
