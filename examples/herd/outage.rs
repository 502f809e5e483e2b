//! The herds after an outage: every backoff, the budget, the `Retry-After` herd, and each library's
//! defaults ([`defaults`]).

mod defaults;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use http::{Request, Uri};
use stagger::{Backoff, Jitter, RetryAfterMode, RetryLayer, RetryPolicy};
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

use crate::args::Args;
use crate::report::{
    Figures, Finish, draw_chart_or_complain, judge_spread, print_header, print_row,
};
use crate::server::{OUTAGE, RETRY_AFTER_SECONDS, Server, ServerConfig};
use crate::sim::{Network, SimulatedServer, mix, run_in_parallel};

/// Runs the classic herd and the `Retry-After` herd, prints their tables and draws their charts into
/// `args.out`. Returns how many rows were simulated.
pub(crate) fn run(args: &Args) -> usize {
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
    let simulate = |runtime: &Runtime, &(row, scenario): &(&Row, &Scenario)| {
        runtime.block_on(simulate(row, scenario))
    };
    run_in_parallel(&jobs, args.threads, simulate, |index, figures| {
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
    jobs.len() + defaults::run(args, &scenario)
}

/// One herd: who the clients are and what the server does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scenario {
    pub(crate) clients: usize,
    pub(crate) max_delay: Duration,
    pub(crate) server: ServerConfig,
    pub(crate) seed: u64,
}

/// How each client retries: one line of the table.
pub(crate) struct Row {
    pub(crate) name: &'static str,
    backoff: Backoff,
    budget: bool,
    retry_after: RetryAfterMode,
}

impl Row {
    /// The policy of one client. Unlimited retries and no time limits: the point is to see how long the
    /// herd takes to drain. No breaker: the rows compare backoffs, and a client whose host is down
    /// would go at its probes' pace, whatever its backoff (the defaults' table has the breaker).
    pub(crate) fn policy(&self, seed: u64) -> RetryPolicy {
        let builder = RetryPolicy::builder()
            .backoff(self.backoff)
            .max_retries(u32::MAX)
            .max_elapsed(None)
            .attempt_timeout(None)
            .breaker(None)
            .retry_after(self.retry_after)
            .seed(seed);
        let builder = if self.budget {
            builder
        } else {
            builder.budget(None)
        };
        builder.build().expect("a valid policy")
    }
}

impl Scenario {
    pub(crate) fn rows(&self, with_no_delay: bool) -> Vec<Row> {
        let exponential =
            Backoff::exponential(Duration::from_millis(10)).with_max_delay(self.max_delay);
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
                exponential.with_jitter(Jitter::None),
                false,
            ),
            row("full jitter", exponential.with_jitter(Jitter::Full), false),
            row(
                "equal jitter",
                exponential.with_jitter(Jitter::Equal),
                false,
            ),
            row(
                "decorrelated jitter",
                exponential.with_jitter(Jitter::Decorrelated),
                false,
            ),
            row(
                "full jitter + budget",
                exponential.with_jitter(Jitter::Full),
                true,
            ),
        ]);
        rows
    }

    pub(crate) fn retry_after_rows(&self) -> Vec<Row> {
        let backoff =
            Backoff::exponential(Duration::from_millis(10)).with_max_delay(self.max_delay);
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
    tally(&network, &finishes)
}

/// The figures of a finished run: what the server saw and when the clients were done, checked against
/// the attempts the clients report.
pub(super) fn tally(
    network: &RefCell<Network<Server>>,
    finishes: &RefCell<Vec<Finish>>,
) -> Figures {
    let finishes = std::mem::take(&mut *finishes.borrow_mut());
    let arrivals = std::mem::take(&mut network.borrow_mut().server.arrivals);
    let figures = Figures::new(arrivals, &finishes);
    let reported: u64 = finishes.iter().map(|f| u64::from(f.attempts)).sum();
    assert_eq!(
        reported,
        figures.attempts(),
        "the clients report every attempt the server saw"
    );
    figures
}

/// Each client's own jitter seed, as separate processes would have. The same in every row, so that rows
/// differ only in how their clients retry.
pub(crate) fn client_seed(seed: u64, client: usize) -> u64 {
    mix(mix(seed) ^ client as u64)
}
