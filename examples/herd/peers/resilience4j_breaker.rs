//! A model of resilience4j's `CircuitBreaker` with its defaults (resilience4j 2).
//!
//! - The defaults (resilience4j.readme.io/docs/circuitbreaker, "Create and configure a
//!   CircuitBreaker"): a count-based sliding window of the last 100 calls, at least 100 calls before
//!   a rate is computed, failure rate threshold 50 %, 60 s in the open state, 10 calls permitted in
//!   the half-open state, no automatic transition from open to half-open, every exception recorded
//!   as a failure; slow calls (60 s at a 100 % rate) never happen here.
//! - Where it sits: inside the retry — the Spring Boot starter's order is "Retry ( CircuitBreaker (
//!   RateLimiter ( TimeLimiter ( Bulkhead ( Function ) ) ) ) )" (resilience4j.readme.io/docs/
//!   getting-started-3, "Aspect order"), so every attempt passes it, and a timed-out attempt
//!   (`TimeLimiter`'s `TimeoutException`) is a failure it records.
//! - Closed: every outcome goes into the ring of the last 100; once it holds 100, a failure rate of
//!   50 % or more opens the circuit (`CircuitBreakerStateMachine.ClosedState`,
//!   `FixedSizeSlidingWindowMetrics`).
//! - Open: every call is rejected (`CallNotPermittedException`) until 60 s have passed; the first
//!   call after that moves it to half-open (`OpenState.tryAcquirePermission`).
//! - Half-open: 10 calls are let through, the rest rejected; once the 10 have ended, a failure
//!   rate of 50 % or more opens it again, less closes it with an empty window
//!   (`HalfOpenState`, with a window of 10 and a minimum of 10 calls).

use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;

use super::breaker_model::{Circuit, State};

const WINDOW: usize = 100;
const FAILURE_RATE_THRESHOLD: f64 = 0.5;
const WAIT_IN_OPEN: Duration = Duration::from_secs(60);
const PERMITTED_IN_HALF_OPEN: usize = 10;

/// resilience4j's circuit breaker with its defaults.
#[derive(Debug)]
pub(crate) struct Resilience4jCircuit {
    state: State,
    /// While open: when a call may move it to half-open.
    open_until: Instant,
    /// The outcomes in the window, oldest first: `true` for a failure.
    window: VecDeque<bool>,
    /// Half-open calls still to let through.
    permits: usize,
}

impl Resilience4jCircuit {
    pub(crate) fn new() -> Self {
        Self {
            state: State::Closed,
            open_until: Instant::now(),
            window: VecDeque::with_capacity(WINDOW),
            permits: 0,
        }
    }

    /// The window's size in the current state: 100 closed, 10 half-open.
    fn size(&self) -> usize {
        match self.state {
            State::HalfOpen => PERMITTED_IN_HALF_OPEN,
            State::Closed | State::Open => WINDOW,
        }
    }

    fn transition(&mut self, state: State, now: Instant) {
        self.state = state;
        self.window.clear();
        match state {
            State::Open => self.open_until = now + WAIT_IN_OPEN,
            State::HalfOpen => self.permits = PERMITTED_IN_HALF_OPEN,
            State::Closed => {}
        }
    }
}

impl Circuit for Resilience4jCircuit {
    fn try_acquire(&mut self, now: Instant) -> bool {
        if self.state == State::Open && now > self.open_until {
            self.transition(State::HalfOpen, now);
        }
        match self.state {
            State::Closed => true,
            State::HalfOpen if self.permits > 0 => {
                self.permits -= 1;
                true
            }
            State::HalfOpen | State::Open => false,
        }
    }

    fn on_result(&mut self, now: Instant, failed: bool) {
        if self.state == State::Open {
            // A call let through before the circuit opened: counted in the open state's metrics,
            // which decide nothing.
            return;
        }
        if self.window.len() == self.size() {
            self.window.pop_front();
        }
        self.window.push_back(failed);
        if self.window.len() < self.size() {
            return;
        }
        let failures = self.window.iter().filter(|&&f| f).count();
        let rate = failures as f64 / self.window.len() as f64;
        if rate >= FAILURE_RATE_THRESHOLD {
            self.transition(State::Open, now);
        } else if self.state == State::HalfOpen {
            self.transition(State::Closed, now);
        }
    }

    fn state(&self) -> State {
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn it_opens_at_half_of_the_last_hundred_and_tries_ten_calls_a_minute_later() {
        let mut circuit = Resilience4jCircuit::new();
        for _ in 0..99 {
            circuit.on_result(Instant::now(), false);
        }
        assert_eq!(circuit.state(), State::Closed, "99 calls: no rate yet");
        for _ in 0..49 {
            circuit.on_result(Instant::now(), true);
        }
        assert_eq!(circuit.state(), State::Closed, "49 of the last 100");
        circuit.on_result(Instant::now(), true);
        assert_eq!(circuit.state(), State::Open, "50 of the last 100");
        tokio::time::advance(WAIT_IN_OPEN).await;
        assert!(!circuit.try_acquire(Instant::now()), "after, not at, 60 s");
        tokio::time::advance(Duration::from_millis(1)).await;
        let admitted = (0..20)
            .filter(|_| circuit.try_acquire(Instant::now()))
            .count();
        assert_eq!(admitted, PERMITTED_IN_HALF_OPEN);
        for failed in [true, true, true, true, false, false, false, false, false] {
            circuit.on_result(Instant::now(), failed);
        }
        assert_eq!(circuit.state(), State::HalfOpen, "nine of ten");
        circuit.on_result(Instant::now(), false);
        assert_eq!(circuit.state(), State::Closed, "four of ten failed");
    }
}
