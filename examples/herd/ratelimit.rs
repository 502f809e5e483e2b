//! The rate-limited servers: one process keeps sending new requests while the server says to wait.
//!
//! A server admits a quota of 800 requests/s, kept in one of two ways:
//!
//! - a token bucket a second deep, full at the start ([`token_bucket`]), which answers anything over
//!   the quota at once with `429`, `Retry-After: 1` and `RateLimit: "default";r=0;t=1`; a `200` says
//!   what is left, `RateLimit: "default";r=<tokens>;t=<seconds until full>`, so that with
//!   `host_cooldown` the `200` that takes the last token starts a pause too, and every answer states
//!   the quota, `RateLimit-Policy: "default";q=800;w=1`;
//! - nginx's `limit_req` as it comes (`rate=800r/s`, no burst: a leaky bucket, [`limit_req`]), which
//!   answers anything over the rate at once with `429` and `Retry-After: 1`, and no rate-limit header.
//!   nginx counts time in whole milliseconds, so a request 1 ms after the last one it admitted is
//!   refused: it admits at most one request every 2 ms, 500/s. The table says so rather than hide it.
//!
//! 1000 callers in one client process each send a new request every second, from a phase of their
//! own, for 20 s: 1000 requests/s, 25 % over the quota, whatever the answers. Every caller goes
//! through one policy (clones of one `RetryLayer`), so what one `429` teaches is the process's to use:
//! the stampede that matters after it is the new requests the process keeps sending, which
//! `host_cooldown` holds. One row per client and server, on the same arrivals and the same network,
//! the token bucket's rows first:
//!
//! - stagger's defaults (`RetryPolicy::default()`, seeded), then the same with `host_cooldown(true)`;
//! - reqwest-retry 0.9 with its documented policy and its `DefaultRetryableStrategy`, driven by its
//!   own crate (see [`peers`](crate::peers));
//! - no retries, the baseline.
//!
//! `--clients N` scales the callers and keeps the ratio: the quota is 0.8 N requests/s.

mod chart;
mod figures;
mod limit_req;
#[cfg(test)]
mod tests;
mod token_bucket;

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Duration;

use http::{Request, Uri};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use stagger::{RetryInfo, RetryLayer, RetryPolicy};
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

use crate::args::Args;
use crate::peers::{Peer, PeerClient};
use crate::sim::{Model, Network, SimulatedServer, run_in_parallel, stream};
use chart::Column;
use figures::{Answers, Call, Figures, Outcome};
use limit_req::LimitReq;
use token_bucket::TokenBucket;

/// How long the callers send new requests.
const SEND_FOR: Duration = Duration::from_secs(20);
/// How often each caller sends a new request.
const PERIOD: Duration = Duration::from_secs(1);
/// The quota per caller: the callers offer 1 / 0.8 = 1.25 times the quota.
const QUOTA_PER_CALLER: f64 = 0.8;
/// The width of the slots in which the server's answers are counted and charted.
const SLOT: Duration = Duration::from_millis(100);
/// Where every request goes: the cooldown is kept per host.
const URI: &str = "http://api.example/";

/// The streams of randomness a run draws from its seed, besides the network's.
const ARRIVALS: u64 = 1;
const POLICY: u64 = 2;
const PEER_JITTER: u64 = 3;

/// Who calls the server, and what it admits.
struct Scenario {
    callers: usize,
    /// Requests per second the server admits, and the depth of its bucket.
    quota: f64,
    seed: u64,
    /// Whether reqwest-retry's jitter comes from the crate's own generator (`--peer-rng`).
    peer_rng: bool,
}

/// A server model that counts its answers.
trait RateLimiter: Model + 'static {
    /// The `200`s and `429`s sent so far.
    fn answers(&mut self) -> &mut Answers;
}

/// How one row's calls are retried: one line of the table.
struct Row {
    name: &'static str,
    client: Client,
}

enum Client {
    /// Through stagger's `RetryLayer`: the policy built from the seed, shared by every caller.
    Stagger(fn(u64) -> RetryPolicy),
    /// Through reqwest-retry's policy and strategy.
    ReqwestRetry,
}

fn rows() -> [Row; 4] {
    let stagger = |name, policy| Row {
        name,
        client: Client::Stagger(policy),
    };
    [
        stagger("stagger defaults", |seed| {
            RetryPolicy::builder().seed(seed).build().expect("a policy")
        }),
        stagger("stagger, host_cooldown(true)", |seed| {
            let builder = RetryPolicy::builder().host_cooldown(true);
            builder.seed(seed).build().expect("a policy")
        }),
        Row {
            name: "reqwest-retry 0.9 defaults",
            client: Client::ReqwestRetry,
        },
        stagger("no retries", |seed| {
            let builder = RetryPolicy::builder().max_retries(0);
            builder.seed(seed).build().expect("a policy")
        }),
    ]
}

/// The servers every row runs against, in the table's order.
const SERVERS: [Server; 2] = [Server::TokenBucket, Server::LimitReq];

