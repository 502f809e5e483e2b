//! nginx's rate limiting: `limit_req` at 5 requests/s per client address, answering the excess at once
//! with `429` and `Retry-After: 1`. 50 callers through one client with the default policy, each sending
//! one GET after another for 60 s, with and without `host_cooldown(true)`, against nginx's default (no
//! burst: one request per 200 ms) and `burst=5 nodelay`.
//!
//! The 8 runs (2 configurations × cooldown on and off × 2 adapters) take 60 s and the calls in flight
//! then, so they run once, at the same time, each against an nginx of its own (its own zone), and the
//! tests below read their figures.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use reqwest::Method;
use stagger::{RetryPolicy, StopReason};
use tracing::instrument::WithSubscriber;

use super::breaker::{Fields, Recorded};
use super::client::Adapter;
use super::ms;
use super::nginx::{Logged, Nginx};

/// nginx's rate: 5 requests/s.
const QUOTA: f64 = 5.0;
const CALLERS: usize = 50;
/// How long the callers send: long enough that the second the first `429` asks for (when no
/// request may go), and the cooldown's measuring of the rate (its probe and its search, a few
/// seconds, each step below nginx's rate costing a request's turn), are a small part of it: over
/// 60 s, at most 296 of the 300 requests the quota allows get through.
const SEND_FOR: Duration = Duration::from_secs(60);
/// `Retry-After: 1`, less the 1 ms that two `$msec` stamps, each truncated to the millisecond, may
/// take off a gap.
const RETRY_AFTER_LESS_ROUNDING: Duration = ms(999);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// nginx's default: no burst, so at most one request per 200 ms.
    NoBurst,
    /// `burst=5 nodelay`: 5 more at once, each given back at the rate.
    Burst5,
}

impl Limit {
    fn directive(self) -> &'static str {
        match self {
            Self::NoBurst => "limit_req zone=z;",
            Self::Burst5 => "limit_req zone=z burst=5 nodelay;",
        }
    }
}

/// How one call ended.
#[derive(Debug)]
struct Ended {
    id: String,
    status: Option<u16>,
    error: Option<String>,
    attempts: u32,
    stop: StopReason,
    took: Duration,
}

/// One of the 8 runs: its calls and what nginx logged.
#[derive(Debug)]
struct Run {
    limit: Limit,
    cooldown: bool,
    adapter: Adapter,
    calls: Vec<Ended>,
    log: Vec<Logged>,
    /// The breaker's events ("host down" and after), should the host be found down.
    host_events: Vec<Fields>,
}

impl Run {
    fn label(&self) -> String {
        let cooldown = if self.cooldown { "on" } else { "off" };
        format!("{:?}, cooldown {cooldown}, {:?}", self.limit, self.adapter)
    }

    /// The attempts its calls made.
    fn attempts(&self) -> usize {
        self.calls.iter().map(|call| call.attempts as usize).sum()
    }

    fn logged(&self, status: u16) -> usize {
        self.log.iter().filter(|line| line.status == status).count()
    }

    /// 200s per second over the `SEND_FOR` after the first request nginx saw.
    fn goodput(&self) -> f64 {
        let Some(first) = self.log.iter().map(|line| line.at).min() else {
            return 0.0;
        };
        let in_time = self
            .log
            .iter()
            .filter(|l| l.status == 200 && l.at - first < SEND_FOR)
            .count();
        in_time as f64 / SEND_FOR.as_secs_f64()
    }

    /// For each request id, every request that came sooner after a 429 of the same id than its
    /// `Retry-After`: its URI and the gap.
    fn early_retries(&self) -> Vec<(String, Duration)> {
        let mut by_id: BTreeMap<&str, Vec<&Logged>> = BTreeMap::new();
        for line in &self.log {
            let id = line.request_id.as_deref().unwrap_or("-");
            by_id.entry(id).or_default().push(line);
        }
        let mut early = Vec::new();
        for mut lines in by_id.into_values() {
            lines.sort_by_key(|line| line.at);
            for pair in lines.windows(2) {
                let gap = pair[1].at - pair[0].at;
                if pair[0].status == 429 && gap < RETRY_AFTER_LESS_ROUNDING {
                    early.push((pair[1].uri.clone(), gap));
                }
            }
        }
        early
    }

    fn failed(&self) -> Vec<&Ended> {
        self.calls
            .iter()
            .filter(|c| c.status != Some(200))
            .collect()
    }

