//! The outages scenario's clients: when each new request is made, by whom, and how each row's client
//! makes a call.

use std::cell::{Cell, RefCell};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode, Uri};
use stagger::{RetryInfo, RetryLayer, RetryPolicy};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use super::proxy::Proxy;
use super::{ARRIVALS, Kind, PEER_JITTER, POLICY, Scenario, URI};
use crate::peers::PeerClient;
use crate::sim::{Network, Reply, SimulatedServer, own_process, poisson_arrivals, stream};

/// The new requests for `send_for`: when each is made, and by which client. A Poisson stream at the
/// scenario's rate, the same prefix for every `send_for`, so that the outages differ only in length.
pub(super) fn arrivals(scenario: &Scenario, send_for: Duration) -> Vec<(Duration, usize)> {
    poisson_arrivals(
        stream(scenario.seed, ARRIVALS),
        scenario.rate(),
        send_for,
        scenario.clients,
    )
}

/// One client, as a row has it retry.
pub(super) enum Client {
    Peer(PeerClient),
    Stagger(RetryLayer),
}

/// How one call ended.
pub(super) struct Ended {
    /// Whether it got its `200`.
    pub(super) ok: bool,
    /// The attempts it made, as the client tells.
    pub(super) attempts: u32,
    /// Whether its first attempt got a `502`.
    pub(super) met_outage: bool,
    /// Whether its first attempt waited: held for its host by a breaker (sent 10 ms or more after
    /// the call started), or never sent at all.
    pub(super) held: bool,
    /// Why it stopped without a `200`; `None` when it got one.
    pub(super) why: Option<String>,
}

impl Client {
    pub(super) fn new(kind: Kind, scenario: &Scenario, client: usize) -> Self {
        match kind {
            Kind::Peer(peer) => {
                let seed = stream(stream(scenario.seed, PEER_JITTER), client as u64);
                Self::Peer(PeerClient::new(peer, (!scenario.peer_rng).then_some(seed)))
            }
            Kind::StaggerDefaults => {
                let seed = stream(stream(scenario.seed, POLICY), client as u64);
                // `RetryPolicy::default()` is this builder, built: whatever the defaults are, with the
                // client's own jitter, and its own starting credit as a process of its own has.
                let policy = own_process(RetryPolicy::builder()).seed(seed).build();
                Self::Stagger(RetryLayer::new(policy.expect("the default policy")))
            }
            Kind::Stagger(change) => {
                let seed = stream(stream(scenario.seed, POLICY), client as u64);
                let policy = change(own_process(RetryPolicy::builder()))
                    .seed(seed)
                    .build();
                Self::Stagger(RetryLayer::new(policy.expect("a valid policy")))
            }
        }
    }

    /// One GET request through the proxy on `network`, retried as the client does.
    pub(super) async fn call(&self, network: &Rc<RefCell<Network<Proxy>>>) -> Ended {
        let uri = Uri::from_static(URI);
        // A connection of the call's own: a client may have several calls in flight, and
        // `SimulatedServer` carries one exchange at a time.
        let server = FirstAnswer::new(SimulatedServer::connect(network));
        let first = Rc::clone(&server.first);
        let first_sent = Rc::clone(&server.first_sent);
        let started = Instant::now();
        let (ok, attempts, why) = match self {
            Self::Peer(peer) => {
                // No time limit: the proxy answers every attempt at once.
                let ended = peer.call(server, &uri, None).await;
                let ok = ended.status == Some(StatusCode::OK);
                let why = || ended.why.unwrap_or("unknown").to_string();
                (ok, ended.attempts, (!ok).then(why))
            }
            Self::Stagger(layer) => {
                let mut request = Request::new(());
                *request.uri_mut() = uri;
                let (ok, info) = match layer.layer(server).oneshot(request).await {
                    Ok(response) => {
                        let info = response.extensions().get::<RetryInfo>().cloned();
                        (
                            response.status() == StatusCode::OK,
                            info.unwrap_or_default(),
                        )
                    }
                    // The proxy always answers at once, but a time limit of some future default
                    // might still end a call with an error: it failed, with the attempts it made.
                    Err(error) => (false, error.info()),
                };
                let why = || {
                    info.stop_reason()
                        .map_or("unknown".into(), |r| r.to_string())
                };
                (ok, info.attempts(), (!ok).then(why))
            }
        };
        Ended {
            ok,
            attempts,
            met_outage: first.get() == Some(StatusCode::BAD_GATEWAY),
            held: first_sent
                .get()
                .is_none_or(|sent| sent - started >= Duration::from_millis(10)),
            why,
        }
    }
}

/// A connection to the proxy that keeps the status of the first answer it carries: the client's
/// retries cannot tell it, and whether the first attempt met the outage is what sorts the requests.
#[derive(Clone)]
struct FirstAnswer {
    server: SimulatedServer<Proxy>,
    first: Rc<Cell<Option<StatusCode>>>,
    /// When the first attempt went.
    first_sent: Rc<Cell<Option<Instant>>>,
}

impl FirstAnswer {
    fn new(server: SimulatedServer<Proxy>) -> Self {
        Self {
            server,
            first: Rc::default(),
            first_sent: Rc::default(),
        }
    }
}

impl Service<Request<()>> for FirstAnswer {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = FirstReply;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.server.poll_ready(cx)
    }

    fn call(&mut self, request: Request<()>) -> FirstReply {
        if self.first_sent.get().is_none() {
            self.first_sent.set(Some(Instant::now()));
        }
        FirstReply {
            reply: self.server.call(request),
            first: Rc::clone(&self.first),
        }
    }
}

struct FirstReply {
    reply: Reply<Proxy>,
    first: Rc<Cell<Option<StatusCode>>>,
}

impl Future for FirstReply {
    type Output = Result<Response<()>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let answer = Pin::new(&mut self.reply).poll(cx);
        if let Poll::Ready(Ok(response)) = &answer
            && self.first.get().is_none()
        {
            self.first.set(Some(response.status()));
        }
        answer
    }
}
