//! Overload controls: adaptive throttling (`RetryPolicyBuilder::adaptive_throttle`), through the tower
//! layer on tokio's paused clock against a server of fixed capacity, and through `RetryMiddleware`
//! against a real loopback server.
#![cfg(feature = "tower")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use stagger::{RetryLayer, RetryPolicy, StopReason};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

const fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// A server that accepts `capacity` requests a second (a token bucket one second deep) and answers
/// `503` at once to the rest; `capacity` can be changed while it runs. Counts what reaches it.
#[derive(Clone)]
struct Capacity {
    capacity: Arc<AtomicU64>,
    state: Arc<std::sync::Mutex<(f64, Instant)>>,
    reached: Arc<AtomicUsize>,
}

impl Capacity {
    fn new(capacity: u64) -> Self {
        Self {
            capacity: Arc::new(AtomicU64::new(capacity)),
            state: Arc::new(std::sync::Mutex::new((capacity as f64, Instant::now()))),
            reached: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn answer(&self) -> StatusCode {
        self.reached.fetch_add(1, Ordering::SeqCst);
        let capacity = self.capacity.load(Ordering::SeqCst) as f64;
        let mut state = self.state.lock().unwrap();
        let now = Instant::now();
        let refill = now.duration_since(state.1).as_secs_f64() * capacity;
        *state = ((state.0 + refill).min(capacity), now);
        if state.0 >= 1.0 {
            state.0 -= 1.0;
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        }
    }
}

type Req = Request<()>;

fn get() -> Req {
    Request::get("http://backend.test/items").body(()).unwrap()
}

/// No retries, so that what reaches the server is first attempts only: the throttle's own effect.
fn throttled() -> RetryPolicy {
    RetryPolicy::builder()
        .max_retries(0)
        .adaptive_throttle(2.0)
        // Throttling alone: an overloaded backend's 503s come in runs that would find it down.
        .breaker(None)
        .seed(1)
        .build()
        .unwrap()
}

/// Offers `per_second` requests a second for `seconds` through `client`, one every `1/per_second`,
/// each on its own task; returns (offered, reached the server, rejected locally).
async fn offer<S>(
    client: &S,
    server: &Capacity,
    per_second: u64,
    seconds: u64,
) -> (usize, usize, usize)
where
    S: Service<Req, Response = Response<()>, Error = stagger::Error<std::convert::Infallible>>
        + Clone
        + Send
        + 'static,
    S::Future: Send,
{
    let before = server.reached.load(Ordering::SeqCst);
    let rejected = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    let every = Duration::from_nanos(1_000_000_000 / per_second);
    let n = (per_second * seconds) as usize;
    for _ in 0..n {
        let client = client.clone();
        let rejected = Arc::clone(&rejected);
        tasks.push(tokio::spawn(async move {
            if let Err(error) = client.oneshot(get()).await {
                let rejection = error.rejected().expect("only local rejections fail");
                assert_eq!(rejection.reason(), StopReason::Throttled);
                assert_eq!(error.info().attempts(), 0);
                rejected.fetch_add(1, Ordering::SeqCst);
            }
        }));
        tokio::time::sleep(every).await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    let reached = server.reached.load(Ordering::SeqCst) - before;
    (n, reached, rejected.load(Ordering::SeqCst))
}

fn capacity_service(
    server: &Capacity,
) -> impl Service<Req, Response = Response<()>, Error = std::convert::Infallible, Future: Send>
+ Clone
+ Send
+ 'static {
    let server = server.clone();
    tower::service_fn(move |_: Req| {
        let status = server.answer();
        async move {
            Ok::<_, std::convert::Infallible>(Response::builder().status(status).body(()).unwrap())
        }
    })
}

#[tokio::test(start_paused = true)]
async fn an_overloaded_backend_sees_about_k_times_its_capacity_and_all_of_it_once_it_recovers() {
    let server = Capacity::new(50);
    let client = RetryLayer::new(throttled()).layer(capacity_service(&server));

    // 500 requests/s against a capacity of 50/s. Once the 10 s window is full, the formula
    // p = (R − 2A) / (R + 1), with R = 5 000 and A = 500 per window, lets through 2 × 50 = 100 a second.
    let (_, _, _) = offer(&client, &server, 500, 10).await;
    let (offered, reached, rejected) = offer(&client, &server, 500, 20).await;
    let fraction = reached as f64 / offered as f64;
    assert!(
        (0.18..=0.22).contains(&fraction),
        "{reached} of {offered} reached the server ({fraction:.3}); expected 2 × 50 / 500 = 0.2 ± 10 %"
    );
    assert_eq!(reached + rejected, offered);

    // The backend recovers, and accepts everything that reaches it. The throttle lets go as the
    // overloaded seconds leave its window: in second k after the recovery the accepts in the window
    // are A = 50 × (10 − k) + what reached the server since, and 2A/R of the requests reach it, so
    // each second lets through more than the one before, by 10 % at first (the formula alone gives
    // 100, 110, 122, 136, 154, 174, 199, 229, 265, 308 a second; measured: 101, 102, 139, 146, 164,
    // 207, 246, 269, 341, 395). Everything gets through once the window's accepts are half its
    // requests: 12 s after, measured.
    server.capacity.store(1_000_000, Ordering::SeqCst);
    let overloaded = reached as f64 / 20.0;
    let mut per_second = Vec::new();
    for _ in 0..11 {
        let (_, reached, _) = offer(&client, &server, 500, 1).await;
        per_second.push(reached as f64);
    }
    // No second lets through less than the overload did, less 20 requests: two standard deviations
    // of 500 draws at a fifth (9 requests each).
    assert!(
        per_second.iter().all(|&n| n >= overloaded - 20.0),
        "{per_second:?} a second after {overloaded} a second overloaded"
    );
    // Seconds 6 to 10 let through about twice as much: the formula gives 2.35 times (measured: 2.9).
    let later = per_second[5..10].iter().sum::<f64>() / 5.0;
    assert!(
        later > 1.8 * overloaded,
        "{later} a second in seconds 6 to 10, {overloaded} overloaded: {per_second:?}"
    );
    let (offered, reached, rejected) = offer(&client, &server, 500, 10).await;
    assert_eq!((reached, rejected), (offered, 0));
}

#[tokio::test(start_paused = true)]
async fn a_healthy_backend_is_never_throttled() {
    let server = Capacity::new(1_000_000);
    let client = RetryLayer::new(throttled()).layer(capacity_service(&server));
    let (offered, reached, rejected) = offer(&client, &server, 500, 20).await;
    assert_eq!((reached, rejected), (offered, 0));
}

#[tokio::test(start_paused = true)]
async fn a_retry_the_throttle_rejects_ends_the_call_with_the_last_response() {
    // Every answer is a 503: the throttle soon rejects retries too, and the call ends with the 503
    // in hand, its stop reason saying why.
    let server = Capacity::new(0);
    let policy = RetryPolicy::builder()
        .max_retries(10)
        .budget(None)
        .adaptive_throttle(2.0)
        .build()
        .unwrap();
    let client = RetryLayer::new(policy).layer(capacity_service(&server));
    let response = client.clone().oneshot(get()).await.unwrap();
    let info = stagger::RetryInfo::of(response.extensions());
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(info.stop_reason(), Some(StopReason::Throttled));
    assert!(info.attempts() < 11, "{info:?}");
}

#[tokio::test(start_paused = true)]
async fn each_host_has_its_own_throttle() {
    let dead = Capacity::new(0);
    let healthy = Capacity::new(1_000_000);
    let (dead_service, healthy_service) = (capacity_service(&dead), capacity_service(&healthy));
    let router = tower::service_fn(move |request: Req| {
        let to_dead = request.uri().host() == Some("dead.test");
        let (mut dead, mut healthy) = (dead_service.clone(), healthy_service.clone());
        async move {
            if to_dead {
                dead.call(request).await
            } else {
                healthy.call(request).await
            }
        }
    });
    let client = RetryLayer::new(throttled()).layer(router);
    let to = |host: &str| Request::get(format!("http://{host}/")).body(()).unwrap();
    let mut rejected_dead = 0;
    for _ in 0..200 {
        if client.clone().oneshot(to("dead.test")).await.is_err() {
            rejected_dead += 1;
        }
        let response = client.clone().oneshot(to("healthy.test")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(rejected_dead > 180, "{rejected_dead} of 200 rejected");
    assert_eq!(healthy.reached.load(Ordering::SeqCst), 200);
}

#[tokio::test(start_paused = true)]
async fn the_generic_retry_is_throttled_too() {
    let policy = RetryPolicy::builder()
        .max_retries(0)
        .adaptive_throttle(2.0)
        .build()
        .unwrap();
    let mut rejected = 0;
    for _ in 0..100 {
        let result = stagger::retry(
            &policy,
            || async { Err::<(), _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)) },
            |_| stagger::Outcome::RetrySafe(stagger::Reason::Connect),
        )
        .await;
        if result.unwrap_err().rejected().is_some() {
            rejected += 1;
        }
    }
    // Nothing is ever accepted: only about 1/(R + 1) of the requests get through, H(100) ≈ 5 of them.
    assert!(rejected > 85, "{rejected} of 100 rejected");
    let _ = secs(0);
}

#[cfg(feature = "reqwest-middleware")]
mod middleware {
    use reqwest_middleware::ClientBuilder;
    use stagger::{RetryMiddleware, RetryPolicy, StopReason};
    use wiremock::matchers::any;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;

    #[tokio::test]
    async fn a_failing_backend_is_spared_and_served_again_once_the_window_has_passed() {
        let server = MockServer::start().await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(503))
            .mount(&server)
            .await;
        let policy = RetryPolicy::builder()
            .max_retries(0)
            .adaptive_throttle(2.0)
            .adaptive_throttle_window(secs(1))
            .build()
            .unwrap();
        let client = ClientBuilder::new(reqwest::Client::builder().no_proxy().build().unwrap())
            .with(RetryMiddleware::new(policy))
            .build();

        let mut rejected = 0;
        for _ in 0..100 {
            match client.get(server.uri()).send().await {
                Ok(response) => assert_eq!(response.status(), 503),
                Err(reqwest_middleware::Error::Middleware(error)) => {
                    let rejection = error.downcast_ref::<stagger::Rejected>().unwrap();
                    assert_eq!(rejection.reason(), StopReason::Throttled);
                    rejected += 1;
                }
                Err(other) => panic!("{other}"),
            }
        }
        let reached = server.received_requests().await.unwrap().len();
        assert_eq!(reached + rejected, 100);
        assert!(
            reached < 15,
            "{reached} of 100 reached a backend that accepts none"
        );

        // The backend recovers; once the window has passed, every request reaches it again.
        server.reset().await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(200))
            .mount(&server)
            .await;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        for _ in 0..50 {
            let response = client.get(server.uri()).send().await.unwrap();
            assert_eq!(response.status(), 200);
        }
        assert_eq!(server.received_requests().await.unwrap().len(), 50);
    }
}

