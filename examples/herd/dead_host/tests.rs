//! The host and its connections, the rows' headline facts on a shortened run, and the scenario's
//! determinism.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Duration;

use tokio::time::Instant;
use tower::ServiceExt;

use super::figures::table;
use super::host::{Connection, Fate, Host};
use super::{CASES, Case, Kind, Line, Scenario, measure, rows};
use crate::sim::{Model, Network};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn the_host_meets_attempts_with_its_fate_while_down_and_counts_every_one() {
    for fate in [Fate::Refused, Fate::Dropped] {
        let mut host = Host::new(ms(2000)..ms(2500), fate);
        let fates: Vec<_> = [0, 1999, 2000, 2499, 2500, 2500]
            .map(|t| host.answer(ms(t)))
            .into();
        let ok = Fate::Answered;
        assert_eq!(fates, [ok, ok, fate, fate, ok, ok]);
        assert_eq!(host.arrivals.iter().sum::<u32>(), 6);
        assert_eq!(host.arrivals[250], 2);
    }
}

/// One attempt at `at` from the start, through a connection to a host down from the start for
/// 1 s with `fate`: how it ended within 2 s, and when.
async fn one_attempt(fate: Fate, at: Duration) -> (Option<io::Result<u16>>, Duration) {
    let start = Instant::now();
    let host = Host::new(Duration::ZERO..Duration::from_secs(1), fate);
    let network = Rc::new(RefCell::new(Network::new(host, start, 1)));
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let net = tokio::task::spawn_local(Network::run(Rc::clone(&network)));
            tokio::time::sleep_until(start + at).await;
            let sent = Instant::now();
            let attempt = Connection::new(&network).oneshot(http::Request::new(()));
            let ended = tokio::time::timeout(Duration::from_secs(2), attempt).await;
            net.abort();
            let ended = ended
                .ok()
                .map(|r| r.map(|response| response.status().as_u16()));
            (ended, sent.elapsed())
        })
        .await
}

#[tokio::test(start_paused = true)]
async fn a_refused_connect_fails_one_round_trip_later_and_a_dropped_syn_never_ends() {
    let (ended, took) = one_attempt(Fate::Refused, Duration::ZERO).await;
    let error = ended.expect("an end").expect_err("refused");
    assert_eq!(error.kind(), io::ErrorKind::ConnectionRefused);
    assert!((ms(2)..=ms(6)).contains(&took), "{took:?}");
    let (ended, took) = one_attempt(Fate::Dropped, Duration::ZERO).await;
    assert!(ended.is_none(), "no end");
    assert_eq!(took, Duration::from_secs(2));
    let (ended, _) = one_attempt(Fate::Dropped, Duration::from_secs(1)).await;
    assert_eq!(ended.expect("an end").expect("answered"), 200, "back up");
}

/// A few seconds of each case at 200 calls/s: the host down from t = 2 s for 6 s, or restarting
/// for 1 s, calls until 3 s after its return.
fn short() -> Scenario {
    Scenario {
        rate: 200.0,
        seed: 1,
        down_at: Duration::from_secs(2),
        dead_for: Duration::from_secs(6),
        restart_for: Duration::from_secs(1),
        send_after: Duration::from_secs(3),
    }
}

fn line<'a>(lines: &'a [Line<'a>], case: Case, name: &str) -> &'a Line<'a> {
    (lines.iter())
        .find(|l| l.case == case && l.row.name == name)
        .unwrap_or_else(|| panic!("{name} in {case:?}"))
}

#[test]
fn the_breaker_spares_a_dead_host_and_the_peers_behave_as_their_rules_say() {
    let rows = rows();
    let lines = measure(&short(), &rows, 2);
    // Once tripped, only probes: a twentieth of what the calls and their retries send to a host
    // that refuses; when attempts hang, the half second before the trip is a fifth of the run.
    for (case, fewer) in [(Case::Refuses, 20), (Case::DropsSyns, 5)] {
        let none = &line(&lines, case, "stagger, no breaker").figures;
        let fast = &line(&lines, case, "stagger, breaker fail fast").figures;
        let hold = &line(&lines, case, "stagger defaults, hold 10 s").figures;
        assert!(fast.down_attempts * fewer < none.down_attempts, "{case:?}");
        assert!(fast.tripped_latency(99.0) <= Some(ms(10)), "{case:?}");
        for row in [fast, hold] {
            assert!(row.recover <= Some(Duration::from_secs(1)), "{case:?}");
            assert!(row.trip.is_some());
        }
        // One instance is never ejected: outlier detection sends what no breaker sends.
        let outlier = &line(&lines, case, "tower-resilience outlier").figures;
        assert_eq!(outlier.trip, None);
        let share = outlier.down_attempts as f64 / none.down_attempts as f64;
        assert!((0.98..1.02).contains(&share), "{case:?}: {share}");
    }
    // A hung attempt takes its timeout (500 ms) to fail: its host's silence would count only after
    // a second, however fast the host answered before.
    let hung = line(&lines, Case::DropsSyns, "stagger, breaker fail fast");
    assert!(hung.figures.trip >= Some(ms(500)));
    // A restart is ridden out by holding: every call succeeds.
    let hold = &line(&lines, Case::Restarts, "stagger defaults, hold 10 s").figures;
    assert_eq!(hold.ok_all(), 1.0);
    // resilience4j's minute open outlasts the run after a restart of a second.
    let r4j = &line(&lines, Case::Restarts, "resilience4j (model)").figures;
    assert_eq!((r4j.recover, r4j.peak_after), (None, 0));
    // tower-resilience's window counts every call since the circuit last changed: the outage must
    // bring as many failures as the seconds before it brought successes.
    let tower = &line(&lines, Case::Refuses, "tower-resilience breaker").figures;
    let fast = &line(&lines, Case::Refuses, "stagger, breaker fail fast").figures;
    assert!(
        tower.trip > Some(Duration::from_secs(1)),
        "{:?}",
        tower.trip
    );
    assert!(tower.down_attempts > 10 * fast.down_attempts);
}

#[test]
fn one_seed_gives_the_same_tables_on_any_number_of_threads() {
    let scenario = Scenario {
        rate: 50.0,
        ..short()
    };
    let rows = rows();
    let tables = |threads| {
        let lines = measure(&scenario, &rows, threads);
        (CASES.iter())
            .map(|&case| {
                let lines: Vec<&Line> = lines.iter().filter(|l| l.case == case).collect();
                table(&lines)
            })
            .collect::<Vec<_>>()
    };
    let first = tables(1);
    assert_eq!(first, tables(2));
    // The heading, a line per row, the offered peak, the failures' heading and a line per row.
    let expected = 2 + rows.len() + 3 + rows.len();
    assert_eq!(first[0].lines().count(), expected, "{}", first[0]);
    assert!(matches!(rows[0].kind, Kind::Stagger(None)));
}
