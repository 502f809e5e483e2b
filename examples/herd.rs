//! The thundering herd: a thousand clients fail together, and how each backoff brings them back.
//!
//! A server is down for its first 500 ms and answers `503` to everything. Afterwards a token bucket
//! admits 2000 requests/s with a burst of 20 (20 per 10 ms), and answers `503` at once to anything over
//! that. 1000 clients send one request each at t = 0 and retry until they get a `200`, each through its
//! own [`RetryLayer`] with its own policy (its own seed, its own budget), as separate processes would:
//! from 10 ms, capped at 1 s, unlimited retries. One row per backoff; the last one keeps the default
//! retry budget.
//!
//! Everything runs through the real layer on tokio's paused clock: ten simulated seconds take
//! milliseconds, and a run is the same for the same `--seed`. The network between clients and server
//! is simulated: a hop of |Normal(1 ms, sd 0.2 ms)| each way, which tokio's millisecond timer makes
//! 1 or 2 ms. Rows are independent simulations and run side by side, one per core (`--threads`).
//!
//! A second herd gets `Retry-After: 1` during the outage: [`RetryAfterMode::Strict`] brings every client
//! back in the same millisecond, the default [`RetryAfterMode::Spread`] spreads them over the second
//! after it.
//!
//! The table gives, per row: attempts the server saw, the most in any 10 ms once it is back up (its
//! capacity is 20), when the clients got their final response (median, 99th percentile, last), the most
//! attempts one client made (from [`RetryInfo`]) and how many clients gave up. The charts show attempts
//! per 10 ms over time, one per herd: `herd.svg` and `herd-retry-after.svg`, written to `target/herd/`
//! (under `CARGO_TARGET_DIR` if it is set) or to the directory given with `--out`, which is created if
//! need be. The README's charts are made with `--out docs`.
//!
//! ```text
//! cargo run --release --all-features --example herd                   # charts in target/herd/
//! cargo run --release --all-features --example herd -- --out docs     # the README's charts
//! cargo run --release --all-features --example herd -- --clients 10000 --seed 7 --out /tmp/herd
//! cargo run --release --all-features --example herd -- --real    # over loopback sockets, in real time
//! ```

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use http::header::RETRY_AFTER;
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use stagger::{Backoff, Jitter, RetryAfterMode, RetryInfo, RetryLayer, RetryPolicy};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

/// How long the server answers `503` to everything.
const OUTAGE: Duration = Duration::from_millis(500);
/// The width of the buckets in which attempts are counted.
const BUCKET: Duration = Duration::from_millis(10);
/// The server's `Retry-After` during the outage, in the second herd.
const RETRY_AFTER_SECONDS: &str = "1";

