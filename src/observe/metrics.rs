//! Counters and histograms of what the retries do, through the [`metrics`](https://docs.rs/metrics)
//! facade (feature `metrics`), so that a Prometheus, OpenTelemetry or statsd exporter installed by the
//! application sees them.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | [`ATTEMPTS`] | counter | `http.request.method`, `server.address` | attempts made, first attempts, retries and hedges alike |
//! | [`RETRIES`] | counter | the same, `error.type`, `delay.reason` | retries decided: why the attempt failed and what set the delay |
//! | [`HEDGES`] | counter | `http.request.method`, `server.address` | hedged attempts started |
//! | [`BUDGET_REFUSALS`] | counter | `http.request.method`, `server.address` | retries the budget refused |
//! | [`THROTTLE_REJECTIONS`] | counter | `http.request.method`, `server.address` | attempts adaptive throttling rejected locally |
//! | [`COOLDOWN_WAITS`] | counter | `http.request.method`, `server.address` | requests held for a host's pause |
//! | [`CALLS_GIVEN_UP`] | counter | the same, `stop.reason` | calls that ended while still failing, by why the retries stopped |
//! | [`HOST_STATE_CHANGES`] | counter | the same, `host.state`, `host.scope` | changes of the breaker's view of a host, a path of it or a replica |
//! | [`CALL_ATTEMPTS`] | histogram | `http.request.method`, `server.address` | attempts per call |
//! | [`CALL_SLEPT`] | histogram (seconds) | `http.request.method`, `server.address` | time a call slept between attempts |
//! | [`RESTARTS`] | counter | `run.outcome` | restarts of supervised tasks ([`supervise`](crate::supervise())) |
//! | [`RESTART_FAILURES`] | histogram | none | at each restart, the runs in a row that ended before `healthy_after` (0 after a healthy run) |
//! | [`RUN_UPTIME`] | histogram (seconds) | `run.outcome` | how long each run that ended stayed up |
//! | [`RESTARTS_GIVEN_UP`] | counter | none | supervisions that reached their restart limit |
//!
//! A gRPC call (a request whose `content-type` is `application/grpc…`) carries the labels of
//! OpenTelemetry's RPC conventions (as of semantic conventions 1.39) instead of
//! `http.request.method`: `rpc.system.name` (`grpc`) and `rpc.method`, fully qualified
//! (`package.Service/Method`), beside `server.address`; and where an attempt failed with a gRPC
//! status ([`RETRIES`], [`CALLS_GIVEN_UP`]), `rpc.response.status_code`, its name (`UNAVAILABLE`).
//!
//! Label names follow OpenTelemetry's HTTP and RPC conventions; `stop.reason`, `delay.reason` and
//! `run.outcome` are stagger's own. The labels of a call made by [`retry()`](crate::retry()), which has
//! no request, are empty. A supervised task's consecutive failures and uptime are histograms rather
//! than gauges: a process supervises many tasks, and a gauge without a label per task would hold
//! whichever recorded last.
//!
//! # Label values
//!
//! Every label takes its values from a bounded set, so that the number of series an exporter keeps
//! is bounded whatever the requests are:
//!
//! | label | values |
//! |---|---|
//! | `http.request.method` | `GET`, `HEAD`, `POST`, `PUT`, `DELETE`, `CONNECT`, `OPTIONS`, `TRACE`, `PATCH`; any other method is `_OTHER`, as in OpenTelemetry's HTTP conventions |
//! | `rpc.system.name` | `grpc` |
//! | `rpc.method` with `server.address` | a gRPC call's method and host, for the first [`MAX_RPC_SERIES`] pairs of them the process records less one; every later call is `_OTHER` in both |
//! | `rpc.response.status_code` | a gRPC status's name, `OK` to `UNAUTHENTICATED` |
//! | `server.address` | the request's host, for the first [`MAX_SERVER_ADDRESSES`] distinct hosts the process records; every later host is `_OTHER` |
//! | `error.type` | a status code (`503`), a gRPC status's name (`UNAVAILABLE`), `connect`, `timeout`, `connection_closed`, `network_error`, `refused_stream`, `goaway`, or the name a custom classifier gave [`Reason::Other`](crate::Reason::Other) ([`Reason::as_str`](crate::Reason::as_str)) |
//! | `delay.reason` | `backoff`, `throttle` (a `429`'s own schedule), `retry_after` (the server's `Retry-After` or rate-limit header), `cooldown` (the host's pause) |
//! | `stop.reason` | `fatal`, `not_idempotent`, `not_replayable`, `max_retries`, `deadline`, `budget`, `retry_after_too_long`, `not_ready`, `cooldown`, `throttled`, `pushback`, `opted_out`, `host_down` ([`StopReason::as_str`](crate::StopReason::as_str)) |
//! | `run.outcome` | `failed`, or `returned` (a run that returned `Ok`, restarted with `restart_on_return`) |
//! | `host.state` | `down`, `probing` (a probe sent), `up` |
//! | `host.scope` | which of the breaker's entries changed: `host` (the host, name and port), `route` (one path of it, a gRPC method, which a gateway's failures put down alone), `replica` (one replica of a name with a [`ReplicaSet`](crate::ReplicaSet)) |
//!
//! The `tracing` events carry the same tokens in their `error.type`, `delay.reason`, `stop.reason` and
//! `run.outcome` fields.
//!
//! Without the feature every recording function is an empty inline function, and none of this costs
//! anything: the success path executes the same instructions with the recording calls compiled in or
//! taken out (`benches/overhead.rs`). With it, a call records once when it ends, and once per retry;
//! with no recorder installed, building the labels and keys the no-op recorder drops still costs
//! about as much as the rest of the success path (the repository's `docs/cost.md`), so turn the
//! feature on where an exporter is.

