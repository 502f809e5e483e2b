//! Optimistic concurrency under contention: how much work and time each jitter costs.
//!
//! The model of "Exponential Backoff and Jitter" (AWS Architecture Blog, 2015): `N` clients each want to
//! write one row once. A client reads the row's version (one round trip), then writes conditionally on
//! that version (one round trip). One write wins per version; the losers sleep and start again, until every
//! client has written. Each network hop takes |Normal(10 ms, sd 2 ms)|.
//!
//! The sleeps are [`stagger::Backoff`]'s, drawn with `delays_seeded`; everything else is a discrete-event
//! simulation, so virtual time costs nothing and a run is the same for the same `--seed`.
//!
//! ```text
//! cargo run --release --example contention [-- --seed 1 --runs 100]
//! ```

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use stagger::{Backoff, Delays, Jitter};

/// The mean of one network hop.
const HOP_MEAN: Duration = Duration::from_millis(10);
/// The standard deviation of one network hop.
const HOP_SD: Duration = Duration::from_millis(2);
/// The largest sleep of every strategy.
const MAX_DELAY: Duration = Duration::from_secs(2);
/// The contention levels of the blog post's charts.
const CLIENTS: [usize; 3] = [50, 100, 190];

struct Strategy {
    name: &'static str,
    backoff: Backoff,
}

/// The blog's strategies with `base` 5 ms and `cap` 2 s. Its exponential family sleeps `base · 2^attempt`
/// from attempt 1, so the first sleep is 10 ms: stagger's `initial`. Decorrelated jitter starts from `base`.
fn strategies() -> [Strategy; 5] {
    let exponential = Backoff::exponential(Duration::from_millis(10)).with_max_delay(MAX_DELAY);
    [
        Strategy {
            name: "none",
            backoff: Backoff::fixed(Duration::ZERO),
        },
        Strategy {
            name: "exponential",
            backoff: exponential.with_jitter(Jitter::None),
        },
        Strategy {
            name: "full jitter",
            backoff: exponential.with_jitter(Jitter::Full),
        },
        Strategy {
            name: "equal jitter",
            backoff: exponential.with_jitter(Jitter::Equal),
        },
        Strategy {
            name: "decorrelated",
            backoff: Backoff::exponential(Duration::from_millis(5))
                .with_max_delay(MAX_DELAY)
                .with_jitter(Jitter::Decorrelated),
        },
    ]
}

fn main() {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}\n\n{USAGE}");
            std::process::exit(2);
        }
    };
    let wall = Instant::now();
    println!(
        "Optimistic concurrency, one row: read the version, write if unchanged; {} runs per cell, seed {}.",
        args.runs, args.seed
    );
    println!(
        "Network hop |Normal({} ms, sd {} ms)|; sleeps from stagger::Backoff, cap {} s.\n",
        HOP_MEAN.as_millis(),
        HOP_SD.as_millis(),
        MAX_DELAY.as_secs()
    );
    println!(
        "{:>7} {:<14} {:>16} {:>20}",
        "clients", "strategy", "write calls", "completion (ms)"
    );
    for (i, clients) in CLIENTS.into_iter().enumerate() {
        if i > 0 {
            println!();
        }
        // The same seeds for every strategy: they meet the same networks.
        for strategy in strategies() {
            let mut writes = 0_u64;
            let mut completion = Duration::ZERO;
            for run in 0..args.runs {
                let seed = mix(args.seed ^ mix(clients as u64) ^ mix(run.wrapping_add(1) << 32));
                let result = simulate(&strategy.backoff, clients, seed);
                writes += result.writes;
                completion += result.completion;
            }
            println!(
                "{:>7} {:<14} {:>16.1} {:>20.1}",
                clients,
                strategy.name,
                writes as f64 / args.runs as f64,
                completion.as_secs_f64() * 1e3 / args.runs as f64
            );
        }
    }
    println!("\n(simulated in {:.2?} of wall time)", wall.elapsed());
}

/// What one run cost.
struct RunResult {
    /// Write calls made by all clients together, the winning ones included.
    writes: u64,
    /// Until the last client received the acknowledgement of its write.
    completion: Duration,
}

