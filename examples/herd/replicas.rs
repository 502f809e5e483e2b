//! Replicas behind one name: one process calls a name that stands for three replicas, through one
//! policy, and one replica turns bad for 60 s.
//!
//! - New GET calls arrive open-loop, a Poisson stream of 1 000/s (`--clients`), from t = 0 until
//!   20 s after the replica is well again, all through one client and one policy.
//! - Three replicas, each answering `200` at once over the other scenarios' network (a hop of 1 or
//!   2 ms each way). From t = 10 s, for 60 s, replica 0, the first in the resolver's order, is bad:
//!   (a) it refuses connections, (b) it drops SYNs, (c) it answers `503`, (d) it answers ten times
//!   slower (30 ms of server time, against the 3 ms of a call's two hops and more).
//! - Every row's policy is `RetryPolicy::default()` with `attempt_timeout(500 ms)` and
//!   `max_elapsed(5 s)`, seeded from `--seed`, its budget keeping its own starting credit. The
//!   rows: stagger today, over a client that knows the name alone and pools connections per name
//!   ([`fleet::NameClient`]); stagger with the replica set (`ReplicaSet`, `Replicas` over a
//!   connection per replica); and, inside the retry layer of a policy with no set and no breaker,
//!   tower-resilience 0.13's outlier detection over tower's p2c balancer, driven by the crates, and
//!   Envoy's defaults, modelled ([`peers`]).
//!
//! The figures: the calls that failed, all and during the bad minute; the latency of the calls made
//! during the bad minute once a second of it had passed (detection), p50 / p99; the attempts that
//! reached the bad replica then, against its fair share (a third of the attempts); and the retries
//! that went back to the replica their call's previous attempt failed on. The chart,
//! `herd-replicas.svg`, is the attempts reaching the bad replica over time, one panel per case.

mod fleet;
mod peers;

use std::cell::RefCell;
use std::fmt::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use http::{Request, Response, StatusCode, Uri};
use plotters::prelude::*;
use stagger::replicas::Replicas;
use stagger::{ReplicaSet, RetryLayer, RetryPolicy};
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, Service, ServiceExt};

use crate::args::Args;
use crate::server::BUCKET;
use crate::sim::{Network, own_process, poisson_arrivals, run_in_parallel, stream};
use fleet::{Connection, Fate, NameClient, Networks, REPLICAS, Replica, Trail};

const NAME: &str = "api.example:8080";
const URI: &str = "http://api.example:8080/";
const ATTEMPT_TIMEOUT: Duration = Duration::from_millis(500);
const MAX_ELAPSED: Duration = Duration::from_secs(5);
/// tower-resilience's per-call timeout, a millisecond under stagger's (see `dead_host`).
const PER_CALL_TIMEOUT: Duration = Duration::from_millis(499);
const SLOW: Duration = Duration::from_millis(30);
const BAD_AT: Duration = Duration::from_secs(10);
const BAD_FOR: Duration = Duration::from_secs(60);
const AFTER: Duration = Duration::from_secs(20);
/// How long into the bad minute a row is given to find the replica out.
const DETECTION: Duration = Duration::from_secs(1);
const ARRIVALS: u64 = 1;
const POLICY: u64 = 2;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Case {
    Refuses,
    DropsSyns,
    Unavailable,
    Slow,
}

const CASES: [Case; 4] = [
    Case::Refuses,
    Case::DropsSyns,
    Case::Unavailable,
    Case::Slow,
];

impl Case {
    fn fate(self) -> Fate {
        match self {
            Self::Refuses => Fate::Refused,
            Self::DropsSyns => Fate::Dropped,
            Self::Unavailable => Fate::Unavailable,
            Self::Slow => Fate::Slow(SLOW),
        }
    }

