//! What the overhead benches share: the request every variant sends, the services and middlewares that
//! answer `200` at once, the minimal `tower::retry` policy, and the batching that keeps the building of
//! requests out of the measurement.
//!
//! Each bench uses a part of it.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, USER_AGENT};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response};
use tokio::runtime::Runtime;
use tower::retry::Policy;
use tower::{Service, ServiceExt};

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

/// GET https://api.example.com/v1/items?page=2 with four headers and an empty body, built the way an
/// application builds one: the URI and the per-request header values are parsed from owned strings.
pub fn http_request() -> Request<Bytes> {
    let mut request = Request::new(Bytes::new());
    *request.method_mut() = Method::GET;
    *request.uri_mut() = String::from(URL).parse().expect("a URI");
    headers(request.headers_mut());
    request
}

/// Copies an `http::Request` the way any retry layer must (it is not `Clone`).
pub fn clone_http(request: &Request<Bytes>) -> Request<Bytes> {
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

/// A `200`; with `conn`, carrying the extension a real connection's response carries, so that its
/// extensions map already exists when `RetryInfo` is put in it.
pub fn response_200(conn: bool) -> Response<Bytes> {
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
pub struct Ok200 {
    pub conn: bool,
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

/// Answers `200` at its second poll: the first returns `Pending` (and wakes the task at once), as a
/// response that has to come over a connection does. An attempt that waits is one whose time limit
/// stagger arms; `Ok200` measures the attempt that never waits.
#[derive(Debug, Clone, Copy)]
pub struct Ok200Later;

impl Service<Request<Bytes>> for Ok200Later {
    type Response = Response<Bytes>;
    type Error = Infallible;
    type Future = PendingOnce;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Bytes>) -> Self::Future {
        drop(request);
        PendingOnce { polled: false }
    }
}

/// The future of [`Ok200Later`].
#[derive(Debug)]
pub struct PendingOnce {
    polled: bool,
}

impl Future for PendingOnce {
    type Output = Result<Response<Bytes>, Infallible>;

    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if std::mem::replace(&mut self.polled, true) {
            return Poll::Ready(Ok(response_200(true)));
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// The least a `tower::retry::Policy` does: up to 3 retries of a 5xx, at once, copying the request.
#[derive(Debug, Clone, Copy)]
pub struct RetryServerErrors {
    pub remaining: u32,
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

pub fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

/// Makes `iters` inputs with `build` in batches of `size`, outside the measurement, and adds up what
/// `time` measures of each batch.
pub fn batched<R>(
    iters: u64,
    size: usize,
    mut build: impl FnMut() -> R,
    mut time: impl FnMut(Vec<R>) -> Duration,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut left = usize::try_from(iters).expect("a count that fits in memory");
    while left > 0 {
        let n = left.min(size);
        total += time((0..n).map(|_| build()).collect());
        left -= n;
    }
    total
}

/// Copies each input and drops the copy, timing only that; the originals are dropped after the clock
/// stops, as the answering service drops them in `bare`.
pub fn time_copies<R>(batch: Vec<R>, copy: impl Fn(&R) -> R) -> Duration {
    let start = Instant::now();
    for original in &batch {
        drop(black_box(copy(black_box(original))));
    }
    let elapsed = start.elapsed();
    drop(batch);
    elapsed
}

/// Sends each request through `service` (one `ready().await`, one `call().await`), dropping each
/// response inside the measurement.
pub fn time_tower<S, R>(rt: &Runtime, service: &mut S, batch: Vec<R>) -> Duration
where
    S: Service<R, Error: std::fmt::Debug>,
{
    rt.block_on(async {
        let start = Instant::now();
        for request in batch {
            // Every variant answers 200: an error here is a broken bench.
            let ready = service.ready().await.expect("ready");
            let response = ready.call(request).await.expect("answered");
            drop(black_box(response));
        }
        start.elapsed()
    })
}

/// The reqwest-middleware side.
#[cfg(feature = "reqwest-middleware")]
pub mod middleware {
    use std::future::Future;
    use std::hint::black_box;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use http::{Extensions, Method};
    use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};
    use tokio::runtime::Runtime;

    use super::{URL, headers, response_200};

    /// The same request as [`super::http_request`], as a `reqwest::Request`.
    pub fn reqwest_request() -> reqwest::Request {
        let mut request = reqwest::Request::new(Method::GET, URL.parse().expect("a URL"));
        headers(request.headers_mut());
        request
    }

    type BoxedResponse<'a> =
        Pin<Box<dyn Future<Output = reqwest_middleware::Result<reqwest::Response>> + Send + 'a>>;

    /// The end of a chain: answers `200` at once, without a network (with `CONN`, carrying the extension
    /// a connection's response carries).
    fn answer_200<'a, const CONN: bool>(
        request: reqwest::Request,
        _extensions: &'a mut Extensions,
        _next: Next<'a>,
    ) -> BoxedResponse<'a> {
        drop(request);
        Box::pin(async { Ok(reqwest::Response::from(response_200(CONN))) })
    }

    /// The cheapest middleware: hands the request on. What being a middleware costs, retrying or not.
    pub fn forward<'a>(
        request: reqwest::Request,
        extensions: &'a mut Extensions,
        next: Next<'a>,
    ) -> BoxedResponse<'a> {
        next.run(request, extensions)
    }

    /// `retry` (if any) in front of a last middleware that answers `200` (with `conn`, as a
    /// connection's response).
    pub fn chain(retry: Option<Arc<dyn Middleware>>, conn: bool) -> ClientWithMiddleware {
        chain_of(retry.into_iter().collect(), conn)
    }

    /// `middlewares` in their order, then the last one, which answers `200`.
    pub fn chain_of(middlewares: Vec<Arc<dyn Middleware>>, conn: bool) -> ClientWithMiddleware {
        let answer: Arc<dyn Middleware> = if conn {
            Arc::new(answer_200::<true>)
        } else {
            Arc::new(answer_200::<false>)
        };
        let middlewares: Vec<_> = middlewares.into_iter().chain([answer]).collect();
        ClientWithMiddleware::new(reqwest::Client::new(), middlewares)
    }

    /// Answers `200` at once, as `reqwest::Client` would beneath a `RetryLayer` without a network:
    /// to a `reqwest::Request`, and to one in a `stagger::tower::WithExtensions`.
    #[derive(Debug, Clone, Copy)]
    pub struct ReqwestOk200;

    impl<R: Send + 'static> tower::Service<R> for ReqwestOk200 {
        type Response = reqwest::Response;
        type Error = std::convert::Infallible;
        type Future = std::future::Ready<Result<reqwest::Response, std::convert::Infallible>>;

        fn poll_ready(
            &mut self,
            _cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: R) -> Self::Future {
            drop(request);
            std::future::ready(Ok(reqwest::Response::from(response_200(false))))
        }
    }

    /// Sends each request through `client`, dropping each response inside the measurement.
    pub fn time_reqwest(
        rt: &Runtime,
        client: &ClientWithMiddleware,
        batch: Vec<reqwest::Request>,
    ) -> Duration {
        rt.block_on(async {
            let start = Instant::now();
            for request in batch {
                let response = client.execute(request).await.expect("a response");
                drop(black_box(response));
            }
            start.elapsed()
        })
    }
}
