//! The tests `docs/testing.md` shows, of a handler that serves a price from an upstream and the last
//! price it served when the upstream fails after its retries: through reqwest-middleware and through
//! tower, on tokio's paused clock, with stagger's chaos layer as the failing upstream; and with
//! wiremock's server scripted by `stagger::wiremock::Script`, in real time.
//!
//! ```text
//! cargo test --all-features --example testing       # the tests (CI runs them with the suite)
//! cargo run --all-features --example testing        # the same chaos, in "staging": a flag, a rate
//! ```
//!
//! The guide quotes this file; `the_guide_quotes_this_file_as_it_is` fails when the two part.

use std::sync::Mutex;

use reqwest_middleware::ClientWithMiddleware;
use stagger::chaos::{Chaos, ChaosMiddleware, Fault, Rule};
use stagger::{RetryMiddleware, RetryPolicy};
use tower::{BoxError, Service, ServiceExt};

/// The code under test: a price from the upstream, or the last one served when the upstream fails.
#[derive(Default)]
pub struct Prices {
    last: Mutex<Option<String>>,
}

impl Prices {
    /// Through a reqwest-middleware client.
    pub async fn get(&self, client: &ClientWithMiddleware, url: &str) -> Option<String> {
        let fresh = match client.get(url).send().await {
            Ok(response) if response.status().is_success() => response.text().await.ok(),
            _ => None,
        };
        self.serve(fresh)
    }

    /// Through a tower service over `reqwest::Client`.
    pub async fn get_with<S>(&self, client: S, url: &str) -> Option<String>
    where
        S: Service<reqwest::Request, Response = reqwest::Response, Error: Into<BoxError>>,
    {
        let request = reqwest::Request::new(reqwest::Method::GET, url.parse().ok()?);
        let fresh = match client.oneshot(request).await {
            Ok(response) if response.status().is_success() => response.text().await.ok(),
            _ => None,
        };
        self.serve(fresh)
    }

    fn serve(&self, fresh: Option<String>) -> Option<String> {
        let mut last = self.last.lock().unwrap();
        if fresh.is_some() {
            last.clone_from(&fresh);
        }
        fresh.or_else(|| last.clone())
    }
}

