//! The state machine's dealings with its hosts' states: before an attempt, the host's pause and
//! whether it is down (held for it, or failing fast); after one, what the answer says of the host's
//! pause and health; and what a policy reports of its hosts ([`RetryPolicy::host_state`]). With
//! `policy_guards.rs`, the only engine file that reads `guards/`.

use std::time::Duration;

use crate::time::Instant;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::schedules::Schedules;
use super::state::RetryState;
use crate::attempt::{Attempt, StopReason};
use crate::classify::{GrpcCode, Outcome, Reason, RequestView};
use crate::engine::backoff::{Backoff, DelayState};
use crate::engine::breaker::Breaker;
use crate::engine::policy::RetryPolicy;
use crate::engine::policy_guards::Tickets;
use crate::error::Rejected;
use crate::guards::host_state::{
    self, Admission, Change, Deadline, Evidence, HostReport, HostState, Pause, Place, ProbeDelays,
    ProbeSchedule, Rules, Scope,
};
use crate::guards::hosts::Host;
use crate::observe::log;
use crate::observe::metrics;

/// The part of [`RetryPolicy`]'s inherent `impl` that reports on its hosts and marks them by hand
/// (the rest is in `policy.rs`).
impl RetryPolicy {
    /// What the policy knows of `host` (`name` or `name:port`, as requests name it: a default port
    /// may be written or not, any case): up, held for a pause it asked, paced, down, recovering. A
    /// policy without the host cooldown or a breaker knows every host as up; so does one for a name
    /// it cannot read.
    ///
    /// ```
    /// use stagger::{Breaker, HostState, RetryPolicy};
    ///
    /// let policy = RetryPolicy::builder().breaker(Breaker::fail_fast()).build()?;
    /// assert_eq!(policy.host_state("api.example.com"), HostState::Up { failures: 0 });
    /// assert!(policy.mark_down("api.example.com:443"));
    /// assert!(matches!(policy.host_state("API.example.com"), HostState::Down { next_probe: None, .. }));
    /// assert_eq!(policy.hosts()[0].host, "api.example.com");
    /// assert!(policy.mark_up("api.example.com"));
    /// assert_eq!(policy.host_state("api.example.com"), HostState::Up { failures: 0 });
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn host_state(&self, host: &str) -> HostState {
        let up = HostState::Up { failures: 0 };
        match Host::named(host) {
            Some((host, _)) => self
                .replicas_down(host)
                .unwrap_or_else(|| self.shared.guards.hosts().state(host, Instant::now())),
            None => up,
        }
    }

    /// What the policy knows of one route of `host`: the requests to `path` on it (a gRPC
    /// method's path, `/package.Service/Method`), which the breaker judges by the gateway failures
    /// they are answered (`502`, `503`, `504`, gRPC `UNAVAILABLE`), apart from the host's other
    /// paths. A route is down while its host answers on others; a host down as a whole (its
    /// attempts unanswered) is [`host_state`](Self::host_state)'s, and holds every route of it.
    ///
    /// ```
    /// use stagger::{HostState, RetryPolicy};
    ///
    /// let policy = RetryPolicy::default();
    /// assert_eq!(policy.route_state("api.example.com", "/reports"), HostState::Up { failures: 0 });
    /// ```
    pub fn route_state(&self, host: &str, path: &str) -> HostState {
        let up = HostState::Up { failures: 0 };
        match Host::named(host) {
            Some((host, _)) => (self.shared.guards.hosts()).state(host.route(path), Instant::now()),
            None => up,
        }
    }

    /// Every host the policy keeps a state for (one that is not simply up with nothing to remember),
    /// by name, for a health endpoint. Empty without the host cooldown or a breaker.
    pub fn hosts(&self) -> Vec<HostReport> {
        self.shared.guards.hosts().report(Instant::now())
    }