/// What keeps the quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Server {
    /// A token bucket a second deep, full at the start, with the IETF rate-limit headers.
    TokenBucket,
    /// nginx's `limit_req` without burst, with `Retry-After: 1` alone.
    LimitReq,
}

impl Server {
    /// The server in a few words: the title of its column of the chart.
    fn title(self) -> &'static str {
        match self {
            Self::TokenBucket => "a token bucket, with RateLimit headers",
            Self::LimitReq => "nginx's limit_req without burst, Retry-After: 1 alone",
        }
    }

    /// The heading of the server's part of the table.
    fn heading(self, quota: f64) -> String {
        match self {
            Self::TokenBucket => format!(
                "A token bucket {quota:.0} deep, full at t = 0. Over the quota it answers 429 at once, \
                 with Retry-After and RateLimit; every answer carries RateLimit-Policy."
            ),
            Self::LimitReq => format!(
                "nginx's limit_req as it comes: rate={quota:.0}r/s, no burst, a leaky bucket. Over the \
                 rate it answers 429 at once, with Retry-After: 1 alone. nginx counts whole \
                 milliseconds: a request 1 ms after the last one admitted is refused, so it admits at \
                 most {:.0} requests/s ({:.0} % of the quota).",
                LimitReq::new(quota).most_per_second(),
                LimitReq::new(quota).most_per_second() / quota * 100.0,
            ),
        }
    }
}

/// One simulation: a row's callers against one server.
struct Job<'a> {
    server: Server,
    row: &'a Row,
}

/// What one row's callers got from one server.
struct Line<'a> {
    server: Server,
    row: &'a Row,
    figures: Figures,
}

/// Runs every row against every server, prints the table and draws `herd-ratelimit.svg` into
/// `args.out`.
pub(crate) fn run(args: &Args) {
    let scenario = Scenario {
        callers: args.clients,
        quota: (args.clients as f64 * QUOTA_PER_CALLER).max(1.0),
        seed: args.seed,
        peer_rng: args.peer_rng,
    };
    let offered = scenario.callers as f64 / PERIOD.as_secs_f64();
    println!(
        "Rate limit: {} callers in one process, each sending a new request every {} s for {} s \
         ({offered:.0} requests/s), against a quota of {:.0} requests/s kept by two servers in turn; \
         seed {}.",
        scenario.callers,
        PERIOD.as_secs(),
        SEND_FOR.as_secs(),
        scenario.quota,
        scenario.seed,
    );
    println!(
        "Every caller goes through one policy. Virtual time; rows run {} at a time.\n",
        args.threads,
    );
    if scenario.peer_rng {
        println!("reqwest-retry's jitter: the crate's own rand::rng(), different in every run.\n");
    }
    let rows = rows();
    let lines = measure(&scenario, &rows, args.threads);
    print!("{}", table(&scenario, &lines));
    let per_slot = |per_second: f64| per_second * SLOT.as_secs_f64();
    let quota = (
        format!("quota ({:.0} per 100 ms)", per_slot(scenario.quota)),
        per_slot(scenario.quota),
    );
    let columns: Vec<Column> = (SERVERS.iter())
        .map(|&server| {
            let mut levels = vec![quota.clone()];
            if server == Server::LimitReq {
                let most = per_slot(LimitReq::new(scenario.quota).most_per_second());
                levels.push((
                    format!("the most nginx admits ({most:.0} per 100 ms)"),
                    most,
                ));
            }
            Column {
                heading: server.title().into(),
                rows: (lines.iter())
                    .filter(|line| line.server == server)
                    .map(|line| (line.row.name, &line.figures))
                    .collect(),
                levels,
            }
        })
        .collect();
    chart::draw_or_complain(
        &args.out.join("herd-ratelimit.svg"),
        &format!(
            "{} callers in one process, {offered:.0} new requests/s against a quota of {:.0}/s",
            scenario.callers, scenario.quota
        ),
        &columns,
    );
}

/// Simulates every row against every server on `threads` threads: one line per server and row, the
/// servers in order and the rows in order within each.
fn measure<'a>(scenario: &Scenario, rows: &'a [Row], threads: usize) -> Vec<Line<'a>> {
    let jobs: Vec<Job> = (SERVERS.iter())
        .flat_map(|&server| rows.iter().map(move |row| Job { server, row }))
        .collect();
    let mut lines = Vec::with_capacity(jobs.len());
    let simulate = |runtime: &Runtime, job: &Job| runtime.block_on(simulate(job, scenario));
    run_in_parallel(&jobs, threads, simulate, |index, figures| {
        let Job { server, row } = jobs[index];
        lines.push(Line {
            server,
            row,
            figures,
        });
    });
    lines
}

