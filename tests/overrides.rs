//! One request's own settings (`stagger::Overrides`, in its extensions): each override through
//! `RetryMiddleware` (`.with_extension`) and `RetryLayer` over `http::Request` (`extensions_mut`),
//! against a server in process on tokio's paused clock; and the guards an override cannot bypass.
//! `RetryLayer::grpc` reads them from a tonic request: `tests/grpc/wire.rs`.
#![cfg(all(feature = "tower", feature = "reqwest-middleware"))]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use http::{Extensions, Method};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use stagger::{
    Backoff, Breaker, ConfigError, Overrides, RetryBudget, RetryInfo, RetryLayer, RetryMiddleware,
    RetryPolicy, RetryPolicyBuilder, RetryReport, StopReason,
};
use tower::{Layer, ServiceExt};

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How the server answers its `n`-th call (from 1): a status, after a while.
type Script = fn(u32) -> (u16, Duration);

#[derive(Debug, Clone, Copy)]
enum Adapter {
    Middleware,
    Layer,
}

const BOTH: [Adapter; 2] = [Adapter::Middleware, Adapter::Layer];

/// How a call ended.
#[derive(Debug)]
struct Ended {
    /// The response's status; `None` for an error.
    status: Option<u16>,
    info: RetryInfo,
    /// The calls the server saw.
    calls: u32,
    took: Duration,
}

/// The last middleware of the chain: the server.
struct Scripted {
    calls: Arc<AtomicU32>,
    script: Script,
}

#[async_trait::async_trait]
impl Middleware for Scripted {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let (status, after) = (self.script)(n);
        tokio::time::sleep(after).await;
        let response = http::Response::builder()
            .status(status)
            .body(reqwest::Body::from(""));
        Ok(reqwest::Response::from(response.unwrap()))
    }
}

/// One `method` request through `adapter` under `policy`, with `overrides` in its extensions.
async fn call(
    adapter: Adapter,
    policy: RetryPolicy,
    method: Method,
    overrides: Option<Overrides>,
    script: Script,
) -> Ended {
    let calls = Arc::new(AtomicU32::new(0));
    let start = tokio::time::Instant::now();
    let (status, info) = match adapter {
        Adapter::Middleware => {
            let client = ClientBuilder::new(reqwest::Client::new())
                .with(RetryMiddleware::new(policy))
                .with(Scripted {
                    calls: Arc::clone(&calls),
                    script,
                })
                .build();
            let report = RetryReport::new();
            let mut request = client
                .request(method, "http://api.test/orders")
                .with_extension(report.clone());
            if let Some(overrides) = overrides {
                request = request.with_extension(overrides);
            }
            let status = request.send().await.ok().map(|r| r.status().as_u16());
            (
                status,
                report.get().expect("the middleware fills the report"),
            )
        }
        Adapter::Layer => {
            let counter = Arc::clone(&calls);
            let server = tower::service_fn(move |_: http::Request<String>| {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                let (status, after) = script(n);
                async move {
                    tokio::time::sleep(after).await;
                    let response = http::Response::builder().status(status).body(String::new());
                    Ok::<_, Infallible>(response.unwrap())
                }
            });
            let mut request = http::Request::builder()
                .method(method)
                .uri("http://api.test/orders")
                .body(String::new())
                .unwrap();
            if let Some(overrides) = overrides {
                request.extensions_mut().insert(overrides);
            }
            match RetryLayer::new(policy).layer(server).oneshot(request).await {
                Ok(response) => (
                    Some(response.status().as_u16()),
                    response.extensions().get::<RetryInfo>().unwrap().clone(),
                ),
                Err(error) => (None, error.info()),
            }
        }
    };
    Ended {
        status,
        info,
        calls: calls.load(Ordering::SeqCst),
        took: start.elapsed(),
    }
}

/// A policy whose delays are exactly 100 ms, without a budget or a breaker, so that what ends a call
/// is its settings.
fn exact() -> RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(100)))
        .budget(None)
        .breaker(None)
}

