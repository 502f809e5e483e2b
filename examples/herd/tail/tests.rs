//! The server model, one hedged call through the real layer, and the scenario's determinism.

use std::rc::Rc;
use std::time::Duration;

use http::Request;
use stagger::{RetryInfo, RetryLayer, RetryPolicy};
use tokio::time::Instant;
use tower::{Layer, ServiceExt};

use super::server::{Backend, Draw, FAST_MEDIAN, Pool, SLOW, TailService};
use super::{Scenario, measure, rows, table};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn one_attempt_in_a_hundred_is_slow_and_the_others_take_8_ms_at_the_median() {
    let draws: Vec<Draw> = (0..100_000).map(|r| Draw::new(7, r, 0)).collect();
    let slow = draws.iter().filter(|d| d.slow()).count();
    assert!((900..=1100).contains(&slow), "{slow} slow");
    let mut fast: Vec<Duration> = (draws.iter().filter(|d| !d.slow()))
        .map(|d| d.service)
        .collect();
    fast.sort_unstable();
    let at = |p: f64| fast[(p * fast.len() as f64) as usize];
    let median = at(0.5).as_secs_f64() / FAST_MEDIAN.as_secs_f64();
    assert!((0.98..1.02).contains(&median), "median {:?}", at(0.5));
    // e^(1.645 × 0.5) × 8 ms = 18.2 ms.
    assert!(at(0.95) > ms(17) && at(0.95) < ms(19), "p95 {:?}", at(0.95));
    assert!(draws.iter().all(|d| (1..=3).contains(&d.out_ms)));
    // A hedge draws on its own: not the first attempt's time.
    assert_ne!(Draw::new(7, 0, 0), Draw::new(7, 0, 1));
}

#[test]
fn the_pool_serves_in_arrival_order_on_the_first_free_worker() {
    let mut pool = Pool::new(2);
    assert_eq!(pool.enqueue(ms(0), ms(10)), ms(10));
    assert_eq!(pool.enqueue(ms(0), ms(30)), ms(30));
    // Both busy: waits for the first free, at 10 ms.
    assert_eq!(pool.enqueue(ms(5), ms(10)), ms(20));
    // An idle worker starts at once.
    assert_eq!(pool.enqueue(ms(40), ms(1)), ms(41));
    assert_eq!((pool.queued, pool.work), (1, ms(51)));
}

#[tokio::test(start_paused = true)]
async fn a_hedge_wins_over_a_slow_attempt_which_is_cancelled_and_still_served() {
    // The first request whose first attempt is slow and whose hedge is not.
    let seed = 11;
    let request = (0..)
        .find(|&r| Draw::new(seed, r, 0).slow() && !Draw::new(seed, r, 1).slow())
        .unwrap();
    let hedge = Draw::new(seed, request, 1);
    let start = Instant::now();
    let backend = Rc::new(Backend::new(start, seed, 4));
    let policy = RetryPolicy::builder()
        .max_retries(1)
        .hedge_after(ms(10))
        .build()
        .unwrap();
    let local = tokio::task::LocalSet::new();
    let (response, took) = local
        .run_until(async {
            let service = RetryLayer::new(policy).layer(TailService::new(&backend, request));
            let response = service.oneshot(Request::new(())).await.unwrap();
            let took = start.elapsed();
            backend.drain().await;
            (response, took)
        })
        .await;
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (2, 1));
    // The hedge leaves at 10 ms and comes back with its own time, rounded up to the millisecond.
    let hedge_ms = hedge.out_ms + hedge.service.as_nanos().div_ceil(1_000_000) as u64;
    assert_eq!(took, ms(10 + hedge_ms + hedge.back_ms));
    let counts = backend.counts.get();
    assert_eq!((counts.sent, counts.served), (2, 2));
    assert_eq!((counts.hedges_won, counts.cancelled), (1, 1));
    assert_eq!((counts.slow, counts.slow_cancelled), (1, 1));
    // The server did the slow attempt's second of work all the same.
    assert_eq!(backend.pool.borrow().work, SLOW + hedge.service);
}

#[test]
fn one_seed_gives_the_same_table_twice() {
    let scenario = Scenario {
        clients: 20,
        seed: 3,
    };
    let first = table(&measure(&scenario, 1));
    assert_eq!(first, table(&measure(&scenario, 2)));
    // The header, the rows, the blank line, the checks, the paper and the three rows beside it.
    assert_eq!(
        first.lines().count(),
        2 + rows().len() + 1 + 1 + 1 + 3,
        "{first}"
    );
}
