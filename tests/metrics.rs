//! Metrics (feature `metrics`): a scripted sequence (`503`, `429`, `200`) against a loopback server
//! through `RetryMiddleware` and `RetryLayer` over `reqwest::Client`, seen by `metrics-util`'s debugging
//! recorder; `stagger.hedges` for a hedge sent, and not for one the inner service could not take; and
//! `http.request.resend_count` on the caller's request span.
#![cfg(all(feature = "metrics", feature = "reqwest-middleware", feature = "tower"))]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::io;
use std::sync::{Mutex, Once, OnceLock};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use reqwest_middleware::ClientBuilder;
use stagger::{Backoff, RetryLayer, RetryMiddleware, RetryPolicy, metrics as names};
use tower::{Layer, ServiceBuilder, ServiceExt, service_fn};
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
    loopback_host_first();
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

/// Makes `127.0.0.1` the first host the process records, before any test runs its calls: the hosts
/// `server.address` names are the first the process sees, and the test of that bound fills the rest
/// with hosts of its own, while the other tests expect their loopback server's address.
fn loopback_host_first() {
    static FIRST: Once = Once::new();
    FIRST.call_once(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let request = http::Request::get("http://127.0.0.1/").body(()).unwrap();
        let ok = service_fn(|_: http::Request<()>| async {
            Ok::<_, Infallible>(http::Response::new(()))
        });
        let service = RetryLayer::new(policy()).layer(ok);
        runtime.block_on(service.oneshot(request)).unwrap();
    });
}

/// Sends `request` through `RetryLayer` to an in-process service that answers with `respond`.
async fn through_the_layer(
    policy: RetryPolicy,
    request: http::Request<()>,
    respond: impl Fn(&http::Request<()>) -> Result<http::Response<()>, io::Error> + Clone,
) -> Result<http::Response<()>, stagger::Error<io::Error>> {
    let service = service_fn(move |request: http::Request<()>| {
        let answer = respond(&request);
        async move { answer }
    });
    RetryLayer::new(policy)
        .layer(service)
        .oneshot(request)
        .await
}

fn answer(status: u16) -> http::Response<()> {
    http::Response::builder().status(status).body(()).unwrap()
}

