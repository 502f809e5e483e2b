//! The tail scenario's server: what each attempt meets on the way (its hops and its service time), a
//! pool of workers serving in arrival order, and a `tower::Service` over both for the `RetryLayer`.
//!
//! Each attempt is carried to the server by a task of its own, so that the server gets an attempt the
//! client has dropped on the way: it does the work all the same, as a server that does not notice a
//! closed connection would, and the tables count it.

use std::cell::{Cell, RefCell};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker, ready};
use std::time::Duration;

use http::{Request, Response};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::time::{Instant, Sleep};
use tower::Service;

use crate::sim::{hop_ms, mix};

/// The service time of a slow attempt.
pub(super) const SLOW: Duration = Duration::from_secs(1);
/// The share of attempts that are slow, each on its own: a hedge is slow with the same chance.
pub(super) const SLOW_SHARE: f64 = 0.01;
/// The median of the other attempts' service time, which is log-normal.
pub(super) const FAST_MEDIAN: Duration = Duration::from_millis(8);
/// The standard deviation of the logarithm of a fast service time: its 95th percentile is
/// `FAST_MEDIAN × e^(1.645 σ)` = 18.2 ms, its 99.9th 37.6 ms.
pub(super) const FAST_SIGMA: f64 = 0.5;

/// What one attempt meets, drawn from the attempt's own seed: every row's first attempts meet the
/// same, so the rows differ only in what the clients do about it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Draw {
    /// The hop to the server, in whole milliseconds (`sim::hop_ms`: 1 or 2, rarely 3).
    pub(super) out_ms: u64,
    pub(super) service: Duration,
    /// The hop back.
    pub(super) back_ms: u64,
}

impl Draw {
    /// The draw of attempt `attempt` (0 the first, 1 its hedge) of request `request`, in a run whose
    /// latency stream is `seed`.
    pub(super) fn new(seed: u64, request: u64, attempt: u32) -> Self {
        let mut rng = SmallRng::seed_from_u64(mix(seed ^ mix(request << 2 | u64::from(attempt))));
        let out_ms = hop_ms(&mut rng);
        let service = if rng.random::<f64>() < SLOW_SHARE {
            SLOW
        } else {
            fast(&mut rng)
        };
        Self {
            out_ms,
            service,
            back_ms: hop_ms(&mut rng),
        }
    }

    pub(super) fn slow(&self) -> bool {
        self.service == SLOW
    }
}

/// A fast service time: log-normal, median [`FAST_MEDIAN`], σ [`FAST_SIGMA`] (Box–Muller).
fn fast(rng: &mut SmallRng) -> Duration {
    let u: f64 = 1.0 - rng.random::<f64>();
    let v: f64 = rng.random();
    let z = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
    FAST_MEDIAN.mul_f64((FAST_SIGMA * z).exp())
}

/// `workers` serving attempts in the order they arrive, each for its service time; an attempt that
/// finds them all busy waits for the first to be free.
pub(super) struct Pool {
    /// When each worker is done with what it has been given, from the start.
    free_at: BinaryHeap<Reverse<Duration>>,
    pub(super) workers: usize,
    /// The service time of every attempt queued so far.
    pub(super) work: Duration,
    /// Attempts that waited for a worker.
    pub(super) queued: u64,
}

impl Pool {
    pub(super) fn new(workers: usize) -> Self {
        Self {
            free_at: std::iter::repeat_n(Reverse(Duration::ZERO), workers).collect(),
            workers,
            work: Duration::ZERO,
            queued: 0,
        }
    }

    /// Queues an attempt arriving at `now` that needs `service`; returns when its service ends.
    pub(super) fn enqueue(&mut self, now: Duration, service: Duration) -> Duration {
        let Reverse(free) = self.free_at.pop().expect("at least one worker");
        if free > now {
            self.queued += 1;
        }
        let done = free.max(now) + service;
        self.free_at.push(Reverse(done));
        self.work += service;
        done
    }
}

/// What happened to the attempts of a row.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counts {
    /// Attempts that reached the server.
    pub(super) served: u64,
    /// Attempts sent, by the clients' services.
    pub(super) sent: u64,
    /// Hedges whose answer the client took: the hedge won the race.
    pub(super) hedges_won: u64,
    /// Attempts dropped by their client before it took their answer.
    pub(super) cancelled: u64,
    /// Attempts that took [`SLOW`].
    pub(super) slow: u64,
    /// Slow attempts dropped before their answer was taken: the hedge won.
    pub(super) slow_cancelled: u64,
}

/// The server and the network to it, shared by every client of a row.
pub(super) struct Backend {
    start: Instant,
    /// The run's latency stream: see [`Draw::new`].
    seed: u64,
    pub(super) pool: RefCell<Pool>,
    pub(super) counts: Cell<Counts>,
    /// Attempts on their way to the server, whose client may have gone.
    in_flight: Cell<usize>,
}

