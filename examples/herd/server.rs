//! The server's logic, without I/O: an outage, then a token bucket.

use std::time::Duration;

use http::header::RETRY_AFTER;
use http::{HeaderValue, Response, StatusCode};

use crate::sim::Model;

/// How long the server answers `503` to everything.
pub(crate) const OUTAGE: Duration = Duration::from_millis(500);
/// The width of the buckets in which attempts are counted.
pub(crate) const BUCKET: Duration = Duration::from_millis(10);
/// The server's `Retry-After` during the outage, in the second herd.
pub(crate) const RETRY_AFTER_SECONDS: &str = "1";

/// What a server does after the outage, and whether it sends `Retry-After` during it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerConfig {
    /// Requests admitted per second after the outage.
    pub(crate) rate: f64,
    /// Requests admitted at once, on top of the rate.
    pub(crate) burst: f64,
    /// Whether the outage's `503`s carry `Retry-After`.
    pub(crate) retry_after: bool,
}

impl ServerConfig {
    pub(crate) fn capacity_per_bucket(&self) -> f64 {
        self.rate * BUCKET.as_secs_f64()
    }
}

/// The server's logic, without I/O: the outage, then a token bucket. It counts every attempt it sees.
pub(crate) struct Server {
    config: ServerConfig,
    tokens: f64,
    refilled: Duration,
    /// Attempts seen per `BUCKET` since the start.
    pub(crate) arrivals: Vec<u32>,
}

/// What the server answers one request.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Answer {
    Ok,
    Unavailable { retry_after: bool },
}

impl Server {
    pub(crate) fn new(config: ServerConfig) -> Self {
        Self {
            config,
            tokens: config.burst,
            refilled: OUTAGE,
            arrivals: Vec::new(),
        }
    }

    /// Answers a request arriving `now` after the start.
    pub(crate) fn answer(&mut self, now: Duration) -> Answer {
        let bucket = (now.as_nanos() / BUCKET.as_nanos()) as usize;
        if self.arrivals.len() <= bucket {
            self.arrivals.resize(bucket + 1, 0);
        }
        self.arrivals[bucket] += 1;
        if now < OUTAGE {
            return Answer::Unavailable {
                retry_after: self.config.retry_after,
            };
        }
        // `saturating_sub` and `max`: over real sockets, requests may be answered slightly out of order.
        let earned = now.saturating_sub(self.refilled).as_secs_f64() * self.config.rate;
        self.tokens = (self.tokens + earned).min(self.config.burst);
        self.refilled = self.refilled.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Answer::Ok
        } else {
            Answer::Unavailable { retry_after: false }
        }
    }
}

impl Answer {
    pub(crate) fn to_response<B: Default>(self) -> Response<B> {
        let mut response = Response::new(B::default());
        if let Answer::Unavailable { retry_after } = self {
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            if retry_after {
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from_static(RETRY_AFTER_SECONDS));
            }
        }
        response
    }
}

impl Model for Server {
    type Answer = Answer;

    fn answer(&mut self, now: Duration) -> Answer {
        Server::answer(self, now)
    }

    fn respond(answer: Answer) -> Response<()> {
        answer.to_response()
    }
}
