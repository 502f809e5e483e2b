//! A server with one FIFO queue and a fixed capacity, behind a simulated network whose clients may
//! abandon an attempt: the server does the work all the same.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Request, Response};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::time::Instant;
use tower::Service;

use super::SLOT;
use crate::sim::hop_ms;

/// The server's capacity over time: `normal` requests/s, `reduced` from `from` until `until`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Capacity {
    pub(crate) normal: f64,
    pub(crate) reduced: f64,
    pub(crate) from: Duration,
    pub(crate) until: Duration,
}

impl Capacity {
    fn at(&self, t: Duration) -> f64 {
        if (self.from..self.until).contains(&t) {
            self.reduced
        } else {
            self.normal
        }
    }
}

/// One worker serving requests in the order they arrive, each in `1 / capacity` seconds (the capacity
/// when its service starts), with a queue of no bound. It never learns that a client gave up: it
/// serves the request when its turn comes, and the answer goes back to no one.
pub(crate) struct FifoServer {
    capacity: Capacity,
    /// When the worker is done with every request queued so far, from the start.
    free_at: Duration,
    /// Attempts arrived per [`SLOT`].
    pub(crate) arrivals: Vec<u32>,
}

impl FifoServer {
    pub(crate) fn new(capacity: Capacity) -> Self {
        Self {
            capacity,
            free_at: Duration::ZERO,
            arrivals: Vec::new(),
        }
    }

    /// Queues a request arriving at `now`; returns when its service ends.
    pub(crate) fn enqueue(&mut self, now: Duration) -> Duration {
        count(&mut self.arrivals, now);
        let start = now.max(self.free_at);
        let service = Duration::from_nanos((1e9 / self.capacity.at(start)).round() as u64);
        self.free_at = start + service;
        self.free_at
    }
}

/// Adds one to the count of the [`SLOT`] `at` falls in.
fn count(slots: &mut Vec<u32>, at: Duration) {
    let slot = (at.as_nanos() / SLOT.as_nanos()) as usize;
    if slots.len() <= slot {
        slots.resize(slot + 1, 0);
    }
    slots[slot] += 1;
}

/// One attempt: a request and its answer, shared by the client's future and the network.
#[derive(Default)]
struct Exchange {
    answered: Cell<bool>,
    /// The client stopped waiting (its future was dropped).
    abandoned: Cell<bool>,
    waker: Cell<Option<Waker>>,
}

enum Message {
    Request(Rc<Exchange>),
    Response(Rc<Exchange>),
}

/// The network and the server, as `sim::Network` but for a server that answers later, and for
/// attempts a client may abandon: a hop of |Normal(1 ms, sd 0.2 ms)| each way (`sim::hop_ms`), every
/// message in a calendar of milliseconds, one task delivering them on one tokio timer.
pub(crate) struct QueueNetwork {
    pub(crate) server: FifoServer,
    start: Instant,
    rng: SmallRng,
    outbox: Vec<Rc<Exchange>>,
    /// Messages by the millisecond they arrive: `calendar[k]` at `first + k` after `start`.
    calendar: VecDeque<Vec<Message>>,
    first: u64,
    spare: Vec<Vec<Message>>,
    waker: Option<Waker>,
    /// Answers that reached a client still waiting for them, per [`SLOT`].
    pub(crate) useful: Vec<u32>,
    /// Answers that reached a client who had given up on them, per [`SLOT`].
    pub(crate) wasted: Vec<u32>,
}

impl QueueNetwork {
    pub(crate) fn new(server: FifoServer, start: Instant, seed: u64) -> Self {
        Self {
            server,
            start,
            rng: SmallRng::seed_from_u64(seed),
            outbox: Vec::new(),
            calendar: VecDeque::new(),
            first: 0,
            spare: Vec::new(),
            waker: None,
            useful: Vec::new(),
            wasted: Vec::new(),
        }
    }

    /// Puts `message` on the wire in millisecond `now`; it arrives a hop later.
    fn transmit(&mut self, now: u64, message: Message) {
        if self.calendar.is_empty() {
            self.first = now;
        }
        let index = (now + hop_ms(&mut self.rng) - self.first) as usize;
        while self.calendar.len() <= index {
            let spare = self.spare.pop().unwrap_or_default();
            self.calendar.push_back(spare);
        }
        self.calendar[index].push(message);
    }

    /// Delivers the messages due in millisecond `self.first`.
    fn deliver_first(&mut self) {
        let Some(mut due) = self.calendar.pop_front() else {
            return;
        };
        let now = self.first;
        self.first += 1;
        for message in due.drain(..) {
            match message {
                Message::Request(exchange) => {
                    let done = self.server.enqueue(Duration::from_millis(now));
                    // The answer leaves in the millisecond its service ends in.
                    let leaves = done.as_nanos().div_ceil(1_000_000) as u64;
                    self.transmit(leaves, Message::Response(exchange));
                }
                Message::Response(exchange) => {
                    let at = Duration::from_millis(now);
                    if exchange.abandoned.get() {
                        count(&mut self.wasted, at);
                    } else {
                        count(&mut self.useful, at);
                        exchange.answered.set(true);
                        if let Some(waker) = exchange.waker.take() {
                            waker.wake();
                        }
                    }
                }
            }
        }
        self.spare.push(due);
    }

    /// Sends and delivers messages as their time comes, forever (as `sim::Network::run`).
    pub(crate) async fn run(network: Rc<RefCell<Self>>) {
        let start = network.borrow().start;
        let timer = tokio::time::sleep_until(start);
        tokio::pin!(timer);
        let mut armed = None;
        std::future::poll_fn(|cx| {
            let mut this = network.borrow_mut();
            let mut now = start.elapsed().as_millis() as u64;
            loop {
                for exchange in std::mem::take(&mut this.outbox) {
                    this.transmit(now, Message::Request(exchange));
                }
                while this.first <= now && !this.calendar.is_empty() {
                    this.deliver_first();
                }
                let Some(ahead) = this.calendar.iter().position(|due| !due.is_empty()) else {
                    this.calendar.clear();
                    this.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                };
                let next = this.first + ahead as u64;
                if armed != Some(next) {
                    armed = Some(next);
                    timer.as_mut().reset(start + Duration::from_millis(next));
                }
                if timer.as_mut().poll(cx).is_pending() {
                    this.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
                now = next;
            }
        })
        .await
    }
}

/// A client's connection to the queueing server; every attempt is an exchange of its own.
#[derive(Clone)]
pub(crate) struct QueueService(pub(crate) Rc<RefCell<QueueNetwork>>);

impl Service<Request<()>> for QueueService {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = QueueReply;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<()>) -> QueueReply {
        let exchange = Rc::new(Exchange::default());
        let mut network = self.0.borrow_mut();
        network.outbox.push(Rc::clone(&exchange));
        if let Some(waker) = network.waker.take() {
            waker.wake();
        }
        QueueReply { exchange }
    }
}

/// The answer to one attempt: a `200` once it has come back. Dropped before, the attempt is abandoned.
pub(crate) struct QueueReply {
    exchange: Rc<Exchange>,
}

impl Future for QueueReply {
    type Output = Result<Response<()>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.exchange.answered.get() {
            return Poll::Ready(Ok(Response::new(())));
        }
        self.exchange.waker.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

impl Drop for QueueReply {
    fn drop(&mut self) {
        if !self.exchange.answered.get() {
            self.exchange.abandoned.set(true);
        }
    }
}
