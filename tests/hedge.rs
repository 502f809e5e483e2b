//! Hedging (`RetryPolicyBuilder::hedge_after`), through `RetryMiddleware` and `RetryLayer` over
//! `reqwest::Client`, against a loopback server that holds its first request for 2 s, answers the
//! others at once, and notices when a connection is closed under a request it is holding; then, in
//! virtual time over in-process services, the race's rules (`race`), a hedge the inner service cannot
//! take yet (`readiness`), the pushback of an answer set aside (`pushback`, with its loopback
//! checks through both adapters), adaptive throttling's accounts of a race (`throttling`), and the
//! limits every hedge obeys (`promises`).
#![cfg(all(feature = "reqwest-middleware", feature = "tower"))]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use reqwest_middleware::ClientBuilder;
use stagger::{RetryBudget, RetryInfo, RetryLayer, RetryMiddleware, RetryPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, ServiceExt};

mod common;

/// What the server saw.
#[derive(Clone, Default)]
struct Seen {
    requests: Arc<AtomicUsize>,
    /// When each request's head arrived, in arrival order.
    arrivals: Arc<std::sync::Mutex<Vec<Instant>>>,
    /// Connections closed by the client while the server held their request.
    dropped: Arc<AtomicUsize>,
}

/// An HTTP/1.1 server on loopback, one request per connection: the first is held for `hold` (and
/// answered `200` if the client still waits), every later one is answered `200` at once.
async fn server(hold: Duration) -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let counts = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                counts.arrivals.lock().unwrap().push(Instant::now());
                let n = counts.requests.fetch_add(1, Ordering::SeqCst);
                if n == 0 {
                    // Hold it; a read of 0 bytes means the client closed the connection.
                    tokio::select! {
                        read = stream.read(&mut buf) => {
                            if matches!(read, Ok(0) | Err(_)) {
                                counts.dropped.fetch_add(1, Ordering::SeqCst);
                            }
                            return;
                        }
                        () = tokio::time::sleep(hold) => {}
                    }
                }
                let body = if n == 0 { "slow" } else { "fast" };
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    (addr, seen)
}

fn hedging() -> stagger::RetryPolicyBuilder {
    RetryPolicy::builder().hedge_after(Duration::from_millis(100))
}

fn reqwest_client() -> reqwest::Client {
    // One connection per request, so that the first attempt's is its own to drop.
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Adapter {
    Middleware,
    Layer,
}

/// Sends `method /` through `adapter`; the response, its body, and how long it took.
async fn send(
    adapter: Adapter,
    policy: RetryPolicy,
    addr: SocketAddr,
    method: Method,
) -> (StatusCode, String, RetryInfo, Duration) {
    let url = format!("http://{addr}/");
    // The client is built before the clock starts: loading the root certificates is no part of the call.
    let client = reqwest_client();
    let (response, took) = match adapter {
        Adapter::Middleware => {
            let client = ClientBuilder::new(client)
                .with(RetryMiddleware::new(policy))
                .build();
            let start = Instant::now();
            let response = client.request(method, &url).send().await.unwrap();
            (response, start.elapsed())
        }
        Adapter::Layer => {
            let service = ServiceBuilder::new()
                .layer(RetryLayer::new(policy))
                .service(client);
            let start = Instant::now();
            let response = (service.oneshot(reqwest::Request::new(method, url.parse().unwrap())))
                .await
                .unwrap();
            (response, start.elapsed())
        }
    };
    let status = response.status();
    let info = *response.extensions().get::<RetryInfo>().unwrap();
    let body = response.text().await.unwrap();
    (status, body, info, took)
}

async fn a_get_hedged_after_100_ms_returns_with_the_hedges_answer(adapter: Adapter) {
    let (addr, seen) = server(Duration::from_secs(2)).await;
    let policy = hedging().build().unwrap();
    let (status, body, info, took) = send(adapter, policy, addr, Method::GET).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "fast"),
        "{adapter:?}"
    );
    // The hedge left 100 ms after the first attempt, never earlier (the server's clock says when each
    // arrived), and its answer ended the call well before the slow one's 2 s.
    let arrivals = seen.arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 2, "{adapter:?}");
    let gap = arrivals[1] - arrivals[0];
    assert!(
        gap >= Duration::from_millis(100),
        "{adapter:?}: hedge after {gap:?}"
    );
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(2),
        "{adapter:?}: {took:?}"
    );
    assert_eq!((info.attempts(), info.hedges()), (2, 1), "{adapter:?}");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
    // The slow attempt was dropped, and its connection with it.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(seen.dropped.load(Ordering::SeqCst), 1, "{adapter:?}");
}