    fn report(&self) -> String {
        let mut failures: BTreeMap<String, usize> = BTreeMap::new();
        for call in self.failed() {
            let ended = call
                .status
                .map_or_else(|| call.error.clone().unwrap_or_default(), |s| s.to_string());
            *failures
                .entry(format!("{ended} ({})", call.stop))
                .or_default() += 1;
        }
        let slowest = self.calls.iter().map(|c| c.took).max().unwrap_or_default();
        let mut admitted: Vec<_> = self
            .log
            .iter()
            .filter(|l| l.status == 200)
            .map(|l| l.at)
            .collect();
        admitted.sort_unstable();
        let mut gaps: Vec<Duration> = admitted.windows(2).map(|w| w[1] - w[0]).collect();
        gaps.sort_unstable();
        let median_gap = gaps.get(gaps.len() / 2).copied().unwrap_or_default();
        format!(
            "limit_req {}: nginx answered {} 200s and {} 429s ({} attempts); goodput \
             {:.2}/s ({:.0} % of {QUOTA}/s), a median {median_gap:?} between 200s; slowest call \
             {slowest:?}; {} calls failed: {failures:?}{}",
            self.label(),
            self.logged(200),
            self.logged(429),
            self.attempts(),
            self.goodput(),
            100.0 * self.goodput() / QUOTA,
            self.failed().len(),
            self.host_changes(),
        )
    }

    /// The first of the breaker's events, if it found the host down: when, and why.
    fn host_changes(&self) -> String {
        let mut changes = String::new();
        for event in self.host_events.iter().take(EVENTS_SHOWN) {
            let field = |name: &str| event.get(name).map_or("-", String::as_str);
            changes.push_str(&format!(
                "\n  at {}: {} ({}), failures {}, evidence {}, {}",
                field("at"),
                field("host.state"),
                field("host.scope"),
                field("failures"),
                field("host.evidence"),
                field("url.path"),
            ));
        }
        if self.host_events.len() > EVENTS_SHOWN {
            let more = self.host_events.len() - EVENTS_SHOWN;
            changes.push_str(&format!("\n  and {more} more events"));
        }
        changes
    }
}

/// The breaker's events a run's report shows, and the failed calls an assertion lists, at most.
const EVENTS_SHOWN: usize = 10;

/// After a call that ended unsent, the caller waits this long before its next: a host found down
/// fails this test, and a loop of calls refused in microseconds would take the cores from the
/// suite's other trials, and so fail them too.
const AFTER_UNSENT: Duration = ms(10);

async fn run(limit: Limit, cooldown: bool, adapter: Adapter) -> Run {
    // Only a 429 carries Retry-After: on a 200 it would say nothing nginx means.
    let http = "limit_req_zone $binary_remote_addr zone=z:1m rate=5r/s;
    map $status $retry_after { 429 1; default \"\"; }";
    // A static file: `return` runs before limit_req's phase and would never be limited.
    let server = format!(
        "limit_req_status 429;
        add_header Retry-After $retry_after always;
        location / {{ {} }}",
        limit.directive()
    );
    let nginx = Nginx::start_with(http, &server).await;
    let (host_events, dispatch) = Recorded::for_a_future();
    let policy = RetryPolicy::builder()
        .host_cooldown(cooldown)
        .build()
        .unwrap();
    let client = adapter.client(policy);
    let start = tokio::time::Instant::now();
    let callers = (0..CALLERS).map(|caller| {
        let client = client.clone();
        let nginx = &nginx;
        async move {
            let mut calls = Vec::new();
            while start.elapsed() < SEND_FOR {
                let id = format!("{adapter:?}-{caller}-{}", calls.len());
                let url = nginx.url(&format!("/ok.txt?id={id}"));
                let request = client
                    .request(Method::GET, &url)
                    .header("x-request-id", &id);
                let call = client.send(request).await;
                if call.info.attempts() == 0 {
                    tokio::time::sleep(AFTER_UNSENT).await;
                }
                calls.push(Ended {
                    id,
                    status: call.status(),
                    error: call.result.as_ref().err().map(ToString::to_string),
                    attempts: call.info.attempts(),
                    stop: call.stop_reason(),
                    took: call.took,
                });
            }
            calls
        }
    });
    // The default deadline (30 s) bounds every call; this bounds the run should one not end.
    let calls = tokio::time::timeout(SEND_FOR + Duration::from_secs(40), async {
        let calls: Vec<Vec<Ended>> = futures::future::join_all(callers).await;
        calls.into_iter().flatten().collect::<Vec<_>>()
    })
    .with_subscriber(dispatch)
    .await
    .expect("every call ends within its 30 s deadline");
    let log = nginx.access_log();
    let host_events = host_events.lock().unwrap().clone();
    Run {
        limit,
        cooldown,
        adapter,
        calls,
        log,
        host_events,
    }
}

/// The 8 runs, made once at the same time on a runtime of their own, with their figures printed; or
/// why they failed.
fn runs() -> &'static Result<Vec<Run>, String> {
    static RUNS: OnceLock<Result<Vec<Run>, String>> = OnceLock::new();
    RUNS.get_or_init(|| {
        let made = std::thread::spawn(|| {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let mut all = Vec::new();
                for limit in [Limit::NoBurst, Limit::Burst5] {
                    for cooldown in [false, true] {
                        for adapter in Adapter::BOTH {
                            all.push(tokio::spawn(run(limit, cooldown, adapter)));
                        }
                    }
                }
                let mut runs = Vec::new();
                for run in all {
                    runs.push(run.await.unwrap());
                }
                runs
            })
        })
        .join();
        let runs = made.map_err(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()));
            format!("the limit_req runs failed: {}", message.unwrap_or_default())
        })?;
        for run in &runs {
            eprintln!("{}", run.report());
        }
        Ok(runs)
    })
}

