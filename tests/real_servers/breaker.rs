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
use tracing::subscriber::{DefaultGuard, Interest};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

use super::client::{Adapter, CallError, Client};
use super::netns::Netns;
use super::nginx::{Logged, Nginx};
use super::upstream::{Backend, handler};
use super::{ms, quantile};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    FailFast,
    Hold,
}

impl Mode {
    fn breaker(self) -> Breaker {
        match self {
            Self::FailFast => Breaker::fail_fast(),
            Self::Hold => Breaker::hold(HOLD),
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Self::FailFast => "fail-fast",
            Self::Hold => "hold",
        }
    }
}

/// The policy of every run: the defaults, with a breaker, and an attempt timeout that ends an attempt
/// whose SYN was dropped.
fn policy(mode: Mode) -> RetryPolicy {
    RetryPolicy::builder()
        .breaker(mode.breaker())
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .build()
        .unwrap()
}

/// The `k`-th delay between probes (from 0, before the first), before its jitter.
fn probe_delay(k: usize) -> Duration {
    let doubled = FIRST_PROBE_DELAY.saturating_mul(1 << k.min(16));
    doubled.min(MAX_PROBE_DELAY)
}

/// Now, on the wall clock, as nginx stamps its log.
fn wall() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// How one call ended.
#[derive(Debug)]
struct Ended {
    /// When it was sent and when it ended, since the run's start; when it ended on the wall clock.
    sent: Duration,
    ended: Duration,
    ended_wall: Duration,
    /// It ended in the poll that sent it: nothing was waited for.
    at_once: bool,
    status: Option<u16>,
    attempts: u32,
    stop: StopReason,
    took: Duration,
    /// The policy did not send it: why, the host it names, and the time to the next probe it gives.
    rejected: Option<(StopReason, Option<String>, Duration)>,
    error: Option<String>,
}

impl Ended {
    fn summary(&self) -> String {
        let ended = match (self.status, &self.error) {
            (Some(status), _) => status.to_string(),
            (None, error) => error.clone().unwrap_or_default(),
        };
        format!(
            "sent at {:?}: {ended}, {} attempt(s), {}, took {:?}{}",
            self.sent,
            self.attempts,
            self.stop,
            self.took,
            if self.at_once { " (at once)" } else { "" }
        )
    }
}

/// Sends a GET to `url` with `id` as its `x-request-id`, and reads its answer's body.
async fn send(client: Client, url: String, id: String, start: Instant) -> Ended {
    let request = client
        .request(Method::GET, &url)
        .header("x-request-id", &id);
    let sent = start.elapsed();
    let mut call = std::pin::pin!(client.send(request));
    let (call, at_once) = match futures::poll!(call.as_mut()) {
        Poll::Ready(call) => (call, true),
        Poll::Pending => (call.await, false),
    };
    let (ended, ended_wall) = (start.elapsed(), wall());
    let error = call.result.as_ref().err();
    let rejected = error.and_then(CallError::rejected).map(|rejected| {
        let host = rejected.host().map(str::to_owned);
        (rejected.reason(), host, rejected.pause())
    });
    let ended = Ended {
        sent,
        ended,
        ended_wall,
        at_once,
        status: call.status(),
        attempts: call.info.attempts(),
        stop: call.stop_reason(),
        took: call.took,
        rejected,
        error: error.map(CallError::chain),
    };
    // The body read, the connection goes back to the pool.
    if let Ok(response) = call.result {
        let _ = response.bytes().await;
    }
    ended
}

/// What reached the server when the watch first saw the host down, or when the outage ended.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// Since the run's start, and on the wall clock.
    at: Duration,
    wall: Duration,
    /// The probes the policy had sent.
    probes: u32,
    /// What the server had counted (SYNs), read with every call stopped; `None` where the test
    /// reads nginx's log instead.
    reached: Option<u64>,
}

/// What the watch saw of the host's state, looked at every millisecond.
#[derive(Debug, Default)]
struct Watched {
    /// When it was first seen down.
    down: Option<Seen>,
    /// When it was first seen not down after that.
    up: Option<Duration>,
    /// When the policy first counted each probe, since the run's start.
    probes: Vec<Duration>,
    /// The most calls seen held at once.
    held: usize,
    /// How many times the host was seen going down.
    downs: u32,
}

