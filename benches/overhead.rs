//! The success-path overhead of both adapters, measured in two ways that a noisy machine blurs less than
//! criterion's means (`benches/tower.rs` and `benches/reqwest.rs` time the same variants with criterion).
//!
//! ```text
//! cargo bench --all-features --bench overhead                     # interleaved rounds: min and median ns
//! cargo bench --all-features --bench overhead -- --instructions   # callgrind: instructions per request
//! cargo bench --all-features --bench overhead -- --instructions chaos tower/stagger   # some of them
//! ```
//!
//! With the feature `chaos`, the `chaos_off` variants put a `ChaosLayer` or `ChaosMiddleware`, switched
//! off, beneath the retry layer or middleware (or alone over the service): what fault injection
//! compiled in and off costs the success path. `chaos_unpicked` has it on, with a rule whose predicate
//! picks no request. `-- --check-chaos` (what `.ci/run` runs) fails when a retry adapter with the chaos
//! beneath it, off, costs more than 1 % over the adapter alone.
//!
//! - Interleaved rounds: each round sends a batch of 2048 fresh requests through every variant in turn,
//!   so a slow moment of the machine hits every variant alike; the minimum over the rounds is the cost
//!   with the least interference, the median a typical one.
//! - Instructions (needs `valgrind` on the `PATH`): each variant runs alone under callgrind, once with
//!   N and once with 2N requests; the difference divided by N is what one request costs, exactly and
//!   the same on every run.
//!
//! Every variant builds its requests the same way; `build` only builds and drops them, so
//! `clone − build` is one copy of a request, and `X − bare` is what the layer or middleware `X` adds.
//! The inner service (tower) or the last middleware (reqwest-middleware) answers `200` at once; the
//! `_conn` variants answer with the extension a real connection's response carries (hyper-util's
//! `HttpInfo`), so the response's extensions map already exists when `RetryInfo` is put in it.

mod common;

use std::convert::Infallible;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::middleware::{ReqwestOk200, chain, forward, reqwest_request, time_reqwest};
use common::{
    Ok200, Ok200Later, RetryServerErrors, clone_http, http_request, time_copies, time_tower,
};
use http::Request;
use reqwest_middleware::{ClientWithMiddleware, Middleware};
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use stagger::tower::WithExtensions;
use stagger::{Overrides, RetryLayer, RetryMiddleware, RetryPolicy};
use tokio::runtime::Runtime;
use tower::{Layer, Service};

const BATCH: usize = 2048;
const ROUNDS: usize = 40;
const CALLGRIND_REQUESTS: usize = 10_000;

fn no_budget() -> RetryPolicy {
    RetryPolicy::builder()
        .budget(None)
        .build()
        .expect("a valid policy")
}

/// The default policy without its deadline and attempt timeout.
fn no_timers() -> RetryPolicy {
    RetryPolicy::builder()
        .max_elapsed(None)
        .attempt_timeout(None)
        .build()
        .expect("a valid policy")
}

/// The default policy with `host_cooldown` on and no pause in force: what the cooldown costs a request
/// when no host has asked for one.
fn cooldown() -> RetryPolicy {
    RetryPolicy::builder()
        .host_cooldown(true)
        .build()
        .expect("a valid policy")
}

/// The default policy and `RetryLayer`, over a sender to three replicas of the requests' host, each
/// `inner`.
fn replicas(
    inner: Ok200,
) -> impl Service<Request<Bytes>, Error: std::fmt::Debug> + Clone + 'static {
    let addrs = (2..=4).map(|n| std::net::SocketAddr::from(([127, 0, 0, n], 443)));
    let set = stagger::ReplicaSet::new("api.example.com", addrs).expect("a name");
    let policy = RetryPolicy::builder()
        .replicas(set.clone())
        .build()
        .expect("a valid policy");
    RetryLayer::new(policy).layer(stagger::replicas::Replicas::new(set, move |_| inner))
}

