//! The success-path overhead of both adapters, measured in two ways that a noisy machine blurs less than
//! criterion's means (`benches/tower.rs` and `benches/reqwest.rs` time the same variants with criterion).
//!
//! ```text
//! cargo bench --all-features --bench overhead                     # interleaved rounds: min and median ns
//! cargo bench --all-features --bench overhead -- --instructions   # callgrind: instructions per request
//! ```
//!
//! - Interleaved rounds: each round sends a batch of 2048 fresh requests through every variant in turn,
//!   so a slow moment of the machine hits every variant alike; the minimum over the rounds is the cost
//!   with the least interference, the median a typical one.
//! - Instructions (needs `valgrind` on the `PATH`): each variant runs alone under callgrind, once with
//!   N and once with 2N requests; the difference divided by N is what one request costs, exactly and
//!   the same on every run.
//!
//! Every variant builds its requests the same way; `build` only builds and drops them, so
//! `clone − build` is one copy of a request, and `X − bare` is what the layer or middleware `X` adds.
//! The inner service (tower) or the last middleware (reqwest-middleware) answers `200` at once; the
//! `_conn` variants answer with the extension a real connection's response carries (hyper-util's
//! `HttpInfo`), so the response's extensions map already exists when `RetryInfo` is put in it.

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::Command;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, USER_AGENT};
use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Method, Request, Response};
use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use stagger::{RetryLayer, RetryMiddleware, RetryPolicy};
use tokio::runtime::Runtime;
use tower::retry::Policy;
use tower::{Layer, Service, ServiceExt};

const BATCH: usize = 2048;
const ROUNDS: usize = 40;
const CALLGRIND_REQUESTS: usize = 10_000;

const URL: &str = "https://api.example.com/v1/items?page=2";
const TOKEN: &str = "Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwiaWF0IjoxNz\
                     AwMDAwMDAwfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

/// The four headers of every request: two static, two parsed per request as an application would.
fn headers(headers: &mut HeaderMap) {
    headers.insert(USER_AGENT, HeaderValue::from_static("stagger-bench/0.1"));
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    headers.insert(
        AUTHORIZATION,
        HeaderValue::from_str(TOKEN).expect("a header value"),
    );
    headers.insert(
        HeaderName::from_static("x-request-id"),
        HeaderValue::from_str("0f8fad5b-d9cb-469f-a165-70867728950e").expect("a header value"),
    );
}

fn http_request() -> Request<Bytes> {
    let mut request = Request::new(Bytes::new());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = String::from(URL).parse().expect("a URI");
    headers(request.headers_mut());
    request
}

fn reqwest_request() -> reqwest::Request {
    let mut request = reqwest::Request::new(Method::GET, URL.parse().expect("a URL"));
    headers(request.headers_mut());
    request
}

/// Copies an `http::Request` the way any retry layer must (it is not `Clone`).
fn clone_http(request: &Request<Bytes>) -> Request<Bytes> {
    let mut copy = Request::new(request.body().clone());
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    *copy.extensions_mut() = request.extensions().clone();
    copy
}

/// What hyper-util's connector puts in every response it receives.
#[derive(Debug, Clone, Copy)]
struct HttpInfo {
    _remote: SocketAddr,
    _local: SocketAddr,
}

fn response_200(conn: bool) -> Response<Bytes> {
    let mut response = Response::new(Bytes::new());
    if conn {
        let address = SocketAddr::from(([127, 0, 0, 1], 8080));
        response.extensions_mut().insert(HttpInfo {
            _remote: address,
            _local: address,
        });
    }
    response
}

/// Answers `200` at once.
#[derive(Debug, Clone, Copy)]
struct Ok200 {
    conn: bool,
}

impl Service<Request<Bytes>> for Ok200 {
    type Response = Response<Bytes>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Bytes>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        drop(request);
        ready(Ok(response_200(self.conn)))
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
        Some(clone_http(request))
    }
}

type BoxedResponse<'a> =
    Pin<Box<dyn Future<Output = reqwest_middleware::Result<reqwest::Response>> + Send + 'a>>;

