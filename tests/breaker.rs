//! The breaker through the tower layer, against a host in process whose health a test switches, on
//! tokio's paused clock: found down after failures in a row, failing fast or holding its calls, one
//! probe per delay, the held calls let go paced when a probe is answered, and what a user sees.
#![cfg(feature = "tower")]

use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use stagger::{
    Backoff, Breaker, HostState, Jitter, RetryLayer, RetryPolicy, RetryPolicyBuilder, StopReason,
};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt, service_fn};

mod common;

type Req = Request<String>;
type Res = Response<String>;

const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How the host in process answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Health {
    /// `200`.
    Up = 0,
    /// A refused connection (an `io::Error` of kind `ConnectionRefused`).
    Refusing = 1,
    /// `502`.
    BadGateway = 2,
    /// Never answers.
    Hung = 3,
    /// `503` with `Retry-After: 1`.
    Unavailable = 4,
}

/// A host in process: its health, switched by the test, and when each attempt reached it.
#[derive(Clone, Default)]
struct Host {
    health: Arc<AtomicU8>,
    hits: Arc<Mutex<Vec<Instant>>>,
}

impl Host {
    fn set(&self, health: Health) {
        self.health.store(health as u8, Ordering::SeqCst);
    }

    fn hits(&self) -> usize {
        self.hits.lock().unwrap().len()
    }

    /// When each attempt came, from `start`.
    fn offsets(&self, start: Instant) -> Vec<Duration> {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .map(|t| *t - start)
            .collect()
    }

    fn service(
        &self,
    ) -> impl Service<Req, Response = Res, Error = io::Error, Future: Send> + Clone {
        let host = self.clone();
        service_fn(move |_: Req| {
            host.hits.lock().unwrap().push(Instant::now());
            let health = host.health.load(Ordering::SeqCst);
            async move {
                let status = match health {
                    0 => 200,
                    1 => {
                        return Err(io::Error::new(
                            io::ErrorKind::ConnectionRefused,
                            "connection refused",
                        ));
                    }
                    2 => 502,
                    3 => std::future::pending().await,
                    _ => {
                        let response = Response::builder().status(503).header("retry-after", "1");
                        return Ok(response.body(String::new()).unwrap());
                    }
                };
                Ok(Response::builder()
                    .status(status)
                    .body(String::new())
                    .unwrap())
            }
        })
    }
}

fn get(host: &str) -> Req {
    Request::get(format!("http://{host}/"))
        .body(String::new())
        .unwrap()
}

/// No retries, no budget, no jitter: each call is one attempt, so that the tests count calls.
fn once(breaker: Breaker) -> RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(10)).with_jitter(Jitter::None))
        .max_retries(0)
        .budget(None)
        .breaker(breaker)
}

/// Probes exactly 100 ms, then 200, 400 ms … apart, capped at 1 s: no jitter.
fn exact_probes(breaker: Breaker) -> Breaker {
    breaker.with_probe_backoff(
        Backoff::exponential(ms(100))
            .with_max_delay(Duration::from_secs(1))
            .with_jitter(Jitter::None),
    )
}

async fn call(
    policy: &RetryPolicy,
    host: &Host,
    name: &str,
) -> Result<Res, stagger::Error<io::Error>> {
    RetryLayer::new(policy.clone())
        .layer(host.service())
        .oneshot(get(name))
        .await
}

fn get_path(host: &str, path: &str) -> Req {
    Request::get(format!("http://{host}{path}"))
        .body(String::new())
        .unwrap()
}

async fn call_path(
    policy: &RetryPolicy,
    host: &Host,
    name: &str,
    path: &str,
) -> Result<Res, stagger::Error<io::Error>> {
    RetryLayer::new(policy.clone())
        .layer(host.service())
        .oneshot(get_path(name, path))
        .await
}

