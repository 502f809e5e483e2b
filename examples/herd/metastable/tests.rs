//! The server model, and the scenario's determinism.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use http::Request;
use tokio::time::Instant;
use tower::{Service, ServiceExt};

use super::queue::{Capacity, FifoServer, QueueNetwork, QueueService};
use super::{Scenario, table};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 100 requests/s, halved from 1 s to 2 s.
fn capacity() -> Capacity {
    Capacity {
        normal: 100.0,
        reduced: 50.0,
        from: Duration::from_secs(1),
        until: Duration::from_secs(2),
    }
}

#[test]
fn the_server_serves_its_capacity_in_arrival_order() {
    let mut server = FifoServer::new(capacity());
    // Ten requests at once are done 10 ms apart, in the order they came.
    let done: Vec<_> = (0..10).map(|_| server.enqueue(Duration::ZERO)).collect();
    assert_eq!(done, (1..=10).map(|k| ms(10 * k)).collect::<Vec<_>>());
    // An idle server starts at once.
    assert_eq!(server.enqueue(ms(500)), ms(510));
    // During the trigger, 20 ms each; the one started just before it ends at normal speed.
    assert_eq!(server.enqueue(ms(995)), ms(1005));
    assert_eq!(server.enqueue(ms(995)), ms(1025));
    assert_eq!(server.arrivals.iter().sum::<u32>(), 13);
}

#[tokio::test(start_paused = true)]
async fn abandoned_work_still_costs_service_time() {
    let start = Instant::now();
    let network = Rc::new(RefCell::new(QueueNetwork::new(
        FifoServer::new(capacity()),
        start,
        1,
    )));
    let local = tokio::task::LocalSet::new();
    let took = local
        .run_until(async {
            let net = tokio::task::spawn_local(QueueNetwork::run(Rc::clone(&network)));
            let mut service = QueueService(Rc::clone(&network));
            // Twenty attempts sent at once, then all given up on after 5 ms, once they are queued
            // and before the first is served...
            let abandoned: Vec<_> = (0..20).map(|_| service.call(Request::new(()))).collect();
            tokio::time::sleep(ms(5)).await;
            drop(abandoned);
            // ...still hold up the next one: it waits for their 200 ms of service.
            let answer = service.ready().await.unwrap().call(Request::new(()));
            answer.await.unwrap();
            net.abort();
            start.elapsed()
        })
        .await;
    assert!(took >= ms(210) && took <= ms(212), "{took:?}");
    let network = network.borrow();
    assert_eq!(network.wasted.iter().sum::<u32>(), 20);
    assert_eq!(network.useful.iter().sum::<u32>(), 1);
}

#[test]
fn one_seed_gives_the_same_table_twice() {
    let scenario = || Scenario {
        clients: 20,
        seed: 3,
        peer_rng: false,
    };
    let first = table(&scenario());
    assert_eq!(first, table(&scenario()));
    assert_eq!(first.lines().count(), 2 + super::rows().len() + 1 + 5);
}