fn the_runs() -> &'static [Run] {
    runs().as_ref().unwrap_or_else(|why| panic!("{why}"))
}

pub(crate) fn no_retry_of_a_429_reaches_nginx_before_its_retry_after() {
    for run in the_runs() {
        let early = run.early_retries();
        assert!(
            early.is_empty(),
            "{}: retries sooner than Retry-After: 1 after their 429: {early:?}",
            run.label()
        );
    }
}

pub(crate) fn every_attempt_reaches_its_run_s_own_nginx() {
    // What the other tests read of a run is its nginx's log: a run whose calls went to another
    // server (its port taken for its own), or to none, would read as a run with no 429s, or as a
    // host found down. nginx logs a request as it ends, before the client has read the answer, so
    // an attempt the client counted is logged by the time the run ends; a handful may have been
    // cut short before nginx read them.
    let mut wrong = Vec::new();
    for run in the_runs() {
        let (attempts, logged) = (run.attempts(), run.log.len());
        if logged > attempts || logged + attempts / 100 + 2 < attempts {
            wrong.push(format!(
                "{}: {attempts} attempts, {logged} requests in its nginx's log",
                run.label()
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
}

pub(crate) fn with_host_cooldown_the_client_gets_90_percent_of_the_quota() {
    // Goal: a client that waits when told to still gets what the quota allows. Waiters let go over
    // U[0, 1 s] after each pause got one request through per pause (nginx without a burst serves one
    // request per 200 ms, and the second waiter, milliseconds after the first, was refused and paused
    // the host again): about 1/s.
    let short: Vec<String> = the_runs()
        .iter()
        .filter(|run| run.cooldown && run.goodput() < 0.9 * QUOTA)
        .map(|run| {
            let changes = run.host_changes();
            format!("{}: {:.2}/s{changes}", run.label(), run.goodput())
        })
        .collect();
    assert!(
        short.is_empty(),
        "goodput under 90 % of {QUOTA}/s: {short:?}"
    );
}

pub(crate) fn host_cooldown_draws_fewer_429s_than_no_cooldown() {
    // Goal: holding new requests while the host asks for a pause is what the cooldown is for.
    let runs = the_runs();
    let mut more = Vec::new();
    for with in runs.iter().filter(|run| run.cooldown) {
        let without = runs
            .iter()
            .find(|r| !r.cooldown && r.limit == with.limit && r.adapter == with.adapter)
            .expect("each run has its twin without the cooldown");
        if with.logged(429) >= without.logged(429) {
            more.push(format!(
                "{}: {} 429s, without the cooldown {}",
                with.label(),
                with.logged(429),
                without.logged(429)
            ));
        }
    }
    assert!(more.is_empty(), "{more:?}");
}

pub(crate) fn with_host_cooldown_every_call_ends_200_within_its_deadline() {
    // Goal: 50 callers at 5/s wait 10 s for their turn, a third of the default deadline: a client
    // that waits out the server's pauses fails none of them.
    let failed: Vec<String> = the_runs()
        .iter()
        .filter(|run| run.cooldown)
        .flat_map(|run| {
            let failed = run.failed();
            let listed = failed.iter().take(EVENTS_SHOWN).map(|call| {
                format!(
                    "{} {}: {:?} {:?} after {} attempts, {:?}",
                    run.label(),
                    call.id,
                    call.status,
                    call.stop,
                    call.attempts,
                    call.took
                )
            });
            let more = (failed.len() > EVENTS_SHOWN).then(|| {
                let more = failed.len() - EVENTS_SHOWN;
                format!("{}: and {more} more{}", run.label(), run.host_changes())
            });
            listed.chain(more).collect::<Vec<_>>()
        })
        .collect();
    assert!(failed.is_empty(), "calls failed:\n{}", failed.join("\n"));
}