    fn what(self) -> &'static str {
        match self {
            Self::Refuses => "(a) refuses connections",
            Self::DropsSyns => "(b) drops SYNs",
            Self::Unavailable => "(c) answers 503",
            Self::Slow => "(d) answers 10x slower",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Today,
    Replicas,
    TowerResilience,
    Envoy,
}

const ROWS: [(&str, Kind); 4] = [
    ("stagger today (the name alone)", Kind::Today),
    ("stagger with the replica set", Kind::Replicas),
    (
        "tower-resilience outlier over tower balance",
        Kind::TowerResilience,
    ),
    ("Envoy's defaults (model)", Kind::Envoy),
];

/// How a call ended.
struct Call {
    at: Duration,
    took: Duration,
    ok: bool,
    back_to_failed: usize,
}

/// One row through one case.
pub(crate) struct Figures {
    failed: usize,
    failed_bad: usize,
    calls_bad: usize,
    p50: Duration,
    p99: Duration,
    /// Attempts that reached the bad replica after detection, and all attempts then.
    to_bad: u64,
    attempts: u64,
    back_to_failed: usize,
    /// Attempts reaching the bad replica per [`BUCKET`].
    arrivals: Vec<u32>,
}

struct Line {
    case: Case,
    row: usize,
    figures: Figures,
}

pub(crate) fn run(args: &Args) {
    let rate = args.clients as f64;
    println!(
        "Replicas: one process sends {rate:.0} new GET calls/s (Poisson) through one policy to a \
         name with {REPLICAS} replicas; from t = {} s, for {} s, the first in the resolver's order \
         is bad. Every row: RetryPolicy::default() with attempt_timeout(500 ms), max_elapsed(5 s); \
         seed {}. Virtual time.",
        BAD_AT.as_secs(),
        BAD_FOR.as_secs(),
        args.seed,
    );
    let jobs: Vec<(Case, usize)> = (CASES.iter())
        .flat_map(|&case| (0..ROWS.len()).map(move |row| (case, row)))
        .collect();
    let mut lines = Vec::new();
    let seed = args.seed;
    let simulate = |_: &Runtime, &(case, row): &(Case, usize)| {
        paused().block_on(simulate(case, ROWS[row].1, rate, seed))
    };
    run_in_parallel(&jobs, args.threads, simulate, |index, figures| {
        let (case, row) = jobs[index];
        lines.push(Line { case, row, figures });
    });
    for case in CASES {
        println!("\n{}:\n", case.what());
        let rows: Vec<&Line> = lines.iter().filter(|l| l.case == case).collect();
        print!("{}", table(&rows));
        print!("{}", goals(&rows));
    }
    let path = args.out.join("herd-replicas.svg");
    match chart(&path, &lines, rate) {
        Ok(()) => println!("\nchart: {}", path.display()),
        Err(e) => eprintln!("\ncould not draw {}: {e}", path.display()),
    }
}

fn paused() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

fn policy(seed: u64) -> stagger::RetryPolicyBuilder {
    own_process(RetryPolicy::builder())
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .max_elapsed(MAX_ELAPSED)
        .seed(stream(seed, POLICY))
}

fn addr(index: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 2 + index as u8], 8080))
}

async fn simulate(case: Case, kind: Kind, rate: f64, seed: u64) -> Figures {
    let start = Instant::now();
    let networks: Networks = (0..REPLICAS)
        .map(|index| {
            let bad = if index == 0 {
                BAD_AT..BAD_AT + BAD_FOR
            } else {
                Duration::ZERO..Duration::ZERO
            };
            let replica = Replica::new(bad, case.fate());
            Rc::new(RefCell::new(Network::new(
                replica,
                start,
                stream(seed, 10 + index as u64),
            )))
        })
        .collect();
    let local = tokio::task::LocalSet::new();
    let calls = local
        .run_until(async {
            let delivering: Vec<_> = (networks.iter())
                .map(|network| tokio::task::spawn_local(Network::run(Rc::clone(network))))
                .collect();
            let send_for = BAD_AT + BAD_FOR + AFTER;
            let arrivals: Vec<Duration> =
                (poisson_arrivals(stream(seed, ARRIVALS), rate, send_for, 1).into_iter())
                    .map(|(at, _)| at)
                    .collect();
            let calls = match kind {
                Kind::Today => {
                    let policy = policy(seed).build().expect("a policy");
                    drive(
                        RetryLayer::new(policy).layer(NameClient::new(&networks)),
                        &arrivals,
                    )
                    .await
                }
                Kind::Replicas => {
                    let set = ReplicaSet::new(NAME, (0..REPLICAS).map(addr)).expect("a name");
                    let policy = policy(seed)
                        .replicas(set.clone())
                        .build()
                        .expect("a policy");
                    let conns = networks.clone();
                    let make = move |a: SocketAddr| {
                        let index = (0..REPLICAS).find(|&i| addr(i) == a).unwrap_or(0);
                        Connection::new(&conns, index)
                    };
                    drive(
                        RetryLayer::new(policy).layer(Replicas::new(set, make)),
                        &arrivals,
                    )
                    .await
                }
                Kind::TowerResilience => {
                    let policy = policy(seed).breaker(None).build().expect("a policy");
                    let balanced = peers::Balanced::new(&networks, PER_CALL_TIMEOUT);
                    drive(RetryLayer::new(policy).layer(balanced), &arrivals).await
                }
                Kind::Envoy => {
                    let policy = policy(seed).breaker(None).build().expect("a policy");
                    drive(
                        RetryLayer::new(policy).layer(peers::Envoy::new(&networks)),
                        &arrivals,
                    )
                    .await
                }
            };
            for task in delivering {
                task.abort();
            }
            calls
        })
        .await;
    let arrivals = std::mem::take(&mut networks[0].borrow_mut().server.arrivals);
    let all: Vec<Vec<u32>> = (networks.iter().skip(1))
        .map(|n| std::mem::take(&mut n.borrow_mut().server.arrivals))
        .collect();
    figures(calls, arrivals, &all)
}

