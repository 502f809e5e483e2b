//! A delay a classifier names (`Outcome::RetryAfter`), treated exactly as `Retry-After`: a floor,
//! spread, ended by `max_retry_after`, a pause for the host's cooldown, the longer of it and a header's.
//!
//! With the two classifiers of `examples/server_delay/` themselves: OpenAI's `x-ratelimit-reset-*`
//! headers (Go durations, one per limit), and `google.rpc.RetryInfo` in a JSON error body, read once
//! by a middleware below the retry layer. Through both adapters a reqwest user has, on tokio's paused
//! clock, against servers in process.
#![cfg(all(feature = "reqwest-middleware", feature = "tower"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use reqwest_middleware::{ClientBuilder, Middleware, Next};
use stagger::classify::ClassifyHttp;
use stagger::{
    Backoff, RetryAfterMode, RetryEvent, RetryInfo, RetryMiddleware, RetryPolicy, StopReason,
};

mod common;

#[path = "../examples/server_delay/body.rs"]
mod body;
#[path = "../examples/server_delay/openai.rs"]
mod openai;

use common::scripted::{Adapter, Retries, Server, both_paused, info, ms, reply};

const SECOND: Duration = Duration::from_secs(1);

/// One retry at most, the backoff (20 ms) and the throttle schedule (50 ms) far from every delay named
/// here, `Strict` so that the retry waits the floor itself, no deadline: what the retry waits is the
/// delay, exactly.
fn strict(retries: &Retries, classifier: impl ClassifyHttp) -> RetryPolicy {
    RetryPolicy::builder()
        .classifier(classifier)
        .backoff(Backoff::fixed(ms(20)))
        .throttle_backoff(Backoff::fixed(ms(50)))
        .retry_after(RetryAfterMode::Strict)
        .max_retry_after(Duration::from_secs(600))
        .max_elapsed(None)
        .max_retries(1)
        .on_retry(retries.hook())
        .build()
        .unwrap()
}

/// OpenAI's headers on a `429` whose token limit is spent and resets in `tokens`, while the request
/// limit has 59 left and resets in 12 ms.
fn openai_429(tokens: &str) -> common::scripted::Reply {
    reply(429)
        .header("x-ratelimit-remaining-requests", 59)
        .header("x-ratelimit-reset-requests", "12ms")
        .header("x-ratelimit-remaining-tokens", 0)
        .header("x-ratelimit-reset-tokens", tokens.to_owned())
}

/// The gap between the first attempt's arrival and the retry's, after the server answered `first`
/// and then 200, and the retry as the policy decided it.
async fn waited(
    adapter: Adapter,
    policy: RetryPolicy,
    retries: &Retries,
    first: common::scripted::Reply,
) -> (Duration, RetryEvent) {
    let server = Server::in_process();
    let url = server.script("/v1/chat/completions", [first]);
    let response = adapter.client(policy).get(&url).await.unwrap();
    assert_eq!(response.status(), 200, "{adapter:?}");
    assert_eq!(info(&response).attempts(), 2, "{adapter:?}");
    let arrivals = server.arrivals("/v1/chat/completions");
    let [retry] = retries.all()[..] else {
        panic!("{adapter:?}: one retry, got {:?}", retries.all());
    };
    (arrivals[1].at - arrivals[0].at, retry)
}

#[test]
fn an_openai_429_with_its_token_limit_spent_waits_6_minutes_not_12_ms() {
    both_paused(|adapter| async move {
        let retries = Retries::default();
        let policy = strict(&retries, openai::OpenAiRateLimits);
        let (gap, retry) = waited(adapter, policy, &retries, openai_429("6m0s")).await;
        assert_eq!(retry.retry_after, Some(360 * SECOND), "{adapter:?}");
        assert_eq!(retry.delay, 360 * SECOND, "{adapter:?}");
        assert_eq!(gap, 360 * SECOND, "{adapter:?}");
    });
}

#[test]
fn with_the_defaults_it_stops_at_once_as_a_retry_after_of_360_does() {
    both_paused(|adapter| async move {
        // The defaults' max_retry_after is 30 s: a server delay past it ends the call with the answer.
        let named = RetryPolicy::builder()
            .classifier(openai::OpenAiRateLimits)
            .build()
            .unwrap();
        let server = Server::in_process();
        let url = server.script("/named", [openai_429("6m0s")]);
        let response = adapter.client(named).get(&url).await.unwrap();
        let header = RetryPolicy::default();
        let url = server.script("/header", [reply(429).header("Retry-After", 360)]);
        let compared = adapter.client(header).get(&url).await.unwrap();
        for response in [&response, &compared] {
            assert_eq!(response.status(), 429, "{adapter:?}");
            assert_eq!(info(response).attempts(), 1, "{adapter:?}");
            assert_eq!(
                info(response).stop_reason(),
                Some(StopReason::RetryAfterTooLong),
                "{adapter:?}"
            );
        }
        assert_eq!(server.hits(), 2, "{adapter:?}: one attempt each");
    });
}

#[test]
fn the_longest_reset_of_the_spent_limits_is_waited() {
    both_paused(|adapter| async move {
        let retries = Retries::default();
        let policy = strict(&retries, openai::OpenAiRateLimits);
        let both_spent = reply(429)
            .header("x-ratelimit-remaining-requests", 0)
            .header("x-ratelimit-reset-requests", "1.5s")
            .header("x-ratelimit-remaining-tokens", 0)
            .header("x-ratelimit-reset-tokens", "250ms");
        let (gap, _) = waited(adapter, policy, &retries, both_spent).await;
        assert_eq!(gap, ms(1500), "{adapter:?}");
    });
}

