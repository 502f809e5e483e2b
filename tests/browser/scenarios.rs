//! The scenarios of the browser suite, written once: `tests/browser.rs` runs them in headless Chromium
//! (reqwest's wasm client, which is `fetch`), `tests/browser_native.rs` on the native client, both
//! against `tests/browser/server.py`. Each asserts on what reached the server (its log: when each
//! request arrived, when the client closed a connection it held) and on the call's `RetryInfo` (its
//! `RetryReport`, which both clients fill: the browser's response has no extensions); the same
//! assertions on both clients are the claim that the browser keeps the native rules.

use std::time::Duration;

use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use stagger::{
    Backoff, Breaker, HostState, RetryAfterMode, RetryBudget, RetryInfo, RetryMiddleware,
    RetryPolicy, RetryReport, StopReason,
};

/// The scripted server, by its origin (`http://127.0.0.1:<port>`).
pub struct Server {
    origin: String,
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub method: String,
    pub step: String,
    /// When it arrived, on the server's clock.
    pub at: Duration,
    /// When the client closed the connection the server held unanswered (a `hang` step).
    pub closed: Option<Duration>,
}

impl Server {
    pub fn new(origin: &str) -> Self {
        Self {
            origin: origin.trim_end_matches('/').to_owned(),
        }
    }

    /// The address of scenario `key`, answered by `script` (see server.py).
    fn url(&self, key: &str, script: &str) -> String {
        format!("{}/s/{key}?script={script}", self.origin)
    }

    /// What the server saw of `key`, preflights included.
    pub async fn log(&self, key: &str) -> Vec<Arrival> {
        let text = plain()
            .get(format!("{}/log/{key}", self.origin))
            .send()
            .await
            .expect("the server's log")
            .text()
            .await
            .expect("the server's log");
        text.lines()
            .map(|line| {
                let fields: Vec<&str> = line.split(' ').collect();
                let ms = |field: &str| Duration::from_secs_f64(field.parse::<f64>().unwrap() / 1e3);
                Arrival {
                    method: fields[0].to_owned(),
                    step: fields[1].to_owned(),
                    at: ms(fields[2]),
                    closed: (fields[3] != "-").then(|| ms(fields[3])),
                }
            })
            .collect()
    }

    /// The requests of `key` the server saw, preflights left out.
    pub async fn arrivals(&self, key: &str) -> Vec<Arrival> {
        let mut log = self.log(key).await;
        log.retain(|arrival| arrival.method != "OPTIONS");
        log
    }

    /// [`arrivals`](Self::arrivals), once the server has seen the client close every connection it
    /// held (it looks every 50 ms): asked again every 50 ms, on stagger's own timer, for up to 2 s.
    pub async fn settled_arrivals(&self, key: &str) -> Vec<Arrival> {
        let policy = RetryPolicy::builder()
            .backoff(Backoff::fixed(Duration::from_millis(50)))
            .max_retries(40)
            .budget(None)
            .build()
            .unwrap();
        let unsettled = |log: &Vec<Arrival>| {
            log.iter()
                .any(|arrival| arrival.step == "hang" && arrival.closed.is_none())
        };
        let settled = stagger::retry(
            &policy,
            || async { Ok::<_, ()>(self.arrivals(key).await) },
            |log| match log {
                Ok(log) if unsettled(log) => {
                    stagger::Outcome::RetrySafe(stagger::Reason::Other("held"))
                }
                _ => stagger::Outcome::Success,
            },
        )
        .await;
        settled.expect("the log is always read")
    }

    /// A port that refuses connections for `after`, then answers as the server does.
    async fn later(&self, after: Duration) -> u16 {
        let url = format!("{}/later?after_ms={}", self.origin, after.as_millis());
        port(plain().get(url).send().await.expect("a port").text().await)
    }

    /// A port that refuses every connection.
    async fn refusing(&self) -> u16 {
        let url = format!("{}/refusing", self.origin);
        port(plain().get(url).send().await.expect("a port").text().await)
    }
}

fn port(text: reqwest::Result<String>) -> u16 {
    text.expect("a port").trim().parse().expect("a port number")
}

/// A client without retries, to talk to the server's own endpoints.
fn plain() -> reqwest::Client {
    reqwest_client()
}

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
fn reqwest_client() -> reqwest::Client {
    // No proxy from the environment between the client and the loopback server.
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a client")
}

