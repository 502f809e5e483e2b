//! The peers' schedules against their formulas, one worker's restarts, and the scenario's determinism.

use std::time::Duration;

use super::figures::table;
use super::schedules::{
    Peer, Schedule, akka, grpc_backoff, grpc_jittered, kubernetes, systemd, task_supervisor,
};
use super::{Scenario, measure, rows};

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}

#[test]
fn kubernetes_restarts_at_once_then_after_10_s_doubling_to_300_s() {
    let delays: Vec<_> = (0..8).map(kubernetes).collect();
    let expected = [0, 10, 20, 40, 80, 160, 300, 300].map(Duration::from_secs);
    assert_eq!(delays, expected);
    assert_eq!(kubernetes(u32::MAX), Duration::from_secs(300));
}

#[test]
fn systemd_steps_from_restart_sec_to_its_cap() {
    let delays: Vec<f64> = (1..=7).map(|i| systemd(i).as_secs_f64()).collect();
    let expected = [1.0, 1.974, 3.898, 7.696, 15.19, 30.0, 30.0];
    for (got, want) in delays.iter().zip(expected) {
        assert!((got - want).abs() < 0.01, "{delays:?}");
    }
}

#[test]
fn the_jittered_peers_stay_in_their_bands() {
    for unit in [0.0, 0.5, 0.999_999] {
        let ts = task_supervisor(3, unit).as_secs_f64();
        assert!((7.2..=8.8).contains(&ts), "{ts}");
        assert!(task_supervisor(9, unit) <= secs(33.0));
        let akka = akka(1, unit).as_secs_f64();
        assert!((6.0..7.2).contains(&akka), "{akka}");
        assert!(super::schedules::akka(10, unit) < secs(36.0));
        let grpc = grpc_jittered(secs(1.6), unit).as_secs_f64();
        assert!((1.28..=1.92).contains(&grpc), "{grpc}");
    }
    assert_eq!(grpc_backoff(secs(100.0)), secs(120.0));
}

#[tokio::test(start_paused = true)]
async fn grpc_reconnects_at_once_then_a_second_after_that_attempt_started() {
    use rand::SeedableRng;
    let start = tokio::time::Instant::now();
    let mut schedule = Schedule::new(Peer::Grpc, rand::rngs::SmallRng::seed_from_u64(1));
    assert_eq!(schedule.next(start), start);
    // The attempt failed 2 ms later: the next starts 1 s after it started.
    let second = schedule.next(start + Duration::from_millis(2));
    assert_eq!(second, start + Duration::from_secs(1));
    let third = schedule.next(second + Duration::from_millis(2));
    let waited = (third - second).as_secs_f64();
    assert!((1.28..=1.92).contains(&waited), "{waited}");
}

#[test]
fn one_seed_gives_the_same_table_twice_on_any_number_of_threads() {
    let scenario = Scenario {
        workers: 40,
        seed: 3,
    };
    let rows = rows();
    let first = measure(&scenario, &rows, 1);
    let text = table(&first);
    assert_eq!(text, table(&measure(&scenario, &rows, 2)));
    for (row, figures) in &first {
        // Every worker got back, well within the run.
        let all_back = figures
            .all_back()
            .unwrap_or_else(|| panic!("{}: not all back", row.name));
        assert!(
            all_back < Duration::from_secs(90),
            "{}: {all_back:?}",
            row.name
        );
        assert!(
            all_back >= Duration::from_secs(30),
            "{}: {all_back:?}",
            row.name
        );
    }
}