fn main() {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    if args.real {
        real::run(&args);
        return;
    }
    // Before the run, not after it: a directory that cannot be made is an error in a second, not a
    // lost minute.
    if let Err(e) = std::fs::create_dir_all(&args.out) {
        eprintln!("cannot create {}: {e}", args.out.display());
        std::process::exit(2);
    }
    let wall = std::time::Instant::now();
    let scenario = Scenario {
        clients: args.clients,
        max_delay: Duration::from_secs(1),
        server: ServerConfig {
            rate: 2000.0,
            burst: 20.0,
            retry_after: false,
        },
        seed: args.seed,
    };
    let told = Scenario {
        server: ServerConfig {
            retry_after: true,
            ..scenario.server
        },
        ..scenario
    };
    println!(
        "Herd: {} clients at t = 0, server down for {} ms, then {} requests/s (burst {}); seed {}.",
        scenario.clients,
        OUTAGE.as_millis(),
        scenario.server.rate,
        scenario.server.burst,
        scenario.seed
    );
    println!(
        "Each client: its own RetryLayer, initial 10 ms, cap {} ms, unlimited retries, no budget unless \
         said. Virtual time; rows run {} at a time.\n",
        scenario.max_delay.as_millis(),
        args.threads,
    );
    let herd_rows = scenario.rows(true);
    let told_rows = told.retry_after_rows();
    let jobs: Vec<(&Row, &Scenario)> = (herd_rows.iter().map(|row| (row, &scenario)))
        .chain(told_rows.iter().map(|row| (row, &told)))
        .collect();
    let mut herd = Vec::new();
    let mut retry_after = Vec::new();
    print_header();
    run_in_parallel(&jobs, args.threads, |index, figures| {
        let (row, _) = jobs[index];
        print_row(row.name, &figures);
        if index < herd_rows.len() {
            herd.push((row.name, figures));
        } else {
            retry_after.push((row.name, figures));
        }
        if index + 1 == herd_rows.len() {
            draw_chart_or_complain(
                &args.out.join("herd.svg"),
                &format!("{} clients after a 500 ms outage", scenario.clients),
                &herd,
                scenario.server.capacity_per_bucket(),
            );
            println!(
                "\nRetry-After herd: the same, but the outage answers 503 with Retry-After: \
                 {RETRY_AFTER_SECONDS}.\n"
            );
            print_header();
        }
    });
    draw_chart_or_complain(
        &args.out.join("herd-retry-after.svg"),
        &format!(
            "{} clients told Retry-After: {RETRY_AFTER_SECONDS}",
            scenario.clients
        ),
        &retry_after,
        told.server.capacity_per_bucket(),
    );
    judge_spread(&retry_after[0].1, &retry_after[1].1);

    let wall = wall.elapsed();
    println!("\nwall time {wall:.2?}");
    if let Some(peak) = peak_rss() {
        // Each thread has a row's clients waiting at once; peak memory is counted against all of them.
        let threads = args.threads.min(jobs.len());
        println!(
            "peak RSS {:.1} MiB, {:.2} KiB per waiting client ({threads} × {} clients at once)",
            peak as f64 / 1024.0,
            peak as f64 / (threads * args.clients) as f64,
            args.clients,
        );
    }
}

