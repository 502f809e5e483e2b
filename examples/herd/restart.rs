//! Restarts after a shared dependency comes back: 1 000 workers, each holding a connection to one
//! database, lose it for 30 s, and each supervisor restarts its worker on its own schedule.
//!
//! - The database ([`database`]) accepts every connection but from t = 60 s to t = 90 s, when it
//!   refuses them all; at 60 s it drops every connection it holds, and each worker notices a hop
//!   later. The network is the other scenarios': a hop of 1 or 2 ms each way.
//! - Every worker connected at t = 0 and was up 60 s when the database went, longer than any
//!   schedule's reset (stagger's `healthy_after` is 10 s): the loss is each schedule's first failure.
//! - A run is a connection: refused, it fails a round trip after it started; accepted after the
//!   outage, it stays up to the end of the run, 120 s after the loss.
//! - Each worker is a process of its own, with its own jitter.
//! - The rows: the peers' schedules ([`schedules`]), each computed from its documented formula, and
//!   stagger's defaults, `stagger::supervise` with `RestartPolicy::default()`, seeded per worker.
//!
//! The figures ([`figures`]): the connection attempts the database saw from the loss on, the most in
//! any 10 ms once it was back, and when the workers were connected again, counted from the loss;
//! against the goal, stagger's peak at most 0.05 × the no-jitter schedules' and everyone up within
//! 2 × their time. The chart, `herd-restart.svg` ([`chart`]), is the attempts per 100 ms and the
//! workers connected over time.

mod chart;
mod database;
mod figures;
pub(crate) mod schedules;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::convert::Infallible;
use std::rc::Rc;
use std::time::Duration;

use http::{Request, StatusCode};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use stagger::RestartPolicy;
use tokio::runtime::Runtime;
use tokio::time::{Instant, sleep_until};
use tower::Service;

use crate::args::Args;
use crate::sim::{Network, SimulatedServer, hop_ms, run_in_parallel, stream};
use database::Database;
use figures::Figures;
use schedules::{Peer, Schedule};

/// When the database goes down, and for how long.
const LOSS: Duration = Duration::from_secs(60);
const OUTAGE: Duration = Duration::from_secs(30);
/// How long after the loss the run ends.
const RUN_FOR: Duration = Duration::from_secs(120);
/// The goal, against the schedules without jitter: stagger's peak at most this share of theirs…
const PEAK_GOAL: f64 = 0.05;
/// … and everyone up within this many times their time.
const UP_GOAL: f64 = 2.0;

/// The streams of randomness a run draws from its seed, besides the network's.
const DROPS: u64 = 1;
const POLICY: u64 = 2;
const PEER_JITTER: u64 = 3;

/// When the database is back.
fn back_at() -> Duration {
    LOSS + OUTAGE
}

struct Scenario {
    workers: usize,
    seed: u64,
}

/// How one row's workers are restarted.
pub(crate) struct Row {
    name: &'static str,
    kind: Kind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Peer(Peer),
    /// `stagger::supervise` with `RestartPolicy::default()`, seeded.
    StaggerDefaults,
}

impl Kind {
    fn jittered(self) -> bool {
        match self {
            Self::Peer(peer) => peer.jittered(),
            Self::StaggerDefaults => true,
        }
    }
}

fn rows() -> Vec<Row> {
    let peer = |name, peer| Row {
        name,
        kind: Kind::Peer(peer),
    };
    vec![
        peer("Kubernetes CrashLoopBackOff", Peer::Kubernetes),
        peer("systemd RestartSteps", Peer::Systemd),
        peer("task-supervisor 0.5, ±10 %", Peer::TaskSupervisor),
        peer("Akka withBackoff, 0.2", Peer::Akka),
        peer("gRPC connection backoff", Peer::Grpc),
        Row {
            name: "stagger defaults",
            kind: Kind::StaggerDefaults,
        },
    ]
}

/// Runs every row, prints the table and the goal, and draws `herd-restart.svg` into `args.out`.
pub(crate) fn run(args: &Args) {
    let scenario = Scenario {
        workers: args.clients,
        seed: args.seed,
    };
    println!(
        "Restart: {} workers, each holding a connection to one database since t = 0, lose it at {} s \
         for {} s (refused meanwhile); each is restarted by its supervisor's schedule, with its own \
         jitter; seed {}. Virtual time; rows run {} at a time.",
        scenario.workers,
        LOSS.as_secs(),
        OUTAGE.as_secs(),
        scenario.seed,
        args.threads,
    );
    println!(
        "Connection attempts the database saw from the loss on, the most in any 10 ms once it was \
         back, and when the workers were connected again, from the loss (the database is back at \
         {} s).\n",
        OUTAGE.as_secs(),
    );
    let rows = rows();
    let measured = measure(&scenario, &rows, args.threads);
    print!("{}", figures::table(&measured));
    chart::draw_or_complain(
        &args.out.join("herd-restart.svg"),
        &format!(
            "{} workers lose their database for {} s: reconnection attempts, and workers back",
            scenario.workers,
            OUTAGE.as_secs()
        ),
        &measured,
    );
}