/// The end of every reqwest-middleware chain: answers `200` at once.
fn answer_200<'a>(
    request: reqwest::Request,
    _extensions: &'a mut Extensions,
    _next: Next<'a>,
) -> BoxedResponse<'a> {
    drop(request);
    Box::pin(async { Ok(reqwest::Response::from(response_200(false))) })
}

/// The same, with the extension a connection's response carries.
fn answer_200_conn<'a>(
    request: reqwest::Request,
    _extensions: &'a mut Extensions,
    _next: Next<'a>,
) -> BoxedResponse<'a> {
    drop(request);
    Box::pin(async { Ok(reqwest::Response::from(response_200(true))) })
}

/// The cheapest middleware: hands the request on. What being a middleware costs.
fn forward<'a>(
    request: reqwest::Request,
    extensions: &'a mut Extensions,
    next: Next<'a>,
) -> BoxedResponse<'a> {
    next.run(request, extensions)
}

fn chain(retry: Option<Arc<dyn Middleware>>, conn: bool) -> ClientWithMiddleware {
    let answer: Arc<dyn Middleware> = if conn {
        Arc::new(answer_200_conn)
    } else {
        Arc::new(answer_200)
    };
    let middlewares: Vec<_> = retry.into_iter().chain([answer]).collect();
    ClientWithMiddleware::new(reqwest::Client::new(), middlewares)
}

fn no_budget() -> RetryPolicy {
    RetryPolicy::builder()
        .no_budget()
        .build()
        .expect("a valid policy")
}

fn reqwest_retry() -> Arc<dyn Middleware> {
    Arc::new(RetryTransientMiddleware::new_with_policy(
        ExponentialBackoff::builder().build_with_max_retries(3),
    ))
}

/// One variant: sends (or copies) `n` fresh requests, and says how long the sending took.
type Variant = Box<dyn Fn(&Runtime, usize) -> Duration>;

fn tower_variant<S>(service: S) -> Variant
where
    S: Service<Request<Bytes>, Response = Response<Bytes>, Error = Infallible> + Clone + 'static,
{
    Box::new(move |rt, n| {
        let batch: Vec<_> = (0..n).map(|_| http_request()).collect();
        let mut service = service.clone();
        rt.block_on(async {
            let start = Instant::now();
            for request in batch {
                let ready = service.ready().await.unwrap_or_else(|e| match e {});
                let response = ready.call(request).await.unwrap_or_else(|e| match e {});
                drop(black_box(response));
            }
            start.elapsed()
        })
    })
}

fn reqwest_variant(client: ClientWithMiddleware) -> Variant {
    Box::new(move |rt, n| {
        let batch: Vec<_> = (0..n).map(|_| reqwest_request()).collect();
        rt.block_on(async {
            let start = Instant::now();
            for request in batch {
                let response = client.execute(request).await.expect("a response");
                drop(black_box(response));
            }
            start.elapsed()
        })
    })
}

/// Builds `n` requests and copies each, timing the copies; the originals are dropped too, as the
/// answering service drops them in `bare`.
fn clone_variant<R: 'static>(build: fn() -> R, copy: fn(&R) -> R) -> Variant {
    Box::new(move |_, n| {
        let batch: Vec<_> = (0..n).map(|_| build()).collect();
        let start = Instant::now();
        for original in &batch {
            drop(black_box(copy(black_box(original))));
        }
        let elapsed = start.elapsed();
        drop(batch);
        elapsed
    })
}

fn build_variant<R: 'static>(build: fn() -> R) -> Variant {
    Box::new(move |_, n| {
        let batch: Vec<_> = (0..n).map(|_| build()).collect();
        drop(black_box(batch));
        Duration::ZERO
    })
}

