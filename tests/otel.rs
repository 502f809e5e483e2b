//! stagger's spans as OpenTelemetry sees them: exported through `tracing-opentelemetry` to the SDK's
//! in-memory exporter, a call retried twice is one call span and three attempt spans inside it, each
//! named after the method and of kind `client`, `http.request.resend_count` 1 and 2 on the resends
//! only, and each answer's `http.response.status_code`. Through `RetryLayer` over `http::Request`
//! and `RetryMiddleware`, against servers in process.
#![cfg(all(feature = "tower", feature = "reqwest-middleware"))]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use http::Extensions;
use opentelemetry::trace::{SpanKind, TracerProvider as _};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use stagger::{Backoff, RetryLayer, RetryMiddleware, RetryPolicy};
use tower::{Layer, ServiceExt};
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

/// 503, 503, then 200.
fn status_of(n: u32) -> u16 {
    if n < 2 { 503 } else { 200 }
}

fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(1)))
        .build()
        .unwrap()
}

/// Runs `call` with stagger's spans exported; the spans, in the order they ended.
async fn exported<F: Future<Output = ()>>(call: F) -> Vec<SpanData> {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("stagger-test"));
    let subscriber = tracing_subscriber::registry().with(layer);
    {
        let _default = tracing::subscriber::set_default(subscriber);
        call.await;
    }
    provider.force_flush().unwrap();
    exporter.get_finished_spans().unwrap()
}

fn attribute<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|KeyValue { value, .. }| value)
}

/// One call span, three attempt spans inside it: what a call retried twice must export.
fn assert_one_call_three_attempts(spans: &[SpanData], adapter: &str) {
    let calls: Vec<_> = spans
        .iter()
        .filter(|span| span.span_kind == SpanKind::Internal && span.name != "caller")
        .collect();
    let attempts: Vec<_> = spans
        .iter()
        .filter(|span| span.span_kind == SpanKind::Client)
        .collect();
    assert_eq!(calls.len(), 1, "{adapter}: {spans:#?}");
    assert_eq!(attempts.len(), 3, "{adapter}: {spans:#?}");
    let call = calls[0];
    assert_eq!(call.name, "GET", "{adapter}");
    for attempt in &attempts {
        assert_eq!(attempt.name, "GET", "{adapter}");
        assert_eq!(
            attempt.parent_span_id,
            call.span_context.span_id(),
            "{adapter}"
        );
        assert_eq!(
            attempt.span_context.trace_id(),
            call.span_context.trace_id()
        );
        assert_eq!(
            attribute(attempt, "http.request.method"),
            Some(&Value::from("GET")),
            "{adapter}"
        );
        assert_eq!(
            attribute(attempt, "server.address"),
            Some(&Value::from("api.test")),
            "{adapter}"
        );
    }
    let resends: Vec<_> = attempts
        .iter()
        .map(|span| attribute(span, "http.request.resend_count").cloned())
        .collect();
    assert_eq!(
        resends,
        [None, Some(Value::I64(1)), Some(Value::I64(2))],
        "{adapter}: on resends only"
    );
    let statuses: Vec<_> = attempts
        .iter()
        .map(|span| attribute(span, "http.response.status_code").cloned())
        .collect();
    assert_eq!(
        statuses,
        [503, 503, 200].map(|status| Some(Value::I64(status))),
        "{adapter}"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_call_retried_twice_through_retry_layer_is_one_call_span_and_three_attempt_spans() {
    let spans = exported(async {
        let calls = Arc::new(AtomicU32::new(0));
        let server = tower::service_fn(move |_: http::Request<String>| {
            let status = status_of(calls.fetch_add(1, Ordering::SeqCst));
            async move {
                let response = http::Response::builder().status(status).body(String::new());
                Ok::<_, Infallible>(response.unwrap())
            }
        });
        let request = http::Request::get("http://api.test/orders")
            .body(String::new())
            .unwrap();
        let client = RetryLayer::new(policy()).layer(server);
        // The caller's own span, declaring the field: it gets the call's count at its end.
        let caller =
            tracing::info_span!("caller", http.request.resend_count = tracing::field::Empty);
        let response = client.oneshot(request).instrument(caller).await.unwrap();
        assert_eq!(response.status(), 200);
    })
    .await;
    assert_one_call_three_attempts(&spans, "RetryLayer");
    let caller = spans.iter().find(|span| span.name == "caller").unwrap();
    assert_eq!(
        attribute(caller, "http.request.resend_count"),
        Some(&Value::I64(2))
    );
}

/// The last middleware: 503, 503, then 200.
struct Server(AtomicU32);

#[async_trait::async_trait]
impl Middleware for Server {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut Extensions,
        _: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let status = status_of(self.0.fetch_add(1, Ordering::SeqCst));
        let response = http::Response::builder()
            .status(status)
            .body(reqwest::Body::from(""));
        Ok(reqwest::Response::from(response.unwrap()))
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_call_retried_twice_through_retry_middleware_is_one_call_span_and_three_attempt_spans() {
    let spans = exported(async {
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(RetryMiddleware::new(policy()))
            .with(Server(AtomicU32::new(0)))
            .build();
        let response = client.get("http://api.test/orders").send().await.unwrap();
        assert_eq!(response.status(), 200);
    })
    .await;
    assert_one_call_three_attempts(&spans, "RetryMiddleware");
}

/// A call answered at its first attempt: neither the caller's span nor stagger's call span says it
/// was resent, as OpenTelemetry's `http.request.resend_count` is set if and only if it was.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_call_sent_once_records_no_resend_count_through_either_adapter() {
    let spans = exported(async {
        let server = tower::service_fn(|_: http::Request<String>| async {
            Ok::<_, Infallible>(http::Response::new(String::new()))
        });
        let request = http::Request::get("http://api.test/orders")
            .body(String::new())
            .unwrap();
        let caller =
            tracing::info_span!("caller", http.request.resend_count = tracing::field::Empty);
        let client = RetryLayer::new(policy()).layer(server);
        let response = client.oneshot(request).instrument(caller).await.unwrap();
        assert_eq!(response.status(), 200);
    })
    .await;
    let middleware = exported(async {
        let client = ClientBuilder::new(reqwest::Client::new())
            .with(RetryMiddleware::new(policy()))
            .with(Server(AtomicU32::new(2)))
            .build();
        let caller =
            tracing::info_span!("caller", http.request.resend_count = tracing::field::Empty);
        let response = client
            .get("http://api.test/orders")
            .send()
            .instrument(caller)
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    })
    .await;
    for (adapter, spans) in [("RetryLayer", spans), ("RetryMiddleware", middleware)] {
        assert!(spans.len() >= 3, "{adapter}: {spans:#?}");
        for span in &spans {
            assert_eq!(
                attribute(span, "http.request.resend_count"),
                None,
                "{adapter}: {} records a resend count",
                span.name
            );
        }
    }
}
