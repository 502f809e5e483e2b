//! The peers of the replicas scenario, each inside the retry layer of a stagger policy that knows
//! nothing of the replicas (no set, no breaker), as a user puts them:
//!
//! - tower-resilience 0.13's outlier detection, one instance per replica sharing one detector
//!   (`OutlierDetector::new()`: at most 50 % ejected, 30 s; each registered with 5 consecutive
//!   errors, the crate's example and Envoy's default), a per-call timeout inside it (the crate's
//!   recommended order), over tower 0.5's `balance::p2c::Balance` with pending requests as the load:
//!   driven by the crates. Its classifier counts a `5xx` as a failure too, as Envoy's
//!   `consecutive_5xx` does (the crate's default counts errors alone). The crate times ejections
//!   with `std::time::Instant`, which tokio's paused clock does not move: an instance ejected stays
//!   ejected for the rest of the run (about a second of wall time), where the crate would bring it
//!   back after 30 s. `Balance` draws its pairs from a generator of its own: that row differs a
//!   little from run to run.
//! - Envoy's defaults, modelled: round robin; outlier detection's `consecutive_5xx` of 5 (a
//!   connect failure, a reset and a timeout are 5xx to it: `split_external_local_origin_errors`
//!   is off), ejection for 30 s times the times ejected, `max_ejection_percent` 10 %, which Envoy
//!   raises to one host whatever the percentage; the `previous_hosts` retry predicate (Istio's
//!   default): a retry is placed on a host the request has not tried, when there is one. Sources:
//!   envoyproxy.io, "Outlier detection" (architecture overview) and the `OutlierDetection` and
//!   `RetryPolicy.retry_host_predicate` API docs.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tokio::time::Instant;
use tower::Service;
use tower::balance::p2c::Balance;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PendingRequests};
use tower::timeout::Timeout;
use tower::util::MapErr;
use tower::{Layer, ServiceExt};
use tower_resilience::outlier::{
    OutlierDetectionLayer, OutlierDetectionService, OutlierDetectionServiceError, OutlierDetector,
};

use super::fleet::{Connection, Networks, REPLICAS, Trail};
use crate::peers::tower_resilience::{BoxError, CONSECUTIVE_ERRORS};

type Endpoint = PendingRequests<
    MapErr<
        OutlierDetectionService<
            Timeout<Connection>,
            tower_resilience::outlier::FnClassifier<fn(&Result<Response<()>, BoxError>) -> bool>,
        >,
        fn(OutlierDetectionServiceError<BoxError>) -> BoxError,
    >,
    CompleteOnResponse,
>;

/// tower's p2c balancer over the replicas' endpoints.
type Balancer = Balance<ServiceList<Vec<Endpoint>>, Request<()>>;

/// tower's balancer over the replicas, each behind tower-resilience's outlier detection; shared by
/// every clone (tower's `Balance` is not `Clone`; one thread drives it).
#[derive(Clone)]
pub(crate) struct Balanced {
    balance: Rc<RefCell<Balancer>>,
}

fn five_hundreds(result: &Result<Response<()>, BoxError>) -> bool {
    match result {
        Ok(response) => response.status().is_server_error(),
        Err(_) => true,
    }
}

fn unwrap(error: OutlierDetectionServiceError<BoxError>) -> BoxError {
    match error {
        OutlierDetectionServiceError::Inner(error) => error,
        ejected => Box::new(ejected),
    }
}

impl Balanced {
    pub(crate) fn new(networks: &Networks, per_call: Duration) -> Self {
        let detector = OutlierDetector::new();
        let endpoints = (0..REPLICAS)
            .map(|index| {
                let name = format!("replica-{index}");
                detector.register(&name, CONSECUTIVE_ERRORS);
                let classify: fn(&Result<Response<()>, BoxError>) -> bool = five_hundreds;
                let layer = OutlierDetectionLayer::builder()
                    .detector(detector.clone())
                    .instance_name(name)
                    .failure_classifier(classify)
                    .build()
                    .expect("a detector");
                let timed = Timeout::new(Connection::new(networks, index), per_call);
                let unwrap: fn(_) -> _ = unwrap;
                PendingRequests::new(
                    MapErr::new(layer.layer(timed), unwrap),
                    CompleteOnResponse::default(),
                )
            })
            .collect();
        Self {
            balance: Rc::new(RefCell::new(Balance::new(ServiceList::new(endpoints)))),
        }
    }
}