/// A client calling two hosts: `dead.test` answers `503` to everything, `flaky.test` answers its
/// first request `503` and every later one `200`. Returns the stop reason of the flaky host's call,
/// made after 50 calls to the dead host.
async fn flaky_host_after_a_dead_one(budget: stagger::RetryBudget) -> Option<StopReason> {
    let flaky_calls = Arc::new(AtomicUsize::new(0));
    let router = tower::service_fn(move |request: Req| {
        let status = match request.uri().host() {
            Some("dead.test") => 503,
            _ if flaky_calls.fetch_add(1, Ordering::SeqCst) == 0 => 503,
            _ => 200,
        };
        async move {
            Ok::<_, std::convert::Infallible>(Response::builder().status(status).body(()).unwrap())
        }
    });
    let policy = RetryPolicy::builder()
        .backoff(stagger::Backoff::fixed(Duration::from_millis(1)))
        .budget(budget)
        // The budget alone: with the breaker, the dead host would be found down and spend nothing.
        .breaker(None)
        .build()
        .unwrap();
    let client = RetryLayer::new(policy).layer(router);
    let to = |host: &str| Request::get(format!("http://{host}/")).body(()).unwrap();
    let mut spent = 0;
    for _ in 0..50 {
        let response = client.clone().oneshot(to("dead.test")).await.unwrap();
        let info = stagger::RetryInfo::of(response.extensions());
        if info.stop_reason() == Some(StopReason::Budget) {
            spent += 1;
        }
    }
    assert!(
        spent > 40,
        "the dead host's calls stopped on the budget {spent} times of 50"
    );
    let response = client.oneshot(to("flaky.test")).await.unwrap();
    let info = stagger::RetryInfo::of(response.extensions());
    info.stop_reason()
}

