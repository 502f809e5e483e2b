//! Servers that answer from a script and timestamp every request they receive, and the two ways a
//! reqwest user takes stagger — `RetryMiddleware`, and `RetryLayer` over `reqwest::Client` — behind one
//! `Client`, so that each test runs through both.
//!
//! A server listens on loopback ([`Server::start`], axum, real time) for what is about the wire, or
//! answers in process ([`Server::in_process`], no socket, no I/O) for what is about time: there the
//! tests run on tokio's paused clock ([`both_paused`]), so that a delay is measured exactly rather than
//! bounded on a machine that may be loaded. A client from [`Adapter::client`] reaches both kinds.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderName, HeaderValue, StatusCode, Uri};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use stagger::{
    Rejected, RetryEvent, RetryInfo, RetryLayer, RetryMiddleware, RetryPolicy, RetryReport,
};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

pub const fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// One scripted answer: a status, its headers, and how long the server takes to send it.
#[derive(Debug, Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    after: Duration,
}

/// An answer with `status`, whose body is the status code.
pub fn reply(status: u16) -> Reply {
    Reply {
        status,
        headers: Vec::new(),
        after: Duration::ZERO,
    }
}

impl Reply {
    pub fn header(mut self, name: &'static str, value: impl ToString) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }

    /// Answers `delay` after the request arrived, as a slow server does.
    pub fn after(mut self, delay: Duration) -> Self {
        self.after = delay;
        self
    }

    fn response(self) -> http::Response<String> {
        let mut response = http::Response::new(self.status.to_string());
        *response.status_mut() = StatusCode::from_u16(self.status).unwrap();
        for (name, value) in self.headers {
            response.headers_mut().append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(&value).unwrap(),
            );
        }
        response
    }
}

/// A request as the server saw it: when it arrived, on tokio's clock (paused or not) and on the wall
/// clock.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub at: Instant,
    pub wall: SystemTime,
}

#[derive(Default)]
struct Script {
    replies: HashMap<String, VecDeque<Reply>>,
    arrivals: Vec<(String, Arrival)>,
}

/// Answers a request for `path` from `script`: timestamped when it arrives, before it is answered,
/// so that the time between two arrivals is never more than the client waited in between; then its
/// scripted reply, or a 200.
async fn answer(script: &Mutex<Script>, path: String) -> http::Response<String> {
    let arrival = Arrival {
        at: Instant::now(),
        wall: SystemTime::now(),
    };
    let scripted = {
        let mut script = script.lock().unwrap();
        script.arrivals.push((path.clone(), arrival));
        script.replies.get_mut(&path).and_then(VecDeque::pop_front)
    };
    let reply = scripted.unwrap_or_else(|| reply(200));
    if !reply.after.is_zero() {
        tokio::time::sleep(reply.after).await;
    }
    reply.response()
}

/// A scripted server. Each path is answered from its script, then with 200.
#[derive(Clone)]
pub struct Server {
    base: String,
    script: Arc<Mutex<Script>>,
}

/// The scripts of the in-process servers, by host name.
type InProcess = Mutex<HashMap<String, Arc<Mutex<Script>>>>;

fn in_process() -> &'static InProcess {
    static SERVERS: OnceLock<InProcess> = OnceLock::new();
    SERVERS.get_or_init(InProcess::default)
}

/// The script of the in-process server `url` is for, if it is for one.
fn in_process_script(url: &reqwest::Url) -> Option<Arc<Mutex<Script>>> {
    let servers = in_process().lock().unwrap();
    servers.get(url.host_str()?).map(Arc::clone)
}

