//! Replicas behind one name (`ReplicaSet`), through `RetryLayer` over `stagger::replicas::Replicas`,
//! on tokio's paused clock: three replicas, each a service of its own that answers, refuses, hangs,
//! answers `503` or answers slowly, as the test sets it, and counts what reaches it. What the set
//! promises: a retry or a hedge goes to a replica the call has not tried; a bad replica is found down
//! alone, and the others serve its share; the name is held or refused only when every replica is;
//! a slow replica is weighed down, not found down; replicas come and go while calls run.
#![cfg(feature = "tower")]

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use stagger::replicas::{ReplicaError, Replicas};
use stagger::{Breaker, HostState, ReplicaSet, RetryInfo, RetryLayer, RetryPolicy, StopReason};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::time::Instant;

use tower::{Layer, Service, ServiceExt};

const NAME: &str = "api.internal:8080";
const URI: &str = "http://api.internal:8080/items";

fn addr(n: u8) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, n], 8080))
}

/// What a replica does with what reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Answers,
    Refuses,
    Hangs,
    Unavailable,
    /// Answers after this long.
    Slow(Duration),
}

/// Three replicas, .2 to .4, each answering in 1 ms unless set otherwise.
#[derive(Clone, Default)]
struct Fleet {
    modes: Arc<Mutex<HashMap<SocketAddr, Mode>>>,
    arrivals: Arc<Mutex<Vec<(SocketAddr, Instant)>>>,
}

impl Fleet {
    fn set(&self, n: u8, mode: Mode) {
        self.modes.lock().unwrap().insert(addr(n), mode);
    }

    /// The attempts that reached replica `n` at or after `since`.
    fn reached(&self, n: u8, since: Instant) -> usize {
        let arrivals = self.arrivals.lock().unwrap();
        (arrivals.iter())
            .filter(|(a, at)| *a == addr(n) && *at >= since)
            .count()
    }

    /// A replica's service: what the test set for it.
    fn replica(&self, addr: SocketAddr) -> Server {
        Server {
            fleet: self.clone(),
            addr,
        }
    }
}

/// One replica.
#[derive(Clone)]
struct Server {
    fleet: Fleet,
    addr: SocketAddr,
}

impl Service<Request<()>> for Server {
    type Response = Response<()>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Response<()>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<()>) -> Self::Future {
        let fleet = &self.fleet;
        let mode = *fleet
            .modes
            .lock()
            .unwrap()
            .get(&self.addr)
            .unwrap_or(&Mode::Answers);
        fleet
            .arrivals
            .lock()
            .unwrap()
            .push((self.addr, Instant::now()));
        Box::pin(async move {
            match mode {
                Mode::Answers => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    Ok(Response::new(()))
                }
                Mode::Slow(took) => {
                    tokio::time::sleep(took).await;
                    Ok(Response::new(()))
                }
                Mode::Refuses => Err(io::ErrorKind::ConnectionRefused.into()),
                Mode::Hangs => std::future::pending().await,
                Mode::Unavailable => {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let mut response = Response::new(());
                    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                    Ok(response)
                }
            }
        })
    }
}

fn set() -> ReplicaSet {
    ReplicaSet::new(NAME, [addr(2), addr(3), addr(4)]).unwrap()
}

fn policy(set: &ReplicaSet) -> stagger::RetryPolicyBuilder {
    RetryPolicy::builder()
        .replicas(set.clone())
        .attempt_timeout(Duration::from_millis(500))
        .max_elapsed(Duration::from_secs(5))
        .seed(7)
}

type Error = stagger::Error<ReplicaError<io::Error>>;

/// The retry layer over a sender per replica of `set`.
fn stack(
    fleet: &Fleet,
    set: &ReplicaSet,
    policy: RetryPolicy,
) -> impl Service<Request<()>, Response = Response<()>, Error = Error, Future: Send + 'static>
+ Clone
+ Send
+ 'static {
    let fleet = fleet.clone();
    RetryLayer::new(policy).layer(Replicas::new(set.clone(), move |addr| fleet.replica(addr)))
}

/// How a call ended.
#[derive(Debug, Clone)]
struct Ended {
    at: Instant,
    ok: bool,
    took: Duration,
    info: RetryInfo,
}

/// One call through `service`.
async fn call<S>(service: S) -> Ended
where
    S: Service<Request<()>, Response = Response<()>, Error = Error>,
{
    send(service, Request::get(URI).body(()).unwrap()).await
}

