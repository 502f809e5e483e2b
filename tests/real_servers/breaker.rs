//! The breaker (`stagger::Breaker`) against three real outages of 20 s, each with a GET every 50 ms
//! through both adapters: nginx whose backend is gone (nginx answers `502`), a port whose SYNs a
//! namespace's iptables drops (attempts time out), and a port nothing listens on (refused) where nginx
//! then starts. What the breaker promises: the host is found down at the fifth failure in a row; while
//! it is down nothing but its probes reaches the server, one per delay (100 ms doubling to 1 s, equal
//! jitter), and the other calls fail at once, unsent (`Breaker::fail_fast`), or wait for the host
//! (`Breaker::hold`); once the server is back, the next probe is answered, the host is up within about
//! a second, and the calls after it succeed.
//!
//! Behind nginx both modes run through both adapters: fail fast promises calls failed in microseconds,
//! hold that an outage shorter than its bound is ridden out with no error, the calls held let go at the
//! rate they came. Its bound is set past the outage (25 s) so that its calls are held throughout (a
//! bound shorter than the outage ends as fail fast does, which `tests/breaker.rs` shows in process);
//! letting 400 held calls go at the rate they came takes as long as they took to come, so that run
//! lasts about 42 s. The other two scenarios fail fast and last about 23 s.
//!
//! Every task of a scenario (its calls, nginx's backend, a watch on the host's state) runs on the
//! test's one thread, a current-thread runtime, where a subscriber of its own records the breaker's
//! events. When the watch first sees the host down, and when the test ends the outage, it reads what
//! reached the server (iptables' count of SYNs) with every call stopped: the SYNs between the two
//! readings are compared with the probes the policy counted between them, exactly. Behind nginx, the
//! access log says which call each request came from, and the events which call went as each probe.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use reqwest::Method;
use stagger::{Breaker, HostState, RetryPolicy, StopReason};
use tokio::time::{Instant, MissedTickBehavior};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::subscriber::{DefaultGuard, Interest};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

use super::client::{Adapter, CallError, Client};
use super::netns::Netns;
use super::nginx::{Logged, Nginx};
use super::upstream::{Backend, handler};
use super::{ms, quantile};

#[path = "breaker/events.rs"]
pub(crate) mod events;
#[path = "breaker/examine.rs"]
pub(crate) mod examine;
#[path = "breaker/run.rs"]
pub(crate) mod run;

use events::*;
pub(crate) use events::{Fields, Recorded};
use examine::*;
use run::*;

const OUTAGE: Duration = Duration::from_secs(20);
/// A GET every 50 ms: 20 a second.
const EVERY: Duration = ms(50);
/// Calls before nginx's backend goes, the host up.
const WARM: Duration = Duration::from_secs(1);
/// Calls after the server is back.
const AFTER: Duration = Duration::from_secs(2);
const ATTEMPT_TIMEOUT: Duration = ms(300);
/// The hold's bound: past the outage, so that calls are held until the host is back.
const HOLD: Duration = Duration::from_secs(25);
/// The breaker's failures in a row before a host is down, by default.
const FAILURES: u32 = Breaker::DEFAULT_FAILURES;
/// The probes' delays by default: from 100 ms, doubling, capped at 1 s; each drawn from [d/2, d].
const FIRST_PROBE_DELAY: Duration = ms(100);
const MAX_PROBE_DELAY: Duration = Duration::from_secs(1);
/// Room for a loaded machine on a time that a delay or a timeout sets.
const SLACK: Duration = ms(450);
/// The most a rejected call takes, at the 99th percentile (each must end in the poll that sent it).
const REJECTED_WITHIN: Duration = ms(10);
/// nginx stamps a request's end and its duration to the millisecond, and a request the client sent
/// before the watch saw the host down may reach nginx a moment after: a request that began this long
/// after the host was seen down was sent while it was down.
const AFTER_DOWN: Duration = ms(20);
/// A request that began this long before the probe that brought the host up was answered was sent
/// while it was down.
const BEFORE_UP: Duration = ms(5);
/// The window over which nginx's busiest time after the host was up is counted.
const BUSIEST_OVER: Duration = Duration::from_secs(2);

