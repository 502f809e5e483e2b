//! The tower layer end to end: an in-process service under paused time, then `reqwest::Client` and
//! hyper-util's client against wiremock on loopback.
//!
//! Every test asserts how many times the server saw the request. One module per subject, under
//! `tests/tower/`; this file holds what they share.
#![cfg(feature = "tower")]

use std::convert::Infallible;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use stagger::adapter::AsError;
use stagger::{
    Backoff, Jitter, RetryBudget, RetryEvent, RetryInfo, RetryLayer, RetryPolicy,
    RetryPolicyBuilder,
};
use tokio::time::Instant;
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

mod common;

// One module per subject; docs/rules.md says which test pins down which promise.
#[path = "tower/budget.rs"]
mod budget;
#[path = "tower/cooldown.rs"]
mod cooldown;
#[path = "tower/coop.rs"]
mod coop;
#[path = "tower/deadline.rs"]
mod deadline;
#[path = "tower/delays.rs"]
mod delays;
#[path = "tower/events.rs"]
mod events;
#[cfg(feature = "hyper-util")]
#[path = "tower/hyper_util_client.rs"]
mod hyper_util_client;
#[path = "tower/idempotency.rs"]
mod idempotency;
#[path = "tower/readiness.rs"]
mod readiness;
#[cfg(feature = "reqwest")]
#[path = "tower/reqwest_client.rs"]
mod reqwest_client;
#[path = "tower/responses.rs"]
mod responses;
#[path = "tower/server_delay.rs"]
mod server_delay;

// What the modules share: an in-process server that counts its attempts, the requests and policies
// most tests start from, and `send`, one call through the layer.

type Req = Request<String>;
type Res = Response<String>;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A policy without jitter, without a budget and without a breaker: every delay is the backoff's
/// ceiling (100, 200, 400 ms … from an `initial` of 100 ms), and a host failing every attempt is not
/// found down (tests/breaker.rs has the breaker's own tests).
fn exact(initial: Duration) -> RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::exponential(initial).with_jitter(Jitter::None))
        .budget(None)
        .breaker(None)
}

/// Builds the policy with a hook that records every retry it announces.
fn recorded(builder: RetryPolicyBuilder) -> (RetryPolicy, Arc<Mutex<Vec<RetryEvent>>>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    let policy = builder
        .on_retry(move |event| sink.lock().unwrap().push(*event))
        .build()
        .unwrap();
    (policy, events)
}

fn delays(events: &Mutex<Vec<RetryEvent>>) -> Vec<Duration> {
    events.lock().unwrap().iter().map(|e| e.delay).collect()
}

fn info<B>(response: &Response<B>) -> RetryInfo {
    response
        .extensions()
        .get::<RetryInfo>()
        .expect("RetryInfo in the final response's extensions")
        .clone()
}

/// When each attempt reached the server.
#[derive(Clone, Default)]
struct Hits(Arc<Mutex<Vec<Instant>>>);

impl Hits {
    /// Records an attempt and returns its number, from 1.
    fn hit(&self) -> usize {
        let mut hits = self.0.lock().unwrap();
        hits.push(Instant::now());
        hits.len()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// Each attempt's time, measured from `start`.
    fn offsets(&self, start: Instant) -> Vec<Duration> {
        self.0.lock().unwrap().iter().map(|t| *t - start).collect()
    }
}

/// A budget of exactly one retry: no share of the load, a floor of one retry a second over one second.
fn one_retry() -> RetryBudget {
    RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(1)
        .window(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// An in-process server that answers attempt `n` (from 1) with `respond(n, &request)`.
fn server<F>(
    hits: &Hits,
    respond: F,
) -> impl Service<Req, Response = Res, Error = Infallible, Future: Send> + Clone + Send + use<F>
where
    F: Fn(usize, &Req) -> Res + Clone + Send + 'static,
{
    let hits = hits.clone();
    service_fn(move |request: Req| {
        let response = respond(hits.hit(), &request);
        async move { Ok::<_, Infallible>(response) }
    })
}

fn status(code: u16) -> Res {
    Response::builder()
        .status(code)
        .body(String::new())
        .unwrap()
}

/// Fails with 503 until attempt `successful`, which gets 200 "ok".
fn fails_until(successful: usize) -> impl Fn(usize, &Req) -> Res + Clone + Send + 'static {
    move |n, _| match n {
        n if n < successful => status(503),
        _ => Response::new("ok".to_owned()),
    }
}

fn always(code: u16) -> impl Fn(usize, &Req) -> Res + Clone + Send + 'static {
    move |_, _| status(code)
}

fn get() -> Req {
    Request::get("http://test.invalid/")
        .body(String::new())
        .unwrap()
}

async fn send<S>(
    policy: RetryPolicy,
    inner: S,
    request: Req,
) -> Result<Res, stagger::Error<S::Error>>
where
    S: Service<Req, Response = Res> + Clone,
    S::Error: AsError,
{
    ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(inner)
        .oneshot(request)
        .await
}

/// An inner service that fails every attempt with an `io::Error` of `kind`, numbered.
fn failing(
    hits: &Hits,
    kind: io::ErrorKind,
) -> impl Service<Req, Response = Res, Error = io::Error> + Clone {
    let hits = hits.clone();
    service_fn(move |_: Req| {
        let n = hits.hit();
        async move { Err::<Res, _>(io::Error::new(kind, format!("failure #{n}"))) }
    })
}

/// A POST of an order, with `key` as its `Idempotency-Key` if any.
fn post(key: Option<&str>) -> Req {
    let mut request = Request::post("http://test.invalid/orders");
    if let Some(key) = key {
        request = request.header("Idempotency-Key", key);
    }
    request.body(r#"{"item":42}"#.to_owned()).unwrap()
}

/// A service that counts each call and never answers.
fn hung(
    hits: &Hits,
) -> impl Service<Req, Response = Res, Error = Infallible, Future: Send> + Clone {
    let hits = hits.clone();
    service_fn(move |_: Req| {
        hits.hit();
        std::future::pending::<Result<Res, Infallible>>()
    })
}
