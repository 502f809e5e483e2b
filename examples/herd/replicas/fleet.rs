//! Three replicas behind one name, without I/O: each a server on a simulated network of its own
//! that answers `200` at once, and, while it is bad, refuses, drops SYNs, answers `503` or answers
//! ten times slower; the connections to each; what each call's attempts reached (its [`Trail`]);
//! and the client of today, which knows the name alone and pools connections per name, as reqwest
//! and hyper-util do.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tower::Service;

use crate::server::BUCKET;
use crate::sim::{Model, Network, Reply, SimulatedServer};

/// How many replicas the name has.
pub(crate) const REPLICAS: usize = 3;

/// What a bad replica does to an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Answered,
    Refused,
    Dropped,
    Unavailable,
    /// Answers after this much more server time.
    Slow(Duration),
}

/// One replica: `while_bad` during `bad`, `200` at once otherwise. Counts what reaches it.
pub(crate) struct Replica {
    bad: Range<Duration>,
    while_bad: Fate,
    /// Attempts that reached it per [`BUCKET`].
    pub(crate) arrivals: Vec<u32>,
}

impl Replica {
    pub(crate) fn new(bad: Range<Duration>, while_bad: Fate) -> Self {
        Self {
            bad,
            while_bad,
            arrivals: Vec::new(),
        }
    }
}

impl Model for Replica {
    type Answer = Fate;

    fn answer(&mut self, now: Duration) -> Fate {
        let bucket = (now.as_nanos() / BUCKET.as_nanos()) as usize;
        if self.arrivals.len() <= bucket {
            self.arrivals.resize(bucket + 1, 0);
        }
        self.arrivals[bucket] += 1;
        if self.bad.contains(&now) {
            self.while_bad
        } else {
            Fate::Answered
        }
    }

    fn respond(fate: Fate) -> Response<()> {
        let mut response = Response::new(());
        response.extensions_mut().insert(fate);
        response
    }
}

/// What one call's attempts reached: each attempt's replica, and whether it failed. In the
/// request's extensions, shared by every copy the retry layer makes of it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Trail(pub(crate) Arc<Mutex<Vec<(usize, bool)>>>);

impl Trail {
    /// Attempts that went to the replica the attempt before them failed on.
    pub(crate) fn back_to_failed(&self) -> usize {
        let trail = self.0.lock().expect("not poisoned");
        trail
            .windows(2)
            .filter(|w| w[0].1 && w[0].0 == w[1].0)
            .count()
    }

    fn start(request: &Request<()>, replica: usize) -> Option<(Self, usize)> {
        let trail = request.extensions().get::<Self>()?.clone();
        let index = {
            let mut attempts = trail.0.lock().expect("not poisoned");
            attempts.push((replica, true));
            attempts.len() - 1
        };
        Some((trail, index))
    }

    fn answered(&self, index: usize, failed: bool) {
        if let Some(entry) = self.0.lock().expect("not poisoned").get_mut(index) {
            entry.1 = failed;
        }
    }
}

/// The networks of the three replicas.
pub(crate) type Networks = Rc<[Rc<RefCell<Network<Replica>>>]>;

/// A connection to replica `index`: each attempt on an exchange of its own. Its error is the
/// `io::Error` a refused connect gives.
#[derive(Clone)]
pub(crate) struct Connection {
    networks: Networks,
    pub(crate) index: usize,
}

impl Connection {
    pub(crate) fn new(networks: &Networks, index: usize) -> Self {
        Self {
            networks: Rc::clone(networks),
            index,
        }
    }
}

impl Service<Request<()>> for Connection {
    type Response = Response<()>;
    type Error = io::Error;
    type Future = Attempt;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<()>) -> Attempt {
        let trail = Trail::start(&request, self.index);
        let mut server = SimulatedServer::connect(&self.networks[self.index]);
        Attempt {
            reply: Some(server.call(request)),
            slow: None,
            trail,
        }
    }
}

/// One attempt to one replica: its answer, a refusal, a `503`, a slow `200`, or never an end.
pub(crate) struct Attempt {
    reply: Option<Reply<Replica>>,
    slow: Option<Pin<Box<tokio::time::Sleep>>>,
    trail: Option<(Trail, usize)>,
}