/// Runs each `(row, scenario)` in virtual time on `threads` threads, each with its own paused
/// current-thread runtime, longest first as listed, and hands the figures to `done` in the order of
/// `jobs`, each as soon as it and every job before it are finished.
///
/// Rows are independent simulations, each seeded by its scenario and its clients alone, so the figures
/// do not depend on the thread that ran them; the no-delay row is most of the work.
fn run_in_parallel(
    jobs: &[(&Row, &Scenario)],
    threads: usize,
    mut done: impl FnMut(usize, Figures),
) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        for _ in 0..threads.min(jobs.len()) {
            let sender = sender.clone();
            let next = &next;
            scope.spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .start_paused(true)
                    .build()
                    .expect("a current-thread runtime");
                loop {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(row, scenario)) = jobs.get(index) else {
                        return;
                    };
                    let figures = runtime.block_on(simulate(row, scenario));
                    if sender.send((index, figures)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(sender);
        let mut finished: Vec<Option<Figures>> = jobs.iter().map(|_| None).collect();
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

/// One herd: who the clients are and what the server does.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    clients: usize,
    max_delay: Duration,
    server: ServerConfig,
    seed: u64,
}

/// How each client retries: one line of the table.
struct Row {
    name: &'static str,
    backoff: Backoff,
    budget: bool,
    retry_after: RetryAfterMode,
}

impl Row {
    /// The policy of one client. Unlimited retries and no time limits: the point is to see how long the
    /// herd takes to drain.
    fn policy(&self, seed: u64) -> RetryPolicy {
        let builder = RetryPolicy::builder()
            .backoff(self.backoff)
            .max_retries(u32::MAX)
            .no_max_elapsed()
            .no_attempt_timeout()
            .retry_after(self.retry_after)
            .seed(seed);
        let builder = if self.budget {
            builder
        } else {
            builder.no_budget()
        };
        builder.build().expect("a valid policy")
    }
}

impl Scenario {
    fn rows(&self, with_no_delay: bool) -> Vec<Row> {
        let exponential = Backoff::exponential(Duration::from_millis(10)).max_delay(self.max_delay);
        let row = |name, backoff, budget| Row {
            name,
            backoff,
            budget,
            retry_after: RetryAfterMode::default(),
        };
        let mut rows = Vec::new();
        if with_no_delay {
            rows.push(row("no delay", Backoff::fixed(Duration::ZERO), false));
        }
        rows.extend([
            row(
                "exponential, no jitter",
                exponential.jitter(Jitter::None),
                false,
            ),
            row("full jitter", exponential.jitter(Jitter::Full), false),
            row("equal jitter", exponential.jitter(Jitter::Equal), false),
            row(
                "decorrelated jitter",
                exponential.jitter(Jitter::Decorrelated),
                false,
            ),
            row(
                "full jitter + budget",
                exponential.jitter(Jitter::Full),
                true,
            ),
        ]);
        rows
    }

    fn retry_after_rows(&self) -> Vec<Row> {
        let backoff = Backoff::exponential(Duration::from_millis(10)).max_delay(self.max_delay);
        vec![
            Row {
                name: "Retry-After strict",
                backoff,
                budget: false,
                retry_after: RetryAfterMode::Strict,
            },
            Row {
                name: "Retry-After spread (default)",
                backoff,
                budget: false,
                retry_after: RetryAfterMode::Spread,
            },
        ]
    }
}

/// What a server does after the outage, and whether it sends `Retry-After` during it.
#[derive(Debug, Clone, Copy)]
struct ServerConfig {
    /// Requests admitted per second after the outage.
    rate: f64,
    /// Requests admitted at once, on top of the rate.
    burst: f64,
    /// Whether the outage's `503`s carry `Retry-After`.
    retry_after: bool,
}

impl ServerConfig {
    fn capacity_per_bucket(&self) -> f64 {
        self.rate * BUCKET.as_secs_f64()
    }
}

/// The server's logic, without I/O: the outage, then a token bucket. It counts every attempt it sees.
struct Server {
    config: ServerConfig,
    tokens: f64,
    refilled: Duration,
    /// Attempts seen per `BUCKET` since the start.
    arrivals: Vec<u32>,
}

/// What the server answers one request.
#[derive(Debug, Clone, Copy)]
enum Answer {
    Ok,
    Unavailable { retry_after: bool },
}

impl Server {
    fn new(config: ServerConfig) -> Self {
        Self {
            config,
            tokens: config.burst,
            refilled: OUTAGE,
            arrivals: Vec::new(),
        }
    }

    /// Answers a request arriving `now` after the start.
    fn answer(&mut self, now: Duration) -> Answer {
        let bucket = (now.as_nanos() / BUCKET.as_nanos()) as usize;
        if self.arrivals.len() <= bucket {
            self.arrivals.resize(bucket + 1, 0);
        }
        self.arrivals[bucket] += 1;
        if now < OUTAGE {
            return Answer::Unavailable {
                retry_after: self.config.retry_after,
            };
        }
        // `saturating_sub` and `max`: over real sockets, requests may be answered slightly out of order.
        let earned = now.saturating_sub(self.refilled).as_secs_f64() * self.config.rate;
        self.tokens = (self.tokens + earned).min(self.config.burst);
        self.refilled = self.refilled.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Answer::Ok
        } else {
            Answer::Unavailable { retry_after: false }
        }
    }
}