    /// Marks `host` down by hand (`name` or `name:port`): nothing is sent to it, and it is not
    /// probed, until [`mark_up`](Self::mark_up); requests to it fail at once with
    /// [`Rejected`](crate::Rejected) ([`StopReason::HostDown`]). `false` when the policy has no
    /// breaker, or `host` is not a host's name.
    pub fn mark_down(&self, host: &str) -> bool {
        let Some((key, name)) = Host::named(host) else {
            return false;
        };
        let marked = self
            .shared
            .guards
            .hosts()
            .mark_down(key, name, Instant::now());
        if marked {
            log::host_marked(host, true);
        }
        marked
    }

    /// Marks `host` up by hand, down or not: the requests held for it go at the rate they came, new
    /// ones at once. `false` when the policy has no breaker, or `host` is not a host's name.
    pub fn mark_up(&self, host: &str) -> bool {
        let hosts = self.shared.guards.hosts();
        if !hosts.has_breaker() {
            return false;
        }
        let Some((key, _)) = Host::named(host) else {
            return false;
        };
        if hosts.mark_up(key, Instant::now()).is_some() {
            log::host_marked(host, false);
        }
        true
    }
}

impl RetryState {
    /// What the call has left of its deadline, for the breaker's admission: all of it before its
    /// clock starts.
    pub(super) fn time_left(&self) -> Deadline {
        match self.max_elapsed() {
            Some(of) => Deadline::Left {
                left: self.remaining().unwrap_or(of),
                of,
            },
            None => Deadline::None,
        }
    }

    /// Which entry `key`, an entry a request to `place` met, is: the host's, the request's route's,
    /// or (for a name with replicas) the replica's, or its route's.
    fn scope_of(&self, key: Host, place: Place) -> Scope {
        if key == place.host || key == place.health {
            return Scope::Host;
        }
        if place.route == Some(key) {
            return Scope::Route;
        }
        match self.replica_for(false) {
            Some(replica) if replica.member().key() == key => Scope::Replica,
            _ => Scope::Route,
        }
    }

    /// When a pause before an attempt has ended: how much longer to wait, if the host asked for a
    /// pause meanwhile (another request's response, while this one slept), or the [`Rejected`] the
    /// call ends with when that pause outlasts the limits. One atomic load with no pause in force.
    ///
    /// Call it after every wait: the one [`before_first`](Self::before_first) asked for, and the
    /// delay of a retry, before [`begin_retry`](Self::begin_retry); wait again as long as it asks.
    #[inline]
    pub fn recheck_pause(
        &mut self,
        request: Option<&RequestView<'_>>,
    ) -> Result<Option<Duration>, Rejected> {
        let guards = &self.policy.shared.guards;
        if guards.hosts().is_armed() || !guards.replica_sets().is_empty() {
            self.wait_for_host(request)
        } else {
            Ok(None)
        }
    }