/// Simulates every row on `threads` threads: one line per row, in order.
fn measure<'a>(scenario: &Scenario, rows: &'a [Row], threads: usize) -> Vec<(&'a Row, Figures)> {
    let mut measured = Vec::with_capacity(rows.len());
    let simulate = |runtime: &Runtime, row: &Row| runtime.block_on(simulate(row.kind, scenario));
    run_in_parallel(rows, threads, simulate, |index, figures| {
        measured.push((&rows[index], figures));
    });
    measured
}

/// Runs one row's workers through the outage against a fresh database, in virtual time.
async fn simulate(kind: Kind, scenario: &Scenario) -> Figures {
    let start = Instant::now();
    let database = Database::new(LOSS..back_at());
    let network = Rc::new(RefCell::new(Network::new(database, start, scenario.seed)));
    let ups = Rc::new(RefCell::new(vec![None; scenario.workers]));
    let over_limit = Rc::new(RefCell::new(0));
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let net = tokio::task::spawn_local(Network::run(Rc::clone(&network)));
            let workers: Vec<_> = (0..scenario.workers)
                .map(|worker| {
                    let worker = Worker {
                        id: worker,
                        connection: SimulatedServer::connect(&network),
                        start,
                        drop_hop: drop_hop(scenario.seed, worker),
                        ups: Rc::clone(&ups),
                    };
                    let over_limit = Rc::clone(&over_limit);
                    let seed = scenario.seed;
                    tokio::task::spawn_local(async move {
                        if worker.restarted(kind, seed).await {
                            *over_limit.borrow_mut() += 1;
                        }
                    })
                })
                .collect();
            for worker in workers {
                worker.await.expect("a worker");
            }
            net.abort();
        })
        .await;
    let attempts = std::mem::take(&mut network.borrow_mut().server.attempts);
    let ups = std::mem::take(&mut *ups.borrow_mut());
    let over_limit = *over_limit.borrow();
    Figures::new(kind, attempts, &ups, over_limit)
}

/// How long after the loss `worker` notices it: a hop.
fn drop_hop(seed: u64, worker: usize) -> Duration {
    let mut rng = SmallRng::seed_from_u64(stream(stream(seed, DROPS), worker as u64));
    Duration::from_millis(hop_ms(&mut rng))
}

/// One worker: its connection to the database, and where it notes when it was back.
struct Worker {
    id: usize,
    connection: SimulatedServer<Database>,
    start: Instant,
    drop_hop: Duration,
    ups: Rc<RefCell<Vec<Option<Duration>>>>,
}

/// How a run ended: it always fails, or runs to the end.
#[derive(Debug)]
enum Lost {
    Refused,
    Dropped,
}

impl Worker {
    /// Runs the worker under `kind`'s restarts until the end; whether task-supervisor's default limit
    /// would have declared it dead.
    async fn restarted(&self, kind: Kind, seed: u64) -> bool {
        let end = self.start + LOSS + RUN_FOR;
        match kind {
            Kind::StaggerDefaults => {
                let policy = RestartPolicy::builder()
                    .seed(stream(stream(seed, POLICY), self.id as u64))
                    .build()
                    .expect("the defaults are valid");
                let ended = stagger::supervise(&policy, || self.run(), sleep_until(end)).await;
                ended.expect("no restart limit");
                false
            }
            Kind::Peer(peer) => {
                let rng =
                    SmallRng::seed_from_u64(stream(stream(seed, PEER_JITTER), self.id as u64));
                let mut schedule = Schedule::new(peer, rng);
                let restarts = async {
                    loop {
                        let _ = self.run().await;
                        sleep_until(schedule.next(Instant::now())).await;
                    }
                };
                let _: Result<Infallible, _> = tokio::time::timeout_at(end, restarts).await;
                schedule.over_limit
            }
        }
    }

    /// One run: connects; refused, it fails; accepted before the loss, it is dropped a hop after it;
    /// accepted after the outage, it stays up.
    async fn run(&self) -> Result<(), Lost> {
        let mut connection = self.connection.clone();
        let answer = connection.call(Request::new(())).await;
        let Ok(response) = answer;
        if response.status() != StatusCode::OK {
            return Err(Lost::Refused);
        }
        let connected = self.start.elapsed();
        if connected < LOSS {
            sleep_until(self.start + LOSS + self.drop_hop).await;
            return Err(Lost::Dropped);
        }
        self.ups.borrow_mut()[self.id].get_or_insert(connected);
        std::future::pending().await
    }
}
