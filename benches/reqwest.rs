//! What `RetryMiddleware` costs a request that succeeds at once, beside reqwest-retry and what a retry
//! middleware cannot avoid.
//!
//! The last middleware of every chain answers `200` without touching the network, so every nanosecond
//! above `bare` is the retry middleware's. Each request is one `ClientWithMiddleware::execute`, its
//! response dropped inside the measurement. Requests are built outside the measurement, fresh for each
//! iteration.
//!
//! - `bare`: the chain with the answering middleware only.
//! - `request_try_clone`: one `reqwest::Request::try_clone`, made and dropped; the floor under any retry
//!   middleware.
//! - `forward`: the same chain with a middleware that only hands the request on: what any middleware
//!   costs (reqwest-middleware boxes each one's future).
//! - `reqwest_retry`: reqwest-retry's `RetryTransientMiddleware`, exponential backoff, 3 retries.
//! - `stagger`: `RetryMiddleware::new(RetryPolicy::default())`.
//! - `stagger_no_budget`: the same without the retry budget.
//!
//! Target: `stagger − bare ≤ request_try_clone + 40 ns`.

use std::future::Future;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use http::header::{ACCEPT, AUTHORIZATION, USER_AGENT};
use http::{Extensions, HeaderName, HeaderValue, Method};
use reqwest::{Request, Response, Url};
use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use stagger::{RetryMiddleware, RetryPolicy};

/// Requests built ahead of each timed batch: enough to amortise the timer, few enough to stay in cache.
const BATCH: u64 = 256;

/// GET https://api.example.com/v1/items?page=2 with four headers and no body, built the way an
/// application builds one: the URL and the per-request header values are parsed from strings.
fn request() -> Request {
    let url = Url::parse("https://api.example.com/v1/items?page=2").expect("a valid URL");
    let mut request = Request::new(Method::GET, url);
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

/// The end of every chain: answers `200` at once, without a network.
fn answer_200<'a>(
    request: Request,
    _extensions: &'a mut Extensions,
    _next: Next<'a>,
) -> Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'a>> {
    drop(request);
    Box::pin(async { Ok(Response::from(http::Response::new(""))) })
}

/// The cheapest middleware there is: hands the request on. What being a middleware costs, retrying or not.
fn forward<'a>(
    request: Request,
    extensions: &'a mut Extensions,
    next: Next<'a>,
) -> Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'a>> {
    next.run(request, extensions)
}

fn chain(retry: Option<Arc<dyn Middleware>>) -> ClientWithMiddleware {
    let answer: Arc<dyn Middleware> = Arc::new(answer_200);
    let middlewares: Vec<Arc<dyn Middleware>> = retry.into_iter().chain([answer]).collect();
    ClientWithMiddleware::new(reqwest::Client::new(), middlewares)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Sends `iters` fresh requests through `client`, timing only the sending: the requests of each batch
/// are built before its clock starts.
async fn send_all(client: &ClientWithMiddleware, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = iters;
    let mut batch = Vec::with_capacity(BATCH as usize);
    while left > 0 {
        let n = left.min(BATCH);
        batch.extend((0..n).map(|_| request()));
        let start = Instant::now();
        for request in batch.drain(..) {
            let response = client.execute(request).await.expect("a response");
            debug_assert_eq!(response.status(), http::StatusCode::OK);
            drop(black_box(response));
        }
        total += start.elapsed();
        left -= n;
    }
    total
}

/// Copies `iters` fresh requests and drops the copies, timing only that, batched as in `send_all`; the
/// originals are dropped outside the measurement, as the last middleware drops them in `bare`.
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
    let mut group = c.benchmark_group("reqwest_success");

    let bare = chain(None);
    group.bench_function("bare", |b| {
        b.to_async(&rt).iter_custom(|iters| send_all(&bare, iters));
    });

    group.bench_function("request_try_clone", |b| {
        b.iter_custom(|iters| {
            clone_all(iters, request, |r| {
                r.try_clone().expect("no body to stream")
            })
        });
    });

    let forwarding = chain(Some(Arc::new(forward)));
    group.bench_function("forward", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| send_all(&forwarding, iters));
    });

    let reqwest_retry = chain(Some(Arc::new(RetryTransientMiddleware::new_with_policy(
        ExponentialBackoff::builder().build_with_max_retries(3),
    ))));
    group.bench_function("reqwest_retry", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| send_all(&reqwest_retry, iters));
    });

    let stagger = chain(Some(Arc::new(RetryMiddleware::new(RetryPolicy::default()))));
    group.bench_function("stagger", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| send_all(&stagger, iters));
    });

    let policy = RetryPolicy::builder()
        .no_budget()
        .build()
        .expect("a valid policy");
    let stagger_no_budget = chain(Some(Arc::new(RetryMiddleware::new(policy))));
    group.bench_function("stagger_no_budget", |b| {
        b.to_async(&rt)
            .iter_custom(|iters| send_all(&stagger_no_budget, iters));
    });

    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    targets = success_path
}
criterion_main!(benches);
