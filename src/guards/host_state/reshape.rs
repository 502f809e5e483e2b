//! A reload's shape for the table: the cooldown switched on or off, the breaker's rules changed, on
//! or off; and what each entry keeps under it.

use std::sync::atomic::Ordering;

use crate::time::Instant;

use super::{HostStates, Rules, Table};

impl HostStates {
    /// Gives the table the cooldown's switch and the breaker's `rules` at `now`, keeping what its
    /// entries know where it means the same under them:
    ///
    /// - the cooldown on, and the breaker on, as they were: every pause and pace stays, every host
    ///   and route down stays down, the requests held for it held;
    /// - the breaker's rules changed: the failures in a row count toward the new threshold from the
    ///   next one, the gateway failures by the new scope; a host down stays down, its probes due as
    ///   they were, and the bound of its hold counts from when it went down, which the requests held
    ///   meet when they next look (see `HostHealth::rehold`);
    /// - the cooldown turned off: the pauses and paces are forgotten, and the requests waiting for
    ///   one go when they next look;
    /// - the breaker turned off: every host and route is up, its failures forgotten, and the
    ///   requests held for one are let go at once.
    pub(crate) fn reshape(&self, cooldown: bool, rules: Option<Rules>, now: Instant) {
        let mut table = self.lock();
        let Table {
            hosts,
            rules: current,
            ..
        } = &mut *table;
        if !cooldown {
            for entry in hosts.values_mut() {
                entry.cooldown = None;
            }
        }
        match (&rules, current.as_ref()) {
            (None, Some(_)) => {
                for entry in hosts.values_mut() {
                    entry.health.release();
                }
            }
            (Some(new), Some(old)) if new.hold != old.hold => {
                for entry in hosts.values_mut() {
                    entry.health.rehold(new.hold);
                }
            }
            _ => {}
        }
        *current = rules;
        self.cooldown.store(cooldown, Ordering::Relaxed);
        self.breaker.store(current.is_some(), Ordering::Relaxed);
        // An entry left with nothing to keep goes; the table disarms itself when empty (`Guard`).
        hosts.retain(|_, entry| entry.advance(now));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};
    use std::time::Duration;

    use crate::time::Instant;
    use rand::rngs::SmallRng;

    use super::super::{
        Admission, Evidence, HostState, HostStates, HostTickets, Pause, Place, ProbeDelays,
        ProbeSchedule, Rules,
    };
    use crate::attempt::HostSignal;
    use crate::guards::hosts::Host;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Probes this far apart.
    #[derive(Debug, Clone, Copy)]
    struct Every(Duration);

    impl ProbeSchedule for Every {
        fn delays(&self, _: &mut SmallRng) -> Box<dyn ProbeDelays> {
            Box::new(*self)
        }
    }

    impl ProbeDelays for Every {
        fn next_delay(&mut self) -> Duration {
            self.0
        }
    }

    /// Probes 100 ms apart.
    fn rules(failures: u32, hold: Option<Duration>) -> Rules {
        Rules {
            failures,
            hold,
            probes: Box::new(Every(ms(100))),
            answers_per_host: false,
        }
    }

    /// Probes 10 s apart.
    fn slow_probes(hold: Option<Duration>) -> Rules {
        Rules {
            probes: Box::new(Every(ms(10_000))),
            ..rules(3, hold)
        }
    }

    const HOST: Host = Host::from_raw(1);
    const PLACE: Place = Place::host(HOST);

    fn observe(table: &HostStates, evidence: Evidence, at: Instant, tickets: &mut HostTickets) {
        let none = || (None, None);
        table.observe(PLACE, none, HostSignal::Nothing, evidence, at, tickets);
    }

    fn fail(table: &HostStates, times: u32, at: Instant) {
        for _ in 0..times {
            observe(table, Evidence::HostFailed, at, &mut HostTickets::default());
        }
    }

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn is_down(table: &HostStates) -> bool {
        matches!(table.state(HOST, Instant::now()), HostState::Down { .. })
    }

