//! What `RetryLayer` costs a request that succeeds at once, beside what a retry layer cannot avoid.
//!
//! The inner service answers `200` without doing anything, so every nanosecond above `bare` is the
//! layer's. Each request is one `ready().await` and one `call().await`, its response dropped inside the
//! measurement (with the `RetryInfo` the layer puts in it). Requests are built outside the measurement,
//! fresh for each iteration, the way an application builds them: a URI and two header values on the heap.
//!
//! - `bare`: the service alone.
//! - `request_clone`: one copy of the request, made and dropped; the floor under any retry layer.
//! - `tower_retry`: `tower::retry::Retry` with a minimal policy (3 retries on 5xx, no delay, no budget).
//! - `stagger`: `RetryLayer::new(RetryPolicy::default())`.
//! - `stagger_no_budget`: the same without the retry budget, to show what the budget costs.
//!
//! Target: `stagger − bare ≤ request_clone + 40 ns`. The group `pieces` times the parts of that cost.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hint::black_box;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use http::header::{ACCEPT, AUTHORIZATION, USER_AGENT};
use http::{HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use stagger::{RetryLayer, RetryPolicy, classify_status};
use tower::retry::Policy;
use tower::retry::budget::{Budget as _, TpsBudget};
use tower::{Layer, Service, ServiceExt};

/// Requests built ahead of each timed batch: enough to amortise the timer, few enough to stay in cache.
const BATCH: u64 = 256;

/// GET https://api.example.com/v1/items?page=2 with four headers and an empty body, built the way an
/// application builds one: the URI and the per-request header values are parsed from owned strings.
fn request() -> Request<Bytes> {
    let mut request = Request::new(Bytes::new());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = String::from("https://api.example.com/v1/items?page=2")
        .parse()
        .expect("a valid URI");
    let headers = request.headers_mut();
    headers.insert(USER_AGENT, HeaderValue::from_static("stagger-bench/0.1"));
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_str(
            "Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwiaWF0IjoxNzAwMDAwMDAwfQ.\
             SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
        )
        .expect("a valid header value"),
    );
    headers.insert(
        HeaderName::from_static("x-request-id"),
        HeaderValue::from_str("0f8fad5b-d9cb-469f-a165-70867728950e")
            .expect("a valid header value"),
    );
    request
}

/// Copies a request the way any retry policy must: `http::Request` is not `Clone`.
fn clone_request(request: &Request<Bytes>) -> Request<Bytes> {
    let mut copy = Request::new(request.body().clone());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    copy
}

/// Answers `200` at once.
#[derive(Debug, Clone, Copy)]
struct Ok200;

impl Service<Request<Bytes>> for Ok200 {
    type Response = Response<Bytes>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Bytes>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        drop(request);
        ready(Ok(Response::new(Bytes::new())))
    }
}

/// The least a `tower::retry::Policy` does: up to 3 retries of a 5xx, at once, copying the request.
#[derive(Debug, Clone, Copy)]
struct RetryServerErrors {
    remaining: u32,
}