async fn a_post_without_a_key_is_never_hedged(adapter: Adapter) {
    let (addr, seen) = server(Duration::from_millis(400)).await;
    let policy = hedging().build().unwrap();
    let (status, body, info, took) = send(adapter, policy, addr, Method::POST).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "slow"),
        "{adapter:?}"
    );
    assert!(took >= Duration::from_millis(400), "{adapter:?}: {took:?}");
    assert_eq!((info.attempts(), info.hedges()), (1, 0), "{adapter:?}");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
}

async fn an_exhausted_budget_sends_no_hedge(adapter: Adapter) {
    let (addr, seen) = server(Duration::from_millis(400)).await;
    let empty = RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(0)
        .build()
        .unwrap();
    let policy = hedging().budget(empty).build().unwrap();
    let (status, body, info, _) = send(adapter, policy, addr, Method::GET).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "slow"),
        "{adapter:?}"
    );
    assert_eq!((info.attempts(), info.hedges()), (1, 0), "{adapter:?}");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn middleware_a_get_hedged_after_100_ms_returns_with_the_hedges_answer() {
    a_get_hedged_after_100_ms_returns_with_the_hedges_answer(Adapter::Middleware).await;
}

#[tokio::test]
async fn layer_a_get_hedged_after_100_ms_returns_with_the_hedges_answer() {
    a_get_hedged_after_100_ms_returns_with_the_hedges_answer(Adapter::Layer).await;
}

#[tokio::test]
async fn middleware_a_post_without_a_key_is_never_hedged() {
    a_post_without_a_key_is_never_hedged(Adapter::Middleware).await;
}

#[tokio::test]
async fn layer_a_post_without_a_key_is_never_hedged() {
    a_post_without_a_key_is_never_hedged(Adapter::Layer).await;
}

#[tokio::test]
async fn middleware_an_exhausted_budget_sends_no_hedge() {
    an_exhausted_budget_sends_no_hedge(Adapter::Middleware).await;
}

#[tokio::test]
async fn layer_an_exhausted_budget_sends_no_hedge() {
    an_exhausted_budget_sends_no_hedge(Adapter::Layer).await;
}

/// In virtual time, over an in-process service: the race's rules.
mod race {
    use std::convert::Infallible;
    use std::sync::Mutex;

    use http::{Request, Response};
    use tower::{Layer, service_fn};

    use super::*;

    /// Which calls answered, in the order they did.
    type Answered = Arc<Mutex<Vec<usize>>>;