#[tokio::test(start_paused = true)]
async fn five_failures_in_a_row_put_a_host_down_and_its_next_call_fails_at_once_unsent() {
    let policy = once(Breaker::fail_fast()).build().unwrap();
    let host = Host::default();
    host.set(Health::Refusing);
    for _ in 0..5 {
        let error = call(&policy, &host, "api.test").await.unwrap_err();
        let refused = error.inner().map(io::Error::kind);
        assert_eq!(refused, Some(io::ErrorKind::ConnectionRefused));
    }
    assert!(matches!(
        policy.host_state("api.test"),
        HostState::Down { .. }
    ));

    let start = Instant::now();
    let error = call(&policy, &host, "api.test").await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO, "failed at once");
    assert_eq!(host.hits(), 5, "not sent");
    let rejected = error.rejected().expect("a Rejected error");
    assert_eq!(rejected.reason(), StopReason::HostDown);
    assert_eq!(
        (rejected.host(), rejected.route()),
        (Some("api.test"), None)
    );
    assert_eq!(rejected.info().attempts(), 0);
    assert!(
        rejected.pause() <= ms(100),
        "next probe in {:?}",
        rejected.pause()
    );
    assert!(
        error
            .to_string()
            .starts_with("not sent: host api.test is down, next probe in"),
        "{error}"
    );
    // A host that answers nothing is down on every path.
    let other_path = call_path(&policy, &host, "api.test", "/items").await;
    assert!(other_path.unwrap_err().rejected().is_some());

    // Another host of the same policy is not held.
    let other = Host::default();
    assert_eq!(
        call(&policy, &other, "other.test").await.unwrap().status(),
        200
    );
}

#[tokio::test(start_paused = true)]
async fn an_answer_starts_the_count_over_and_a_503_that_names_a_delay_is_no_failure() {
    let policy = once(Breaker::fail_fast()).build().unwrap();
    let host = Host::default();
    for health in [Health::Refusing, Health::BadGateway, Health::Hung] {
        host.set(health);
        for _ in 0..4 {
            let _ = tokio::time::timeout(ms(50), call(&policy, &host, "api.test")).await;
        }
        host.set(Health::Up);
        call(&policy, &host, "api.test").await.unwrap();
    }
    assert_eq!(policy.host_state("api.test"), HostState::Up { failures: 0 });

    // A host that says when to come back is speaking, not failing.
    host.set(Health::Unavailable);
    for _ in 0..10 {
        let response = call(&policy, &host, "api.test").await.unwrap();
        assert_eq!(response.status(), 503);
    }
    assert_eq!(policy.host_state("api.test"), HostState::Up { failures: 0 });
}