    #[test]
    fn a_breaker_of_another_threshold_keeps_a_host_down_and_its_held_requests_held() {
        let table = HostStates::new(false, Some(rules(3, Some(ms(10_000)))), 7);
        let t0 = Instant::now();
        fail(&table, 3, t0);
        let woken = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&woken));
        let mut held = HostTickets::default();
        assert_eq!(
            table.admit(PLACE, t0 + ms(10), &mut held, true),
            Admission::HeldDown(ms(90))
        );
        assert!(table.still_held(&held, &waker));

        table.reshape(false, Some(rules(5, Some(ms(10_000)))), t0 + ms(20));
        assert!(is_down(&table));
        assert!(table.still_held(&held, &waker), "still held");
        assert_eq!(woken.0.load(Ordering::SeqCst), 0);
        // The probe at 100 ms, as it was due, brings it back, and lets the held request go.
        let mut probe = HostTickets::default();
        assert_eq!(
            table.admit(PLACE, t0 + ms(100), &mut probe, true),
            Admission::Go
        );
        observe(&table, Evidence::Answered, t0 + ms(110), &mut probe);
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert!(!is_down(&table));
    }

    #[test]
    fn the_failures_in_a_row_so_far_count_toward_a_new_threshold() {
        let table = HostStates::new(false, Some(rules(3, None)), 7);
        let t0 = Instant::now();
        fail(&table, 2, t0);
        table.reshape(false, Some(rules(5, None)), t0);
        fail(&table, 2, t0);
        assert_eq!(table.state(HOST, t0), HostState::Up { failures: 4 });
        fail(&table, 1, t0);
        assert!(matches!(table.state(HOST, t0), HostState::Down { .. }));
        // Lowered below the failures so far: the next one puts it down.
        let other = HostStates::new(false, Some(rules(5, None)), 7);
        fail(&other, 3, t0);
        other.reshape(false, Some(rules(2, None)), t0);
        assert_eq!(other.state(HOST, t0), HostState::Up { failures: 3 });
        fail(&other, 1, t0);
        assert!(matches!(other.state(HOST, t0), HostState::Down { .. }));
    }

    #[test]
    fn a_new_hold_counts_from_when_the_host_went_down() {
        let table = HostStates::new(false, Some(slow_probes(Some(ms(30_000)))), 7);
        let t0 = Instant::now();
        fail(&table, 3, t0);
        let admit = |at| table.admit(PLACE, t0 + at, &mut HostTickets::default(), false);
        // Held until the probe at 10 s, within a hold of 30 s.
        assert_eq!(admit(ms(50)), Admission::HeldDown(ms(9_950)));
        // A hold of 1 s counts from t0: held until 1 s, and then failing fast until the probe.
        table.reshape(false, Some(slow_probes(Some(ms(1_000)))), t0 + ms(500));
        assert_eq!(admit(ms(550)), Admission::HeldDown(ms(450)));
        assert_eq!(admit(ms(1_050)), Admission::Down(Some(ms(8_950))));
        // Failing fast from the start.
        table.reshape(false, Some(slow_probes(None)), t0 + ms(600));
        assert_eq!(admit(ms(600)), Admission::Down(Some(ms(9_400))));
    }

    #[test]
    fn the_breaker_turned_off_lets_the_held_requests_go_and_forgets_the_host() {
        let table = HostStates::new(false, Some(rules(3, Some(ms(10_000)))), 7);
        let t0 = Instant::now();
        fail(&table, 3, t0);
        let woken = Arc::new(Count::default());
        let waker = Waker::from(Arc::clone(&woken));
        let mut held = HostTickets::default();
        assert!(matches!(
            table.admit(PLACE, t0, &mut held, true),
            Admission::HeldDown(_)
        ));
        assert!(table.still_held(&held, &waker));
        table.reshape(false, None, t0 + ms(10));
        assert_eq!(woken.0.load(Ordering::SeqCst), 1);
        assert!(!table.still_held(&held, &waker));
        assert!(!table.is_armed(), "nothing left in the table");
        assert!(!table.has_breaker());
        assert_eq!(
            table.admit(PLACE, t0 + ms(10), &mut held, true),
            Admission::Go
        );
        // Turned on again, it knows nothing of the host.
        table.reshape(false, Some(rules(3, None)), t0 + ms(20));
        assert_eq!(
            table.state(HOST, t0 + ms(20)),
            HostState::Up { failures: 0 }
        );
    }

    #[test]
    fn a_pause_stays_while_the_cooldown_is_on_and_is_forgotten_when_it_is_turned_off() {
        let table = HostStates::new(true, None, 7);
        let t0 = Instant::now();
        let refused = HostSignal::Refused {
            asked: ms(10_000),
            pace: None,
        };
        let none = || (None, None);
        let mut tickets = HostTickets::default();
        table.observe(PLACE, none, refused, Evidence::Nothing, t0, &mut tickets);
        let pause = Some(Pause {
            left: ms(9_000),
            asked: ms(10_000),
        });
        assert_eq!(table.hold(HOST, || t0 + ms(1_000)), pause);
        // A breaker added: the pause stays.
        table.reshape(true, Some(rules(3, None)), t0 + ms(1_000));
        assert_eq!(table.hold(HOST, || t0 + ms(1_000)), pause);
        table.reshape(false, Some(rules(3, None)), t0 + ms(1_000));
        assert_eq!(table.hold(HOST, || t0 + ms(1_000)), None);
        // A request of a policy from before the reload still speaks of a pause: nothing holds.
        table.observe(PLACE, none, refused, Evidence::Nothing, t0, &mut tickets);
        assert_eq!(table.hold(HOST, || t0 + ms(1_000)), None);
    }
}