/// Watches `host`'s state in `policy` until `done`; `reached` reads what reached the server.
async fn watch(
    policy: &RetryPolicy,
    host: &str,
    start: Instant,
    reached: Option<&dyn Fn() -> u64>,
    done: &Cell<bool>,
) -> Watched {
    let mut watched = Watched::default();
    let mut ticks = tokio::time::interval(ms(1));
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut down = false;
    while !done.get() {
        ticks.tick().await;
        let at = start.elapsed();
        match policy.host_state(host) {
            HostState::Down { probes, held, .. } => {
                if !down {
                    down = true;
                    watched.downs += 1;
                    if watched.down.is_none() {
                        // Nothing else runs on this thread meanwhile: no call goes while this reads.
                        let reached = reached.map(|read| read());
                        watched.down = Some(Seen {
                            at,
                            wall: wall(),
                            probes,
                            reached,
                        });
                    }
                }
                if watched.downs == 1 {
                    while watched.probes.len() < probes as usize {
                        watched.probes.push(at);
                    }
                }
                watched.held = watched.held.max(held);
            }
            _ if down => {
                down = false;
                watched.up.get_or_insert(at);
            }
            _ => {}
        }
    }
    watched
}

/// When the server was back, and what the policy and the server counted just before.
#[derive(Debug, Clone, Copy)]
struct Returned {
    seen: Seen,
    /// The host's state then.
    state: HostState,
}

/// One adapter's run of a scenario, before it runs: its policy, its client, its host.
struct Setup {
    adapter: Adapter,
    mode: Mode,
    policy: RetryPolicy,
    client: Client,
    /// The host as the policy names it, `ip:port`.
    host: String,
    /// Its calls' paths start with `/{tag}/`.
    tag: String,
    start: Instant,
}

impl Setup {
    fn new(adapter: Adapter, mode: Mode, host: String) -> Self {
        let policy = policy(mode);
        Self {
            adapter,
            mode,
            client: adapter.client(policy.clone()),
            policy,
            host,
            tag: format!(
                "{}-{}",
                mode.as_str(),
                format!("{adapter:?}").to_lowercase()
            ),
            start: Instant::now(),
        }
    }

    /// A GET every `EVERY` from the start to `until` (each to a path of its own, `/{tag}/{n}`),
    /// beside `outage` and a watch on the host; `reached` reads what reached the server.
    async fn drive<T>(
        &self,
        until: Duration,
        reached: Option<&dyn Fn() -> u64>,
        outage: impl Future<Output = T>,
    ) -> (Vec<Ended>, Watched, T) {
        let done = Cell::new(false);
        let calls = async {
            let mut calls = Vec::new();
            for n in 0.. {
                let at = EVERY * n;
                if at > until {
                    break;
                }
                tokio::time::sleep_until(self.start + at).await;
                let url = format!("http://{}/{}/{n}", self.host, self.tag);
                let id = format!("{}-{n}", self.tag);
                calls.push(tokio::spawn(send(self.client.clone(), url, id, self.start)));
            }
            let mut ended = Vec::new();
            for call in calls {
                ended.push(call.await.expect("a call does not panic"));
            }
            done.set(true);
            ended
        };
        let watch = watch(&self.policy, &self.host, self.start, reached, &done);
        tokio::join!(calls, watch, outage)
    }

    /// Reads the host's state and what reached the server, then calls `back` to end the outage: all
    /// at once, no call going meanwhile.
    fn end_outage(&self, reached: Option<&dyn Fn() -> u64>, back: impl FnOnce()) -> Returned {
        let state = self.policy.host_state(&self.host);
        let probes = match state {
            HostState::Down { probes, .. } => probes,
            _ => 0,
        };
        let reached = reached.map(|read| read());
        back();
        Returned {
            seen: Seen {
                at: self.start.elapsed(),
                wall: wall(),
                probes,
                reached,
            },
            state,
        }
    }

    /// The run made, for `scenario`, the server gone at `gone`.
    fn ran(
        self,
        scenario: &'static str,
        gone: Duration,
        (calls, watched, returned): (Vec<Ended>, Watched, Returned),
    ) -> Run {
        Run {
            scenario,
            adapter: self.adapter,
            mode: self.mode,
            tag: self.tag,
            host: self.host,
            gone,
            returned,
            calls,
            watched,
        }
    }
}

/// One adapter's run of a scenario.
struct Run {
    scenario: &'static str,
    adapter: Adapter,
    mode: Mode,
    /// Its calls' paths start with `/{tag}/`.
    tag: String,
    /// The host as the policy names it, `ip:port`.
    host: String,
    /// When the server went, since the start.
    gone: Duration,
    returned: Returned,
    calls: Vec<Ended>,
    watched: Watched,
}