impl Answer {
    fn to_response<B: Default>(self) -> Response<B> {
        let mut response = Response::new(B::default());
        if let Answer::Unavailable { retry_after } = self {
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            if retry_after {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
            }
        }
        response
    }
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
#[derive(Clone)]
struct SimulatedServer {
    network: Rc<RefCell<Network>>,
    /// The client's exchange with the server, used again by each of its attempts: a client has one
    /// request in flight at a time, and an allocation per attempt showed in the profile. Clones (the
    /// layer keeps one per call) share it.
    exchange: Rc<Exchange>,
}

impl SimulatedServer {
    /// A client's own connection to the server on `network`.
    fn connect(network: &Rc<RefCell<Network>>) -> Self {
        Self {
            network: Rc::clone(network),
            exchange: Rc::default(),
        }
    }
}

struct Network {
    server: Server,
    start: Instant,
    rng: SmallRng,
    /// Requests sent since the delivering task last ran. They leave when it next runs, which is the
    /// instant they were sent: virtual time stands still while a task can run.
    outbox: Vec<Rc<Exchange>>,
    /// Messages in flight by the millisecond they arrive: `calendar[k]` at `first + k` after `start`.
    calendar: VecDeque<Vec<Message>>,
    first: u64,
    /// Emptied vectors, kept for their capacity.
    spare: Vec<Vec<Message>>,
    /// The delivering task, while it waits.
    waker: Option<Waker>,
}

enum Message {
    /// A request reaches the server.
    Request(Rc<Exchange>),
    /// The server's answer reaches the client.
    Response(Rc<Exchange>, Answer),
}

/// One request–response exchange at a time, shared by the client's future and the network.
#[derive(Default)]
struct Exchange {
    /// A request was sent and its answer not yet taken.
    busy: Cell<bool>,
    answer: Cell<Option<Answer>>,
    waker: Cell<Option<Waker>>,
}

impl Network {
    fn new(server: Server, start: Instant, seed: u64) -> Self {
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

    /// One hop, in whole milliseconds: |Normal(1 ms, sd 0.2 ms)| rounded up, at least 1.
    ///
    /// A message leaves at the start of a millisecond and is delivered in the millisecond its hop ends
    /// in, so only the rounded hop matters, and it is drawn from its own distribution: 1 ms when the hop
    /// is at most 1 ms (probability 1/2), 3 ms when it is over 2 ms (`P(Z > 5)`, 2.9e-7), 2 ms
    /// otherwise (longer hops, `P(Z > 10)` = 7.6e-24, are left out). Drawing the normal itself (Box–Muller:
    /// a logarithm, a sine and a cosine) cost a sixth of the whole simulation.
    fn hop_ms(&mut self) -> u64 {
        /// `P(Z > 5)` for a standard normal `Z`, times 2^64.
        const OVER_2_MS: u64 = (2.866_515_718_791_939e-7 * 18_446_744_073_709_551_616.0) as u64;
        let draw: u64 = self.rng.random();
        if draw < 1 << 63 {
            1
        } else if draw < u64::MAX - OVER_2_MS {
            2
        } else {
            3
        }
    }

    /// A client sends a request.
    fn send(&mut self, exchange: Rc<Exchange>) {
        self.outbox.push(exchange);
        if let Some(waker) = self.waker.take() {
            waker.wake();
        }
    }

    /// Puts `message` on the wire in millisecond `now` (counted from `start`, like the calendar). It
    /// arrives in the millisecond its hop ends in, rounded up as a tokio timer would fire, and never in
    /// the one it leaves in.
    fn transmit(&mut self, now: u64, message: Message) {
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
    async fn run(network: Rc<RefCell<Self>>) {
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

impl Service<Request<()>> for SimulatedServer {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = Reply;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _request: Request<()>) -> Reply {
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
struct Reply {
    exchange: Rc<Exchange>,
}

impl Future for Reply {
    type Output = Result<Response<()>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.exchange.answer.take() {
            Some(answer) => {
                self.exchange.busy.set(false);
                Poll::Ready(Ok(answer.to_response()))
            }
            None => {
                self.exchange.waker.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }
}

/// How one client's request ended.
struct Finish {
    /// Time from t = 0 to the final response.
    at: Duration,
    /// Whether the final response is a `200`.
    ok: bool,
    /// Attempts made, from the [`RetryInfo`] the layer put in the response (0 if there is none).
    attempts: u32,
}

impl Finish {
    fn new<B>(start: Instant, response: &Response<B>) -> Self {
        Self {
            at: start.elapsed(),
            ok: response.status() == StatusCode::OK,
            attempts: (response.extensions().get::<RetryInfo>()).map_or(0, RetryInfo::attempts),
        }
    }
}

/// What one row measured.
struct Figures {
    /// Attempts per `BUCKET`, as the server saw them.
    arrivals: Vec<u32>,
    /// Time from t = 0 to each client's final response, `200` or not, sorted.
    completions: Vec<Duration>,
    /// Clients whose final response is not a `200`.
    give_ups: usize,
    /// The most attempts one client made.
    most_attempts: u32,
}

impl Figures {
    fn new(arrivals: Vec<u32>, finishes: &[Finish]) -> Self {
        let mut completions: Vec<_> = finishes.iter().map(|f| f.at).collect();
        completions.sort_unstable();
        Self {
            arrivals,
            completions,
            give_ups: finishes.iter().filter(|f| !f.ok).count(),
            most_attempts: finishes.iter().map(|f| f.attempts).max().unwrap_or(0),
        }
    }

    fn attempts(&self) -> u64 {
        self.arrivals.iter().map(|&n| u64::from(n)).sum()
    }

    /// The most attempts in one bucket from the end of the outage on.
    fn peak_after_recovery(&self) -> u32 {
        let first = (OUTAGE.as_nanos() / BUCKET.as_nanos()) as usize;
        self.arrivals.iter().skip(first).copied().max().unwrap_or(0)
    }

    /// The nearest-rank percentile of completion times.
    fn completion(&self, percentile: f64) -> Duration {
        let rank = (percentile / 100.0 * self.completions.len() as f64).ceil() as usize;
        self.completions[rank.clamp(1, self.completions.len()) - 1]
    }
}

/// Runs every client of one row against a fresh server, in virtual time.
async fn simulate(row: &Row, scenario: &Scenario) -> Figures {
    let start = Instant::now();
    // The same network for every row: the rows differ only in how the clients retry.
    let network = Rc::new(RefCell::new(Network::new(
        Server::new(scenario.server),
        start,
        scenario.seed,
    )));
    let finishes = Rc::new(RefCell::new(Vec::with_capacity(scenario.clients)));
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let net = tokio::task::spawn_local(Network::run(Rc::clone(&network)));
            let clients: Vec<_> = (0..scenario.clients)
                .map(|client| {
                    let layer = RetryLayer::new(row.policy(client_seed(scenario.seed, client)));
                    let service = layer.layer(SimulatedServer::connect(&network));
                    let mut request = Request::new(());
                    *request.uri_mut() = Uri::from_static("http://herd.example/");
                    let finishes = Rc::clone(&finishes);
                    tokio::task::spawn_local(async move {
                        let response = (service.oneshot(request).await)
                            .expect("no time limit is set, and the server always answers");
                        finishes.borrow_mut().push(Finish::new(start, &response));
                    })
                })
                .collect();
            for client in clients {
                client.await.expect("a client");
            }
            net.abort();
        })
        .await;
    let finishes = std::mem::take(&mut *finishes.borrow_mut());
    let arrivals = std::mem::take(&mut network.borrow_mut().server.arrivals);
    let figures = Figures::new(arrivals, &finishes);
    let reported: u64 = finishes.iter().map(|f| u64::from(f.attempts)).sum();
    assert_eq!(
        reported,
        figures.attempts(),
        "the layers report every attempt the server saw"
    );
    figures
}

fn print_header() {
    println!(
        "{:<30} {:>9} {:>9} {:>7} {:>7} {:>7} {:>10} {:>8}",
        "row", "attempts", "peak/10ms", "p50 ms", "p99 ms", "max ms", "most tries", "give-ups"
    );
}

fn print_row(name: &str, figures: &Figures) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{:<30} {:>9} {:>9} {:>7.0} {:>7.0} {:>7.0} {:>10} {:>8}",
        name,
        figures.attempts(),
        figures.peak_after_recovery(),
        ms(figures.completion(50.0)),
        ms(figures.completion(99.0)),
        ms(figures.completion(100.0)),
        figures.most_attempts,
        figures.give_ups
    );
}

/// Checks the promise of `RetryAfterMode::Spread`: at most a tenth of strict's peak per 10 ms, for at most
/// 1.5 times its p99 completion.
fn judge_spread(strict: &Figures, spread: &Figures) {
    compare_spread(strict, spread, true);
}

/// Prints how spread compares with strict, and with `verdict` whether the promise holds.
fn compare_spread(strict: &Figures, spread: &Figures, verdict: bool) {
    let peak = f64::from(spread.peak_after_recovery()) / f64::from(strict.peak_after_recovery());
    let p99 = spread.completion(99.0).as_secs_f64() / strict.completion(99.0).as_secs_f64();
    let judge = |ok: bool, bound: &str| match (verdict, ok) {
        (false, _) => String::new(),
        (true, true) => format!(" (required <= {bound}: holds)"),
        (true, false) => format!(" (required <= {bound}: FAILS)"),
    };
    println!(
        "\nspread vs strict: peak/10ms {} vs {} = {peak:.3}x{}; p99 {:.0} ms vs {:.0} ms = {p99:.2}x{}",
        spread.peak_after_recovery(),
        strict.peak_after_recovery(),
        judge(peak <= 0.1, "0.1x"),
        spread.completion(99.0).as_secs_f64() * 1e3,
        strict.completion(99.0).as_secs_f64() * 1e3,
        judge(p99 <= 1.5, "1.5x"),
    );
}

fn draw_chart_or_complain(path: &Path, title: &str, rows: &[(&str, Figures)], capacity: f64) {
    match draw_chart(path, title, rows, capacity) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("\ncould not draw {}: {e}", path.display()),
    }
}

/// Attempts per 10 ms over time, one line per row, and the server's capacity.
fn draw_chart(
    path: &Path,
    title: &str,
    rows: &[(&str, Figures)],
    capacity: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;

    const COLORS: [RGBColor; 6] = [
        RGBColor(127, 127, 127),
        RGBColor(214, 39, 40),
        RGBColor(31, 119, 180),
        RGBColor(44, 160, 44),
        RGBColor(148, 103, 189),
        RGBColor(255, 127, 14),
    ];
    // Zero is drawn on the axis, at the bottom of the logarithmic scale.
    const FLOOR: f64 = 0.5;

    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // The jittered rows finish within seconds; a row that runs much longer is cut, and says so.
    let end = chart_end(rows);
    let buckets = (end.as_nanos() / BUCKET.as_nanos()) as usize + 1;
    let peak = rows
        .iter()
        .flat_map(|(_, f)| f.arrivals.iter().copied())
        .max()
        .unwrap_or(1);

    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            0f64..end.as_secs_f64(),
            (FLOOR..f64::from(peak) * 1.5).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc("attempts per 10 ms (log scale; none on the axis)")
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    chart
        .draw_series(LineSeries::new(
            [(0.0, capacity), (end.as_secs_f64(), capacity)],
            BLACK.stroke_width(2),
        ))?
        .label(format!("server capacity ({capacity:.0} per 10 ms)"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(2)));
    for (i, (name, figures)) in rows.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points = (0..buckets.min(figures.arrivals.len())).map(|b| {
            let count = f64::from(figures.arrivals[b]);
            ((b as f64 + 0.5) * BUCKET.as_secs_f64(), count.max(FLOOR))
        });
        let mut label = (*name).to_string();
        let last = figures.completion(100.0);
        if last > end {
            label += &format!(" (cut: runs to {:.1} s)", last.as_secs_f64());
        }
        // A row that behaved exactly like an earlier one would hide it: dash it, and say so.
        let twin = rows[..i].iter().find(|(_, earlier)| {
            earlier.arrivals == figures.arrivals && earlier.completions == figures.completions
        });
        let series = match twin {
            Some((twin, _)) => {
                label += &format!(" (identical to {twin})");
                chart.draw_series(DashedLineSeries::new(points, 6, 6, color.stroke_width(2)))?
            }
            None => chart.draw_series(LineSeries::new(points, color.stroke_width(1)))?,
        };
        series
            .label(label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Where the chart's time axis ends: a little after the last client of the slowest row that finishes
/// within ten times the median of the rows' last completions.
fn chart_end(rows: &[(&str, Figures)]) -> Duration {
    let mut lasts: Vec<Duration> = rows.iter().map(|(_, f)| f.completion(100.0)).collect();
    lasts.sort_unstable();
    let median = lasts[lasts.len() / 2];
    let end = lasts
        .iter()
        .copied()
        .filter(|&last| last <= median * 10)
        .max()
        .unwrap_or(median);
    (end + BUCKET * 10).max(OUTAGE * 2)
}

/// The peak resident set size of this process in KiB, from `/proc/self/status` (Linux only).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Each client's own jitter seed, as separate processes would have. The same in every row, so that rows
/// differ only in how their clients retry.
fn client_seed(seed: u64, client: usize) -> u64 {
    mix(mix(seed) ^ client as u64)
}

/// SplitMix64's finaliser: turns related seeds (1, 2, 3, …) into unrelated ones.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const USAGE: &str = "usage: herd [--clients N] [--seed N] [--out DIR] [--threads N] [--real]

  --clients N   clients in the herd (default 1000; 200 with --real)
  --seed N      seed of the network and of every client's jitter (default 1)
  --out DIR     where to write the charts, herd.svg and herd-retry-after.svg, creating DIR if need
                be (default target/herd, under CARGO_TARGET_DIR if set; --out docs for the README's);
                not with --real, which draws none
  --threads N   rows simulated at once in virtual time, each on its own thread (default: the
                machine's cores); the figures are the same for any N
  --real        a smaller herd over loopback sockets (axum and reqwest), in real time";

struct Args {
    clients: usize,
    seed: u64,
    /// The directory the charts are written to.
    out: PathBuf,
    real: bool,
    /// Rows simulated at once, each on its own thread.
    threads: usize,
}

impl Args {
    fn parse() -> Result<Self, String> {
        let mut clients = None;
        let mut seed = 1;
        let mut out = None;
        let mut real = false;
        let mut threads = None;
        let mut argv = std::env::args().skip(1);
        while let Some(flag) = argv.next() {
            let mut value = |name: &str| argv.next().ok_or(format!("{name} needs a value"));
            match flag.as_str() {
                "--clients" => {
                    let text = value("--clients")?;
                    clients = Some(positive("--clients", &text)?);
                }
                "--threads" => {
                    let text = value("--threads")?;
                    threads = Some(positive("--threads", &text)?);
                }
                "--seed" => {
                    let text = value("--seed")?;
                    seed = text.parse().map_err(|e| format!("--seed {text}: {e}"))?;
                }
                "--out" => {
                    let dir = value("--out")?;
                    // `--out --seed 7` is a forgotten directory, not a directory named `--seed`.
                    if dir.is_empty() || dir.starts_with("--") {
                        return Err(format!("--out needs a directory, not {dir:?}"));
                    }
                    out = Some(PathBuf::from(dir));
                }
                "--real" => real = true,
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => return Err(format!("unknown argument {other}")),
            }
        }
        if real && out.is_some() {
            return Err("--out: --real draws no charts".into());
        }
        Ok(Self {
            clients: clients.unwrap_or(if real { 200 } else { 1000 }),
            seed,
            out: out.unwrap_or_else(default_out),
            real,
            threads: threads.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            }),
        })
    }
}

/// `herd/` in cargo's target directory: `CARGO_TARGET_DIR` if it is set (relative to where cargo was
/// run, which `cargo run` keeps as the working directory), else `target/` in the crate. A target
/// directory set in `.cargo/config.toml` or with `--target-dir` is not visible here: pass `--out`.
fn default_out() -> PathBuf {
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
    };
    target.join("herd")
}

/// Parses `text`, the value of `flag`, as a count of at least 1.
fn positive(flag: &str, text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err(format!("{flag} 0: needs at least 1")),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("{flag} {text}: {e}")),
    }
}

/// The herd over loopback sockets: an axum server and reqwest clients with `stagger::RetryMiddleware`.
#[cfg(feature = "reqwest-middleware")]
mod real {
    use std::sync::{Arc, Mutex};