/// The table: per server, its heading, then its rows and their notes.
fn table(scenario: &Scenario, lines: &[Line<'_>]) -> String {
    let parts: Vec<String> = (SERVERS.iter())
        .map(|&server| {
            let rows: Vec<(&str, &Figures)> = (lines.iter())
                .filter(|line| line.server == server)
                .map(|line| (line.row.name, &line.figures))
                .collect();
            let heading = server.heading(scenario.quota);
            format!("{heading}\n{}", figures::table(&rows, scenario.quota))
        })
        .collect();
    parts.join("\n")
}

/// When each call is made, sorted: every caller sends every `PERIOD` for `SEND_FOR`, from a phase of
/// its own, in whole milliseconds.
fn arrivals(scenario: &Scenario) -> Vec<Duration> {
    let mut rng = SmallRng::seed_from_u64(stream(scenario.seed, ARRIVALS));
    let period = PERIOD.as_millis() as u64;
    let sends = SEND_FOR.as_millis() as u64 / period;
    let mut arrivals: Vec<Duration> = (0..scenario.callers)
        .flat_map(|_| {
            let phase = rng.random_range(0..period);
            (0..sends).map(move |k| Duration::from_millis(phase + k * period))
        })
        .collect();
    arrivals.sort_unstable();
    arrivals
}

/// Runs one row's calls against a fresh server, in virtual time.
async fn simulate(job: &Job<'_>, scenario: &Scenario) -> Figures {
    let quota = scenario.quota;
    match job.server {
        Server::TokenBucket => {
            simulate_against(TokenBucket::new(quota, quota), job.row, scenario).await
        }
        Server::LimitReq => simulate_against(LimitReq::new(quota), job.row, scenario).await,
    }
}

/// Runs one row's calls against `server`, in virtual time.
async fn simulate_against<M: RateLimiter>(server: M, row: &Row, scenario: &Scenario) -> Figures {
    let start = Instant::now();
    // The same network and the same arrivals for every row: the rows differ only in how they retry.
    let network = Rc::new(RefCell::new(Network::new(server, start, scenario.seed)));
    let arrivals = arrivals(scenario);
    let calls = Rc::new(RefCell::new(Vec::with_capacity(arrivals.len())));
    let caller = Caller::new(row, scenario);
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let net = tokio::task::spawn_local(Network::run(Rc::clone(&network)));
            let mut tasks = Vec::with_capacity(1024);
            for at in arrivals {
                if start + at > Instant::now() {
                    tokio::time::sleep_until(start + at).await;
                }
                let server = SimulatedServer::connect(&network);
                let calls = Rc::clone(&calls);
                let call = caller.call(server);
                tasks.push(tokio::task::spawn_local(async move {
                    let outcome = call.await;
                    calls.borrow_mut().push(Call {
                        took: start.elapsed() - at,
                        ended: start.elapsed(),
                        outcome,
                    });
                }));
                // A handle keeps its finished task's memory: let those go as the run goes.
                if tasks.len() == tasks.capacity() {
                    tasks.retain(|task| !task.is_finished());
                }
            }
            for task in tasks {
                task.await.expect("a caller");
            }
            net.abort();
        })
        .await;
    let calls = std::mem::take(&mut *calls.borrow_mut());
    let answers = std::mem::take(network.borrow_mut().server.answers());
    let figures = Figures::new(answers, &calls);
    let reported: u64 = calls.iter().map(|c| u64::from(c.outcome.attempts)).sum();
    assert_eq!(
        reported,
        figures.attempts(),
        "every attempt is accounted for"
    );
    figures
}

/// One row's client: the stagger layer every caller shares, or reqwest-retry's policy.
enum Caller {
    Stagger(RetryLayer),
    ReqwestRetry(Rc<PeerClient>),
}

impl Caller {
    fn new(row: &Row, scenario: &Scenario) -> Self {
        match row.client {
            Client::Stagger(policy) => {
                Self::Stagger(RetryLayer::new(policy(stream(scenario.seed, POLICY))))
            }
            Client::ReqwestRetry => {
                let seed = stream(scenario.seed, PEER_JITTER);
                let peer =
                    PeerClient::new(Peer::ReqwestRetry, (!scenario.peer_rng).then_some(seed));
                Self::ReqwestRetry(Rc::new(peer))
            }
        }
    }

    /// One call to `server`, and how it ended.
    fn call<M: Model + 'static>(
        &self,
        server: SimulatedServer<M>,
    ) -> Pin<Box<dyn Future<Output = Outcome>>> {
        let uri = Uri::from_static(URI);
        match self {
            Self::Stagger(layer) => {
                let service = layer.layer(server);
                let mut request = Request::new(());
                *request.uri_mut() = uri;
                Box::pin(async move {
                    match service.oneshot(request).await {
                        Ok(response) => {
                            let info = response.extensions().get::<RetryInfo>();
                            let info = info.expect("the layer's RetryInfo").clone();
                            Outcome::stagger(Some(response.status()), info)
                        }
                        Err(error) => Outcome::stagger(None, error.info()),
                    }
                })
            }
            Self::ReqwestRetry(peer) => {
                let peer = Rc::clone(peer);
                Box::pin(
                    async move { Outcome::reqwest_retry(&peer.call(server, &uri, None).await) },
                )
            }
        }
    }
}
