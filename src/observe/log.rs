//! The `tracing` events of a call, in one place: a `debug` event before each retry, and one when the
//! retries stop — a `warn` when they stop while the request is still failing. And those of a
//! supervised task ([`supervise`](crate::supervise())): before each restart a `warn` event after a run
//! that failed (a restart is worth seeing) and an `info` one after a run that returned, a `warn` when
//! the restart limit is reached, and a `debug` one when it stops or its task returns.
//!
//! Field names follow OpenTelemetry's HTTP conventions where one exists (`http.request.method`,
//! `server.address`, `url.path`, `http.request.resend_count`, `error.type`), so that a subscriber
//! exporting to OpenTelemetry maps them as they are; the events' target is
//! `stagger::log`, so their messages carry no prefix of their own. When a call ends, its resend count
//! is also recorded as `http.request.resend_count` on the span current at the time — the caller's
//! request span — if that span declares the field.
//!
//! The reasons are stable `snake_case` tokens, recorded as strings (a formatting subscriber quotes
//! them, `stop.reason="max_retries"`), the same as the metrics' labels:
//!
//! | field | values |
//! |---|---|
//! | `error.type` | why the attempt failed: a status code (`503`), a gRPC status's name (`UNAVAILABLE`), `connect`, `timeout`, `connection_closed`, `refused_stream`, `goaway`, or a custom classifier's [`Reason::Other`] ([`Reason::as_str`]) |
//! | `delay.reason` | what set the delay: `backoff`, `throttle` (a `429`'s own schedule), `retry_after` (the server's `Retry-After` or rate-limit header), `cooldown` (the host's pause) |
//! | `stop.reason` | why the retries stopped: `success`, `fatal`, `not_idempotent`, `not_replayable`, `max_retries`, `deadline`, `budget`, `retry_after_too_long`, `not_ready`, `cooldown`, `throttled`, `pushback` (a gRPC server asked for no retry), `opted_out` (a gRPC method's rule leaves the status out), `host_down` (the breaker found the host down); `max_restarts` for a supervised task ([`StopReason::as_str`]) |
//! | `host.state` | a host's health, on its changes ([`Breaker`](crate::Breaker)): `down` (a `warn`, with `failures` and `host.evidence`), `probing` (a `debug`, with `probe`), `up` (an `info`, with `down_ms` and `held`) |
//! | `host.evidence` | beside `host.state = "down"`, what the last of the failures in a row was: `unanswered` (refused, reset, not resolved), `timed_out` (cut by the policy's attempt timeout), `silent` (unanswered long past what the host takes to answer, while it answered nothing else), `gateway` (a `502`, `503` or `504`, gRPC `UNAVAILABLE`, naming no delay) |
//! | `host.scope` | which entry of the breaker's changed, beside `host.state`: `host` (the host, name and port), `route` (one path of it, which gateway failures put down alone), `replica` (one replica of a name with a [`ReplicaSet`](crate::ReplicaSet)) |
//! | `run.outcome` | how a supervised task's run ended: `failed`, or `returned` (`Ok`, restarted with `restart_on_return`) |
//!
//! A restart's event also carries `restart` (which restart, from 1), `failures` (the runs in a row that
//! ended before `healthy_after`, this one included), `uptime_ms` (how long the run stayed up),
//! `delay_ms` (how long until the next run) and `error`, the run's error as it displays itself, when
//! the adapter has it.

use std::time::Duration;

use crate::attempt::RestartEvent;
use crate::attempt::StopReason;
use crate::classify::{Reason, RequestView};

/// Emits `$level` with the request's fields when there is a view of it, and without them otherwise.
/// The events' target: the module they were first written in, which filters (`RUST_LOG`,
/// `EnvFilter`) and the README name, whatever file they are emitted from now.
pub(crate) const TARGET: &str = "stagger::log";

macro_rules! event {
    ($level:ident, $view:expr, $($fields:tt)*) => {
        match $view {
            Some(view) => tracing::event!(
                target: TARGET,
                tracing::Level::$level,
                http.request.method = %view.method(),
                server.address = view.host().unwrap_or_default(),
                url.path = view.path().unwrap_or_default(),
                $($fields)*
            ),
            None => tracing::event!(target: TARGET, tracing::Level::$level, $($fields)*),
        }
    };
}