fn reqwest_retry() -> Arc<dyn Middleware> {
    Arc::new(RetryTransientMiddleware::new_with_policy(
        ExponentialBackoff::builder().build_with_max_retries(3),
    ))
}

/// One variant: sends (or copies) `n` fresh requests, and says how long the sending took.
type Variant = Box<dyn Fn(&Runtime, usize) -> Duration>;

fn tower_variant<S>(service: S) -> Variant
where
    S: Service<Request<Bytes>, Error: std::fmt::Debug> + Clone + 'static,
{
    Box::new(move |rt, n| {
        let batch = (0..n).map(|_| http_request()).collect();
        time_tower(rt, &mut service.clone(), batch)
    })
}

/// `service` over `reqwest` types, sent each request as `wrap` makes it of a `reqwest::Request`.
fn reqwest_tower_variant<S, R>(service: S, wrap: fn(reqwest::Request) -> R) -> Variant
where
    S: Service<R, Error: std::fmt::Debug> + Clone + 'static,
    R: 'static,
{
    Box::new(move |rt, n| {
        let batch = (0..n).map(|_| wrap(reqwest_request())).collect();
        time_tower(rt, &mut service.clone(), batch)
    })
}

/// A request in a `WithExtensions`, with no extension.
fn with_extensions(request: reqwest::Request) -> WithExtensions {
    WithExtensions::new(request)
}

/// A request in a `WithExtensions`, with `Overrides` that change nothing of the default policy.
fn with_overrides(request: reqwest::Request) -> WithExtensions {
    WithExtensions::new(request).with_extension(Overrides::default())
}

fn reqwest_variant(client: ClientWithMiddleware) -> Variant {
    Box::new(move |rt, n| {
        let batch = (0..n).map(|_| reqwest_request()).collect();
        time_reqwest(rt, &client, batch)
    })
}

/// Builds `n` requests and times one copy of each.
fn clone_variant<R: 'static>(build: fn() -> R, copy: fn(&R) -> R) -> Variant {
    Box::new(move |_, n| time_copies((0..n).map(|_| build()).collect(), copy))
}

fn build_variant<R: 'static>(build: fn() -> R) -> Variant {
    Box::new(move |_, n| {
        let batch: Vec<_> = (0..n).map(|_| build()).collect();
        drop(std::hint::black_box(batch));
        Duration::ZERO
    })
}

fn variants() -> Vec<(&'static str, Variant)> {
    let variants = retry_variants().into_iter();
    #[cfg(feature = "chaos")]
    let variants = variants.chain(chaos::variants());
    #[cfg(feature = "metrics")]
    let variants = variants.chain(recorded::variants());
    variants.collect()
}

/// With the feature `metrics`, stagger's rows with a recorder installed: a global one, as an
/// application installs its exporter's (metrics-util's `DebuggingRecorder`, a registry of atomic
/// handles looked up by key). Installed by the variant's first run, so measure them alone
/// (`--instructions`, which runs each variant in a process of its own, installing it before any
/// policy is built, as an application installs its exporter first thing); without a recorder, the
/// `tower/stagger` and `reqwest/stagger` rows are what the feature costs.
#[cfg(feature = "metrics")]
mod recorded {
    use super::*;

    pub(super) fn install() {
        static INSTALLED: std::sync::Once = std::sync::Once::new();
        INSTALLED.call_once(|| {
            let recorder = metrics_util::debugging::DebuggingRecorder::new();
            metrics::set_global_recorder(recorder).expect("no recorder installed before");
        });
    }

    pub(super) fn variants() -> Vec<(&'static str, Variant)> {
        let tower =
            tower_variant(RetryLayer::new(RetryPolicy::default()).layer(Ok200 { conn: false }));
        let retry = RetryMiddleware::new(RetryPolicy::default());
        let reqwest = reqwest_variant(chain(Some(Arc::new(retry)), false));
        vec![
            (
                "tower/stagger_recorded",
                Box::new(move |rt, n| {
                    install();
                    tower(rt, n)
                }),
            ),
            (
                "reqwest/stagger_recorded",
                Box::new(move |rt, n| {
                    install();
                    reqwest(rt, n)
                }),
            ),
        ]
    }
}