    /// A service that answers the n-th call after `script[n].0` ms with status `script[n].1`.
    fn scripted(
        script: &'static [(u64, u16)],
    ) -> (
        impl tower::Service<Request<()>, Response = Response<&'static str>, Error = Infallible> + Clone,
        Answered,
    ) {
        let calls = Arc::new(AtomicUsize::new(0));
        let answered = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&answered);
        let service = service_fn(move |_: Request<()>| {
            let n = calls.fetch_add(1, Ordering::SeqCst);
            let (delay, status) = script[n.min(script.len() - 1)];
            let log = Arc::clone(&log);
            async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                log.lock().unwrap().push(n);
                Ok(Response::builder().status(status).body("").unwrap())
            }
        });
        (service, answered)
    }

    fn get() -> Request<()> {
        Request::get("http://api.test/").body(()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_while_the_other_attempt_runs_is_set_aside_for_its_answer() {
        // The first attempt answers 200 at 300 ms; the hedge, started at 100 ms, fails at 150 ms.
        let (service, answered) = scripted(&[(300, 200), (50, 503)]);
        let policy = hedging().max_retries(3).build().unwrap();
        let start = tokio::time::Instant::now();
        let response = RetryLayer::new(policy)
            .layer(service)
            .oneshot(get())
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(start.elapsed(), Duration::from_millis(300));
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts(), info.hedges()), (2, 1));
        assert_eq!(*answered.lock().unwrap(), [1, 0]);
    }

    #[tokio::test(start_paused = true)]
    async fn when_both_attempts_of_a_race_fail_the_call_retries_as_usual() {
        // First: 503 at 150 ms; hedge (100 ms): 503 at 120 ms, set aside; then a retry succeeds.
        let (service, _) = scripted(&[(150, 503), (20, 503), (10, 200)]);
        let policy = hedging()
            .backoff(stagger::Backoff::fixed(Duration::from_millis(10)))
            .max_retries(3)
            .build()
            .unwrap();
        let response = RetryLayer::new(policy)
            .layer(service)
            .oneshot(get())
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts(), info.hedges()), (3, 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_a_lost_race_is_hedged_while_within_max_retries() {
        // Race 1: the first attempt and its hedge both fail. The retry (attempt 3 of 4 allowed) is
        // slow, and its hedge (the 4th) answers: earlier hedges count once towards max_retries.
        let (service, _) = scripted(&[(150, 503), (20, 503), (300, 200), (10, 200)]);
        let policy = hedging()
            .backoff(stagger::Backoff::fixed(Duration::from_millis(10)))
            .max_retries(3)
            .build()
            .unwrap();
        let response = RetryLayer::new(policy)
            .layer(service)
            .oneshot(get())
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts(), info.hedges()), (4, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedge_counts_towards_max_retries() {
        let (service, answered) = scripted(&[(300, 200)]);
        let policy = hedging().max_retries(0).build().unwrap();
        let response = RetryLayer::new(policy)
            .layer(service)
            .oneshot(get())
            .await
            .unwrap();
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts(), info.hedges()), (1, 0));
        assert_eq!(answered.lock().unwrap().len(), 1);
    }

    #[test]
    fn hedge_after_zero_is_refused() {
        assert_eq!(
            RetryPolicy::builder()
                .hedge_after(Duration::ZERO)
                .build()
                .unwrap_err(),
            stagger::ConfigError::HedgeAfter(Duration::ZERO)
        );
    }
}

/// In virtual time, over an in-process service that answers each call as a script says and counts
/// the calls in flight.
mod scripted {
    use std::convert::Infallible;
    use std::sync::Mutex;

    use http::{Request, Response};
    use tower::service_fn;

    use super::*;

    /// How the backend answers one call: after `after`, with `status` and `headers`.
    #[derive(Clone, Debug)]
    pub struct Answer {
        pub after: Duration,
        pub status: u16,
        pub headers: Vec<(&'static str, &'static str)>,
    }

    pub fn answer(after_ms: u64, status: u16) -> Answer {
        Answer {
            after: Duration::from_millis(after_ms),
            status,
            headers: Vec::new(),
        }
    }

    impl Answer {
        pub fn header(mut self, name: &'static str, value: &'static str) -> Self {
            self.headers.push((name, value));
            self
        }
    }

    /// What the backend saw.
    #[derive(Clone, Default)]
    pub struct Calls {
        made: Arc<AtomicUsize>,
        in_flight: Arc<AtomicUsize>,
        most_in_flight: Arc<AtomicUsize>,
        /// Each call's path, in the order they were made.
        paths: Arc<Mutex<Vec<String>>>,
    }

    impl Calls {
        pub fn most_in_flight(&self) -> usize {
            self.most_in_flight.load(Ordering::SeqCst)
        }

        pub fn to(&self, path: &str) -> usize {
            self.paths
                .lock()
                .unwrap()
                .iter()
                .filter(|p| *p == path)
                .count()
        }
    }

    /// Leaves the count of calls in flight when the call ends or is dropped.
    struct InFlight(Arc<AtomicUsize>);

