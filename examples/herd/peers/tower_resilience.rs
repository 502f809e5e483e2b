//! tower-resilience 0.13's circuit breaker and outlier detection, each driven by the crate's own
//! code, inside stagger's retry layer.
//!
//! Both sit where the crate's docs put them: inside the retry, with a per-call timeout inside them
//! ("Retry outside CB (recommended default)" and "Recommended Layer Order": Retry, Circuit Breaker,
//! Per-call Timeout, outermost first; tower-resilience 0.13.0, src/composition.rs, and README.md,
//! "Pattern Composition"). The per-call timeout is `tower::timeout` at stagger's attempt timeout:
//! without it the crate never learns of an attempt that hangs, since stagger's own attempt timeout
//! drops the attempt, and the crate records an outcome only when its inner future ends
//! (circuitbreaker src/lib.rs, `CircuitBreaker::call`).
//!
//! Three things stand between the crate and the simulation, none of them deciding anything:
//!
//! - [`Remote`]: the breaker's service must be `Send` (its future is a `BoxFuture`), and the
//!   simulated network is not (one thread, `Rc`): each attempt goes over a channel to a task of the
//!   simulation's thread, which sends it and hands back its end (or drops it when the breaker's
//!   future is dropped). It takes no virtual time.
//! - [`OpenWait`]: the crate times its open state with `std::time::Instant`
//!   (circuitbreaker src/circuit.rs, `try_acquire`: `self.last_state_change.elapsed() >=
//!   config.wait_duration_in_open`), which tokio's paused clock does not move: a run of 90
//!   simulated seconds takes a second of wall time, and an open circuit would never half-open. So
//!   the crate is given an open wait of zero, and this gate in front of it fails every call while
//!   the circuit is open and less than the default 30 s (virtual) have passed since it opened, with
//!   the crate's own `CircuitBreakerError::OpenCircuit`; after that the crate's own code admits the
//!   half-open probe, rejects the rest, and closes or opens again.
//! - An error map, which a user writes too: stagger's classifier reads error types it knows, and
//!   both crates' errors hide the inner error from `source()` (`CircuitBreakerError::Inner` names
//!   no source; `OutlierDetectionServiceError` says so on purpose). So the inner error is unwrapped
//!   (a refused connect is retried, a timed-out attempt too) and the crate's own rejection is boxed
//!   as it is, which the classifier does not know: the call ends with it, as the crate's docs
//!   advise ("exclude circuit-open rejections" from the retries).

use std::error::Error;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{Either, Ready, ready};
use http::{Request, Response};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tower::timeout::Timeout;
use tower::util::MapErr;
use tower::{Layer, Service, ServiceExt};
use tower_resilience::circuitbreaker::{
    CircuitBreaker, CircuitBreakerError, CircuitBreakerHandle, CircuitBreakerLayer, CircuitState,
    DefaultClassifier,
};
use tower_resilience::outlier::{
    OutlierDetectionLayer, OutlierDetectionService, OutlierDetectionServiceError, OutlierDetector,
};

pub(crate) type BoxError = Box<dyn Error + Send + Sync>;

/// tower-resilience's default open wait (circuitbreaker src/config.rs, `CircuitBreakerConfigBuilder::new`).
pub(crate) const WAIT_IN_OPEN: Duration = Duration::from_secs(30);

/// The threshold of consecutive errors the crate's docs register an instance with
/// (`detector.register("backend-1", 5)`, outlier src/lib.rs), Envoy's default too.
pub(crate) const CONSECUTIVE_ERRORS: usize = 5;

/// An attempt handed to the simulation's thread, and where its end goes.
type Job = (
    Request<()>,
    oneshot::Sender<Result<Response<()>, io::Error>>,
);

/// A `Send` handle on a connection of the simulation's thread: see the module's docs.
#[derive(Clone)]
pub(crate) struct Remote {
    jobs: mpsc::UnboundedSender<Job>,
}

