//! The breaker's events, recorded on the test's thread.

use super::*;

/// The fields of one event, as text.
pub(crate) type Fields = BTreeMap<String, String>;

/// The breaker's events ("host down", "probing a down host", "host up": those with a `host.state`) on
/// this thread, from [`record`](Self::record) until it is dropped.
///
/// A subscriber of this thread alone, interested in `stagger::log` alone: the suite's other trials, on
/// other threads, pay nothing for it. (The shared `tests/common` `capture()` is the process's global
/// subscriber, interested in every event: with it, every hyper and h2 event of every trial of the run
/// was kept, and the suite's peak memory went from 49 MB to 265 MB.)
pub(crate) struct Recorded {
    pub(super) events: Arc<Mutex<Vec<Fields>>>,
    attempts: Option<Arc<Mutex<Vec<Sent>>>>,
    pub(super) _on_this_thread: DefaultGuard,
}

/// An attempt as it went: when (its span was made as it was sent), and its `url.path`.
pub(crate) type Sent = (Instant, String);

impl Recorded {
    pub(crate) fn record() -> Self {
        Self::recording(None)
    }

    /// The events, and every attempt sent (`stagger.attempt` spans, of `stagger::span`): where
    /// packets are dropped, iptables cannot tell an attempt from a retransmission, the client can.
    pub(crate) fn record_with_attempts() -> Self {
        Self::recording(Some(Arc::default()))
    }

    fn recording(attempts: Option<Arc<Mutex<Vec<Sent>>>>) -> Self {
        let events = Arc::default();
        let recorder = Recorder {
            events: Arc::clone(&events),
            attempts: attempts.clone(),
            origin: None,
        };
        let _on_this_thread = tracing::dispatcher::set_default(&recorder.dispatch());
        Self {
            events,
            attempts,
            _on_this_thread,
        }
    }

    pub(crate) fn events(&self) -> Vec<Fields> {
        self.events.lock().unwrap().clone()
    }

    /// The breaker's events of whatever runs under the dispatch returned (a future given it with
    /// `WithSubscriber::with_subscriber`, on any thread), each with its `at`: the time since this
    /// call, as `{:?}` prints it.
    pub(crate) fn for_a_future() -> (Arc<Mutex<Vec<Fields>>>, tracing::Dispatch) {
        let events = Arc::default();
        let recorder = Recorder {
            events: Arc::clone(&events),
            attempts: None,
            origin: Some(Instant::now()),
        };
        (events, recorder.dispatch())
    }

    /// The attempts sent so far, when recorded.
    pub(crate) fn attempts(&self) -> Vec<Sent> {
        (self.attempts.as_ref()).map_or_else(Vec::new, |sent| sent.lock().unwrap().clone())
    }
}

pub(super) struct Recorder {
    events: Arc<Mutex<Vec<Fields>>>,
    attempts: Option<Arc<Mutex<Vec<Sent>>>>,
    /// When set, each event gets an `at`, the time since.
    origin: Option<Instant>,
}

impl Recorder {
    /// A subscriber of its own, recording.
    fn dispatch(self) -> tracing::Dispatch {
        tracing::Dispatch::new(tracing_subscriber::registry().with(self))
    }

    pub(super) fn wants(&self, metadata: &Metadata<'_>) -> bool {
        metadata.target() == "stagger::log"
            || self.attempts.is_some() && metadata.target() == "stagger::span"
    }
}

impl<S: Subscriber> Layer<S> for Recorder {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if self.wants(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>, _: Context<'_, S>) -> bool {
        self.wants(metadata)
    }

    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Visitor::default();
        event.record(&mut fields);
        if fields.0.contains_key("host.state") {
            if let Some(origin) = self.origin {
                fields
                    .0
                    .insert("at".to_owned(), format!("{:?}", origin.elapsed()));
            }
            self.events.lock().unwrap().push(fields.0);
        }
    }

    fn on_new_span(&self, span: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        let Some(attempts) = &self.attempts else {
            return;
        };
        if span.metadata().name() == "stagger.attempt" {
            let mut fields = Visitor::default();
            span.record(&mut fields);
            let path = fields.0.remove("url.path").unwrap_or_default();
            attempts.lock().unwrap().push((Instant::now(), path));
        }
    }
}

