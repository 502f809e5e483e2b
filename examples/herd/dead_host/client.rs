//! The dead-host scenario's client: when each call is made, and each row's stack of services
//! around the connection, all calls through one of it.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use http::{Request, Response, StatusCode, Uri};
use stagger::{HostState, RetryLayer, StopReason};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};
use tower_resilience::circuitbreaker::CircuitState;

use super::figures::Call;
use super::host::{Connection, Host};
use super::{ARRIVALS, Case, HOST, Kind, PER_CALL_TIMEOUT, Scenario, URI};
use crate::peers::breaker_model::{BreakerLayer, Circuit, State};
use crate::peers::polly_breaker::PollyCircuit;
use crate::peers::resilience4j_breaker::Resilience4jCircuit;
use crate::peers::tower_resilience::{Remote, circuit_breaker, outlier_detection};
use crate::sim::{Network, poisson_arrivals, stream};

/// When each new call is made, from the start: a Poisson stream at the scenario's rate, the same
/// for every row.
pub(super) fn arrivals(scenario: &Scenario, case: Case) -> Vec<Duration> {
    let seed = stream(scenario.seed, ARRIVALS);
    (poisson_arrivals(seed, scenario.rate, scenario.send_for(case), 1).into_iter())
        .map(|(at, _)| at)
        .collect()
}

/// Makes every call of one row through one case, and says how each ended.
pub(super) async fn run(
    kind: Kind,
    network: &Rc<RefCell<Network<Host>>>,
    scenario: &Scenario,
    case: Case,
) -> Vec<Call> {
    let connection = Connection::new(network);
    let calls = arrivals(scenario, case);
    match kind {
        Kind::Stagger(breaker) => {
            let policy = scenario.policy(breaker);
            let tripped = || matches!(policy.host_state(HOST), HostState::Down { .. });
            let service = RetryLayer::new(policy.clone()).layer(connection);
            drive(service, tripped, &calls).await
        }
        Kind::TowerResilience => {
            let (remote, serve) = Remote::new(connection);
            let serve = tokio::task::spawn_local(serve);
            let (stack, handle) = circuit_breaker(remote, PER_CALL_TIMEOUT);
            let tripped = || handle.state() != CircuitState::Closed;
            let service = retry_layer(scenario).layer(stack);
            let ended = drive(service, tripped, &calls).await;
            serve.abort();
            ended
        }
        Kind::Outlier => {
            let (stack, detector) = outlier_detection(connection, HOST, PER_CALL_TIMEOUT);
            let tripped = || detector.ejected_count() > 0;
            drive(retry_layer(scenario).layer(stack), tripped, &calls).await
        }
        Kind::Polly => through_model(PollyCircuit::new(), connection, scenario, &calls).await,
        Kind::Resilience4j => {
            through_model(Resilience4jCircuit::new(), connection, scenario, &calls).await
        }
    }
}

/// The no-breaker row's retry layer, which the peers' breakers sit inside.
fn retry_layer(scenario: &Scenario) -> RetryLayer {
    RetryLayer::new(scenario.policy(None))
}

async fn through_model<C: Circuit + 'static>(
    circuit: C,
    connection: Connection,
    scenario: &Scenario,
    calls: &[Duration],
) -> Vec<Call> {
    let layer = BreakerLayer::new(circuit);
    let circuit = layer.circuit();
    let tripped = || circuit.borrow().state() != State::Closed;
    let service = retry_layer(scenario).layer(layer.layer(connection));
    drive(service, tripped, calls).await
}

/// Makes a call at each of `calls` (from now) through a clone of `service`, each in a task of its
/// own, and waits until every one has ended. `tripped` tells whether the row's breaker is tripped
/// when a call is made.
async fn drive<S, E>(service: S, tripped: impl Fn() -> bool, calls: &[Duration]) -> Vec<Call>
where
    S: Service<Request<()>, Response = Response<()>, Error = stagger::Error<E>> + Clone + 'static,
    S::Future: 'static,
    E: 'static,
{
    let start = Instant::now();
    let ended = Rc::new(RefCell::new(Vec::with_capacity(calls.len())));
    let mut tasks = Vec::with_capacity(1024);
    for &at in calls {
        if start + at > Instant::now() {
            tokio::time::sleep_until(start + at).await;
        }
        let tripped = tripped();
        let service = service.clone();
        let ended = Rc::clone(&ended);
        tasks.push(tokio::task::spawn_local(async move {
            let sent = Instant::now();
            let mut request = Request::new(());
            *request.uri_mut() = Uri::from_static(URI);
            let why = match service.oneshot(request).await {
                Ok(response) if response.status() == StatusCode::OK => None,
                Ok(response) => Some(why(Some(&stagger::RetryInfo::of(response.extensions())))),
                Err(error) => Some(why(Some(&error.info()))),
            };
            ended.borrow_mut().push(Call {
                at: sent - start,
                took: sent.elapsed(),
                why,
                tripped,
            });
        }));
        // A handle keeps its finished task's memory: let those go as the run goes.
        if tasks.len() == tasks.capacity() {
            tasks.retain(|task| !task.is_finished());
        }
    }
    for task in tasks {
        task.await.expect("a call");
    }
    std::mem::take(&mut *ended.borrow_mut())
}

/// Why a call ended without its `200`: stagger's stop reason (a peer's rejection is `Fatal`).
fn why(info: Option<&stagger::RetryInfo>) -> StopReason {
    info.and_then(stagger::RetryInfo::stop_reason)
        .unwrap_or(StopReason::Fatal)
}
