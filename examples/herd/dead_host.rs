//! A dead host: one process calls one host through one policy, and the host stops answering.
//!
//! - One service calling a dependency: new GET calls arrive open-loop, a Poisson stream of 1 000/s
//!   (`--clients`), from t = 0 until 20 s after the host is back, whatever the answers, all through
//!   one client and so one policy (one budget, one breaker). The run goes on until every call has
//!   ended.
//! - The host answers `200` at once, with capacity to spare, before and after its outage. From
//!   t = 10 s it (a) refuses connections for 60 s (each attempt fails one round trip later with an
//!   `io::Error` of kind `ConnectionRefused`), (b) drops SYNs for 60 s (an attempt never ends; the
//!   client's attempt timeout ends it), or (c) restarts, refusing connections for 1 s. The other
//!   scenarios' network, a hop of 1 or 2 ms each way, lies between it and the client ([`host`]).
//! - Every row's policy is `RetryPolicy::default()` (10 retries, a budget of 20 % plus 10/s) with
//!   `attempt_timeout(500 ms)` and `max_elapsed(5 s)`, seeded from `--seed`, its budget keeping its
//!   own starting credit (rows run side by side in one process; see [`own_process`]). The rows: no
//!   breaker; stagger's breaker holding calls (`Breaker::default()`, the default, 10 s) and failing fast; and,
//!   in front of the no-breaker row's policy, where their users put them (inside the retry, every
//!   attempt through them): tower-resilience 0.13's circuit breaker and outlier detection, driven by
//!   the crate ([`tower_resilience`](crate::peers::tower_resilience)), and models of the breakers of
//!   Microsoft.Extensions.Http.Resilience's standard handler
//!   ([`polly_breaker`](crate::peers::polly_breaker)) and of resilience4j
//!   ([`resilience4j_breaker`](crate::peers::resilience4j_breaker)), each with its defaults.
//!
//! The figures ([`figures`]): the attempts that reached the host while it was down; the latency of
//! the calls started while it was down, all of them and those started once the row's breaker had
//! tripped; the share of calls that got their `200`, of those started while it was down and of all;
//! how long after the host's return 99 % of new calls succeed; and the most attempts in one 10 ms
//! once it is back, and per 10 ms over its busiest 100 ms. The chart `herd-dead-host.svg` ([`chart`]) is the attempts reaching the host over
//! time, one panel per case.

mod chart;
mod client;
mod figures;
mod host;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use stagger::{Breaker, RetryPolicy};
use tokio::runtime::Runtime;
use tokio::time::Instant;

use crate::args::Args;
use crate::sim::{Network, own_process, run_in_parallel, stream};
use figures::Figures;
use host::{Fate, Host};

/// The host's name, and the URI of every call.
const HOST: &str = "api.example";
const URI: &str = "http://api.example/";
/// The policy of every row: the defaults but for these two (issue 30's setting).
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(500);
const MAX_ELAPSED: Duration = Duration::from_secs(5);
/// The per-call timeout tower-resilience's docs put inside its layers: a millisecond under the
/// policy's attempt timeout, so that it, not stagger's, ends an attempt that hangs and the crate
/// records the failure (two timers due in the same millisecond fire in an order tokio does not
/// promise).
const PER_CALL_TIMEOUT: Duration = Duration::from_millis(499);

/// The streams of randomness a run draws from its seed, besides the network's.
const ARRIVALS: u64 = 1;
const POLICY: u64 = 2;

/// What the host does while it is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Case {
    /// (a) It refuses connections.
    Refuses,
    /// (b) It drops SYNs: attempts hang.
    DropsSyns,
    /// (c) It restarts: it refuses connections, briefly.
    Restarts,
}

const CASES: [Case; 3] = [Case::Refuses, Case::DropsSyns, Case::Restarts];

impl Case {
    fn fate(self) -> Fate {
        match self {
            Self::Refuses | Self::Restarts => Fate::Refused,
            Self::DropsSyns => Fate::Dropped,
        }
    }

