//! Tail latency: one attempt in a hundred takes a second, and hedging
//! ([`hedge_after`](stagger::RetryPolicyBuilder::hedge_after)) trades a few more requests for a
//! shorter tail (Dean and Barroso, "The Tail at Scale", CACM 2013).
//!
//! - The server ([`server`]) takes 1 s for 1 % of attempts, each on its own, and otherwise a
//!   log-normal time of median 8 ms (σ 0.5; 18 ms at its 95th percentile), behind the other scenarios'
//!   network, a hop of 1 or 2 ms each way (12 ms at the median and 23 ms at the p95 as the clients see
//!   it). A pool of workers serves attempts in arrival order; the ample server has one worker per
//!   client, 19 % busy without hedging and 38 % if every request were hedged, so that hedges never
//!   queue; the busy one has a quarter of them, 76 % busy without hedging. Neither is told of a
//!   cancelled attempt: it serves it all the same.
//! - Clients send GET requests open-loop: a Poisson stream of 10 requests/s per client for 4 s
//!   (40 000 for 1 000 clients), each made by one of the clients, drawn at random, through its own
//!   `RetryLayer` (the fleet: its own policy, budget and jitter) but in the last row, where they all go
//!   through one (one process). Every policy is stagger's defaults with `max_retries(1)`, the hedge's
//!   (the server never fails, so nothing else is retried).
//! - The rows: no hedging; a hedge after 10 ms, the paper's delay, which is below this server's median;
//!   after the 95th percentile of the row without hedging, as the builder's docs advise; after 50 ms,
//!   past nearly every fast answer, which hedges about as many requests as the paper did. Then the busy server without hedging, at 10 ms, at its own p95, and
//!   at 10 ms from one process, whose one budget (20 % of the requests) caps the hedges.
//!
//! Figures in [`figures`], the chart `herd-tail.svg` (the share of requests slower than each
//! latency) in [`chart`].

mod chart;
mod client;
mod figures;
mod server;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use http::{Request, StatusCode, Uri};
use stagger::{RetryInfo, RetryLayer};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

use crate::args::Args;
use crate::sim::{run_in_parallel, stream};
use client::{arrivals, policy};
use figures::Figures;
use server::{Backend, TailService};

/// How long new requests arrive.
const SEND_FOR: Duration = Duration::from_secs(4);
/// New requests per second, per client.
const RATE_PER_CLIENT: f64 = 10.0;
/// The workers of the busy server, per client (the ample server has one per client).
const BUSY_WORKERS_PER_CLIENT: f64 = 0.25;
/// The paper's delay.
const PAPER_DELAY: Duration = Duration::from_millis(10);
const URI: &str = "http://tail.example/";

/// The streams of randomness a run draws from its seed.
const ARRIVALS: u64 = 1;
const LATENCY: u64 = 2;
const POLICY: u64 = 3;

pub(crate) struct Scenario {
    pub(crate) clients: usize,
    pub(crate) seed: u64,
}

impl Scenario {
    fn rate(&self) -> f64 {
        self.clients as f64 * RATE_PER_CLIENT
    }