#[test]
fn a_named_delay_and_a_retry_after_on_one_answer_the_longer_is_waited() {
    both_paused(|adapter| async move {
        for (tokens, retry_after, longer) in [("1s", 2, 2 * SECOND), ("3s", 2, 3 * SECOND)] {
            let retries = Retries::default();
            let policy = strict(&retries, openai::OpenAiRateLimits);
            let first = openai_429(tokens).header("Retry-After", retry_after);
            let (gap, _) = waited(adapter, policy, &retries, first).await;
            assert_eq!(
                gap, longer,
                "{adapter:?}: {tokens} and Retry-After: {retry_after}"
            );
        }
    });
}

#[test]
fn a_named_delay_spreads_like_a_retry_after_under_the_default_mode() {
    both_paused(|adapter| async move {
        // Spread: the floor, plus a share of a window as long as the floor, cut to what
        // max_retry_after leaves: 2 s + U[0, 2 s].
        let retries = Retries::default();
        let policy = RetryPolicy::builder()
            .classifier(openai::OpenAiRateLimits)
            .backoff(Backoff::fixed(ms(20)))
            .max_retries(1)
            .on_retry(retries.hook())
            .build()
            .unwrap();
        let (gap, retry) = waited(adapter, policy, &retries, openai_429("2s")).await;
        assert_eq!(retry.retry_after, Some(2 * SECOND), "{adapter:?}");
        let delay = retry.delay;
        assert!(
            delay >= 2 * SECOND && delay <= 4 * SECOND,
            "{adapter:?}: {delay:?}"
        );
        // tokio's timer ends a sleep at its next millisecond.
        assert!(
            gap >= delay && gap <= delay + ms(1),
            "{adapter:?}: {gap:?} for {delay:?}"
        );
    });
}

#[test]
fn a_named_delay_holds_the_host_when_the_policy_keeps_its_pauses() {
    both_paused(|adapter| async move {
        let policy = RetryPolicy::builder()
            .classifier(openai::OpenAiRateLimits)
            .host_cooldown(true)
            .max_retries(0)
            .build()
            .unwrap();
        let server = Server::in_process();
        let url = server.script("/v1/chat/completions", [openai_429("2s")]);
        let client = adapter.client(policy);
        let first = client.get(&url).await.unwrap();
        assert_eq!(first.status(), 429, "{adapter:?}");
        // The next request to the host waits out the 2 s the first answer named.
        let second = client.get(&url).await.unwrap();
        assert_eq!(second.status(), 200, "{adapter:?}");
        let arrivals = server.arrivals("/v1/chat/completions");
        assert!(
            arrivals[1].at - arrivals[0].at >= 2 * SECOND,
            "{adapter:?}: {:?}",
            arrivals[1].at - arrivals[0].at
        );
    });
}

// ---------------------------------------------------------------------------------------------------
// A delay in a JSON body
// ---------------------------------------------------------------------------------------------------

const RETRY_INFO_BODY: &str = r#"{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}]}}"#;

/// The last link of the chain: answers the first `refusals` attempts `429` with Google's JSON error
/// body, then `200`.
struct Google {
    calls: Arc<AtomicU32>,
    refusals: u32,
}

#[async_trait::async_trait]
impl Middleware for Google {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let refused = self.calls.fetch_add(1, Ordering::SeqCst) < self.refusals;
        let response = if refused {
            http::Response::builder()
                .status(429)
                .header("content-type", "application/json")
                .body(reqwest::Body::from(RETRY_INFO_BODY))
        } else {
            http::Response::builder()
                .status(200)
                .body(reqwest::Body::from("ok"))
        };
        Ok(reqwest::Response::from(response.unwrap()))
    }
}

async fn through_body_reader(refusals: u32) -> (reqwest::Response, u32, Duration) {
    let calls = Arc::new(AtomicU32::new(0));
    let policy = RetryPolicy::builder()
        .classifier(body::BodyDelays)
        .backoff(Backoff::fixed(ms(20)))
        .retry_after(RetryAfterMode::Strict)
        .max_retries(1)
        .build()
        .unwrap();
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(policy))
        .with(body::ReadRetryDelay)
        .with(Google {
            calls: Arc::clone(&calls),
            refusals,
        })
        .build();
    let start = tokio::time::Instant::now();
    let response = client.get("http://translate.test/v2").send().await.unwrap();
    (response, calls.load(Ordering::SeqCst), start.elapsed())
}

#[tokio::test(start_paused = true)]
async fn a_retry_delay_in_a_json_body_floors_the_retry() {
    let (response, calls, took) = through_body_reader(1).await;
    assert_eq!(response.status(), 200);
    assert_eq!(calls, 2);
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!(info.slept(), ms(1500));
    assert!(took >= ms(1500), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn the_last_answer_keeps_the_body_the_reader_read() {
    let (response, calls, _) = through_body_reader(2).await;
    assert_eq!(calls, 2);
    assert_eq!(response.status(), 429);
    assert_eq!(response.text().await.unwrap(), RETRY_INFO_BODY);
}
