//! Hedging (`RetryPolicyBuilder::hedge_after`): through `RetryMiddleware` and `RetryLayer` over
//! `reqwest::Client` against a loopback server (`adapters`); then, in virtual time over in-process
//! services, the race's rules (`race`), a hedge the inner service cannot take yet (`readiness`), the
//! pushback of an answer set aside (`pushback`, with its loopback checks through both adapters),
//! adaptive throttling's accounts of a race (`throttling`), and the limits every hedge obeys
//! (`promises`).
//!
//! One module per subject, under `tests/hedge/`; this file holds what they share: the hedging policy,
//! and a backend in process that answers as a script says (`scripted`).
#![cfg(all(feature = "reqwest-middleware", feature = "tower"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use stagger::{RetryBudget, RetryInfo, RetryLayer, RetryPolicy};
use tower::{ServiceBuilder, ServiceExt};

mod common;

// One module per subject; docs/rules.md says which test pins down which promise.
#[path = "hedge/adapters.rs"]
mod adapters;
#[path = "hedge/promises.rs"]
mod promises;
#[path = "hedge/pushback.rs"]
mod pushback;
#[path = "hedge/race.rs"]
mod race;
#[path = "hedge/readiness.rs"]
mod readiness;
#[path = "hedge/throttling.rs"]
mod throttling;

fn hedging() -> stagger::RetryPolicyBuilder {
    RetryPolicy::builder().hedge_after(Duration::from_millis(100))
}

/// In virtual time, over an in-process service that answers each call as a script says and counts
/// the calls in flight.
mod scripted {
    use std::convert::Infallible;
    use std::sync::Mutex;

    use http::{Request, Response};
    use tower::service_fn;

    use super::*;

    /// How the backend answers one call: after `after`, with `status` and `headers`.
    #[derive(Clone, Debug)]
    pub struct Answer {
        pub after: Duration,
        pub status: u16,
        pub headers: Vec<(&'static str, &'static str)>,
    }

    pub fn answer(after_ms: u64, status: u16) -> Answer {
        Answer {
            after: Duration::from_millis(after_ms),
            status,
            headers: Vec::new(),
        }
    }

    impl Answer {
        pub fn header(mut self, name: &'static str, value: &'static str) -> Self {
            self.headers.push((name, value));
            self
        }
    }

    /// What the backend saw.
    #[derive(Clone, Default)]
    pub struct Calls {
        made: Arc<AtomicUsize>,
        in_flight: Arc<AtomicUsize>,
        most_in_flight: Arc<AtomicUsize>,
        /// Each call's path, in the order they were made.
        paths: Arc<Mutex<Vec<String>>>,
    }

    impl Calls {
        pub fn most_in_flight(&self) -> usize {
            self.most_in_flight.load(Ordering::SeqCst)
        }

        pub fn to(&self, path: &str) -> usize {
            self.paths
                .lock()
                .unwrap()
                .iter()
                .filter(|p| *p == path)
                .count()
        }
    }

    /// Leaves the count of calls in flight when the call ends or is dropped.
    struct InFlight(Arc<AtomicUsize>);

    impl Drop for InFlight {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    pub type Backend = tower::util::BoxCloneSyncService<Request<()>, Response<()>, Infallible>;

    /// A backend that answers the `n`-th call (from 0) to `path` as `script(n, path)` says.
    pub fn backend(
        script: impl Fn(usize, &str) -> Answer + Send + Sync + 'static,
    ) -> (Backend, Calls) {
        let calls = Calls::default();
        let seen = calls.clone();
        let script = Arc::new(script);
        let service = service_fn(move |request: Request<()>| {
            let path = request.uri().path().to_owned();
            let n = {
                let mut paths = seen.paths.lock().unwrap();
                let n = paths.iter().filter(|p| **p == path).count();
                paths.push(path.clone());
                n
            };
            seen.made.fetch_add(1, Ordering::SeqCst);
            let now = seen.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            seen.most_in_flight.fetch_max(now, Ordering::SeqCst);
            let guard = InFlight(Arc::clone(&seen.in_flight));
            let Answer {
                after,
                status,
                headers,
            } = script(n, &path);
            async move {
                let _guard = guard;
                tokio::time::sleep(after).await;
                let mut response = Response::builder().status(status);
                for (name, value) in headers {
                    response = response.header(name, value);
                }
                Ok(response.body(()).unwrap())
            }
        });
        (tower::util::BoxCloneSyncService::new(service), calls)
    }

    pub fn get(path: &str) -> Request<()> {
        Request::get(format!("http://api.test{path}"))
            .body(())
            .unwrap()
    }

    pub fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }
}
