//! The command line.

use std::path::{Path, PathBuf};

pub(crate) const USAGE: &str =
    "usage: herd [--clients N] [--seed N] [--out DIR] [--threads N] [--scenario NAME]
            [--peer-rng] [--real]

  --clients N        clients in the herd, callers of the rate-limit scenario, whose quota is
                     0.8 N requests/s, clients of the metastable one, whose server serves
                     N requests/s, of the tail one, who send 10 N requests/s, of the
                     outages one, who send N requests/s, workers of the restart one, and
                     calls/s of the dead-host one (default 1000; 200 with --real)
  --seed N           seed of the network and of every client's jitter (default 1)
  --out DIR          where to write the charts, herd.svg, herd-retry-after.svg,
                     herd-ratelimit.svg, herd-metastable.svg, herd-tail.svg,
                     herd-outages.svg, herd-restart.svg and herd-dead-host.svg, creating
                     DIR if need be
                     (default target/herd, under CARGO_TARGET_DIR if set; --out docs for the
                     README's); not with --real, which draws none
  --threads N        rows simulated at once in virtual time, each on its own thread (default: the
                     machine's cores); the figures are the same for any N
  --scenario NAME    outage (the herd after an outage, the Retry-After herd, and each library's
                     defaults in the herd), ratelimit (new requests against a quota kept by
                     a token bucket, then by nginx's limit_req), metastable (a FIFO server at
                     70 % load loses half its capacity for 5 s), tail (1 % of attempts take
                     1 s, and hedging), outages (a backend restarting behind a reverse proxy,
                     which answers 502 for 0.5 to 5 s), restart (N supervised workers lose
                     their database for 30 s), dead-host (one policy, N calls/s, a host that
                     refuses connections or drops SYNs for 60 s, or restarts in 1 s, and
                     circuit breakers), replicas (one policy, N calls/s, a name with three
                     replicas, one of them refusing, dropping SYNs, answering 503 or slow for
                     60 s), or all (default)
  --peer-rng         the peers' jitter from their crates' own generators (reqwest-retry's
                     rand::rng(), tower's RandomState), as in production: those rows then differ
                     from run to run
  --real             a smaller herd over loopback sockets (axum and reqwest), in real time; the
                     outage scenario only";

/// Which scenarios to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenarios {
    All,
    Outage,
    RateLimit,
    Metastable,
    Tail,
    Outages,
    Restart,
    DeadHost,
    Replicas,
}

impl Scenarios {
    pub(crate) fn outage(self) -> bool {
        matches!(self, Self::All | Self::Outage)
    }

    pub(crate) fn rate_limit(self) -> bool {
        matches!(self, Self::All | Self::RateLimit)
    }

    pub(crate) fn metastable(self) -> bool {
        matches!(self, Self::All | Self::Metastable)
    }

    pub(crate) fn tail(self) -> bool {
        matches!(self, Self::All | Self::Tail)
    }

    pub(crate) fn outages(self) -> bool {
        matches!(self, Self::All | Self::Outages)
    }

    pub(crate) fn restart(self) -> bool {
        matches!(self, Self::All | Self::Restart)
    }

    pub(crate) fn dead_host(self) -> bool {
        matches!(self, Self::All | Self::DeadHost)
    }

    pub(crate) fn replicas(self) -> bool {
        matches!(self, Self::All | Self::Replicas)
    }
}

pub(crate) struct Args {
    pub(crate) clients: usize,
    pub(crate) seed: u64,
    /// The directory the charts are written to.
    pub(crate) out: PathBuf,
    pub(crate) real: bool,
    /// Rows simulated at once, each on its own thread.
    pub(crate) threads: usize,
    pub(crate) scenarios: Scenarios,
    /// reqwest-retry's jitter from its own generator.
    pub(crate) peer_rng: bool,
}

impl Args {
    pub(crate) fn parse() -> Result<Self, String> {
        let mut clients = None;
        let mut seed = 1;
        let mut out = None;
        let mut real = false;
        let mut threads = None;
        let mut scenarios = Scenarios::All;
        let mut peer_rng = false;
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
                "--scenario" => {
                    scenarios = match value("--scenario")?.as_str() {
                        "all" => Scenarios::All,
                        "outage" => Scenarios::Outage,
                        "replicas" => Scenarios::Replicas,
                        "ratelimit" => Scenarios::RateLimit,
                        "metastable" => Scenarios::Metastable,
                        "tail" => Scenarios::Tail,
                        "outages" => Scenarios::Outages,
                        "restart" => Scenarios::Restart,
                        "dead-host" => Scenarios::DeadHost,
                        other => {
                            return Err(format!(
                                "--scenario {other}: one of outage, ratelimit, metastable, tail, outages, restart, dead-host, all"
                            ));
                        }
                    };
                }
                "--peer-rng" => peer_rng = true,
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
        if real && !scenarios.outage() {
            return Err("--scenario: --real runs the outage scenario only".into());
        }
        Ok(Self {
            clients: clients.unwrap_or(if real { 200 } else { 1000 }),
            seed,
            out: out.unwrap_or_else(default_out),
            real,
            threads: threads.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            }),
            scenarios,
            peer_rng,
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
