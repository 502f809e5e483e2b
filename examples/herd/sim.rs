//! The network between the clients and a server model, simulated in virtual time, and the threads
//! the rows run on.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::{Request, Response};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::Service;

/// A server's logic, without I/O: what it answers a request that reaches it `now` after the start.
pub(crate) trait Model {
    /// What the server decided, carried back over the network.
    type Answer;

    /// Answers a request arriving `now` after the start.
    fn answer(&mut self, now: Duration) -> Self::Answer;

    /// The response the client receives for `answer`.
    fn respond(answer: Self::Answer) -> Response<()>;
}

/// The server behind a simulated network: a hop of |Normal(1 ms, sd 0.2 ms)| each way.
///
/// Every message in flight waits in a calendar of milliseconds, and one task (`Network::run`) delivers
/// them on one tokio timer. A `tokio::time::sleep` per hop would behave the same — tokio's timer rounds
/// every deadline up to the next millisecond too — but costs two timers per attempt, and the no-delay row
/// of a 10 000-client herd makes ten million attempts.
///
/// One per client ([`SimulatedServer::connect`]); one current-thread runtime runs them all, so
/// `Rc<RefCell<_>>`.
pub(crate) struct SimulatedServer<M: Model> {
    network: Rc<RefCell<Network<M>>>,
    /// The client's exchange with the server, used again by each of its attempts: a client has one
    /// request in flight at a time, and an allocation per attempt showed in the profile. Clones (the
    /// layer keeps one per call) share it.
    exchange: Rc<Exchange<M::Answer>>,
}

impl<M: Model> Clone for SimulatedServer<M> {
    fn clone(&self) -> Self {
        Self {
            network: Rc::clone(&self.network),
            exchange: Rc::clone(&self.exchange),
        }
    }
}

impl<M: Model> SimulatedServer<M> {
    /// A client's own connection to the server on `network`.
    pub(crate) fn connect(network: &Rc<RefCell<Network<M>>>) -> Self {
        Self {
            network: Rc::clone(network),
            exchange: Rc::default(),
        }
    }
}

pub(crate) struct Network<M: Model> {
    pub(crate) server: M,
    start: Instant,
    rng: SmallRng,
    /// Requests sent since the delivering task last ran. They leave when it next runs, which is the
    /// instant they were sent: virtual time stands still while a task can run.
    outbox: Vec<Rc<Exchange<M::Answer>>>,
    /// Messages in flight by the millisecond they arrive: `calendar[k]` at `first + k` after `start`.
    calendar: VecDeque<Vec<Message<M::Answer>>>,
    first: u64,
    /// Emptied vectors, kept for their capacity.
    spare: Vec<Vec<Message<M::Answer>>>,
    /// The delivering task, while it waits.
    waker: Option<Waker>,
}

enum Message<A> {
    /// A request reaches the server.
    Request(Rc<Exchange<A>>),
    /// The server's answer reaches the client.
    Response(Rc<Exchange<A>>, A),
}

/// One request–response exchange at a time, shared by the client's future and the network.
struct Exchange<A> {
    /// A request was sent and its answer not yet taken.
    busy: Cell<bool>,
    answer: Cell<Option<A>>,
    waker: Cell<Option<Waker>>,
}

impl<A> Default for Exchange<A> {
    fn default() -> Self {
        Self {
            busy: Cell::new(false),
            answer: Cell::new(None),
            waker: Cell::new(None),
        }
    }
}

impl<M: Model> Network<M> {
    pub(crate) fn new(server: M, start: Instant, seed: u64) -> Self {
        Self {
            server,
            start,
            rng: SmallRng::seed_from_u64(seed),
            outbox: Vec::new(),
            calendar: VecDeque::new(),
            first: 0,
            spare: Vec::new(),
            waker: None,
        }
    }

    /// One hop, in whole milliseconds: see [`hop_ms`].
    fn hop_ms(&mut self) -> u64 {
        hop_ms(&mut self.rng)
    }