/// The values of `label` across the series of `name`, with the counters' sums.
fn series(metrics: &Metrics, name: &str, label: &str) -> BTreeMap<String, u64> {
    let mut series = BTreeMap::new();
    for ((metric, labels), value) in metrics {
        let (true, DebugValue::Counter(count)) = (metric == name, value) else {
            continue;
        };
        let value = labels.iter().find(|(key, _)| key == label);
        let value = value.map_or_else(String::new, |(_, value)| value.clone());
        *series.entry(value).or_default() += count;
    }
    series
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
        labels("127.0.0.1", &[("stop.reason", "max_retries")]),
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

#[test]
fn the_labels_carry_the_same_tokens_as_the_events() {
    let metrics = recorded(async || {
        let asks_for_a_pause = |request: &http::Request<()>| match request.uri().path() {
            "/limited" => Ok(http::Response::builder()
                .status(503)
                .header("retry-after", "0")
                .body(())
                .unwrap()),
            _ => Ok(answer(200)),
        };
        let get = |path: &str| {
            let uri = format!("http://127.0.0.1{path}");
            http::Request::get(uri).body(()).unwrap()
        };
        let limited = RetryPolicy::builder().max_retries(1).build().unwrap();
        through_the_layer(limited, get("/limited"), asks_for_a_pause)
            .await
            .unwrap();
        let post = http::Request::post("http://127.0.0.1/orders")
            .body(())
            .unwrap();
        through_the_layer(policy(), post, |_| Ok(answer(502)))
            .await
            .unwrap();
        let once = RetryPolicy::builder()
            .backoff(Backoff::fixed(Duration::from_millis(1)))
            .max_retries(1)
            .build()
            .unwrap();
        through_the_layer(once, get("/refused"), |_| {
            Err(io::ErrorKind::ConnectionRefused.into())
        })
        .await
        .unwrap_err();
    });
    let get = |name: &str, method: &str, more: &[(&str, &str)]| {
        let mut labels = labels("127.0.0.1", more);
        labels.retain(|(key, _)| key != "http.request.method");
        labels.push(("http.request.method".to_owned(), method.to_owned()));
        labels.sort();
        match metrics.get(&(name.to_owned(), labels)) {
            Some(DebugValue::Counter(count)) => Some(*count),
            _ => None,
        }
    };
    let retried = |error_type, delay_reason| {
        let more = [("error.type", error_type), ("delay.reason", delay_reason)];
        get(names::RETRIES, "GET", &more)
    };
    assert_eq!(retried("503", "retry_after"), Some(1), "{metrics:#?}");
    assert_eq!(retried("connect", "backoff"), Some(1), "{metrics:#?}");
    let given_up = |method, stop_reason| {
        get(
            names::CALLS_GIVEN_UP,
            method,
            &[("stop.reason", stop_reason)],
        )
    };
    assert_eq!(given_up("POST", "not_idempotent"), Some(1), "{metrics:#?}");
    assert_eq!(given_up("GET", "max_retries"), Some(2), "{metrics:#?}");
}

/// OpenTelemetry's HTTP conventions know nine methods and record any other as `_OTHER`: so do the
/// metrics, whatever methods the requests use.
#[test]
fn two_hundred_and_one_methods_make_at_most_ten_series() {
    let known = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    let others = (0..192).map(|n| format!("CUSTOM{n}"));
    let methods: Vec<String> = known
        .iter()
        .map(|m| (*m).to_owned())
        .chain(others)
        .collect();
    assert_eq!(methods.len(), 201);
    let metrics = recorded(async || {
        for method in &methods {
            let request = http::Request::builder()
                .method(method.as_str())
                .uri("http://127.0.0.1/items")
                .body(())
                .unwrap();
            through_the_layer(policy(), request, |_| Ok(answer(200)))
                .await
                .unwrap();
        }
    });
    let attempts = series(&metrics, names::ATTEMPTS, "http.request.method");
    let mut expected: BTreeMap<String, u64> = known.iter().map(|m| ((*m).to_owned(), 1)).collect();
    expected.insert("_OTHER".to_owned(), 192);
    assert_eq!(attempts, expected);
}

/// A host comes from the request: past the first `MAX_SERVER_ADDRESSES` hosts of the process, every
/// host is `_OTHER`, so that a client sending wherever its data says adds no series without end.
#[test]
fn past_the_first_hosts_every_host_is_counted_as_other() {
    let hosts = names::MAX_SERVER_ADDRESSES + 50;
    let metrics = recorded(async || {
        for n in 0..hosts {
            let uri = format!("http://host-{n}.example/items");
            let request = http::Request::get(uri).body(()).unwrap();
            through_the_layer(policy(), request, |_| Ok(answer(200)))
                .await
                .unwrap();
        }
    });
    let attempts = series(&metrics, names::ATTEMPTS, "server.address");
    assert!(
        attempts.len() <= names::MAX_SERVER_ADDRESSES + 1,
        "{} series: {attempts:?}",
        attempts.len()
    );
    assert!(attempts["_OTHER"] >= 50, "{attempts:?}");
    assert_eq!(attempts.values().sum::<u64>(), hosts as u64);
    // The hosts named are the first ones seen (after the loopback address of the other tests).
    assert_eq!(attempts.get("host-0.example"), Some(&1));
    assert_eq!(attempts.get(&format!("host-{}.example", hosts - 1)), None);
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
            // An integer, as OpenTelemetry's attribute is (`tracing-opentelemetry` exports an `i64`
            // as one, a `u64` as text).
            fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
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

/// `stagger.host.state_changes`: an entry found down, probed, and up again, each counted once by
/// `host.state`, and by `host.scope` the entry it was: a host that does not answer is the host's
/// (`host`), a path answered `502` is the path's alone (`route`), so that an alert on hosts found
/// down is not woken by one path of one.
#[test]
fn a_host_s_health_changes_are_counted_by_state_and_scope() {
    use stagger::{Breaker, Jitter};
    use std::sync::atomic::{AtomicBool, Ordering};

    static UP: AtomicBool = AtomicBool::new(false);
    let changes = |failure: fn() -> Result<http::Response<()>, io::Error>| {
        UP.store(false, Ordering::SeqCst);
        let metrics = recorded(async || {
            let policy = RetryPolicy::builder()
                .max_retries(0)
                .breaker(Breaker::fail_fast().with_probe_backoff(
                    Backoff::fixed(Duration::from_millis(1)).with_jitter(Jitter::None),
                ))
                .build()
                .unwrap();
            let respond = move |_: &http::Request<()>| {
                if UP.load(Ordering::SeqCst) {
                    Ok(answer(200))
                } else {
                    failure()
                }
            };
            let get = || http::Request::get("http://127.0.0.1/").body(()).unwrap();
            for _ in 0..5 {
                let response = through_the_layer(policy.clone(), get(), respond).await;
                // The failure itself, unchanged: the error, or the `502`.
                let sent = failure().map(|answer| answer.status()).ok();
                assert_eq!(response.map(|answer| answer.status()).ok(), sent);
            }
            UP.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(2)).await;
            let response = through_the_layer(policy.clone(), get(), respond).await;
            assert_eq!(response.unwrap().status(), 200);
        });
        let of = |label| series(&metrics, names::HOST_STATE_CHANGES, label);
        (of("host.state"), of("host.scope"))
    };
    let expected = |scope: &str| {
        let states = [("down", 1), ("probing", 1), ("up", 1)];
        (
            states.map(|(state, n)| (state.to_owned(), n)).into(),
            [(scope.to_owned(), 3)].into(),
        )
    };
    let refused = || Err(io::Error::from(io::ErrorKind::ConnectionRefused));
    assert_eq!(changes(refused), expected("host"), "refused");
    assert_eq!(
        changes(|| Ok(answer(502))),
        expected("route"),
        "answered 502"
    );
}
