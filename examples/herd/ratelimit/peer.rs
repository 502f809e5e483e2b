//! reqwest-retry's retries, driven by its own crate: which answers it retries and how long it waits.

use std::cell::RefCell;
use std::time::{Duration, SystemTime};

use http::{Request, StatusCode, Uri};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::{
    DefaultRetryableStrategy, Jitter, RetryDecision, RetryPolicy, Retryable, RetryableStrategy,
};
use tower::{Service, ServiceExt};

use super::limiter::Limiter;
use crate::sim::SimulatedServer;

/// reqwest-retry 0.9's retries as its docs set them up, `RetryTransientMiddleware::new_with_policy(
/// ExponentialBackoff::builder().build_with_max_retries(3))`: 1 s × 2ⁿ under a 30 min cap, full
/// jitter, three retries, `Retry-After` not read. What it retries is `DefaultRetryableStrategy`'s call
/// (5xx, 408, 429, connect errors and timeouts); the delays are `ExponentialBackoff::should_retry`'s.
///
/// The crate draws its jitter from `rand::rng()`, a thread-local generator seeded by the OS that no
/// caller can seed, so its own draws change from run to run. By default the delays here are the crate's
/// unjittered delays (`should_retry` of the same policy with `Jitter::None`) scaled by a uniform draw
/// from `[0, 1)` of a seeded generator: the arithmetic of its `Jitter::Full` (`interval.mul_f64(U[0,
/// 1))`, retry-policies 0.5.2, src/retry_policy.rs), reproducible. With `--peer-rng` the delays are the
/// crate's own, jitter included.
pub(crate) struct ReqwestRetry {
    policy: ExponentialBackoff,
    jitter: PeerJitter,
}

/// Where the jitter of reqwest-retry's delays comes from.
enum PeerJitter {
    /// A seeded generator, applied to the crate's unjittered delay.
    Seeded(RefCell<SmallRng>),
    /// The crate's own `rand::rng()`.
    Crate,
}

/// How a call through reqwest-retry ended.
pub(crate) struct Ended {
    /// The status of the response it returned.
    pub(crate) status: StatusCode,
    pub(crate) attempts: u32,
    /// Why it returned a failure without retrying it; `None` for a success.
    pub(crate) why: Option<&'static str>,
}

impl ReqwestRetry {
    /// The crate's retries, with jitter from a generator seeded with `seed`, or with `None` from the
    /// crate's own.
    pub(crate) fn new(seed: Option<u64>) -> Self {
        Self {
            policy: ExponentialBackoff::builder().build_with_max_retries(3),
            jitter: match seed {
                Some(seed) => PeerJitter::Seeded(RefCell::new(SmallRng::seed_from_u64(seed))),
                None => PeerJitter::Crate,
            },
        }
    }

    /// One call, retried as `RetryTransientMiddleware::execute_with_retry` does (reqwest-retry 0.9.1,
    /// src/middleware.rs): classify, ask the policy, sleep, count the retry.
    pub(crate) async fn call(&self, mut server: SimulatedServer<Limiter>, uri: &Uri) -> Ended {
        let start_time = SystemTime::now();
        let mut n_past_retries = 0;
        loop {
            let mut request = Request::new(());
            *request.uri_mut() = uri.clone();
            let ready = server.ready().await.unwrap_or_else(|never| match never {});
            let response = ready
                .call(request)
                .await
                .unwrap_or_else(|never| match never {});
            let status = response.status();
            // The strategy reads a `reqwest::Response`: the simulated response becomes one.
            let result = Ok(reqwest::Response::from(response.map(|()| "")));
            let why = match DefaultRetryableStrategy.handle(&result) {
                None => None,
                Some(Retryable::Fatal) => Some("not retryable"),
                Some(Retryable::Transient) => match self.delay(start_time, n_past_retries) {
                    Some(duration) => {
                        tokio::time::sleep(duration).await;
                        n_past_retries += 1;
                        continue;
                    }
                    None => Some("max retries reached"),
                },
            };
            return Ended {
                status,
                attempts: n_past_retries + 1,
                why,
            };
        }
    }

    /// The wait before retry `n_past_retries + 1`, or `None` when the policy gives up.
    fn delay(&self, start_time: SystemTime, n_past_retries: u32) -> Option<Duration> {
        match &self.jitter {
            // As the middleware does: the time from now until `execute_after`.
            PeerJitter::Crate => match self.policy.should_retry(start_time, n_past_retries) {
                RetryDecision::Retry { execute_after } => Some(
                    execute_after
                        .duration_since(SystemTime::now())
                        .unwrap_or_default(),
                ),
                RetryDecision::DoNotRetry => None,
            },
            PeerJitter::Seeded(rng) => {
                let mut unjittered = self.policy;
                unjittered.jitter = Jitter::None;
                match unjittered.should_retry(start_time, n_past_retries) {
                    RetryDecision::Retry { execute_after } => {
                        // The crate's `now()` and ours are a few hundred nanoseconds apart; its
                        // delays are whole seconds, so the nearest millisecond is the delay.
                        let left = execute_after
                            .duration_since(SystemTime::now())
                            .unwrap_or_default();
                        let millis = (left.as_nanos() + 500_000) / 1_000_000;
                        let interval = Duration::from_millis(millis as u64);
                        Some(interval.mul_f64(rng.borrow_mut().random::<f64>()))
                    }
                    RetryDecision::DoNotRetry => None,
                }
            }
        }
    }
}