#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
fn reqwest_client() -> reqwest::Client {
    reqwest::Client::new()
}

/// A client that retries under `policy`.
fn client(policy: RetryPolicy) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest_client())
        .with(RetryMiddleware::new(policy))
        .build()
}

/// A quick backoff for the scenarios that do not test it: 50 ms between attempts.
fn quick() -> stagger::RetryPolicyBuilder {
    RetryPolicy::builder().backoff(Backoff::fixed(Duration::from_millis(50)))
}

/// `(attempts, stop reason)` of a report.
fn outcome(report: &RetryReport) -> (u32, Option<StopReason>) {
    let info: RetryInfo = report.get().expect("the call's RetryInfo");
    (info.attempts(), info.stop_reason())
}

/// A `503` and then a `200`: the call ends `200`, after 2 attempts, and the server saw both.
pub async fn a_503_then_200_ends_200_after_2_attempts(server: &Server) {
    let key = "503-then-200";
    let report = RetryReport::new();
    let response = client(quick().build().unwrap())
        .get(server.url(key, "503,200"))
        .with_extension(report.clone())
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), 200);
    assert_eq!(outcome(&report), (2, Some(StopReason::Success)));
    let seen = server.arrivals(key).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (seen[0].step.as_str(), seen[1].step.as_str()),
        ("503", "200")
    );
}

/// `Retry-After: 1` is a floor: the retry reaches the server a second after the `503` at least,
/// where the backoff alone would have sent it after 50 ms. (Were `Retry-After` not exposed by CORS,
/// the page would not see it, and the retry would come early.)
pub async fn retry_after_1_is_waited_as_a_floor(server: &Server) {
    let key = "retry-after-1";
    let report = RetryReport::new();
    let response = client(quick().build().unwrap())
        .get(server.url(key, "503ra1,200"))
        .with_extension(report.clone())
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), 200);
    assert_eq!(outcome(&report), (2, Some(StopReason::Success)));
    let seen = server.arrivals(key).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    let gap = seen[1].at - seen[0].at;
    // The floor, and the spread after it: at most max(c(1), 1 s) more (the default RetryAfterMode).
    assert!(
        gap >= Duration::from_secs(1),
        "the retry came {gap:?} after the 503"
    );
    assert!(
        gap < Duration::from_millis(2500),
        "the retry came {gap:?} after the 503"
    );
    assert!(report.get().unwrap().slept() >= Duration::from_secs(1));
}

/// `Retry-After` as an HTTP date, 3 s ahead at the server (so 2 to 3 s after the answer, the date
/// having whole seconds): read against the wall clock, which in the browser is `Date.now()`.
pub async fn retry_after_as_an_http_date_is_waited(server: &Server) {
    let key = "retry-after-date";
    let report = RetryReport::new();
    let policy = quick().retry_after(RetryAfterMode::Strict).build().unwrap();
    let response = client(policy)
        .get(server.url(key, "503date3,200"))
        .with_extension(report.clone())
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), 200);
    assert_eq!(outcome(&report), (2, Some(StopReason::Success)));
    let seen = server.arrivals(key).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    let gap = seen[1].at - seen[0].at;
    assert!(
        gap >= Duration::from_millis(1500),
        "the retry came {gap:?} after the 503"
    );
    assert!(
        gap < Duration::from_secs(4),
        "the retry came {gap:?} after the 503"
    );
}

/// A `POST` without an `Idempotency-Key` whose connection closes unanswered (the server read it,
/// and may have acted): not retried. The server saw it once.
pub async fn a_post_without_a_key_is_not_retried_after_an_ambiguous_failure(server: &Server) {
    let key = "post-no-key";
    let report = RetryReport::new();
    let result = client(quick().build().unwrap())
        .post(server.url(key, "close,200"))
        .body("order=1")
        .with_extension(report.clone())
        .send()
        .await;
    assert!(result.is_err(), "{result:?}");
    assert_eq!(outcome(&report), (1, Some(StopReason::NotIdempotent)));
    let seen = server.arrivals(key).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        (seen[0].method.as_str(), seen[0].step.as_str()),
        ("POST", "close")
    );
}