    /// A client sends a request.
    fn send(&mut self, exchange: Rc<Exchange<M::Answer>>) {
        self.outbox.push(exchange);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Puts `message` on the wire in millisecond `now` (counted from `start`, like the calendar). It
    /// arrives in the millisecond its hop ends in, rounded up as a tokio timer would fire, and never in
    /// the one it leaves in.
    fn transmit(&mut self, now: u64, message: Message<M::Answer>) {
        if self.calendar.is_empty() {
            self.first = now;
        }
        let arrival = now + self.hop_ms();
        let index = (arrival - self.first) as usize;
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
                    let answer = self.server.answer(Duration::from_millis(now));
                    self.transmit(now, Message::Response(exchange, answer));
                }
                Message::Response(exchange, answer) => {
                    exchange.answer.set(Some(answer));
                    if let Some(waker) = exchange.waker.take() {
                        waker.wake();
                    }
                }
            }
        }
        self.spare.push(due);
    }

    /// Sends and delivers messages as their time comes, forever.
    pub(crate) async fn run(network: Rc<RefCell<Self>>) {
        let start = network.borrow().start;
        let timer = tokio::time::sleep_until(start);
        tokio::pin!(timer);
        let mut armed = None;
        std::future::poll_fn(|cx| {
            let mut this = network.borrow_mut();
            let mut now = start.elapsed().as_millis() as u64;
            loop {
                let mut outbox = std::mem::take(&mut this.outbox);
                for exchange in outbox.drain(..) {
                    this.transmit(now, Message::Request(exchange));
                }
                this.outbox = outbox;
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

impl<M: Model> Service<Request<()>> for SimulatedServer<M> {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = Reply<M>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<()>) -> Reply<M> {
        let exchange = Rc::clone(&self.exchange);
        assert!(
            !exchange.busy.replace(true),
            "one request at a time per client"
        );
        self.network.borrow_mut().send(Rc::clone(&exchange));
        Reply { exchange }
    }
}

/// The response future of [`SimulatedServer`]: ready when the answer has come back over the network.
pub(crate) struct Reply<M: Model> {
    exchange: Rc<Exchange<M::Answer>>,
}

impl<M: Model> Future for Reply<M> {
    type Output = Result<Response<()>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.exchange.answer.take() {
            Some(answer) => {
                self.exchange.busy.set(false);
                Poll::Ready(Ok(M::respond(answer)))
            }
            None => {
                self.exchange.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}

/// One hop, in whole milliseconds: |Normal(1 ms, sd 0.2 ms)| rounded up, at least 1.
///
/// A message leaves at the start of a millisecond and is delivered in the millisecond its hop ends
/// in, so only the rounded hop matters, and it is drawn from its own distribution: 1 ms when the hop
/// is at most 1 ms (probability 1/2), 3 ms when it is over 2 ms (`P(Z > 5)`, 2.9e-7), 2 ms
/// otherwise (longer hops, `P(Z > 10)` = 7.6e-24, are left out). Drawing the normal itself (Box–Muller:
/// a logarithm, a sine and a cosine) cost a sixth of the whole simulation.
pub(crate) fn hop_ms(rng: &mut SmallRng) -> u64 {
    /// `P(Z > 5)` for a standard normal `Z`, times 2^64.
    const OVER_2_MS: u64 = (2.866_515_718_791_939e-7 * 18_446_744_073_709_551_616.0) as u64;
    let draw: u64 = rng.random();
    if draw < 1 << 63 {
        1
    } else if draw < u64::MAX - OVER_2_MS {
        2
    } else {
        3
    }
}

/// Runs each job in virtual time on `threads` threads, each with its own paused current-thread
/// runtime handed to `run`, longest first as listed, and hands the results to `done` in the order of
/// `jobs`, each as soon as it and every job before it are finished.
///
/// Rows are independent simulations, each seeded by its scenario and its clients alone, so the figures
/// do not depend on the thread that ran them; the no-delay row is most of the work.
pub(crate) fn run_in_parallel<J: Sync, F: Send>(
    jobs: &[J],
    threads: usize,
    run: impl Fn(&Runtime, &J) -> F + Sync,
    mut done: impl FnMut(usize, F),
) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..threads.min(jobs.len()) {
            let sender = sender.clone();
            let next = &next;
            let run = &run;
            scope.spawn(move || {
                loop {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(job) = jobs.get(index) else {
                        return;
                    };
                    // A runtime of its own for each job: its paused clock starts at zero, so that
                    // tokio's timer, which rounds a deadline up to its next millisecond, rounds the
                    // same whichever jobs ran on this thread before.
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_time()
                        .start_paused(true)
                        .build()
                        .expect("a current-thread runtime");
                    let figures = run(&runtime, job);
                    if sender.send((index, figures)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(sender);
        let mut finished: Vec<Option<F>> = jobs.iter().map(|_| None).collect();
        let mut printed = 0;
        for (index, figures) in receiver {
            finished[index] = Some(figures);
            while let Some(figures) = finished.get_mut(printed).and_then(Option::take) {
                done(printed, figures);
                printed += 1;
            }
        }
    });
}

/// A seed of its own for `stream` of a run seeded with `seed`.
pub(crate) fn stream(seed: u64, stream: u64) -> u64 {
    mix(mix(seed) ^ stream)
}

/// New requests as a Poisson stream at `rate` a second for `send_for`, each made by a client drawn
/// uniformly from `clients`, from the generator seeded with `seed`: when each is made, and by which.
pub(crate) fn poisson_arrivals(
    seed: u64,
    rate: f64,
    send_for: Duration,
    clients: usize,
) -> Vec<(Duration, usize)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut at = 0.0;
    let mut arrivals = Vec::with_capacity((rate * send_for.as_secs_f64() * 1.1) as usize);
    loop {
        at += -(1.0 - rng.random::<f64>()).ln() / rate;
        if at >= send_for.as_secs_f64() {
            return arrivals;
        }
        let client = rng.random_range(0..clients);
        arrivals.push((Duration::from_secs_f64(at), client));
    }
}

/// SplitMix64's finaliser: turns related seeds (1, 2, 3, …) into unrelated ones.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A policy builder for one simulated client standing for a process of its own: its budget keeps a
/// starting credit of its own, as each process keeps its hosts' (in one process, every budget draws
/// on the process's credit for a host, which would make the simulated processes share it).
pub(crate) fn own_process(builder: stagger::RetryPolicyBuilder) -> stagger::RetryPolicyBuilder {
    let budget = stagger::RetryBudget::builder()
        .own_starting_credit(true)
        .build()
        .expect("a valid budget");
    builder.budget(budget)
}