    #[cold]
    pub(super) fn wait_for_host(
        &mut self,
        request: Option<&RequestView<'_>>,
    ) -> Result<Option<Duration>, Rejected> {
        let policy = self.policy.clone();
        let shared = &*policy.shared;
        let s = &shared.settings;
        let Some((view, (host, set))) =
            request.and_then(|view| Some((view, shared.guards.host_and_set(view)?)))
        else {
            return Ok(None);
        };
        let hosts = shared.guards.hosts();
        if let Some(set) = set
            && !hosts.is_armed()
            && !self.held_for_host()
        {
            // Nothing is known of any host or replica: the cheaper of two, at once, and no clock
            // read.
            let mut tickets = self.delays.as_ref().map(|d| d.hosts).unwrap_or_default();
            self.place_attempt(None, set, (Place::name(host), view), &mut tickets);
            if let Some(delays) = &mut self.delays {
                delays.hosts = tickets;
            }
            return Ok(None);
        }
        let place = match set {
            Some(_) => Place::name(host),
            None => Place::at(host, view),
        };
        let now = Instant::now();
        self.end_held_wait(now);
        let mut tickets = self.delays.as_ref().map(|d| d.hosts).unwrap_or_default();
        let probes = tickets.down.map(|ticket| ticket.is_probe());
        let deadline = self.time_left();
        let admission = match set {
            Some(set) => self.place_attempt(Some((hosts, now)), set, (place, view), &mut tickets),
            None => hosts.admit(place, now, &mut tickets, deadline),
        };
        if self.delays.is_some() || tickets != Tickets::default() {
            // The tickets the request goes or waits with, to be shown with its answer.
            Schedules::of(&mut self.delays, shared).hosts = tickets;
        }
        if let Some(ticket) = tickets.down
            && ticket.is_probe()
            && probes != Some(true)
        {
            let scope = self.scope_of(ticket.key, place);
            log::probing(request, ticket.probe_number(), scope.as_str());
            metrics::host_state(request, "probing", scope.as_str());
        }
        if admission == Admission::Go {
            return Ok(None);
        }
        if self.max_elapsed().is_some() && self.started.is_none() {
            // The wait is part of the call.
            self.started = Some(now);
        }
        let remaining = self.remaining();
        let delays = Schedules::of(&mut self.delays, shared);
        match host_state::wait(admission, s.max_retry_after, remaining, |window| {
            delays.transient.uniform(window)
        }) {
            Ok(wait) => {
                if let Admission::HeldDown(_) = admission {
                    // Held for a down host: counted when the wait ends, which its coming back may
                    // make sooner.
                    delays.held = Some(now);
                } else if self.attempts == 0 {
                    // Before the first attempt the wait is the cooldown; before a retry, more sleep.
                    let schedules = Schedules::of(&mut self.delays, shared);
                    schedules.cooldown = schedules.cooldown.saturating_add(wait);
                } else {
                    self.sleep(wait);
                }
                log::cooling_down(request, wait);
                metrics::cooldown_wait(request);
                Ok(Some(wait))
            }
            Err(limit) => {
                // The slot, if one was taken, goes unused.
                Schedules::of(&mut self.delays, shared).hosts.slot = None;
                let down = matches!(admission, Admission::HeldDown(_) | Admission::Down(_));
                // A held request past its time, and a slot past the deadline, are the breaker's
                // verdict when the breaker is what holds it.
                let reason = if down || tickets.down.is_some_and(|t| t.is_releasing()) {
                    StopReason::HostDown
                } else {
                    StopReason::Cooldown
                };
                if self.attempts == 0 {
                    self.stop(reason, None, request);
                    if let Admission::Down(_) = admission {
                        // Failed fast before its first attempt.
                        self.linger(None);
                    }
                } else {
                    self.abandon(reason, request);
                }
                let info = self.info();
                let left = admission.left();
                Err(match (admission, limit) {
                    _ if reason == StopReason::HostDown => {
                        let next_probe = match admission {
                            Admission::Down(next) => next,
                            _ => Some(left),
                        };
                        let placed = self.placed(request).unwrap_or(place);
                        let route = tickets
                            .down
                            .filter(|ticket| Some(ticket.key) == placed.route)
                            .map(|_| view.path().unwrap_or("/").into());
                        Rejected::host_down(host_state::name_of(view), route, next_probe, info)
                    }
                    (_, host_state::Outlasts::MaxRetryAfter) => {
                        Rejected::over_max_retry_after(left, s.max_retry_after, info)
                    }
                    (_, host_state::Outlasts::Deadline | host_state::Outlasts::HostDown) => {
                        Rejected::past_deadline(left, remaining.unwrap_or_default(), info)
                    }
                })
            }
        }
    }

    /// A wait for a down host, if one was under way, is over at `now`: it counts as the cooldown
    /// before a first attempt, as sleep before a retry.
    fn end_held_wait(&mut self, now: Instant) {
        let Some(since) = self.delays.as_mut().and_then(|d| d.held.take()) else {
            return;
        };
        let waited = now.saturating_duration_since(since);
        if self.attempts == 0 {
            let schedules = Schedules::of(&mut self.delays, &self.policy.shared);
            schedules.cooldown = schedules.cooldown.saturating_add(waited);
        } else {
            self.sleep(waited);
        }
    }

    /// Whether the request is waiting for its down host to come back: if so, `waker` is woken when it
    /// does (and the wait is looked at again). `false` once it is not held, or the host is back.
    pub(crate) fn still_held(&self, waker: &std::task::Waker) -> bool {
        let Some(delays) = &self.delays else {
            return false;
        };
        delays.held.is_some()
            && (self.policy.shared.guards.hosts()).still_held(&delays.hosts, waker)
    }

