//! The breaker's rules at the table, with no adapter: what counts, when probes go, and what a probe's
//! answer, or a stale one, does.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};
use std::time::Duration;

use tokio::time::Instant;

use super::super::{Admission, HostStates, HostTickets, ProbeDelays, ProbeSchedule, Rules};
use super::Health;
use crate::attempt::HostSignal;
use crate::guards::hosts::Host;
use rand::rngs::SmallRng;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Probes exactly `every` apart.
#[derive(Debug)]
struct Every(Duration);

impl ProbeSchedule for Every {
    fn delays(&self, _: &mut SmallRng) -> Box<dyn ProbeDelays> {
        Box::new(Fixed(self.0))
    }
}

#[derive(Debug)]
struct Fixed(Duration);

impl ProbeDelays for Fixed {
    fn next_delay(&mut self) -> Duration {
        self.0
    }
}

fn table(hold: Option<Duration>) -> HostStates {
    let rules = Rules {
        failures: 3,
        hold,
        probes: Box::new(Every(ms(100))),
    };
    HostStates::new(false, Some(rules), 7)
}

const HOST: Host = Host::from_raw(1);

fn observe(table: &HostStates, health: Health, at: Instant, tickets: &mut HostTickets) {
    table.observe(HOST, || None, HostSignal::Nothing, health, at, tickets);
}

/// Three failures in a row from `at`: the host is down.
fn trip(table: &HostStates, at: Instant) {
    for _ in 0..3 {
        observe(table, Health::Failed, at, &mut HostTickets::default());
    }
}

#[test]
fn failures_a_minute_apart_are_not_in_a_row() {
    let table = table(None);
    let t0 = Instant::now();
    for n in 0..5 {
        observe(
            &table,
            Health::Failed,
            t0 + Duration::from_secs(61) * n,
            &mut HostTickets::default(),
        );
    }
    let mut tickets = HostTickets::default();
    assert_eq!(
        table.admit(HOST, t0 + Duration::from_secs(300), &mut tickets),
        Admission::Go
    );
    // Three within a minute of each other are.
    for n in 0..3 {
        observe(
            &table,
            Health::Failed,
            t0 + Duration::from_secs(400 + 59 * n),
            &mut HostTickets::default(),
        );
    }
    let now = t0 + Duration::from_secs(400 + 118);
    assert!(matches!(
        table.admit(HOST, now, &mut tickets),
        Admission::Down(_)
    ));
}

#[test]
fn a_probe_that_hangs_does_not_hold_the_next_and_stale_answers_change_nothing() {
    let table = table(None);
    let t0 = Instant::now();
    // A request sent before the host went down, answered late.
    let mut stale = HostTickets::default();
    trip(&table, t0);
    let mut first = HostTickets::default();
    assert_eq!(
        table.admit(HOST, t0 + ms(50), &mut first),
        Admission::Down(Some(ms(50)))
    );
    assert_eq!(
        table.admit(HOST, t0 + ms(100), &mut first),
        Admission::Go,
        "the first probe"
    );
    let mut other = HostTickets::default();
    assert_eq!(
        table.admit(HOST, t0 + ms(150), &mut other),
        Admission::Down(Some(ms(50)))
    );
    // The first probe hangs; the next goes at its time all the same.
    assert_eq!(
        table.admit(HOST, t0 + ms(200), &mut other),
        Admission::Go,
        "the second probe"
    );
    // A stale success, and a stale failure, change nothing.
    observe(&table, Health::Answered, t0 + ms(210), &mut stale);
    observe(&table, Health::Failed, t0 + ms(210), &mut stale);
    let mut third = HostTickets::default();
    assert!(matches!(
        table.admit(HOST, t0 + ms(220), &mut third),
        Admission::Down(_)
    ));
    // The first probe fails at last; the second is answered: the host is back.
    observe(&table, Health::Failed, t0 + ms(250), &mut first);
    assert!(matches!(
        table.admit(HOST, t0 + ms(260), &mut third),
        Admission::Down(_)
    ));
    observe(&table, Health::Answered, t0 + ms(270), &mut other);
    assert_eq!(
        table.admit(HOST, t0 + ms(270), &mut HostTickets::default()),
        Admission::Go
    );
}

#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn held_requests_are_woken_by_the_probe_s_answer_and_go_one_pace_apart() {
    let table = table(Some(Duration::from_secs(5)));
    let t0 = Instant::now();
    trip(&table, t0);
    let woken = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&woken));
    // Four requests held, 10 ms apart.
    let mut held: Vec<HostTickets> = (0..4)
        .map(|n| {
            let mut tickets = HostTickets::default();
            let admission = table.admit(HOST, t0 + ms(10 * n), &mut tickets);
            assert_eq!(admission, Admission::HeldDown(ms(100 - 10 * n)));
            assert!(table.still_held(HOST, &tickets, &waker));
            tickets
        })
        .collect();
    // The probe, at 100 ms, is answered at 110 ms: every held request is woken once.
    let mut probe = HostTickets::default();
    assert_eq!(table.admit(HOST, t0 + ms(100), &mut probe), Admission::Go);
    observe(&table, Health::Answered, t0 + ms(110), &mut probe);
    assert_eq!(woken.0.load(Ordering::SeqCst), 4);
    // Five came while the host was down (110 ms): they go 22 ms apart, the first at once.
    let now = t0 + ms(110);
    let slots: Vec<_> = held
        .iter_mut()
        .map(|tickets| table.admit(HOST, now, tickets))
        .collect();
    assert_eq!(
        slots,
        [
            Admission::Go,
            Admission::Slot(ms(22)),
            Admission::Slot(ms(44)),
            Admission::Slot(ms(66))
        ]
    );
    // A new request does not queue behind them.
    assert_eq!(
        table.admit(HOST, now, &mut HostTickets::default()),
        Admission::Go
    );
    assert!(!table.still_held(HOST, &held[1], &waker));
    assert_eq!(table.admit(HOST, now + ms(22), &mut held[1]), Admission::Go);
}

#[test]
fn past_the_hold_s_bound_requests_fail_fast() {
    let table = table(Some(ms(250)));
    let t0 = Instant::now();
    trip(&table, t0);
    let mut tickets = HostTickets::default();
    assert_eq!(
        table.admit(HOST, t0 + ms(10), &mut tickets),
        Admission::HeldDown(ms(90))
    );
    assert_eq!(
        table.admit(HOST, t0 + ms(100), &mut tickets),
        Admission::Go,
        "the probe"
    );
    let mut late = HostTickets::default();
    assert_eq!(
        table.admit(HOST, t0 + ms(150), &mut late),
        Admission::HeldDown(ms(50))
    );
    // The next probe is due at 200 ms, the bound at 250 ms: a request at 260 ms is past it.
    let mut later = HostTickets::default();
    assert_eq!(
        table.admit(HOST, t0 + ms(200), &mut later),
        Admission::Go,
        "the probe"
    );
    assert_eq!(
        table.admit(HOST, t0 + ms(260), &mut late),
        Admission::Down(Some(ms(40)))
    );
}