/// `request` through `service`.
async fn send<S>(service: S, request: Request<()>) -> Ended
where
    S: Service<Request<()>, Response = Response<()>, Error = Error>,
{
    let at = Instant::now();
    let (ok, info) = match service.oneshot(request).await {
        Ok(response) => (
            response.status() == StatusCode::OK,
            response
                .extensions()
                .get::<RetryInfo>()
                .cloned()
                .unwrap_or_default(),
        ),
        Err(error) => (false, error.info()),
    };
    Ended {
        at,
        ok,
        took: at.elapsed(),
        info,
    }
}

/// `calls` calls, one every `every`, each in a task of its own; every one's end.
async fn drive<S>(service: &S, calls: usize, every: Duration) -> Vec<Ended>
where
    S: Service<Request<()>, Response = Response<()>, Error = Error, Future: Send + 'static>
        + Clone
        + Send
        + 'static,
{
    let mut tasks = Vec::with_capacity(calls);
    for _ in 0..calls {
        tasks.push(tokio::spawn(call(service.clone())));
        tokio::time::sleep(every).await;
    }
    let mut ended = Vec::with_capacity(calls);
    for task in tasks {
        ended.push(task.await.unwrap());
    }
    ended
}

fn successes(ended: &[Ended]) -> usize {
    ended.iter().filter(|e| e.ok).count()
}

