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

use super::netns::Netns;
use super::{ms, quantile};

const NAME: &str = "api.internal";
const RATE_EVERY: Duration = ms(4);
const WARM: Duration = ms(500);
const HEALTHY: Duration = Duration::from_secs(1);
const DETECT: Duration = Duration::from_secs(1);
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

/// How a replica answers what reaches it: 0 healthy, 1 `503`, 2 slow.
#[derive(Clone, Default)]
struct Servers {
    port: u16,
    modes: Arc<Mutex<HashMap<u8, u8>>>,
    counts: Arc<Mutex<HashMap<u8, Arc<AtomicUsize>>>>,
}

impl Servers {
    /// The three servers, on one free port.
    async fn start() -> Self {
        let first = TcpListener::bind((Ipv4Addr::new(127, 0, 0, 2), 0))
            .await
            .unwrap();
        let port = first.local_addr().unwrap().port();
        let servers = Self {
            port,
            ..Self::default()
        };
        servers.serve(2, first);
        for n in [3, 4] {
            let listener = TcpListener::bind((Ipv4Addr::new(127, 0, 0, n), port))
                .await
                .unwrap();
            servers.serve(n, listener);
        }
        servers
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
}

const ADAPTERS: [Adapter; 3] = [
    Adapter::Middleware,
    Adapter::TowerReqwest,
    Adapter::HyperUtil,
];

/// How a call ended: whether it got its `200`, how long it took, the replicas it reached.
struct Ended {
    ok: bool,
    took: Duration,
    replicas: Vec<SocketAddr>,
}

type Caller = Rc<dyn Fn() -> Pin<Box<dyn Future<Output = Ended>>>>;

fn policy(set: &ReplicaSet) -> RetryPolicy {
    RetryPolicy::builder()
        .replicas(set.clone())
        .attempt_timeout(ms(500))
        .max_elapsed(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// A caller through `adapter` to the servers' set, and the policy it runs under.
fn caller(adapter: Adapter, servers: &Servers) -> (Caller, RetryPolicy) {
    let name = format!("{NAME}:{}", servers.port);
    let set = ReplicaSet::new(&name, (2..=4).map(|n| servers.addr(n))).unwrap();
    let policy = policy(&set);
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
                    let ok = result.is_ok_and(|r| r.status() == StatusCode::OK);
                    let replicas = report
                        .get()
                        .map(|i| i.replicas().to_vec())
                        .unwrap_or_default();
                    Ended {
                        ok,
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
                    let (ok, info) = match service.oneshot(request).await {
                        Ok(r) => (
                            r.status() == StatusCode::OK,
                            r.extensions().get::<RetryInfo>().cloned(),
                        ),
                        Err(e) => (false, Some(e.info())),
                    };
                    let replicas = info.map(|i| i.replicas().to_vec()).unwrap_or_default();
                    Ended {
                        ok,
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
                    let (ok, info) = match service.oneshot(request).await {
                        Ok(r) => (
                            r.status() == StatusCode::OK,
                            r.extensions().get::<RetryInfo>().cloned(),
                        ),
                        Err(e) => (false, Some(e.info())),
                    };
                    let replicas = info.map(|i| i.replicas().to_vec()).unwrap_or_default();
                    Ended {
                        ok,
                        took: start.elapsed(),
                        replicas,
                    }
                })
            })
        }
    };
    (caller, policy)
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
}

impl Figures {
    fn line(&self, bad: Bad, adapter: Adapter) -> String {
        format!(
            "{bad:?} / {adapter:?}: {} of {} ok ({:.2} %), p99 {:?} (all healthy {:?}), {} attempts reached the bad replica of a fair {}, {} retries back to the replica that failed, its state {:?}",
            self.ok,
            self.calls,
            100.0 * self.ok as f64 / self.calls.max(1) as f64,
            self.p99,
            self.healthy_p99,
            self.reached_bad,
            self.fair,
            self.back_to_failed,
            self.bad_state.as_str(),
        )
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

/// One run: `adapter`'s calls, with .3 turning `bad` after a healthy second.
async fn run(netns: Arc<Netns>, bad: Bad, adapter: Adapter) -> Figures {
    let servers = Servers::start().await;
    let (caller, policy) = caller(adapter, &servers);
    // The first calls make each replica's client and connections: not what a healthy set costs.
    drive(&caller, WARM).await;
    let healthy = drive(&caller, HEALTHY).await;
    let healthy_p99 = quantile(&healthy.iter().map(|e| e.took).collect::<Vec<_>>(), 0.99);
    let port = servers.port.to_string();
    // Two rules: the SYNs, counted (the attempts that reach the replica), and the packets of the
    // connections the clients already have to it, which a dead replica does not answer either.
    let rule = |syn: bool, action: &[&str]| -> Vec<String> {
        let mut rule = vec!["-p", "tcp", "-d", "127.0.0.3", "--dport", &port];
        if syn {
            rule.push("--syn");
        }
        rule.push("-j");
        rule.extend_from_slice(action);
        rule.into_iter().map(str::to_owned).collect()
    };
    let action: &[&str] = match bad {
        Bad::Refuses => &["REJECT", "--reject-with", "tcp-reset"],
        Bad::DropsSyns => &["DROP"],
        Bad::Unavailable | Bad::Slow => &[],
    };
    let insert = |verb: &str| {
        // The SYNs' rule first in the chain: `-I` puts each at the top, so it goes last.
        for syn in [false, true] {
            let mut args = vec![verb.to_owned(), "INPUT".to_owned()];
            args.extend(rule(syn, action));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            netns.iptables(&args);
        }
    };
    match bad {
        Bad::Refuses | Bad::DropsSyns => insert("-I"),
        Bad::Unavailable => servers.set_mode(3, 1),
        Bad::Slow => servers.set_mode(3, 2),
    }
    let syns = || netns.packets("INPUT").first().map_or(0, |(_, n)| *n);
    drive(&caller, DETECT).await;
    let (syns_before, requests_before) = (syns(), servers.requests(3));
    let measured = drive(&caller, MEASURED).await;
    let reached_bad = match bad {
        Bad::Refuses | Bad::DropsSyns => syns() - syns_before,
        Bad::Unavailable | Bad::Slow => (servers.requests(3) - requests_before) as u64,
    };
    let bad_state = policy.replica_state(&format!("{NAME}:{}", servers.port), servers.addr(3));
    match bad {
        Bad::Refuses | Bad::DropsSyns => insert("-D"),
        _ => servers.set_mode(3, 0),
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
    }
}

/// One of three replicas bad in each of four ways, through each adapter.
pub fn one_bad_replica_of_three_is_avoided_while_the_others_serve() {
    let netns = Arc::new(Netns::create());
    let mut failed = Vec::new();
    for bad in [Bad::Refuses, Bad::DropsSyns, Bad::Unavailable, Bad::Slow] {
        for adapter in ADAPTERS {
            let ns = Arc::clone(&netns);
            let figures = in_namespace(&netns, move || Box::pin(run(ns, bad, adapter)));
            let line = figures.line(bad, adapter);
            println!("{line}");
            let success = figures.ok as f64 / figures.calls.max(1) as f64;
            if success < 0.999 || figures.back_to_failed > 0 {
                failed.push(line.clone());
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
