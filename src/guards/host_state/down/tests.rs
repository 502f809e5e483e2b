//! The breaker's rules at the table, with no adapter: what counts, when probes go, and what a probe's
//! answer, or a stale one, does.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Wake, Waker};
use std::time::Duration;

use crate::time::Instant;

use super::super::{
    Admission, Deadline, Evidence, HostStates, HostTickets, Place, ProbeDelays, ProbeSchedule,
    Rules,
};
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
        answers_per_host: false,
    };
    HostStates::new(false, Some(rules), 7)
}

const HOST: Host = Host::from_raw(1);

const PLACE: Place = Place::host(HOST);

fn observe(table: &HostStates, evidence: Evidence, at: Instant, tickets: &mut HostTickets) {
    let none = || (None, None);
    table.observe(PLACE, none, HostSignal::Nothing, evidence, at, tickets);
}

/// Three failures in a row from `at`: the host is down.
fn trip(table: &HostStates, at: Instant) {
    for _ in 0..3 {
        observe(table, Evidence::HostFailed, at, &mut HostTickets::default());
    }
}

#[test]
fn failures_a_minute_apart_are_not_in_a_row() {
    let table = table(None);
    let t0 = Instant::now();
    for n in 0..5 {
        observe(
            &table,
            Evidence::HostFailed,
            t0 + Duration::from_secs(61) * n,
            &mut HostTickets::default(),
        );
    }
    let mut tickets = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + Duration::from_secs(300), &mut tickets, true),
        Admission::Go
    );
    // Three within a minute of each other are.
    for n in 0..3 {
        observe(
            &table,
            Evidence::HostFailed,
            t0 + Duration::from_secs(400 + 59 * n),
            &mut HostTickets::default(),
        );
    }
    let now = t0 + Duration::from_secs(400 + 118);
    assert!(matches!(
        table.admit(PLACE, now, &mut tickets, true),
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
        table.admit(PLACE, t0 + ms(50), &mut first, true),
        Admission::Down(Some(ms(50)))
    );
    assert_eq!(
        table.admit(PLACE, t0 + ms(100), &mut first, true),
        Admission::Go,
        "the first probe"
    );
    let mut other = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + ms(150), &mut other, true),
        Admission::Down(Some(ms(50)))
    );
    // The first probe hangs; the next goes at its time all the same.
    assert_eq!(
        table.admit(PLACE, t0 + ms(200), &mut other, true),
        Admission::Go,
        "the second probe"
    );
    // A stale success, and a stale failure, change nothing.
    observe(&table, Evidence::Answered, t0 + ms(210), &mut stale);
    observe(&table, Evidence::HostFailed, t0 + ms(210), &mut stale);
    let mut third = HostTickets::default();
    assert!(matches!(
        table.admit(PLACE, t0 + ms(220), &mut third, true),
        Admission::Down(_)
    ));
    // The first probe fails at last; the second is answered: the host is back.
    observe(&table, Evidence::HostFailed, t0 + ms(250), &mut first);
    assert!(matches!(
        table.admit(PLACE, t0 + ms(260), &mut third, true),
        Admission::Down(_)
    ));
    observe(&table, Evidence::Answered, t0 + ms(270), &mut other);
    assert_eq!(
        table.admit(PLACE, t0 + ms(270), &mut HostTickets::default(), true),
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
            let admission = table.admit(PLACE, t0 + ms(10 * n), &mut tickets, true);
            assert_eq!(admission, Admission::HeldDown(ms(100 - 10 * n)));
            assert!(table.still_held(&tickets, &waker));
            tickets
        })
        .collect();
    // The probe, at 100 ms, is answered at 110 ms: every held request is woken once.
    let mut probe = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + ms(100), &mut probe, true),
        Admission::Go
    );
    observe(&table, Evidence::Answered, t0 + ms(110), &mut probe);
    assert_eq!(woken.0.load(Ordering::SeqCst), 4);
    // Five came while the host was down (110 ms): they go 22 ms apart, the first at once.
    let now = t0 + ms(110);
    let slots: Vec<_> = held
        .iter_mut()
        .map(|tickets| table.admit(PLACE, now, tickets, true))
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
        table.admit(PLACE, now, &mut HostTickets::default(), true),
        Admission::Go
    );
    assert!(!table.still_held(&held[1], &waker));
    assert_eq!(
        table.admit(PLACE, now + ms(22), &mut held[1], true),
        Admission::Go
    );
}

