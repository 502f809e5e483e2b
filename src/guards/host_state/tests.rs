use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use super::cooldown::Phase;
use super::*;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

thread_local! {
    /// The longest call of `run`'s last run, from its first attempt to its `200`.
    static LONGEST_CALL: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
    /// Whether `run`'s network takes 1 or 2 ms each way, at random, rather than half a millisecond.
    static JITTER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[test]
fn against_a_fast_limiter_within_the_network_s_jitter_the_cooldown_trades_a_fifth_of_the_goodput_for_a_tenth_of_the_refusals()
 {
    // nginx at 800 r/s without burst admits one request per 2 ms (its arithmetic is in whole
    // milliseconds); hops of 1 or 2 ms each way make requests sent 2 ms apart arrive 1 ms apart. No
    // pace gets nothing refused, and the cooldown settles where a twentieth is: it gets through
    // about four fifths of what 1 000 callers asking at once get, for a tenth of their refusals.
    JITTER.with(|jitter| jitter.set(true));
    for seed in 1..=3 {
        let limiter = || LimitReq::new(800, 0);
        let (admitted, refusals) = run(limiter(), 1000, secs(20), seed, true);
        let (admitted_without, refusals_without) = run(limiter(), 1000, secs(20), seed, false);
        assert!(
            admitted * 4 >= admitted_without * 3,
            "seed {seed}: {admitted} admitted, {admitted_without} without the cooldown"
        );
        assert!(
            refusals * 10 <= refusals_without,
            "seed {seed}: {refusals} refusals, {refusals_without} without the cooldown"
        );
    }
}

fn refused(asked: Duration) -> HostSignal {
    HostSignal::Refused { asked, pace: None }
}

const ACCEPTED: HostSignal = HostSignal::Accepted {
    spent: None,
    pace: None,
};

#[test]
fn a_refusal_holds_its_host_until_its_delay_has_passed_and_no_other() {
    let cooldowns = HostStates::for_cooldown();
    let t0 = Instant::now();
    let (a, b) = (Host::from_raw(1), Host::from_raw(2));
    assert_eq!(cooldowns.hold(a, || t0), None);
    assert!(!cooldowns.is_armed());

    cooldowns.observe_cooldown(a, refused(secs(10)), t0, None);
    assert_eq!(
        cooldowns.hold(a, || t0 + secs(4)),
        Some(Pause {
            left: secs(6),
            asked: secs(10)
        })
    );
    assert_eq!(cooldowns.hold(b, || t0 + secs(4)), None);
    // A shorter refusal during the hold does not cut it short; a longer one extends it.
    cooldowns.observe_cooldown(a, refused(secs(1)), t0 + secs(5), None);
    assert_eq!(cooldowns.hold(a, || t0 + secs(5)).unwrap().left, secs(5));
    cooldowns.observe_cooldown(a, refused(secs(20)), t0 + secs(5), None);
    assert_eq!(cooldowns.hold(a, || t0 + secs(5)).unwrap().left, secs(20));
    // A waiter during the hold is spread over the delay asked after it.
    let mut slot = None;
    assert_eq!(
        cooldowns.admit_cooldown(a, t0 + secs(5), &mut slot),
        Admission::Spread(Pause {
            left: secs(20),
            asked: secs(20)
        })
    );
    // Long after, with nothing refused while probing, the host has left the table.
    assert_eq!(
        cooldowns.admit_cooldown(a, t0 + secs(100), &mut slot),
        Admission::Go
    );
    assert!(!cooldowns.is_armed());
    assert_eq!(cooldowns.len(), 0);
}

#[test]
fn a_hold_of_years_lasts_max_hold() {
    let cooldowns = HostStates::for_cooldown();
    let t0 = Instant::now();
    let host = Host::from_raw(1);
    cooldowns.observe_cooldown(host, refused(Duration::from_secs(999_999_999)), t0, None);
    assert_eq!(cooldowns.hold(host, || t0).unwrap().left, MAX_HOLD);
    assert_eq!(cooldowns.hold(host, || t0 + MAX_HOLD), None);
    // Then the host is probed: a request goes.
    let mut slot = None;
    assert_eq!(
        cooldowns.admit_cooldown(host, t0 + MAX_HOLD, &mut slot),
        Admission::Go
    );
    // A quota spent until the end of time, on a success, is bounded the same.
    let other = Host::from_raw(2);
    let spent = HostSignal::Accepted {
        spent: Some(Duration::MAX),
        pace: None,
    };
    cooldowns.observe_cooldown(other, spent, t0, None);
    assert_eq!(cooldowns.hold(other, || t0).unwrap().left, MAX_HOLD);
}

#[test]
fn a_stated_rate_paces_the_host_from_the_first_refusal() {
    let cooldowns = HostStates::for_cooldown();
    let t0 = Instant::now();
    let host = Host::from_raw(1);
    let signal = HostSignal::Refused {
        asked: secs(1),
        pace: Some(ms(200)),
    };
    cooldowns.observe_cooldown(host, signal, t0, None);
    let slots: Vec<_> = (0..3)
        .map(|_| {
            let mut slot = None;
            cooldowns.admit_cooldown(host, t0 + ms(10), &mut slot)
        })
        .collect();
    let at = |ms_from_now| Admission::Slot(ms(ms_from_now));
    // Held until 1 s, then one every 200 ms; no wait longer than a round of the pace (800 ms) before
    // a waiter looks at its place again.
    assert_eq!(slots, [at(800), at(800), at(800)]);
    // A request that waited for its place goes when it comes; its next attempt queues anew.
    let mut ticket = None;
    // Its place is at 1.6 s: it looks again at 0.81 s, and waits the rest.
    assert_eq!(
        cooldowns.admit_cooldown(host, t0 + ms(10), &mut ticket),
        Admission::Slot(ms(800))
    );
    assert!(ticket.is_some());
    assert_eq!(
        cooldowns.admit_cooldown(host, t0 + ms(810), &mut ticket),
        Admission::Slot(ms(790))
    );
    assert_eq!(
        cooldowns.admit_cooldown(host, t0 + ms(1600), &mut ticket),
        Admission::Go
    );
    // The ticket now says which pace it went at, for its answer; its next attempt queues anew.
    assert!(ticket.is_some());
    assert_eq!(
        cooldowns.admit_cooldown(host, t0 + ms(1600), &mut ticket),
        Admission::Slot(ms(200))
    );
}

#[test]
fn the_wait_spreads_over_the_delay_asked_and_never_past_the_limits() {
    let pause = Admission::Spread(Pause {
        left: secs(2),
        asked: secs(5),
    });
    let top = |window| window;
    let bottom = |_| Duration::ZERO;
    assert_eq!(wait(pause, secs(30), None, bottom), Ok(secs(2)));
    assert_eq!(wait(pause, secs(30), None, top), Ok(secs(7)));
    // The window shrinks to what max_retry_after and the deadline leave.
    assert_eq!(wait(pause, secs(4), None, top), Ok(secs(4)));
    assert_eq!(wait(pause, secs(30), Some(secs(6)), bottom), Ok(secs(2)));
    assert_eq!(
        wait(pause, secs(30), Some(secs(6)), top),
        Err(Outlasts::Deadline)
    );
    assert_eq!(
        wait(pause, secs(30), Some(secs(6)), |w| w
            - Duration::from_nanos(1)),
        Ok(secs(6) - Duration::from_nanos(1))
    );
    // A hold or a slot that outlasts a limit is not waited for.
    assert_eq!(
        wait(pause, secs(1), None, top),
        Err(Outlasts::MaxRetryAfter)
    );
    assert_eq!(
        wait(pause, secs(30), Some(secs(2)), top),
        Err(Outlasts::Deadline)
    );
    let slot = Admission::Slot(secs(3));
    assert_eq!(wait(slot, secs(30), None, top), Ok(secs(3)));
    assert_eq!(wait(slot, secs(2), None, top), Err(Outlasts::MaxRetryAfter));
    assert_eq!(wait(Admission::Go, secs(2), None, top), Ok(Duration::ZERO));
}

#[test]
fn zero_delays_are_refusals_without_a_hold() {
    let cooldowns = HostStates::for_cooldown();
    let t0 = Instant::now();
    let host = Host::from_raw(1);
    cooldowns.observe_cooldown(host, refused(Duration::ZERO), t0, None);
    assert_eq!(cooldowns.hold(host, || t0), None);
    assert!(cooldowns.is_armed(), "probing: the host's rate is measured");
}

#[test]
fn the_table_stays_bounded_under_100_000_hosts() {
    let cooldowns = HostStates::for_cooldown();
    let t0 = Instant::now();
    for n in 0..100_000u64 {
        // Each hold outlasts the run, so none has ended when room is needed.
        let asked = secs(200) + Duration::from_millis(n);
        cooldowns.observe_cooldown(Host::from_raw(n), refused(asked), t0, None);
        assert!(cooldowns.len() <= MAX_HOSTS);
    }
    assert!(cooldowns.len() > MAX_HOSTS * 7 / 8, "{}", cooldowns.len());
    // The entries kept are those that end last.
    assert!(cooldowns.hold(Host::from_raw(99_999), || t0).is_some());
    assert!(cooldowns.hold(Host::from_raw(0), || t0).is_none());
}

#[test]
fn ended_entries_make_room_first() {
    let cooldowns = HostStates::for_cooldown();
    let t0 = Instant::now();
    for n in 0..MAX_HOSTS as u64 {
        cooldowns.observe_cooldown(Host::from_raw(n), refused(secs(1)), t0, None);
    }
    cooldowns.observe_cooldown(
        Host::from_raw(u64::MAX),
        refused(secs(1)),
        t0 + secs(20),
        None,
    );
    assert_eq!(cooldowns.len(), 1);
}

/// nginx's `limit_req`: a leaky bucket of `rate` requests per second and `burst` excess, refusing
/// whatever would overflow it (ngx_http_limit_req_module.c, in milli-requests and milliseconds).
struct LimitReq {
    rate: i64,
    burst: i64,
    excess: i64,
    last: Option<i64>,
}

impl LimitReq {
    fn new(rate: i64, burst: i64) -> Self {
        Self {
            rate,
            burst,
            excess: 0,
            last: None,
        }
    }

    fn admits(&mut self, at: Duration) -> bool {
        let now = at.as_millis() as i64;
        let excess = match self.last {
            None => 0,
            Some(last) => (self.excess - self.rate * (now - last) + 1000).max(0),
        };
        if excess > self.burst * 1000 {
            return false;
        }
        self.excess = excess;
        self.last = Some(now);
        true
    }
}

/// How `callers` that each send a request after another for `duration`, all starting at once, fare
/// through the cooldown against `limiter`, which answers a refusal with `Retry-After: 1`: (requests
/// admitted within `duration`, refusals). A refused request retries after its own delay and a spread
/// of up to one more second, as the default policy does, and asks the cooldown before each attempt;
/// answers come back 1 ms after they are sent.
fn run(
    mut limiter: LimitReq,
    callers: usize,
    duration: Duration,
    seed: u64,
    cooldown: bool,
) -> (usize, usize) {
    #[derive(PartialEq, Eq, PartialOrd, Ord)]
    enum Event {
        Answer { caller: usize, admitted: bool },
        Ask { caller: usize },
    }
    let cooldowns = HostStates::for_cooldown();
    let host = Host::from_raw(1);
    let t0 = Instant::now();
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut events = BinaryHeap::new();
    let mut tickets = vec![None; callers];
    let mut started = vec![Duration::ZERO; callers];
    LONGEST_CALL.with(|m| m.set(Duration::ZERO));
    for caller in 0..callers {
        events.push(Reverse((Duration::ZERO, Event::Ask { caller })));
    }
    let (mut admitted_in_time, mut refusals) = (0, 0);
    let mut steps = 0;
    while let Some(Reverse((at, event))) = events.pop() {
        steps += 1;
        assert!(steps < 10_000_000, "the run does not end");
        match event {
            Event::Ask { caller } => match if cooldown {
                cooldowns.admit_cooldown(host, t0 + at, &mut tickets[caller])
            } else {
                Admission::Go
            } {
                Admission::Go => {
                    let (there, back) = if JITTER.with(|j| j.get()) {
                        (ms(rng.random_range(1..=2)), ms(rng.random_range(1..=2)))
                    } else {
                        (Duration::from_micros(500), Duration::from_micros(500))
                    };
                    let admitted = limiter.admits(at + there);
                    events.push(Reverse((
                        at + there + back,
                        Event::Answer { caller, admitted },
                    )));
                }
                admission => {
                    let wait = wait(admission, secs(30), None, |w| w.mul_f64(rng.random()));
                    events.push(Reverse((at + wait.unwrap(), Event::Ask { caller })));
                }
            },
            Event::Answer { caller, admitted } => {
                if std::env::var("TRACE").is_ok() {
                    let phase = cooldowns
                        .lock()
                        .hosts
                        .values()
                        .next()
                        .and_then(|e| e.cooldown.as_ref())
                        .map(|c| match c.phase {
                            Phase::Paced(p) => format!(
                                "pace {:?} refused_at {:?} good {:?}",
                                p.pace, p.refused_at, p.good
                            ),
                            Phase::Probing(p) => format!("{p:?}"),
                        });
                    eprintln!(
                        "{:>8.3} {caller:>2} {} {:?}",
                        at.as_secs_f64(),
                        if admitted { "ok " } else { "429" },
                        phase
                    );
                }
                if admitted {
                    cooldowns.observe_cooldown(host, ACCEPTED, t0 + at, tickets[caller]);
                    let took = at - started[caller];
                    LONGEST_CALL.with(|m| m.set(m.get().max(took)));
                    started[caller] = at;
                    // The caller's next request is a call of its own.
                    tickets[caller] = None;
                    if at <= duration {
                        admitted_in_time += 1;
                        events.push(Reverse((at, Event::Ask { caller })));
                    }
                } else {
                    refusals += 1;
                    cooldowns.observe_cooldown(host, refused(secs(1)), t0 + at, tickets[caller]);
                    let retry = secs(1) + secs(1).mul_f64(rng.random());
                    events.push(Reverse((at + retry, Event::Ask { caller })));
                }
            }
        }
    }
    (admitted_in_time, refusals)
}

/// The goodput and the refusals of 50 callers against `limiter` for a minute, with the cooldown and
/// without, for 20 seeds; the cooldown gets at least 90 % of `rate` through (the first second the
/// limiter asks for and the cooldown's measuring of the rate cost a few turns), with fewer refusals,
/// and no call waits more than 20 s (its turn comes in order, the retry of a refused one first).
fn compare(limiter: fn() -> LimitReq, rate: f64) {
    for seed in 1..=20 {
        let duration = secs(60);
        let (admitted, refusals) = run(limiter(), 50, duration, seed, true);
        let longest = LONGEST_CALL.with(std::cell::Cell::get);
        let (_, refusals_without) = run(limiter(), 50, duration, seed, false);
        let goodput = admitted as f64 / duration.as_secs_f64();
        assert!(goodput >= 0.9 * rate, "seed {seed}: {goodput:.2}/s");
        assert!(
            refusals < refusals_without,
            "seed {seed}: {refusals} refusals, {refusals_without} without the cooldown"
        );
        assert!(
            longest <= secs(20),
            "seed {seed}: a call waited {longest:?}"
        );
    }
}

#[test]
fn against_a_leaky_bucket_the_waiters_get_through_at_its_rate() {
    // 5 requests a second, no burst: nginx's `limit_req` as it comes, which refuses a request that
    // comes less than 200 ms after the last it admitted.
    compare(|| LimitReq::new(5, 0), 5.0);
}

#[test]
fn against_a_bucket_with_a_burst_the_waiters_get_through_at_its_rate() {
    // `limit_req ... burst=5 nodelay`.
    compare(|| LimitReq::new(5, 5), 5.0);
}
