//! Outages behind a reverse proxy: the backend restarts (a deploy), and for as long as it is down the
//! proxy answers every attempt `502 Bad Gateway` at once, as nginx does when its upstream refuses
//! connections.
//!
//! - The proxy ([`proxy`]) answers `200` at once before and after the outage, with capacity to spare
//!   (no rate limit), and `502` at once from t = 2 s for 0.5, 1, 2 or 5 s; the other scenarios'
//!   network, a hop of 1 or 2 ms each way, lies between it and the clients.
//! - New GET requests arrive open-loop, a Poisson stream of 1 request/s per client (1 000/s for 1 000
//!   clients) from t = 0 until 2 s after the backend is back, whatever the answers; each is made by one
//!   of the clients, drawn at random, so a client may have several calls in flight. The run goes on
//!   until every call has ended.
//! - Each client is a process of its own, with its own policy: its own jitter and budget.
//! - The rows: no retries; the peers as [`peers`](crate::peers) drives them, their delays computed by
//!   their own crates and every `5xx` retried; stagger's defaults, `RetryPolicy::default()` with a seed
//!   of the client's, through the real `RetryLayer` (a `502` is retried for an idempotent request).
//!
//! The figures ([`figures`]) are over the requests whose first attempt met the outage: a request sent
//! before it, or after it, got its `200` at once whatever the client. Every row meets the same
//! arrivals, but the network draws each hop in turn from one generator, so a row's retries shift the
//! hops of its later requests: a first attempt sent within a hop of the outage's start or end may
//! meet it in one row and not in another, and the rows' counts may differ by a few. The chart
//! `herd-outages.svg` ([`chart`]) is their success rate against the outage's length.

mod chart;
mod client;
mod figures;
mod proxy;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use stagger::{Backoff, RetryPolicy, RetryPolicyBuilder};
use tokio::runtime::Runtime;
use tokio::time::Instant;

use crate::args::Args;
use crate::peers::Peer;
use crate::sim::{Network, run_in_parallel};
use client::{Client, arrivals};
use figures::{Call, Figures};
use proxy::Proxy;

/// When the backend goes down.
const DOWN_AT: Duration = Duration::from_secs(2);
/// How long new requests keep arriving once the backend is back.
const SEND_AFTER: Duration = Duration::from_secs(2);
/// The outages, one table's worth of rows each.
const OUTAGES: [Duration; 4] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(5),
];
/// New requests per second, per client.
const RATE_PER_CLIENT: f64 = 1.0;
/// The success rate stagger's defaults are measured against, for the requests that met an outage.
const GOAL: f64 = 0.95;
const URI: &str = "http://proxy.example/";

/// The streams of randomness a run draws from its seed, besides the network's.
const ARRIVALS: u64 = 1;
const POLICY: u64 = 2;
const PEER_JITTER: u64 = 3;

struct Scenario {
    clients: usize,
    seed: u64,
    /// Whether the peers' jitter comes from their crates' own generators (`--peer-rng`).
    peer_rng: bool,
}

impl Scenario {
    fn rate(&self) -> f64 {
        self.clients as f64 * RATE_PER_CLIENT
    }
}

/// When the backend is back after an outage of `length`.
fn back_at(length: Duration) -> Duration {
    DOWN_AT + length
}

/// How long new requests arrive around an outage of `length`.
fn send_for(length: Duration) -> Duration {
    back_at(length) + SEND_AFTER
}

/// How one row's clients retry.
struct Row {
    name: &'static str,
    kind: Kind,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Peer(Peer),
    /// stagger's `RetryLayer` with `RetryPolicy::default()`, seeded.
    StaggerDefaults,
    /// stagger's `RetryLayer` with the defaults but for what this changes, seeded: the choices the
    /// defaults were measured against.
    Stagger(fn(RetryPolicyBuilder) -> RetryPolicyBuilder),
}

fn rows() -> Vec<Row> {
    let peer = |name, peer| Row {
        name,
        kind: Kind::Peer(peer),
    };
    vec![
        peer("no retries", Peer::NoRetries),
        peer("reqwest-retry 0.9 defaults", Peer::ReqwestRetry),
        peer("tower 0.5 backoff, 3 retries", Peer::Tower),
        peer("backon 1 defaults", Peer::Backon),
        Row {
            name: "stagger defaults",
            kind: Kind::StaggerDefaults,
        },
        // The defaults before they were measured here: three retries.
        Row {
            name: "stagger, max_retries(3)",
            kind: Kind::Stagger(|builder| builder.max_retries(3)),
        },
        // Fewer attempts and a lower peak, for a longer tail.
        Row {
            name: "stagger, base 3",
            kind: Kind::Stagger(|builder| {
                builder.backoff(
                    Backoff::exponential(RetryPolicy::DEFAULT_INITIAL_DELAY).with_base(3.0),
                )
            }),
        },
    ]
}