/// A deadline of 5 s with `ms` left.
fn left(ms: u64) -> Deadline {
    Deadline::Left {
        left: Duration::from_millis(ms),
        of: Duration::from_secs(5),
    }
}

/// Requests held from `t0` while the host is down, each at its time (ms) with its deadline, then
/// woken by the probe sent at 100 ms and answered at 110 ms: their tickets, and that 110 ms.
fn held_then_back(
    table: &HostStates,
    t0: Instant,
    requests: impl IntoIterator<Item = (u64, Deadline)>,
) -> (Vec<HostTickets>, Instant) {
    let waker = Waker::from(Arc::new(Count::default()));
    let held = (requests.into_iter())
        .map(|(at, deadline)| {
            let mut tickets = HostTickets::default();
            table.admit(PLACE, t0 + ms(at), &mut tickets, deadline);
            assert!(table.still_held(&tickets, &waker));
            tickets
        })
        .collect();
    let mut probe = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + ms(100), &mut probe, true),
        Admission::Go
    );
    observe(table, Evidence::Answered, t0 + ms(110), &mut probe);
    (held, t0 + ms(110))
}

/// The held requests go oldest first, whatever the order they ask in once the host is back: the
/// oldest have the least time left. (The turns were given in the order of asking.)
#[test]
fn held_requests_go_oldest_first_whatever_the_order_they_ask_in() {
    let table = table(Some(Duration::from_secs(5)));
    let t0 = Instant::now();
    trip(&table, t0);
    let (mut held, now) = held_then_back(&table, t0, (0..4).map(|n| (10 * n, true.into())));
    // The youngest asks first.
    let slots: Vec<_> = (held.iter_mut().rev())
        .map(|tickets| table.admit(PLACE, now, tickets, true))
        .collect();
    assert_eq!(
        slots,
        [
            Admission::Slot(ms(66)),
            Admission::Slot(ms(44)),
            Admission::Slot(ms(22)),
            Admission::Go
        ]
    );
    // A new request does not queue behind them.
    assert_eq!(
        table.admit(PLACE, now + ms(1), &mut HostTickets::default(), true),
        Admission::Go
    );
}

/// A held request whose own deadline passed before the host came back takes no turn: the turns go
/// to those that can still go. (Against a real port refusing for 10 s, one held call whose deadline
/// had just passed, not yet polled, took the first turn, and the three after it, with 38 to 77 ms
/// left, were each given a turn 1 to 2 ms past their deadlines.)
#[test]
fn a_held_request_past_its_deadline_takes_no_turn() {
    let table = table(Some(Duration::from_secs(5)));
    let t0 = Instant::now();
    trip(&table, t0);
    // Held at 0, 10 and 20 ms; the first's deadline passes at 100 ms, before the host is back.
    let (mut held, now) = held_then_back(
        &table,
        t0,
        [(0, left(100)), (10, left(4000)), (20, left(4000))],
    );
    // Four asked in 110 ms: a turn every 27.5 ms, the first at once.
    let slots: Vec<_> = (held.iter_mut().skip(1))
        .map(|tickets| table.admit(PLACE, now, tickets, true))
        .collect();
    assert_eq!(
        slots,
        [
            Admission::Go,
            Admission::Slot(Duration::from_micros(27_500))
        ]
    );
}