// -- nginx answering 502 ----------------------------------------------------------------------------

/// One run behind nginx: the backend answers for `WARM`, is gone for `OUTAGE`, then answers again.
async fn gone_backend(adapter: Adapter, mode: Mode) -> (Run, Vec<Logged>) {
    let mut backend = Backend::start(handler(|_| async {
        Response::new(Full::new(Bytes::from("ok")))
    }))
    .await;
    let proxy = format!("location / {{ proxy_pass http://{}; }}", backend.addr());
    let nginx = Nginx::start(&proxy).await;
    let setup = Setup::new(adapter, mode, nginx.addr().to_string());
    let start = setup.start;
    let gone = Cell::new(Duration::ZERO);
    let outage = async {
        tokio::time::sleep_until(start + WARM).await;
        backend.stop().await;
        gone.set(start.elapsed());
        tokio::time::sleep_until(start + WARM + OUTAGE).await;
        setup.end_outage(None, || {
            // Listening again at once: `restart` binds before its first await.
            futures::FutureExt::now_or_never(backend.restart()).expect("restarted at once");
        })
    };
    let ran = setup.drive(WARM + OUTAGE + AFTER, None, outage).await;
    let log = nginx
        .settled_access_log(ms(200), Duration::from_secs(5))
        .await;
    (setup.ran("502", gone.get(), ran), log)
}

/// When a request began at nginx: its end less its duration, each to the millisecond.
fn began(line: &Logged) -> Duration {
    line.at.saturating_sub(line.request_time)
}

/// What nginx saw: every attempt of every call, and while the host was down only the probes.
fn examine_log(
    run: &Run,
    events: &HostEvents,
    outline: &Outline,
    log: &[Logged],
    problems: &mut Vec<String>,
) {
    let label = run.label();
    let mut problem = |text: String| problems.push(format!("{label}: {text}"));
    let call_of = |line: &Logged| -> Option<usize> {
        let id = line.request_id.as_deref()?;
        id.strip_prefix(&format!("{}-", run.tag))?.parse().ok()
    };
    // Every attempt, and nothing else, reached nginx: a call not sent is not in its log.
    let mut lines = vec![0; run.calls.len()];
    for line in log {
        match call_of(line) {
            Some(n) if n < lines.len() => lines[n] += 1,
            _ => problem(format!("a request of no call: {line:?}")),
        }
    }
    for (n, call) in run.calls.iter().enumerate() {
        if lines[n] != call.attempts as usize {
            problem(format!(
                "call {n}: nginx saw {} requests, the call made {} attempts: {}",
                lines[n],
                call.attempts,
                call.summary()
            ));
        }
    }

    // Before the host was found down: the failures that put it down.
    let down_from = outline.down.wall + AFTER_DOWN;
    let before = (log.iter())
        .filter(|line| line.status == 502 && began(line) <= down_from)
        .count();
    if before < FAILURES as usize {
        problem(format!("down after {before} 502s"));
    }
    // While it was down: each request a probe, every probe but the one answered a 502.
    let until = outline.up_wall.saturating_sub(BEFORE_UP);
    let mut failed_probes = Vec::new();
    let mut per_call = vec![0; run.calls.len()];
    for line in log.iter().filter(|line| {
        let began = began(line);
        began > down_from && began < until
    }) {
        let n = call_of(line).unwrap_or(usize::MAX);
        if n == outline.good && line.status == 200 {
            continue;
        }
        if n >= per_call.len() || line.status != 502 {
            problem(format!(
                "while down, a request not a failed probe: {line:?}"
            ));
            continue;
        }
        per_call[n] += 1;
        if per_call[n] > events.probes_of(n) {
            problem(format!(
                "while down, call {n} reached nginx {} times, went as {} probes: {}",
                per_call[n],
                events.probes_of(n),
                run.calls[n].summary()
            ));
        }
        failed_probes.push(line);
    }
    if failed_probes.len() + 1 != outline.probes {
        problem(format!(
            "while down nginx saw {} 502s, the policy sent {} probes (the last answered 200)",
            failed_probes.len(),
            outline.probes
        ));
    }

    // Back: the calls held are let go at the rate they came, beside the new ones; never the backlog
    // at once.
    let mut after: Vec<Duration> = (log.iter())
        .map(began)
        .filter(|&began| began >= until)
        .collect();
    after.sort();
    let busiest = (0..after.len())
        .map(|i| after[i..].partition_point(|&t| t < after[i] + BUSIEST_OVER))
        .max()
        .unwrap_or(0);
    let (first, last) = (after.first(), after.last());
    eprintln!(
        "breaker {label}: nginx saw {} requests: {before} 502s before the host was found down, {} \
         while it was down (the probes), {} from the answered probe on over {:?}, at most {busiest} \
         in {BUSIEST_OVER:?}",
        log.len(),
        failed_probes.len() + 1,
        after.len(),
        last.zip(first).map(|(l, f)| *l - *f).unwrap_or_default(),
    );
    // Twice the usual load (the held calls as they came, and the new ones), and a quarter more for
    // timers that fire late together: the backlog of 400 at once would be eight times as many.
    let usual = BUSIEST_OVER.as_secs_f64() / EVERY.as_secs_f64();
    let most = (2.5 * usual) as usize;
    if busiest > most {
        problem(format!(
            "{busiest} requests in {BUSIEST_OVER:?} after the host was up, over {most}"
        ));
    }
}

