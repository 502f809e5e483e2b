//! Replicas behind one name (`stagger::ReplicaSet`) against real servers: three hyper servers on
//! 127.0.0.2, .3 and .4, one port, inside a network namespace of the suite's own (a thread of the
//! test joins it, `setns`, and runs the servers and the clients on a current-thread runtime), where
//! iptables refuses (`REJECT --reject-with tcp-reset`) or drops the SYNs to one of them and counts
//! them (and cuts the connections the clients hold to it). Through three adapters: `RetryMiddleware` with `ReplicaMiddleware`, `RetryLayer` over
//! `Replicas::reqwest`, and `RetryLayer` over hyper-util's client pinned by `OneAddress`; each with
//! the default policy but for `attempt_timeout(500 ms)` and `max_elapsed(5 s)`.
//!
//! Each run: 0.5 s of calls that make the clients and their connections, 1 s with every replica
//! healthy (250/s, each answered in about 1 ms: the
//! all-healthy p99), then .3 turns bad (refusing, dropping SYNs, answering `503`, or slow: 10 ms,
//! ten times the others), 1 s to find it out, and 4 s measured: the share of calls that succeed
//! (goal ≥ 99.9 %), their p99 (goal: within 2× of all-healthy, and at least 5 ms: a p99 of 1 ms on a
//! shared machine is noise), the attempts that reached .3 against its fair share of a third (goal ≤
//! 1 % of it, probes aside: one per 0.5 to 1 s, at most 8 in 4 s), and the retries that went back to
//! the replica their call's previous attempt failed on (goal: none).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use reqwest_middleware::ClientBuilder;
use stagger::replicas::{OneAddress, ReplicaMiddleware, Replicas};
use stagger::{HostState, ReplicaSet, RetryInfo, RetryLayer, RetryMiddleware, RetryPolicy};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

use super::client::causes;
use super::netns::Netns;
use super::{ms, quantile};

const NAME: &str = "api.internal";
const RATE_EVERY: Duration = ms(4);
const WARM: Duration = ms(500);
const HEALTHY: Duration = Duration::from_secs(1);
const DETECT: Duration = Duration::from_secs(1);
/// The longest the calls go on, past `DETECT`, for a replica that refuses or drops SYNs to be found
/// down: what is measured is the calls after detection.
const DETECT_BOUND: Duration = Duration::from_secs(5);
const MEASURED: Duration = Duration::from_secs(4);
/// A healthy replica's time to answer, and a slow one's.
const ANSWER: Duration = ms(1);
const SLOW: Duration = ms(10);

/// What the bad replica does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    Refuses,
    DropsSyns,
    Unavailable,
    Slow,
}

/// What a run does to the replicas once they have served a healthy second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// .3 turns bad this way for the rest of the run.
    One(Bad),
    /// .2 refuses and .3 answers `503`.
    TwoBad,
    /// .3 refuses for 1 s (its connections reset), then serves again: a restart.
    Restart,
}

/// How a replica answers what reaches it: 0 healthy, 1 `503` (gRPC `UNAVAILABLE`), 2 slow.
#[derive(Clone, Default)]
struct Servers {
    port: u16,
    modes: Arc<Mutex<HashMap<u8, u8>>>,
    counts: Arc<Mutex<HashMap<u8, Arc<AtomicUsize>>>>,
}

impl Servers {
    /// The three servers, on one free port: HTTP/1.1, or gRPC (`grpc`).
    async fn start(grpc: bool) -> Self {
        let first = TcpListener::bind((Ipv4Addr::new(127, 0, 0, 2), 0))
            .await
            .unwrap();
        let port = first.local_addr().unwrap().port();
        let servers = Self {
            port,
            ..Self::default()
        };
        let serve = |n, listener| {
            #[cfg(feature = "tonic")]
            if grpc {
                return servers.serve_grpc(n, listener);
            }
            assert!(!grpc, "gRPC needs the feature tonic");
            servers.serve(n, listener)
        };
        serve(2, first);
        for n in [3, 4] {
            let listener = TcpListener::bind((Ipv4Addr::new(127, 0, 0, n), port))
                .await
                .unwrap();
            serve(n, listener);
        }
        servers
    }