    use axum::body::Body;
    use axum::extract::State;
    use stagger::RetryMiddleware;

    use super::*;

    pub(super) fn run(args: &Args) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let scenario = Scenario {
            clients: args.clients,
            max_delay: Duration::from_millis(500),
            server: ServerConfig {
                rate: 400.0,
                burst: 4.0,
                retry_after: false,
            },
            seed: args.seed,
        };
        println!(
            "Herd over loopback: {} reqwest clients at t = 0, axum server down for {} ms, then {} \
             requests/s (burst {}).",
            scenario.clients,
            OUTAGE.as_millis(),
            scenario.server.rate,
            scenario.server.burst
        );
        println!(
            "Each client: its own RetryMiddleware, initial 10 ms, cap {} ms. Real time.\n",
            scenario.max_delay.as_millis()
        );
        let wall = std::time::Instant::now();
        run_rows(&scenario.rows(false), |row| {
            runtime.block_on(over_sockets(row, &scenario))
        });
        let scenario = Scenario {
            server: ServerConfig {
                retry_after: true,
                ..scenario.server
            },
            ..scenario
        };
        println!(
            "\nRetry-After herd over loopback: the outage answers 503 with Retry-After: \
             {RETRY_AFTER_SECONDS}.\n"
        );
        let figures = run_rows(&scenario.retry_after_rows(), |row| {
            runtime.block_on(over_sockets(row, &scenario))
        });
        // Real time on a shared machine: a scheduling hiccup bunches arrivals, so no verdict here.
        compare_spread(&figures[0].1, &figures[1].1, false);
        println!("\nwall time {:.2?}", wall.elapsed());
    }

