//! The peers' retries, each row's delays computed by the peer's own crate, and one small driver that
//! sends, waits for the answer under a time limit, classifies and sleeps, on tokio's (paused) clock.
//!
//! - reqwest-retry 0.9: `ExponentialBackoff::builder().build_with_max_retries(3)` ([`reqwest_peer`]);
//! - tower 0.5: `ExponentialBackoffMaker::default()`, three retries ([`tower_peer`]);
//! - backon 1: `ExponentialBuilder::default()`: 1 s, 2 s, 4 s, no jitter, three retries
//!   (backon 1.6.0, src/backoff/exponential.rs:7-13 and 56-66); it draws no random number;
//! - three retries at once, and no retries, the two baselines.
//!
//! What is retried is reqwest-retry's `DefaultRetryableStrategy` for every peer (5xx, 408, 429; a
//! `200` is a success): tower and backon leave the rule to their user, and this is the common one. An
//! attempt past its time limit is what reqwest reports as a timeout (`reqwest::Error::is_timeout`),
//! which the strategy retries (`default_on_request_failure`, reqwest-retry 0.9.1,
//! src/retryable_strategy.rs:134-145); a `reqwest::Error` cannot be made outside reqwest, so the driver
//! applies that rule itself.
//!
//! The dead-host scenario's circuit breakers: tower-resilience 0.13's circuit breaker and outlier
//! detection, driven by the crate ([`tower_resilience`]); and models of the breakers of
//! Microsoft.Extensions.Http.Resilience's standard handler ([`polly_breaker`]) and of resilience4j
//! ([`resilience4j_breaker`]), written from their published defaults and sources, in a tower layer
//! of their own ([`breaker_model`]).

pub(crate) mod breaker_model;
pub(crate) mod polly_breaker;
pub(crate) mod reqwest_peer;
pub(crate) mod resilience4j_breaker;
pub(crate) mod tower_peer;
pub(crate) mod tower_resilience;

use std::cell::RefCell;
use std::convert::Infallible;
use std::time::{Duration, SystemTime};

use backon::BackoffBuilder;
use http::{Request, Response, StatusCode, Uri};
use reqwest_retry::{DefaultRetryableStrategy, Retryable, RetryableStrategy};
use tower::{Service, ServiceExt};

use self::reqwest_peer::ReqwestRetry;
use self::tower_peer::{RETRIES, TowerBackoff, TowerMaker};

/// Which peer's retries a row uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Peer {
    ReqwestRetry,
    Tower,
    Backon,
    /// Three retries, each sent as soon as the attempt before it failed.
    AtOnce,
    NoRetries,
}

/// One client's copy of a peer's retries, with its own jitter, as a separate process would have.
pub(crate) enum PeerClient {
    ReqwestRetry(ReqwestRetry),
    Tower(RefCell<TowerMaker>),
    Backon,
    AtOnce,
    NoRetries,
}

/// One call's schedule of waits.
enum Schedule {
    ReqwestRetry { start: SystemTime, past: u32 },
    Tower { backoff: TowerBackoff, past: u32 },
    Backon(backon::ExponentialBackoff),
    AtOnce { past: u32 },
    NoRetries,
}

/// How a call through a peer ended.
pub(crate) struct Ended {
    /// The status of the response it returned; `None` if its last attempt timed out.
    pub(crate) status: Option<StatusCode>,
    pub(crate) attempts: u32,
    /// Why it returned a failure without retrying it; `None` for a success.
    pub(crate) why: Option<&'static str>,
}

impl PeerClient {
    /// A client of `peer`, its jitter seeded with `seed`, or with `None` drawn from the crate's own
    /// generator (`--peer-rng`).
    pub(crate) fn new(peer: Peer, seed: Option<u64>) -> Self {
        match peer {
            Peer::ReqwestRetry => Self::ReqwestRetry(ReqwestRetry::new(seed)),
            Peer::Tower => Self::Tower(RefCell::new(TowerMaker::new(seed))),
            Peer::Backon => Self::Backon,
            Peer::AtOnce => Self::AtOnce,
            Peer::NoRetries => Self::NoRetries,
        }
    }