fn retry_variants() -> Vec<(&'static str, Variant)> {
    let ok = Ok200 { conn: false };
    let conn = Ok200 { conn: true };
    let tower_retry = tower::retry::RetryLayer::new(RetryServerErrors { remaining: 3 });
    vec![
        ("tower/build", build_variant(http_request)),
        ("tower/clone", clone_variant(http_request, clone_http)),
        ("tower/bare", tower_variant(ok)),
        // Any layer that wraps the service's future, doing nothing else: tower's `MapErr`.
        (
            "tower/forward",
            tower_variant(tower::util::MapErrLayer::new(|e: Infallible| e).layer(ok)),
        ),
        ("tower/tower_retry", tower_variant(tower_retry.layer(ok))),
        (
            "tower/stagger",
            tower_variant(RetryLayer::new(RetryPolicy::default()).layer(ok)),
        ),
        // The same, its name a set of three replicas, each an `Ok200` of its own: what placing each
        // attempt on a replica costs (the choice, the replica in the request, the sender's table).
        ("tower/stagger_replicas", tower_variant(replicas(ok))),
        (
            "tower/stagger_no_budget",
            tower_variant(RetryLayer::new(no_budget()).layer(ok)),
        ),
        (
            "tower/stagger_cooldown",
            tower_variant(RetryLayer::new(cooldown()).layer(ok)),
        ),
        ("tower/bare_conn", tower_variant(conn)),
        (
            "tower/tower_retry_conn",
            tower_variant(tower_retry.layer(conn)),
        ),
        (
            "tower/stagger_conn",
            tower_variant(RetryLayer::new(RetryPolicy::default()).layer(conn)),
        ),
        ("tower/bare_later", tower_variant(Ok200Later)),
        (
            "tower/stagger_later",
            tower_variant(RetryLayer::new(RetryPolicy::default()).layer(Ok200Later)),
        ),
        (
            "tower/stagger_later_no_timers",
            tower_variant(RetryLayer::new(no_timers()).layer(Ok200Later)),
        ),
        ("reqwest/build", build_variant(reqwest_request)),
        (
            "reqwest/clone",
            clone_variant(reqwest_request, |r| r.try_clone().expect("no stream")),
        ),
        ("reqwest/bare", reqwest_variant(chain(None, false))),
        (
            "reqwest/forward",
            reqwest_variant(chain(Some(Arc::new(forward)), false)),
        ),
        (
            "reqwest/reqwest_retry",
            reqwest_variant(chain(Some(reqwest_retry()), false)),
        ),
        (
            "reqwest/stagger",
            reqwest_variant(chain(
                Some(Arc::new(RetryMiddleware::new(RetryPolicy::default()))),
                false,
            )),
        ),
        (
            "reqwest/stagger_no_budget",
            reqwest_variant(chain(
                Some(Arc::new(RetryMiddleware::new(no_budget()))),
                false,
            )),
        ),
        (
            "reqwest/stagger_cooldown",
            reqwest_variant(chain(
                Some(Arc::new(RetryMiddleware::new(cooldown()))),
                false,
            )),
        ),
        ("reqwest/bare_conn", reqwest_variant(chain(None, true))),
        // `RetryLayer` over a service of `reqwest` types, where `reqwest::Client` goes: a plain
        // `reqwest::Request`, and one in a `WithExtensions` (issue 36, item 4), empty or with
        // `Overrides`.
        (
            "reqwest/layer_bare",
            reqwest_tower_variant(ReqwestOk200, std::convert::identity),
        ),
        (
            "reqwest/layer",
            reqwest_tower_variant(
                RetryLayer::new(RetryPolicy::default()).layer(ReqwestOk200),
                std::convert::identity,
            ),
        ),
        (
            "reqwest/layer_with_extensions",
            reqwest_tower_variant(
                RetryLayer::new(RetryPolicy::default()).layer(ReqwestOk200),
                with_extensions,
            ),
        ),
        (
            "reqwest/layer_overrides",
            reqwest_tower_variant(
                RetryLayer::new(RetryPolicy::default()).layer(ReqwestOk200),
                with_overrides,
            ),
        ),
        (
            "reqwest/reqwest_retry_conn",
            reqwest_variant(chain(Some(reqwest_retry()), true)),
        ),
        (
            "reqwest/stagger_conn",
            reqwest_variant(chain(
                Some(Arc::new(RetryMiddleware::new(RetryPolicy::default()))),
                true,
            )),
        ),
    ]
}