fn variants() -> Vec<(&'static str, Variant)> {
    let ok = Ok200 { conn: false };
    let conn = Ok200 { conn: true };
    let tower_retry = tower::retry::RetryLayer::new(RetryServerErrors { remaining: 3 });
    vec![
        ("tower/build", build_variant(http_request)),
        ("tower/clone", clone_variant(http_request, clone_http)),
        ("tower/bare", tower_variant(ok)),
        ("tower/tower_retry", tower_variant(tower_retry.layer(ok))),
        (
            "tower/stagger",
            tower_variant(RetryLayer::new(RetryPolicy::default()).layer(ok)),
        ),
        (
            "tower/stagger_no_budget",
            tower_variant(RetryLayer::new(no_budget()).layer(ok)),
        ),
        ("tower/bare_conn", tower_variant(conn)),
        (
            "tower/tower_retry_conn",
            tower_variant(tower_retry.layer(conn)),
        ),
        (
            "tower/stagger_conn",
            tower_variant(RetryLayer::new(RetryPolicy::default()).layer(conn)),
        ),
        ("reqwest/build", build_variant(reqwest_request)),
        (
            "reqwest/clone",
            clone_variant(reqwest_request, |r| r.try_clone().expect("no stream")),
        ),
        ("reqwest/bare", reqwest_variant(chain(None, false))),
        (
            "reqwest/forward",
            reqwest_variant(chain(Some(Arc::new(forward)), false)),
        ),
        (
            "reqwest/reqwest_retry",
            reqwest_variant(chain(Some(reqwest_retry()), false)),
        ),
        (
            "reqwest/stagger",
            reqwest_variant(chain(
                Some(Arc::new(RetryMiddleware::new(RetryPolicy::default()))),
                false,
            )),
        ),
        (
            "reqwest/stagger_no_budget",
            reqwest_variant(chain(
                Some(Arc::new(RetryMiddleware::new(no_budget()))),
                false,
            )),
        ),
        ("reqwest/bare_conn", reqwest_variant(chain(None, true))),
        (
            "reqwest/reqwest_retry_conn",
            reqwest_variant(chain(Some(reqwest_retry()), true)),
        ),
        (
            "reqwest/stagger_conn",
            reqwest_variant(chain(
                Some(Arc::new(RetryMiddleware::new(RetryPolicy::default()))),
                true,
            )),
        ),
    ]
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; criterion-style filters are not supported.
    let args: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "--bench")
        .collect();
    match args.as_slice() {
        ["--only", name, n] => only(name, n.parse().expect("a request count")),
        ["--instructions"] => instructions(),
        [] => interleaved(),
        other => {
            eprintln!("usage: overhead [--instructions | --only NAME N], not {other:?}");
            std::process::exit(2);
        }
    }
}

/// Runs one variant `n` times, alone: what callgrind measures.
fn only(name: &str, n: usize) {
    let rt = runtime();
    let (_, variant) = (variants().into_iter())
        .find(|(v, _)| *v == name)
        .unwrap_or_else(|| panic!("no variant {name}"));
    variant(&rt, n);
}

fn interleaved() {
    let rt = runtime();
    let variants = variants();
    let mut times = vec![Vec::with_capacity(ROUNDS); variants.len()];
    for _ in 0..ROUNDS {
        for ((_, variant), times) in variants.iter().zip(&mut times) {
            let elapsed = variant(&rt, BATCH);
            times.push(elapsed.as_nanos() as f64 / BATCH as f64);
        }
    }
    println!("ns per request over {ROUNDS} interleaved rounds of {BATCH} requests");
    println!("{:28} {:>9} {:>9}", "variant", "min", "median");
    for ((name, _), times) in variants.iter().zip(&mut times) {
        if name.ends_with("/build") {
            continue;
        }
        times.sort_by(f64::total_cmp);
        println!("{name:28} {:9.1} {:9.1}", times[0], times[times.len() / 2]);
    }
}

fn instructions() {
    let exe = std::env::current_exe().expect("this benchmark's path");
    let count = |name: &str, n: usize| -> u64 {
        let output = Command::new("valgrind")
            .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
            .arg(&exe)
            .args(["--only", name, &n.to_string()])
            .output()
            .expect("valgrind on the PATH");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let refs = (stderr.lines())
            .find_map(|line| line.split("refs:").nth(1))
            .unwrap_or_else(|| panic!("no instruction count from callgrind:\n{stderr}"));
        refs.trim().replace(',', "").parse().expect("a count")
    };
    println!(
        "instructions per request (callgrind, {CALLGRIND_REQUESTS} vs {} requests)",
        2 * CALLGRIND_REQUESTS
    );
    for (name, _) in variants() {
        let one = count(name, CALLGRIND_REQUESTS);
        let two = count(name, 2 * CALLGRIND_REQUESTS);
        println!("{name:28} {:9}", (two - one) / CALLGRIND_REQUESTS as u64);
    }
}