/// The same `POST` with an `Idempotency-Key` (a header the browser asks the server about first, in
/// a preflight, which the server answers): retried, and answered `200`.
pub async fn a_post_with_a_key_is_retried_after_an_ambiguous_failure(server: &Server) {
    let key = "post-with-key";
    let report = RetryReport::new();
    let response = client(quick().build().unwrap())
        .post(server.url(key, "close,200"))
        .header("idempotency-key", "order-1")
        .body("order=1")
        .with_extension(report.clone())
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), 200);
    assert_eq!(outcome(&report), (2, Some(StopReason::Success)));
    let seen = server.arrivals(key).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen.iter().all(|arrival| arrival.method == "POST"));
}

/// A server that holds its answer: the attempt timeout (500 ms) ends the attempt, which closes its
/// connection (in the browser, the `fetch` aborted), and the retry is answered.
pub async fn a_hanging_answer_is_cut_by_the_attempt_timeout_and_retried(server: &Server) {
    let key = "hang-then-200";
    let report = RetryReport::new();
    let policy = quick()
        .attempt_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let response = client(policy)
        .get(server.url(key, "hang,200"))
        .with_extension(report.clone())
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), 200);
    assert_eq!(outcome(&report), (2, Some(StopReason::Success)));
    let seen = server.settled_arrivals(key).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    let held = seen[0]
        .closed
        .expect("the client closed the held connection")
        - seen[0].at;
    assert!(held >= Duration::from_millis(400), "closed after {held:?}");
    assert!(held < Duration::from_secs(3), "closed after {held:?}");
    assert!(seen[1].at - seen[0].at >= Duration::from_millis(500));
}

/// A port that refuses connections for 600 ms and then listens: the `GET` is retried through the
/// refusals and answered `200`, the server seeing the one attempt that connected.
pub async fn a_refused_connection_is_retried(server: &Server) {
    let key = "refused-then-up";
    let port = server.later(Duration::from_millis(600)).await;
    let report = RetryReport::new();
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(100)))
        .max_retries(30)
        .breaker(None)
        .build()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/s/{key}?script=200");
    let response = client(policy)
        .get(url)
        .with_extension(report.clone())
        .send()
        .await
        .expect("a response");
    assert_eq!(response.status(), 200);
    let (attempts, stop) = outcome(&report);
    assert!(attempts >= 3, "{attempts} attempts");
    assert_eq!(stop, Some(StopReason::Success));
    assert_eq!(server.arrivals(key).await.len(), 1);
}

/// The deadline ends the call: a server that never answers, a deadline of 1 s and no attempt
/// timeout: the call ends with the deadline's error after one attempt, whose connection the client
/// closed at the deadline.
pub async fn the_deadline_ends_the_call(server: &Server) {
    let key = "deadline";
    let report = RetryReport::new();
    let policy = quick()
        .max_elapsed(Duration::from_secs(1))
        .attempt_timeout(None)
        .build()
        .unwrap();
    let result = client(policy)
        .get(server.url(key, "hang"))
        .with_extension(report.clone())
        .send()
        .await;
    let error = result.expect_err("the deadline's error");
    let elapsed = match &error {
        reqwest_middleware::Error::Middleware(error) => error.downcast_ref::<stagger::Elapsed>(),
        reqwest_middleware::Error::Reqwest(_) => None,
    };
    assert!(
        elapsed.is_some_and(stagger::Elapsed::is_deadline),
        "{error:?}"
    );
    assert_eq!(outcome(&report), (1, Some(StopReason::Deadline)));
    let seen = server.settled_arrivals(key).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    let held = seen[0]
        .closed
        .expect("the client closed the held connection")
        - seen[0].at;
    assert!(held >= Duration::from_millis(800), "closed after {held:?}");
    assert!(held < Duration::from_secs(3), "closed after {held:?}");
}

/// A retry budget of one retry: a server answering `503` forever gets 2 attempts, and the budget
/// stops the call with the last `503`.
pub async fn the_budget_stops_the_retries(server: &Server) {
    let key = "budget";
    let report = RetryReport::new();
    let budget = RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(1)
        .window(Duration::from_secs(1))
        .own_starting_credit(true)
        .build()
        .unwrap();
    let policy = quick().budget(budget).build().unwrap();
    let response = client(policy)
        .get(server.url(key, "503"))
        .with_extension(report.clone())
        .send()
        .await
        .expect("the last 503");
    assert_eq!(response.status(), 503);
    assert_eq!(outcome(&report), (2, Some(StopReason::Budget)));
    assert_eq!(server.arrivals(key).await.len(), 2);
}

