//! `ResendCount` for the layers beneath the retry layer: a tracing layer there tells a resend from a
//! first send, and records OpenTelemetry's `http.request.resend_count` on resends only.
//!
//! tower-http's `TraceLayer` beneath `RetryLayer`, a service beneath `RetryLayer` over `reqwest`
//! types (the request in a `stagger::tower::WithExtensions`), and a reqwest-middleware `Middleware`
//! after `RetryMiddleware` (where reqwest-tracing's `TracingMiddleware` goes, whose span backend's
//! `on_request_start` gets the same `Extensions`), each recording a span per attempt; the retries
//! and a hedge.
#![cfg(all(feature = "tower", feature = "reqwest-middleware"))]

use std::convert::Infallible;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Extensions;
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use stagger::tower::WithExtensions;
use stagger::{Backoff, ResendCount, RetryLayer, RetryMiddleware, RetryPolicy};
use tower::{ServiceBuilder, ServiceExt};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

/// A span's name, and its `http.request.resend_count` once recorded.
type Opened = (String, Option<u64>);

/// Every span opened.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<Opened>>>);

struct ResendField(Option<u64>);

impl Visit for ResendField {
    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "http.request.resend_count" {
            self.0 = Some(value);
        }
    }
    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>> Layer<S>
    for Spans
{
    fn on_new_span(&self, attributes: &Attributes<'_>, id: &Id, context: Context<'_, S>) {
        let mut field = ResendField(None);
        attributes.record(&mut field);
        let mut spans = self.0.lock().unwrap();
        spans.push((attributes.metadata().name().to_owned(), field.0));
        if let Some(span) = context.span(id) {
            span.extensions_mut().insert(spans.len() - 1);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, context: Context<'_, S>) {
        let mut field = ResendField(None);
        values.record(&mut field);
        if let (Some(value), Some(span)) = (field.0, context.span(id))
            && let Some(&index) = span.extensions().get::<usize>()
        {
            self.0.lock().unwrap()[index].1 = Some(value);
        }
    }
}

impl Spans {
    fn of(&self, name: &str) -> Vec<Option<u64>> {
        let spans = self.0.lock().unwrap();
        spans
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, count)| *count)
            .collect()
    }
}

/// The span a tracing layer beneath the retry layer opens for one attempt: the attribute on resends
/// only, as OpenTelemetry's HTTP conventions have it.
fn attempt_span(method: &http::Method, resend: Option<&ResendCount>) -> tracing::Span {
    let span = tracing::info_span!(
        "HTTP attempt",
        http.request.method = %method,
        http.request.resend_count = tracing::field::Empty,
    );
    if let Some(count) = resend {
        span.record("http.request.resend_count", count.get());
    }
    span
}

fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(1)))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn tower_http_s_trace_layer_beneath_retry_layer_sees_each_resend() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(Registry::default().with(spans.clone()));
    let calls = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&calls);
    // 503, 503, 200.
    let server = tower::service_fn(move |_: http::Request<String>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        let status = if n < 2 { 503 } else { 200 };
        async move {
            Ok::<_, Infallible>(
                http::Response::builder()
                    .status(status)
                    .body(String::new())
                    .unwrap(),
            )
        }
    });
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy()))
        .layer(
            tower_http::trace::TraceLayer::new_for_http().make_span_with(
                |request: &http::Request<String>| {
                    attempt_span(request.method(), request.extensions().get::<ResendCount>())
                },
            ),
        )
        .service(server);
    let request = http::Request::get("http://api.test/orders")
        .body(String::new())
        .unwrap();
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(spans.of("HTTP attempt"), [None, Some(1), Some(2)]);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hedge_beneath_retry_layer_is_the_first_resend() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(Registry::default().with(spans.clone()));
    let calls = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&calls);
    // The first attempt hangs for a second; the hedge after 50 ms answers at once.
    let server = tower::service_fn(move |request: http::Request<String>| {
        let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
        let _span = attempt_span(request.method(), request.extensions().get::<ResendCount>());
        async move {
            if first {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok::<_, Infallible>(http::Response::new(String::new()))
        }
    });
    let policy = RetryPolicy::builder()
        .hedge_after(Duration::from_millis(50))
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(server);
    let request = http::Request::get("http://api.test/orders")
        .body(String::new())
        .unwrap();
    let response = client.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(spans.of("HTTP attempt"), [None, Some(1)]);
}

/// A `reqwest` answer of `status`.
fn reqwest_answer(status: u16) -> reqwest::Response {
    let response = http::Response::builder()
        .status(status)
        .body(reqwest::Body::from(""))
        .unwrap();
    reqwest::Response::from(response)
}

fn reqwest_get() -> WithExtensions {
    let url = "http://api.test/orders".parse().unwrap();
    WithExtensions::new(reqwest::Request::new(reqwest::Method::GET, url))
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_service_beneath_retry_layer_over_reqwest_sees_each_resend() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(Registry::default().with(spans.clone()));
    let calls = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&calls);
    // Where `reqwest::Client` goes, opening a span per attempt as a tracing layer there would:
    // 503, 503, 200.
    let server = tower::service_fn(move |request: WithExtensions| {
        let resend = request.extensions().get::<ResendCount>();
        let _span = attempt_span(request.request().method(), resend);
        let status = if counter.fetch_add(1, Ordering::SeqCst) < 2 {
            503
        } else {
            200
        };
        async move { Ok::<_, Infallible>(reqwest_answer(status)) }
    });
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy()))
        .service(server);
    let response = client.oneshot(reqwest_get()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(spans.of("HTTP attempt"), [None, Some(1), Some(2)]);
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_hedge_beneath_retry_layer_over_reqwest_is_the_first_resend() {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(Registry::default().with(spans.clone()));
    let calls = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&calls);
    // The first attempt hangs for a second; the hedge after 50 ms answers at once.
    let server = tower::service_fn(move |request: WithExtensions| {
        let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
        let resend = request.extensions().get::<ResendCount>();
        let _span = attempt_span(request.request().method(), resend);
        async move {
            if first {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok::<_, Infallible>(reqwest_answer(200))
        }
    });
    let policy = RetryPolicy::builder()
        .hedge_after(Duration::from_millis(50))
        .build()
        .unwrap();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(server);
    let response = client.oneshot(reqwest_get()).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(spans.of("HTTP attempt"), [None, Some(1)]);
}

/// After `RetryMiddleware`, where a tracing middleware goes: opens a span per attempt, and answers
/// 503, 503, 200 itself.
struct TracedServer {
    calls: AtomicU32,
}

#[async_trait::async_trait]
impl Middleware for TracedServer {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let _span = attempt_span(request.method(), extensions.get::<ResendCount>());
        let status = if self.calls.fetch_add(1, Ordering::SeqCst) < 2 {
            503
        } else {
            200
        };
        let response = http::Response::builder()
            .status(status)
            .body(reqwest::Body::from(""))
            .unwrap();
        Ok(reqwest::Response::from(response))
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_middleware_after_retry_middleware_sees_each_resend_and_the_caller_s_extensions_are_left_as_given()
 {
    let spans = Spans::default();
    let _guard = tracing::subscriber::set_default(Registry::default().with(spans.clone()));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(policy()))
        .with(TracedServer {
            calls: AtomicU32::new(0),
        })
        .build();
    let request = client.get("http://api.test/orders").build().unwrap();
    let mut extensions = Extensions::new();
    let response = client
        .execute_with_extensions(request, &mut extensions)
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(spans.of("HTTP attempt"), [None, Some(1), Some(2)]);
    assert!(extensions.get::<ResendCount>().is_none());
}
