//! The restarts of one long-running task, decided without I/O: the delay before each restart, the
//! reset after a healthy run, and the restart limit. The adapters tell it when a run ended and how
//! long it lasted, and sleep what it answers.

use std::collections::VecDeque;
use std::time::Duration;

use crate::time::Instant;
use rand::Rng;
use rand::rngs::SmallRng;

use crate::attempt::RestartEvent;
use crate::engine::backoff::Delays;
use crate::engine::restart_policy::RestartPolicy;
use crate::observe::{log, metrics};

/// What follows a run that ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RestartDecision {
    /// Sleep this long, then run the task again.
    Restart(Duration),
    /// The restart limit is reached: end with the run's result.
    GiveUp,
}

/// How a run ended, as the adapter tells it.
#[derive(Clone, Copy)]
pub(crate) struct RunEnd<'a> {
    /// When, and after how long up.
    pub(crate) at: Instant,
    pub(crate) uptime: Duration,
    /// Whether it failed; `false` for a run that returned `Ok`.
    pub(crate) failed: bool,
    /// Its error, when the adapter has it.
    pub(crate) error: Option<&'a dyn std::fmt::Display>,
}

/// The restarts of one supervision: its jitter, its failures in a row and the restarts that count
/// against the limit.
#[derive(Debug)]
pub(crate) struct RestartState {
    rng: SmallRng,
    /// The delays of the failures in a row; drawn anew, from `rng`, after a healthy run.
    delays: Option<Delays>,
    /// Runs in a row that ended before `healthy_after`.
    failures: u32,
    /// Restarts made.
    restarts: u32,
    /// The sum of their delays.
    slept: Duration,
    /// The restart limit, `(n, within)`, if this schedule applies one.
    limit: Option<(u32, Duration)>,
    /// When the latest restarts happen, oldest first, for the restart limit: never more than the
    /// limit's count.
    recent: VecDeque<Instant>,
}

impl RestartState {
    /// A schedule drawing its jitter from `rng`, giving up past `limit` if there is one.
    pub(crate) fn new(rng: SmallRng, limit: Option<(u32, Duration)>) -> Self {
        Self {
            rng,
            delays: None,
            failures: 0,
            restarts: 0,
            slept: Duration::ZERO,
            limit,
            recent: VecDeque::new(),
        }
    }

    /// A run ended: restart it after a delay, or give up. Reports either, as the retry engine reports
    /// its decisions: the `tracing` event, the metrics, and the policy's hook for a restart.
    pub(crate) fn run_ended(&mut self, policy: &RestartPolicy, run: RunEnd<'_>) -> RestartDecision {
        let RunEnd {
            at: now,
            uptime,
            failed,
            error,
        } = run;
        let healthy = policy.healthy_after().is_some_and(|after| uptime >= after);
        let delay = if healthy {
            self.failures = 0;
            self.delays = None;
            Duration::ZERO
        } else {
            self.failures = self.failures.saturating_add(1);
            let rng = &mut self.rng;
            let delays =
                (self.delays).get_or_insert_with(|| policy.backoff().delays_seeded(rng.next_u64()));
            delays.next().unwrap_or_default()
        };
        if let Some((max_restarts, within)) = self.limit {
            // A delay too long for the clock is counted as a restart now: no earlier restart could
            // fall within its window anyway.
            let at = now.checked_add(delay).unwrap_or(now);
            if let Some(since) = at.checked_sub(within) {
                while self.recent.front().is_some_and(|&restart| restart <= since) {
                    self.recent.pop_front();
                }
            }
            if self.recent.len() >= max_restarts as usize {
                log::restarts_given_up(self.runs(), self.failures, uptime, self.slept, error);
                metrics::restarts_given_up(uptime, failed);
                return RestartDecision::GiveUp;
            }
            self.recent.push_back(at);
        }
        self.restarts = self.restarts.saturating_add(1);
        self.slept = self.slept.saturating_add(delay);
        let event = RestartEvent {
            restart: self.restarts,
            failures: self.failures,
            uptime,
            delay,
            failed,
            error,
        };
        log::restarting(&event);
        metrics::restart(&event);
        policy.notify(&event);
        RestartDecision::Restart(delay)
    }

    /// The runs so far: the first and one per restart.
    pub(crate) fn runs(&self) -> u32 {
        self.restarts.saturating_add(1)
    }

    /// Restarts made.
    pub(crate) fn restarts(&self) -> u32 {
        self.restarts
    }

    /// Runs in a row that ended before `healthy_after`.
    #[cfg(test)]
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// The delays of the restarts made, added up.
    pub(crate) fn slept(&self) -> Duration {
        self.slept
    }
}

impl RestartPolicy {
    /// A fresh schedule of restarts, for one supervision, with its own jitter stream.
    pub(crate) fn start(&self) -> RestartState {
        RestartState::new(self.shared.streams.next_stream(), self.max_restarts())
    }