fn always(status: u16) -> Script {
    match status {
        503 => |_| (503, Duration::ZERO),
        502 => |_| (502, Duration::ZERO),
        _ => unreachable!(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_deadline_of_its_own_ends_the_request_s_retries() {
    for adapter in BOTH {
        let policy = exact().build().unwrap();
        let without = call(adapter, policy.clone(), Method::GET, None, always(503)).await;
        assert_eq!(without.calls, 11, "{adapter:?}: max_retries 10 within 30 s");
        let quick = Overrides::builder().deadline(ms(250)).build().unwrap();
        let with = call(adapter, policy, Method::GET, Some(quick), always(503)).await;
        // Sent at 0, 100 and 200 ms; a retry at 300 ms would pass the deadline.
        assert_eq!(with.calls, 3, "{adapter:?}");
        assert_eq!(
            with.info.stop_reason(),
            Some(StopReason::Deadline),
            "{adapter:?}"
        );
        assert!(with.took <= ms(250), "{adapter:?}: {:?}", with.took);
    }
}

#[tokio::test(start_paused = true)]
async fn max_retries_of_its_own_and_no_retries() {
    for adapter in BOTH {
        let policy = exact().build().unwrap();
        let one = Overrides::builder().max_retries(1).build().unwrap();
        let ended = call(adapter, policy.clone(), Method::GET, Some(one), always(503)).await;
        assert_eq!(ended.calls, 2, "{adapter:?}");
        assert_eq!(
            ended.info.stop_reason(),
            Some(StopReason::MaxRetries),
            "{adapter:?}"
        );
        assert_eq!(
            ended.status,
            Some(503),
            "{adapter:?}: the last answer, intact"
        );
        let none = Overrides::no_retries();
        let ended = call(adapter, policy, Method::GET, Some(none), always(503)).await;
        assert_eq!(ended.calls, 1, "{adapter:?}");
        // More retries than the policy's are the request's to take, too.
        let policy = exact().max_retries(1).build().unwrap();
        let five = Overrides::builder().max_retries(5).build().unwrap();
        let ended = call(adapter, policy, Method::GET, Some(five), always(503)).await;
        assert_eq!(ended.calls, 6, "{adapter:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_longer_attempt_timeout_lets_a_slow_answer_arrive() {
    // The server answers in 2 s; the policy's attempts last 1 s, and each is cut.
    let slow: Script = |_| (200, Duration::from_secs(2));
    for adapter in BOTH {
        let policy = exact()
            .attempt_timeout(Duration::from_secs(1))
            .max_retries(2)
            .build()
            .unwrap();
        let cut = call(adapter, policy.clone(), Method::GET, None, slow).await;
        assert_eq!(cut.status, None, "{adapter:?}: every attempt timed out");
        assert_eq!(cut.calls, 3, "{adapter:?}");
        let patient = Overrides::builder()
            .attempt_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let ended = call(adapter, policy.clone(), Method::GET, Some(patient), slow).await;
        assert_eq!((ended.status, ended.calls), (Some(200), 1), "{adapter:?}");
        assert_eq!(ended.took, Duration::from_secs(2), "{adapter:?}");
        let unbounded = Overrides::builder().attempt_timeout(None).build().unwrap();
        let ended = call(adapter, policy, Method::GET, Some(unbounded), slow).await;
        assert_eq!((ended.status, ended.calls), (Some(200), 1), "{adapter:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn hedging_turned_off_or_on_for_one_request() {
    // The first attempt takes a second, any other answers at once.
    let first_slow: Script = |n| {
        (
            200,
            if n == 1 {
                Duration::from_secs(1)
            } else {
                Duration::ZERO
            },
        )
    };
    for adapter in BOTH {
        let hedging = exact().hedge_after(ms(50)).build().unwrap();
        let hedged = call(adapter, hedging.clone(), Method::GET, None, first_slow).await;
        assert_eq!((hedged.calls, hedged.info.hedges()), (2, 1), "{adapter:?}");
        assert_eq!(hedged.took, ms(50), "{adapter:?}");
        let off = Overrides::builder().hedge_after(None).build().unwrap();
        let alone = call(adapter, hedging, Method::GET, Some(off), first_slow).await;
        assert_eq!((alone.calls, alone.info.hedges()), (1, 0), "{adapter:?}");
        assert_eq!(alone.took, Duration::from_secs(1), "{adapter:?}");
        let on = Overrides::builder().hedge_after(ms(50)).build().unwrap();
        let policy = exact().build().unwrap();
        let hedged = call(adapter, policy, Method::GET, Some(on), first_slow).await;
        assert_eq!((hedged.calls, hedged.info.hedges()), (2, 1), "{adapter:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_marked_idempotent_is_retried_after_a_502_and_a_get_marked_not_is_not() {
    let bad_gateway_once: Script = |n| (if n == 1 { 502 } else { 200 }, Duration::ZERO);
    for adapter in BOTH {
        let policy = exact().build().unwrap();
        let post = call(
            adapter,
            policy.clone(),
            Method::POST,
            None,
            bad_gateway_once,
        )
        .await;
        assert_eq!(
            post.info.stop_reason(),
            Some(StopReason::NotIdempotent),
            "{adapter:?}"
        );
        assert_eq!(post.calls, 1, "{adapter:?}");
        let safe = Overrides::builder().idempotent(true).build().unwrap();
        let post = call(
            adapter,
            policy.clone(),
            Method::POST,
            Some(safe),
            bad_gateway_once,
        )
        .await;
        assert_eq!((post.status, post.calls), (Some(200), 2), "{adapter:?}");
        let unsafe_get = Overrides::builder().idempotent(false).build().unwrap();
        let get = call(adapter, policy, Method::GET, Some(unsafe_get), always(502)).await;
        assert_eq!(
            get.info.stop_reason(),
            Some(StopReason::NotIdempotent),
            "{adapter:?}"
        );
        assert_eq!(get.calls, 1, "{adapter:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_override_does_not_spend_past_the_budget() {
    for adapter in BOTH {
        // One retry a second between every clone of the policy, whatever a request asks.
        let budget = RetryBudget::builder()
            .ratio(0.0)
            .min_per_second(1)
            .window(Duration::from_secs(1))
            .build()
            .unwrap();
        let policy = exact().budget(budget).build().unwrap();
        let greedy = Overrides::builder().max_retries(10).build().unwrap();
        let ended = call(adapter, policy, Method::GET, Some(greedy), always(503)).await;
        assert_eq!(ended.calls, 2, "{adapter:?}");
        assert_eq!(
            ended.info.stop_reason(),
            Some(StopReason::Budget),
            "{adapter:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn an_override_does_not_reach_a_host_the_breaker_found_down() {
    for adapter in BOTH {
        let policy = exact()
            .breaker(Breaker::fail_fast())
            .max_retries(5)
            .build()
            .unwrap();
        // Five 503s in a row: the host is down.
        let first = call(adapter, policy.clone(), Method::GET, None, always(503)).await;
        assert_eq!(
            first.calls, 5,
            "{adapter:?}: the retry after the fifth is not sent"
        );
        let greedy = Overrides::builder()
            .max_retries(10)
            .deadline(Duration::from_secs(60))
            .build()
            .unwrap();
        let next = call(adapter, policy, Method::GET, Some(greedy), always(503)).await;
        assert_eq!(next.calls, 0, "{adapter:?}: not sent");
        assert_eq!(
            next.info.stop_reason(),
            Some(StopReason::HostDown),
            "{adapter:?}"
        );
    }
}

#[test]
fn build_refuses_what_the_policy_s_builder_refuses() {
    let zero = Duration::ZERO;
    assert_eq!(
        Overrides::builder().deadline(zero).build(),
        Err(ConfigError::MaxElapsed(zero))
    );
    assert_eq!(
        Overrides::builder().attempt_timeout(zero).build(),
        Err(ConfigError::AttemptTimeout(zero))
    );
    assert_eq!(
        Overrides::builder().hedge_after(zero).build(),
        Err(ConfigError::HedgeAfter(zero))
    );
    assert_eq!(Overrides::builder().build(), Ok(Overrides::default()));
}