    impl Drop for InFlight {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    pub type Backend = tower::util::BoxCloneSyncService<Request<()>, Response<()>, Infallible>;

    /// A backend that answers the `n`-th call (from 0) to `path` as `script(n, path)` says.
    pub fn backend(
        script: impl Fn(usize, &str) -> Answer + Send + Sync + 'static,
    ) -> (Backend, Calls) {
        let calls = Calls::default();
        let seen = calls.clone();
        let script = Arc::new(script);
        let service = service_fn(move |request: Request<()>| {
            let path = request.uri().path().to_owned();
            let n = {
                let mut paths = seen.paths.lock().unwrap();
                let n = paths.iter().filter(|p| **p == path).count();
                paths.push(path.clone());
                n
            };
            seen.made.fetch_add(1, Ordering::SeqCst);
            let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            seen.most_in_flight.fetch_max(now, Ordering::SeqCst);
            let guard = InFlight(Arc::clone(&seen.in_flight));
            let Answer {
                after,
                status,
                headers,
            } = script(n, &path);
            async move {
                let _guard = guard;
                tokio::time::sleep(after).await;
                let mut response = Response::builder().status(status);
                for (name, value) in headers {
                    response = response.header(name, value);
                }
                Ok(response.body(()).unwrap())
            }
        });
        (tower::util::BoxCloneSyncService::new(service), calls)
    }

    pub fn get(path: &str) -> Request<()> {
        Request::get(format!("http://api.test{path}"))
            .body(())
            .unwrap()
    }

    pub fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }
}

/// A hedge goes through a clone of the inner service, which may not be ready to take it.
mod readiness {
    use stagger::{Backoff, StopReason};
    use tower::ServiceBuilder;

    use super::scripted::{answer, backend, get, ms};
    use super::*;

    /// One retry per request deposited, no floor: a withdrawal that is never given back shows as a
    /// retry refused later.
    fn one_retry_per_request() -> RetryBudget {
        RetryBudget::builder()
            .ratio(1.0)
            .min_per_second(0)
            .build()
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedge_the_inner_service_cannot_take_is_neither_counted_nor_paid() {
        // `/slow` answers after 300 ms; `/flaky` answers 503 twice, then 200.
        let (inner, calls) = backend(|n, path| match (path, n) {
            ("/slow", _) => answer(300, 200),
            (_, 0 | 1) => answer(0, 503),
            _ => answer(0, 200),
        });
        let policy = hedging()
            .backoff(Backoff::fixed(ms(10)))
            .max_retries(3)
            .budget(one_retry_per_request())
            .build()
            .unwrap();
        // One request at a time below the layer: while the slow attempt runs, the hedge's clone of
        // the service is not ready.
        let service = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .concurrency_limit(1)
            .service(inner);

        let start = tokio::time::Instant::now();
        let response = service.clone().oneshot(get("/slow")).await.unwrap();
        assert_eq!(start.elapsed(), ms(300));
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!(
            (info.attempts(), info.hedges()),
            (1, 0),
            "no hedge was sent"
        );
        assert_eq!(calls.to("/slow"), 1);

        // The budget holds the deposits of both requests, two retries: the hedge withdrew nothing.
        let response = service.clone().oneshot(get("/flaky")).await.unwrap();
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!(
            (
                response.status().as_u16(),
                info.attempts(),
                info.stop_reason()
            ),
            (200, 3, Some(StopReason::Success))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedge_waits_for_the_inner_service_while_the_race_lasts() {
        // Two requests at a time below the layer. `/busy` holds the second place until 150 ms, so
        // the hedge of `/slow`, due at 100 ms, goes at 150 ms, when the service can take it.
        let (inner, calls) = backend(|n, path| match (path, n) {
            ("/busy", _) => answer(150, 200),
            ("/slow", 0) => answer(1_000, 200),
            _ => answer(20, 200),
        });
        let policy = hedging().max_retries(1).build().unwrap();
        let service = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .concurrency_limit(2)
            .service(inner);

        let start = tokio::time::Instant::now();
        let slow = tokio::spawn(service.clone().oneshot(get("/slow")));
        tokio::task::yield_now().await;
        let busy = service.clone().oneshot(get("/busy")).await.unwrap();
        assert_eq!(busy.status(), 200);
        let response = slow.await.unwrap().unwrap();
        assert_eq!(
            start.elapsed(),
            ms(170),
            "the hedge's answer, 20 ms after it went"
        );
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts(), info.hedges()), (2, 1));
        assert_eq!(calls.to("/slow"), 2);
    }
}

/// What the server says to slow down, in an answer set aside while the other attempt of the race ran.
mod pushback {
    use std::sync::Mutex;