    fn schedule(&self) -> Schedule {
        match self {
            Self::ReqwestRetry(_) => Schedule::ReqwestRetry {
                start: SystemTime::now(),
                past: 0,
            },
            Self::Tower(maker) => Schedule::Tower {
                backoff: maker.borrow_mut().make_backoff(),
                past: 0,
            },
            Self::Backon => Schedule::Backon(backon::ExponentialBuilder::default().build()),
            Self::AtOnce => Schedule::AtOnce { past: 0 },
            Self::NoRetries => Schedule::NoRetries,
        }
    }

    /// One call to `service`, each attempt limited to `timeout` if given, retried as the peer says.
    pub(crate) async fn call<S>(
        &self,
        mut service: S,
        uri: &Uri,
        timeout: Option<Duration>,
    ) -> Ended
    where
        S: Service<Request<()>, Response = Response<()>, Error = Infallible>,
    {
        let mut schedule = self.schedule();
        let mut attempts = 0;
        loop {
            let mut request = Request::new(());
            *request.uri_mut() = uri.clone();
            let ready = service.ready().await.unwrap_or_else(|never| match never {});
            let attempt = ready.call(request);
            attempts += 1;
            let answered = match timeout {
                Some(limit) => tokio::time::timeout(limit, attempt).await.ok(),
                None => Some(attempt.await),
            };
            let response = answered.map(|result| result.unwrap_or_else(|never| match never {}));
            let status = response.as_ref().map(Response::status);
            let verdict = match response {
                // The strategy reads a `reqwest::Response`: the simulated response becomes one.
                Some(response) => {
                    let result = Ok(reqwest::Response::from(response.map(|()| "")));
                    DefaultRetryableStrategy.handle(&result)
                }
                None => Some(Retryable::Transient),
            };
            let why = match verdict {
                None => None,
                Some(Retryable::Fatal) => Some("not retryable"),
                Some(Retryable::Transient) => match schedule.next_delay(self) {
                    Some(delay) => {
                        if !delay.is_zero() {
                            tokio::time::sleep(delay).await;
                        }
                        continue;
                    }
                    None => Some("max retries reached"),
                },
            };
            return Ended {
                status,
                attempts,
                why,
            };
        }
    }
}

impl Schedule {
    /// The wait before the next retry, or `None` when the peer gives up.
    fn next_delay(&mut self, client: &PeerClient) -> Option<Duration> {
        match self {
            Self::ReqwestRetry { start, past } => {
                let PeerClient::ReqwestRetry(peer) = client else {
                    unreachable!("a reqwest-retry schedule of a reqwest-retry client")
                };
                let delay = peer.delay(*start, *past)?;
                *past += 1;
                Some(delay)
            }
            Self::Tower { backoff, past } => (*past < RETRIES).then(|| {
                *past += 1;
                backoff.next_delay()
            }),
            Self::Backon(backoff) => backoff.next(),
            Self::AtOnce { past } => (*past < RETRIES).then(|| {
                *past += 1;
                Duration::ZERO
            }),
            Self::NoRetries => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backon_waits_one_two_four_seconds_without_jitter_then_gives_up() {
        let delays: Vec<_> = backon::ExponentialBuilder::default().build().collect();
        let secs = Duration::from_secs;
        assert_eq!(delays, [secs(1), secs(2), secs(4)]);
    }

    #[tokio::test(start_paused = true)]
    async fn every_peer_retries_three_times_at_most() {
        for peer in [Peer::ReqwestRetry, Peer::Tower, Peer::Backon, Peer::AtOnce] {
            let client = PeerClient::new(peer, Some(1));
            let mut schedule = client.schedule();
            let delays: Vec<_> = std::iter::from_fn(|| schedule.next_delay(&client)).collect();
            assert_eq!(delays.len(), 3, "{peer:?}");
        }
        let client = PeerClient::new(Peer::NoRetries, None);
        assert_eq!(client.schedule().next_delay(&client), None);
    }
}