/// Makes a call at each of `arrivals` through a clone of `service`, each carrying a [`Trail`].
async fn drive<S, E>(service: S, arrivals: &[Duration]) -> Vec<Call>
where
    S: Service<Request<()>, Response = Response<()>, Error = stagger::Error<E>> + Clone + 'static,
    S::Future: 'static,
    E: 'static,
{
    let start = Instant::now();
    let ended = Rc::new(RefCell::new(Vec::with_capacity(arrivals.len())));
    let mut tasks = Vec::with_capacity(1024);
    for &at in arrivals {
        if start + at > Instant::now() {
            tokio::time::sleep_until(start + at).await;
        }
        let (service, ended) = (service.clone(), Rc::clone(&ended));
        tasks.push(tokio::task::spawn_local(async move {
            let sent = Instant::now();
            let trail = Trail::default();
            let mut request = Request::new(());
            *request.uri_mut() = Uri::from_static(URI);
            request.extensions_mut().insert(trail.clone());
            let ok =
                matches!(service.oneshot(request).await, Ok(r) if r.status() == StatusCode::OK);
            ended.borrow_mut().push(Call {
                at: sent - start,
                took: sent.elapsed(),
                ok,
                back_to_failed: trail.back_to_failed(),
            });
        }));
        if tasks.len() == tasks.capacity() {
            tasks.retain(|task| !task.is_finished());
        }
    }
    for task in tasks {
        task.await.expect("a call");
    }
    std::mem::take(&mut *ended.borrow_mut())
}

