//! A model of the circuit breaker of Microsoft.Extensions.Http.Resilience's standard handler
//! (`AddStandardResilienceHandler`), which is Polly 8's, with its published defaults.
//!
//! - The defaults: failure ratio 10 %, minimum throughput 100, sampling duration 30 s, break
//!   duration 5 s (learn.microsoft.com/dotnet/core/resilience/http-resilience, "Standard resilience
//!   handler defaults"; Polly's own, www.pollydocs.org/strategies/circuit-breaker "Defaults", and
//!   src/Polly.Core/CircuitBreaker/CircuitBreakerConstants.cs).
//! - Where it sits: inside the retry, outside the attempt timeout — "Rate limiter -> Total request
//!   timeout -> Retry -> Circuit breaker -> Attempt timeout", outermost first
//!   (learn.microsoft.com/dotnet/api/microsoft.extensions.http.resilience.httpstandardresilienceoptions,
//!   Remarks): every attempt passes it, and a timed-out attempt is a failure it counts.
//! - Sampling: the sampling duration in 10 windows of 3 s; a window starts at the first outcome at
//!   least 3 s after the last one started, and windows that started 30 s or more ago are dropped
//!   (src/Polly.Core/CircuitBreaker/Health/RollingHealthMetrics.cs, HealthMetrics.cs: 10 windows).
//! - It breaks when a failure, recorded while closed, leaves at least 100 outcomes in the window and
//!   a failure ratio of at least 10 % (AdvancedCircuitBehavior.cs).
//! - Broken for 5 s, every attempt fails at once (`BrokenCircuitException`); the first attempt
//!   after that is the one probe, the circuit half-open; others fail meanwhile. The probe's success
//!   closes it (and resets the window), its failure breaks it for another 5 s
//!   (Controller/CircuitStateController.cs: `OnActionPreExecuteAsync`,
//!   `PermitHalfOpenCircuitTest_NeedsLock`).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::breaker_model::{Circuit, State};

const FAILURE_RATIO: f64 = 0.1;
const MINIMUM_THROUGHPUT: u32 = 100;
const SAMPLING_DURATION: Duration = Duration::from_secs(30);
const WINDOWS: u32 = 10;
const BREAK_DURATION: Duration = Duration::from_secs(5);

/// Polly 8's advanced circuit breaker with the standard handler's defaults.
#[derive(Debug)]
pub(crate) struct PollyCircuit {
    state: State,
    /// While open: when the next probe may go.
    blocked_until: Instant,
    /// The sampling windows, oldest first: when each started, its successes and failures.
    windows: VecDeque<Window>,
    successes: u32,
    failures: u32,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    successes: u32,
    failures: u32,
}

impl PollyCircuit {
    pub(crate) fn new() -> Self {
        Self {
            state: State::Closed,
            blocked_until: Instant::now(),
            windows: VecDeque::new(),
            successes: 0,
            failures: 0,
        }
    }

    /// `RollingHealthMetrics.UpdateCurrentWindow`: the window `now` counts in, after dropping those
    /// that started a sampling duration ago.
    fn current(&mut self, now: Instant) -> &mut Window {
        let window = SAMPLING_DURATION / WINDOWS;
        if self
            .windows
            .back()
            .is_none_or(|last| now - last.started >= window)
        {
            self.windows.push_back(Window {
                started: now,
                successes: 0,
                failures: 0,
            });
        }
        while let Some(oldest) = self.windows.front()
            && now - oldest.started >= SAMPLING_DURATION
        {
            self.successes -= oldest.successes;
            self.failures -= oldest.failures;
            self.windows.pop_front();
        }
        self.windows.back_mut().expect("the current window")
    }

    fn break_for(&mut self, now: Instant) {
        self.state = State::Open;
        self.blocked_until = now + BREAK_DURATION;
    }
}

impl Circuit for PollyCircuit {
    fn try_acquire(&mut self, now: Instant) -> bool {
        match self.state {
            State::Closed => true,
            State::Open if now >= self.blocked_until => {
                self.state = State::HalfOpen;
                self.blocked_until = now + BREAK_DURATION;
                true
            }
            State::Open | State::HalfOpen => false,
        }
    }

    fn on_result(&mut self, now: Instant, failed: bool) {
        if failed {
            self.current(now).failures += 1;
            self.failures += 1;
            match self.state {
                State::Closed => {
                    let throughput = self.successes + self.failures;
                    if throughput >= MINIMUM_THROUGHPUT
                        && f64::from(self.failures) / f64::from(throughput) >= FAILURE_RATIO
                    {
                        self.break_for(now);
                    }
                }
                State::HalfOpen => self.break_for(now),
                State::Open => {}
            }
        } else {
            self.current(now).successes += 1;
            self.successes += 1;
            if self.state == State::HalfOpen {
                // `CloseCircuit_NeedsLock`, and `OnCircuitClosed` resets the metrics.
                self.state = State::Closed;
                self.windows.clear();
                self.successes = 0;
                self.failures = 0;
            }
        }
    }

    fn state(&self) -> State {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn it_breaks_at_ten_percent_of_a_hundred_then_probes_once_every_five_seconds() {
        let mut circuit = PollyCircuit::new();
        for _ in 0..90 {
            assert!(circuit.try_acquire(Instant::now()));
            circuit.on_result(Instant::now(), false);
        }
        for _ in 0..9 {
            circuit.on_result(Instant::now(), true);
        }
        // 99 outcomes: under the minimum throughput.
        assert_eq!(circuit.state(), State::Closed);
        circuit.on_result(Instant::now(), true);
        assert_eq!(circuit.state(), State::Open);
        assert!(!circuit.try_acquire(Instant::now()));
        tokio::time::advance(BREAK_DURATION).await;
        assert!(circuit.try_acquire(Instant::now()), "the probe");
        assert!(!circuit.try_acquire(Instant::now()), "one probe");
        circuit.on_result(Instant::now(), true);
        assert!(!circuit.try_acquire(Instant::now()));
        tokio::time::advance(BREAK_DURATION - ms(1)).await;
        assert!(!circuit.try_acquire(Instant::now()));
        tokio::time::advance(ms(1)).await;
        assert!(circuit.try_acquire(Instant::now()));
        circuit.on_result(Instant::now(), false);
        assert_eq!(circuit.state(), State::Closed);
        assert_eq!(circuit.successes + circuit.failures, 0, "reset");
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_older_than_the_sampling_duration_leave_the_window() {
        let mut circuit = PollyCircuit::new();
        for _ in 0..1000 {
            circuit.on_result(Instant::now(), false);
        }
        tokio::time::advance(SAMPLING_DURATION).await;
        // The thousand successes are 30 s old: ten failures of a hundred outcomes break it.
        for _ in 0..90 {
            circuit.on_result(Instant::now(), false);
        }
        for _ in 0..10 {
            circuit.on_result(Instant::now(), true);
        }
        assert_eq!(circuit.state(), State::Open);
    }
}
