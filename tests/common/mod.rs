//! What more than one test binary uses: capturing the `tracing` events of a test.
#![allow(dead_code)] // each test binary uses its own part of it

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

/// One event: its level, message and every other field, as text.
#[derive(Debug, Clone)]
pub struct Captured {
    pub level: Level,
    pub target: String,
    pub message: String,
    pub fields: BTreeMap<String, String>,
}

impl Captured {
    pub fn field(&self, name: &str) -> &str {
        self.fields
            .get(name)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("no field {name} in {self:?}"))
    }
}

/// The events seen since [`capture`] was called, on this thread.
#[derive(Clone, Default)]
pub struct Events(Arc<Mutex<Vec<Captured>>>);

impl Events {
    /// Stagger's own events.
    pub fn stagger(&self) -> Vec<Captured> {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .filter(|e| e.target.starts_with("stagger"))
            .cloned()
            .collect()
    }
}

/// Captures every event on this thread until the guard is dropped.
pub fn capture() -> (Events, tracing::subscriber::DefaultGuard) {
    let events = Events::default();
    let subscriber = Registry::default().with(Recorder(events.clone()));
    (events, tracing::subscriber::set_default(subscriber))
}

struct Recorder(Events);

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        self.0.0.lock().unwrap().push(Captured {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            message,
            fields: fields.0,
        });
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}
