//! One run of a scenario: its policy, its calls, the watch on the host's state, what it saw.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    FailFast,
    Hold,
    /// No breaker (`.breaker(None)`): the runs a breaker's are measured against.
    Off,
}

impl Mode {
    /// The breaker of this suite's runs: holding past the outage.
    pub(super) fn breaker(self) -> Option<Breaker> {
        match self {
            Self::FailFast => Some(Breaker::fail_fast()),
            Self::Hold => Some(Breaker::hold(HOLD)),
            Self::Off => None,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::FailFast => "fail-fast",
            Self::Hold => "hold",
            Self::Off => "off",
        }
    }
}

/// The policy of every run: the defaults, with a breaker, and an attempt timeout that ends an attempt
/// whose SYN was dropped.
pub(super) fn policy(mode: Mode) -> RetryPolicy {
    RetryPolicy::builder()
        .breaker(mode.breaker())
        .attempt_timeout(ATTEMPT_TIMEOUT)
        .build()
        .unwrap()
}

/// The `k`-th delay between probes (from 0, before the first), before its jitter.
pub(super) fn probe_delay(k: usize) -> Duration {
    let doubled = FIRST_PROBE_DELAY.saturating_mul(1 << k.min(16));
    doubled.min(MAX_PROBE_DELAY)
}

/// Now, on the wall clock, as nginx stamps its log.
pub(crate) fn wall() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// How one call ended.
#[derive(Debug)]
pub(crate) struct Ended {
    /// When it was sent and when it ended, since the run's start; when it ended on the wall clock.
    pub(crate) sent: Duration,
    pub(crate) ended: Duration,
    pub(crate) ended_wall: Duration,
    /// It ended in the poll that sent it: nothing was waited for.
    pub(crate) at_once: bool,
    pub(crate) status: Option<u16>,
    pub(crate) attempts: u32,
    pub(crate) stop: StopReason,
    pub(crate) took: Duration,
    /// The policy did not send it: why, the host it names, and the time to the next probe it gives.
    pub(crate) rejected: Option<(StopReason, Option<String>, Duration)>,
    pub(crate) error: Option<String>,
}

impl Ended {
    pub(crate) fn summary(&self) -> String {
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
pub(crate) async fn send(client: Client, url: String, id: String, start: Instant) -> Ended {
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
pub(crate) struct Seen {
    /// Since the run's start, and on the wall clock.
    pub(crate) at: Duration,
    pub(crate) wall: Duration,
    /// The probes the policy had sent.
    pub(crate) probes: u32,
    /// What the server had counted (SYNs), read with every call stopped; `None` where the test
    /// reads nginx's log instead.
    pub(crate) reached: Option<u64>,
}

/// What the watch saw of the host's state, looked at every millisecond.
#[derive(Debug, Default)]
pub(crate) struct Watched {
    /// When it was first seen down.
    pub(crate) down: Option<Seen>,
    /// When it was first seen not down after that.
    pub(crate) up: Option<Duration>,
    /// When the policy first counted each probe, since the run's start.
    pub(crate) probes: Vec<Duration>,
    /// The most calls seen held at once.
    pub(crate) held: usize,
    /// How many times the host was seen going down.
    pub(crate) downs: u32,
}

/// What `policy` knows of `host`: of the host itself, or else of the path every call asks for, `/`
/// (a host answering gateway failures is down on the paths that failed, not as a whole).
pub(crate) fn state_of(policy: &RetryPolicy, host: &str) -> HostState {
    match policy.host_state(host) {
        HostState::Up { .. } => policy.route_state(host, "/"),
        state => state,
    }
}

/// Watches `host`'s state in `policy` until `done`; `reached` reads what reached the server.
pub(crate) async fn watch(
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
        match state_of(policy, host) {
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
pub(crate) struct Returned {
    pub(crate) seen: Seen,
    /// The host's state then.
    pub(crate) state: HostState,
}

/// One adapter's run of a scenario, before it runs: its policy, its client, its host.
pub(crate) struct Setup {
    pub(crate) adapter: Adapter,
    pub(crate) mode: Mode,
    pub(crate) policy: RetryPolicy,
    pub(crate) client: Client,
    /// The host as the policy names it, `ip:port`.
    pub(crate) host: String,
    /// Its calls' paths start with `/{tag}/`.
    pub(crate) tag: String,
    pub(crate) start: Instant,
    /// A call leaves this long after the one before.
    pub(crate) every: Duration,
}

impl Setup {
    pub(super) fn new(adapter: Adapter, mode: Mode, host: String) -> Self {
        Self::of(adapter, mode, policy(mode), host, EVERY, "")
    }

    /// A run of `policy` (whose breaker `mode` names) through `adapter` to `host`, a GET every
    /// `every`; `name` sets its calls apart from other runs' of the same mode and adapter.
    pub(crate) fn of(
        adapter: Adapter,
        mode: Mode,
        policy: RetryPolicy,
        host: String,
        every: Duration,
        name: &str,
    ) -> Self {
        Self {
            adapter,
            mode,
            client: adapter.client(policy.clone()),
            policy,
            host,
            tag: format!(
                "{name}{}-{}",
                mode.as_str(),
                format!("{adapter:?}").to_lowercase()
            ),
            start: Instant::now(),
            every,
        }
    }

    /// A GET every `every` from the start to `until` (each to a path of its own, `/{tag}/{n}`),
    /// beside `outage` and a watch on the host; `reached` reads what reached the server.
    pub(crate) async fn drive<T>(
        &self,
        until: Duration,
        reached: Option<&dyn Fn() -> u64>,
        outage: impl Future<Output = T>,
    ) -> (Vec<Ended>, Watched, T) {
        let done = Cell::new(false);
        let calls = async {
            let mut calls = Vec::new();
            for n in 0.. {
                let at = self.every * n;
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
    pub(crate) fn end_outage(
        &self,
        reached: Option<&dyn Fn() -> u64>,
        back: impl FnOnce(),
    ) -> Returned {
        let state = state_of(&self.policy, &self.host);
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
    pub(super) fn ran(
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
pub(super) struct Run {
    pub(super) scenario: &'static str,
    pub(super) adapter: Adapter,
    pub(super) mode: Mode,
    /// Its calls' paths start with `/{tag}/`.
    pub(crate) tag: String,
    /// The host as the policy names it, `ip:port`.
    pub(crate) host: String,
    /// When the server went, since the start.
    pub(crate) gone: Duration,
    pub(crate) returned: Returned,
    pub(crate) calls: Vec<Ended>,
    pub(crate) watched: Watched,
}

impl Run {
    pub(super) fn label(&self) -> String {
        format!(
            "{} {:?} {}",
            self.scenario,
            self.adapter,
            self.mode.as_str()
        )
    }
}