/// A held request goes no later than leaves room for its answer before its own deadline (100 ms,
/// or a quarter of its deadline), whatever its turn. (Let go at their turns, which came about as
/// near their deadlines as the oldest's when the host came back, 15 of 486 held calls behind a real
/// blackhole reached their deadlines unsent.)
#[test]
fn a_held_request_goes_in_time_for_its_answer_whatever_its_turn() {
    let table = table(Some(Duration::from_secs(5)));
    let t0 = Instant::now();
    trip(&table, t0);
    let (mut held, now) = held_then_back(&table, t0, (0..4).map(|n| (10 * n, true.into())));
    // Turns 22 ms apart from the first, at once: the third's (44 ms) leaves it no room, the
    // fourth's (66 ms) 84 ms where it needs 100.
    let deadlines = [true.into(), true.into(), left(100), left(150)];
    let slots: Vec<_> = (held.iter_mut().zip(deadlines))
        .map(|(tickets, deadline)| table.admit(PLACE, now, tickets, deadline))
        .collect();
    assert_eq!(
        slots,
        [
            Admission::Go,
            Admission::Slot(ms(22)),
            Admission::Go,
            Admission::Slot(ms(50))
        ]
    );
    // Asking again when its room begins, the fourth goes.
    assert_eq!(
        table.admit(PLACE, now + ms(50), &mut held[3], left(100)),
        Admission::Go
    );
}

#[test]
fn past_the_hold_s_bound_new_requests_fail_fast_and_those_waiting_wait_on_within_their_deadline() {
    let table = table(Some(ms(250)));
    let t0 = Instant::now();
    trip(&table, t0);
    let mut tickets = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + ms(10), &mut tickets, true),
        Admission::HeldDown(ms(90))
    );
    assert_eq!(
        table.admit(PLACE, t0 + ms(100), &mut tickets, true),
        Admission::Go,
        "the probe"
    );
    let mut late = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + ms(150), &mut late, true),
        Admission::HeldDown(ms(50))
    );
    let mut no_deadline = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + ms(150), &mut no_deadline, false),
        Admission::HeldDown(ms(50))
    );
    // The next probe is due at 200 ms, the bound at 250 ms: a request at 260 ms is past it.
    let mut later = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + ms(200), &mut later, true),
        Admission::Go,
        "the probe"
    );
    // A new request fails fast.
    assert_eq!(
        table.admit(PLACE, t0 + ms(260), &mut HostTickets::default(), true),
        Admission::Down(Some(ms(40)))
    );
    // One that was waiting waits on, within its deadline, until the next probe (which it may be);
    // one with no deadline of its own does not wait past the bound.
    assert_eq!(
        table.admit(PLACE, t0 + ms(260), &mut late, true),
        Admission::HeldDown(ms(40))
    );
    assert_eq!(
        table.admit(PLACE, t0 + ms(260), &mut no_deadline, false),
        Admission::Down(Some(ms(40)))
    );
    assert_eq!(
        table.admit(PLACE, t0 + ms(300), &mut late, true),
        Admission::Go,
        "the probe"
    );
}

#[test]
fn a_held_request_whose_caller_gives_up_leaves_no_waker_and_is_not_counted_held() {
    let table = table(Some(Duration::from_secs(5)));
    let t0 = Instant::now();
    trip(&table, t0);
    let woken = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&woken));
    let mut held: Vec<HostTickets> = (0..100)
        .map(|_| {
            let mut tickets = HostTickets::default();
            let admission = table.admit(PLACE, t0 + ms(10), &mut tickets, true);
            assert!(matches!(admission, Admission::HeldDown(_)));
            assert!(table.still_held(&tickets, &waker));
            tickets
        })
        .collect();
    assert_eq!(
        Arc::strong_count(&woken),
        102,
        "100 wakers kept, beside ours"
    );
    let gone: Vec<HostTickets> = held.drain(10..).collect();
    for tickets in &gone {
        table.forget(tickets);
    }
    assert_eq!(
        Arc::strong_count(&woken),
        12,
        "the 90 given up keep nothing"
    );
    let state = table.state(HOST, t0 + ms(20));
    assert!(
        matches!(state, super::super::HostState::Down { held: 10, .. }),
        "{state:?}"
    );
    // The probe is answered: the ten that wait are woken, and let go at the rate requests came.
    let mut probe = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + ms(100), &mut probe, true),
        Admission::Go
    );
    observe(&table, Evidence::Answered, t0 + ms(110), &mut probe);
    assert_eq!(woken.0.load(Ordering::SeqCst), 10);
    assert_eq!(Arc::strong_count(&woken), 2);
}