    fn letter(self) -> &'static str {
        match self {
            Self::Refuses => "a",
            Self::DropsSyns => "b",
            Self::Restarts => "c",
        }
    }

    fn what(self) -> &'static str {
        match self {
            Self::Refuses => "refuses connections",
            Self::DropsSyns => "drops SYNs",
            Self::Restarts => "restarts (refuses connections)",
        }
    }
}

/// The scenario's shape: the run's figures come from these alone.
#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    /// New calls per second.
    rate: f64,
    seed: u64,
    /// When the host goes down.
    down_at: Duration,
    /// How long it is down in cases (a) and (b).
    dead_for: Duration,
    /// How long it is down in case (c).
    restart_for: Duration,
    /// How long new calls keep coming once it is back.
    send_after: Duration,
}

impl Scenario {
    fn new(args: &Args) -> Self {
        Self {
            rate: args.clients as f64,
            seed: args.seed,
            down_at: Duration::from_secs(10),
            dead_for: Duration::from_secs(60),
            restart_for: Duration::from_secs(1),
            send_after: Duration::from_secs(20),
        }
    }

    fn outage(&self, case: Case) -> Duration {
        match case {
            Case::Refuses | Case::DropsSyns => self.dead_for,
            Case::Restarts => self.restart_for,
        }
    }

    fn back_at(&self, case: Case) -> Duration {
        self.down_at + self.outage(case)
    }

    fn send_for(&self, case: Case) -> Duration {
        self.back_at(case) + self.send_after
    }

    /// The policy of every row, with `breaker`.
    fn policy(&self, breaker: Option<Breaker>) -> RetryPolicy {
        own_process(RetryPolicy::builder())
            .attempt_timeout(ATTEMPT_TIMEOUT)
            .max_elapsed(MAX_ELAPSED)
            .breaker(breaker)
            .seed(stream(self.seed, POLICY))
            .build()
            .expect("a valid policy")
    }
}

/// How one row's client guards its host.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// stagger's policy with this breaker, or none.
    Stagger(Option<Breaker>),
    /// tower-resilience's circuit breaker, inside the no-breaker policy's retry layer.
    TowerResilience,
    /// tower-resilience's outlier detection, inside it too.
    Outlier,
    /// The model of Microsoft.Extensions.Http.Resilience's standard breaker, inside it too.
    Polly,
    /// The model of resilience4j's defaults, inside it too.
    Resilience4j,
}

pub(crate) struct Row {
    name: &'static str,
    kind: Kind,
}

fn rows() -> Vec<Row> {
    let row = |name, kind| Row { name, kind };
    vec![
        row("stagger, no breaker", Kind::Stagger(None)),
        row(
            "stagger defaults, hold 10 s",
            Kind::Stagger(Some(Breaker::default())),
        ),
        row(
            "stagger, breaker fail fast",
            Kind::Stagger(Some(Breaker::fail_fast())),
        ),
        row("tower-resilience breaker", Kind::TowerResilience),
        row("tower-resilience outlier", Kind::Outlier),
        row("Microsoft standard (model)", Kind::Polly),
        row("resilience4j (model)", Kind::Resilience4j),
    ]
}

/// One simulation: a row through one case.
struct Job<'a> {
    case: Case,
    row: &'a Row,
}

/// One line of a table.
pub(crate) struct Line<'a> {
    case: Case,
    row: &'a Row,
    figures: Figures,
}