/// Fault injection, off, and on without a rule that picks the request.
#[cfg(feature = "chaos")]
mod chaos {
    use std::sync::Arc;

    use super::common::middleware::chain_of;
    use reqwest_middleware::Middleware;
    use stagger::chaos::{Chaos, ChaosLayer, ChaosMiddleware, Fault, Rule};
    use stagger::{RetryLayer, RetryMiddleware, RetryPolicy};
    use tower::Layer;

    use super::common::Ok200;
    use super::{Variant, reqwest_variant, tower_variant};

    fn off() -> Chaos {
        Chaos::builder()
            .rule(Rule::always(Fault::refused()))
            .enabled(false)
            .build()
    }

    /// On, with a rule whose predicate picks no request the bench sends.
    fn unpicked() -> Chaos {
        Chaos::new(Rule::always(Fault::refused()).when(|request| request.path() == Some("/never")))
    }

    fn retry() -> Arc<dyn Middleware> {
        Arc::new(RetryMiddleware::new(RetryPolicy::default()))
    }

    fn middleware(chaos: Chaos) -> Arc<dyn Middleware> {
        Arc::new(ChaosMiddleware::new(chaos))
    }

    /// The promise of `docs/testing.md`, as `.ci/run` holds it. Switched off beneath either adapter,
    /// the chaos allocates nothing and evaluates none of its rules: asserted, from callgrind's exact
    /// counts of calls, and the counts are shown to see an evaluation where there is one (a rule that
    /// picks no request is evaluated on every call). Its instructions, against the goal of 1 %, are
    /// measured and printed, not asserted: about 100 a request through tower (one move of the
    /// request and of the answer, the future's drop) and 170 through reqwest-middleware (the chain's
    /// step to one more middleware), near 1 % of this bench's request to an upstream that does
    /// nothing, and the figure moves by half a point between builds of unrelated code
    /// (docs/cost.md, "Fault injection, compiled in and off").
    pub(super) fn check() {
        let mut broken = Vec::new();
        for (alone, with_chaos, unpicked) in [
            (
                "tower/stagger",
                "tower/stagger_chaos_off",
                "tower/stagger_chaos_unpicked",
            ),
            (
                "reqwest/stagger",
                "reqwest/stagger_chaos_off",
                "reqwest/stagger_chaos_unpicked",
            ),
        ] {
            // Each variant run once for its instructions and its calls.
            let [alone_runs, with_runs, unpicked_runs] =
                [alone, with_chaos, unpicked].map(super::Measured::of);
            let (alone_count, with_count) = (alone_runs.per_request(), with_runs.per_request());
            let added = with_count as f64 / alone_count as f64 - 1.0;
            println!(
                "{with_chaos}: {with_count} instructions a request, {alone}: {alone_count} ({:+.2} %; goal at most 1 %: {})",
                100.0 * added,
                if added <= 0.01 { "met" } else { "NOT MET" },
            );
            let a_request = |calls| calls as f64 / super::CALLGRIND_REQUESTS as f64;
            let (alone_allocations, with_allocations) = (
                alone_runs.calls(is_allocation),
                with_runs.calls(is_allocation),
            );
            let (off, on) = (
                with_runs.calls(is_evaluation),
                unpicked_runs.calls(is_evaluation),
            );
            println!(
                "  allocations a request: {} ({alone}: {}); rules evaluated a request: {} ({unpicked}: {})",
                a_request(with_allocations),
                a_request(alone_allocations),
                a_request(off),
                a_request(on),
            );
            if with_allocations != alone_allocations || off != 0 {
                broken.push(with_chaos);
            }
            assert!(
                on >= super::CALLGRIND_REQUESTS as u64,
                "{unpicked}: no evaluation seen, the count is broken"
            );
        }
        assert!(
            broken.is_empty(),
            "switched off, the chaos did work: {broken:?}"
        );
    }

