//! [`Script`]: a wiremock responder that answers in order and says when each request arrived
//! (feature `wiremock`).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ::wiremock::{Request, Respond, ResponseTemplate};
use http::StatusCode;

/// A wiremock responder that gives its answers in order, the last one again for every request after
/// it, and keeps when each request arrived: a test says what the server does ("`503` twice, then
/// `200`") and checks what the client did (how many attempts, how far apart).
///
/// Clones share the script and the arrivals: mount one, keep one.
///
/// ```
/// # #[cfg(feature = "reqwest-middleware")]
/// # #[tokio::main]
/// # async fn main() {
/// use std::time::Duration;
/// use reqwest_middleware::ClientBuilder;
/// use stagger::wiremock::Script;
/// use stagger::{Backoff, RetryMiddleware, RetryPolicy};
/// use wiremock::matchers::path;
/// use wiremock::{Mock, MockServer, ResponseTemplate};
///
/// let server = MockServer::start().await;
/// // 429 asking for a second, then 200.
/// let script = Script::new(ResponseTemplate::new(429).insert_header("retry-after", "1"))
///     .then(ResponseTemplate::new(200));
/// Mock::given(path("/prices")).respond_with(script.clone()).mount(&server).await;
///
/// let policy = RetryPolicy::builder().backoff(Backoff::fixed(Duration::from_millis(10))).build().unwrap();
/// let client = ClientBuilder::new(reqwest::Client::new()).with(RetryMiddleware::new(policy)).build();
/// let response = client.get(format!("{}/prices", server.uri())).send().await.unwrap();
///
/// assert_eq!(response.status(), 200);
/// assert_eq!(script.received(), 2);
/// assert!(script.gaps()[0] >= Duration::from_secs(1)); // the client waited out Retry-After
/// # }
/// # #[cfg(not(feature = "reqwest-middleware"))]
/// # fn main() {}
/// ```
///
/// The arrivals are on the wall clock ([`std::time::Instant`]): the mock server runs on a thread and a
/// runtime of its own, which a test's paused tokio clock does not reach. A test against a real socket
/// runs in real time (`docs/testing.md` says why), so make its delays short, or assert on the
/// [`RetryInfo`](crate::RetryInfo) the client reports.
#[derive(Clone)]
pub struct Script {
    shared: Arc<Mutex<Shared>>,
}

struct Shared {
    answers: Vec<ResponseTemplate>,
    arrivals: Vec<Arrival>,
}

/// One request as the [`Script`] received it: when, and what.
#[derive(Debug, Clone)]
pub struct Arrival {
    at: Instant,
    request: Request,
}

impl Arrival {
    /// When it arrived, on the wall clock.
    pub const fn at(&self) -> Instant {
        self.at
    }

    /// The request, as wiremock received it: method, URL, headers and body.
    pub const fn request(&self) -> &Request {
        &self.request
    }
}

impl Script {
    /// A script whose first answer is `first`.
    pub fn new(first: ResponseTemplate) -> Self {
        Self {
            shared: Arc::new(Mutex::new(Shared {
                answers: vec![first],
                arrivals: Vec::new(),
            })),
        }
    }

    /// A script answering with these statuses in order, empty bodies, the last one again after
    /// them. An empty list does not compile: a script has a last answer.
    ///
    /// ```
    /// use http::StatusCode;
    /// use stagger::wiremock::Script;
    ///
    /// // "503 twice, then 200".
    /// let script = Script::statuses([
    ///     StatusCode::SERVICE_UNAVAILABLE,
    ///     StatusCode::SERVICE_UNAVAILABLE,
    ///     StatusCode::OK,
    /// ]);
    /// assert_eq!(script.received(), 0);
    /// ```
    pub fn statuses<const N: usize>(statuses: [StatusCode; N]) -> Self {
        const { assert!(N > 0, "a script needs at least one answer") };
        let mut answers = statuses
            .into_iter()
            .map(|s| ResponseTemplate::new(s.as_u16()));
        let first = answers.next().unwrap_or_else(|| ResponseTemplate::new(200));
        answers.fold(Self::new(first), Self::then)
    }

    /// The next answer, after those given so far.
    pub fn then(self, next: ResponseTemplate) -> Self {
        self.lock().answers.push(next);
        self
    }

    /// Every request received so far, in the order they arrived.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.lock().arrivals.clone()
    }

    /// How many requests it has received.
    pub fn received(&self) -> usize {
        self.lock().arrivals.len()
    }

    /// The time between each request and the next: what a retrying client waited, with its
    /// attempt's round trip.
    pub fn gaps(&self) -> Vec<Duration> {
        let shared = self.lock();
        (shared.arrivals.windows(2))
            .map(|pair| pair[1].at.saturating_duration_since(pair[0].at))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Shared> {
        // A panic while it was held (in a test's thread) leaves the script as it was.
        self.shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Respond for Script {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let at = Instant::now();
        let mut shared = self.lock();
        let next = (shared.arrivals.len()).min(shared.answers.len().saturating_sub(1));
        shared.arrivals.push(Arrival {
            at,
            request: request.clone(),
        });
        shared.answers[next].clone()
    }
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = self.lock();
        f.debug_struct("Script")
            .field("answers", &shared.answers.len())
            .field("received", &shared.arrivals.len())
            .finish()
    }
}
