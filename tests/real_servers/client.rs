//! The two ways a reqwest user takes stagger — `RetryMiddleware` in reqwest-middleware's client, and
//! `RetryLayer` over `reqwest::Client` — behind one [`Client`], so that every scenario runs through both.
//!
//! It mirrors `tests/common/loopback.rs`, which sends only GETs and keeps a failure's text: these
//! scenarios send any method with headers and streaming bodies, over a `reqwest::Client` configured by
//! the test (a connect timeout), and read a failure's error as the caller gets it (`is_connect()`, a
//! `stagger::Elapsed`) and its `RetryInfo`.

use std::fmt;
use std::time::{Duration, Instant};

use http::Extensions;
use reqwest_middleware::ClientBuilder;
use stagger::{Elapsed, Rejected, RetryInfo, RetryLayer, RetryMiddleware, RetryPolicy, StopReason};
use tower::{Layer, ServiceExt};

/// The two adapters a reqwest user has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adapter {
    /// `RetryMiddleware` in a `reqwest_middleware::ClientWithMiddleware`.
    Middleware,
    /// `RetryLayer` over `reqwest::Client`, a `tower::Service<reqwest::Request>`.
    Layer,
}

impl Adapter {
    pub const BOTH: [Self; 2] = [Self::Middleware, Self::Layer];

    /// A client retrying with `policy` over a default `reqwest::Client`.
    pub fn client(self, policy: RetryPolicy) -> Client {
        self.client_over(reqwest::Client::builder(), policy)
    }

    /// A client retrying with `policy` over the `reqwest::Client` that `builder` makes.
    pub fn client_over(self, builder: reqwest::ClientBuilder, policy: RetryPolicy) -> Client {
        // A proxy from the environment must not stand between the client and the test's servers.
        let reqwest = builder.no_proxy().build().unwrap();
        let retrying = match self {
            Self::Middleware => Retrying::Middleware(
                ClientBuilder::new(reqwest.clone())
                    .with(RetryMiddleware::new(policy))
                    .build(),
            ),
            Self::Layer => Retrying::Layer(RetryLayer::new(policy).layer(reqwest.clone())),
        };
        Client { reqwest, retrying }
    }
}

/// A retrying client; clones share its policy, and so its retry budget and its hosts' pauses.
#[derive(Clone)]
pub struct Client {
    /// Builds the requests, which either adapter sends.
    reqwest: reqwest::Client,
    retrying: Retrying,
}

#[derive(Clone)]
enum Retrying {
    Middleware(reqwest_middleware::ClientWithMiddleware),
    Layer(stagger::tower::Retry<reqwest::Client>),
}

impl Client {
    /// A request to build, then to [`send`](Self::send).
    pub fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        self.reqwest.request(method, url)
    }

    /// Sends `request` through the adapter: what the call ended with, what the retries did, and how
    /// long the call took (to its response's head).
    pub async fn send(&self, request: reqwest::RequestBuilder) -> Call {
        let request = request.build().expect("a request the test built");
        let start = Instant::now();
        let (result, info) = match &self.retrying {
            Retrying::Middleware(client) => {
                let mut extensions = Extensions::new();
                let result = client
                    .execute_with_extensions(request, &mut extensions)
                    .await;
                // A response carries its RetryInfo; for an error, the request's extensions do.
                let info = match &result {
                    Ok(response) => Some(RetryInfo::of(response.extensions())),
                    Err(_) => extensions.get::<RetryInfo>().cloned(),
                };
                (result.map_err(CallError::Middleware), info)
            }
            Retrying::Layer(service) => {
                let result = service.clone().oneshot(request).await;
                let info = match &result {
                    Ok(response) => Some(RetryInfo::of(response.extensions())),
                    Err(error) => Some(error.info()),
                };
                (result.map_err(CallError::Layer), info)
            }
        };
        Call {
            result,
            info: info.expect("every outcome says what the retries did"),
            took: start.elapsed(),
        }
    }
}

