//! The host and the client's connections to it, without I/O: what an attempt meets while the host is
//! down (a refusal, or nothing at all), and a `200` at once the rest of the time.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::ops::Range;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tower::Service;

use crate::server::BUCKET;
use crate::sim::{Model, Network, Reply, SimulatedServer};

/// What becomes of an attempt that reaches the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// `200`, at once.
    Answered,
    /// The connection is refused: a reset comes back over the network, and the client's connect
    /// fails with an `io::Error` of kind `ConnectionRefused`.
    Refused,
    /// The SYN is dropped: nothing comes back, and the attempt waits until the client's time limit.
    Dropped,
}

/// A host that meets every attempt with `while_down` during `down` and answers `200` at once the
/// rest of the time, with capacity to spare. It counts every attempt that reaches it, down or not.
pub(crate) struct Host {
    down: Range<Duration>,
    while_down: Fate,
    /// Attempts that reached it per [`BUCKET`] since the start.
    pub(crate) arrivals: Vec<u32>,
}

impl Host {
    pub(crate) fn new(down: Range<Duration>, while_down: Fate) -> Self {
        Self {
            down,
            while_down,
            arrivals: Vec::new(),
        }
    }
}

impl Model for Host {
    type Answer = Fate;

    fn answer(&mut self, now: Duration) -> Fate {
        let bucket = (now.as_nanos() / BUCKET.as_nanos()) as usize;
        if self.arrivals.len() <= bucket {
            self.arrivals.resize(bucket + 1, 0);
        }
        self.arrivals[bucket] += 1;
        if self.down.contains(&now) {
            self.while_down
        } else {
            Fate::Answered
        }
    }

    /// The fate travels back in the response's extensions; [`Connection`] turns it into what the
    /// client sees.
    fn respond(fate: Fate) -> Response<()> {
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::OK;
        response.extensions_mut().insert(fate);
        response
    }
}

/// The client's connection to the host: each attempt on a connection of its own (the simulated
/// network carries one exchange at a time per connection, and a call may have a hung attempt and a
/// retry in flight at once). Its error is the `io::Error` of a refused connect, which stagger's
/// classifier reads as a connect error.
#[derive(Clone)]
pub(crate) struct Connection {
    network: Rc<RefCell<Network<Host>>>,
}

impl Connection {
    pub(crate) fn new(network: &Rc<RefCell<Network<Host>>>) -> Self {
        Self {
            network: Rc::clone(network),
        }
    }
}

impl Service<Request<()>> for Connection {
    type Response = Response<()>;
    type Error = io::Error;
    type Future = Attempt;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<()>) -> Attempt {
        let mut server = SimulatedServer::connect(&self.network);
        let reply = server.call(request);
        Attempt { reply: Some(reply) }
    }
}

/// One attempt: the host's answer, a refused connection, or, for a dropped SYN, never an end.
pub(crate) struct Attempt {
    /// `None` once the SYN turned out dropped: nothing will come back.
    reply: Option<Reply<Host>>,
}

impl Future for Attempt {
    type Output = Result<Response<()>, io::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(reply) = self.reply.as_mut() else {
            return Poll::Pending;
        };
        let Poll::Ready(Ok(mut response)) = Pin::new(reply).poll(cx) else {
            return Poll::Pending;
        };
        match response.extensions_mut().remove::<Fate>() {
            Some(Fate::Refused) => Poll::Ready(Err(io::ErrorKind::ConnectionRefused.into())),
            // No waker is kept: only the client's time limit ends this attempt.
            Some(Fate::Dropped) => {
                self.reply = None;
                Poll::Pending
            }
            Some(Fate::Answered) | None => Poll::Ready(Ok(response)),
        }
    }
}