/// One simulation: a row's clients through one outage.
struct Job<'a> {
    outage: Duration,
    row: &'a Row,
}

/// One line of the table: what a row's clients did through one outage.
struct Line<'a> {
    outage: Duration,
    row: &'a Row,
    figures: Figures,
}

/// Runs every row through every outage, prints the table and draws `herd-outages.svg` into
/// `args.out`.
pub(crate) fn run(args: &Args) {
    let scenario = Scenario {
        clients: args.clients,
        seed: args.seed,
        peer_rng: args.peer_rng,
    };
    let lengths: Vec<String> = OUTAGES.iter().map(|&l| seconds(l)).collect();
    let (last, others) = lengths.split_last().expect("outages");
    println!(
        "Outages: a reverse proxy answers 200 at once, with capacity to spare, but 502 at once while \
         its backend restarts, from t = {} for {} or {last}; {} clients, each its own policy, send \
         {:.0} GET requests/s (Poisson) until {} after the backend is back, whatever the answers; \
         seed {}. Virtual time; rows run {} at a time.",
        seconds(DOWN_AT),
        others.join(", "),
        scenario.clients,
        scenario.rate(),
        seconds(SEND_AFTER),
        scenario.seed,
        args.threads,
    );
    println!(
        "Over the requests whose first attempt got a 502: how many, the share that ended with a 200, \
         attempts per request, latency from the request's send to its 200 (of those that got one), \
         the most attempts one request made; and the most attempts per 10 ms the proxy got once the \
         backend was back, new requests included ({:.0} per 10 ms on average).\n",
        scenario.rate() / 100.0,
    );
    if scenario.peer_rng {
        println!("The peers' jitter: their crates' own generators, different in every run.\n");
    }
    let rows = rows();
    let lines = measure(&scenario, &rows, args.threads);
    print!("{}", figures::table(&lines));
    chart::draw_or_complain(
        &args.out.join("herd-outages.svg"),
        &format!(
            "Requests whose first attempt got a 502 and that still got a 200 ({} clients, {:.0} \
             requests/s)",
            scenario.clients,
            scenario.rate()
        ),
        &lines,
    );
}

/// `d` in seconds, as few digits as it needs: `0.5 s`, `2 s`.
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// Simulates every row through every outage on `threads` threads: one line per outage and row, the
/// outages in order and the rows in order within each.
fn measure<'a>(scenario: &Scenario, rows: &'a [Row], threads: usize) -> Vec<Line<'a>> {
    let jobs: Vec<Job> = (OUTAGES.iter())
        .flat_map(|&outage| rows.iter().map(move |row| Job { outage, row }))
        .collect();
    let mut lines = Vec::with_capacity(jobs.len());
    let simulate = |runtime: &Runtime, job: &Job| runtime.block_on(simulate(job, scenario));
    run_in_parallel(&jobs, threads, simulate, |index, figures| {
        let Job { outage, row } = jobs[index];
        lines.push(Line {
            outage,
            row,
            figures,
        });
    });
    lines
}

/// Runs one row's calls through one outage against a fresh proxy, in virtual time.
async fn simulate(job: &Job<'_>, scenario: &Scenario) -> Figures {
    let start = Instant::now();
    let outage = DOWN_AT..back_at(job.outage);
    let proxy = Proxy::new(outage.clone());
    // The same network and the same arrivals for every row: the rows differ only in how they retry.
    let network = Rc::new(RefCell::new(Network::new(proxy, start, scenario.seed)));
    let clients: Vec<Rc<Client>> = (0..scenario.clients)
        .map(|client| Rc::new(Client::new(job.row.kind, scenario, client)))
        .collect();
    let calls = Rc::new(RefCell::new(Vec::new()));
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let net = tokio::task::spawn_local(Network::run(Rc::clone(&network)));
            let mut tasks = Vec::with_capacity(1024);
            for (at, client) in arrivals(scenario, send_for(job.outage)) {
                if start + at > Instant::now() {
                    tokio::time::sleep_until(start + at).await;
                }
                let client = Rc::clone(&clients[client]);
                let (network, calls) = (Rc::clone(&network), Rc::clone(&calls));
                let outage = outage.clone();
                tasks.push(tokio::task::spawn_local(async move {
                    let sent = Instant::now();
                    let ended = client.call(&network).await;
                    calls.borrow_mut().push(Call {
                        took: sent.elapsed(),
                        ok: ended.ok,
                        attempts: ended.attempts,
                        // A call held for its host (a breaker) met the outage if it started
                        // during it, whatever its first attempt got once it went.
                        met_outage: ended.met_outage
                            || ended.held && outage.contains(&(sent - start)),
                        why: ended.why,
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
    let seen = std::mem::take(&mut network.borrow_mut().server.arrivals);
    Figures::new(seen, back_at(job.outage), &calls)
}
