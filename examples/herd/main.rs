//! The thundering herd: a thousand clients fail together, and how each backoff brings them back.
//!
//! A server is down for its first 500 ms and answers `503` to everything. Afterwards a token bucket
//! admits 2000 requests/s with a burst of 20 (20 per 10 ms), and answers `503` at once to anything over
//! that. 1000 clients send one request each at t = 0 and retry until they get a `200`, each through its
//! own [`RetryLayer`](stagger::RetryLayer) with its own policy (its own seed, its own budget), as
//! separate processes would: from 10 ms, capped at 1 s, unlimited retries. One row per backoff; the
//! last one keeps the default retry budget.
//!
//! Everything runs through the real layer on tokio's paused clock: ten simulated seconds take
//! milliseconds, and a run is the same for the same `--seed`. The network between clients and server
//! is simulated: a hop of |Normal(1 ms, sd 0.2 ms)| each way, which tokio's millisecond timer makes
//! 1 or 2 ms. Rows are independent simulations and run side by side, one per core (`--threads`).
//!
//! A second herd gets `Retry-After: 1` during the outage:
//! [`RetryAfterMode::Strict`](stagger::RetryAfterMode::Strict) brings every client back in the same
//! millisecond, the default [`RetryAfterMode::Spread`](stagger::RetryAfterMode::Spread) spreads them
//! over the second after it.
//!
//! The table gives, per row: attempts the server saw, the most in any 10 ms once it is back up (its
//! capacity is 20), when the clients got their final response (median, 99th percentile, last), the most
//! attempts one client made (from [`RetryInfo`](stagger::RetryInfo)) and how many clients gave up. The
//! charts show attempts per 10 ms over time, one per herd: `herd.svg` and `herd-retry-after.svg`,
//! written to `target/herd/` (under `CARGO_TARGET_DIR` if it is set) or to the directory given with
//! `--out`, which is created if need be. The README's charts are made with `--out docs`.
//!
//! A third scenario has no outage but a quota (`ratelimit.rs`): a server that admits 800
//! requests/s, 1000 callers in one process that keep sending 1000 new requests/s through one
//! policy. The quota is kept by a token bucket that refuses the rest with `429`, `Retry-After` and
//! `RateLimit`, then by nginx's `limit_req` without burst, which refuses with `429` and
//! `Retry-After: 1` alone. Its rows are stagger's defaults, the same with `host_cooldown(true)`,
//! reqwest-retry's defaults driven by its own crate, and no retries; its table gives the `429`s the
//! server sent, the `200`s per second, latency and failures, and its chart, `herd-ratelimit.svg`,
//! the `429`s and `200`s per 100 ms of each server.
//!
//! After the two outage herds, a third table runs the classic herd with each library's defaults: the
//! peers (reqwest-retry 0.9, tower 0.5's backoff, backon 1), their delays computed by their own crates
//! (`peers/`), beside stagger's defaults. A fourth scenario is metastable overload (`metastable.rs`): a
//! FIFO server at 70 % of its capacity loses half of it for 5 s, and the clients' 1 s timeouts and
//! retries keep it down; its chart, `herd-metastable.svg`, is the goodput over time. A fifth is tail
//! latency (`tail.rs`): a server that takes 1 s for 1 % of attempts, and hedging
//! (`hedge_after`) at 10 ms, at the p95 and at 50 ms, against "The Tail at Scale"; its chart,
//! `herd-tail.svg`, is the share of requests slower than each latency. A sixth is the most common
//! outage, a deploy (`outages.rs`): a backend restarts behind a reverse proxy, which answers `502` at
//! once for 0.5 to 5 s, under an open-loop stream of new requests; its table gives, per outage length
//! and client (no retries, the peers, stagger's defaults), how many of the requests that met the
//! outage still got a `200`, their attempts and latency, and the retry wave when the backend is back;
//! its chart, `herd-outages.svg`, the success rate against the outage's length. A seventh is a fleet
//! of long-running workers (`restart.rs`): 1 000 workers lose their database for 30 s and are
//! restarted by `stagger::supervise` or by the peers' restart schedules (Kubernetes, systemd,
//! task-supervisor, Akka, gRPC); its table gives the reconnection attempts, their peak per 10 ms once
//! the database is back and when every worker is connected again, and its chart, `herd-restart.svg`,
//! both over time. An eighth is a dead host (`dead_host.rs`): one process sends 1 000 new calls/s
//! through one policy to a host that refuses connections for 60 s, drops SYNs for 60 s, or restarts
//! in 1 s; its rows are stagger without a breaker, with its breaker holding calls or failing fast,
//! tower-resilience's circuit breaker and outlier detection, and models of the breakers of
//! Microsoft.Extensions.Http.Resilience and resilience4j; its tables give the attempts that reach
//! the host while it is down, the callers' latency and success, and the time to recover once it is
//! back, and its chart, `herd-dead-host.svg`, the attempts reaching the host over time.
//! A ninth is replicas behind one name (`replicas.rs`): one process sends 1 000 calls/s through one
//! policy to a name with three replicas, one of which refuses, drops SYNs, answers `503` or answers
//! ten times slower for 60 s; its rows are stagger without and with the replica set,
//! tower-resilience's outlier detection over tower's balancer, and Envoy's defaults modelled, and
//! its chart, `herd-replicas.svg`, the attempts reaching the bad replica over time.
//! `--scenario outage`, `ratelimit`, `metastable`, `tail`, `outages`, `restart`, `dead-host` or
//! `replicas` runs one of them; all run by default.
//!
//! ```text
//! cargo run --release --all-features --example herd                   # charts in target/herd/
//! cargo run --release --all-features --example herd -- --out docs     # the README's charts
//! cargo run --release --all-features --example herd -- --clients 10000 --seed 7 --out /tmp/herd
//! cargo run --release --all-features --example herd -- --scenario ratelimit
//! cargo run --release --all-features --example herd -- --scenario metastable
//! cargo run --release --all-features --example herd -- --scenario tail
//! cargo run --release --all-features --example herd -- --scenario outages
//! cargo run --release --all-features --example herd -- --scenario restart
//! cargo run --release --all-features --example herd -- --scenario dead-host
//! cargo run --release --all-features --example herd -- --real    # over loopback sockets, in real time
//! ```