/// What set a retry's delay: the `delay.reason` of its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DelayCause {
    /// The backoff.
    Backoff,
    /// The throttle schedule: a `429`, or a `503` with a rate-limit header, without a usable delay.
    Throttle,
    /// The delay the server asked for (`Retry-After` or a rate-limit header).
    ServerDelay,
    /// The pause the host asked of every request.
    Cooldown,
}

impl DelayCause {
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Backoff => "backoff",
            Self::Throttle => "throttle",
            Self::ServerDelay => "retry_after",
            Self::Cooldown => "cooldown",
        }
    }
}

/// A retry is about to wait `delay`, set by `cause`: `attempt` failed for `reason`.
pub(crate) fn retrying(
    view: Option<&RequestView<'_>>,
    attempt: u32,
    delay: Duration,
    reason: Reason,
    cause: DelayCause,
) {
    event!(
        DEBUG,
        view,
        attempt,
        http.request.resend_count = attempt,
        error.type = reason.as_str(),
        delay_ms = millis(delay),
        delay.reason = cause.as_str(),
        "retrying"
    );
}

/// Attempt `attempt` has not answered in `hedge_after`: a second one starts beside it.
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
pub(crate) fn hedging(view: Option<&RequestView<'_>>, attempt: u32) {
    event!(DEBUG, view, attempt, "hedging");
}

/// A request waits `wait` before its first attempt, for its host's pause to end.
pub(crate) fn cooling_down(view: Option<&RequestView<'_>>, wait: Duration) {
    event!(
        DEBUG,
        view,
        delay_ms = millis(wait),
        delay.reason = DelayCause::Cooldown.as_str(),
        "waiting for the host's pause"
    );
}

/// The breaker found a request's host down after `failures` attempts in a row failed, the last
/// as `evidence` says: a `warn`.
pub(crate) fn host_down(
    view: Option<&RequestView<'_>>,
    failures: u32,
    scope: &'static str,
    evidence: &'static str,
) {
    event!(
        WARN,
        view,
        failures,
        host.state = "down",
        host.scope = scope,
        host.evidence = evidence,
        "host down"
    );
}

/// A request goes to its down host as its probe, the `probe`-th.
pub(crate) fn probing(view: Option<&RequestView<'_>>, probe: u32, scope: &'static str) {
    event!(
        DEBUG,
        view,
        probe,
        host.state = "probing",
        host.scope = scope,
        "probing a down host"
    );
}

/// A probe to a request's host was answered after it was down for `down_for`, with `held` requests
/// waiting for it: an `info`.
pub(crate) fn host_up(
    view: Option<&RequestView<'_>>,
    down_for: Duration,
    held: usize,
    scope: &'static str,
) {
    event!(
        INFO,
        view,
        down_ms = millis(down_for),
        held,
        host.state = "up",
        host.scope = scope,
        "host up"
    );
}

/// A host marked down (`down`) or up by hand, through [`RetryPolicy::mark_down`](crate::RetryPolicy::mark_down).
pub(crate) fn host_marked(host: &str, down: bool) {
    let state = if down { "down" } else { "up" };
    tracing::event!(
        target: TARGET,
        tracing::Level::WARN,
        server.address = host,
        host.state = state,
        "host marked by hand"
    );
}