/// A message arriving somewhere, for one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// The read reaches the server.
    ReadArrives,
    /// The version read reaches the client, which sends its write at once.
    ReadReturns { version: u64 },
    /// The conditional write reaches the server.
    WriteArrives { version: u64 },
    /// The server's answer to the write reaches the client.
    WriteReturns { won: bool },
}

/// The clients' progress, one event at a time in time order.
struct Simulation {
    /// Pending events as (time, sequence number for a stable order among equal times, client, step).
    events: BinaryHeap<Reverse<(Duration, u64, usize, Step)>>,
    sequence: u64,
    network: SmallRng,
}

impl Simulation {
    fn schedule(&mut self, at: Duration, client: usize, step: Step) {
        self.sequence += 1;
        self.events.push(Reverse((at, self.sequence, client, step)));
    }

    /// One network hop, from `now`.
    fn hop(&mut self, now: Duration) -> Duration {
        let hop =
            HOP_MEAN.as_secs_f64() + HOP_SD.as_secs_f64() * standard_normal(&mut self.network);
        now + Duration::from_secs_f64(hop.abs())
    }
}

fn simulate(backoff: &Backoff, clients: usize, seed: u64) -> RunResult {
    let mut sim = Simulation {
        events: BinaryHeap::with_capacity(clients * 2),
        sequence: 0,
        network: SmallRng::seed_from_u64(mix(seed)),
    };
    // Each client draws its sleeps from its own sequence, as separate processes would.
    let mut sleeps: Vec<Delays> = (0..clients)
        .map(|client| backoff.delays_seeded(mix(seed.wrapping_add(client as u64 + 1))))
        .collect();
    for client in 0..clients {
        let at = sim.hop(Duration::ZERO);
        sim.schedule(at, client, Step::ReadArrives);
    }
    let mut version = 0_u64;
    let mut writes = 0_u64;
    let mut completion = Duration::ZERO;
    while let Some(Reverse((now, _, client, step))) = sim.events.pop() {
        match step {
            Step::ReadArrives => {
                let at = sim.hop(now);
                sim.schedule(at, client, Step::ReadReturns { version });
            }
            Step::ReadReturns { version: read } => {
                writes += 1;
                let at = sim.hop(now);
                sim.schedule(at, client, Step::WriteArrives { version: read });
            }
            Step::WriteArrives { version: expected } => {
                let won = expected == version;
                if won {
                    version += 1;
                }
                let at = sim.hop(now);
                sim.schedule(at, client, Step::WriteReturns { won });
            }
            Step::WriteReturns { won: true } => completion = completion.max(now),
            Step::WriteReturns { won: false } => {
                let sleep = sleeps[client].next().unwrap_or(Duration::ZERO);
                let at = sim.hop(now + sleep);
                sim.schedule(at, client, Step::ReadArrives);
            }
        }
    }
    debug_assert_eq!(version, clients as u64, "every client writes exactly once");
    RunResult { writes, completion }
}

/// A standard normal draw (Box–Muller).
fn standard_normal(rng: &mut SmallRng) -> f64 {
    // `1 - U[0, 1)` is in `(0, 1]`, so the logarithm is finite.
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// SplitMix64's finaliser: turns related seeds (1, 2, 3, …) into unrelated ones.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

const USAGE: &str = "usage: contention [--seed N] [--runs N]

  --seed N  seed of the network and of every client's jitter (default 1)
  --runs N  runs averaged per strategy and number of clients (default 100)";

struct Args {
    seed: u64,
    runs: u64,
}

impl Args {
    fn parse() -> Result<Self, String> {
        let mut args = Self { seed: 1, runs: 100 };
        let mut argv = std::env::args().skip(1);
        while let Some(flag) = argv.next() {
            let mut value = |name: &str| {
                let text = argv.next().ok_or(format!("{name} needs a value"))?;
                text.parse::<u64>()
                    .map_err(|e| format!("{name} {text}: {e}"))
            };
            match flag.as_str() {
                "--seed" => args.seed = value("--seed")?,
                "--runs" => args.runs = value("--runs")?.max(1),
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => return Err(format!("unknown argument {other}")),
            }
        }
        Ok(args)
    }
}
