//! Metastable overload: a server at 70 % of its capacity loses half of it for five seconds, and the
//! clients' timeouts and retries keep it overloaded after it is back (Bronson et al., "Metastable
//! Failures in Distributed Systems", HotOS 2021; Huang et al., OSDI 2022).
//!
//! - The server ([`queue`]) serves `capacity` requests/s in arrival order, one FIFO queue of no bound;
//!   `capacity` is 1 request/s per client (1000/s for 1000 clients), halved from t = 10 s to 15 s.
//! - New requests arrive open-loop, a Poisson stream at 70 % of the capacity for 40 s, whatever the
//!   answers; each is made by one of the clients, drawn at random.
//! - Each client is a process of its own, with its own policy: its own jitter, budget and throttle
//!   (the fleet case, where a budget or a throttle sees only what its client sends: 0.7 requests/s).
//!   One row puts every client through one policy instead, the case of one process.
//! - Every row gives each attempt 1 s: an attempt not answered by then is abandoned, and retried if
//!   the row retries. The server still serves it when its turn comes: wasted work, which is what keeps
//!   the overload going once the capacity is back.
//!
//! The peers' delays are computed by their own crates ([`peers`](crate::peers)); stagger's rows go
//! through the real `RetryLayer`. Figures per row in [`figures`], the chart `herd-metastable.svg` in
//! [`chart`], the failure-only token bucket tried against stagger's budget in [`bucket`].

mod bucket;
mod chart;
mod client;
mod figures;
mod queue;
#[cfg(test)]
mod tests;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use stagger::{RetryBudget, RetryPolicy};
use tokio::runtime::Runtime;
use tokio::time::Instant;

use crate::args::Args;
use crate::peers::Peer;
use crate::sim::run_in_parallel;
use client::{Client, arrivals};
use figures::Figures;
use queue::{Capacity, FifoServer, QueueNetwork, QueueService};

/// How long new requests arrive.
const SEND_FOR: Duration = Duration::from_secs(40);
/// When the capacity is halved, and when it is back.
const TRIGGER: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(15));
/// The time limit of every attempt, in every row.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);
/// The server's capacity per client, in requests/s.
const CAPACITY_PER_CLIENT: f64 = 1.0;
/// The new requests offered, as a share of the capacity.
const LOAD: f64 = 0.7;
/// The width of the slots in which attempts and answers are counted.
const SLOT: Duration = Duration::from_millis(50);
const URI: &str = "http://queue.example/";

/// The streams of randomness a run draws from its seed, besides the network's.
const ARRIVALS: u64 = 1;
const POLICY: u64 = 2;
const PEER_JITTER: u64 = 3;

pub(crate) struct Scenario {
    pub(crate) clients: usize,
    pub(crate) seed: u64,
    /// Whether the peers' jitter comes from their crates' own generators (`--peer-rng`).
    pub(crate) peer_rng: bool,
}

impl Scenario {
    fn capacity(&self) -> f64 {
        self.clients as f64 * CAPACITY_PER_CLIENT
    }

    fn offered(&self) -> f64 {
        self.capacity() * LOAD
    }
}

/// How one row's clients retry: one line of the table.
pub(crate) struct Row {
    pub(crate) name: &'static str,
    kind: Kind,
}

enum Kind {
    Peer(Peer),
    /// stagger's `RetryLayer` with the policy built from a seed: one per client, or with `shared` one
    /// for all.
    Stagger {
        policy: fn(u64) -> RetryPolicy,
        shared: bool,
    },
    /// stagger without its budget, behind a failure-only token bucket ([`bucket`]).
    FailureBudget,
}

/// stagger's defaults with the scenario's attempt timeout, for a client standing for a process of
/// its own.
fn stagger() -> stagger::RetryPolicyBuilder {
    crate::sim::own_process(RetryPolicy::builder().attempt_timeout(ATTEMPT_TIMEOUT))
}

pub(crate) fn rows() -> Vec<Row> {
    let peer = |name, peer| Row {
        name,
        kind: Kind::Peer(peer),
    };
    let ours = |name, policy, shared| Row {
        name,
        kind: Kind::Stagger { policy, shared },
    };
    vec![
        peer("no retries", Peer::NoRetries),
        peer("3 retries at once", Peer::AtOnce),
        peer("reqwest-retry 0.9 defaults", Peer::ReqwestRetry),
        peer("tower 0.5 backoff, 3 retries", Peer::Tower),
        peer("backon 1 defaults", Peer::Backon),
        ours(
            "stagger defaults",
            |seed| built(stagger().seed(seed)),
            false,
        ),
        ours(
            "stagger adaptive_throttle(2.0)",
            |seed| built(stagger().adaptive_throttle(2.0).seed(seed)),
            false,
        ),
        ours(
            "stagger budget, no floor",
            |seed| {
                let budget = RetryBudget::builder().min_per_second(0).build();
                built(stagger().budget(budget.expect("a budget")).seed(seed))
            },
            false,
        ),
        ours(
            "stagger defaults, one process",
            |seed| built(stagger().seed(seed)),
            true,
        ),
        Row {
            name: "stagger + failure-only bucket",
            kind: Kind::FailureBudget,
        },
    ]
}

