//! Metrics (feature `metrics`) with a global recorder, as an application installs its exporter's:
//! each series' handles are registered once, not at every call; what every call records is exact,
//! host by host, through `RetryLayer` and `RetryMiddleware`; a local recorder in a scope of its own
//! (a test's) gets what is recorded in that scope and nothing lands in the global one meanwhile; a
//! policy built before the global recorder was installed records to it all the same.
//!
//! One test, in a binary of its own: a process has one global recorder.
#![cfg(all(feature = "metrics", feature = "reqwest-middleware", feature = "tower"))]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use stagger::{RetryLayer, RetryMiddleware, RetryPolicy, metrics as names};
use tower::{Layer, ServiceExt, service_fn};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// A recorder that counts the handles it is asked to register, and keeps what is recorded to them.
struct Counting {
    inner: DebuggingRecorder,
    registered: Arc<AtomicUsize>,
}

impl Recorder for Counting {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }

    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }

    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }

    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        self.registered.fetch_add(1, Ordering::Relaxed);
        self.inner.register_counter(key, metadata)
    }

    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        self.registered.fetch_add(1, Ordering::Relaxed);
        self.inner.register_gauge(key, metadata)
    }

    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        self.registered.fetch_add(1, Ordering::Relaxed);
        self.inner.register_histogram(key, metadata)
    }
}

/// What was recorded since the last snapshot (the debugging recorder's snapshots drain it).
fn taken(snapshotter: &Snapshotter) -> Vec<(Key, DebugValue)> {
    let snapshot = snapshotter.snapshot().into_vec().into_iter();
    snapshot
        .map(|(key, _, _, value)| (key.key().clone(), value))
        .collect()
}

/// The attempts counted for `host`, and the calls whose attempts were recorded for it.
fn attempts_and_calls(taken: &[(Key, DebugValue)], host: &str) -> (u64, usize) {
    let (mut attempts, mut calls) = (0, 0);
    for (key, value) in taken {
        let of_host = (key.labels()).any(|l| l.key() == "server.address" && l.value() == host);
        match value {
            DebugValue::Counter(n) if of_host && key.name() == names::ATTEMPTS => attempts += n,
            DebugValue::Histogram(values) if of_host && key.name() == names::CALL_ATTEMPTS => {
                calls += values.len();
            }
            _ => {}
        }
    }
    (attempts, calls)
}

/// Sends `calls` requests to `host` through `RetryLayer` over a service that answers `200`.
async fn through_the_layer(policy: &RetryPolicy, host: &str, calls: usize) {
    let ok =
        service_fn(|_: http::Request<()>| async { Ok::<_, Infallible>(http::Response::new(())) });
    let service = RetryLayer::new(policy.clone()).layer(ok);
    for call in 0..calls {
        let method = if call % 2 == 0 { "GET" } else { "PUT" };
        let request = http::Request::builder()
            .method(method)
            .uri(format!("http://{host}/items/{call}"))
            .body(())
            .unwrap();
        service.clone().oneshot(request).await.unwrap();
    }
}

#[tokio::test]
async fn each_series_is_registered_once_and_every_call_is_counted() {
    // Built before any recorder is installed, as a client in a static may be.
    let early = RetryPolicy::default();
    through_the_layer(&early, "early.test", 10).await;

    let registered = Arc::new(AtomicUsize::new(0));
    let global = Counting {
        inner: DebuggingRecorder::new(),
        registered: Arc::clone(&registered),
    };
    let snapshotter = global.inner.snapshotter();
    metrics::set_global_recorder(global).expect("the only recorder of this process");
    let policy = RetryPolicy::default();

    // Two hosts, two methods each, through the layer; then one host through the middleware.
    through_the_layer(&policy, "a.test", 1_000).await;
    through_the_layer(&policy, "b.test", 1_000).await;
    through_the_layer(&early, "a.test", 1_000).await;
    let server = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(ResponseTemplate::new(200))
        .mount(&server)
        .await;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(policy.clone()))
        .build();
    for _ in 0..500 {
        client.get(server.uri()).send().await.unwrap();
    }

    let recorded = taken(&snapshotter);
    assert_eq!(attempts_and_calls(&recorded, "early.test"), (0, 0));
    assert_eq!(attempts_and_calls(&recorded, "a.test"), (2_000, 2_000));
    assert_eq!(attempts_and_calls(&recorded, "b.test"), (1_000, 1_000));
    assert_eq!(attempts_and_calls(&recorded, "127.0.0.1"), (500, 500));
    // Five series (a.test and b.test by two methods each, the server by one), three handles each:
    // the first call after the global recorder was installed learnt it lasts.
    let after_calls = registered.load(Ordering::Relaxed);
    assert_eq!(after_calls, 5 * 3, "handles registered for 3 500 calls");
    through_the_layer(&policy, "a.test", 1_000).await;
    assert_eq!(
        registered.load(Ordering::Relaxed),
        after_calls,
        "no handle registered again"
    );

    // A local recorder gets what is recorded in its scope; three in turn, each perhaps where the
    // last one was.
    for _ in 0..3 {
        let local = DebuggingRecorder::new();
        let local_snapshotter = local.snapshotter();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let policy = policy.clone();
        let calls = std::thread::spawn(move || {
            metrics::with_local_recorder(&local, || {
                runtime.block_on(through_the_layer(&policy, "a.test", 7));
            });
            attempts_and_calls(&taken(&local_snapshotter), "a.test")
        });
        assert_eq!(calls.join().unwrap(), (7, 7));
    }
    // Since the last snapshot: the thousand calls after it, none of the local recorders'.
    assert_eq!(
        attempts_and_calls(&taken(&snapshotter), "a.test"),
        (1_000, 1_000)
    );
}
