//! The retry budget: the default one bounds a herd under a total outage, none lets it make every retry,
//! and a new client's timeouts are retried from its starting credit.

use stagger::{RetryReport, StopReason};
use wiremock::matchers::path;
use wiremock::{Mock, ResponseTemplate};

use super::*;

/// Sends 100 concurrent GETs through one client to an always-503 server; returns the server's count of
/// requests and the responses' stop reasons.
async fn herd(policy: RetryPolicyBuilder) -> (usize, Vec<StopReason>) {
    let server = MockServer::start().await;
    Mock::given(path("/"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    let client = client(policy);
    let responses =
        futures::future::join_all((0..100).map(|_| client.get(server.uri()).send())).await;
    let stops = responses
        .into_iter()
        .map(|r| {
            let response = r.expect("a 503, not an error");
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            info(&response).stop_reason().expect("stopped")
        })
        .collect();
    (hits(&server, "/").await, stops)
}

fn herd_policy() -> RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::exponential(ms(1)))
        .max_retries(3)
        // The budget alone: with the breaker, five 503s in a row find the host down and hold the
        // rest (tests/breaker.rs).
        .breaker(None)
}

// A current-thread runtime: `join_all` starts all 100 requests, each depositing in the budget, before
// the first 503 can come back, so every deposit is in before the first retry withdraws.
#[tokio::test]
async fn the_default_budget_bounds_a_herd_under_a_total_outage() {
    let (hits, stops) = herd(herd_policy()).await;
    // The default budget (20 %, 10/s over 10 s) holds a reserve of 10 × 10 = 100 retries, and the 100
    // requests deposit 20 % of 100 = 20 more, and pays that out at the rate it is earned: at once,
    // one second of the floor and what the last 200 ms of requests paid in, 10 + 20. The calls could
    // make 300 retries between them (max_retries 3, 400 requests without a budget): they make those
    // 30 (and one more for each 100 ms the herd takes, the floor's 10 a second), and stop.
    assert!(
        (100 + 10 + 20..=100 + 10 + 20 + 5).contains(&hits),
        "{hits} requests"
    );
    let budget_stops = stops.iter().filter(|&&s| s == StopReason::Budget).count();
    let max_retries_stops = stops
        .iter()
        .filter(|&&s| s == StopReason::MaxRetries)
        .count();
    // 30 to 35 retries, three to a call that reaches max_retries: at most 11 calls do, the others
    // stop on the budget.
    assert!(
        max_retries_stops <= 11,
        "{max_retries_stops} reached max_retries"
    );
    assert_eq!(budget_stops + max_retries_stops, 100);
}

#[tokio::test]
async fn without_a_budget_a_herd_makes_every_retry() {
    let (hits, stops) = herd(herd_policy().budget(None)).await;
    assert_eq!(hits, 400);
    assert!(stops.iter().all(|&s| s == StopReason::MaxRetries));
}

#[tokio::test]
async fn with_the_default_budget_a_new_clients_timeouts_are_retried_from_its_starting_credit() {
    // A new budget has no deposits to judge a timeout by: the starting credit (one second of the
    // floor) pays for two timeouts' retries, at four retries' worth each, and no more; a 503 is paid
    // from the floor (see `RetryBudget`, "Timeouts").
    let server = MockServer::start().await;
    Mock::given(path("/slow"))
        .respond_with(ResponseTemplate::new(200).set_delay(NEVER))
        .mount(&server)
        .await;
    Mock::given(path("/busy"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    // The starting credit of a host is the process's: a name of this test's own, resolved to the
    // server, so that no other test of this binary (a loopback port used again) has spent it.
    let host = "starting-credit.test";
    let client = client_with(
        reqwest_client()
            .timeout(CLIENT_TIMEOUT)
            .resolve(host, *server.address())
            .build()
            .unwrap(),
        quick().max_retries(5).build().unwrap(),
    );
    let url = |path: &str| format!("http://{host}:{}{path}", server.address().port());

    let report = RetryReport::new();
    let result = client
        .get(url("/slow"))
        .with_extension(report.clone())
        .send()
        .await;
    assert!(matches!(result, Err(reqwest_middleware::Error::Reqwest(e)) if e.is_timeout()));
    assert_eq!(hits(&server, "/slow").await, 3);
    let timed_out = report.get().unwrap();
    assert_eq!(
        (timed_out.attempts(), timed_out.stop_reason()),
        (3, Some(StopReason::Budget))
    );

    let response = client.get(url("/busy")).send().await.unwrap();
    assert_eq!(info(&response).attempts(), 6);
    assert_eq!(hits(&server, "/busy").await, 6);
}
