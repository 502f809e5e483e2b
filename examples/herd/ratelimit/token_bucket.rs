//! The first rate-limited server: a token bucket that refuses with `429` and the headers a rate limiter
//! sends.

use std::time::Duration;

use http::header::RETRY_AFTER;
use http::{HeaderName, HeaderValue, Response, StatusCode};

use super::RateLimiter;
use super::figures::Answers;
use crate::sim::Model;

const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// A quota of `quota` requests per second, kept as a token bucket `depth` tokens deep, full at the
/// start. It answers at once: `200` while a token is left, `429` when none is.
///
/// Every answer carries the IETF rate-limit headers (draft-ietf-httpapi-ratelimit-headers):
/// `RateLimit-Policy: "default";q=<quota>;w=1`, and `RateLimit: "default";r=<whole tokens left>;t=<whole
/// seconds until the bucket is full>` on a `200`. A `429` says when enough tokens for one request will
/// be back, in whole seconds and at least 1, twice: `Retry-After: <n>` and `RateLimit:
/// "default";r=0;t=<n>`.
pub(crate) struct TokenBucket {
    /// Tokens earned per second.
    quota: f64,
    depth: f64,
    tokens: f64,
    refilled: Duration,
    /// `"default";q=<quota>;w=1`, the same on every answer.
    policy: HeaderValue,
    answers: Answers,
}

/// What the limiter answers one request.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// A `200`, after which `remaining` whole tokens are left and the bucket is full again in
    /// `full_in` whole seconds.
    Served {
        remaining: u64,
        full_in: u64,
        policy: HeaderValue,
    },
    /// A `429`: a token is back in `retry_after` whole seconds (at least 1).
    Refused {
        retry_after: u64,
        policy: HeaderValue,
    },
}

impl TokenBucket {
    pub(crate) fn new(quota: f64, depth: f64) -> Self {
        let policy = format!("\"default\";q={quota:.0};w=1");
        Self {
            quota,
            depth,
            tokens: depth,
            refilled: Duration::ZERO,
            policy: HeaderValue::from_str(&policy).expect("a valid header value"),
            answers: Answers::default(),
        }
    }
}

impl Model for TokenBucket {
    type Answer = Answer;

    fn answer(&mut self, now: Duration) -> Answer {
        let earned = now.saturating_sub(self.refilled).as_secs_f64() * self.quota;
        self.tokens = (self.tokens + earned).min(self.depth);
        self.refilled = self.refilled.max(now);
        let policy = self.policy.clone();
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            self.answers.count(now, true);
            Answer::Served {
                remaining: self.tokens.floor() as u64,
                full_in: ((self.depth - self.tokens) / self.quota).ceil() as u64,
                policy,
            }
        } else {
            self.answers.count(now, false);
            let retry_after = ((1.0 - self.tokens) / self.quota).ceil().max(1.0) as u64;
            Answer::Refused {
                retry_after,
                policy,
            }
        }
    }

    fn respond(answer: Answer) -> Response<()> {
        let mut response = Response::new(());
        let (remaining, reset, policy) = match answer {
            Answer::Served {
                remaining,
                full_in,
                policy,
            } => (remaining, full_in, policy),
            Answer::Refused {
                retry_after,
                policy,
            } => {
                *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                response
                    .headers_mut()
                    .insert(RETRY_AFTER, HeaderValue::from(retry_after));
                (0, retry_after, policy)
            }
        };
        let ratelimit = format!("\"default\";r={remaining};t={reset}");
        let headers = response.headers_mut();
        headers.insert(
            RATELIMIT,
            HeaderValue::from_str(&ratelimit).expect("a valid header value"),
        );
        headers.insert(RATELIMIT_POLICY, policy);
        response
    }
}

impl RateLimiter for TokenBucket {
    fn answers(&mut self) -> &mut Answers {
        &mut self.answers
    }
}