fn small_budget(per_host: bool) -> stagger::RetryBudget {
    // Five retries per window, whatever the traffic.
    stagger::RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(5)
        .window(secs(1))
        .per_host(per_host)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_dead_host_spends_only_its_own_budget_when_it_is_kept_per_host() {
    assert_eq!(
        flaky_host_after_a_dead_one(small_budget(true)).await,
        Some(StopReason::Success)
    );
}

#[tokio::test(start_paused = true)]
async fn with_one_budget_a_dead_host_spends_the_retries_of_a_healthy_one() {
    assert_eq!(
        flaky_host_after_a_dead_one(small_budget(false)).await,
        Some(StopReason::Budget)
    );
}

#[tokio::test(start_paused = true)]
async fn a_dead_host_s_spent_floor_stays_spent_when_16384_other_hosts_come_and_go() {
    // Issue 21, item 6: when the table of per-host accounts was full, an eighth of it was dropped to
    // make room, the dead host's among them, and it came back with its floor whole.
    let policy = RetryPolicy::builder()
        .backoff(stagger::Backoff::fixed(Duration::from_millis(1)))
        .budget(small_budget(true))
        .build()
        .unwrap();
    let server = tower::service_fn(|request: Request<()>| async move {
        let status = match request.uri().host() {
            Some("dead.test") => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::OK,
        };
        let response = Response::builder().status(status).body(()).unwrap();
        Ok::<_, std::convert::Infallible>(response)
    });
    let client = RetryLayer::new(policy).layer(server);
    let get = |host: &str| Request::get(format!("http://{host}/")).body(()).unwrap();
    let stop = |response: &Response<()>| {
        let info = stagger::RetryInfo::of(response.extensions());
        (info.retries(), info.stop_reason())
    };

    // The dead host spends its five retries.
    let response = client.clone().oneshot(get("dead.test")).await.unwrap();
    assert_eq!(stop(&response), (5, Some(StopReason::Budget)));
    // 16 384 other hosts, each with a request of its own, fill the table four times over (when a full
    // table dropped an eighth of itself at random, the dead host survived this with odds of 4 %).
    for n in 0..16_384 {
        let response = client
            .clone()
            .oneshot(get(&format!("h{n}.test")))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
    }
    // Still within the dead host's window: its floor is still spent.
    let response = client.oneshot(get("dead.test")).await.unwrap();
    assert_eq!(stop(&response), (0, Some(StopReason::Budget)));
}

/// A server whose `dead.test` answers `502` to everything, and every other host `502` to its first
/// request and `200` after.
fn dead_and_once_failing() -> impl tower::Service<
    Request<()>,
    Response = Response<()>,
    Error = std::convert::Infallible,
    Future: Send,
> + Clone {
    let seen = Arc::new(std::sync::Mutex::new(std::collections::HashMap::new()));
    tower::service_fn(move |request: Request<()>| {
        let host = request.uri().host().unwrap_or_default().to_owned();
        let n = {
            let mut seen = seen.lock().unwrap();
            let n = seen.entry(host.clone()).or_insert(0u32);
            *n += 1;
            *n
        };
        async move {
            let status = match (host.as_str(), n) {
                ("dead.test", _) | (_, 1) => StatusCode::BAD_GATEWAY,
                _ => StatusCode::OK,
            };
            Ok(Response::builder().status(status).body(()).unwrap())
        }
    })
}

/// 10 000 other hosts' calls through `client`, each failing once (and retried, while the budget
/// allows: past the 4 096 hosts a per-host budget keeps, the others share one account).
async fn ten_thousand_others<S>(client: &S)
where
    S: tower::Service<Request<()>, Response = Response<()>> + Clone,
    S::Error: std::fmt::Debug,
{
    for n in 0..10_000 {
        let request = Request::get(format!("http://h{n}.test/")).body(()).unwrap();
        client.clone().oneshot(request).await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_dead_host_s_spent_budget_and_its_being_down_survive_any_traffic_to_other_hosts() {
    // Issue 35, item 6: a client that talks to many hosts within one window must not forget what a
    // dead host spent, nor that it is down, whatever the other hosts do: here each of 10 000 fails
    // once (each a host's entry and a route's in the breaker's table, and an account of its own)
    // and answers its retry.
    let get = |host: &str| Request::get(format!("http://{host}/")).body(()).unwrap();
    let retries = |response: &Response<()>| {
        let info = stagger::RetryInfo::of(response.extensions());
        (info.retries(), info.stop_reason())
    };
    // The budget, kept per host: two retries a second over 10 s, one a call. No backoff, so that
    // the 10 000 others take no time and all come within the dead host's window.
    let budget = stagger::RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(2)
        .window(secs(10))
        .per_host(true)
        .build()
        .unwrap();
    let policy = RetryPolicy::builder()
        .backoff(stagger::Backoff::fixed(Duration::ZERO))
        .max_retries(1)
        .budget(budget)
        .breaker(None)
        .build()
        .unwrap();
    let client = RetryLayer::new(policy).layer(dead_and_once_failing());
    // The budget pays its 20 out at the rate it is earned: one second of the floor at once, then
    // one every half second, the whole window's spent 9 s in.
    for n in 0..20 {
        if n >= 2 {
            tokio::time::advance(Duration::from_millis(500)).await;
        }
        let response = client.clone().oneshot(get("dead.test")).await.unwrap();
        assert_eq!(retries(&response), (1, Some(StopReason::MaxRetries)));
    }
    let response = client.clone().oneshot(get("dead.test")).await.unwrap();
    assert_eq!(retries(&response), (0, Some(StopReason::Budget)));
    ten_thousand_others(&client).await;
    let response = client.oneshot(get("dead.test")).await.unwrap();
    assert_eq!(
        retries(&response),
        (0, Some(StopReason::Budget)),
        "still spent within its window"
    );

    // The breaker, as by default: the dead host's path is down, and stays down.
    let policy = RetryPolicy::builder()
        .backoff(stagger::Backoff::fixed(Duration::from_millis(1)))
        .max_retries(1)
        .breaker(stagger::Breaker::fail_fast())
        .build()
        .unwrap();
    let client = RetryLayer::new(policy.clone()).layer(dead_and_once_failing());
    for _ in 0..3 {
        let _ = client.clone().oneshot(get("dead.test")).await;
    }
    assert!(matches!(
        policy.route_state("dead.test", "/"),
        stagger::HostState::Down { .. }
    ));
    ten_thousand_others(&client).await;
    assert!(matches!(
        policy.route_state("dead.test", "/"),
        stagger::HostState::Down { .. }
    ));
    // The next call goes as the probe if one is due (the clock moved 10 s with the others' 1 ms
    // backoffs), and gets the 502; the one after it fails fast.
    if let Ok(response) = client.clone().oneshot(get("dead.test")).await {
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    }
    let error = client.oneshot(get("dead.test")).await.unwrap_err();
    assert_eq!(
        error.rejected().map(|r| r.reason()),
        Some(StopReason::HostDown)
    );
}

/// What 1 000 requests cost a backend when each goes through a policy built for it (a client rebuilt
/// per request), against the same requests through one shared policy: attempts per request, all sent
/// at once. `answer` is how the backend meets each attempt; `budget` the budget each policy gets
/// (`None`: each policy's default one).
async fn per_request_policies(
    host: &str,
    answer: fn() -> Result<Response<()>, std::io::Error>,
    hangs: bool,
    budget: Option<fn() -> stagger::RetryBudget>,
    shared: bool,
) -> f64 {
    let reached = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&reached);
    let backend = tower::service_fn(move |_: Req| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            if hangs {
                std::future::pending::<()>().await;
            }
            answer()
        }
    });
    let policy = move || {
        let builder = RetryPolicy::builder().attempt_timeout(secs(1));
        match budget {
            Some(budget) => builder.budget(budget()),
            None => builder,
        }
        .build()
        .unwrap()
    };
    let one = policy();
    let requests = 1000;
    let calls = (0..requests).map(|i| {
        let layer = RetryLayer::new(if shared { one.clone() } else { policy() });
        let request = Request::get(format!("http://{host}/items/{i}"))
            .body(())
            .unwrap();
        layer.layer(backend.clone()).oneshot(request)
    });
    futures::future::join_all(calls).await;
    reached.load(Ordering::SeqCst) as f64 / requests as f64
}

