//! The clients of the metastable scenario: when each new request is made, by whom, and how each row's
//! client makes a call.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use http::{Request, StatusCode, Uri};
use stagger::{RetryInfo, RetryLayer};
use tower::{Layer, ServiceExt};

use super::queue::QueueService;
use super::{
    ARRIVALS, ATTEMPT_TIMEOUT, Kind, PEER_JITTER, POLICY, Row, SEND_FOR, Scenario, URI, bucket,
};
use crate::peers::PeerClient;
use crate::sim::{poisson_arrivals, stream};

/// The new requests: when each is made, and by which client. A Poisson stream at the scenario's rate.
pub(super) fn arrivals(scenario: &Scenario) -> Vec<(Duration, usize)> {
    poisson_arrivals(
        stream(scenario.seed, ARRIVALS),
        scenario.offered(),
        SEND_FOR,
        scenario.clients,
    )
}

/// One client, as a row has it retry.
pub(super) enum Client {
    Peer(PeerClient),
    Stagger(RetryLayer),
    FailureBudget(RetryLayer),
}

impl Client {
    pub(super) fn new(row: &Row, scenario: &Scenario, client: usize) -> Self {
        let seed = stream(stream(scenario.seed, POLICY), client as u64);
        match row.kind {
            Kind::Peer(peer) => {
                let seed = stream(stream(scenario.seed, PEER_JITTER), client as u64);
                Self::Peer(PeerClient::new(peer, (!scenario.peer_rng).then_some(seed)))
            }
            Kind::Stagger { policy, .. } => Self::Stagger(RetryLayer::new(policy(seed))),
            Kind::FailureBudget => Self::FailureBudget(RetryLayer::new(bucket::policy(seed))),
        }
    }

    /// One call to `server`: whether it got its `200`, and the attempts it made.
    pub(super) fn call(
        self: &Rc<Self>,
        server: QueueService,
    ) -> Pin<Box<dyn Future<Output = (bool, u32)>>> {
        let uri = Uri::from_static(URI);
        let mut request = Request::new(());
        *request.uri_mut() = uri.clone();
        let this = Rc::clone(self);
        Box::pin(async move {
            let ended = match &*this {
                Self::Peer(peer) => {
                    let ended = peer.call(server, &uri, Some(ATTEMPT_TIMEOUT)).await;
                    return (ended.status == Some(StatusCode::OK), ended.attempts);
                }
                Self::Stagger(layer) => layer
                    .layer(server)
                    .oneshot(request)
                    .await
                    .map_err(|e| e.info()),
                Self::FailureBudget(layer) => {
                    let service = layer.layer(bucket::TimeLimit(server));
                    service.oneshot(request).await.map_err(|e| e.info())
                }
            };
            match ended {
                Ok(response) => {
                    let attempts = RetryInfo::of(response.extensions()).attempts();
                    (response.status() == StatusCode::OK, attempts)
                }
                Err(info) => (false, info.attempts()),
            }
        })
    }
}
