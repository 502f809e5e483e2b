//! A host's cooldown through the layer: held by its name in any case or by its `Host` header, and a
//! `Retry-After` of years held five minutes before a request probes the host.

use std::sync::atomic::{AtomicUsize, Ordering};

use stagger::StopReason;

use super::*;

/// The host and path of every request a server saw, and when.
type Arrivals = Arc<Mutex<Vec<(String, Duration)>>>;

/// A server that answers `/limited` with `429` and `Retry-After: secs` the first time, and everything
/// else with `200`, recording what it sees.
fn limited(
    retry_after: &'static str,
) -> (
    impl Service<Request<()>, Response = Response<()>, Error = Infallible, Future: Send> + Clone,
    Arrivals,
) {
    let start = Instant::now();
    let seen = Arrivals::default();
    let record = Arc::clone(&seen);
    let refused = Arc::new(AtomicUsize::new(0));
    let service = service_fn(move |request: Request<()>| {
        let host = request
            .uri()
            .host()
            .or_else(|| request.headers().get("host").and_then(|h| h.to_str().ok()))
            .unwrap_or("-")
            .to_owned();
        record
            .lock()
            .unwrap()
            .push((format!("{host}{}", request.uri().path()), start.elapsed()));
        let first =
            request.uri().path() == "/limited" && refused.fetch_add(1, Ordering::SeqCst) == 0;
        let response = if first {
            Response::builder()
                .status(429)
                .header("retry-after", retry_after)
        } else {
            Response::builder().status(200)
        };
        async move { Ok::<_, Infallible>(response.body(()).unwrap()) }
    });
    (service, seen)
}

fn cooling() -> RetryPolicy {
    RetryPolicy::builder()
        .host_cooldown(true)
        .max_retries(0)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_host_s_cooldown_holds_its_name_in_any_case() {
    let (server, seen) = limited("2");
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(cooling()))
        .service(server);
    let get = |uri: &str| Request::get(uri).body(()).unwrap();
    let refused = client
        .clone()
        .oneshot(get("http://API.Example.test/limited"))
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    let held = client
        .oneshot(get("http://api.example.test/items"))
        .await
        .unwrap();
    assert!(
        info(&held).cooldown() >= Duration::from_secs(2),
        "{:?}",
        info(&held)
    );
    let at = seen.lock().unwrap()[1].1;
    assert!(
        at >= Duration::from_secs(2),
        "the second request went at {at:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_in_origin_form_is_held_by_its_host_header_s_cooldown() {
    // hyper's connection API sends `/items` and a `Host` header.
    let (server, seen) = limited("2");
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(cooling()))
        .service(server);
    let get = |path: &str, host: &str| Request::get(path).header("host", host).body(()).unwrap();
    let refused = client
        .clone()
        .oneshot(get("/limited", "api.test"))
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    // Another host, in origin form too, is not held by it.
    let other = client
        .clone()
        .oneshot(get("/items", "other.test"))
        .await
        .unwrap();
    assert_eq!(info(&other).cooldown(), Duration::ZERO);
    let held = client.oneshot(get("/items", "api.test")).await.unwrap();
    assert!(
        info(&held).cooldown() >= Duration::from_secs(2),
        "{:?}",
        info(&held)
    );
    assert_eq!(seen.lock().unwrap().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_of_years_holds_a_host_five_minutes_and_then_a_request_probes_it() {
    let (server, seen) = limited("999999999");
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(cooling()))
        .service(server);
    let get = |path: &str| {
        Request::get(format!("http://api.test{path}"))
            .body(())
            .unwrap()
    };
    let refused = client.clone().oneshot(get("/limited")).await.unwrap();
    assert_eq!(refused.status(), 429);
    // Longer than max_retry_after: not waited for, not sent.
    let error = client.clone().oneshot(get("/items")).await.unwrap_err();
    assert_eq!(
        error.rejected().unwrap().info().stop_reason(),
        Some(StopReason::Cooldown)
    );
    // Five minutes on, the host is probed again, and its answer goes through.
    tokio::time::advance(Duration::from_secs(300)).await;
    let probe = client.oneshot(get("/items")).await.unwrap();
    assert_eq!(probe.status(), 200);
    assert_eq!(seen.lock().unwrap().len(), 2);
}