/// What one call ended with.
#[derive(Debug)]
pub struct Call {
    pub result: Result<reqwest::Response, CallError>,
    pub info: RetryInfo,
    pub took: Duration,
}

impl Call {
    /// The response's status, if there is a response.
    pub fn status(&self) -> Option<u16> {
        self.result.as_ref().ok().map(|r| r.status().as_u16())
    }

    pub fn stop_reason(&self) -> StopReason {
        self.info
            .stop_reason()
            .expect("a finished call says why its retries stopped")
    }

    /// One line: the status or the error, the attempts, why they stopped, how long it took.
    pub fn summary(&self) -> String {
        let ended = match &self.result {
            Ok(response) => response.status().as_u16().to_string(),
            Err(error) => error.to_string(),
        };
        format!(
            "{ended}, {} attempt(s), {}, {:?}",
            self.info.attempts(),
            self.stop_reason(),
            self.took
        )
    }
}

/// How a call ended without a response, as each adapter gives it to its caller.
#[derive(Debug)]
pub enum CallError {
    Middleware(reqwest_middleware::Error),
    Layer(stagger::Error<reqwest::Error>),
}

impl CallError {
    /// The reqwest error, when the last attempt ended with one.
    pub fn reqwest(&self) -> Option<&reqwest::Error> {
        match self {
            Self::Middleware(reqwest_middleware::Error::Reqwest(error)) => Some(error),
            Self::Middleware(reqwest_middleware::Error::Middleware(_)) => None,
            Self::Layer(error) => error.inner(),
        }
    }

    /// The time limit that ended the call, when one did: the middleware's `stagger::Elapsed`, or the
    /// layer's `stagger::Error` that says so.
    pub fn elapsed(&self) -> Option<Elapsed> {
        match self {
            Self::Middleware(reqwest_middleware::Error::Middleware(error)) => {
                error.downcast_ref::<Elapsed>().cloned()
            }
            Self::Middleware(reqwest_middleware::Error::Reqwest(_)) => None,
            Self::Layer(error) => error.elapsed().cloned(),
        }
    }

    /// The policy's refusal to send the request, when it did not send it (a host found down by the
    /// breaker, say): `reqwest_middleware::Error::Middleware` holding a `stagger::Rejected` through
    /// the middleware, `stagger::Error::rejected()` through the layer.
    pub fn rejected(&self) -> Option<&Rejected> {
        match self {
            Self::Middleware(reqwest_middleware::Error::Middleware(error)) => error.downcast_ref(),
            Self::Middleware(reqwest_middleware::Error::Reqwest(_)) => None,
            Self::Layer(error) => error.rejected(),
        }
    }

    /// Whether the deadline (`max_elapsed`) ended the call: `stagger::Error::is_deadline()` through
    /// the layer, a `stagger::Elapsed` for the deadline through the middleware.
    pub fn is_deadline(&self) -> bool {
        match self {
            Self::Layer(error) => error.is_deadline(),
            Self::Middleware(_) => self.elapsed().is_some_and(|e| e.is_deadline()),
        }
    }

    /// Whether the last attempt ran past `attempt_timeout`.
    pub fn is_attempt_timeout(&self) -> bool {
        match self {
            Self::Layer(error) => error.is_attempt_timeout(),
            Self::Middleware(_) => self.elapsed().is_some_and(|e| e.is_attempt_timeout()),
        }
    }

    /// The error and every cause under it, for messages.
    pub fn chain(&self) -> String {
        match self {
            Self::Middleware(error) => causes(error),
            Self::Layer(error) => causes(error),
        }
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Middleware(error) => write!(f, "{error}"),
            Self::Layer(error) => write!(f, "{error}"),
        }
    }
}

/// The causes of `error`, outermost first, for messages.
pub fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(error) = source {
        text.push_str(&format!(" <- {error}"));
        source = error.source();
    }
    text
}