    /// Serves `test.Replica/Say` on `listener` as replica `n`.
    #[cfg(feature = "tonic")]
    fn serve_grpc(&self, n: u8, listener: TcpListener) {
        let count = Arc::new(AtomicUsize::new(0));
        self.counts.lock().unwrap().insert(n, Arc::clone(&count));
        let replica = grpc::Replica {
            n,
            modes: Arc::clone(&self.modes),
            count,
        };
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(replica)
                .serve_with_incoming(incoming),
        );
    }

    fn serve(&self, n: u8, listener: TcpListener) {
        let count = Arc::new(AtomicUsize::new(0));
        self.counts.lock().unwrap().insert(n, Arc::clone(&count));
        let modes = Arc::clone(&self.modes);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (modes, count) = (Arc::clone(&modes), Arc::clone(&count));
                tokio::spawn(async move {
                    let service = service_fn(move |_: Request<hyper::body::Incoming>| {
                        count.fetch_add(1, Ordering::Relaxed);
                        let mode = modes.lock().unwrap().get(&n).copied().unwrap_or(0);
                        async move {
                            let mut response = Response::new(Full::new(Bytes::from("ok")));
                            match mode {
                                1 => *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE,
                                2 => tokio::time::sleep(SLOW).await,
                                _ => tokio::time::sleep(ANSWER).await,
                            }
                            Ok::<_, Infallible>(response)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    }

    fn addr(&self, n: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, n], self.port))
    }

    fn set_mode(&self, n: u8, mode: u8) {
        self.modes.lock().unwrap().insert(n, mode);
    }

    fn requests(&self, n: u8) -> usize {
        self.counts.lock().unwrap()[&n].load(Ordering::Relaxed)
    }
}

/// The adapters a call goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    Middleware,
    TowerReqwest,
    HyperUtil,
    #[cfg(feature = "tonic")]
    Tonic,
}

const ADAPTERS: &[Adapter] = &[
    Adapter::Middleware,
    Adapter::TowerReqwest,
    Adapter::HyperUtil,
    #[cfg(feature = "tonic")]
    Adapter::Tonic,
];

/// How a call ended: whether it got its `200` (and if not, why), how long it took, the replicas it
/// reached.
struct Ended {
    ok: bool,
    failure: Option<String>,
    took: Duration,
    replicas: Vec<SocketAddr>,
}

type Caller = Rc<dyn Fn() -> Pin<Box<dyn Future<Output = Ended>>>>;