impl Server {
    /// An axum server on loopback.
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let script = Arc::new(Mutex::new(Script::default()));
        let app = Router::new()
            .fallback(
                |State(script): State<Arc<Mutex<Script>>>, uri: Uri| async move {
                    answer(&script, uri.path().to_owned()).await
                },
            )
            .with_state(Arc::clone(&script));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { base, script }
    }

    /// A server in process, on a host name of its own: the clients of [`Adapter::client`] answer its
    /// requests from its script without a socket.
    pub fn in_process() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let host = format!(
            "server-{}.in-process.test",
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let script = Arc::new(Mutex::new(Script::default()));
        let servers = &mut in_process().lock().unwrap();
        servers.insert(host.clone(), Arc::clone(&script));
        Self {
            base: format!("http://{host}"),
            script,
        }
    }

    /// Scripts the answers to `path`, and returns its URL.
    pub fn script(&self, path: &str, replies: impl IntoIterator<Item = Reply>) -> String {
        let mut script = self.script.lock().unwrap();
        script
            .replies
            .entry(path.to_owned())
            .or_default()
            .extend(replies);
        self.url(path)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The requests `path` received, in order.
    pub fn arrivals(&self, path: &str) -> Vec<Arrival> {
        let script = self.script.lock().unwrap();
        script
            .arrivals
            .iter()
            .filter(|(seen, _)| seen == path)
            .map(|&(_, arrival)| arrival)
            .collect()
    }

    /// How many requests the server received, on every path.
    pub fn hits(&self) -> usize {
        self.script.lock().unwrap().arrivals.len()
    }

    /// Waits until `path` has received `n` requests.
    pub async fn seen(&self, path: &str, n: usize) {
        while self.arrivals(path).len() < n {
            tokio::time::sleep(ms(2)).await;
        }
    }
}

/// An in-process server's answer to `request`.
async fn answer_in_process(
    script: &Mutex<Script>,
    request: &reqwest::Request,
) -> reqwest::Response {
    reqwest::Response::from(answer(script, request.url().path().to_owned()).await)
}

/// The last link of a middleware client's chain: answers the requests for an in-process server, and
/// sends the others on.
struct InProcessServers;

#[async_trait::async_trait]
impl Middleware for InProcessServers {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        match in_process_script(request.url()) {
            Some(script) => Ok(answer_in_process(&script, &request).await),
            None => next.run(request, extensions).await,
        }
    }
}

/// The service under a `RetryLayer`: a `reqwest::Client`, which answers the requests for an
/// in-process server itself.
#[derive(Clone)]
pub struct Transport(reqwest::Client);

type Sent = Pin<Box<dyn Future<Output = Result<reqwest::Response, reqwest::Error>> + Send>>;

impl tower::Service<reqwest::Request> for Transport {
    type Response = reqwest::Response;
    type Error = reqwest::Error;
    type Future = Sent;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), reqwest::Error>> {
        // As `reqwest::Client`'s own `poll_ready`: always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: reqwest::Request) -> Sent {
        match in_process_script(request.url()) {
            Some(script) => Box::pin(async move { Ok(answer_in_process(&script, &request).await) }),
            None => Box::pin(self.0.execute(request)),
        }
    }
}

/// The two adapters a reqwest user has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    /// `RetryMiddleware` in a `reqwest_middleware::ClientWithMiddleware`.
    Middleware,
    /// `RetryLayer` over `reqwest::Client`, a `tower::Service<reqwest::Request>`.
    Layer,
}

impl Adapter {
    /// A client retrying with `policy`, over a fresh `reqwest::Client`.
    pub fn client(self, policy: RetryPolicy) -> Client {
        // A proxy from the environment must not stand between the client and the loopback server.
        let reqwest = reqwest::Client::builder().no_proxy().build().unwrap();
        match self {
            Self::Middleware => Client::Middleware(
                ClientBuilder::new(reqwest)
                    .with(RetryMiddleware::new(policy))
                    .with(InProcessServers)
                    .build(),
            ),
            Self::Layer => Client::Layer(RetryLayer::new(policy).layer(Transport(reqwest))),
        }
    }
}

/// Runs `test` once through each adapter, at the same time, each on a thread and a current-thread
/// runtime of its own: the waits overlap, and `common::capture` sees one adapter's events per thread.
pub fn both<F, Fut>(test: F)
where
    F: Fn(Adapter) -> Fut + Sync,
    Fut: Future<Output = ()>,
{
    run_both(false, test);
}