fn built(builder: stagger::RetryPolicyBuilder) -> RetryPolicy {
    builder.build().expect("a valid policy")
}

/// Runs every row, prints the table and draws `herd-metastable.svg` into `args.out`. Returns the most
/// calls that were waiting at once in any row.
pub(crate) fn run(args: &Args) -> usize {
    let scenario = Scenario {
        clients: args.clients,
        seed: args.seed,
        peer_rng: args.peer_rng,
    };
    println!(
        "Metastable overload: {} clients, each its own policy, send {:.0} new requests/s (Poisson) for \
         {} s to a FIFO server of capacity {:.0}/s, halved from t = {} s to {} s; every attempt gets {} \
         s, and the server still serves the abandoned ones; seed {}. Virtual time; rows run {} at a \
         time.\n",
        scenario.clients,
        scenario.offered(),
        SEND_FOR.as_secs(),
        scenario.capacity(),
        TRIGGER.0.as_secs(),
        TRIGGER.1.as_secs(),
        ATTEMPT_TIMEOUT.as_secs(),
        scenario.seed,
        args.threads,
    );
    if scenario.peer_rng {
        println!("The peers' jitter: their crates' own generators, different in every run.\n");
    }
    let rows = rows();
    let mut done = Vec::new();
    let table = figures::Table::new(scenario.offered());
    print!("{}", table.header());
    let simulate = |runtime: &Runtime, row: &Row| runtime.block_on(simulate(row, &scenario));
    run_in_parallel(&rows, args.threads, simulate, |index, figures| {
        print!("{}", table.row(rows[index].name, &figures));
        done.push((rows[index].name, figures));
    });
    print!("{}", table.notes(&done));
    chart::draw_or_complain(
        &args.out.join("herd-metastable.svg"),
        &format!(
            "{} clients, {:.0} new requests/s, capacity {:.0}/s halved from 10 s to 15 s",
            scenario.clients,
            scenario.offered(),
            scenario.capacity()
        ),
        &done,
        scenario.offered(),
    );
    done.iter().map(|(_, f)| f.peak_waiting).max().unwrap_or(0)
}

/// Prints the table of `scenario` alone, as `run` does, into a string (for the determinism test).
#[cfg(test)]
pub(crate) fn table(scenario: &Scenario) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    let table = figures::Table::new(scenario.offered());
    let mut text = table.header();
    let mut done = Vec::new();
    for row in rows() {
        let figures = runtime.block_on(simulate(&row, scenario));
        text += &table.row(row.name, &figures);
        done.push((row.name, figures));
    }
    text + &table.notes(&done)
}

/// Runs one row's calls against a fresh server, in virtual time.
async fn simulate(row: &Row, scenario: &Scenario) -> Figures {
    let start = Instant::now();
    let capacity = Capacity {
        normal: scenario.capacity(),
        reduced: scenario.capacity() / 2.0,
        from: TRIGGER.0,
        until: TRIGGER.1,
    };
    // The same network and the same arrivals for every row: the rows differ only in how they retry.
    let server = FifoServer::new(capacity);
    let network = Rc::new(RefCell::new(QueueNetwork::new(
        server,
        start,
        scenario.seed,
    )));
    let clients: Vec<Rc<Client>> = match row.kind {
        Kind::Stagger { shared: true, .. } => {
            let one = Rc::new(Client::new(row, scenario, 0));
            vec![one; scenario.clients]
        }
        _ => (0..scenario.clients)
            .map(|client| Rc::new(Client::new(row, scenario, client)))
            .collect(),
    };
    let calls = Rc::new(RefCell::new(Vec::new()));
    let waiting = Rc::new(Cell::new(0usize));
    let mut peak_waiting = 0;
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let net = tokio::task::spawn_local(QueueNetwork::run(Rc::clone(&network)));
            let mut tasks = Vec::with_capacity(1024);
            for (at, client) in arrivals(scenario) {
                if start + at > Instant::now() {
                    tokio::time::sleep_until(start + at).await;
                }
                let sent = start.elapsed();
                let call = clients[client].call(QueueService(Rc::clone(&network)));
                let (calls, waiting) = (Rc::clone(&calls), Rc::clone(&waiting));
                waiting.set(waiting.get() + 1);
                peak_waiting = peak_waiting.max(waiting.get());
                tasks.push(tokio::task::spawn_local(async move {
                    let (ok, attempts) = call.await;
                    waiting.set(waiting.get() - 1);
                    calls.borrow_mut().push(figures::Call {
                        took: start.elapsed() - sent,
                        ok,
                        attempts,
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
            net.abort();
        })
        .await;
    let calls = std::mem::take(&mut *calls.borrow_mut());
    let mut network = network.borrow_mut();
    let slots = figures::Slots {
        arrivals: std::mem::take(&mut network.server.arrivals),
        useful: std::mem::take(&mut network.useful),
        wasted: std::mem::take(&mut network.wasted),
    };
    Figures::new(slots, &calls, peak_waiting)
}