fn policy(set: &ReplicaSet, idempotent: bool) -> RetryPolicy {
    let builder = RetryPolicy::builder();
    // A gRPC call is a POST: only a method marked so is retried after an ambiguous failure (a
    // connection reset under it, a timeout).
    #[cfg(feature = "tonic")]
    let builder = match idempotent {
        true => builder.grpc_method(
            "/test.Replica/Say",
            stagger::classify::GrpcMethod::idempotent(),
        ),
        false => builder,
    };
    #[cfg(not(feature = "tonic"))]
    let _ = idempotent;
    builder
        .replicas(set.clone())
        .attempt_timeout(ms(500))
        .max_elapsed(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// A caller through `adapter` to the servers' set, and the policy it runs under.
fn caller(adapter: Adapter, servers: &Servers, idempotent: bool) -> (Caller, RetryPolicy) {
    let name = format!("{NAME}:{}", servers.port);
    let set = ReplicaSet::new(&name, (2..=4).map(|n| servers.addr(n))).unwrap();
    let policy = policy(&set, idempotent);
    let uri = format!("http://{name}/items");
    let caller: Caller = match adapter {
        Adapter::Middleware => {
            let client = ClientBuilder::new(reqwest::Client::new())
                .with(RetryMiddleware::new(policy.clone()))
                .with(ReplicaMiddleware::new(set, reqwest::Client::builder).unwrap())
                .build();
            Rc::new(move || {
                let (client, uri) = (client.clone(), uri.clone());
                Box::pin(async move {
                    let start = Instant::now();
                    let report = stagger::RetryReport::new();
                    let result = client.get(&uri).with_extension(report.clone()).send().await;
                    let failure = match result {
                        Ok(r) if r.status() == StatusCode::OK => None,
                        Ok(r) => Some(format!("{}", r.status())),
                        Err(e) => Some(causes(&e)),
                    };
                    let replicas = report
                        .get()
                        .map(|i| i.replicas().to_vec())
                        .unwrap_or_default();
                    Ended {
                        ok: failure.is_none(),
                        failure,
                        took: start.elapsed(),
                        replicas,
                    }
                })
            })
        }
        Adapter::TowerReqwest => {
            let service = RetryLayer::new(policy.clone())
                .layer(Replicas::reqwest(set, reqwest::Client::builder).unwrap());
            Rc::new(move || {
                let (service, uri) = (service.clone(), uri.clone());
                Box::pin(async move {
                    let start = Instant::now();
                    let request = Request::get(&uri).body(Bytes::new()).unwrap();
                    let (failure, info) = match service.oneshot(request).await {
                        Ok(r) => (
                            (r.status() != StatusCode::OK).then(|| r.status().to_string()),
                            r.extensions().get::<RetryInfo>().cloned(),
                        ),
                        Err(e) => (Some(causes(&e)), Some(e.info())),
                    };
                    let replicas = info.map(|i| i.replicas().to_vec()).unwrap_or_default();
                    Ended {
                        ok: failure.is_none(),
                        failure,
                        took: start.elapsed(),
                        replicas,
                    }
                })
            })
        }
        Adapter::HyperUtil => {
            let sender = Replicas::new(set, |addr| {
                let connector = HttpConnector::new_with_resolver(OneAddress::new(addr));
                Client::builder(TokioExecutor::new()).build::<_, Full<Bytes>>(connector)
            });
            let service = RetryLayer::new(policy.clone()).layer(sender);
            Rc::new(move || {
                let (service, uri) = (service.clone(), uri.clone());
                Box::pin(async move {
                    let start = Instant::now();
                    let request = Request::get(&uri).body(Full::new(Bytes::new())).unwrap();
                    let (failure, info) = match service.oneshot(request).await {
                        Ok(r) => (
                            (r.status() != StatusCode::OK).then(|| r.status().to_string()),
                            r.extensions().get::<RetryInfo>().cloned(),
                        ),
                        Err(e) => (Some(causes(&e)), Some(e.info())),
                    };
                    let replicas = info.map(|i| i.replicas().to_vec()).unwrap_or_default();
                    Ended {
                        ok: failure.is_none(),
                        failure,
                        took: start.elapsed(),
                        replicas,
                    }
                })
            })
        }
        #[cfg(feature = "tonic")]
        Adapter::Tonic => {
            let endpoint =
                tonic::transport::Endpoint::from_shared(format!("http://{name}")).unwrap();
            let sender = Replicas::new(set, move |addr| {
                stagger::replicas::grpc_channel(&endpoint, addr)
            });
            let service = RetryLayer::grpc(policy.clone()).layer(sender);
            // The client names the host (`with_origin`): a client made with `new` sends a path
            // alone, which names no host, and so no replica set (docs/grpc.md, "Hosts").
            let origin: http::Uri = uri.parse::<http::Uri>().unwrap();
            let origin: http::Uri = format!("http://{}", origin.authority().unwrap())
                .parse()
                .unwrap();
            Rc::new(move || {
                let (service, origin) = (service.clone(), origin.clone());
                Box::pin(async move {
                    let start = Instant::now();
                    let (failure, replicas) = grpc::say(service, origin).await;
                    Ended {
                        ok: failure.is_none(),
                        failure,
                        took: start.elapsed(),
                        replicas,
                    }
                })
            })
        }
    };
    (caller, policy)
}

/// The gRPC replica: `test.Replica/Say`, unary, its messages written by hand (no protoc).
#[cfg(feature = "tonic")]
mod grpc {
    use std::collections::HashMap;
    use std::convert::Infallible;
    use std::future::Future;
    use std::net::SocketAddr;
    use std::pin::Pin;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use http::uri::PathAndQuery;
    use stagger::RetryInfo;
    use tonic::Status;
    use tonic::body::Body;
    use tonic_prost::ProstCodec;
    use tower::Service;

    use super::{ANSWER, SLOW};

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Ping {
        #[prost(string, tag = "1")]
        text: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Pong {
        #[prost(string, tag = "1")]
        text: String,
    }

    #[derive(Clone)]
    pub struct Replica {
        pub n: u8,
        pub modes: Arc<Mutex<HashMap<u8, u8>>>,
        pub count: Arc<AtomicUsize>,
    }

    impl tonic::server::NamedService for Replica {
        const NAME: &'static str = "test.Replica";
    }

    impl Service<http::Request<Body>> for Replica {
        type Response = http::Response<Body>;
        type Error = Infallible;
        type Future =
            Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<Body>) -> Self::Future {
            self.count.fetch_add(1, Ordering::Relaxed);
            let mode = self
                .modes
                .lock()
                .unwrap()
                .get(&self.n)
                .copied()
                .unwrap_or(0);
            Box::pin(async move {
                let mut grpc = tonic::server::Grpc::new(ProstCodec::<Pong, Ping>::default());
                let say = tower::service_fn(move |_: tonic::Request<Ping>| async move {
                    match mode {
                        1 => return Err(Status::unavailable("a backend is gone")),
                        2 => tokio::time::sleep(SLOW).await,
                        _ => tokio::time::sleep(ANSWER).await,
                    }
                    Ok(tonic::Response::new(Pong { text: "ok".into() }))
                });
                Ok(grpc.unary(say, request).await)
            })
        }
    }

    /// One call of `Say` through `service`: whether it got its answer, and the replicas it reached.
    pub async fn say<S>(service: S, origin: http::Uri) -> (Option<String>, Vec<SocketAddr>)
    where
        S: tonic::client::GrpcService<Body>,
        S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
        S::ResponseBody: http_body::Body<Data = bytes::Bytes> + Send + 'static,
        <S::ResponseBody as http_body::Body>::Error:
            Into<Box<dyn std::error::Error + Send + Sync>> + Send,
    {
        let mut client = tonic::client::Grpc::with_origin(service, origin);
        if let Err(e) = client.ready().await {
            return (Some(format!("not ready: {}", e.into())), Vec::new());
        }
        let codec = ProstCodec::<Ping, Pong>::default();
        let request = tonic::Request::new(Ping {
            text: "hello".into(),
        });
        let path = PathAndQuery::from_static("/test.Replica/Say");
        match client.unary(request, path, codec).await {
            Ok(response) => {
                let info = response.extensions().get::<RetryInfo>().cloned();
                (
                    None,
                    info.map(|i| i.replicas().to_vec()).unwrap_or_default(),
                )
            }
            Err(status) => (Some(format!("{status:?}")), Vec::new()),
        }
    }
}

/// Calls through `caller` for `DETECT`, then on until `found` (at most `DETECT_BOUND` from the
/// start): how long they went on, if it was found.
async fn detect(caller: &Caller, found: impl Fn() -> bool) -> Option<Duration> {
    let start = Instant::now();
    drive(caller, DETECT).await;
    while !found() && start.elapsed() < DETECT_BOUND {
        drive(caller, ms(100)).await;
    }
    found().then(|| start.elapsed())
}

/// Calls through `caller`, one every `RATE_EVERY` for `span`, each in a task of its own.
async fn drive(caller: &Caller, span: Duration) -> Vec<Ended> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    let mut every = tokio::time::interval(RATE_EVERY);
    while start.elapsed() < span {
        every.tick().await;
        tasks.push(tokio::task::spawn_local(caller()));
    }
    let mut ended = Vec::with_capacity(tasks.len());
    for task in tasks {
        ended.push(task.await.unwrap());
    }
    ended
}

/// One run's figures.
pub struct Figures {
    pub healthy_p99: Duration,
    pub calls: usize,
    pub ok: usize,
    pub p99: Duration,
    pub reached_bad: u64,
    pub fair: usize,
    pub back_to_failed: usize,
    pub bad_state: HostState,
    /// Why the first call that failed failed.
    pub first_failure: Option<String>,
    /// How long the calls went on before the bad replica was found down, where it is to be.
    pub detected: Option<Duration>,
}

impl Figures {
    fn line(&self, scenario: Scenario, adapter: Adapter) -> String {
        format!(
            "{scenario:?} / {adapter:?}: {} of {} ok ({:.2} %), p99 {:?} (all healthy {:?}), {} attempts reached the bad replica of a fair {}, {} retries back to the replica that failed, its state {:?}",
            self.ok,
            self.calls,
            100.0 * self.ok as f64 / self.calls.max(1) as f64,
            self.p99,
            self.healthy_p99,
            self.reached_bad,
            self.fair,
            self.back_to_failed,
            self.bad_state.as_str(),
        ) + &self
            .detected
            .map(|d| format!(", found down after {d:?} of calls"))
            .unwrap_or_default()
            + &self
                .first_failure
                .as_ref()
                .map(|f| format!("; the first failure: {f}"))
                .unwrap_or_default()
    }
}

/// Runs `body` on a thread inside `netns`, on a current-thread runtime of its own.
fn in_namespace<T: Send + 'static>(
    netns: &Netns,
    body: impl FnOnce() -> Pin<Box<dyn Future<Output = T>>> + Send + 'static,
) -> T {
    let path = format!("/run/netns/{}", netns.name());
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).expect("the namespace's file");
        // SAFETY: setns on a file descriptor of a network namespace moves this thread alone into it.
        let joined = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(joined, 0, "setns: {}", std::io::Error::last_os_error());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&runtime, body())
    })
    .join()
    .expect("the namespace's thread")
}

