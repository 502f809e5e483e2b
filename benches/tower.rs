//! What `RetryLayer` costs a request that succeeds at once, beside what a retry layer cannot avoid.
//!
//! The inner service answers `200` without doing anything, so every nanosecond above `bare` is the
//! layer's. Each request is one `ready().await` and one `call().await`, its response dropped inside the
//! measurement (with the `RetryInfo` the layer puts in it). Requests are built outside the measurement,
//! fresh for each iteration, the way an application builds them: a URI and two header values on the heap.
//!
//! - `bare`: the service alone.
//! - `request_clone`: one copy of the request, made and dropped; the floor under any retry layer.
//! - `tower_retry`: `tower::retry::Retry` with a minimal policy (3 retries on 5xx, no delay, no budget).
//! - `stagger`: `RetryLayer::new(RetryPolicy::default())`.
//! - `stagger_no_budget`: the same without the retry budget, to show what the budget costs.
//!
//! Target: `stagger − bare ≤ request_clone + 40 ns`. The group `pieces` times the parts of that cost.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{
    Ok200, RetryServerErrors, batched, clone_http, http_request, time_copies, time_tower,
};
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use http::{Request, Response, StatusCode};
use stagger::classify::DefaultClassifier;
use stagger::{RetryLayer, RetryPolicy};
use tokio::runtime::Runtime;
use tower::retry::budget::{Budget as _, TpsBudget};
use tower::{Layer, Service};

/// Requests built ahead of each timed batch: enough to amortise the timer, few enough to stay in cache.
const BATCH: usize = 256;

/// Times `service` on fresh requests, built outside the measurement.
fn bench_service<S>(group: &mut BenchmarkGroup<'_, WallTime>, rt: &Runtime, name: &str, service: S)
where
    S: Service<Request<Bytes>, Response = Response<Bytes>, Error: std::fmt::Debug> + Clone,
{
    group.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut service = service.clone();
            batched(iters, BATCH, http_request, |batch| {
                time_tower(rt, &mut service, batch)
            })
        });
    });
}

fn success_path(c: &mut Criterion) {
    let rt = common::runtime();
    let mut group = c.benchmark_group("tower_success");
    let ok = Ok200 { conn: false };

    group.bench_function("request_clone", |b| {
        b.iter_custom(|iters| {
            batched(iters, BATCH, http_request, |batch| {
                time_copies(batch, clone_http)
            })
        });
    });

    let policy_no_budget = RetryPolicy::builder()
        .budget(None)
        .build()
        .expect("a valid policy");
    let tower_retry = tower::retry::RetryLayer::new(RetryServerErrors { remaining: 3 });
    bench_service(&mut group, &rt, "bare", ok);
    bench_service(&mut group, &rt, "tower_retry", tower_retry.layer(ok));
    let stagger = RetryLayer::new(RetryPolicy::default()).layer(ok);
    bench_service(&mut group, &rt, "stagger", stagger);
    let stagger_no_budget = RetryLayer::new(policy_no_budget).layer(ok);
    bench_service(&mut group, &rt, "stagger_no_budget", stagger_no_budget);

    group.finish();
}

/// The parts of the layer's success path, each alone.
fn pieces(c: &mut Criterion) {
    let mut group = c.benchmark_group("tower_pieces");

    let policy = RetryPolicy::default();
    group.bench_function("policy_start_and_drop", |b| {
        b.iter(|| drop(black_box(&policy).start()));
    });
    let policy_no_budget = RetryPolicy::builder()
        .budget(None)
        .build()
        .expect("a valid policy");
    group.bench_function("policy_start_and_drop_no_budget", |b| {
        b.iter(|| drop(black_box(&policy_no_budget).start()));
    });

    // tower's budget, which stagger replaced with its own (see `src/budget.rs`): a lock and a clock read
    // per deposit. Kept for comparison with `policy_start_and_drop`, whose deposit is two atomic adds.
    let budget = TpsBudget::default();
    group.bench_function("tps_budget_deposit", |b| {
        b.iter(|| black_box(&budget).deposit());
    });
    group.bench_function("tokio_instant_now", |b| {
        b.iter(tokio::time::Instant::now);
    });
    group.bench_function("std_instant_now", |b| {
        b.iter(Instant::now);
    });

    group.bench_function("classify_status_200", |b| {
        b.iter(|| DefaultClassifier::status(black_box(StatusCode::OK)));
    });

    // What recording `RetryInfo` adds to a response: the extensions' map and the boxed value, allocated
    // and freed.
    let info = policy_no_budget.start().info();
    group.bench_function("response_new_and_drop", |b| {
        b.iter(|| drop(black_box(Response::new(Bytes::new()))));
    });
    group.bench_function("response_new_insert_info_and_drop", |b| {
        b.iter(|| {
            let mut response = Response::new(Bytes::new());
            response.extensions_mut().insert(black_box(info.clone()));
            drop(black_box(response));
        });
    });

    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(50);
    targets = success_path, pieces
}
criterion_main!(benches);