mod args;
mod dead_host;
mod metastable;
mod outage;
mod outages;
mod peers;
mod ratelimit;
#[cfg(feature = "reqwest-middleware")]
mod real;
mod replicas;
mod report;
mod restart;
mod server;
mod sim;
mod tail;

use args::{Args, USAGE};
use report::peak_rss;

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
    // The herds' peak memory is read before the rate-limit scenario adds to it.
    let herds = args
        .scenarios
        .outage()
        .then(|| (outage::run(&args), peak_rss()));
    if args.scenarios.rate_limit() {
        if herds.is_some() {
            println!();
        }
        ratelimit::run(&args);
    }
    let metastable = args.scenarios.metastable().then(|| {
        if args.scenarios != args::Scenarios::Metastable {
            println!();
        }
        metastable::run(&args)
    });
    // The other scenarios' peak memory is read before the tail scenario adds to it.
    let before_tail = peak_rss();
    if args.scenarios.tail() {
        if args.scenarios != args::Scenarios::Tail {
            println!();
        }
        tail::run(&args);
    }
    // The tail scenario's peak memory is read before the outages scenario adds to it.
    let with_tail = peak_rss();
    if args.scenarios.outages() {
        if args.scenarios != args::Scenarios::Outages {
            println!();
        }
        outages::run(&args);
    }
    // The outages scenario's peak memory is read before the restart scenario adds to it.
    let with_outages = peak_rss();
    if args.scenarios.restart() {
        if args.scenarios != args::Scenarios::Restart {
            println!();
        }
        restart::run(&args);
    }
    // The restart scenario's peak memory is read before the dead-host scenario adds to it.
    let with_restart = peak_rss();
    if args.scenarios.dead_host() {
        if args.scenarios != args::Scenarios::DeadHost {
            println!();
        }
        dead_host::run(&args);
    }
    if args.scenarios.replicas() {
        if args.scenarios != args::Scenarios::Replicas {
            println!();
        }
        replicas::run(&args);
    }

    let wall = wall.elapsed();
    println!("\nwall time {wall:.2?}");
    if let Some((rows, Some(peak))) = herds {
        // Each thread has a row's clients waiting at once; peak memory is counted against all of them.
        let threads = args.threads.min(rows);
        println!(
            "peak RSS {:.1} MiB, {:.2} KiB per waiting client ({threads} × {} clients at once)",
            peak as f64 / 1024.0,
            peak as f64 / (threads * args.clients) as f64,
            args.clients,
        );
    }
    if args.scenarios.rate_limit()
        && let Some(peak) = before_tail
    {
        println!(
            "peak RSS {:.1} MiB with the rate-limit scenario",
            peak as f64 / 1024.0
        );
    }
    if let (Some(waiting), Some(peak)) = (metastable, before_tail) {
        // An upper bound: the whole process's peak, over the most calls any row had waiting at once,
        // times the rows run at once.
        let threads = args.threads.min(metastable::rows().len());
        println!(
            "peak RSS {:.1} MiB with the metastable scenario, at most {:.2} KiB per waiting call \
             ({threads} × {waiting} calls at once)",
            peak as f64 / 1024.0,
            peak as f64 / (threads * waiting.max(1)) as f64,
        );
    }
    if args.scenarios.tail()
        && let Some(peak) = with_tail
    {
        println!(
            "peak RSS {:.1} MiB with the tail scenario",
            peak as f64 / 1024.0
        );
    }
    if args.scenarios.outages()
        && let Some(peak) = with_outages
    {
        println!(
            "peak RSS {:.1} MiB with the outages scenario",
            peak as f64 / 1024.0
        );
    }
    if args.scenarios.restart()
        && let Some(peak) = with_restart
    {
        println!(
            "peak RSS {:.1} MiB with the restart scenario",
            peak as f64 / 1024.0
        );
    }
    if args.scenarios.dead_host()
        && let Some(peak) = peak_rss()
    {
        println!(
            "peak RSS {:.1} MiB with the dead-host scenario",
            peak as f64 / 1024.0
        );
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