/// [`both`] on tokio's paused clock, for in-process servers: the clock moves only when every task
/// waits on it, straight to the next timer.
pub fn both_paused<F, Fut>(test: F)
where
    F: Fn(Adapter) -> Fut + Sync,
    Fut: Future<Output = ()>,
{
    run_both(true, test);
}

fn run_both<F, Fut>(paused: bool, test: F)
where
    F: Fn(Adapter) -> Fut + Sync,
    Fut: Future<Output = ()>,
{
    // Named after the test and the adapter, for the panic messages.
    let name = std::thread::current().name().unwrap_or("test").to_owned();
    std::thread::scope(|scope| {
        let runs = [Adapter::Middleware, Adapter::Layer].map(|adapter| {
            let test = &test;
            std::thread::Builder::new()
                .name(format!("{name}/{adapter:?}"))
                .spawn_scoped(scope, move || {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .start_paused(paused)
                        .build()
                        .unwrap()
                        .block_on(test(adapter));
                })
                .unwrap()
        });
        for run in runs {
            if let Err(panic) = run.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

/// A retrying client; clones share its policy, and so its retry budget and its hosts' pauses.
#[derive(Clone)]
pub enum Client {
    Middleware(ClientWithMiddleware),
    Layer(stagger::tower::Retry<Transport>),
}

/// How a call ended without a response.
#[derive(Debug)]
pub enum Failure {
    /// Not sent: the host is cooling down.
    Rejected(Rejected),
    Other(String),
}

impl Client {
    /// A GET of `url`.
    pub async fn get(&self, url: &str) -> Result<reqwest::Response, Failure> {
        match self {
            Self::Middleware(client) => {
                let report = RetryReport::default();
                let sent = client.get(url).with_extension(report.clone()).send();
                sent.await.map_err(|error| {
                    let rejected = match &error {
                        reqwest_middleware::Error::Middleware(e) => e.downcast_ref::<Rejected>(),
                        reqwest_middleware::Error::Reqwest(_) => None,
                    };
                    if let Some(rejected) = rejected {
                        // The report says what the retries did, as the rejection does.
                        assert_eq!(report.get(), Some(rejected.info()));
                    }
                    rejected.map_or_else(
                        || Failure::Other(error.to_string()),
                        |r| Failure::Rejected(r.clone()),
                    )
                })
            }
            Self::Layer(service) => {
                let request = reqwest::Request::new(reqwest::Method::GET, url.parse().unwrap());
                service.clone().oneshot(request).await.map_err(|error| {
                    let rejected = error.rejected().cloned();
                    if let Some(rejected) = &rejected {
                        // The error says what the retries did, as the rejection does.
                        assert_eq!(error.info(), rejected.info());
                    }
                    rejected.map_or_else(|| Failure::Other(error.to_string()), Failure::Rejected)
                })
            }
        }
    }
}

pub fn info(response: &reqwest::Response) -> RetryInfo {
    response
        .extensions()
        .get::<RetryInfo>()
        .expect("the final response carries RetryInfo")
        .clone()
}

/// Records every retry a policy decides.
#[derive(Clone, Default)]
pub struct Retries(Arc<Mutex<Vec<RetryEvent>>>);

impl Retries {
    pub fn hook(&self) -> impl Fn(&RetryEvent) + Send + Sync + 'static {
        let events = Arc::clone(&self.0);
        move |event| events.lock().unwrap().push(*event)
    }

    pub fn all(&self) -> Vec<RetryEvent> {
        self.0.lock().unwrap().clone()
    }

    /// Waits until `n` retries were decided.
    pub async fn reach(&self, n: usize) {
        while self.0.lock().unwrap().len() < n {
            tokio::time::sleep(ms(2)).await;
        }
    }
}

/// Asserts that `elapsed` is at least `at_least` and under `under`.
#[track_caller]
pub fn took(adapter: Adapter, what: &str, elapsed: Duration, at_least: Duration, under: Duration) {
    assert!(
        elapsed >= at_least && elapsed < under,
        "{adapter:?}: {what} took {elapsed:?}, expected [{at_least:?}, {under:?})"
    );
}
