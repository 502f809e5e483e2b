//! What more than one test binary uses: capturing the `tracing` events of a test, and (in `scripted`)
//! servers, on loopback or in process, and the clients of both reqwest adapters.
#![allow(dead_code)] // each test binary uses its own part of it

/// Scripted servers, on loopback or in process, and both reqwest adapters, for the pushback and
/// cooldown tests.
#[cfg(all(feature = "reqwest-middleware", feature = "tower"))]
pub mod scripted;

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::{Layer, Registry};

/// Waits until `done` says so, or `bound` has passed on tokio's clock, and says which: what a test in
/// real time does to see something another task, a server or the kernel does (a connection closed, a
/// request counted), in place of sleeping a fixed time, which a loaded machine outlasts. The bound
/// is the test's patience, not the time the event should take.
pub async fn until(bound: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = tokio::time::Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= bound {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A port on 127.0.0.1 that refuses connections while this lives: bound and not listening, so that
/// no server the suite starts meanwhile (a mock on port 0, a test beside this one) is handed it, as
/// it could be a port that was bound, read and let go.
pub struct ClosedPort {
    _bound: tokio::net::TcpSocket,
    pub port: u16,
}

impl ClosedPort {
    pub fn new() -> Self {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
        let port = socket.local_addr().unwrap().port();
        Self {
            _bound: socket,
            port,
        }
    }

    /// `http://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.port)
    }
}

/// The last middleware of a reqwest-middleware chain, in place of the network: answers every
/// request with its status, counting them.
#[cfg(feature = "reqwest-middleware")]
pub struct Answering {
    pub status: u16,
    pub hits: std::sync::Arc<std::sync::atomic::AtomicU32>,
}

#[cfg(feature = "reqwest-middleware")]
#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Answering {
    async fn handle(
        &self,
        _: reqwest::Request,
        _: &mut http::Extensions,
        _: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        (self.hits).fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let response = http::Response::builder().status(self.status).body("");
        Ok(reqwest::Response::from(response.unwrap()))
    }
}

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

/// The events seen on one thread since [`capture`] was called there.
#[derive(Clone)]
pub struct Events {
    thread: std::thread::ThreadId,
    from: usize,
}

impl Events {
    /// Stagger's own events.
    pub fn stagger(&self) -> Vec<Captured> {
        let all = recorded().lock().unwrap();
        all[self.from..]
            .iter()
            .filter(|(thread, e)| *thread == self.thread && e.target.starts_with("stagger"))
            .map(|(_, e)| e.clone())
            .collect()
    }
}

/// Captures the events of this thread from now on.
///
/// One recorder is the global subscriber of the test binary, and every capture reads the events of
/// its own thread: a per-thread subscriber (`set_default`) races with the tests that run beside it,
/// since `tracing` caches, per call site and process-wide, whether anyone is interested.
pub fn capture() -> Events {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        tracing::subscriber::set_global_default(Registry::default().with(Recorder))
            .expect("no other global subscriber in the tests");
    });
    let from = recorded().lock().unwrap().len();
    Events {
        thread: std::thread::current().id(),
        from,
    }
}

type Recorded = Mutex<Vec<(std::thread::ThreadId, Captured)>>;

fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<Recorded> = OnceLock::new();
    RECORDED.get_or_init(Recorded::default)
}

struct Recorder;

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        let captured = Captured {
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            message,
            fields: fields.0,
        };
        recorded()
            .lock()
            .unwrap()
            .push((std::thread::current().id(), captured));
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

/// The calls a loop makes, each refused at once (`call` says it was), before a task spawned beside
/// it on the same thread (a current-thread runtime's) runs; stopped at 100 000.
pub async fn refused_before_a_neighbour_runs<F, Fut>(mut call: F) -> u32
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    let ran = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let ran = Arc::clone(&ran);
        async move { ran.store(true, Ordering::SeqCst) }
    });
    let mut calls = 0;
    while !ran.load(Ordering::SeqCst) && calls < 100_000 {
        assert!(call().await, "call {calls} was not refused unsent");
        calls += 1;
    }
    calls
}

/// tokio's budget is 128 units a poll of a task: the 129th refusal finds it spent, yields, and ends
/// once the neighbour has run. (Before a refusal spent any, the neighbour waited for all 100 000.)
pub const YIELDS_WITHIN: u32 = 129;
