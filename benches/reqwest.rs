//! What `RetryMiddleware` costs a request that succeeds at once, beside reqwest-retry and what a retry
//! middleware cannot avoid.
//!
//! The last middleware of every chain answers `200` without touching the network, so every nanosecond
//! above `bare` is the retry middleware's. Each request is one `ClientWithMiddleware::execute`, its
//! response dropped inside the measurement. Requests are built outside the measurement, fresh for each
//! iteration.
//!
//! - `bare`: the chain with the answering middleware only.
//! - `request_try_clone`: one `reqwest::Request::try_clone`, made and dropped; the floor under any retry
//!   middleware.
//! - `forward`: the same chain with a middleware that only hands the request on: what any middleware
//!   costs (reqwest-middleware boxes each one's future).
//! - `reqwest_retry`: reqwest-retry's `RetryTransientMiddleware`, exponential backoff, 3 retries.
//! - `stagger`: `RetryMiddleware::new(RetryPolicy::default())`.
//! - `stagger_no_budget`: the same without the retry budget.
//!
//! Target: `stagger − bare ≤ request_try_clone + 40 ns`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::middleware::{chain, forward, reqwest_request, time_reqwest};
use common::{batched, time_copies};
use criterion::{Criterion, criterion_group, criterion_main};
use reqwest_middleware::Middleware;
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use stagger::{RetryMiddleware, RetryPolicy};

/// Requests built ahead of each timed batch: enough to amortise the timer, few enough to stay in cache.
const BATCH: usize = 256;

fn success_path(c: &mut Criterion) {
    let rt = common::runtime();
    let mut group = c.benchmark_group("reqwest_success");

    group.bench_function("request_try_clone", |b| {
        b.iter_custom(|iters| {
            batched(iters, BATCH, reqwest_request, |batch| {
                time_copies(batch, |r| r.try_clone().expect("no body to stream"))
            })
        });
    });

    let no_budget = RetryPolicy::builder()
        .budget(None)
        .build()
        .expect("a valid policy");
    let retry_middlewares: [(&str, Option<Arc<dyn Middleware>>); 5] = [
        ("bare", None),
        ("forward", Some(Arc::new(forward))),
        (
            "reqwest_retry",
            Some(Arc::new(RetryTransientMiddleware::new_with_policy(
                ExponentialBackoff::builder().build_with_max_retries(3),
            ))),
        ),
        (
            "stagger",
            Some(Arc::new(RetryMiddleware::new(RetryPolicy::default()))),
        ),
        (
            "stagger_no_budget",
            Some(Arc::new(RetryMiddleware::new(no_budget))),
        ),
    ];
    for (name, retry) in retry_middlewares {
        let client = chain(retry, false);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                batched(iters, BATCH, reqwest_request, |batch| {
                    time_reqwest(&rt, &client, batch)
                })
            });
        });
    }

    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    targets = success_path
}
criterion_main!(benches);