#[derive(Default)]
pub(super) struct Visitor(pub(super) Fields);

impl Visit for Visitor {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// The breaker's events of one run, each with the call it came with (its number).
///
/// An event's `host.scope` says what it is about: the host as a whole (`host`, and events of code
/// older than the field, which have none), or the route of the request it came with, host and path
/// (`route`: a `502` without `Retry-After` counts against its route, and the host is down only
/// after failures from several routes). The host's events and the routes' are kept apart.
#[derive(Debug, Default)]
pub(crate) struct HostEvents {
    /// "host down": the call whose failure put the host down, and the failures in a row.
    pub(crate) down: Vec<(usize, u32)>,
    /// "probing a down host": the call that went as the probe.
    pub(crate) probes: Vec<usize>,
    /// "host up": the call whose answer brought the host back, and the calls held then.
    pub(crate) up: Vec<(usize, usize)>,
    /// The same of a route: the call whose path it is, put down by its own failures.
    pub(crate) route_down: Vec<(usize, u32)>,
    pub(crate) route_probes: Vec<usize>,
    pub(crate) route_up: Vec<(usize, usize)>,
}

impl HostEvents {
    pub(crate) fn of(events: &[Fields], tag: &str) -> Self {
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
            let route = match event.get("host.scope").map(String::as_str) {
                None | Some("host") => false,
                Some("route") => true,
                Some(other) => panic!("host.scope {other} in {event:?}"),
            };
            let (down, probes, up) = if route {
                (
                    &mut mine.route_down,
                    &mut mine.route_probes,
                    &mut mine.route_up,
                )
            } else {
                (&mut mine.down, &mut mine.probes, &mut mine.up)
            };
            match state.as_str() {
                "down" => down.push((n, number("failures") as u32)),
                "probing" => probes.push(n),
                "up" => up.push((n, number("held") as usize)),
                other => panic!("host.state {other}"),
            }
        }
        mine
    }

    /// The routes' events in a line: how many went down, by which calls, probes, up.
    pub(crate) fn routes_line(&self) -> String {
        format!(
            "{} routes down (by calls {:?}), {} route probes, {} routes up",
            self.route_down.len(),
            (self.route_down.iter()).map(|(n, _)| n).collect::<Vec<_>>(),
            self.route_probes.len(),
            self.route_up.len()
        )
    }

    /// What the routes' events promise, as `problems`: every call asks for a path of its own, so a
    /// route is put down by its own call's failures in a row, and only that call probes it or
    /// brings it up.
    pub(crate) fn route_problems(&self, attempts_of: impl Fn(usize) -> Option<u32>) -> Vec<String> {
        let mut problems = Vec::new();
        for &(n, failures) in &self.route_down {
            match attempts_of(n) {
                Some(attempts) if attempts >= failures => {}
                attempts => problems.push(format!(
                    "route of call {n} down after {failures} failures, the call made {attempts:?} \
                     attempts"
                )),
            }
        }
        let downs = |n: &usize| self.route_down.iter().any(|(down, _)| down == n);
        for n in (self.route_probes.iter()).chain(self.route_up.iter().map(|(n, _)| n)) {
            if !downs(n) {
                problems.push(format!(
                    "call {n} probed or brought up a route that it did not put down: {self:?}"
                ));
            }
        }
        problems
    }

    /// How many probes call `n` went as.
    pub(crate) fn probes_of(&self, n: usize) -> usize {
        self.probes.iter().filter(|&&probe| probe == n).count()
    }
}