impl Remote {
    /// A handle on `connection`, and the task that makes its attempts, to be spawned on the
    /// simulation's `LocalSet`.
    pub(crate) fn new<S>(connection: S) -> (Self, impl Future<Output = ()>)
    where
        S: Service<Request<()>, Response = Response<()>, Error = io::Error> + Clone + 'static,
    {
        let (sender, mut jobs) = mpsc::unbounded_channel::<Job>();
        let serve = async move {
            while let Some((request, mut answer)) = jobs.recv().await {
                let connection = connection.clone();
                tokio::task::spawn_local(async move {
                    tokio::select! {
                        end = connection.oneshot(request) => {
                            let _ = answer.send(end);
                        }
                        () = answer.closed() => {}
                    }
                });
            }
        };
        (Self { jobs: sender }, serve)
    }
}

impl Service<Request<()>> for Remote {
    type Response = Response<()>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<()>, io::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<()>) -> Self::Future {
        let (answer, end) = oneshot::channel();
        let sent = self.jobs.send((request, answer));
        Box::pin(async move {
            sent.map_err(|_| io::Error::other("the simulation has ended"))?;
            end.await
                .unwrap_or_else(|_| Err(io::Error::other("the simulation has ended")))
        })
    }
}

/// When the crate's circuit last opened, on the simulation's clock.
type Opened = Arc<Mutex<Option<Instant>>>;

/// The gate that times the crate's open state on the simulation's clock: see the module's docs.
#[derive(Clone)]
pub(crate) struct OpenWait<S> {
    inner: S,
    handle: CircuitBreakerHandle,
    opened: Opened,
}

impl<S> OpenWait<S> {
    /// Whether the circuit is open and its wait not over.
    fn waiting(&self) -> bool {
        self.handle.state() == CircuitState::Open
            && (self.opened.lock().expect("not poisoned"))
                .is_some_and(|at| Instant::now() < at + WAIT_IN_OPEN)
    }
}

impl<S, E> Service<Request<()>> for OpenWait<S>
where
    S: Service<Request<()>, Error = CircuitBreakerError<E>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Either<Ready<Result<S::Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if self.waiting() {
            return Poll::Ready(Ok(()));
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<()>) -> Self::Future {
        if self.waiting() {
            return Either::Left(ready(Err(CircuitBreakerError::OpenCircuit)));
        }
        Either::Right(self.inner.call(request))
    }
}

/// The attempt's own error, or the crate's rejection as it is: see the module's docs.
fn unwrap_breaker(error: CircuitBreakerError<BoxError>) -> BoxError {
    match error {
        CircuitBreakerError::Inner(error) => error,
        open => Box::new(open),
    }
}

fn unwrap_outlier(error: OutlierDetectionServiceError<BoxError>) -> BoxError {
    match error {
        OutlierDetectionServiceError::Inner(error) => error,
        ejected => Box::new(ejected),
    }
}

/// What stagger's retry layer wraps in the circuit breaker's row.
pub(crate) type BreakerStack = MapErr<
    OpenWait<CircuitBreaker<Timeout<Remote>, DefaultClassifier>>,
    fn(CircuitBreakerError<BoxError>) -> BoxError,
>;

/// tower-resilience's circuit breaker with its defaults (`CircuitBreakerLayer::builder()`: a
/// failure rate of 50 % over a count-based window of 100 calls, 30 s open, 1 call half-open) but
/// for the open wait, timed by [`OpenWait`] instead, around `remote` with a per-call timeout of
/// `per_call`; and the handle that tells its state.
pub(crate) fn circuit_breaker(
    remote: Remote,
    per_call: Duration,
) -> (BreakerStack, CircuitBreakerHandle) {
    let opened = Opened::default();
    let on_open = Arc::clone(&opened);
    let (layer, handle) = CircuitBreakerLayer::builder()
        .wait_duration_in_open(Duration::ZERO)
        .on_state_transition(move |_, to| {
            if to == CircuitState::Open {
                *on_open.lock().expect("not poisoned") = Some(Instant::now());
            }
        })
        .build_with_handle()
        .expect("the crate's defaults");
    let breaker = OpenWait {
        inner: layer.layer(Timeout::new(remote, per_call)),
        handle: handle.clone(),
        opened,
    };
    let unwrap: fn(_) -> _ = unwrap_breaker;
    (MapErr::new(breaker, unwrap), handle)
}