    /// glibc's allocation functions, which every Rust allocation calls.
    fn is_allocation(function: &str) -> bool {
        matches!(
            function,
            "malloc" | "calloc" | "realloc" | "posix_memalign" | "aligned_alloc"
        )
    }

    /// The chaos's path when it is on (`ChaosService::inject`, `ChaosMiddleware::inject`: out of
    /// line), where its rules are evaluated.
    fn is_evaluation(function: &str) -> bool {
        function.contains("stagger::chaos") && function.contains("::inject")
    }

    pub(super) fn variants() -> Vec<(&'static str, Variant)> {
        let ok = Ok200 { conn: false };
        let stagger = || RetryLayer::new(RetryPolicy::default());
        vec![
            (
                "tower/chaos_off",
                tower_variant(ChaosLayer::new(off()).layer(ok)),
            ),
            (
                "tower/stagger_chaos_off",
                tower_variant(stagger().layer(ChaosLayer::new(off()).layer(ok))),
            ),
            (
                "tower/stagger_chaos_unpicked",
                tower_variant(stagger().layer(ChaosLayer::new(unpicked()).layer(ok))),
            ),
            (
                "reqwest/chaos_off",
                reqwest_variant(chain_of(vec![middleware(off())], false)),
            ),
            (
                "reqwest/stagger_chaos_off",
                reqwest_variant(chain_of(vec![retry(), middleware(off())], false)),
            ),
            (
                "reqwest/stagger_chaos_unpicked",
                reqwest_variant(chain_of(vec![retry(), middleware(unpicked())], false)),
            ),
        ]
    }
}