#[tokio::test(start_paused = true)]
async fn refused_connections_and_timed_out_attempts_are_failures() {
    for health in [Health::Refusing, Health::Hung] {
        let policy = once(Breaker::fail_fast())
            .attempt_timeout(ms(100))
            .build()
            .unwrap();
        let host = Host::default();
        host.set(health);
        for _ in 0..5 {
            assert!(call(&policy, &host, "api.test").await.is_err());
        }
        let error = call(&policy, &host, "api.test").await.unwrap_err();
        assert_eq!(
            error.rejected().map(|r| r.reason()),
            Some(StopReason::HostDown),
            "{health:?}: {error}"
        );
        assert_eq!(host.hits(), 5, "{health:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_down_host_is_probed_once_per_delay_and_the_probe_answered_brings_it_back() {
    let policy = once(exact_probes(Breaker::fail_fast())).build().unwrap();
    let host = Host::default();
    host.set(Health::Refusing);
    for _ in 0..5 {
        let _ = call(&policy, &host, "api.test").await;
    }
    let down = Instant::now();
    // A call every 10 ms for 1.5 s: only the probes reach the host, 100, 200, 400 and 800 ms apart.
    let mut rejected = 0;
    while down.elapsed() < ms(1500) {
        match call(&policy, &host, "api.test").await {
            Err(error) if error.rejected().is_some() => rejected += 1,
            _ => {}
        }
        tokio::time::sleep(ms(10)).await;
    }
    let probes: Vec<_> = host.offsets(down).into_iter().skip(5).collect();
    assert_eq!(
        probes,
        [ms(100), ms(300), ms(700), ms(1500)][..3],
        "{probes:?}"
    );
    assert_eq!(rejected, 150 - 3);
    match policy.host_state("api.test") {
        HostState::Down {
            probes, next_probe, ..
        } => assert_eq!((probes, next_probe), (3, Some(Duration::ZERO))),
        state => panic!("{state:?}"),
    }

    // The host is back: the next probe is answered, and every call after it goes.
    host.set(Health::Up);
    tokio::time::sleep_until(down + ms(1500)).await;
    for _ in 0..10 {
        assert_eq!(
            call(&policy, &host, "api.test").await.unwrap().status(),
            200
        );
    }
    assert!(matches!(
        policy.host_state("api.test"),
        HostState::Up { .. } | HostState::Recovering { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn held_calls_wait_for_the_host_and_go_at_the_rate_they_came_once_a_probe_is_answered() {
    let policy = once(exact_probes(Breaker::hold(Duration::from_secs(5))))
        .build()
        .unwrap();
    let host = Host::default();
    host.set(Health::Refusing);
    for _ in 0..5 {
        let _ = call(&policy, &host, "api.test").await;
    }
    let down = Instant::now();
    // 100 calls over the first 500 ms, held; the host is back at 600 ms.
    let calls: Vec<_> = (0..100)
        .map(|n| {
            let (policy, host) = (policy.clone(), host.clone());
            tokio::spawn(async move {
                tokio::time::sleep(ms(5) * n).await;
                let sent = Instant::now();
                let result = call(&policy, &host, "api.test").await;
                (sent, Instant::now(), result.map(|r| r.status().as_u16()))
            })
        })
        .collect();
    tokio::time::sleep(ms(600)).await;
    match policy.host_state("api.test") {
        HostState::Down { held, probes, .. } => assert_eq!((held, probes), (98, 2)),
        state => panic!("{state:?}"),
    }
    host.set(Health::Up);
    let (mut ends, mut failed_probes) = (Vec::new(), Vec::new());
    for call in calls {
        match call.await.unwrap() {
            (sent, ended, Ok(status)) => {
                assert_eq!(status, 200);
                ends.push((sent - down, ended - down));
            }
            // The calls that went as the first two probes, while the host was still refusing.
            (_, ended, Err(error)) => {
                let kind = error.inner().map(io::Error::kind);
                assert_eq!(kind, Some(io::ErrorKind::ConnectionRefused), "{error}");
                failed_probes.push(ended - down);
            }
        }
    }
    failed_probes.sort();
    assert_eq!(failed_probes, [ms(100), ms(300)]);
    // Probes at 100, 300 and 700 ms: the held calls go from 700 ms, spread at the rate calls came
    // while the host was down (100 in 700 ms: one every 7 ms), none before the host was back.
    let mut releases: Vec<_> = ends.iter().map(|(_, ended)| *ended).collect();
    releases.sort();
    assert!(releases[0] >= ms(700), "{releases:?}");
    let last = *releases.last().unwrap();
    assert!(
        last >= ms(700 + 96 * 7) && last <= ms(700 + 97 * 7),
        "{last:?}"
    );
    let busiest = (0..releases.len())
        .map(|i| {
            releases[i..]
                .iter()
                .take_while(|t| **t < releases[i] + ms(10))
                .count()
        })
        .max()
        .unwrap();
    assert!(busiest <= 3, "{busiest} calls in one 10 ms");
    // While down, only the probes reached the host: 5 failures, 2 failed probes, 1 answered, then
    // the 97 calls still held.
    assert_eq!(host.hits(), 5 + 3 + 97);
}

#[tokio::test(start_paused = true)]
async fn a_held_call_goes_as_the_probe_or_fails_at_its_deadline_or_the_bound_naming_the_host() {
    let policy = once(exact_probes(Breaker::hold(Duration::from_secs(2))))
        .max_elapsed(Duration::from_secs(1))
        .build()
        .unwrap();
    let host = Host::default();
    host.set(Health::BadGateway);
    for _ in 0..5 {
        let _ = call(&policy, &host, "api.test").await;
    }
    // Ten calls held together: one goes as each probe (100, 300, 700 ms), and gets the host's 502;
    // the others fail at their deadline, 1 s, unsent.
    let down = Instant::now();
    let calls: Vec<_> = (0..10)
        .map(|_| {
            let (policy, host) = (policy.clone(), host.clone());
            tokio::spawn(async move {
                let result = call(&policy, &host, "api.test").await;
                (Instant::now() - down, result)
            })
        })
        .collect();
    let (mut probes, mut rejected) = (Vec::new(), 0);
    for call in calls {
        match call.await.unwrap() {
            (at, Ok(response)) => {
                assert_eq!(response.status(), 502);
                probes.push(at);
            }
            (at, Err(error)) => {
                assert_eq!(at, Duration::from_secs(1));
                let rejected_by = error.rejected().expect("Rejected");
                assert_eq!(
                    (rejected_by.reason(), rejected_by.host()),
                    (StopReason::HostDown, Some("api.test"))
                );
                rejected += 1;
            }
        }
    }
    probes.sort();
    assert_eq!((probes, rejected), (vec![ms(100), ms(300), ms(700)], 7));
    assert_eq!(host.hits(), 5 + 3);

    // Past the hold's bound (2 s from when the host went down), a call fails at once, unless it is
    // the probe due.
    tokio::time::sleep_until(down + Duration::from_secs(2) + ms(10)).await;
    let error = call(&policy, &host, "api.test").await;
    assert_eq!(error.unwrap().status(), 502, "the probe due at 1.5 s");
    let start = Instant::now();
    let error = call(&policy, &host, "api.test").await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(error.rejected().unwrap().reason(), StopReason::HostDown);
    assert_eq!(host.hits(), 5 + 4);
}

#[tokio::test(start_paused = true)]
async fn a_retry_to_a_host_that_fails_fast_is_not_sent_and_the_last_answer_comes_back() {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(10)).with_jitter(Jitter::None))
        .budget(None)
        .breaker(Breaker::fail_fast())
        .build()
        .unwrap();
    let host = Host::default();
    host.set(Health::BadGateway);
    let response = call(&policy, &host, "api.test").await.unwrap();
    // The fifth attempt put the host down: its 502 comes back, the retry is not sent.
    assert_eq!(response.status(), 502);
    assert_eq!(host.hits(), 5);
    let info = stagger::RetryInfo::of(response.extensions());
    assert_eq!(
        (info.attempts(), info.stop_reason()),
        (5, Some(StopReason::HostDown))
    );
}

#[tokio::test(start_paused = true)]
async fn a_host_marked_down_is_not_probed_until_marked_up() {
    let policy = once(Breaker::default()).build().unwrap();
    let host = Host::default();
    assert!(policy.mark_down("API.test:80"));
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let error = call(&policy, &host, "api.test").await.unwrap_err();
        assert_eq!(error.to_string(), "not sent: host api.test was marked down");
    }
    assert_eq!(host.hits(), 0);
    let reports = policy.hosts();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0].host, "api.test");
    assert!(matches!(
        reports[0].state,
        HostState::Down {
            next_probe: None,
            ..
        }
    ));
    assert!(policy.mark_up("api.test"));
    assert_eq!(
        call(&policy, &host, "api.test").await.unwrap().status(),
        200
    );
    assert!(policy.hosts().is_empty());
    // Without a breaker there is nothing to mark; the default policy has one.
    let without = RetryPolicy::builder().breaker(None).build().unwrap();
    assert!(!without.mark_down("api.test"));
    assert!(RetryPolicy::default().mark_down("api.test"));
}

#[test]
fn build_refuses_a_breaker_that_cannot_work() {
    use stagger::ConfigError;
    let build = |breaker: Breaker| RetryPolicy::builder().breaker(breaker).build().unwrap_err();
    assert_eq!(
        build(Breaker::fail_fast().with_failures(0)),
        ConfigError::BreakerFailures(0)
    );
    assert_eq!(
        build(Breaker::default().with_failures(10_001)),
        ConfigError::BreakerFailures(10_001)
    );
    assert_eq!(
        build(Breaker::hold(Duration::ZERO)),
        ConfigError::BreakerHold(Duration::ZERO)
    );
    assert_eq!(
        build(Breaker::hold(Duration::from_secs(301))),
        ConfigError::BreakerHold(Duration::from_secs(301))
    );
    assert_eq!(
        build(Breaker::default().with_probe_backoff(Backoff::fixed(Duration::ZERO))),
        ConfigError::BreakerProbe(Duration::ZERO)
    );
    let shrinking = Backoff::exponential(ms(100)).with_base(0.5);
    assert_eq!(
        build(Breaker::default().with_probe_backoff(shrinking)),
        ConfigError::BreakerProbeBackoff(Box::new(ConfigError::InvalidBase(0.5)))
    );
    assert!(
        build(Breaker::hold(Duration::ZERO))
            .to_string()
            .contains("use Breaker::fail_fast()")
    );
}

/// Through `RetryMiddleware`, over a real `reqwest::Client` and a real port: refused, found down,
/// failed at once, and back when something listens again.
#[cfg(feature = "reqwest-middleware")]
mod middleware {
    use std::time::Duration;

    use reqwest_middleware::ClientBuilder;
    use stagger::{Breaker, HostState, Rejected, RetryMiddleware, RetryPolicy, StopReason};
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    #[tokio::test]
    async fn a_host_refusing_connections_is_found_down_fails_calls_at_once_and_comes_back() {
        // A port nothing listens on, for now.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        let url = format!("http://{address}/");
        let policy = RetryPolicy::builder()
            .max_retries(0)
            .budget(None)
            .breaker(Breaker::fail_fast())
            .build()
            .unwrap();
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let client = ClientBuilder::new(http)
            .with(RetryMiddleware::new(policy.clone()))
            .build();
        for _ in 0..5 {
            match client.get(&url).send().await.unwrap_err() {
                reqwest_middleware::Error::Reqwest(error) => assert!(error.is_connect(), "{error}"),
                other => panic!("the refusal itself, not {other}"),
            }
        }
        let host = address.to_string();
        assert!(matches!(policy.host_state(&host), HostState::Down { .. }));

        // At once: the call ends before the host's next probe is due, so it did not wait for it.
        // (The clock is the wall's, with a real socket: a bound of a millisecond would time the
        // machine, not the call.)
        let start = tokio::time::Instant::now();
        let error = client.get(&url).send().await.unwrap_err();
        let elapsed = start.elapsed();
        let reqwest_middleware::Error::Middleware(error) = error else {
            panic!("a Rejected, not {error}");
        };
        let rejected = error.downcast_ref::<Rejected>().expect("a Rejected");
        assert_eq!(
            (rejected.reason(), rejected.host()),
            (StopReason::HostDown, Some(host.as_str()))
        );
        assert!(
            elapsed < rejected.pause(),
            "{rejected} after {elapsed:?}: it waited as long as the probe"
        );

        // Something listens again: once the next probe is due, it is answered, and calls go.
        let server = MockServer::builder()
            .listener(std::net::TcpListener::bind(address).unwrap())
            .start()
            .await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200))
            .mount(&server)
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let response = client.get(&url).send().await.unwrap();
        assert_eq!(response.status(), 200);
        assert!(matches!(
            policy.host_state(&host),
            HostState::Up { .. } | HostState::Recovering { .. }
        ));
        assert_eq!(server.received_requests().await.unwrap().len(), 1);
    }
}

/// Time as evidence: a host's silence, and what a probe waits.
#[path = "breaker/route.rs"]
mod route;
#[path = "breaker/silence.rs"]
mod silence;