/// What stagger's retry layer wraps in the outlier detection's row.
pub(crate) type OutlierStack<S> = MapErr<
    OutlierDetectionService<Timeout<S>, DefaultClassifier>,
    fn(OutlierDetectionServiceError<BoxError>) -> BoxError,
>;

/// tower-resilience's outlier detection with its defaults (`OutlierDetector::new()`: at most 50 %
/// of the instances ejected, 30 s the first time; backpressure mode) for one instance, `host`,
/// ejected after [`CONSECUTIVE_ERRORS`], around `connection` with a per-call timeout of
/// `per_call`; and the detector.
pub(crate) fn outlier_detection<S>(
    connection: S,
    host: &str,
    per_call: Duration,
) -> (OutlierStack<S>, OutlierDetector) {
    let detector = OutlierDetector::new();
    detector.register(host, CONSECUTIVE_ERRORS);
    let layer = OutlierDetectionLayer::builder()
        .detector(detector.clone())
        .instance_name(host)
        .build()
        .expect("a detector");
    let unwrap: fn(_) -> _ = unwrap_outlier;
    let service = layer.layer(Timeout::new(connection, per_call));
    (MapErr::new(service, unwrap), detector)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use stagger::{RetryLayer, RetryPolicy};
    use tower::service_fn;

    use super::*;

    /// A host that refuses connections while `down`, and counts the attempts that reach it.
    #[derive(Clone, Default)]
    struct Flaky {
        down: Arc<AtomicBool>,
        attempts: Arc<AtomicUsize>,
    }

    impl Flaky {
        fn service(
            &self,
        ) -> impl Service<Request<()>, Response = Response<()>, Error = io::Error, Future: Send>
        + Clone
        + Send
        + 'static {
            let host = self.clone();
            service_fn(move |_: Request<()>| {
                host.attempts.fetch_add(1, Ordering::SeqCst);
                let down = host.down.load(Ordering::SeqCst);
                async move {
                    if down {
                        Err(io::ErrorKind::ConnectionRefused.into())
                    } else {
                        Ok(Response::new(()))
                    }
                }
            })
        }
    }

    /// One attempt a call, limited to 500 ms: the tests count attempts.
    fn once() -> RetryLayer {
        let policy = RetryPolicy::builder()
            .max_retries(0)
            .budget(None)
            .attempt_timeout(Duration::from_millis(500))
            .build();
        RetryLayer::new(policy.expect("a valid policy"))
    }

    #[tokio::test(start_paused = true)]
    async fn its_count_based_window_counts_every_call_since_the_circuit_last_changed() {
        let host = Flaky::default();
        let layer = CircuitBreakerLayer::builder()
            .build()
            .expect("the defaults");
        let mut breaker = layer.layer(host.service());
        for _ in 0..1000 {
            breaker
                .ready()
                .await
                .unwrap()
                .call(Request::new(()))
                .await
                .unwrap();
        }
        host.down.store(true, Ordering::SeqCst);
        let mut failures = 0;
        loop {
            let answer = breaker.ready().await.unwrap().call(Request::new(())).await;
            match answer {
                Err(CircuitBreakerError::Inner(_)) => failures += 1,
                Err(CircuitBreakerError::OpenCircuit) => break,
                Ok(_) => unreachable!("the host is down"),
            }
        }
        // Not 50 of the last 100: 1000 failures, as many as the successes before them.
        assert_eq!(failures, 1000);
    }

    /// 100 calls at once through stagger's layer around `breaker`, to a host that never answers.
    async fn hung_calls<S>(breaker: S)
    where
        S: Service<Request<()>, Response = Response<()>, Error = BoxError> + Clone + 'static,
        S::Future: 'static,
    {
        let service = once().layer(breaker);
        let calls: Vec<_> = (0..100)
            .map(|_| tokio::task::spawn_local(service.clone().oneshot(Request::new(()))))
            .collect();
        for call in calls {
            assert!(call.await.expect("a call").is_err());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_attempt_reaches_the_crate_only_through_a_timeout_inside_it() {
        let hung = service_fn(|_: Request<()>| std::future::pending::<io::Result<Response<()>>>());
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                // The crate's defaults, with stagger's attempt timeout alone: the crate's future
                // is dropped, and nothing is recorded.
                let (remote, serve) = Remote::new(hung);
                let serve = tokio::task::spawn_local(serve);
                let (layer, handle) = CircuitBreakerLayer::builder()
                    .build_with_handle()
                    .expect("the defaults");
                let unwrap: fn(_) -> _ = unwrap_breaker;
                hung_calls(MapErr::new(
                    layer.layer(Timeout::new(remote, Duration::MAX)),
                    unwrap,
                ))
                .await;
                assert_eq!(handle.state(), CircuitState::Closed);
                serve.abort();

                // With a per-call timeout inside it, each hung attempt is a failure.
                let (remote, serve) = Remote::new(hung);
                let serve = tokio::task::spawn_local(serve);
                let (stack, handle) = circuit_breaker(remote, Duration::from_millis(500));
                hung_calls(stack).await;
                assert_eq!(handle.state(), CircuitState::Open);
                serve.abort();
            })
            .await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_open_wait_is_timed_on_the_simulation_clock_and_the_crate_probes() {
        let host = Flaky::default();
        host.down.store(true, Ordering::SeqCst);
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let (remote, serve) = Remote::new(host.service());
                let serve = tokio::task::spawn_local(serve);
                let (stack, handle) = circuit_breaker(remote, Duration::from_millis(500));
                let service = once().layer(stack);
                let call = || service.clone().oneshot(Request::new(()));
                for _ in 0..100 {
                    let _ = call().await;
                }
                assert_eq!(handle.state(), CircuitState::Open);
                assert_eq!(host.attempts.load(Ordering::SeqCst), 100);
                tokio::time::advance(WAIT_IN_OPEN - Duration::from_millis(1)).await;
                assert!(call().await.is_err());
                assert_eq!(host.attempts.load(Ordering::SeqCst), 100, "still open");
                tokio::time::advance(Duration::from_millis(1)).await;
                assert!(call().await.is_err(), "the probe fails");
                assert_eq!(host.attempts.load(Ordering::SeqCst), 101);
                assert_eq!(handle.state(), CircuitState::Open, "open again");
                host.down.store(false, Ordering::SeqCst);
                tokio::time::advance(WAIT_IN_OPEN).await;
                assert!(call().await.is_ok(), "the probe succeeds");
                assert_eq!(handle.state(), CircuitState::Closed);
                serve.abort();
            })
            .await;
    }

    #[test]
    fn one_instance_is_never_ejected_with_the_defaults() {
        let detector = OutlierDetector::new();
        detector.register("api.example", CONSECUTIVE_ERRORS);
        for _ in 0..100 {
            assert!(!detector.record_failure("api.example"));
        }
        assert_eq!(detector.ejected_count(), 0);
        // It would be ejected alone if it could be: at most 50 % of one instance is none.
        let detector = OutlierDetector::new().max_ejection_percent(100);
        detector.register("api.example", CONSECUTIVE_ERRORS);
        let ejected = (0..5).map(|_| detector.record_failure("api.example"));
        assert_eq!(
            ejected.collect::<Vec<_>>(),
            [false, false, false, false, true]
        );
    }
}