    /// Whether the request is waiting for its down host (see [`still_held`](Self::still_held)).
    pub(crate) fn held_for_host(&self) -> bool {
        self.delays.as_ref().is_some_and(|d| d.held.is_some())
    }

    /// The request is dropped (its caller gave up): it takes itself out of its host's waiters, so
    /// that it keeps no waker alive and the host's release is paced for the calls that remain.
    pub(super) fn leave_hosts(&self) {
        let Some(delays) = &self.delays else {
            return;
        };
        if delays.hosts.down.is_none() {
            return;
        }
        self.policy.shared.guards.hosts().forget(&delays.hosts);
    }

    /// What the breaker sets of the time limits of an attempt of `request` that started waiting at
    /// `start`: when its silence becomes its host's failure (eight round trips of the host, and at
    /// least a second, if the host answers nothing else meanwhile), and, for a probe of a down host
    /// whose calls fail fast, when the probe gives up (eight round trips, and at least 20 ms; every
    /// fourth probe waits the attempt's own limit). `None` for either without a breaker, without a
    /// host, or while the host's round trip is not known.
    pub(crate) fn breaker_limits(
        &self,
        request: Option<&RequestView<'_>>,
        start: Instant,
    ) -> (Option<Instant>, Option<Instant>) {
        let shared = &*self.policy.shared;
        let host = self.placed(request).map(|place| place.health);
        let (Some(_), Some(host)) = (shared.settings.shapes.breaker, host) else {
            return (None, None);
        };
        let latencies = shared.guards.latencies();
        // A quick probe only where calls fail fast: a call held for its host waits for it in any
        // case, and its probe is better given the attempt's whole limit, lest a host that is back,
        // but slower than it was, be cut short and judged down still.
        let fails_fast = guards_fail_fast(&self.policy);
        let probe = (self.delays.as_ref())
            .and_then(|d| d.hosts.down)
            .filter(|ticket| fails_fast && ticket.is_probe())
            .and_then(|ticket| latencies.probe(host, ticket.probe_number()))
            .and_then(|wait| start.checked_add(wait));
        let silence = latencies
            .silence(host)
            .and_then(|silence| start.checked_add(silence));
        (silence, probe)
    }

    /// The attempt in flight, which started waiting at `since`, has gone unanswered long past what
    /// its host takes: if the host has answered no other attempt since, its silence is the host's
    /// failure, now, and its end, whatever it is, says nothing more of the host but an answer. A host
    /// that answers others meanwhile (slower, loaded) is not silent, and the attempt's end is
    /// judged as it comes.
    pub(crate) fn count_silence(&mut self, request: Option<&RequestView<'_>>, since: Instant) {
        let shared = &*self.policy.shared;
        if self.silence_counted || shared.settings.shapes.breaker.is_none() {
            return;
        }
        let (hosts, latencies) = (shared.guards.hosts(), shared.guards.latencies());
        let (Some(view), Some(place)) = (request, self.placed(request)) else {
            return;
        };
        if latencies.answered_since(place.health, since) {
            return;
        }
        self.silence_counted = true;
        let mut tickets = self.delays.as_ref().map(|d| d.hosts).unwrap_or_default();
        let names = || {
            let path = view.path().unwrap_or("/");
            (Some(host_state::name_of(view)), Some(path.into()))
        };
        let change = hosts.observe(
            place,
            names,
            crate::attempt::HostSignal::Nothing,
            Evidence::HostSilent,
            Instant::now(),
            &mut tickets,
        );
        if let Some(delays) = &mut self.delays {
            delays.hosts = tickets;
        }
        report_change(request, change, Evidence::HostSilent);
    }