fn main() {
    // A process that has had a second thread, as every program on tokio's multi-threaded runtime
    // or with a blocking pool has: glibc's malloc takes its multi-threaded paths from the first
    // thread on, and a row whose code started one (stagger's `metrics`, learning which recorder
    // lasts) would otherwise pay for them against rows that never did.
    std::thread::spawn(|| {})
        .join()
        .expect("a thread that does nothing");
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench` to every bench.
    let args: Vec<&str> = (args.iter().map(String::as_str))
        .filter(|a| *a != "--bench")
        .collect();
    match args.as_slice() {
        ["--only", name, n] => only(name, n.parse().expect("a request count")),
        ["--instructions", filters @ ..] => instructions(filters),
        #[cfg(feature = "chaos")]
        ["--check-chaos"] => chaos::check(),
        // Criterion's flags and filter, when `cargo bench` runs every bench with some: a filter keeps
        // the variants whose name contains it; flags are ignored.
        other => {
            let filters: Vec<&str> = (other.iter().copied())
                .filter(|a| !a.starts_with("--"))
                .collect();
            interleaved(&filters);
        }
    }
}

/// Runs one variant `n` times, alone: what callgrind measures.
fn only(name: &str, n: usize) {
    #[cfg(feature = "metrics")]
    if name.ends_with("_recorded") {
        recorded::install();
    }
    let rt = common::runtime();
    let (_, variant) = (variants().into_iter())
        .find(|(v, _)| *v == name)
        .unwrap_or_else(|| panic!("no variant {name}"));
    variant(&rt, n);
}

fn interleaved(filters: &[&str]) {
    let rt = common::runtime();
    let variants: Vec<_> = (variants().into_iter())
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f)))
        .collect();
    if variants.is_empty() {
        return;
    }
    let mut times = vec![Vec::with_capacity(ROUNDS); variants.len()];
    for _ in 0..ROUNDS {
        for ((_, variant), times) in variants.iter().zip(&mut times) {
            let elapsed = variant(&rt, BATCH);
            times.push(elapsed.as_nanos() as f64 / BATCH as f64);
        }
    }
    println!("ns per request over {ROUNDS} interleaved rounds of {BATCH} requests");
    println!("{:28} {:>9} {:>9}", "variant", "min", "median");
    for ((name, _), times) in variants.iter().zip(&mut times) {
        if name.ends_with("/build") {
            continue;
        }
        times.sort_by(f64::total_cmp);
        println!("{name:28} {:9.1} {:9.1}", times[0], times[times.len() / 2]);
    }
}

/// A variant's runs of `N` and `2N` requests under callgrind: what `N` requests cost is the
/// difference.
struct Measured {
    /// Each run's instruction count and profile.
    runs: [(u64, String); 2],
}

impl Measured {
    fn of(name: &str) -> Self {
        Self {
            runs: [CALLGRIND_REQUESTS, 2 * CALLGRIND_REQUESTS].map(|n| callgrind(name, n)),
        }
    }

    /// Instructions a request.
    fn per_request(&self) -> u64 {
        (self.runs[1].0 - self.runs[0].0) / CALLGRIND_REQUESTS as u64
    }

    /// The calls `N` requests make to the functions `callee` picks.
    #[cfg(feature = "chaos")]
    fn calls(&self, callee: fn(&str) -> bool) -> u64 {
        let [one, two] =
            [&self.runs[0].1, &self.runs[1].1].map(|profile| calls_in(profile, callee));
        two.saturating_sub(one)
    }
}

/// Runs `n` requests of the variant `name` under callgrind: its instruction count and its profile.
fn callgrind(name: &str, n: usize) -> (u64, String) {
    let exe = std::env::current_exe().expect("this benchmark's path");
    let out = std::env::temp_dir().join(format!(
        "stagger-overhead-{}-{}-{n}.callgrind",
        std::process::id(),
        name.replace('/', "_")
    ));
    let output = Command::new("valgrind")
        .args(["--tool=callgrind", "--compress-strings=no"])
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(&exe)
        .args(["--only", name, &n.to_string()])
        .output()
        .expect("valgrind on the PATH");
    assert!(
        output.status.success(),
        "callgrind on {name}: {}",
        output.status
    );
    let profile = std::fs::read_to_string(&out).expect("callgrind's output");
    let _ = std::fs::remove_file(&out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let refs = (stderr.lines())
        .find_map(|line| line.split("refs:").nth(1))
        .unwrap_or_else(|| panic!("no instruction count from callgrind:\n{stderr}"));
    let refs = refs.trim().replace(',', "").parse().expect("a count");
    (refs, profile)
}

/// The calls a callgrind `profile` counts to the functions `callee` picks: each call site is a
/// `cfn=<callee>` line, then `calls=<count> <position>`.
#[cfg(feature = "chaos")]
fn calls_in(profile: &str, callee: fn(&str) -> bool) -> u64 {
    let mut calls = 0;
    let mut picked = false;
    for line in profile.lines() {
        if let Some(function) = line.strip_prefix("cfn=") {
            picked = callee(function);
        } else if let Some(count) = line.strip_prefix("calls=")
            && picked
        {
            let count = count.split_whitespace().next().expect("a count");
            calls += count.parse::<u64>().expect("a count");
        }
    }
    calls
}

fn instructions(filters: &[&str]) {
    println!(
        "instructions per request (callgrind, {CALLGRIND_REQUESTS} vs {} requests)",
        2 * CALLGRIND_REQUESTS
    );
    // A filter with a `/` names one variant; without, every variant whose name contains it.
    let wanted = |name: &str| {
        filters.is_empty()
            || (filters.iter()).any(|f| name == *f || (!f.contains('/') && name.contains(f)))
    };
    for (name, _) in variants().into_iter().filter(|(name, _)| wanted(name)) {
        println!("{name:28} {:9}", Measured::of(name).per_request());
    }
}