/// How many distinct hosts `server.address` names in one process: the first hosts recorded keep
/// their own series for the life of the process, and every later one is counted as `_OTHER`.
///
/// A host comes from the request, so a process that sends wherever its data points (a crawler, a
/// webhook sender, a proxy) would otherwise add series without end. Why 100: a service calls a few
/// upstreams, well under 100, and at 100 hosts and the 10 methods the metrics labelled with these two
/// alone have at most 1 000 series each, half of the 2 000 an OpenTelemetry SDK keeps per metric by
/// default before it folds every new series into one overflow series. Keeping the first hosts, rather
/// than the most recent, keeps each series whole: a host's counts never move to another series.
pub const MAX_SERVER_ADDRESSES: usize = 100;

/// How many series the gRPC calls of one process make of `rpc.method` and `server.address`
/// together: the first `MAX_RPC_SERIES - 1` distinct pairs of a method and a host keep their own
/// series, and every later call is counted in one more, `_OTHER` in both.
///
/// The two are bounded together, not each on its own: a client's methods are those of its generated
/// stubs, but a proxy forwards whatever path it is given, to whichever host, and 100 methods on each
/// of 100 hosts would make 10 000 series of one metric. 1 000 is the bound the HTTP labels keep (10
/// methods on each of [`MAX_SERVER_ADDRESSES`] hosts), half of the 2 000 series an OpenTelemetry SDK
/// keeps per metric before it folds every new one into an overflow series.
pub const MAX_RPC_SERIES: usize = 1000;

/// Counter: attempts made, first attempts, retries and hedges alike.
pub const ATTEMPTS: &str = "stagger.attempts";
/// Counter: retries decided, by `error.type` and `delay.reason`.
pub const RETRIES: &str = "stagger.retries";
/// Counter: hedged attempts started.
pub const HEDGES: &str = "stagger.hedges";
/// Counter: retries the retry budget refused.
pub const BUDGET_REFUSALS: &str = "stagger.budget.refusals";
/// Counter: attempts adaptive throttling rejected locally.
pub const THROTTLE_REJECTIONS: &str = "stagger.throttle.rejections";
/// Counter: requests held for their host's pause.
pub const COOLDOWN_WAITS: &str = "stagger.cooldown.waits";
/// Counter: changes of a host's health ([`Breaker`](crate::Breaker)), by `host.state`: `down` (found
/// down, or marked), `probing` (a probe sent), `up` (a probe answered, or marked up); and by
/// `host.scope`, the entry that changed: `host`, `route` (one path of the host) or `replica`. An
/// alert on hosts found down reads `host.scope="host"`: a route down is one path, its host's other
/// paths sent as ever.
pub const HOST_STATE_CHANGES: &str = "stagger.host.state_changes";
/// Counter: calls that ended while still failing, by `stop.reason`.
pub const CALLS_GIVEN_UP: &str = "stagger.calls.given_up";
/// Histogram: attempts per call.
pub const CALL_ATTEMPTS: &str = "stagger.call.attempts";
/// Histogram: seconds a call slept between attempts.
pub const CALL_SLEPT: &str = "stagger.call.slept";
/// Counter: restarts of supervised tasks, by `run.outcome`.
pub const RESTARTS: &str = "stagger.restarts";
/// Histogram: at each restart of a supervised task, the runs in a row that ended before
/// `healthy_after`.
pub const RESTART_FAILURES: &str = "stagger.restart.failures";
/// Histogram: seconds each run of a supervised task stayed up, by `run.outcome`.
pub const RUN_UPTIME: &str = "stagger.run.uptime";
/// Counter: supervisions that reached their restart limit.
pub const RESTARTS_GIVEN_UP: &str = "stagger.restarts.given_up";