/// iptables rules that make replica `ip` refuse (`REJECT` with a reset) or drop what reaches it on
/// `port`: its SYNs, counted (the attempts that reach it), and the packets of the connections the
/// clients already have to it, which a dead replica does not answer either.
fn rules(netns: &Netns, verb: &str, ip: &str, port: u16, action: &[&str]) {
    let port = port.to_string();
    // `-I` puts each rule at the top: the SYNs' rule goes last, to be first in the chain.
    for syn in [false, true] {
        let mut args = vec![verb, "INPUT", "-p", "tcp", "-d", ip, "--dport", &port];
        if syn {
            args.push("--syn");
        }
        args.push("-j");
        args.extend_from_slice(action);
        netns.iptables(&args);
    }
}

const REFUSE: &[&str] = &["REJECT", "--reject-with", "tcp-reset"];
const DROP: &[&str] = &["DROP"];

/// One run: `adapter`'s calls through a healthy second, then what `scenario` does.
async fn run(netns: Arc<Netns>, scenario: Scenario, adapter: Adapter) -> Figures {
    #[cfg(feature = "tonic")]
    let grpc = adapter == Adapter::Tonic;
    #[cfg(not(feature = "tonic"))]
    let grpc = false;
    let servers = Servers::start(grpc).await;
    // A restart resets the calls in flight to the replica: a gRPC method that is not marked
    // idempotent is not sent again after one (A6), and that call fails, as it must.
    let (caller, policy) = caller(adapter, &servers, scenario == Scenario::Restart);
    // The first calls make each replica's client and connections: not what a healthy set costs.
    drive(&caller, WARM).await;
    let healthy = drive(&caller, HEALTHY).await;
    let healthy_p99 = quantile(&healthy.iter().map(|e| e.took).collect::<Vec<_>>(), 0.99);
    let port = servers.port;
    let syns = || netns.packets("INPUT").first().map_or(0, |(_, n)| *n);
    let mut detected = None;
    let (syns_before, requests_before, measured) = match scenario {
        Scenario::One(bad) => {
            match bad {
                Bad::Refuses => rules(&netns, "-I", "127.0.0.3", port, REFUSE),
                Bad::DropsSyns => rules(&netns, "-I", "127.0.0.3", port, DROP),
                Bad::Unavailable => servers.set_mode(3, 1),
                Bad::Slow => servers.set_mode(3, 2),
            }
            let name = format!("{NAME}:{port}");
            detected = match bad {
                // Found down by its failures: the calls go on until it is, and what is measured
                // comes after. Its time depends on how many calls it was given before (each
                // hung one for the attempt timeout), so a fixed second could end before it.
                Bad::Refuses | Bad::DropsSyns => {
                    let down = || {
                        matches!(
                            policy.replica_state(&name, servers.addr(3)),
                            HostState::Down { .. }
                        )
                    };
                    detect(&caller, down).await
                }
                // Never down: a 503 is its route's failure, a slow answer no failure.
                Bad::Unavailable | Bad::Slow => {
                    drive(&caller, DETECT).await;
                    None
                }
            };
            let before = (syns(), servers.requests(3));
            (before.0, before.1, drive(&caller, MEASURED).await)
        }
        Scenario::TwoBad => {
            rules(&netns, "-I", "127.0.0.2", port, REFUSE);
            servers.set_mode(3, 1);
            drive(&caller, DETECT).await;
            let before = (syns(), servers.requests(3));
            (before.0, before.1, drive(&caller, MEASURED).await)
        }
        Scenario::Restart => {
            let before = (syns(), servers.requests(3));
            let restart = {
                let netns = Arc::clone(&netns);
                tokio::task::spawn_local(async move {
                    rules(&netns, "-I", "127.0.0.3", port, REFUSE);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    rules(&netns, "-D", "127.0.0.3", port, REFUSE);
                })
            };
            let measured = drive(&caller, MEASURED).await;
            restart.await.unwrap();
            (before.0, before.1, measured)
        }
    };
    let reached_bad = match scenario {
        Scenario::One(Bad::Refuses | Bad::DropsSyns) | Scenario::Restart => syns() - syns_before,
        Scenario::TwoBad => syns() - syns_before + (servers.requests(3) - requests_before) as u64,
        Scenario::One(Bad::Unavailable | Bad::Slow) => {
            (servers.requests(3) - requests_before) as u64
        }
    };
    let bad_state = policy.replica_state(&format!("{NAME}:{port}"), servers.addr(3));
    match scenario {
        Scenario::One(Bad::Refuses) => rules(&netns, "-D", "127.0.0.3", port, REFUSE),
        Scenario::One(Bad::DropsSyns) => rules(&netns, "-D", "127.0.0.3", port, DROP),
        Scenario::TwoBad => rules(&netns, "-D", "127.0.0.2", port, REFUSE),
        _ => {}
    }
    let took: Vec<Duration> = measured.iter().map(|e| e.took).collect();
    Figures {
        healthy_p99,
        calls: measured.len(),
        ok: measured.iter().filter(|e| e.ok).count(),
        p99: quantile(&took, 0.99),
        reached_bad,
        fair: measured.len() / 3,
        back_to_failed: measured
            .iter()
            .map(|e| e.replicas.windows(2).filter(|w| w[0] == w[1]).count())
            .sum(),
        bad_state,
        first_failure: measured.iter().find_map(|e| e.failure.clone()),
        detected,
    }
}

