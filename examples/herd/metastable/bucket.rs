//! A prototype, built on stagger's public API: a failure-only token bucket in place of stagger's
//! deposit budget, as gRPC's retry throttling has it (gRFC A6: `maxTokens` 10, `tokenRatio` 0.1).
//!
//! Each client holds `MAX_TOKENS`, full at the start. Every failed attempt (here, one past its time
//! limit) takes one token; every success gives back `TOKEN_RATIO`. While the bucket is at or below half
//! full, failures are not retried. Unlike a deposit budget, it does not grow with the time that passes
//! or the requests sent: a client that sends 0.7 requests/s stops retrying at its fifth failure in a
//! row, and earns the right back only with successes, ten per token. stagger's budget has a floor of 10 retries/s per
//! policy instead, which no client of a fleet sending less than that ever reaches.
//!
//! stagger judges an attempt past its `attempt_timeout` itself, without asking the classifier, so the
//! time limit here is a layer below the retries ([`TimeLimit`]) that fails the attempt with an
//! `io::ErrorKind::TimedOut`, which the classifier sees (and `DefaultClassifier` retries).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use http::{Request, Response};
use stagger::classify::{AttemptResult, ClassifyHttp, DefaultClassifier, RequestView};
use stagger::{Outcome, RetryPolicy};
use tower::Service;

use super::ATTEMPT_TIMEOUT;
use super::queue::QueueService;

/// The bucket's size: gRPC's example `maxTokens`.
const MAX_TOKENS: f64 = 10.0;
/// What a success gives back: gRPC's example `tokenRatio`.
const TOKEN_RATIO: f64 = 0.1;

/// stagger's defaults, without its budget, with the bucket as the classifier's last word and the time
/// limit left to [`TimeLimit`].
pub(super) fn policy(seed: u64) -> RetryPolicy {
    RetryPolicy::builder()
        .budget(None)
        .attempt_timeout(None)
        .classifier(FailureBudget::default())
        .seed(seed)
        .build()
        .expect("a valid policy")
}

/// One client's bucket, consulted as each attempt is classified.
struct FailureBudget {
    tokens: Mutex<f64>,
}

impl Default for FailureBudget {
    fn default() -> Self {
        Self {
            tokens: Mutex::new(MAX_TOKENS),
        }
    }
}

impl FailureBudget {
    /// Takes a token for a failure; whether the failure may still be retried.
    fn fail(&self) -> bool {
        let mut tokens = self.tokens.lock().expect("not poisoned");
        *tokens = (*tokens - 1.0).max(0.0);
        *tokens > MAX_TOKENS / 2.0
    }

    fn succeed(&self) {
        let mut tokens = self.tokens.lock().expect("not poisoned");
        *tokens = (*tokens + TOKEN_RATIO).min(MAX_TOKENS);
    }
}

impl ClassifyHttp for FailureBudget {
    fn classify(&self, request: &RequestView<'_>, result: &AttemptResult<'_>) -> Outcome {
        let outcome = DefaultClassifier.classify(request, result);
        if outcome == Outcome::Success {
            self.succeed();
        } else if outcome.is_retryable() && !self.fail() {
            return Outcome::Fatal;
        }
        outcome
    }
}

/// The queueing server behind a time limit of [`ATTEMPT_TIMEOUT`] per attempt: an attempt not
/// answered by then is dropped (abandoned) and fails with `io::ErrorKind::TimedOut`.
#[derive(Clone)]
pub(super) struct TimeLimit(pub(super) QueueService);

type Answer = Pin<Box<dyn Future<Output = Result<Response<()>, io::Error>>>>;

impl Service<Request<()>> for TimeLimit {
    type Response = Response<()>;
    type Error = io::Error;
    type Future = Answer;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<()>) -> Answer {
        let reply = self.0.call(request);
        Box::pin(async move {
            match tokio::time::timeout(ATTEMPT_TIMEOUT, reply).await {
                Ok(answer) => Ok(answer.unwrap_or_else(|never| match never {})),
                Err(_) => Err(io::ErrorKind::TimedOut.into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_failures_in_a_row_stop_the_retries_and_successes_bring_them_back() {
        let bucket = FailureBudget::default();
        let retried: Vec<bool> = (0..6).map(|_| bucket.fail()).collect();
        assert_eq!(retried, [true, true, true, true, false, false]);
        // 4 tokens: ten successes make 5, and the next failure leaves 4.
        for _ in 0..10 {
            bucket.succeed();
        }
        assert!(!bucket.fail());
        // 4 tokens again: forty successes make 8, and the next failure leaves 7, over half.
        for _ in 0..40 {
            bucket.succeed();
        }
        assert!(bucket.fail());
    }
}