pub(crate) async fn a_backend_gone_20_s_behind_nginx_is_found_down_and_only_probes_reach_nginx_until_it_is_back()
 {
    let recorded = Recorded::record();
    let runs = [Mode::FailFast, Mode::Hold]
        .into_iter()
        .flat_map(|mode| Adapter::BOTH.map(|adapter| gone_backend(adapter, mode)));
    let runs = futures::future::join_all(runs).await;
    let events = recorded.events();
    let mut problems = Vec::new();
    for (run, log) in &runs {
        let mine = HostEvents::of(&events, &run.tag);
        // Five 502s in a row, each a call 50 ms after the last or its retry, from three paths at
        // least (every call asks for a path of its own: nginx fails every path, and the host is
        // down as a whole), so up to two more when a call's retries come between.
        let failures = FAILURES..=FAILURES + 2;
        if let Some(outline) = examine(run, &mine, ms(1000), failures, &mut problems) {
            examine_log(run, &mine, &outline, log, &mut problems);
        }
    }
    assert_kept(&problems);
}

// -- SYNs dropped -------------------------------------------------------------------------------------

/// One run to nginx in a namespace whose SYNs to its port are dropped for `OUTAGE`, from the start.
async fn dropped_syns(adapter: Adapter) -> (Run, Vec<Logged>, u64) {
    let netns = Netns::create();
    let nginx = Nginx::start_in(&netns, "location / { return 200 \"ok\\n\"; }").await;
    let port = nginx.addr().port().to_string();
    let rule = |how: &[&'static str], target: &'static str| {
        let mut rule = how.to_vec();
        rule.extend(["-p", "tcp", "--syn", "--dport", port.as_str(), "-j", target]);
        netns.iptables(&rule);
    };
    rule(&["-A", "INPUT"], "DROP");
    let dropped = || -> u64 {
        let rules = netns.packets("INPUT");
        let drop = rules.iter().find(|(target, _)| target == "DROP");
        drop.expect("the DROP rule").1
    };
    let setup = Setup::new(adapter, Mode::FailFast, nginx.addr().to_string());
    let outage = async {
        tokio::time::sleep_until(setup.start + OUTAGE).await;
        // The DROP rule stays, its count with it; a rule before it lets the SYNs through.
        setup.end_outage(Some(&dropped), || rule(&["-I", "INPUT", "1"], "ACCEPT"))
    };
    let ran = setup.drive(OUTAGE + AFTER, Some(&dropped), outage).await;
    let log = nginx
        .settled_access_log(ms(200), Duration::from_secs(5))
        .await;
    let dropped = dropped();
    (setup.ran("SYN dropped", Duration::ZERO, ran), log, dropped)
}

pub(crate) async fn behind_dropped_syns_for_20_s_only_probes_are_sent_and_the_first_after_the_return_connects()
 {
    let recorded = Recorded::record();
    let runs = futures::future::join_all(Adapter::BOTH.map(dropped_syns)).await;
    let events = recorded.events();
    let mut problems = Vec::new();
    for (run, log, dropped) in &runs {
        let mine = HostEvents::of(&events, &run.tag);
        // Five attempts of 300 ms, the last sent 200 ms after the first.
        let within = ATTEMPT_TIMEOUT + 4 * EVERY + SLACK;
        if let Some(outline) = examine(run, &mine, within, FAILURES..=FAILURES, &mut problems) {
            examine_syns(run, &outline, "dropped", &mut problems);
        }
        // Every attempt had its SYN dropped, or reached nginx.
        let attempts: u64 = run.calls.iter().map(|call| u64::from(call.attempts)).sum();
        if attempts != dropped + log.len() as u64 {
            problems.push(format!(
                "{}: {attempts} attempts, {dropped} SYNs dropped and {} requests at nginx",
                run.label(),
                log.len()
            ));
        }
    }
    assert_kept(&problems);
}

// -- refused ------------------------------------------------------------------------------------------

/// The port of the refused scenario, in a namespace of its own.
const PORT: u16 = 8080;

/// One run to a port in a namespace that nothing listens on for `OUTAGE`, then nginx.
async fn refused(adapter: Adapter) -> Run {
    let netns = Netns::create();
    // Counts the SYNs, and lets them through.
    let port = PORT.to_string();
    netns.iptables(&[
        "-A", "INPUT", "-p", "tcp", "--syn", "--dport", &port, "-j", "ACCEPT",
    ]);
    let syns = || -> u64 { netns.packets("INPUT")[0].1 };
    let setup = Setup::new(adapter, Mode::FailFast, format!("{}:{PORT}", netns.addr));
    let nginx = Cell::new(None);
    let outage = async {
        tokio::time::sleep_until(setup.start + OUTAGE).await;
        let mut returned = setup.end_outage(Some(&syns), || {});
        let server = "location / { return 200 \"ok\\n\"; }";
        nginx.set(Some(Nginx::start_in_on(&netns, PORT, server).await));
        // Back once nginx accepts.
        (returned.seen.at, returned.seen.wall) = (setup.start.elapsed(), wall());
        returned
    };
    let ran = setup.drive(OUTAGE + AFTER, Some(&syns), outage).await;
    setup.ran("refused", Duration::ZERO, ran)
}

pub(crate) async fn a_port_refusing_for_20_s_is_found_down_probed_alone_and_up_within_1_s_of_a_server_listening()
 {
    let recorded = Recorded::record();
    let runs = futures::future::join_all(Adapter::BOTH.map(refused)).await;
    let events = recorded.events();
    let mut problems = Vec::new();
    for run in &runs {
        let mine = HostEvents::of(&events, &run.tag);
        let exactly = FAILURES..=FAILURES;
        if let Some(outline) = examine(run, &mine, ms(1000), exactly, &mut problems) {
            examine_syns(run, &outline, "refused", &mut problems);
        }
    }
    assert_kept(&problems);
}