impl<E> Policy<Request<Bytes>, Response<Bytes>, E> for RetryServerErrors {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _request: &mut Request<Bytes>,
        result: &mut Result<Response<Bytes>, E>,
    ) -> Option<Self::Future> {
        match result {
            Ok(response) if response.status().is_server_error() && self.remaining > 0 => {
                self.remaining -= 1;
                Some(ready(()))
            }
            _ => None,
        }
    }

    fn clone_request(&mut self, request: &Request<Bytes>) -> Option<Request<Bytes>> {
        Some(clone_request(request))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Sends `iters` fresh requests through `service`, timing only the sending: the requests of each batch
/// are built before its clock starts.
async fn send_all<S>(mut service: S, iters: u64) -> Duration
where
    S: Service<Request<Bytes>, Response = Response<Bytes>, Error = Infallible>,
{
    let mut total = Duration::ZERO;
    let mut left = iters;
    let mut batch = Vec::with_capacity(BATCH as usize);
    while left > 0 {
        let n = left.min(BATCH);
        batch.extend((0..n).map(|_| request()));
        let start = Instant::now();
        for request in batch.drain(..) {
            let ready = service.ready().await.unwrap_or_else(|e| match e {});
            let response = ready.call(request).await.unwrap_or_else(|e| match e {});
            debug_assert_eq!(response.status(), StatusCode::OK);
            drop(black_box(response));
        }
        total += start.elapsed();
        left -= n;
    }
    total
}

/// Copies `iters` fresh requests and drops the copies, timing only that, batched as in `send_all`; the
/// originals are dropped outside the measurement, as the service drops them in `bare`.
fn clone_all<R>(iters: u64, mut request: impl FnMut() -> R, copy: impl Fn(&R) -> R) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    let mut batch = Vec::with_capacity(BATCH as usize);
    while left > 0 {
        let n = left.min(BATCH);
        batch.extend((0..n).map(|_| request()));
        let start = Instant::now();
        for original in &batch {
            drop(black_box(copy(black_box(original))));
        }
        total += start.elapsed();
        batch.clear();
        left -= n;
    }
    total
}

fn success_path(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("tower_success");

    group.bench_function("bare", |b| {
        b.to_async(&rt).iter_custom(|iters| send_all(Ok200, iters));
    });

    group.bench_function("request_clone", |b| {
        b.iter_custom(|iters| clone_all(iters, request, clone_request));
    });

    let tower_retry =
        tower::retry::RetryLayer::new(RetryServerErrors { remaining: 3 }).layer(Ok200);
    group.bench_function("tower_retry", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| send_all(tower_retry.clone(), iters));
    });

    let stagger = RetryLayer::new(RetryPolicy::default()).layer(Ok200);
    group.bench_function("stagger", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| send_all(stagger.clone(), iters));
    });

    let policy = RetryPolicy::builder()
        .no_budget()
        .build()
        .expect("a valid policy");
    let stagger_no_budget = RetryLayer::new(policy).layer(Ok200);
    group.bench_function("stagger_no_budget", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| send_all(stagger_no_budget.clone(), iters));
    });

    group.finish();
}

/// The parts of the layer's success path, each alone.
fn pieces(c: &mut Criterion) {
    let mut group = c.benchmark_group("tower_pieces");

    let policy = RetryPolicy::default();
    group.bench_function("policy_start_and_drop", |b| {
        b.iter(|| drop(black_box(&policy).start()));
    });
    let policy_no_budget = RetryPolicy::builder()
        .no_budget()
        .build()
        .expect("a valid policy");
    group.bench_function("policy_start_and_drop_no_budget", |b| {
        b.iter(|| drop(black_box(&policy_no_budget).start()));
    });

    // tower's budget, which stagger replaced with its own (see `src/budget.rs`): a lock and a clock read
    // per deposit. Kept for comparison with `policy_start_and_drop`, whose deposit is two atomic adds.
    let budget = TpsBudget::default();
    group.bench_function("tps_budget_deposit", |b| {
        b.iter(|| black_box(&budget).deposit());
    });
    group.bench_function("tokio_instant_now", |b| {
        b.iter(tokio::time::Instant::now);
    });
    group.bench_function("std_instant_now", |b| {
        b.iter(Instant::now);
    });

    group.bench_function("classify_status_200", |b| {
        b.iter(|| classify_status(black_box(StatusCode::OK)));
    });

    // What recording `RetryInfo` adds to a response: the extensions' map and the boxed value, allocated
    // and freed.
    let info = policy_no_budget.start().info();
    group.bench_function("response_new_and_drop", |b| {
        b.iter(|| drop(black_box(Response::new(Bytes::new()))));
    });
    group.bench_function("response_new_insert_info_and_drop", |b| {
        b.iter(|| {
            let mut response = Response::new(Bytes::new());
            response.extensions_mut().insert(black_box(info));
            drop(black_box(response));
        });
    });

    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    targets = success_path, pieces
}
criterion_main!(benches);