impl Backend {
    pub(super) fn new(start: Instant, seed: u64, workers: usize) -> Self {
        Self {
            start,
            seed,
            pool: RefCell::new(Pool::new(workers)),
            counts: Cell::default(),
            in_flight: Cell::new(0),
        }
    }

    fn count(&self, change: impl FnOnce(&mut Counts)) {
        let mut counts = self.counts.get();
        change(&mut counts);
        self.counts.set(counts);
    }

    /// Waits until every attempt sent has reached the server.
    pub(super) async fn drain(&self) {
        while self.in_flight.get() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Carries `attempt` to the server and queues it there; tells its client when the answer will be
    /// back.
    async fn carry(self: Rc<Self>, attempt: Rc<Attempt>, draw: Draw) {
        tokio::time::sleep(Duration::from_millis(draw.out_ms)).await;
        let now = self.start.elapsed();
        let done = self.pool.borrow_mut().enqueue(now, draw.service);
        self.count(|c| c.served += 1);
        self.in_flight.set(self.in_flight.get() - 1);
        // The answer leaves in the millisecond its service ends in, as in the other scenarios.
        let leaves = Duration::from_millis(done.as_nanos().div_ceil(1_000_000) as u64);
        let back = leaves + Duration::from_millis(draw.back_ms);
        attempt.back.set(Some(self.start + back));
        if let Some(waker) = attempt.waker.take() {
            waker.wake();
        }
    }
}

/// One attempt, shared by the client's future and the task that carries it.
struct Attempt {
    /// When the answer is back at the client, once the server has the attempt.
    back: Cell<Option<Instant>>,
    /// The client took the answer.
    taken: Cell<bool>,
    waker: Cell<Option<Waker>>,
    /// A hedge, not a first attempt.
    hedge: bool,
    slow: bool,
}

/// One request's connection to the server, as the `RetryLayer` sees it: each call is an attempt of
/// the request, the first or its hedge (through a clone, which shares the count).
#[derive(Clone)]
pub(super) struct TailService {
    backend: Rc<Backend>,
    request: u64,
    attempts: Rc<Cell<u32>>,
}

impl TailService {
    pub(super) fn new(backend: &Rc<Backend>, request: u64) -> Self {
        Self {
            backend: Rc::clone(backend),
            request,
            attempts: Rc::default(),
        }
    }
}

impl Service<Request<()>> for TailService {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = Reply;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<()>) -> Reply {
        let index = self.attempts.get();
        self.attempts.set(index + 1);
        let draw = Draw::new(self.backend.seed, self.request, index);
        let attempt = Rc::new(Attempt {
            back: Cell::new(None),
            taken: Cell::new(false),
            waker: Cell::new(None),
            hedge: index > 0,
            slow: draw.slow(),
        });
        let backend = &self.backend;
        backend.count(|c| {
            c.sent += 1;
            c.slow += u64::from(draw.slow());
        });
        backend.in_flight.set(backend.in_flight.get() + 1);
        let carried = Rc::clone(backend).carry(Rc::clone(&attempt), draw);
        tokio::task::spawn_local(carried);
        Reply {
            attempt,
            backend: Rc::clone(backend),
            back: None,
        }
    }
}

/// The answer to one attempt: a `200` once it has come back. Dropped before, the attempt is
/// cancelled; the server, which is not told, serves it all the same.
///
/// The reply waits for the answer on a timer of its own, not on a wake-up from the task that carried
/// the attempt: an answer due in the millisecond a hedge is due is then ready when the race looks, and
/// wins. It should: it arrived during that millisecond, and the hedge is due at its end.
pub(super) struct Reply {
    attempt: Rc<Attempt>,
    backend: Rc<Backend>,
    back: Option<Pin<Box<Sleep>>>,
}

impl Future for Reply {
    type Output = Result<Response<()>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let attempt = &this.attempt;
        if this.back.is_none() {
            let Some(back) = attempt.back.get() else {
                attempt.waker.set(Some(cx.waker().clone()));
                return Poll::Pending;
            };
            this.back = Some(Box::pin(tokio::time::sleep_until(back)));
        }
        ready!(this.back.as_mut().expect("set above").as_mut().poll(cx));
        if !attempt.taken.replace(true) && attempt.hedge {
            this.backend.count(|c| c.hedges_won += 1);
        }
        Poll::Ready(Ok(Response::new(())))
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if !self.attempt.taken.get() {
            let slow = self.attempt.slow;
            self.backend.count(|c| {
                c.cancelled += 1;
                c.slow_cancelled += u64::from(slow);
            });
        }
    }
}