#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
pub(crate) use imp::hedge;
pub(crate) use imp::{
    call_ended, cooldown_wait, host_state, prepare, restart, restarts_given_up, retry,
};

#[cfg(feature = "metrics")]
mod handles;

#[cfg(feature = "metrics")]
mod imp {
    use std::collections::{HashMap, HashSet};
    use std::sync::{Arc, LazyLock, PoisonError, RwLock};
    use std::time::Duration;

    use http::Method;
    use metrics::{
        Label, SharedString, Unit, counter, describe_counter, describe_histogram, histogram,
    };

    use super::handles;
    use super::*;
    use crate::attempt::RestartEvent;
    use crate::attempt::StopReason;
    use crate::classify::{GrpcName, Reason, RequestView};
    use crate::observe::log::{DelayCause, run_outcome};

    /// The value of a label past its bound.
    const OTHER: &str = "_OTHER";

    /// The labels every metric carries: the request's method and host, when it has them; a gRPC
    /// call's system and method instead of its HTTP method.
    fn labels(view: Option<&RequestView<'_>>) -> Vec<Label> {
        describe();
        let Some(view) = view else {
            return Vec::new();
        };
        let host = view.host().map(server_address);
        if let Some(name) = view.grpc_method() {
            let (method, address) = rpc_series(name, host);
            let mut labels = vec![
                Label::from_static_parts("rpc.system.name", "grpc"),
                Label::new("rpc.method", method),
            ];
            if let Some(address) = address {
                labels.push(Label::new("server.address", address));
            }
            return labels;
        }
        let mut labels = vec![Label::from_static_parts(
            "http.request.method",
            method_name(method(view.method())),
        )];
        if let Some(host) = host {
            labels.push(Label::new("server.address", host));
        }
        labels
    }