/// Another host's routes: `/reports` and `/items`.
const REPORTS: Place = Place {
    host: HOST,
    health: HOST,
    route: Some(Host::from_raw(2)),
    replica: None,
};
const ITEMS: Place = Place {
    host: HOST,
    health: HOST,
    route: Some(Host::from_raw(3)),
    replica: None,
};

fn observe_at(table: &HostStates, place: Place, evidence: Evidence, at: Instant) {
    let names = || (Some("api.test".into()), Some("/reports".into()));
    let mut tickets = HostTickets::default();
    table.observe(
        place,
        names,
        HostSignal::Nothing,
        evidence,
        at,
        &mut tickets,
    );
}

#[test]
fn gateway_failures_put_their_route_down_and_the_host_s_other_routes_go() {
    let table = table(Some(Duration::from_secs(10)));
    let t0 = Instant::now();
    for _ in 0..10 {
        observe_at(&table, REPORTS, Evidence::RouteFailed, t0);
    }
    assert!(matches!(
        table.admit(REPORTS, t0 + ms(10), &mut HostTickets::default(), true),
        Admission::HeldDown(_)
    ));
    for _ in 0..100 {
        assert_eq!(
            table.admit(ITEMS, t0 + ms(10), &mut HostTickets::default(), true),
            Admission::Go
        );
    }
    // The host answered every time: it is up, with no failure counted.
    assert_eq!(
        table.state(HOST, t0 + ms(10)),
        super::super::HostState::Up { failures: 0 }
    );
    let report = table.report(t0 + ms(10));
    assert_eq!(report.len(), 1);
    assert_eq!(
        (report[0].host.as_str(), report[0].route.as_deref()),
        ("api.test", Some("/reports"))
    );
    // Silence is the host's: three unanswered attempts, on any route, hold every route.
    for place in [ITEMS, REPORTS, ITEMS] {
        observe_at(&table, place, Evidence::HostFailed, t0 + ms(20));
    }
    assert!(matches!(
        table.admit(ITEMS, t0 + ms(30), &mut HostTickets::default(), true),
        Admission::HeldDown(_)
    ));
}

#[test]
fn with_answers_counted_per_host_gateway_failures_on_any_route_put_the_host_down() {
    let rules = Rules {
        failures: 3,
        hold: None,
        probes: Box::new(Every(ms(100))),
        answers_per_host: true,
    };
    let table = HostStates::new(false, Some(rules), 7);
    let t0 = Instant::now();
    for place in [REPORTS, ITEMS, REPORTS] {
        observe_at(&table, place, Evidence::RouteFailed, t0);
    }
    assert!(matches!(
        table.admit(ITEMS, t0 + ms(10), &mut HostTickets::default(), true),
        Admission::Down(_)
    ));
}