    /// Runs each row, one after the other (they share the loopback), printing its line as soon as it
    /// is done.
    fn run_rows(
        rows: &[Row],
        mut run: impl FnMut(&Row) -> Figures,
    ) -> Vec<(&'static str, Figures)> {
        print_header();
        (rows.iter())
            .map(|row| {
                let figures = run(row);
                print_row(row.name, &figures);
                (row.name, figures)
            })
            .collect()
    }

    /// The server, and the instant its outage starts, which is when the clients send.
    type Shared = Arc<Mutex<(Server, Instant)>>;

    async fn handler(State(shared): State<Shared>) -> Response<Body> {
        let mut shared = shared.lock().expect("the server's lock");
        let now = shared.1.elapsed();
        shared.0.answer(now).to_response()
    }

    async fn over_sockets(row: &Row, scenario: &Scenario) -> Figures {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("an address");
        let shared: Shared = Arc::new(Mutex::new((Server::new(scenario.server), Instant::now())));
        let app = axum::Router::new()
            .route("/", axum::routing::get(handler))
            .route("/warm-up", axum::routing::get(|| async {}))
            .with_state(Arc::clone(&shared));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
        });

        let mut clients = Vec::with_capacity(scenario.clients);
        for client in 0..scenario.clients {
            let policy = row.policy(client_seed(scenario.seed, client));
            // One connection pool per client, as separate processes would have, with its connection
            // already open: the herd measures retries, not two hundred simultaneous handshakes.
            let http = reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("a reqwest client");
            let warm_up = http.get(format!("http://{address}/warm-up")).send().await;
            warm_up.expect("the server is up");
            clients.push(
                reqwest_middleware::ClientBuilder::new(http)
                    .with(RetryMiddleware::new(policy))
                    .build(),
            );
        }

        // Everyone, the server's outage included, starts at one instant shortly ahead, whatever it
        // takes to spawn them.
        let start = Instant::now() + Duration::from_millis(50);
        shared.lock().expect("the server's lock").1 = start;
        let url = format!("http://{address}/");
        let clients: Vec<_> = (clients.into_iter())
            .map(|client| {
                let url = url.clone();
                tokio::spawn(async move {
                    tokio::time::sleep_until(start).await;
                    let result = client.get(&url).send().await;
                    let at = start.elapsed();
                    match result {
                        Ok(response) => Finish {
                            at,
                            ok: response.status() == StatusCode::OK,
                            attempts: (response.extensions().get::<RetryInfo>())
                                .map_or(0, RetryInfo::attempts),
                        },
                        // Handed back as it came: a connection error, say. Counted as a give-up.
                        Err(_) => Finish {
                            at,
                            ok: false,
                            attempts: 0,
                        },
                    }
                })
            })
            .collect();
        let mut finishes = Vec::with_capacity(clients.len());
        for client in clients {
            finishes.push(client.await.expect("a client task"));
        }
        let _ = stop.send(());
        let _ = server.await;
        let arrivals = std::mem::take(&mut shared.lock().expect("the server's lock").0.arrivals);
        Figures::new(arrivals, &finishes)
    }
}

#[cfg(not(feature = "reqwest-middleware"))]
mod real {
    pub(super) fn run(_args: &super::Args) {
        eprintln!(
            "--real needs the `reqwest-middleware` feature: add --features reqwest-middleware"
        );
        std::process::exit(2);
    }
}