/// Runs every row through every case, prints a table per case and draws `herd-dead-host.svg` into
/// `args.out`.
pub(crate) fn run(args: &Args) {
    let scenario = Scenario::new(args);
    println!(
        "Dead host: one process sends {:.0} new GET calls/s (Poisson) through one policy to one host, \
         which answers 200 at once with capacity to spare, but from t = {} is down: (a) refuses \
         connections for {}, (b) drops SYNs for {}, (c) restarts, refusing connections for {}; calls \
         go on until {} after its return. Every row: RetryPolicy::default() with attempt_timeout({} \
         ms), max_elapsed({}); seed {}. Virtual time; rows run {} at a time.",
        scenario.rate,
        seconds(scenario.down_at),
        seconds(scenario.dead_for),
        seconds(scenario.dead_for),
        seconds(scenario.restart_for),
        seconds(scenario.send_after),
        ATTEMPT_TIMEOUT.as_millis(),
        seconds(MAX_ELAPSED),
        scenario.seed,
        args.threads,
    );
    println!(
        "Per row: the attempts that reached the host while it was down (and as a share of the \
         no-breaker row's); when the breaker tripped, after the outage began; latency of the calls \
         started while it was down, all and those started once it had tripped; the share of calls \
         that got a 200, started while it was down and all; when, after its return, 99 % of the new \
         calls of every 100 ms got a 200; the most attempts in one 10 ms after its return, and per \
         10 ms over its busiest 100 ms ({:.0} per 10 ms offered).",
        scenario.rate / 100.0,
    );
    let rows = rows();
    let lines = measure(&scenario, &rows, args.threads);
    for case in CASES {
        let lines: Vec<&Line> = lines.iter().filter(|l| l.case == case).collect();
        println!(
            "\n({}) the host {} for {}:\n",
            case.letter(),
            case.what(),
            seconds(scenario.outage(case))
        );
        print!("{}", figures::table(&lines));
        print!("{}", figures::goals(case, &lines, &scenario));
    }
    chart::draw_or_complain(
        &args.out.join("herd-dead-host.svg"),
        &format!(
            "Attempts reaching a dead host ({:.0} calls/s, one policy)",
            scenario.rate
        ),
        &scenario,
        &lines,
    );
}

/// `d` in seconds, as few digits as it needs: `0.5 s`, `60 s`.
fn seconds(d: Duration) -> String {
    format!("{} s", d.as_secs_f64())
}

/// Simulates every row through every case on `threads` threads: one line per case and row, the cases
/// in order and the rows in order within each.
fn measure<'a>(scenario: &Scenario, rows: &'a [Row], threads: usize) -> Vec<Line<'a>> {
    let jobs: Vec<Job> = (CASES.iter())
        .flat_map(|&case| rows.iter().map(move |row| Job { case, row }))
        .collect();
    let mut lines = Vec::with_capacity(jobs.len());
    // A runtime of its own for each job, its clock at zero: the timers of one job then fire in the
    // same order whichever thread runs it, and after whichever job (the threads' runtimes, reused,
    // carry their clocks from job to job).
    let simulate = |_: &Runtime, job: &Job| paused_runtime().block_on(simulate(job, scenario));
    run_in_parallel(&jobs, threads, simulate, |index, figures| {
        let Job { case, row } = jobs[index];
        lines.push(Line { case, row, figures });
    });
    lines
}

fn paused_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

/// Runs one row's calls through one case against a fresh host, in virtual time.
async fn simulate(job: &Job<'_>, scenario: &Scenario) -> Figures {
    let start = Instant::now();
    let down = scenario.down_at..scenario.back_at(job.case);
    let host = Host::new(down, job.case.fate());
    // The same network and the same arrivals for every row: the rows differ only in how they guard
    // the host.
    let network = Rc::new(RefCell::new(Network::new(host, start, scenario.seed)));
    let local = tokio::task::LocalSet::new();
    let calls = local
        .run_until(async {
            let net = tokio::task::spawn_local(Network::run(Rc::clone(&network)));
            let calls = client::run(job.row.kind, &network, scenario, job.case).await;
            net.abort();
            calls
        })
        .await;
    let arrivals = std::mem::take(&mut network.borrow_mut().server.arrivals);
    Figures::new(arrivals, &calls, scenario, job.case)
}