impl Run {
    fn label(&self) -> String {
        format!(
            "{} {:?} {}",
            self.scenario,
            self.adapter,
            self.mode.as_str()
        )
    }
}

/// The fields of one event, as text.
type Fields = BTreeMap<String, String>;

/// The breaker's events ("host down", "probing a down host", "host up": those with a `host.state`) on
/// this thread, from [`record`](Self::record) until it is dropped.
///
/// A subscriber of this thread alone, interested in `stagger::log` alone: the suite's other trials, on
/// other threads, pay nothing for it. (The shared `tests/common` `capture()` is the process's global
/// subscriber, interested in every event: with it, every hyper and h2 event of every trial of the run
/// was kept, and the suite's peak memory went from 49 MB to 265 MB.)
struct Recorded {
    events: Arc<Mutex<Vec<Fields>>>,
    _on_this_thread: DefaultGuard,
}

impl Recorded {
    fn record() -> Self {
        let events = Arc::default();
        let recorder = Recorder(Arc::clone(&events));
        let subscriber = tracing_subscriber::registry().with(recorder);
        let _on_this_thread = tracing::subscriber::set_default(subscriber);
        Self {
            events,
            _on_this_thread,
        }
    }

    fn events(&self) -> Vec<Fields> {
        self.events.lock().unwrap().clone()
    }
}

struct Recorder(Arc<Mutex<Vec<Fields>>>);

impl Recorder {
    fn wants(metadata: &Metadata<'_>) -> bool {
        metadata.target() == "stagger::log"
    }
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if Self::wants(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        Self::wants(metadata)
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Visitor::default();
        event.record(&mut fields);
        if fields.0.contains_key("host.state") {
            self.0.lock().unwrap().push(fields.0);
        }
    }
}

#[derive(Default)]
struct Visitor(Fields);

impl Visit for Visitor {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// The breaker's events of one run, each with the call it came with (its number).
#[derive(Debug, Default)]
struct HostEvents {
    /// "host down": the call whose failure put the host down, and the failures in a row.
    down: Vec<(usize, u32)>,
    /// "probing a down host": the call that went as the probe.
    probes: Vec<usize>,
    /// "host up": the call whose answer brought the host back, and the calls held then.
    up: Vec<(usize, usize)>,
}

impl HostEvents {
    fn of(events: &[Fields], tag: &str) -> Self {
        let mut mine = Self::default();
        let prefix = format!("/{tag}/");
        for event in events {
            let (Some(state), Some(path)) = (event.get("host.state"), event.get("url.path")) else {
                continue;
            };
            let Some(n) = path.strip_prefix(&prefix).and_then(|n| n.parse().ok()) else {
                continue;
            };
            let number = |field: &str| -> u64 {
                let value = event.get(field).and_then(|value| value.parse().ok());
                value.unwrap_or_else(|| panic!("{field} in {event:?}"))
            };
            match state.as_str() {
                "down" => mine.down.push((n, number("failures") as u32)),
                "probing" => mine.probes.push(n),
                "up" => mine.up.push((n, number("held") as usize)),
                other => panic!("host.state {other}"),
            }
        }
        mine
    }

