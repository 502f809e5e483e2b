//! Metrics (feature `metrics`): a scripted sequence (`503`, `429`, `200`) against a loopback server
//! through `RetryMiddleware` and `RetryLayer` over `reqwest::Client`, seen by `metrics-util`'s debugging
//! recorder; `stagger.hedges` for a hedge sent, and not for one the inner service could not take; and
//! `http.request.resend_count` on the caller's request span.
#![cfg(all(feature = "metrics", feature = "reqwest-middleware", feature = "tower"))]

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use reqwest_middleware::ClientBuilder;
use stagger::{Backoff, RetryLayer, RetryMiddleware, RetryPolicy, metrics as names};
use tower::{ServiceBuilder, ServiceExt};
use tracing::Instrument;
use wiremock::matchers::path;
use wiremock::{Mock, MockServer, ResponseTemplate};

/// `/items` answers `503`, then `429`, then `200`; `/down` always `503`.
async fn server() -> MockServer {
    let server = MockServer::start().await;
    for status in [503, 429] {
        Mock::given(path("/items"))
            .respond_with(ResponseTemplate::new(status))
            .up_to_n_times(1)
            .mount(&server)
            .await;
    }
    Mock::given(path("/items"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    Mock::given(path("/down"))
        .respond_with(ResponseTemplate::new(503))
        .mount(&server)
        .await;
    server
}

fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(1)))
        .throttle_backoff(Backoff::fixed(Duration::from_millis(2)))
        .build()
        .unwrap()
}

fn reqwest_client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// Metrics by name and sorted labels.
type Metrics = BTreeMap<(String, Vec<(String, String)>), DebugValue>;

/// Every metric recorded while `run` ran.
fn recorded(run: impl AsyncFnOnce()) -> Metrics {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || runtime.block_on(run()));
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| {
            let key = key.key();
            let mut labels: Vec<_> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            ((key.name().to_owned(), labels), value)
        })
        .collect()
}

fn labels(host: &str, more: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut labels: Vec<_> = [("http.request.method", "GET"), ("server.address", host)]
        .iter()
        .chain(more)
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    labels.sort();
    labels
}

fn assert_the_scripted_sequence(metrics: &Metrics) {
    let host = "127.0.0.1";
    let get = |name: &str, more: &[(&str, &str)]| {
        metrics
            .get(&(name.to_owned(), labels(host, more)))
            .unwrap_or_else(|| panic!("{name} {more:?} in {metrics:#?}"))
    };
    assert_eq!(get(names::ATTEMPTS, &[]), &DebugValue::Counter(3));
    assert_eq!(
        get(
            names::RETRIES,
            &[("error.type", "503"), ("delay.reason", "backoff")]
        ),
        &DebugValue::Counter(1)
    );
    assert_eq!(
        get(
            names::RETRIES,
            &[("error.type", "429"), ("delay.reason", "throttle")]
        ),
        &DebugValue::Counter(1)
    );
    let DebugValue::Histogram(attempts) = get(names::CALL_ATTEMPTS, &[]) else {
        panic!("a histogram");
    };
    assert_eq!(attempts.iter().map(|v| v.0).collect::<Vec<_>>(), [3.0]);
    let DebugValue::Histogram(slept) = get(names::CALL_SLEPT, &[]) else {
        panic!("a histogram");
    };
    assert_eq!(slept.iter().map(|v| v.0).collect::<Vec<_>>(), [0.003]);
    assert!(
        !metrics
            .keys()
            .any(|(name, _)| name == names::CALLS_GIVEN_UP),
        "{metrics:#?}"
    );
}

