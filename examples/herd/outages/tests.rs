//! The proxy, one call through an outage, and the scenario's determinism.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use http::StatusCode;
use tokio::time::Instant;

use super::client::{Client, Ended};
use super::figures::table;
use super::proxy::Proxy;
use super::{Kind, OUTAGES, Scenario, measure, rows};
use crate::peers::Peer;
use crate::sim::{Model, Network};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn the_proxy_answers_502_while_the_backend_is_down_and_counts_every_attempt() {
    let mut proxy = Proxy::new(ms(2000)..ms(2500));
    let answers: Vec<_> = [0, 1999, 2000, 2499, 2500, 2500]
        .map(|t| proxy.answer(ms(t)))
        .into();
    let (ok, bad) = (StatusCode::OK, StatusCode::BAD_GATEWAY);
    assert_eq!(answers, [ok, ok, bad, bad, ok, ok]);
    assert_eq!(proxy.arrivals.iter().sum::<u32>(), 6);
    assert_eq!(proxy.arrivals[250], 2);
    assert_eq!(Proxy::respond(bad).status(), bad);
}

/// One call of `kind`, sent at the start to a proxy down from the start for `outage`: how it ended,
/// and the attempts the proxy saw.
async fn one_call(kind: Kind, outage: Duration) -> (Ended, u32) {
    let start = Instant::now();
    let proxy = Proxy::new(Duration::ZERO..outage);
    let network = Rc::new(RefCell::new(Network::new(proxy, start, 1)));
    let scenario = Scenario {
        clients: 1,
        seed: 1,
        peer_rng: false,
    };
    let client = Client::new(kind, &scenario, 0);
    let local = tokio::task::LocalSet::new();
    let ended = local
        .run_until(async {
            let net = tokio::task::spawn_local(Network::run(Rc::clone(&network)));
            let ended = client.call(&network).await;
            net.abort();
            ended
        })
        .await;
    let seen = network.borrow().server.arrivals.iter().sum();
    (ended, seen)
}

#[tokio::test(start_paused = true)]
async fn a_call_that_met_the_outage_says_so_whether_it_recovered_or_not() {
    // backon waits 1 s before its first retry: a 10 ms outage is over by then.
    let (ended, seen) = one_call(Kind::Peer(Peer::Backon), ms(10)).await;
    assert!(ended.met_outage && ended.ok);
    assert_eq!((ended.attempts, seen), (2, 2));
    // Without retries, the 502 is the end.
    let (ended, seen) = one_call(Kind::Peer(Peer::NoRetries), ms(10)).await;
    assert!(ended.met_outage && !ended.ok);
    assert_eq!((ended.attempts, seen), (1, 1));
    // stagger's defaults, whatever they are, report the attempts the proxy saw, and a GET's 502 is
    // retried.
    let (ended, seen) = one_call(Kind::StaggerDefaults, ms(10)).await;
    assert!(ended.met_outage);
    assert!(ended.attempts >= 2);
    assert_eq!(ended.attempts, seen);
    // A call after the outage meets none.
    let (ended, _) = one_call(Kind::StaggerDefaults, Duration::ZERO).await;
    assert!(!ended.met_outage && ended.ok);
    assert_eq!(ended.attempts, 1);
}

#[test]
fn one_seed_gives_the_same_table_twice_on_any_number_of_threads() {
    let scenario = Scenario {
        clients: 50,
        seed: 3,
        peer_rng: false,
    };
    let rows = rows();
    let first = measure(&scenario, &rows, 1);
    let text = table(&first);
    assert_eq!(text, table(&measure(&scenario, &rows, 2)));
    // The header, a row per outage and client with a blank line between outages, the blank line, the
    // check and a note per outage.
    let lines = 2 + OUTAGES.len() * (rows.len() + 1) + 1 + OUTAGES.len();
    assert_eq!(text.lines().count(), lines, "{text}");
    for line in &first {
        let f = &line.figures;
        assert!(f.met > 0, "{}: no request met the outage", line.row.name);
        // Without retries every request that met the outage failed, in one attempt.
        if matches!(line.row.kind, Kind::Peer(Peer::NoRetries)) {
            assert_eq!(f.success(), Some(0.0));
            assert_eq!(f.attempts_per_request(), Some(1.0));
        }
    }
}