    use stagger::{Backoff, RetryAfterMode, RetryEvent};
    use tower::Layer;

    use super::common::scripted::{self as loopback, Server, both, reply};
    use super::scripted::{Answer, answer, backend, get, ms};
    use super::*;

    /// The `Retry-After` of each retry decided.
    fn hook(events: &Arc<Mutex<Vec<RetryEvent>>>) -> impl Fn(&RetryEvent) + Send + Sync + 'static {
        let events = Arc::clone(events);
        move |event| events.lock().unwrap().push(*event)
    }

    /// A call whose first attempt answers `first` and its hedge (sent at 100 ms) `hedge`, then 200:
    /// the retry as decided, and when the call ended.
    async fn race_then_retry(first: Answer, hedge: Answer) -> (RetryEvent, Duration) {
        let (inner, calls) = backend(move |n, _| match n {
            0 => first.clone(),
            1 => hedge.clone(),
            _ => answer(0, 200),
        });
        let events = Arc::new(Mutex::new(Vec::new()));
        let policy = hedging()
            .backoff(Backoff::fixed(ms(10)))
            .max_retries(3)
            .on_retry(hook(&events))
            .build()
            .unwrap();
        let start = tokio::time::Instant::now();
        let response = RetryLayer::new(policy)
            .layer(inner)
            .oneshot(get("/"))
            .await
            .unwrap();
        let took = start.elapsed();
        assert_eq!(response.status(), 200);
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts(), info.hedges()), (3, 1));
        assert_eq!(calls.to("/"), 3);
        let [retry] = events.lock().unwrap()[..] else {
            panic!("one retry: {:?}", events.lock().unwrap());
        };
        (retry, took)
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_set_aside_in_a_race_floors_the_retry_after_a_plain_503() {
        // The hedge's 429 comes at 120 ms and is set aside; the first attempt's 503 ends the race at
        // 150 ms.
        let (retry, took) =
            race_then_retry(answer(150, 503), answer(20, 429).header("retry-after", "5")).await;
        assert_eq!(retry.retry_after, Some(Duration::from_secs(5)));
        assert!(retry.delay >= Duration::from_secs(5), "{retry:?}");
        assert!(took >= ms(150) + Duration::from_secs(5), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_longest_retry_after_seen_in_a_race_floors_the_retry() {
        // The set-aside 429 asks for 5 s, the 503 that ends the race for 1 s.
        let (retry, took) = race_then_retry(
            answer(150, 503).header("retry-after", "1"),
            answer(20, 429).header("retry-after", "5"),
        )
        .await;
        assert_eq!(retry.retry_after, Some(Duration::from_secs(5)));
        assert!(took >= ms(150) + Duration::from_secs(5), "{took:?}");
        // The first attempt's 429 set aside (at 150 ms), the hedge's later 503 (at 200 ms) asks for
        // less.
        let (retry, took) = race_then_retry(
            answer(150, 429).header("retry-after", "5"),
            answer(100, 503).header("retry-after", "1"),
        )
        .await;
        assert_eq!(retry.retry_after, Some(Duration::from_secs(5)));
        assert!(took >= ms(200) + Duration::from_secs(5), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_answer_set_aside_in_a_race_puts_the_retry_on_the_throttle_schedule() {
        // A 429 without a delay set aside, then a plain 503: the retry waits on the throttle
        // schedule (250-500 ms at first, equal jitter), not the 10 ms backoff.
        let (retry, _) = race_then_retry(answer(150, 503), answer(20, 429)).await;
        assert_eq!(retry.retry_after, None);
        assert!(retry.delay >= ms(250), "{retry:?}");
    }

    /// Over loopback, through both adapters: the hedge's `429` with `Retry-After: 1` is set aside,
    /// the first attempt's plain `503` ends the race, and the retry waits the second asked for.
    #[test]
    fn a_retry_after_set_aside_in_a_race_floors_the_retry_through_both_adapters() {
        both(|adapter| async move {
            let server = Server::start().await;
            let url = server.script(
                "/race",
                [
                    reply(503).after(ms(150)),
                    reply(429).header("retry-after", 1),
                ],
            );
            let policy = hedging()
                .backoff(Backoff::fixed(ms(20)))
                .retry_after(RetryAfterMode::Strict)
                .max_retries(3)
                .build()
                .unwrap();
            let response = adapter.client(policy).get(&url).await.unwrap();
            assert_eq!(response.status(), 200, "{adapter:?}");
            let info = loopback::info(&response);
            assert_eq!((info.attempts(), info.hedges()), (3, 1), "{adapter:?}");
            let arrivals = server.arrivals("/race");
            assert_eq!(arrivals.len(), 3, "{adapter:?}");
            // The race ended at the 503, 150 ms after the first attempt arrived; the retry waited
            // 1 s from there.
            loopback::took(
                adapter,
                "the retry after the race",
                arrivals[2].at - arrivals[0].at,
                Duration::from_secs(1) + ms(150),
                Duration::from_secs(1) + ms(650),
            );
        });
    }

    /// The host cooldown hears a pushback set aside in a race, though the race was won: the next
    /// request to the host waits for the pause it asked.
    #[test]
    fn a_pushback_set_aside_in_a_race_pauses_its_host_through_both_adapters() {
        both(|adapter| async move {
            let server = Server::start().await;
            // The first attempt answers 200 at 300 ms; its hedge, at 100 ms, a 429 asking for 1 s.
            let url = server.script(
                "/race",
                [
                    reply(200).after(ms(300)),
                    reply(429).header("retry-after", 1),
                ],
            );
            let policy = hedging().host_cooldown(true).build().unwrap();
            let client = adapter.client(policy);
            let response = client.get(&url).await.unwrap();
            assert_eq!(response.status(), 200, "{adapter:?}");
            let info = loopback::info(&response);
            assert_eq!((info.attempts(), info.hedges()), (2, 1), "{adapter:?}");

            // The pause runs from the 429 (at about 100 ms) for 1 s, plus a share of as long again.
            let next = client.get(&server.url("/next")).await.unwrap();
            let waited = loopback::info(&next).cooldown();
            assert!(
                waited >= ms(700) && waited < Duration::from_secs(2),
                "{adapter:?}: {waited:?}"
            );
        });
    }
}

/// Adaptive throttling counts a race as what it is to the backend.
mod throttling {
    use stagger::StopReason;
    use tower::Layer;

    use super::scripted::{answer, backend, get, ms};
    use super::*;

    /// What adaptive throttling did to a run of calls.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct Throttled {
        /// Calls it ended, rejecting their first attempt or a retry.
        calls: u32,
        /// Hedges it did not let go, of calls that reached a slow attempt.
        hedges_refused: u32,
        /// Hedges sent.
        hedges: u32,
    }

    /// Sends `calls` GETs one after the other, each to a path of its own, through one layer with
    /// `adaptive_throttle(k)`, hedging after 100 ms or not. Every attempt answers `200` after 150 ms,
    /// but the first attempt of every `failing`-th call (if any; the 10th, the 20th, …), which
    /// answers `503` at once.
    async fn throttled(k: f64, hedge: bool, calls: usize, failing: Option<usize>) -> Throttled {
        let (inner, _) = backend(move |n, path| {
            let call: usize = path[1..].parse().unwrap();
            match failing {
                Some(every) if call % every == every - 1 && n == 0 => answer(0, 503),
                _ => answer(150, 200),
            }
        });
        let mut policy = RetryPolicy::builder()
            .adaptive_throttle(k)
            .budget(None)
            .seed(1);
        if hedge {
            policy = policy.hedge_after(ms(100));
        }
        let service = RetryLayer::new(policy.build().unwrap()).layer(inner);
        let mut seen = Throttled::default();
        for call in 0..calls {
            let info = match service.clone().oneshot(get(&format!("/{call}"))).await {
                Ok(response) => *response.extensions().get::<RetryInfo>().unwrap(),
                Err(error) => error.info(),
            };
            if info.stop_reason() == Some(StopReason::Throttled) {
                seen.calls += 1;
            } else if hedge && info.hedges() == 0 {
                // Nothing else refuses it: no budget, and max_retries is 10.
                seen.hedges_refused += 1;
            }
            seen.hedges += info.hedges();
        }
        seen
    }

    #[tokio::test(start_paused = true)]
    async fn hedging_a_healthy_backend_is_not_throttled() {
        // Every call is hedged, and every race is won by a 200: the loser, dropped, was refused
        // nothing by the backend.
        let none = Throttled::default();
        assert_eq!(throttled(1.0, false, 60, None).await, none);
        let hedged = Throttled {
            hedges: 60,
            ..Throttled::default()
        };
        assert_eq!(throttled(1.0, true, 60, None).await, hedged);
    }

    #[tokio::test(start_paused = true)]
    async fn hedging_is_throttled_no_more_than_retrying_alone() {
        // One call in ten meets a 503 and is retried; every call's slow attempt is hedged. The 503
        // is one refusal in the call's requests, hedged or not.
        let without = throttled(2.0, false, 200, Some(10)).await;
        assert_eq!(without, Throttled::default());
        let hedged = Throttled {
            hedges: 200,
            ..without
        };
        assert_eq!(throttled(2.0, true, 200, Some(10)).await, hedged);
    }
}

/// What the hedging docs promise beyond the race itself: hedges obey the deadline, the attempt
/// timeout, the host cooldown and adaptive throttling, and a call has at most two attempts in
/// flight.
mod promises {
    use stagger::{Backoff, StopReason};
    use tower::Layer;

    use super::scripted::{answer, backend, get, ms};
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn no_hedge_is_sent_at_the_deadline() {
        // The hedge is due when the deadline passes: it is not sent, and the call ends there.
        let (inner, calls) = backend(|_, _| answer(1_000, 200));
        let policy = hedging().max_elapsed(ms(100)).build().unwrap();
        let start = tokio::time::Instant::now();
        let error = RetryLayer::new(policy)
            .layer(inner)
            .oneshot(get("/"))
            .await
            .unwrap_err();
        assert!(error.is_deadline(), "{error}");
        assert_eq!(start.elapsed(), ms(100));
        let info = error.info();
        assert_eq!((info.attempts(), info.hedges()), (1, 0));
        assert_eq!(calls.to("/"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_cuts_both_attempts_of_a_race() {
        let (inner, calls) = backend(|_, _| answer(1_000, 200));
        let policy = hedging().max_elapsed(ms(250)).build().unwrap();
        let start = tokio::time::Instant::now();
        let error = RetryLayer::new(policy)
            .layer(inner)
            .oneshot(get("/"))
            .await
            .unwrap_err();
        assert!(error.is_deadline(), "{error}");
        assert_eq!(start.elapsed(), ms(250));
        let info = error.info();
        assert_eq!((info.attempts(), info.hedges()), (2, 1));
        assert_eq!(calls.to("/"), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_attempt_timeout_runs_from_the_first_attempt_of_a_race() {
        // Both attempts of the first race hang; the timeout, 250 ms from the first attempt, cuts
        // them both (the hedge after 150 ms of its own), and the retry answers at once.
        let (inner, calls) = backend(|n, _| match n {
            0 | 1 => answer(10_000, 200),
            _ => answer(0, 200),
        });
        let policy = hedging()
            .attempt_timeout(ms(250))
            .backoff(Backoff::fixed(ms(10)))
            .max_retries(2)
            .build()
            .unwrap();
        let start = tokio::time::Instant::now();
        let response = RetryLayer::new(policy)
            .layer(inner)
            .oneshot(get("/"))
            .await
            .unwrap();
        assert_eq!(start.elapsed(), ms(260));
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts(), info.hedges()), (3, 1));
        assert_eq!(calls.to("/"), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn no_hedge_is_sent_to_a_host_that_is_pausing() {
        // `/slow` takes 300 ms. At 10 ms, `/limited`, on the same host, is answered 429 with
        // `Retry-After: 5`, longer than max_retry_after: that call ends, and the host is held.
        let (inner, calls) = backend(|_, path| match path {
            "/slow" => answer(300, 200),
            _ => answer(0, 429).header("retry-after", "5"),
        });
        let policy = hedging()
            .host_cooldown(true)
            .max_retry_after(Duration::from_secs(1))
            .build()
            .unwrap();
        let service = RetryLayer::new(policy).layer(inner);
        let slow = tokio::spawn(service.clone().oneshot(get("/slow")));
        tokio::time::sleep(ms(10)).await;
        let limited = service.clone().oneshot(get("/limited")).await.unwrap();
        let info = *limited.extensions().get::<RetryInfo>().unwrap();
        assert_eq!(info.stop_reason(), Some(StopReason::RetryAfterTooLong));

        let response = slow.await.unwrap().unwrap();
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts(), info.hedges()), (1, 0));
        assert_eq!(calls.to("/slow"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn no_hedge_is_sent_when_adaptive_throttling_rejects_it() {
        // `/slow` takes 300 ms. Meanwhile 50 calls to `/down`, on the same host, are all refused:
        // by the time the hedge is due the throttle rejects nearly everything.
        let (inner, calls) = backend(|_, path| match path {
            "/slow" => answer(300, 200),
            _ => answer(0, 503),
        });
        let policy = hedging()
            .adaptive_throttle(2.0)
            .backoff(Backoff::fixed(ms(1)))
            .max_retries(1)
            .budget(None)
            .seed(1)
            .build()
            .unwrap();
        let service = RetryLayer::new(policy).layer(inner);
        let slow = tokio::spawn(service.clone().oneshot(get("/slow")));
        tokio::time::sleep(ms(10)).await;
        for _ in 0..50 {
            let _ = service.clone().oneshot(get("/down")).await;
        }

        let response = slow.await.unwrap().unwrap();
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts(), info.hedges()), (1, 0));
        assert_eq!(calls.to("/slow"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_has_at_most_two_attempts_in_flight() {
        // Both attempts run for a second: the first is hedged once, at 100 ms, and never again.
        let (inner, calls) = backend(|_, _| answer(1_000, 200));
        let policy = hedging().max_retries(5).build().unwrap();
        let start = tokio::time::Instant::now();
        let response = RetryLayer::new(policy)
            .layer(inner.clone())
            .oneshot(get("/"))
            .await
            .unwrap();
        assert_eq!(start.elapsed(), ms(1_000));
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts(), info.hedges()), (2, 1));
        assert_eq!((calls.to("/"), calls.most_in_flight()), (2, 2));
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_left_alone_after_a_failure_set_aside_is_not_hedged_again() {
        // The first attempt fails at 150 ms and is set aside; its hedge, sent at 100 ms, runs for a
        // second, alone, unhedged.
        let (inner, calls) = backend(|n, _| match n {
            0 => answer(150, 503),
            _ => answer(1_000, 200),
        });
        let policy = hedging().max_retries(5).build().unwrap();
        let start = tokio::time::Instant::now();
        let response = RetryLayer::new(policy)
            .layer(inner)
            .oneshot(get("/"))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(start.elapsed(), ms(1_100));
        let info = *response.extensions().get::<RetryInfo>().unwrap();
        assert_eq!((info.attempts(), info.hedges()), (2, 1));
        assert_eq!((calls.to("/"), calls.most_in_flight()), (2, 2));
    }
}