#[test]
fn the_middleware_counts_attempts_retries_by_reason_and_attempts_per_call() {
    let metrics = recorded(async || {
        let server = server().await;
        let client = ClientBuilder::new(reqwest_client())
            .with(RetryMiddleware::new(policy()))
            .build();
        let response = client
            .get(format!("{}/items", server.uri()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    });
    assert_the_scripted_sequence(&metrics);
}

#[test]
fn the_layer_counts_attempts_retries_by_reason_and_attempts_per_call() {
    let metrics = recorded(async || {
        let server = server().await;
        let client = ServiceBuilder::new()
            .layer(RetryLayer::new(policy()))
            .service(reqwest_client());
        let request = reqwest::Request::new(
            reqwest::Method::GET,
            format!("{}/items", server.uri()).parse().unwrap(),
        );
        assert_eq!(client.oneshot(request).await.unwrap().status(), 200);
    });
    assert_the_scripted_sequence(&metrics);
}

#[test]
fn a_call_that_gives_up_is_counted_by_its_stop_reason() {
    let metrics = recorded(async || {
        let server = server().await;
        let client = ClientBuilder::new(reqwest_client())
            .with(RetryMiddleware::new(policy()))
            .build();
        let response = client
            .get(format!("{}/down", server.uri()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 503);
    });
    let given_up = (
        names::CALLS_GIVEN_UP.to_owned(),
        labels("127.0.0.1", &[("stop.reason", "max retries reached")]),
    );
    assert_eq!(metrics.get(&given_up), Some(&DebugValue::Counter(1)));
    let attempts = (names::ATTEMPTS.to_owned(), labels("127.0.0.1", &[]));
    // The first attempt and the default 10 retries.
    assert_eq!(metrics.get(&attempts), Some(&DebugValue::Counter(11)));
}

/// A `503` to a streamed PUT longer than the replay buffer: the retry it calls for cannot be sent, so
/// none is counted, and the call ends having slept nothing.
#[test]
fn a_retry_that_cannot_be_sent_is_not_counted() {
    let metrics = recorded(async || {
        let server = server().await;
        let policy = RetryPolicy::builder()
            .backoff(Backoff::fixed(Duration::from_millis(250)))
            .replay_buffer(1024)
            .build()
            .unwrap();
        let client = ClientBuilder::new(reqwest_client())
            .with(RetryMiddleware::new(policy))
            .build();
        let chunks = [Ok::<_, std::io::Error>(vec![7u8; 4096])];
        let response = client
            .put(format!("{}/down", server.uri()))
            .body(reqwest::Body::wrap_stream(futures::stream::iter(chunks)))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 503);
    });
    assert!(
        !metrics.keys().any(|(name, _)| name == names::RETRIES),
        "{metrics:#?}"
    );
    let mut labels = labels("127.0.0.1", &[]);
    labels.retain(|(k, _)| k != "http.request.method");
    labels.push(("http.request.method".to_owned(), "PUT".to_owned()));
    labels.sort();
    let slept = (names::CALL_SLEPT.to_owned(), labels);
    let Some(DebugValue::Histogram(slept)) = metrics.get(&slept) else {
        panic!("{slept:?} in {metrics:#?}");
    };
    assert_eq!(slept.iter().map(|v| v.0).collect::<Vec<_>>(), [0.0]);
}

/// The `http.request.resend_count` recorded on spans, by span name.
fn resend_counts() -> &'static Mutex<BTreeMap<String, String>> {
    static RECORDED: OnceLock<Mutex<BTreeMap<String, String>>> = OnceLock::new();
    RECORDED.get_or_init(Mutex::default)
}

struct SpanRecorder;

impl<S> tracing_subscriber::Layer<S> for SpanRecorder
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Visit(Option<String>);
        impl tracing::field::Visit for Visit {
            fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
                if field.name() == "http.request.resend_count" {
                    self.0 = Some(value.to_string());
                }
            }
            fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
        }
        let mut visit = Visit(None);
        values.record(&mut visit);
        if let (Some(value), Some(span)) = (visit.0, ctx.span(id)) {
            resend_counts()
                .lock()
                .unwrap()
                .insert(span.name().to_owned(), value);
        }
    }
}

#[test]
fn the_resend_count_goes_on_the_callers_request_span() {
    use tracing_subscriber::layer::SubscriberExt;
    let subscriber = tracing_subscriber::registry().with(SpanRecorder);
    let _guard = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = server().await;
        let client = ClientBuilder::new(reqwest_client())
            .with(RetryMiddleware::new(policy()))
            .build();
        let span = tracing::info_span!(
            "get items",
            http.request.resend_count = tracing::field::Empty
        );
        let send = client.get(format!("{}/items", server.uri())).send();
        let response = send.instrument(span).await.unwrap();
        assert_eq!(response.status(), 200);
    });
    let counts = resend_counts().lock().unwrap().clone();
    assert_eq!(counts.get("get items").map(String::as_str), Some("2"));
}

/// `/slow` answers its first request after 300 ms and the others at once.
async fn slow_server() -> MockServer {
    let server = MockServer::start().await;
    Mock::given(path("/slow"))
        .respond_with(ResponseTemplate::new(200).set_delay(Duration::from_millis(300)))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(path("/slow"))
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    server
}

fn hedging() -> RetryPolicy {
    RetryPolicy::builder()
        .hedge_after(Duration::from_millis(100))
        .build()
        .unwrap()
}

fn assert_one_hedge(metrics: &Metrics) {
    let counter = |name: &str| metrics.get(&(name.to_owned(), labels("127.0.0.1", &[])));
    assert_eq!(
        counter(names::HEDGES),
        Some(&DebugValue::Counter(1)),
        "{metrics:#?}"
    );
    // The slow attempt, dropped, and its hedge.
    assert_eq!(counter(names::ATTEMPTS), Some(&DebugValue::Counter(2)));
}

#[test]
fn the_middleware_counts_a_hedge() {
    let metrics = recorded(async || {
        let server = slow_server().await;
        let client = ClientBuilder::new(reqwest_client())
            .with(RetryMiddleware::new(hedging()))
            .build();
        let response = client
            .get(format!("{}/slow", server.uri()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    });
    assert_one_hedge(&metrics);
}

#[test]
fn the_layer_counts_a_hedge() {
    let metrics = recorded(async || {
        let server = slow_server().await;
        let client = ServiceBuilder::new()
            .layer(RetryLayer::new(hedging()))
            .service(reqwest_client());
        let request = reqwest::Request::new(
            reqwest::Method::GET,
            format!("{}/slow", server.uri()).parse().unwrap(),
        );
        assert_eq!(client.oneshot(request).await.unwrap().status(), 200);
    });
    assert_one_hedge(&metrics);
}

#[test]
fn a_hedge_the_inner_service_cannot_take_is_not_counted() {
    let metrics = recorded(async || {
        let server = slow_server().await;
        // One request at a time below the layer: the hedge's clone is never ready while the slow
        // attempt runs.
        let client = ServiceBuilder::new()
            .layer(RetryLayer::new(hedging()))
            .concurrency_limit(1)
            .service(reqwest_client());
        let request = reqwest::Request::new(
            reqwest::Method::GET,
            format!("{}/slow", server.uri()).parse().unwrap(),
        );
        assert_eq!(client.oneshot(request).await.unwrap().status(), 200);
    });
    let counter = |name: &str| metrics.get(&(name.to_owned(), labels("127.0.0.1", &[])));
    assert_eq!(counter(names::HEDGES), None, "{metrics:#?}");
    assert_eq!(counter(names::ATTEMPTS), Some(&DebugValue::Counter(1)));
}