/// The breaker (failing fast, after 3 failures in a row): a port that refuses every connection is
/// found down within the first call, which ends there; the next call to it fails at once, unsent.
pub async fn the_breaker_finds_a_refusing_host_down(server: &Server) {
    let port = server.refusing().await;
    let policy = quick()
        .breaker(Breaker::fail_fast().with_failures(3))
        .max_retries(10)
        .build()
        .unwrap();
    let client = client(policy.clone());
    let url = format!("http://127.0.0.1:{port}/");
    let first = RetryReport::new();
    let result = client.get(&url).with_extension(first.clone()).send().await;
    assert!(result.is_err());
    assert_eq!(outcome(&first), (3, Some(StopReason::HostDown)));
    let host = format!("127.0.0.1:{port}");
    assert!(
        matches!(policy.host_state(&host), HostState::Down { .. }),
        "{:?}",
        policy.host_state(&host)
    );
    let second = RetryReport::new();
    let result = client.get(&url).with_extension(second.clone()).send().await;
    assert!(result.is_err());
    assert_eq!(outcome(&second), (0, Some(StopReason::HostDown)));
}

/// The host cooldown: a `429` with `Retry-After: 1` (not retried: `max_retries(0)`) pauses its host,
/// and the next call to it waits that second out before it is sent, measured at the server.
pub async fn the_host_cooldown_holds_the_next_call(server: &Server) {
    let key = "cooldown";
    let policy = quick().host_cooldown(true).max_retries(0).build().unwrap();
    let client = client(policy);
    let first = client
        .get(server.url(key, "429ra1,200"))
        .send()
        .await
        .expect("the 429");
    assert_eq!(first.status(), 429);
    let report = RetryReport::new();
    let second = client
        .get(server.url(key, "429ra1,200"))
        .with_extension(report.clone())
        .send()
        .await
        .expect("the 200");
    assert_eq!(second.status(), 200);
    let info = report.get().unwrap();
    assert_eq!(
        (info.attempts(), info.stop_reason()),
        (1, Some(StopReason::Success))
    );
    assert!(info.cooldown() >= Duration::from_millis(800), "{info:?}");
    let seen = server.arrivals(key).await;
    assert_eq!(seen.len(), 2, "{seen:?}");
    let gap = seen[1].at - seen[0].at;
    assert!(
        gap >= Duration::from_millis(900),
        "the second call came {gap:?} after the 429"
    );
}

/// `stagger::retry` over any async operation, here a plain `reqwest` request judged by its status: a
/// `503` is retried, after a jittered delay drawn from a seed of the platform's randomness (two
/// policies draw two seeds: in the browser, `crypto.getRandomValues()`; a fixed fallback would give
/// both the same).
pub async fn stagger_retry_retries_an_async_operation(server: &Server) {
    let key = "stagger-retry";
    let policy = RetryPolicy::builder()
        .backoff(Backoff::exponential(Duration::from_millis(50)))
        .build()
        .unwrap();
    let seed = |policy: &RetryPolicy| {
        let shown = format!("{policy:?}");
        let (_, seed) = shown.split_once("seed: ").expect("the policy's seed");
        seed.split([',', ' ', '}']).next().unwrap().to_owned()
    };
    assert_ne!(seed(&policy), seed(&RetryPolicy::default()));
    let url = server.url(key, "503,503,200");
    let response = stagger::retry(
        &policy,
        || plain().get(&url).send(),
        |result| match result {
            Ok(response) if response.status() == 503 => {
                stagger::Outcome::RetrySafe(stagger::Reason::Status(response.status()))
            }
            Ok(_) => stagger::Outcome::Success,
            Err(_) => stagger::Outcome::Fatal,
        },
    )
    .await
    .expect("a response");
    assert_eq!(response.status(), 200);
    let seen = server.arrivals(key).await;
    assert_eq!(seen.len(), 3, "{seen:?}");
}