fn figures(calls: Vec<Call>, arrivals: Vec<u32>, others: &[Vec<u32>]) -> Figures {
    let bucket = |t: Duration| (t.as_nanos() / BUCKET.as_nanos()) as usize;
    let (from, to) = (bucket(BAD_AT + DETECTION), bucket(BAD_AT + BAD_FOR));
    let sum = |a: &[u32]| -> u64 {
        a.iter()
            .skip(from)
            .take(to - from)
            .map(|&n| u64::from(n))
            .sum()
    };
    let to_bad = sum(&arrivals);
    let attempts = to_bad + others.iter().map(|a| sum(a)).sum::<u64>();
    let bad = BAD_AT..BAD_AT + BAD_FOR;
    let mut latencies: Vec<Duration> = (calls.iter())
        .filter(|c| (BAD_AT + DETECTION..BAD_AT + BAD_FOR).contains(&c.at))
        .map(|c| c.took)
        .collect();
    latencies.sort_unstable();
    let rank = |q: f64| {
        latencies
            .get(((q * latencies.len() as f64).ceil() as usize).max(1) - 1)
            .copied()
            .unwrap_or_default()
    };
    Figures {
        failed: calls.iter().filter(|c| !c.ok).count(),
        failed_bad: calls
            .iter()
            .filter(|c| !c.ok && bad.contains(&c.at))
            .count(),
        calls_bad: calls.iter().filter(|c| bad.contains(&c.at)).count(),
        p50: rank(0.5),
        p99: rank(0.99),
        to_bad,
        attempts,
        back_to_failed: calls.iter().map(|c| c.back_to_failed).sum(),
        arrivals,
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn table(lines: &[&Line]) -> String {
    let mut out = String::from(
        "| row | calls failed (during the bad minute) | p50 / p99 after detection | attempts to the bad replica after detection (of a fair share) | retries back to the replica that failed |\n|---|---:|---:|---:|---:|\n",
    );
    for line in lines {
        let f = &line.figures;
        let fair = f.attempts as f64 / REPLICAS as f64;
        let _ = writeln!(
            out,
            "| {} | {} ({} of {}) | {} / {} ms | {} ({:.1} % of {:.0}) | {} |",
            ROWS[line.row].0,
            f.failed,
            f.failed_bad,
            f.calls_bad,
            ms(f.p50),
            ms(f.p99),
            f.to_bad,
            100.0 * f.to_bad as f64 / fair.max(1.0),
            fair,
            f.back_to_failed,
        );
    }
    out
}

/// The goal for this table: the replica set's row ahead of every other on failed calls
/// and p99.
fn goals(lines: &[&Line]) -> String {
    let ours = lines
        .iter()
        .find(|l| ROWS[l.row].1 == Kind::Replicas)
        .map(|l| &l.figures);
    let Some(ours) = ours else {
        return String::new();
    };
    let others: Vec<&Figures> = (lines.iter())
        .filter(|l| ROWS[l.row].1 != Kind::Replicas)
        .map(|l| &l.figures)
        .collect();
    let verdict = |ahead: bool, level: bool| match (ahead, level) {
        (true, _) => "met, ahead of every other row",
        (false, true) => "met only as a tie: no other row is worse, some as good",
        (false, false) => "NOT MET",
    };
    let failed = verdict(
        others.iter().all(|o| ours.failed < o.failed),
        others.iter().all(|o| ours.failed <= o.failed),
    );
    let p99 = verdict(
        others.iter().all(|o| ours.p99 < o.p99),
        others.iter().all(|o| ours.p99 <= o.p99),
    );
    format!(
        "\ngoal, fewest failed calls ({}): {failed}; lowest p99 ({} ms): {p99}\n",
        ours.failed,
        ms(ours.p99),
    )
}

const COLORS: [RGBColor; 4] = [
    RGBColor(127, 127, 127),
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(255, 127, 14),
];

/// The attempts reaching the bad replica per 10 ms (the mean over 100 ms), over time.
fn chart(path: &Path, lines: &[Line], rate: f64) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let root = SVGBackend::new(path, (1000, 1300)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        &format!("Attempts reaching the bad replica of three ({rate:.0} calls/s, one policy)"),
        ("sans-serif", 20),
    )?;
    let top = rate * BUCKET.as_secs_f64();
    let end = (BAD_AT + BAD_FOR + AFTER).as_secs_f64() + 1.0;
    for (area, case) in root.split_evenly((CASES.len(), 1)).iter().zip(CASES) {
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!("{}, t = 10 to 70 s", case.what()),
                ("sans-serif", 16),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..end, 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("per 10 ms")
            .draw()?;
        chart.draw_series([Rectangle::new(
            [
                (BAD_AT.as_secs_f64(), 0.0),
                ((BAD_AT + BAD_FOR).as_secs_f64(), top),
            ],
            BLACK.mix(0.06).filled(),
        )])?;
        for line in lines.iter().filter(|l| l.case == case) {
            let color = COLORS[line.row];
            let points = (line.figures.arrivals.chunks(10).enumerate()).map(|(i, chunk)| {
                let mean = chunk.iter().map(|&n| f64::from(n)).sum::<f64>() / 10.0;
                ((i as f64 + 0.5) * 0.1, mean)
            });
            chart
                .draw_series(LineSeries::new(
                    points,
                    color.stroke_width(if line.row == 1 { 2 } else { 1 }),
                ))?
                .label(ROWS[line.row].0)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE)
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