/// Issue 29: a client rebuilt for each request brought a fresh starting credit with each, and sent
/// 3.00 attempts a request to a backend that times out (one shared policy: 1.02). The credit is the
/// process's, one for each host: the same with a budget kept per host.
#[tokio::test(start_paused = true)]
async fn a_policy_built_per_request_does_not_bring_a_fresh_credit_with_each() {
    let hung = || Ok(Response::new(()));
    let per_host = || {
        stagger::RetryBudget::builder()
            .per_host(true)
            .build()
            .unwrap()
    };
    let each = per_request_policies("per-request.test", hung, true, None, false).await;
    let each_per_host = per_request_policies(
        "per-request-per-host.test",
        hung,
        true,
        Some(per_host),
        false,
    )
    .await;
    let shared = per_request_policies("shared.test", hung, true, None, true).await;
    let refused = || Err(std::io::ErrorKind::ConnectionRefused.into());
    let each_refused = per_request_policies("refused.test", refused, false, None, false).await;
    let shared_refused =
        per_request_policies("refused-shared.test", refused, false, None, true).await;
    println!(
        "attempts a request, timing out: {each:.3} per request ({each_per_host:.3} per host), \
         {shared:.3} shared; refused: {each_refused:.2} per request, {shared_refused:.2} shared"
    );
    assert!(each <= 1.1, "{each}");
    assert!(each_per_host <= 1.1, "{each_per_host}");
}