    /// A fresh schedule of restarts that never gives up, for an adapter that has nothing to give up
    /// with.
    #[cfg(feature = "tower")]
    pub(crate) fn start_without_limit(&self) -> RestartState {
        RestartState::new(self.shared.streams.next_stream(), None)
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::engine::backoff::{Backoff, Jitter};

    const SECOND: Duration = Duration::from_secs(1);

    fn policy(builder: crate::RestartPolicyBuilder) -> RestartPolicy {
        builder.build().unwrap()
    }

    fn state(policy: &RestartPolicy) -> RestartState {
        RestartState::new(SmallRng::seed_from_u64(1), policy.max_restarts())
    }

    /// A run that failed after `uptime`, ending at `at`, without an error to show.
    fn failed(uptime: Duration, at: Instant) -> RunEnd<'static> {
        RunEnd {
            at,
            uptime,
            failed: true,
            error: None,
        }
    }

    fn delay(decision: RestartDecision) -> Duration {
        match decision {
            RestartDecision::Restart(delay) => delay,
            RestartDecision::GiveUp => panic!("gave up"),
        }
    }

    #[test]
    fn failures_in_a_row_follow_the_backoff_and_a_healthy_run_starts_it_over() {
        let backoff = Backoff::exponential(SECOND).with_jitter(Jitter::None);
        let policy = policy(RestartPolicy::builder().backoff(backoff));
        let mut state = state(&policy);
        let now = Instant::now();
        let delays: Vec<_> = (0..4)
            .map(|_| delay(state.run_ended(&policy, failed(SECOND, now))))
            .collect();
        assert_eq!(delays, [1, 2, 4, 8].map(Duration::from_secs));
        assert_eq!(state.failures(), 4);
        // 10 s up: healthy, restarted at once, and the next failure waits 1 s again.
        assert_eq!(
            delay(state.run_ended(&policy, failed(10 * SECOND, now))),
            Duration::ZERO
        );
        assert_eq!(state.failures(), 0);
        assert_eq!(delay(state.run_ended(&policy, failed(SECOND, now))), SECOND);
        assert_eq!((state.restarts(), state.runs()), (6, 7));
        assert_eq!(state.slept(), Duration::from_secs(1 + 2 + 4 + 8 + 1));
    }

    #[test]
    fn without_healthy_after_the_delays_never_start_over() {
        let backoff = Backoff::exponential(SECOND).with_jitter(Jitter::None);
        let policy = policy(
            RestartPolicy::builder()
                .backoff(backoff)
                .healthy_after(None),
        );
        let mut state = state(&policy);
        let now = Instant::now();
        let year = Duration::from_secs(365 * 86_400);
        let delays: Vec<_> = (0..3)
            .map(|_| delay(state.run_ended(&policy, failed(year, now))))
            .collect();
        assert_eq!(delays, [1, 2, 4].map(Duration::from_secs));
    }

    #[test]
    fn full_jitter_draws_each_delay_under_its_ceiling() {
        let policy = RestartPolicy::default();
        let mut state = state(&policy);
        let now = Instant::now();
        for n in 1..=20 {
            let delay = delay(state.run_ended(&policy, failed(Duration::ZERO, now)));
            assert!(
                delay <= policy.backoff().ceiling(n),
                "restart {n}: {delay:?}"
            );
        }
    }

    #[test]
    fn the_limit_counts_restarts_when_they_happen_within_the_window() {
        let policy = policy(
            RestartPolicy::builder()
                .backoff(Backoff::fixed(SECOND))
                .max_restarts(2, 3 * SECOND),
        );
        let mut state = state(&policy);
        let start = Instant::now();
        // Restarts at 1 s and 2 s; a third at 3 s would be the third within (0, 3] s.
        assert_eq!(
            delay(state.run_ended(&policy, failed(Duration::ZERO, start))),
            SECOND
        );
        let at = start + SECOND;
        assert_eq!(
            delay(state.run_ended(&policy, failed(Duration::ZERO, at))),
            SECOND
        );
        let at = start + 2 * SECOND;
        assert_eq!(
            state.run_ended(&policy, failed(Duration::ZERO, at)),
            RestartDecision::GiveUp
        );
        // One ending later finds the restart at 1 s out of its window (4 s − 3 s).
        let at = start + 3 * SECOND;
        assert_eq!(
            delay(state.run_ended(&policy, failed(Duration::ZERO, at))),
            SECOND
        );
        assert_eq!(state.restarts(), 3);
    }

    #[test]
    fn no_restart_at_all_under_a_limit_of_zero() {
        let policy = policy(RestartPolicy::builder().max_restarts(0, SECOND));
        let now = Instant::now();
        assert_eq!(
            state(&policy).run_ended(&policy, failed(SECOND, now)),
            RestartDecision::GiveUp
        );
    }

    #[test]
    fn counts_and_durations_saturate() {
        let backoff = Backoff::exponential(Duration::MAX).with_max_delay(Duration::MAX);
        let policy = policy(
            RestartPolicy::builder()
                .backoff(backoff.with_jitter(Jitter::None))
                .max_restarts(u32::MAX, Duration::MAX),
        );
        let mut state = state(&policy);
        state.restarts = u32::MAX - 1;
        state.failures = u32::MAX - 1;
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(
                delay(state.run_ended(&policy, failed(Duration::ZERO, now))),
                Duration::MAX
            );
        }
        assert_eq!(
            (state.restarts(), state.runs(), state.failures()),
            (u32::MAX, u32::MAX, u32::MAX)
        );
        assert_eq!(state.slept(), Duration::MAX);
    }
}