    /// How many probes call `n` went as.
    fn probes_of(&self, n: usize) -> usize {
        self.probes.iter().filter(|&&probe| probe == n).count()
    }
}

/// What every run is checked for, found.
struct Outline {
    down: Seen,
    /// The call whose probe brought the host back, and when it ended on the wall clock: the host came
    /// up in that poll.
    good: usize,
    up_wall: Duration,
    /// Probes sent while the host was down, the one answered included.
    probes: usize,
    /// Probes the policy counted between the host seen down and the server back.
    probes_until_back: u32,
}

/// Checks what every run promises, pushing each broken promise to `problems`; prints the run's
/// figures. What the scenario checks besides needs the outline.
fn examine(
    run: &Run,
    events: &HostEvents,
    found_down_within: Duration,
    problems: &mut Vec<String>,
) -> Option<Outline> {
    let label = run.label();
    let mut problem = |text: String| problems.push(format!("{label}: {text}"));
    let calls = &run.calls;
    let Some(down) = run.watched.down else {
        problem("the host was never seen down".to_owned());
        return None;
    };
    let ([(tripped, failures)], [(good, held_at_up)]) = (&events.down[..], &events.up[..]) else {
        problem(format!(
            "one \"host down\" and one \"host up\" event: {events:?}"
        ));
        return None;
    };
    let (good, held_at_up) = (*good, *held_at_up);
    if run.watched.downs != 1 {
        problem(format!("seen going down {} times", run.watched.downs));
    }
    if *failures != FAILURES {
        problem(format!("down after {failures} failures, not {FAILURES}"));
    }
    let found_down = down.at.saturating_sub(run.gone);
    if found_down > found_down_within {
        problem(format!(
            "found down {found_down:?} after the server went, over {found_down_within:?}"
        ));
    }
    let HostState::Down {
        probes: probes_by_return,
        ..
    } = run.returned.state
    else {
        problem(format!(
            "not down when the server came back: {:?}",
            run.returned.state
        ));
        return None;
    };
    let probes_until_back = probes_by_return.saturating_sub(down.probes);

    // Back: the first probe after the server returned was answered, within a probe's delay.
    let good_call = &calls[good];
    let (up, up_wall) = (good_call.ended, good_call.ended_wall);
    let back = run.returned.seen.at;
    let up_after = up.checked_sub(back);
    match up_after {
        None => problem(format!("up {:?} before the server was back", back - up)),
        Some(after) if after > MAX_PROBE_DELAY + EVERY + SLACK => {
            problem(format!("up {after:?} after the server was back"))
        }
        _ => {}
    }
    if good_call.status != Some(200) || events.probes_of(good) == 0 {
        problem(format!(
            "the call that brought the host up went as a probe and ended 200: {} ({} probes)",
            good_call.summary(),
            events.probes_of(good)
        ));
    }
    if run.watched.up.is_none_or(|seen| seen < up) {
        problem(format!(
            "the watch saw it up at {:?}, the probe answered at {up:?}",
            run.watched.up
        ));
    }

    // Probing: one per delay, as the policy counts them and as its events name them.
    let probes = events.probes.len();
    let watched = run.watched.probes.len();
    if !(probes.saturating_sub(1)..=probes).contains(&watched) {
        problem(format!(
            "the policy counted {watched} probes, its events name {probes}"
        ));
    }
    let gaps: Vec<Duration> = (run.watched.probes.windows(2))
        .map(|pair| pair[1] - pair[0])
        .collect();
    for (k, &gap) in gaps.iter().enumerate() {
        // The gap before probe k + 2: the (k + 1)-th delay, drawn from [d/2, d]; the watch sees each
        // probe within a millisecond or so of its going. A probe that fails fast waits for the next
        // call after its delay.
        let delay = probe_delay(k + 1);
        if gap + ms(10) < delay / 2 || gap > delay + EVERY + SLACK {
            problem(format!(
                "probe {} went {gap:?} after the one before, its delay {delay:?} jittered to [{:?}, {delay:?}]",
                k + 2,
                delay / 2
            ));
        }
    }

    // While down: calls sent after the host was seen down and before it was up went as probes, or
    // failed at once unsent (fail fast), or were held until it was up (hold).
    let while_down = |call: &&Ended| call.sent >= down.at && call.sent < up;
    let mut rejected = Vec::new();
    for (n, call) in calls.iter().enumerate() {
        let probe = events.probes_of(n) > 0;
        match (run.mode, &call.rejected) {
            (Mode::FailFast, Some((reason, host, next_probe))) => {
                let named = host.as_deref() == Some(run.host.as_str());
                // A call not sent fails at once; one whose retry was not sent, with no answer to
                // hand back, fails with the same error after its attempts.
                let unsent = call.attempts == 0;
                if unsent {
                    rejected.push(call.took);
                }
                if *reason != StopReason::HostDown
                    || !named
                    || unsent && (!call.at_once || *next_probe > MAX_PROBE_DELAY)
                {
                    problem(format!(
                        "call {n} failed naming {} down, at once if unsent, and its next probe within 1 s: {} ({reason}, {host:?}, next probe in {next_probe:?})",
                        run.host,
                        call.summary()
                    ));
                }
            }
            (Mode::Hold, Some(_)) => problem(format!("call {n}, held, failed: {}", call.summary())),
            (_, None) if call.attempts == 0 => {
                problem(format!("a call not sent, not rejected: {}", call.summary()))
            }
            (_, None) => {}
        }
        if while_down(&call) && !probe && call.attempts > 0 {
            let held_until_up = run.mode == Mode::Hold && call.ended >= up;
            if !held_until_up {
                problem(format!(
                    "call {n}, sent while the host was down, neither probe nor {}: {}",
                    match run.mode {
                        Mode::FailFast => "failed fast",
                        Mode::Hold => "held until it was up",
                    },
                    call.summary()
                ));
            }
        }
        if call.sent > up && call.status != Some(200) {
            problem(format!(
                "call {n}, sent after the host was up: {}",
                call.summary()
            ));
        }
        if run.mode == Mode::Hold && call.status != Some(200) && call.sent > run.gone && !probe {
            // Held calls ride the outage out; a probe's own 502 may end its call (a retry not
            // granted by the budget, say).
            problem(format!(
                "call {n}, held, did not end 200: {}",
                call.summary()
            ));
        }
    }
    if quantile(&rejected, 0.99) >= REJECTED_WITHIN {
        problem(format!(
            "rejected calls took {:?} at the 99th percentile",
            quantile(&rejected, 0.99)
        ));
    }

    let first_200 = (calls.iter())
        .filter(|call| call.status == Some(200) && call.ended >= back)
        .map(|call| call.ended - back)
        .min();
    let held: Vec<Duration> = (calls.iter().enumerate())
        .filter(|(n, call)| while_down(call) && events.probes_of(*n) == 0)
        .map(|(_, call)| call.took)
        .collect();
    let after_up: Vec<&Ended> = calls.iter().filter(|call| call.sent > up).collect();
    let ok_after_up = after_up.iter().filter(|c| c.status == Some(200)).count();
    let mode = match run.mode {
        Mode::FailFast => format!(
            "{} calls rejected unsent in p50 {:?}, p99 {:?}, max {:?}",
            rejected.len(),
            quantile(&rejected, 0.5),
            quantile(&rejected, 0.99),
            quantile(&rejected, 1.0)
        ),
        Mode::Hold => format!(
            "{} calls held (at most {} at once, {held_at_up} when it came up), for p50 {:?}, max \
             {:?}; {} calls did not end 200",
            held.len(),
            run.watched.held,
            quantile(&held, 0.5),
            quantile(&held, 1.0),
            calls.iter().filter(|call| call.status != Some(200)).count(),
        ),
    };
    eprintln!(
        "breaker {label}: {} calls; found down {found_down:?} after the server went, by call {tripped} \
         ({failures} failures in a row); while down ({:?}): {probes} probes ({probes_until_back} until \
         the server was back), gaps {:?} to {:?}; {mode}; up {:?} after the server was back, first \
         200 {first_200:?} after; {ok_after_up}/{} calls sent after it ended 200",
        calls.len(),
        up - down.at,
        gaps.iter().min().copied().unwrap_or_default(),
        gaps.iter().max().copied().unwrap_or_default(),
        up_after.unwrap_or_default(),
        after_up.len(),
    );
    Some(Outline {
        down,
        good,
        up_wall,
        probes,
        probes_until_back,
    })
}

/// What iptables counted between the host seen down and the server back, against the probes.
fn examine_syns(run: &Run, outline: &Outline, syns: &str, problems: &mut Vec<String>) {
    let label = run.label();
    let (Some(at_down), Some(at_back)) = (outline.down.reached, run.returned.seen.reached) else {
        problems.push(format!("{label}: the SYNs were not read"));
        return;
    };
    let while_down = at_back - at_down;
    eprintln!(
        "breaker {label}: {at_down} SYNs {syns} before the host was found down, {while_down} while it \
         was down, against {} probes; {} more probes until it was up",
        outline.probes_until_back,
        outline.probes - outline.probes_until_back as usize,
    );
    // Only the probes: one SYN each, as the attempt timeout ends an attempt before the SYN is sent
    // again.
    if while_down != u64::from(outline.probes_until_back) {
        problems.push(format!(
            "{label}: {while_down} SYNs while the host was down, {} probes",
            outline.probes_until_back
        ));
    }
    if at_down < u64::from(FAILURES) {
        problems.push(format!("{label}: down after {at_down} SYNs"));
    }
    // The first probe after the server is back finds it, unless one goes before it listens.
    let after_back = outline.probes - outline.probes_until_back as usize;
    if !(1..=2).contains(&after_back) {
        problems.push(format!(
            "{label}: {after_back} probes from the server back to the host up"
        ));
    }
}

fn assert_kept(problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{} broken promises:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

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
        // Five 502s, each a call 50 ms after the last or its retry.
        if let Some(outline) = examine(run, &mine, ms(1000), &mut problems) {
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
        if let Some(outline) = examine(run, &mine, within, &mut problems) {
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
        if let Some(outline) = examine(run, &mine, ms(1000), &mut problems) {
            examine_syns(run, &outline, "refused", &mut problems);
        }
    }
    assert_kept(&problems);
}