impl Service<Request<()>> for Balanced {
    type Response = Response<()>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<()>, BoxError>>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.balance.borrow_mut().poll_ready(cx)
    }

    fn call(&mut self, request: Request<()>) -> Self::Future {
        Box::pin(self.balance.borrow_mut().call(request))
    }
}

/// Envoy's outlier detection and host selection, modelled: see the module's docs.
#[derive(Clone)]
pub(crate) struct Envoy {
    state: Rc<RefCell<EnvoyState>>,
    connections: Rc<[Connection]>,
}

#[derive(Default)]
struct EnvoyState {
    next: usize,
    hosts: [HostOutlier; REPLICAS],
}

#[derive(Default, Clone, Copy)]
struct HostOutlier {
    consecutive: u32,
    ejected_until: Option<Instant>,
    ejections: u32,
}

/// `consecutive_5xx`, `base_ejection_time`, and the most hosts ejected at once.
const CONSECUTIVE_5XX: u32 = 5;
const BASE_EJECTION: Duration = Duration::from_secs(30);
const MAX_EJECTED: usize = 1;

impl Envoy {
    pub(crate) fn new(networks: &Networks) -> Self {
        Self {
            state: Rc::default(),
            connections: (0..REPLICAS)
                .map(|i| Connection::new(networks, i))
                .collect(),
        }
    }
}

impl EnvoyState {
    /// Round robin over the hosts not ejected, skipping those `tried` when another is there.
    fn pick(&mut self, tried: &[usize]) -> usize {
        let now = Instant::now();
        let ejected = |h: &HostOutlier| h.ejected_until.is_some_and(|until| until > now);
        let order: Vec<usize> = (0..REPLICAS).map(|k| (self.next + k) % REPLICAS).collect();
        self.next = (self.next + 1) % REPLICAS;
        let healthy: Vec<usize> = order
            .into_iter()
            .filter(|&i| !ejected(&self.hosts[i]))
            .collect();
        (healthy.iter().copied())
            .find(|i| !tried.contains(i))
            .or_else(|| healthy.first().copied())
            .unwrap_or(self.next)
    }

    fn record(&mut self, host: usize, failed: bool) {
        let now = Instant::now();
        let ejected_now = (self.hosts.iter())
            .filter(|h| h.ejected_until.is_some_and(|until| until > now))
            .count();
        let outlier = &mut self.hosts[host];
        if !failed {
            outlier.consecutive = 0;
            return;
        }
        outlier.consecutive += 1;
        if outlier.consecutive >= CONSECUTIVE_5XX && ejected_now < MAX_EJECTED {
            outlier.ejections += 1;
            outlier.ejected_until = Some(now + BASE_EJECTION * outlier.ejections);
            outlier.consecutive = 0;
        }
    }
}

/// Records a failure for an attempt dropped before its end (a timeout), as Envoy's router counts
/// one.
struct Outcome {
    state: Rc<RefCell<EnvoyState>>,
    host: usize,
    done: bool,
}

impl Drop for Outcome {
    fn drop(&mut self) {
        if !self.done {
            self.state.borrow_mut().record(self.host, true);
        }
    }
}

impl Service<Request<()>> for Envoy {
    type Response = Response<()>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Response<()>>>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<()>) -> Self::Future {
        let tried: Vec<usize> = (request.extensions().get::<Trail>())
            .map(|trail| {
                trail
                    .0
                    .lock()
                    .expect("not poisoned")
                    .iter()
                    .map(|a| a.0)
                    .collect()
            })
            .unwrap_or_default();
        let host = self.state.borrow_mut().pick(&tried);
        let connection = self.connections[host].clone();
        let mut outcome = Outcome {
            state: Rc::clone(&self.state),
            host,
            done: false,
        };
        Box::pin(async move {
            let answer = connection.oneshot(request).await;
            let failed = match &answer {
                Ok(response) => response.status().is_server_error(),
                Err(_) => true,
            };
            outcome.done = true;
            outcome.state.borrow_mut().record(host, failed);
            answer
        })
    }
}