#[test]
fn a_full_table_never_evicts_a_host_that_requests_wait_on() {
    let table = table(Some(Duration::from_secs(60)));
    let t0 = Instant::now();
    trip(&table, t0);
    let woken = Arc::new(Count::default());
    let waker = Waker::from(Arc::clone(&woken));
    let mut held = HostTickets::default();
    assert!(matches!(
        table.admit(PLACE, t0 + ms(10), &mut held, true),
        Admission::HeldDown(_)
    ));
    assert!(table.still_held(&held, &waker));
    // Ten thousand other hosts go down after it, and would outlast it: a full table evicts the
    // entries that end first.
    for n in 0..10_000u64 {
        let other = Place::host(Host::from_raw(1_000 + n));
        let at = t0 + ms(20) + Duration::from_micros(n);
        for _ in 0..3 {
            let names = || (None, None);
            let mut tickets = HostTickets::default();
            let failed = Evidence::HostFailed;
            table.observe(other, names, HostSignal::Nothing, failed, at, &mut tickets);
        }
        assert!(table.len() <= super::super::MAX_HOSTS);
    }
    assert!(
        table.still_held(&held, &waker),
        "still waiting, still known"
    );
    // Its probe answered, it is woken and let go.
    let mut probe = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + ms(100), &mut probe, true),
        Admission::Go
    );
    observe(&table, Evidence::Answered, t0 + ms(110), &mut probe);
    assert_eq!(woken.0.load(Ordering::SeqCst), 1);
}

#[test]
fn gateway_failures_from_three_routes_with_no_answer_between_put_the_host_down() {
    let table = table(None);
    let t0 = Instant::now();
    let route = |n: u64| Place {
        host: HOST,
        health: HOST,
        route: Some(Host::from_raw(100 + n)),
        replica: None,
    };
    // The table's rules: 3 failures in a row. Five 502s on two routes: one route is down, the host
    // is not.
    for n in [0, 1, 0, 1, 0] {
        observe_at(&table, route(n), Evidence::RouteFailed, t0);
    }
    assert_eq!(
        table.admit(route(7), t0, &mut HostTickets::default(), true),
        Admission::Go
    );
    // An answer on another route starts the host's count over; then 502s on three routes (a
    // gateway whose backend is gone, asked for paths with ids in them) put it down.
    observe_at(&table, route(7), Evidence::Answered, t0);
    for n in [10, 11, 12] {
        assert_eq!(
            table.admit(route(20), t0, &mut HostTickets::default(), true),
            Admission::Go
        );
        observe_at(&table, route(n), Evidence::RouteFailed, t0);
    }
    assert!(matches!(
        table.admit(route(20), t0 + ms(1), &mut HostTickets::default(), true),
        Admission::Down(_)
    ));
    assert!(matches!(
        table.state(HOST, t0 + ms(1)),
        super::super::HostState::Down { .. }
    ));
}

/// A request with less than 100 ms (or a quarter of its deadline) left does not go as a down host's
/// probe, which its deadline would cut: it leaves the probe due for the next request to ask and
/// waits, asking again halfway to its deadline; one with the time to see the answer goes.
#[test]
fn a_request_too_near_its_deadline_leaves_the_probe_to_the_next_and_waits() {
    let table = table(Some(Duration::from_secs(10)));
    let t0 = Instant::now();
    trip(&table, t0);
    let near = Deadline::Left {
        left: ms(60),
        of: Duration::from_secs(5),
    };
    let mut late = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + ms(100), &mut late, near),
        Admission::HeldDown(ms(30)),
        "held, not the probe"
    );
    assert!(!late.down.is_some_and(|ticket| ticket.is_probe()));
    // A fresh request, with its whole deadline, takes the probe that is still due.
    let mut fresh = HostTickets::default();
    assert_eq!(
        table.admit(PLACE, t0 + ms(100), &mut fresh, true),
        Admission::Go,
        "the probe"
    );
    assert!(fresh.down.is_some_and(|ticket| ticket.is_probe()));
    // A short deadline is judged by its quarter: 40 ms left of 100 is room enough.
    let short = Deadline::Left {
        left: ms(40),
        of: ms(100),
    };
    assert!(short.leaves_room_for_a_probe());
    assert!(!near.leaves_room_for_a_probe());
}