    fn workers(&self, server: Server) -> usize {
        match server {
            Server::Ample => self.clients,
            Server::Busy => {
                ((self.clients as f64 * BUSY_WORKERS_PER_CLIENT).round() as usize).max(1)
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    Ample,
    Busy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HedgeAt {
    Never,
    After(Duration),
    /// After the 95th percentile of the latency of the same server's row without hedging.
    P95,
}

/// How one row's clients hedge, and against which server: one line of the table.
pub(crate) struct Row {
    pub(crate) name: &'static str,
    server: Server,
    hedge: HedgeAt,
    /// Every client through one policy.
    one_process: bool,
}

pub(crate) fn rows() -> Vec<Row> {
    let row = |name, server, hedge| Row {
        name,
        server,
        hedge,
        one_process: false,
    };
    let ms = Duration::from_millis;
    vec![
        row("no hedging", Server::Ample, HedgeAt::Never),
        row(
            "hedge_after(10 ms)",
            Server::Ample,
            HedgeAt::After(PAPER_DELAY),
        ),
        row("hedge_after(p95)", Server::Ample, HedgeAt::P95),
        row("hedge_after(50 ms)", Server::Ample, HedgeAt::After(ms(50))),
        row("busy: no hedging", Server::Busy, HedgeAt::Never),
        row(
            "busy: hedge_after(10 ms)",
            Server::Busy,
            HedgeAt::After(PAPER_DELAY),
        ),
        row("busy: hedge_after(p95)", Server::Busy, HedgeAt::P95),
        Row {
            name: "busy: 10 ms, one process",
            server: Server::Busy,
            hedge: HedgeAt::After(PAPER_DELAY),
            one_process: true,
        },
    ]
}

/// Runs every row, prints the table and draws `herd-tail.svg` into `args.out`.
pub(crate) fn run(args: &Args) {
    let scenario = Scenario {
        clients: args.clients,
        seed: args.seed,
    };
    println!(
        "Tail latency: {} clients, each its own policy (the last row: one for all), send {:.0} GET \
         requests/s (Poisson) for {} s; the server takes 1 s for 1 % of attempts, else log-normal \
         (median 8 ms, sigma 0.5), with {} workers (ample) or {} (busy); max_retries(1) for the \
         hedge; p95 from the row without hedging; seed {}. Virtual time; rows run {} at a time.\n",
        scenario.clients,
        scenario.rate(),
        SEND_FOR.as_secs(),
        scenario.workers(Server::Ample),
        scenario.workers(Server::Busy),
        scenario.seed,
        args.threads,
    );
    let done = measure(&scenario, args.threads);
    print!("{}", table(&done));
    chart::draw_or_complain(
        &args.out.join("herd-tail.svg"),
        &format!(
            "{} requests, 1 % of attempts take 1 s: the share slower than each latency",
            done.first().map_or(0, |(_, f)| f.requests())
        ),
        &done,
    );
}

/// The table's lines and notes.
fn table(done: &[(&str, Figures)]) -> String {
    let mut text = figures::header();
    for (name, figures) in done {
        text += &figures::row(name, figures);
    }
    text + &figures::notes(done)
}

/// Runs every row on `threads` threads: first the rows without hedging, whose p95 the p95 rows
/// hedge after, then the others.
fn measure(scenario: &Scenario, threads: usize) -> Vec<(&'static str, Figures)> {
    let rows = rows();
    let mut figures: Vec<Option<Figures>> = rows.iter().map(|_| None).collect();
    let simulate = |runtime: &tokio::runtime::Runtime, &(index, hedge_after): &(usize, _)| {
        runtime.block_on(simulate(&rows[index], scenario, hedge_after))
    };
    let first: Vec<(usize, Option<Duration>)> = (rows.iter().enumerate())
        .filter(|(_, row)| row.hedge == HedgeAt::Never)
        .map(|(index, _)| (index, None))
        .collect();
    run_in_parallel(&first, threads, simulate, |k, done| {
        figures[first[k].0] = Some(done);
    });
    let p95 = |server| {
        let index = (rows.iter()).position(|r| r.server == server && r.hedge == HedgeAt::Never);
        let base = figures[index.expect("a row without hedging")].as_ref();
        base.expect("measured").latency(95.0)
    };
    let then: Vec<(usize, Option<Duration>)> = (rows.iter().enumerate())
        .filter_map(|(index, row)| match row.hedge {
            HedgeAt::Never => None,
            HedgeAt::After(delay) => Some((index, Some(delay))),
            HedgeAt::P95 => Some((index, Some(p95(row.server)))),
        })
        .collect();
    run_in_parallel(&then, threads, simulate, |k, done| {
        figures[then[k].0] = Some(done);
    });
    (rows.iter().zip(figures))
        .map(|(row, figures)| (row.name, figures.expect("every row measured")))
        .collect()
}

/// How one call ended.
struct Call {
    took: Duration,
    ok: bool,
    info: RetryInfo,
}

/// Runs one row's calls against a fresh server, in virtual time.
async fn simulate(row: &Row, scenario: &Scenario, hedge_after: Option<Duration>) -> Figures {
    let start = Instant::now();
    let workers = scenario.workers(row.server);
    let latency = stream(scenario.seed, LATENCY);
    let backend = Rc::new(Backend::new(start, latency, workers));
    let layers: Vec<RetryLayer> = if row.one_process {
        let one = RetryLayer::new(policy(scenario, 0, hedge_after));
        vec![one; scenario.clients]
    } else {
        (0..scenario.clients)
            .map(|client| RetryLayer::new(policy(scenario, client, hedge_after)))
            .collect()
    };
    let calls = Rc::new(RefCell::new(Vec::new()));
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let mut tasks = Vec::with_capacity(1024);
            for (request, (at, client)) in arrivals(scenario).into_iter().enumerate() {
                if start + at > Instant::now() {
                    tokio::time::sleep_until(start + at).await;
                }
                let service = layers[client].layer(TailService::new(&backend, request as u64));
                let mut get = Request::new(());
                *get.uri_mut() = Uri::from_static(URI);
                let calls = Rc::clone(&calls);
                tasks.push(tokio::task::spawn_local(async move {
                    let sent = Instant::now();
                    let ended = service.oneshot(get).await;
                    let (ok, info) = match ended {
                        Ok(response) => {
                            let info = response.extensions().get::<RetryInfo>().cloned();
                            (
                                response.status() == StatusCode::OK,
                                info.unwrap_or_default(),
                            )
                        }
                        Err(error) => (false, error.info()),
                    };
                    let took = sent.elapsed();
                    calls.borrow_mut().push(Call { took, ok, info });
                }));
                // A handle keeps its finished task's memory: let those go as the run goes.
                if tasks.len() == tasks.capacity() {
                    tasks.retain(|task| !task.is_finished());
                }
            }
            for task in tasks {
                task.await.expect("a call");
            }
            // The losers of the last races are still on their way: the server gets them all.
            backend.drain().await;
        })
        .await;
    let calls = std::mem::take(&mut *calls.borrow_mut());
    let mut latencies: Vec<_> = calls.iter().map(|c| c.took).collect();
    latencies.sort_unstable();
    let pool = backend.pool.borrow();
    Figures {
        hedge_after,
        latencies,
        failed: calls.iter().filter(|c| !c.ok).count(),
        attempts: calls.iter().map(|c| u64::from(c.info.attempts())).sum(),
        hedges: calls.iter().map(|c| u64::from(c.info.hedges())).sum(),
        counts: backend.counts.get(),
        workers: pool.workers,
        work: pool.work,
        queued: pool.queued,
    }
}