impl Attempt {
    fn end(&self, failed: bool) {
        if let Some((trail, index)) = &self.trail {
            trail.answered(*index, failed);
        }
    }
}

impl Future for Attempt {
    type Output = io::Result<Response<()>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(slow) = self.slow.as_mut() {
            std::task::ready!(slow.as_mut().poll(cx));
            self.end(false);
            return Poll::Ready(Ok(Response::new(())));
        }
        let Some(reply) = self.reply.as_mut() else {
            return Poll::Pending;
        };
        let Poll::Ready(Ok(mut response)) = Pin::new(reply).poll(cx) else {
            return Poll::Pending;
        };
        match response.extensions_mut().remove::<Fate>() {
            Some(Fate::Refused) => {
                self.end(true);
                Poll::Ready(Err(io::ErrorKind::ConnectionRefused.into()))
            }
            Some(Fate::Dropped) => {
                self.reply = None;
                Poll::Pending
            }
            Some(Fate::Unavailable) => {
                self.end(true);
                *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                Poll::Ready(Ok(response))
            }
            Some(Fate::Slow(extra)) => {
                self.reply = None;
                let mut sleep = Box::pin(tokio::time::sleep(extra));
                if sleep.as_mut().poll(cx).is_ready() {
                    self.end(false);
                    return Poll::Ready(Ok(Response::new(())));
                }
                self.slow = Some(sleep);
                Poll::Pending
            }
            Some(Fate::Answered) | None => {
                self.end(false);
                Poll::Ready(Ok(response))
            }
        }
    }
}

/// Today's client: it knows the name alone. It pools connections per name (reqwest and
/// hyper-util key their pool by scheme and authority): an attempt takes the most recent idle
/// connection, whichever replica it reaches; without one, a new connection walks the resolver's
/// addresses in order, the next after a refused one, and hangs on one that drops SYNs (reqwest sets
/// no connect timeout by default). A connection goes back to the pool when its answer came, and is
/// dropped on an error.
#[derive(Clone)]
pub(crate) struct NameClient {
    networks: Networks,
    /// Idle connections, by the replica they reach; the most recent last.
    idle: Rc<RefCell<Vec<usize>>>,
}

impl NameClient {
    pub(crate) fn new(networks: &Networks) -> Self {
        Self {
            networks: Rc::clone(networks),
            idle: Rc::default(),
        }
    }
}

impl Service<Request<()>> for NameClient {
    type Response = Response<()>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Response<()>>>>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<()>) -> Self::Future {
        let pooled = self.idle.borrow_mut().pop();
        let networks = Rc::clone(&self.networks);
        let idle = Rc::clone(&self.idle);
        Box::pin(async move {
            let mut request = Some(request);
            // A pooled connection's attempt fails as it fails; a new one walks the addresses.
            let order: Vec<usize> = match pooled {
                Some(replica) => vec![replica],
                None => (0..REPLICAS).collect(),
            };
            let mut last = None;
            for replica in order {
                let Some(sent) = request.take() else { break };
                let copy = copy_of(&sent);
                let answer = Connection::new(&networks, replica).call(sent).await;
                match answer {
                    Ok(response) => {
                        idle.borrow_mut().push(replica);
                        return Ok(response);
                    }
                    Err(error) if pooled.is_none() => {
                        // Refused: the next address, one round trip later.
                        request = Some(copy);
                        last = Some(error);
                    }
                    Err(error) => {
                        return Err(io::Error::new(io::ErrorKind::ConnectionReset, error));
                    }
                }
            }
            Err(last.unwrap_or_else(|| io::ErrorKind::ConnectionRefused.into()))
        })
    }
}

/// A copy of a request with no body, its extensions (the call's trail) kept.
fn copy_of(request: &Request<()>) -> Request<()> {
    let mut copy = Request::new(());
    *copy.uri_mut() = request.uri().clone();
    *copy.method_mut() = request.method().clone();
    *copy.extensions_mut() = request.extensions().clone();
    copy
}