    /// Learns that an attempt of `request` was answered after `took`, for the breaker's judgement of
    /// its host's silence.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn sample_latency(&self, request: Option<&RequestView<'_>>, took: Duration) {
        if let Some(replica) = self.replica_for(false) {
            // The replica's cost, for the choice of the next attempts' replicas.
            replica.member().answered(took);
        }
        let shared = &*self.policy.shared;
        if let (Some(_), Some(place)) = (shared.settings.shapes.breaker, self.placed(request)) {
            shared.guards.latencies().sample(place.health, took);
        }
    }

    /// Records, for the breaker, an attempt the deadline cut before it was answered: a failure of
    /// the host, unless the deadline was the caller's own.
    pub(super) fn record_unanswered(&mut self, request: Option<&RequestView<'_>>) {
        if self.policy.shared.settings.shapes.breaker.is_some() {
            let mut attempt = Attempt::timed_out(true);
            attempt.signal = crate::attempt::HostSignal::Nothing;
            self.record_hosts(&attempt, request);
        }
        self.replica_judged(false);
    }

    /// Whether a retry to `request`'s host would fail fast, the host (or the request's route) being
    /// down: then it is not decided, and the call ends with what it has.
    pub(super) fn host_fails_fast(&self, request: Option<&RequestView<'_>>) -> bool {
        let hosts = self.policy.shared.guards.hosts();
        if !hosts.is_armed() {
            return false;
        }
        if let Some(all) = self.replicas_fail_fast(request) {
            return all;
        }
        request
            .and_then(Place::of)
            .is_some_and(|place| hosts.fails_fast(place, Instant::now()))
    }

    /// Records what an attempt's response says of its host: what it tells the host's cooldown and its
    /// health, when the policy keeps them, and whether the backend accepted it, for adaptive
    /// throttling. An attempt cut by a limit of the caller's own says nothing of the backend.
    pub(super) fn record_response(&mut self, attempt: &Attempt, request: Option<&RequestView<'_>>) {
        let probing = self.probing_replica();
        self.record_hosts(attempt, request);
        self.replica_judged(probing);
        if self.cut_by_caller {
            return;
        }
        self.count_for_retry_throttling(attempt, request);
        let throttles = &self.policy.shared.guards.throttles;
        if throttles.is_on() {
            let accepted = !attempt.outcome.is_retryable();
            throttles.answered(request.and_then(Host::of), Instant::now(), accepted);
        }
    }

    /// What an attempt's answer tells its host's cooldown and health, when the policy keeps them.
    fn record_hosts(&mut self, attempt: &Attempt, request: Option<&RequestView<'_>>) {
        let hosts = self.policy.shared.guards.hosts();
        let evidence = match evidence(attempt) {
            // A silence counted already, or a limit of the caller's own: only an answer says more.
            Evidence::Answered => Evidence::Answered,
            _ if self.cut_by_caller || self.silence_counted => Evidence::Nothing,
            evidence => evidence,
        };
        let fails =
            evidence != Evidence::Nothing && evidence != Evidence::Answered && hosts.has_breaker();
        if !(fails || hosts.is_armed() || attempt.signal.starts_a_cooldown()) {
            return;
        }
        let (Some(view), Some(place)) = (request, self.placed(request)) else {
            return;
        };
        let mut tickets = self.delays.as_ref().map(|d| d.hosts).unwrap_or_default();
        let names = || {
            let path = view.path().unwrap_or("/");
            (Some(host_state::name_of(view)), Some(path.into()))
        };
        let change = hosts.observe(
            place,
            names,
            attempt.signal,
            evidence,
            Instant::now(),
            &mut tickets,
        );
        if let Some(delays) = &mut self.delays {
            delays.hosts = tickets;
        }
        report_change(request, change, evidence);
    }

    /// The hold `request`'s host is in, if the policy keeps a cooldown and one is in force: no
    /// request to the host goes before it ends.
    pub(super) fn host_pause(&self, request: Option<&RequestView<'_>>) -> Option<Pause> {
        let hosts = self.policy.shared.guards.hosts();
        if !hosts.is_armed() {
            return None;
        }
        hosts.hold(request.and_then(Host::of)?, Instant::now)
    }

    /// Whether `request`'s host (or its route) is held or paced, so that a hedge would jump its
    /// queue.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(super) fn host_busy(&self, request: Option<&RequestView<'_>>) -> bool {
        let hosts = self.policy.shared.guards.hosts();
        request
            .and_then(Place::of)
            .is_some_and(|place| hosts.holds_or_paces(place, Instant::now))
    }
}