/// In staging: the chaos beneath the retries, off until a flag turns it on; 5 % of the calls to
/// the upstream reset, 1 % answered `503`, the same calls on every run of the same seed. The upstream
/// here is a local server answering `42`: every call still gets its price, the faults retried.
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/apple", listener.local_addr()?);
    let upstream = axum::Router::new().fallback(|| async { "42" });
    tokio::spawn(async move { axum::serve(listener, upstream).await });

    let chaos = Chaos::builder()
        .rule(Rule::rate(0.05, Fault::reset())?)
        .rule(Rule::rate(
            0.01,
            Fault::status(http::StatusCode::SERVICE_UNAVAILABLE),
        )?)
        .seed(2026)
        .enabled(false)
        .build();
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(RetryPolicy::default()))
        .with(ChaosMiddleware::new(chaos.clone()))
        .build();
    // The deployment's flag, read from its configuration at run time: here, on at once.
    chaos.set_enabled(true);
    let prices = Prices::default();
    let mut served = 0;
    for _ in 0..200 {
        if prices.get(&client, &url).await.as_deref() == Some("42") {
            served += 1;
        }
    }
    let counts = chaos.counts();
    println!(
        "seed {}: {served} of 200 prices served; {} attempts, {} faults injected ({} resets, {} 503s)",
        chaos.seed(),
        counts.calls(),
        counts.injected(),
        counts.errors(),
        counts.answers()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use http::StatusCode;
    use reqwest_middleware::ClientBuilder;
    use stagger::chaos::{Chaos, ChaosLayer, ChaosMiddleware, Fault, Rule};
    use stagger::wiremock::Script;
    use stagger::{Backoff, RetryLayer, RetryMiddleware, RetryPolicy};
    use tokio::time::Instant;
    use tower::ServiceBuilder;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::Prices;

    // [cached-middleware]
    #[tokio::test(start_paused = true)]
    async fn serves_the_last_price_when_the_upstream_fails_after_its_retries() {
        // The upstream, played by the chaos: 42 once, then only 503.
        let chaos = Chaos::builder()
            .rule(Rule::script([Fault::answer(http::Response::new("42"))]))
            .rule(Rule::always(Fault::status(StatusCode::SERVICE_UNAVAILABLE)))
            .build();
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(RetryMiddleware::new(RetryPolicy::default()))
            .with(ChaosMiddleware::new(chaos.clone())) // beneath the retries: every attempt
            .build();
        let prices = Prices::default();
        let url = "http://prices.internal/apple";
        assert_eq!(prices.get(&client, url).await.unwrap(), "42");

        let start = Instant::now();
        assert_eq!(prices.get(&client, url).await.unwrap(), "42"); // the last one served
        assert!(chaos.counts().answers() > 2, "retried before giving up");
        assert!(start.elapsed() <= Duration::from_secs(30)); // the deadline, on tokio's clock
    }
    // [/cached-middleware]

    // [cached-tower]
    #[tokio::test(start_paused = true)]
    async fn through_tower_serves_the_last_price_when_the_upstream_is_refused() {
        let chaos = Chaos::builder()
            .rule(Rule::always(Fault::refused()))
            .enabled(false)
            .build();
        let upstream = tower::service_fn(|request: reqwest::Request| async move {
            let answer = http::Response::new(format!("42 for {}", request.url().path()));
            Ok::<_, std::convert::Infallible>(reqwest::Response::from(answer))
        });
        let client = ServiceBuilder::new()
            .layer(RetryLayer::new(RetryPolicy::default()))
            .layer(ChaosLayer::new(chaos.clone()))
            .service(upstream);
        let prices = Prices::default();
        let url = "http://prices.internal/apple";
        let fresh = prices.get_with(client.clone(), url).await;
        assert_eq!(fresh.unwrap(), "42 for /apple");

        chaos.set_enabled(true); // from now on every attempt is refused
        let cached = prices.get_with(client, url).await;
        assert_eq!(cached.unwrap(), "42 for /apple");
        assert!(chaos.counts().errors() > 1, "retried before giving up");
    }
    // [/cached-tower]

    // [wiremock]
    #[tokio::test]
    async fn against_a_real_server_a_503_is_retried_and_the_fresh_price_served() {
        let server = MockServer::start().await;
        let script = Script::new(ResponseTemplate::new(503))
            .then(ResponseTemplate::new(200).set_body_string("43"));
        Mock::given(wiremock::matchers::path("/apple"))
            .respond_with(script.clone())
            .mount(&server)
            .await;
        // Real sockets, real time: short delays.
        let policy = RetryPolicy::builder()
            .backoff(Backoff::fixed(Duration::from_millis(20)))
            .build()
            .unwrap();
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(RetryMiddleware::new(policy))
            .build();
        let prices = Prices::default();
        let url = format!("{}/apple", server.uri());
        assert_eq!(prices.get(&client, &url).await.unwrap(), "43");
        assert_eq!(script.received(), 2);
        assert!(script.gaps()[0] >= Duration::from_millis(20));
    }
    // [/wiremock]

    /// Every block of `docs/testing.md` that names a part of this file is that part, as it is here.
    #[test]
    fn the_guide_quotes_this_file_as_it_is() {
        let guide = include_str!("../docs/testing.md");
        let this = include_str!("testing.rs");
        let mut quoted = 0;
        for block in guide.split("```rust").skip(1) {
            let block = block.split("```").next().unwrap();
            let Some(name) = block
                .lines()
                .nth(1)
                .and_then(|l| l.strip_prefix("// examples/testing.rs: "))
            else {
                continue;
            };
            let start = format!("// [{name}]\n");
            let end = format!("// [/{name}]");
            let part = this
                .split(&start)
                .nth(1)
                .and_then(|rest| rest.split(&end).next());
            let part = part.unwrap_or_else(|| panic!("no part [{name}] in examples/testing.rs"));
            let unindented: String = part
                .lines()
                .map(|line| line.strip_prefix("    ").unwrap_or(line))
                .collect::<Vec<_>>()
                .join("\n");
            let quoted_lines: String = block.lines().skip(2).collect::<Vec<_>>().join("\n");
            assert_eq!(
                quoted_lines.trim_end(),
                unindented.trim_end(),
                "part [{name}]"
            );
            quoted += 1;
        }
        assert!(quoted >= 3, "the guide quotes {quoted} parts");
    }
}