#[tokio::test(start_paused = true)]
async fn each_retry_goes_to_a_replica_the_call_has_not_tried() {
    let (fleet, set) = (Fleet::default(), set());
    for n in 2..=4 {
        fleet.set(n, Mode::Unavailable);
    }
    // No breaker, no budget (50 calls in a row retried twice each are not what it allows at once):
    // every attempt is answered 503, and three attempts reach three replicas.
    let policy = policy(&set)
        .max_retries(2)
        .breaker(None)
        .budget(None)
        .build()
        .unwrap();
    let service = stack(&fleet, &set, policy);
    for _ in 0..50 {
        let ended = call(service.clone()).await;
        assert!(!ended.ok);
        let mut reached = ended.info.replicas().to_vec();
        assert_eq!(reached.len(), 3, "{:?}", ended.info);
        reached.sort();
        reached.dedup();
        assert_eq!(
            reached,
            [addr(2), addr(3), addr(4)],
            "three replicas, each once"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_refusing_replica_is_found_down_alone_and_the_others_serve_its_share() {
    let (fleet, set) = (Fleet::default(), set());
    fleet.set(3, Mode::Refuses);
    let policy = policy(&set).build().unwrap();
    let service = stack(&fleet, &set, policy.clone());
    let ended = drive(&service, 2000, Duration::from_millis(1)).await;
    assert_eq!(successes(&ended), 2000, "every call succeeds");
    assert!(matches!(
        policy.replica_state(NAME, addr(3)),
        HostState::Down { .. }
    ));
    assert_eq!(
        policy.replica_state(NAME, addr(2)),
        HostState::Up { failures: 0 }
    );
    assert_eq!(
        policy.host_state(NAME),
        HostState::Up { failures: 0 },
        "the name is up"
    );
    let reports = policy.hosts();
    assert!(
        reports
            .iter()
            .any(|r| r.replica == Some(addr(3)) && matches!(r.state, HostState::Down { .. })),
        "{reports:?}"
    );
    // Found down within its first five refusals: past the first 100 ms, only probes reach it
    // (one per 100 ms doubling to 1 s), none a retry.
    let since = ended[100].at;
    let probes = fleet.reached(3, since);
    assert!(
        probes <= 12,
        "{probes} attempts reached the refusing replica after detection"
    );
    // No retry went back to the replica its attempt failed on.
    for e in &ended {
        for pair in e.info.replicas().windows(2) {
            assert_ne!(pair[0], pair[1], "{:?}", e.info);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_replica_answering_503_is_avoided_and_a_hanging_one_found_down_by_its_silence() {
    for bad in [Mode::Unavailable, Mode::Hangs] {
        let (fleet, set) = (Fleet::default(), set());
        fleet.set(4, bad);
        let policy = policy(&set).build().unwrap();
        let service = stack(&fleet, &set, policy.clone());
        let ended = drive(&service, 3000, Duration::from_millis(1)).await;
        let after = &ended[1000..];
        assert_eq!(
            successes(after),
            after.len(),
            "{bad:?}: every call after detection succeeds"
        );
        let fair = after.len() / 3;
        let reached = fleet.reached(4, after[0].at);
        assert!(
            reached * 100 <= fair.max(100) * 2,
            "{bad:?}: {reached} attempts of a fair {fair}"
        );
        let mut took: Vec<Duration> = after.iter().map(|e| e.took).collect();
        took.sort();
        let p99 = took[took.len() * 99 / 100];
        println!(
            "{bad:?}: {reached} attempts reached the bad replica after detection (fair share {fair}); p99 {p99:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn two_of_three_bad_and_calls_flow_through_the_third() {
    let (fleet, set) = (Fleet::default(), set());
    fleet.set(2, Mode::Refuses);
    fleet.set(3, Mode::Unavailable);
    let policy = policy(&set).build().unwrap();
    let service = stack(&fleet, &set, policy);
    let ended = drive(&service, 2000, Duration::from_millis(1)).await;
    assert_eq!(successes(&ended), 2000);
}

#[tokio::test(start_paused = true)]
async fn the_name_is_refused_only_when_every_replica_is_down() {
    let (fleet, set) = (Fleet::default(), set());
    for n in 2..=4 {
        fleet.set(n, Mode::Refuses);
    }
    let policy = policy(&set).breaker(Breaker::fail_fast()).build().unwrap();
    let service = stack(&fleet, &set, policy.clone());
    let ended = drive(&service, 200, Duration::from_millis(1)).await;
    assert_eq!(successes(&ended), 0);
    assert!(
        matches!(policy.host_state(NAME), HostState::Down { .. }),
        "{:?}",
        policy.host_state(NAME)
    );
    let last = ended.last().unwrap();
    assert_eq!(last.info.stop_reason(), Some(StopReason::HostDown));
    // One comes back: the name is up, through it.
    fleet.set(3, Mode::Answers);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ended = drive(&service, 200, Duration::from_millis(1)).await;
    assert!(successes(&ended[50..]) == 150, "{}", successes(&ended));
}

#[tokio::test(start_paused = true)]
async fn a_slow_replica_is_weighed_down_not_found_down() {
    let (fleet, set) = (Fleet::default(), set());
    fleet.set(2, Mode::Slow(Duration::from_millis(10)));
    let policy = policy(&set).build().unwrap();
    let service = stack(&fleet, &set, policy.clone());
    let ended = drive(&service, 4000, Duration::from_millis(1)).await;
    assert_eq!(successes(&ended), 4000);
    let since = ended[1000].at;
    let slow = fleet.reached(2, since);
    let fair = 3000 / 3;
    println!("the slow replica got {slow} attempts of a fair {fair}");
    assert!(slow > 0, "weighed down, not shut out");
    assert!(slow * 10 < fair, "{slow} of a fair {fair}");
    assert!(matches!(
        policy.replica_state(NAME, addr(2)),
        HostState::Up { .. }
    ));
}

#[tokio::test(start_paused = true)]
async fn a_hedge_goes_to_another_replica() {
    let (fleet, set) = (Fleet::default(), set());
    for n in 2..=4 {
        fleet.set(n, Mode::Slow(Duration::from_millis(200)));
    }
    let policy = policy(&set)
        .hedge_after(Duration::from_millis(50))
        .build()
        .unwrap();
    let service = stack(&fleet, &set, policy);
    let ended = call(service).await;
    assert!(ended.ok);
    assert_eq!(ended.info.hedges(), 1);
    let reached = ended.info.replicas();
    assert_eq!(reached.len(), 2, "{:?}", ended.info);
    assert_ne!(reached[0], reached[1]);
}

#[tokio::test(start_paused = true)]
async fn a_replica_restarting_for_1_s_costs_no_call() {
    let (fleet, set) = (Fleet::default(), set());
    let policy = policy(&set).build().unwrap();
    let service = stack(&fleet, &set, policy);
    let restart = {
        let fleet = fleet.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            fleet.set(3, Mode::Refuses);
            tokio::time::sleep(Duration::from_secs(1)).await;
            fleet.set(3, Mode::Answers);
        })
    };
    let ended = drive(&service, 4000, Duration::from_millis(1)).await;
    restart.await.unwrap();
    assert_eq!(successes(&ended), 4000);
    // Back in the rotation after it.
    assert!(fleet.reached(3, ended[3500].at) > 50);
}

#[tokio::test(start_paused = true)]
async fn replicas_join_and_leave_while_calls_run_and_the_others_keep_their_state() {
    let (fleet, set) = (Fleet::default(), set());
    fleet.set(4, Mode::Refuses);
    let policy = policy(&set).build().unwrap();
    let service = stack(&fleet, &set, policy.clone());
    let ended = drive(&service, 500, Duration::from_millis(1)).await;
    assert_eq!(successes(&ended), 500);
    assert!(matches!(
        policy.replica_state(NAME, addr(4)),
        HostState::Down { .. }
    ));
    // .2 leaves, .5 joins: .4 is still known down, and calls keep flowing.
    let changes = {
        let set = set.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            set.remove(addr(2));
            set.insert(addr(5));
        })
    };
    let since = Instant::now();
    let ended = drive(&service, 500, Duration::from_millis(1)).await;
    changes.await.unwrap();
    assert_eq!(successes(&ended), 500);
    assert!(matches!(
        policy.replica_state(NAME, addr(4)),
        HostState::Down { .. }
    ));
    assert!(fleet.reached(5, since) > 50);
    assert_eq!(fleet.reached(2, since + Duration::from_millis(150)), 0);
}

#[tokio::test(start_paused = true)]
async fn a_set_with_no_replica_fails_as_a_refused_connection() {
    let fleet = Fleet::default();
    let set = ReplicaSet::new(NAME, []).unwrap();
    let policy = policy(&set).max_retries(1).build().unwrap();
    let ended = call(stack(&fleet, &set, policy)).await;
    assert!(!ended.ok);
    assert_eq!(ended.info.attempts(), 2, "retried as a connect error");
}

#[test]
fn a_client_without_a_replica_set_reaches_no_replica() {
    let info = RetryInfo::default();
    assert!(info.replicas().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_post_never_probes_a_replica_found_down_hanging_and_so_no_probe_costs_a_call() {
    for bad in [Mode::Hangs, Mode::Refuses] {
        let (fleet, set) = (Fleet::default(), set());
        fleet.set(4, bad);
        let policy = policy(&set).build().unwrap();
        let service = stack(&fleet, &set, policy.clone());
        let mut tasks = Vec::new();
        // Found down when its fifth attempt in a row has failed: POSTs, which p2c sends it one at
        // a time once one hangs (its attempt in flight weighs it down), take 2.5 s to find it.
        let mut down_at = None;
        for _ in 0..5000 {
            let down = matches!(policy.replica_state(NAME, addr(4)), HostState::Down { .. });
            if down && down_at.is_none() {
                down_at = Some(Instant::now());
            }
            let post = Request::post(URI).body(()).unwrap();
            tasks.push(tokio::spawn(send(service.clone(), post)));
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut ended = Vec::new();
        for task in tasks {
            ended.push(task.await.unwrap());
        }
        let down_at = down_at.expect("found down");
        let after: Vec<&Ended> = ended.iter().filter(|e| e.at >= down_at).collect();
        let failed = after.iter().filter(|e| !e.ok).count();
        assert!(
            after.len() > 2000,
            "{bad:?}: found down late, at {down_at:?}"
        );
        assert_eq!(failed, 0, "{bad:?}: no call fails once it is found down");
        let reached = fleet.reached(4, down_at);
        match bad {
            // Its probe would hang, and a POST that timed out is not sent again: none probes it.
            Mode::Hangs => assert_eq!(reached, 0, "no POST probes a hanging replica"),
            // A refused connect is retried for a POST too: POSTs probe it, one per delay.
            _ => assert!((1..=12).contains(&reached), "{reached} probes"),
        }
    }
}

#[cfg(feature = "tokio")] // discovery runs on tokio
#[tokio::test(start_paused = true)]
async fn a_resolver_asked_on_a_period_keeps_the_set_current_and_a_bad_answer_leaves_it() {
    let set = ReplicaSet::new(NAME, [addr(2)]).unwrap();
    // A resolver of one's own: each answer in turn, then the last again.
    let answers = Arc::new(Mutex::new(vec![
        Ok(vec![addr(2), addr(3)]),
        Ok(vec![]),
        Err(io::Error::other("resolver down")),
        Ok(vec![addr(3), addr(4)]),
    ]));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let discovery = {
        let (answers, asked) = (Arc::clone(&answers), Arc::clone(&asked));
        set.refresh_with(Duration::from_secs(10), move |name| {
            asked.lock().unwrap().push(name);
            let mut answers = answers.lock().unwrap();
            let answer = if answers.len() > 1 {
                answers.remove(0)
            } else {
                answers[0]
                    .as_ref()
                    .map(Clone::clone)
                    .map_err(|e| io::Error::other(e.to_string()))
            };
            async move { answer }
        })
    };
    let settle = || tokio::time::sleep(Duration::from_millis(1));
    settle().await;
    assert_eq!(set.addrs(), [addr(2), addr(3)], "asked at once");
    tokio::time::sleep(Duration::from_secs(10)).await;
    settle().await;
    assert_eq!(
        set.addrs(),
        [addr(2), addr(3)],
        "an empty answer leaves the set"
    );
    tokio::time::sleep(Duration::from_secs(10)).await;
    settle().await;
    assert_eq!(set.addrs(), [addr(2), addr(3)], "an error leaves the set");
    tokio::time::sleep(Duration::from_secs(10)).await;
    settle().await;
    assert_eq!(set.addrs(), [addr(3), addr(4)]);
    assert_eq!(
        asked.lock().unwrap()[0],
        NAME,
        "the resolver is given the name and port"
    );
    drop(discovery);
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(asked.lock().unwrap().len(), 4, "stopped with its handle");
}

#[cfg(feature = "tokio")] // discovery runs on tokio
#[tokio::test]
async fn the_system_resolver_fills_a_set_from_its_name() {
    let set = ReplicaSet::new("localhost:8080", []).unwrap();
    let _discovery = set.refresh_every(Duration::from_secs(60));
    // The first answer comes from getaddrinfo on a blocking thread: waited for, within 5 s.
    let start = std::time::Instant::now();
    while set.is_empty() && start.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let loopback = SocketAddr::from(([127, 0, 0, 1], 8080));
    let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 8080));
    let addrs = set.addrs();
    assert!(
        addrs.contains(&loopback) || addrs.contains(&v6),
        "{addrs:?}"
    );
}

#[cfg(feature = "tokio")] // discovery runs on tokio
#[tokio::test(start_paused = true)]
async fn a_stream_of_changes_adds_and_removes_replicas_while_calls_run() {
    let (fleet, set) = (Fleet::default(), ReplicaSet::new(NAME, [addr(2)]).unwrap());
    let policy = policy(&set).build().unwrap();
    let service = stack(&fleet, &set, policy);
    let (sender, receiver) = futures::channel::mpsc::unbounded();
    let discovery = set.follow(receiver);
    sender
        .unbounded_send(stagger::ReplicaChange::Insert(addr(3)))
        .unwrap();
    sender
        .unbounded_send(stagger::ReplicaChange::Insert(addr(4)))
        .unwrap();
    let since = Instant::now();
    let ended = drive(&service, 300, Duration::from_millis(1)).await;
    assert_eq!(successes(&ended), 300);
    assert!(fleet.reached(3, since) > 30 && fleet.reached(4, since) > 30);
    sender
        .unbounded_send(stagger::ReplicaChange::Remove(addr(2)))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    let since = Instant::now();
    let ended = drive(&service, 300, Duration::from_millis(1)).await;
    assert_eq!(successes(&ended), 300);
    assert_eq!(fleet.reached(2, since), 0);
    drop(sender);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert!(
        discovery.is_finished(),
        "the stream ended, and so did its task"
    );
}

#[tokio::test(start_paused = true)]
async fn a_name_marked_down_by_hand_sends_to_none_of_its_replicas_until_marked_up() {
    let (fleet, set) = (Fleet::default(), set());
    let policy = policy(&set).build().unwrap();
    let service = stack(&fleet, &set, policy.clone());
    assert!(policy.mark_down(NAME));
    let since = Instant::now();
    let ended = call(service.clone()).await;
    assert!(!ended.ok);
    assert_eq!(ended.info.stop_reason(), Some(StopReason::HostDown));
    assert_eq!((2..=4).map(|n| fleet.reached(n, since)).sum::<usize>(), 0);
    assert!(policy.mark_up(NAME));
    assert!(call(service).await.ok);
}

#[tokio::test(start_paused = true)]
async fn a_call_whose_first_attempt_probed_a_down_replica_retries_at_once_on_another() {
    let (fleet, set) = (Fleet::default(), set());
    fleet.set(3, Mode::Refuses);
    let policy = policy(&set).build().unwrap();
    let service = stack(&fleet, &set, policy.clone());
    let ended = drive(&service, 4000, Duration::from_millis(1)).await;
    let after = &ended[1000..];
    assert_eq!(successes(after), after.len());
    // Some calls went as the probes (one per 0.5 to 1 s), were refused, and retried at once: no
    // call after detection waits a backoff's delay (full jitter from 100 ms).
    let probes = fleet.reached(3, after[0].at);
    assert!(probes >= 2, "{probes} probes");
    let slowest = after.iter().map(|e| e.took).max().unwrap();
    assert!(slowest <= Duration::from_millis(5), "{slowest:?}");
}
