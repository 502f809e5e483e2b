//! The breaker's events, recorded on the test's thread.

use super::*;

/// The fields of one event, as text.
pub(super) type Fields = BTreeMap<String, String>;

/// The breaker's events ("host down", "probing a down host", "host up": those with a `host.state`) on
/// this thread, from [`record`](Self::record) until it is dropped.
///
/// A subscriber of this thread alone, interested in `stagger::log` alone: the suite's other trials, on
/// other threads, pay nothing for it. (The shared `tests/common` `capture()` is the process's global
/// subscriber, interested in every event: with it, every hyper and h2 event of every trial of the run
/// was kept, and the suite's peak memory went from 49 MB to 265 MB.)
pub(super) struct Recorded {
    pub(super) events: Arc<Mutex<Vec<Fields>>>,
    pub(super) _on_this_thread: DefaultGuard,
}

impl Recorded {
    pub(super) fn record() -> Self {
        let events = Arc::default();
        let recorder = Recorder(Arc::clone(&events));
        let subscriber = tracing_subscriber::registry().with(recorder);
        let _on_this_thread = tracing::subscriber::set_default(subscriber);
        Self {
            events,
            _on_this_thread,
        }
    }

    pub(super) fn events(&self) -> Vec<Fields> {
        self.events.lock().unwrap().clone()
    }
}

pub(super) struct Recorder(pub(super) Arc<Mutex<Vec<Fields>>>);

impl Recorder {
    pub(super) fn wants(metadata: &Metadata<'_>) -> bool {
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
#[derive(Debug, Default)]
pub(super) struct HostEvents {
    /// "host down": the call whose failure put the host down, and the failures in a row.
    pub(super) down: Vec<(usize, u32)>,
    /// "probing a down host": the call that went as the probe.
    pub(super) probes: Vec<usize>,
    /// "host up": the call whose answer brought the host back, and the calls held then.
    pub(super) up: Vec<(usize, usize)>,
}

impl HostEvents {
    pub(super) fn of(events: &[Fields], tag: &str) -> Self {
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
    pub(super) fn probes_of(&self, n: usize) -> usize {
        self.probes.iter().filter(|&&probe| probe == n).count()
    }
}