/// One of three replicas bad in each of four ways, through each adapter.
pub fn one_bad_replica_of_three_is_avoided_while_the_others_serve() {
    let netns = Arc::new(Netns::create());
    let mut failed = Vec::new();
    for bad in [Bad::Refuses, Bad::DropsSyns, Bad::Unavailable, Bad::Slow] {
        for &adapter in ADAPTERS {
            let ns = Arc::clone(&netns);
            let scenario = Scenario::One(bad);
            let figures = in_namespace(&netns, move || Box::pin(run(ns, scenario, adapter)));
            let line = figures.line(scenario, adapter);
            println!("{line}");
            let success = figures.ok as f64 / figures.calls.max(1) as f64;
            if success < 0.999 || figures.back_to_failed > 0 {
                failed.push(line.clone());
            }
            if matches!(bad, Bad::Refuses | Bad::DropsSyns) && figures.detected.is_none() {
                failed.push(format!("not found down within {DETECT_BOUND:?}: {line}"));
            }
            if bad == Bad::Slow && matches!(figures.bad_state, HostState::Down { .. }) {
                failed.push(format!("slow replica found down: {line}"));
            }
            let p99_goal = (figures.healthy_p99 * 2).max(ms(5));
            let share_goal = figures.fair as u64 / 100 + 8;
            println!(
                "  goal p99 ≤ {p99_goal:?}: {}; goal ≤ {share_goal} attempts to the bad replica (1 % of its share, and 8 probes): {}",
                if figures.p99 <= p99_goal {
                    "met"
                } else {
                    "NOT MET"
                },
                if figures.reached_bad <= share_goal {
                    "met"
                } else {
                    "NOT MET"
                },
            );
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}

/// Two of three replicas bad (.2 refusing, .3 answering `503`), and a replica restarting for 1 s,
/// through each adapter: every call succeeds.
pub fn two_of_three_bad_and_a_1_s_restart_cost_no_call() {
    let netns = Arc::new(Netns::create());
    let mut failed = Vec::new();
    for scenario in [Scenario::TwoBad, Scenario::Restart] {
        for &adapter in ADAPTERS {
            let ns = Arc::clone(&netns);
            let figures = in_namespace(&netns, move || Box::pin(run(ns, scenario, adapter)));
            let line = figures.line(scenario, adapter);
            println!("{line}");
            let goal = match scenario {
                // Two of three bad: the calls flow through the third.
                Scenario::TwoBad => figures.ok * 1000 >= figures.calls * 999,
                // A restart of 1 s: no call fails.
                _ => figures.ok == figures.calls,
            };
            if !goal || figures.back_to_failed > 0 {
                failed.push(line);
            }
        }
    }
    assert!(failed.is_empty(), "{failed:#?}");
}