/// The retries stopped for `stop` after `attempts` attempts and `slept` of sleeping. `failure` is why
/// the last attempt failed, if it did in a way worth retrying: then the call gives up while still
/// failing, which is a `warn`; a success or a fatal answer is a `debug`.
pub(crate) fn stopped(
    view: Option<&RequestView<'_>>,
    attempts: u32,
    slept: Duration,
    stop: StopReason,
    failure: Option<Reason>,
) {
    let resends = attempts.saturating_sub(1);
    // OpenTelemetry's attribute on the caller's request span, when it declares it (tower-http's
    // `TraceLayer` with a span of one's own, reqwest-tracing's span): recorded once, at the end, and
    // only when the request was sent again (the conventions set it if and only if it was). A span
    // without the field ignores it; without a subscriber, nothing is looked up.
    if resends > 0 && tracing::dispatcher::has_been_set() {
        tracing::Span::current().record("http.request.resend_count", i64::from(resends));
    }
    match failure {
        Some(reason) => event!(
            WARN,
            view,
            attempts,
            http.request.resend_count = resends,
            error.type = reason.as_str(),
            slept_ms = millis(slept),
            stop.reason = stop.as_str(),
            "gave up while still failing"
        ),
        // A first attempt that succeeded is the common case and says nothing.
        None if stop == StopReason::Success && attempts == 1 => {}
        None if stop == StopReason::Success => event!(
            DEBUG,
            view,
            attempts,
            http.request.resend_count = resends,
            slept_ms = millis(slept),
            "succeeded"
        ),
        None => event!(
            DEBUG,
            view,
            attempts,
            http.request.resend_count = resends,
            slept_ms = millis(slept),
            stop.reason = stop.as_str(),
            "stopped"
        ),
    }
}

/// How a supervised task's run ended: the `run.outcome` of its events and metrics.
pub(crate) const fn run_outcome(failed: bool) -> &'static str {
    if failed { "failed" } else { "returned" }
}

/// A supervised task is about to be restarted: a `warn` after a run that failed, with its error
/// when there is one, an `info` after one that returned.
pub(crate) fn restarting(event: &RestartEvent<'_>) {
    let error = event.error.map(tracing::field::display);
    if event.failed {
        tracing::warn!(
            target: TARGET,
            restart = event.restart,
            failures = event.failures,
            uptime_ms = millis(event.uptime),
            delay_ms = millis(event.delay),
            run.outcome = run_outcome(event.failed),
            error,
            "restarting"
        );
    } else {
        tracing::info!(
            target: TARGET,
            restart = event.restart,
            failures = event.failures,
            uptime_ms = millis(event.uptime),
            delay_ms = millis(event.delay),
            run.outcome = run_outcome(event.failed),
            "restarting"
        );
    }
}

/// A supervised task reached its restart limit after `runs` runs, the last `failures` in a row short of
/// `healthy_after`, the last up for `uptime` and ended with `error`, with `slept` between them.
pub(crate) fn restarts_given_up(
    runs: u32,
    failures: u32,
    uptime: Duration,
    slept: Duration,
    error: Option<&dyn std::fmt::Display>,
) {
    let error = error.map(tracing::field::display);
    tracing::warn!(
        target: TARGET,
        runs,
        failures,
        uptime_ms = millis(uptime),
        slept_ms = millis(slept),
        stop.reason = StopReason::MaxRestarts.as_str(),
        error,
        "gave up restarting"
    );
}

/// A supervision ended at its stop signal, after `restarts` restarts.
pub(crate) fn supervision_stopped(restarts: u32) {
    tracing::debug!(
        target: TARGET,restarts, "supervision stopped");
}

/// A supervised task's run returned `Ok`, which ends the supervision, after `restarts` restarts.
pub(crate) fn supervision_returned(restarts: u32) {
    tracing::debug!(
        target: TARGET,restarts, "supervised task returned");
}

/// The target of the chaos layer's events, apart from the retries' so that a filter can show one and
/// not the other (`stagger::chaos=debug`).
#[cfg(feature = "chaos")]
pub(crate) const CHAOS_TARGET: &str = "stagger::chaos";

/// The chaos layer injected `fault` (of kind `kind`: `answer`, `error`, `hang` or `latency`) into a
/// call to `view`: a `debug` event, with the request's fields and `chaos.fault` and `chaos.injected`.
#[cfg(feature = "chaos")]
pub(crate) fn injected(view: &RequestView<'_>, kind: &'static str, fault: &dyn std::fmt::Display) {
    tracing::event!(
        target: CHAOS_TARGET,
        tracing::Level::DEBUG,
        http.request.method = %view.method(),
        server.address = view.host().unwrap_or_default(),
        url.path = view.path().unwrap_or_default(),
        chaos.fault = kind,
        chaos.injected = %fault,
        "injected a fault"
    );
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