    /// The methods OpenTelemetry's HTTP conventions know, and `_OTHER`.
    const METHODS: [&str; 10] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH", OTHER,
    ];

    /// The name of the `method`-th of [`METHODS`].
    fn method_name(method: u8) -> &'static str {
        (METHODS.get(usize::from(method))).map_or(OTHER, |&name| name)
    }

    /// Where `method` is in [`METHODS`]: the last place for any other.
    fn method(method: &Method) -> u8 {
        match *method {
            Method::GET => 0,
            Method::HEAD => 1,
            Method::POST => 2,
            Method::PUT => 3,
            Method::DELETE => 4,
            Method::CONNECT => 5,
            Method::OPTIONS => 6,
            Method::TRACE => 7,
            Method::PATCH => 8,
            _ => 9,
        }
    }

    /// `host` if it is one of the first [`MAX_SERVER_ADDRESSES`] hosts recorded, `_OTHER` past them.
    /// A host's name is copied once, when it is first seen; each metric then shares it.
    fn server_address(host: &str) -> SharedString {
        static HOSTS: LazyLock<RwLock<HashSet<Arc<str>>>> = LazyLock::new(RwLock::default);
        let known = |hosts: &HashSet<Arc<str>>| match hosts.get(host) {
            Some(name) => Some(SharedString::from_shared(Arc::clone(name))),
            None if hosts.len() >= MAX_SERVER_ADDRESSES => Some(SharedString::const_str(OTHER)),
            None => None,
        };
        if let Some(label) = known(&HOSTS.read().unwrap_or_else(PoisonError::into_inner)) {
            return label;
        }
        let mut hosts = HOSTS.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(label) = known(&hosts) {
            return label;
        }
        let name: Arc<str> = host.into();
        hosts.insert(Arc::clone(&name));
        SharedString::from_shared(name)
    }

    /// The `rpc.method` and `server.address` of a gRPC call of `name` to `host` (already bounded by
    /// [`server_address`]): theirs, if the pair is one of the first [`MAX_RPC_SERIES`] less one
    /// recorded, and `_OTHER` for both past them, so that the two together make at most
    /// [`MAX_RPC_SERIES`] series.
    fn rpc_series(
        name: GrpcName<'_>,
        host: Option<SharedString>,
    ) -> (SharedString, Option<SharedString>) {
        type Series = (SharedString, Option<SharedString>);
        static SERIES: LazyLock<RwLock<HashMap<String, Series>>> = LazyLock::new(RwLock::default);
        let key = match &host {
            Some(host) => format!("{name} {}", host.as_ref()),
            None => name.to_string(),
        };
        let known = |series: &HashMap<String, Series>| match series.get(&key) {
            Some(labels) => Some(labels.clone()),
            None if series.len() + 1 >= MAX_RPC_SERIES => Some((
                SharedString::const_str(OTHER),
                Some(SharedString::const_str(OTHER)),
            )),
            None => None,
        };
        if let Some(labels) = known(&SERIES.read().unwrap_or_else(PoisonError::into_inner)) {
            return labels;
        }
        let mut series = SERIES.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(labels) = known(&series) {
            return labels;
        }
        let labels = (SharedString::from_owned(name.to_string()), host);
        series.insert(key, labels.clone());
        labels
    }

    /// `rpc.response.status_code`, for a failure that was a gRPC status: its name.
    fn status_code(labels: &mut Vec<Label>, failure: Option<Reason>) {
        if let Some(Reason::Grpc(code)) = failure {
            labels.push(Label::from_static_parts(
                "rpc.response.status_code",
                code.as_str(),
            ));
        }
    }

    /// Describes the metrics to the recorder, once per process.
    fn describe() {
        static DESCRIBED: std::sync::Once = std::sync::Once::new();
        DESCRIBED.call_once(|| {
            describe_counter!(ATTEMPTS, Unit::Count, "Attempts made, retries included");
            describe_counter!(RETRIES, Unit::Count, "Retries decided");
            describe_counter!(HEDGES, Unit::Count, "Hedged attempts started");
            describe_counter!(BUDGET_REFUSALS, Unit::Count, "Retries the budget refused");
            describe_counter!(
                THROTTLE_REJECTIONS,
                Unit::Count,
                "Attempts adaptive throttling rejected locally"
            );
            describe_counter!(
                COOLDOWN_WAITS,
                Unit::Count,
                "Requests held for a host's pause"
            );
            describe_counter!(
                HOST_STATE_CHANGES,
                Unit::Count,
                "Changes of a host's health: down, probing, up"
            );
            describe_counter!(
                CALLS_GIVEN_UP,
                Unit::Count,
                "Calls that ended while still failing"
            );
            describe_histogram!(CALL_ATTEMPTS, Unit::Count, "Attempts per call");
            describe_histogram!(
                CALL_SLEPT,
                Unit::Seconds,
                "Time a call slept between attempts"
            );
            describe_counter!(RESTARTS, Unit::Count, "Restarts of supervised tasks");
            describe_histogram!(
                RESTART_FAILURES,
                Unit::Count,
                "Runs in a row that ended before healthy_after, at each restart"
            );
            describe_histogram!(
                RUN_UPTIME,
                Unit::Seconds,
                "Time each run of a supervised task stayed up"
            );
            describe_counter!(
                RESTARTS_GIVEN_UP,
                Unit::Count,
                "Supervisions that reached their restart limit"
            );
        });
    }

    pub(crate) fn restart(event: &RestartEvent<'_>) {
        describe();
        let outcome = || {
            vec![Label::from_static_parts(
                "run.outcome",
                run_outcome(event.failed),
            )]
        };
        counter!(RESTARTS, outcome()).increment(1);
        histogram!(RESTART_FAILURES).record(f64::from(event.failures));
        histogram!(RUN_UPTIME, outcome()).record(event.uptime.as_secs_f64());
    }

    pub(crate) fn restarts_given_up(uptime: Duration, failed: bool) {
        describe();
        counter!(RESTARTS_GIVEN_UP).increment(1);
        let outcome = vec![Label::from_static_parts("run.outcome", run_outcome(failed))];
        histogram!(RUN_UPTIME, outcome).record(uptime.as_secs_f64());
    }

    pub(crate) fn retry(view: Option<&RequestView<'_>>, reason: Reason, cause: DelayCause) {
        let mut labels = labels(view);
        labels.push(Label::from_static_parts("error.type", reason.as_str()));
        labels.push(Label::from_static_parts("delay.reason", cause.as_str()));
        status_code(&mut labels, Some(reason));
        counter!(RETRIES, labels).increment(1);
    }

    pub(crate) fn cooldown_wait(view: Option<&RequestView<'_>>) {
        counter!(COOLDOWN_WAITS, labels(view)).increment(1);
    }

    pub(crate) fn host_state(
        view: Option<&RequestView<'_>>,
        state: &'static str,
        scope: &'static str,
    ) {
        let mut labels = labels(view);
        labels.push(Label::from_static_parts("host.state", state));
        labels.push(Label::from_static_parts("host.scope", scope));
        counter!(HOST_STATE_CHANGES, labels).increment(1);
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn hedge(view: Option<&RequestView<'_>>) {
        counter!(HEDGES, labels(view)).increment(1);
    }

    /// Readies what calls record to, as a policy is built.
    pub(crate) fn prepare() {
        handles::learn_lasting();
    }

    pub(crate) fn call_ended(
        view: Option<&RequestView<'_>>,
        attempts: u32,
        slept: Duration,
        stop: StopReason,
        failure: Option<Reason>,
    ) {
        describe();
        handles::with_call_handles(
            series_of(view),
            || labels(view),
            |handles| {
                handles.attempts.increment(u64::from(attempts));
                handles.call_attempts.record(f64::from(attempts));
                handles.call_slept.record(slept.as_secs_f64());
            },
        );
        if failure.is_some() || matches!(stop, StopReason::Budget | StopReason::Throttled) {
            failed(view, stop, failure);
        }
    }

    /// What a call that ended failing records beside what every call does: its labels are made as
    /// it comes.
    #[cold]
    #[inline(never)]
    fn failed(view: Option<&RequestView<'_>>, stop: StopReason, failure: Option<Reason>) {
        let refused = match stop {
            StopReason::Budget => Some(BUDGET_REFUSALS),
            StopReason::Throttled => Some(THROTTLE_REJECTIONS),
            _ => None,
        };
        let labels = labels(view);
        if let Some(refused) = refused {
            counter!(refused, labels.clone()).increment(1);
        }
        if failure.is_some() {
            let mut labels = labels;
            labels.push(Label::from_static_parts("stop.reason", stop.as_str()));
            status_code(&mut labels, failure);
            counter!(CALLS_GIVEN_UP, labels).increment(1);
        }
    }

    /// What `view`'s labels are made of.
    fn series_of<'a>(view: Option<&RequestView<'a>>) -> handles::Series<'a> {
        let Some(view) = view else {
            return handles::Series::NONE;
        };
        let method = method(view.method());
        // A gRPC call is a `POST`: no other request is looked at for its method.
        let grpc = if method_name(method) == "POST" {
            view.grpc_method()
        } else {
            None
        };
        match grpc {
            Some(name) => handles::Series::grpc(name.service(), name.method(), view.target_bytes()),
            None => handles::Series::http(method, view.target_bytes()),
        }
    }
}

#[cfg(not(feature = "metrics"))]
mod imp {
    use std::time::Duration;

    use crate::attempt::RestartEvent;
    use crate::attempt::StopReason;
    use crate::classify::{Reason, RequestView};
    use crate::observe::log::DelayCause;

    #[inline(always)]
    pub(crate) fn restart(_: &RestartEvent<'_>) {}

    #[inline(always)]
    pub(crate) fn restarts_given_up(_: Duration, _: bool) {}

    #[inline(always)]
    pub(crate) fn retry(_: Option<&RequestView<'_>>, _: Reason, _: DelayCause) {}

    #[inline(always)]
    pub(crate) fn cooldown_wait(_: Option<&RequestView<'_>>) {}

    #[inline(always)]
    pub(crate) fn host_state(_: Option<&RequestView<'_>>, _: &'static str, _: &'static str) {}

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    #[inline(always)]
    pub(crate) fn hedge(_: Option<&RequestView<'_>>) {}

    #[inline(always)]
    pub(crate) fn prepare() {}

    #[inline(always)]
    pub(crate) fn call_ended(
        _: Option<&RequestView<'_>>,
        _: u32,
        _: Duration,
        _: StopReason,
        _: Option<Reason>,
    ) {
    }
}