/// What an attempt's end says of its host and route. Without an answer (refused, reset, timed out,
/// not resolved): the host's failure. A `502`, `503` or `504` (gRPC `UNAVAILABLE`, answered) that
/// names no delay and is not throttling: the route's failure, and the host's answer. In the browser,
/// a failed `fetch` (a network error) is the host's failure too. Any other
/// answer: the host and the route are up. Anything else: nothing.
fn evidence(attempt: &Attempt) -> Evidence {
    let speaks = attempt.retry_after.is_some() || attempt.throttled;
    match attempt.outcome.reason() {
        Some(Reason::Timeout) => Evidence::HostTimedOut,
        Some(Reason::Connect | Reason::ConnectionClosed | Reason::NetworkError) => {
            Evidence::HostFailed
        }
        Some(Reason::Status(status)) if matches!(status.as_u16(), 502..=504) && !speaks => {
            Evidence::RouteFailed
        }
        Some(Reason::Grpc(GrpcCode::Unavailable)) if !speaks && attempt.answered => {
            Evidence::RouteFailed
        }
        Some(Reason::Grpc(GrpcCode::Unavailable)) if !speaks => Evidence::HostFailed,
        _ if attempt.answered || attempt.outcome == Outcome::Success => Evidence::Answered,
        _ => Evidence::Nothing,
    }
}

/// Whether the policy's breaker fails calls to a down host fast.
fn guards_fail_fast(policy: &RetryPolicy) -> bool {
    (policy.shared.settings.shapes.breaker).is_some_and(|breaker| breaker.hold_bound().is_none())
}

/// Reports a change of a host's health (or of a replica's, or of a route's: `scope`), which
/// `evidence`, the last attempt's, brought about: an event and a metric.
fn report_change(
    request: Option<&RequestView<'_>>,
    change: Option<(Scope, Change)>,
    evidence: Evidence,
) {
    match change {
        None => {}
        Some((scope, Change::Down { failures })) => {
            log::host_down(request, failures, scope.as_str(), evidence.as_str());
            metrics::host_state(request, "down", scope.as_str());
        }
        Some((scope, Change::Up { down_for, held })) => {
            log::host_up(request, down_for, held, scope.as_str());
            metrics::host_state(request, "up", scope.as_str());
        }
    }
}

/// The breaker's rules as the hosts' table applies them.
pub(super) fn rules(breaker: &Breaker) -> Rules {
    Rules {
        failures: breaker.failures(),
        hold: breaker.hold_bound(),
        probes: Box::new(ProbeBackoff(*breaker.probe_backoff())),
        answers_per_host: !breaker.route_scope(),
    }
}

/// The probes' delays: the breaker's probe backoff, jittered.
#[derive(Debug)]
struct ProbeBackoff(Backoff);

impl ProbeSchedule for ProbeBackoff {
    fn delays(&self, rng: &mut SmallRng) -> Box<dyn ProbeDelays> {
        Box::new(Probes {
            backoff: self.0,
            state: DelayState::new(&self.0, SmallRng::from_rng(rng)),
        })
    }
}

#[derive(Debug)]
struct Probes {
    backoff: Backoff,
    state: DelayState,
}

impl ProbeDelays for Probes {
    fn next_delay(&mut self) -> Duration {
        self.state.next_delay(&self.backoff)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::engine::live::LivePolicy;
    use crate::engine::policy::RetryPolicy;
    use crate::guards::hosts::Host;

    #[tokio::test(start_paused = true)]
    async fn the_round_trips_learnt_for_the_breaker_carry_over() {
        let policy = LivePolicy::new(RetryPolicy::default());
        let host = Host::from_raw(5);
        let guards = || policy.current().shared.guards.clone();
        for _ in 0..10 {
            guards()
                .latencies()
                .sample(host, Duration::from_millis(100));
        }
        let learnt = guards().latencies().silence(host);
        assert!(learnt.is_some());
        let other = RetryPolicy::builder().max_retries(2).build().unwrap();
        policy.reload(other).unwrap();
        assert_eq!(guards().latencies().silence(host), learnt);
        assert_eq!(policy.current().max_retries(), 2);
    }
}
