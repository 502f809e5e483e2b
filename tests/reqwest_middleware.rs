//! `RetryMiddleware` against real loopback servers (wiremock), through a real `reqwest` client.
//!
//! Every test asserts how many times the server saw the request: that number is what a retry policy is
//! for. Real delays are kept to a few milliseconds, but for the `Retry-After` floors and the cancellation,
//! which need time to pass to be observed at all. Where a test is about when a call ends, it runs on
//! tokio's paused clock against a server in process (the last middleware of the chain).
//!
//! One module per subject, under `tests/reqwest_middleware/`; this file holds what they share.
#![cfg(feature = "reqwest-middleware")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::StatusCode;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use stagger::{
    Backoff, Jitter, RetryEvent, RetryInfo, RetryMiddleware, RetryPolicy, RetryPolicyBuilder,
};
use wiremock::MockServer;

mod common;

// One module per subject; docs/rules.md says which test pins down which promise.
#[path = "reqwest_middleware/budget.rs"]
mod budget;
#[path = "reqwest_middleware/deadline.rs"]
mod deadline;
#[path = "reqwest_middleware/errors.rs"]
mod errors;
#[path = "reqwest_middleware/idempotency.rs"]
mod idempotency;
#[path = "reqwest_middleware/logs.rs"]
mod logs;
#[path = "reqwest_middleware/refused.rs"]
mod refused;
#[path = "reqwest_middleware/reqwest_retry.rs"]
mod reqwest_retry;
#[path = "reqwest_middleware/responses.rs"]
mod responses;
#[path = "reqwest_middleware/retry_after.rs"]
mod retry_after;
#[path = "reqwest_middleware/streaming.rs"]
mod streaming;

// What the modules share: the policy most tests start from, the client and its time limits, the
// `RetryInfo` of a response, the server's count of requests, and a hook that records every retry.

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A policy that retries twice, 1 ms then 2 ms apart, with the default budget.
fn quick() -> RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::exponential(ms(1)).with_jitter(Jitter::None))
        .max_retries(2)
}

/// reqwest's own timeout, in the tests of what a client timeout does: long enough for every attempt to
/// reach the server, which the tests count, before it times out. At 100 ms, with every test binary
/// running at once on two cores, the third attempt once timed out before wiremock had received it.
const CLIENT_TIMEOUT: Duration = Duration::from_millis(1000);

/// A delay no test waits out: the server answers after the client has timed out.
const NEVER: Duration = Duration::from_secs(60);

fn reqwest_client() -> reqwest::ClientBuilder {
    // A proxy from the environment must not stand between the client and the loopback server.
    reqwest::Client::builder().no_proxy()
}

fn client_with(client: reqwest::Client, policy: RetryPolicy) -> ClientWithMiddleware {
    ClientBuilder::new(client)
        .with(RetryMiddleware::new(policy))
        .build()
}

fn client(policy: RetryPolicyBuilder) -> ClientWithMiddleware {
    client_with(reqwest_client().build().unwrap(), policy.build().unwrap())
}

/// What the retries of `response`'s call did: its `RetryInfo`, or, for a success at the first
/// attempt, which carries none, `RetryInfo::FIRST_SUCCESS`.
fn info(response: &reqwest::Response) -> RetryInfo {
    RetryInfo::of(response.extensions())
}

/// How many requests the server received for `route`.
async fn hits(server: &MockServer, route: &str) -> usize {
    server
        .received_requests()
        .await
        .expect("request recording is on")
        .iter()
        .filter(|request| request.url.path() == route)
        .count()
}

/// Records every retry the policy announces.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<RetryEvent>>>);

impl Events {
    fn hook(&self) -> impl Fn(&RetryEvent) + Send + Sync + 'static {
        let events = Arc::clone(&self.0);
        move |event| events.lock().unwrap().push(*event)
    }

    fn all(&self) -> Vec<RetryEvent> {
        self.0.lock().unwrap().clone()
    }
}

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap()
}
