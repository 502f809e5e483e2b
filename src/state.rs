//! The per-request state machine: turns each attempt's outcome into "retry after d" or "stop, because …".

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::attempt::{Attempt, Decision, RetryInfo, StopReason};
use crate::backoff::DelayState;
use crate::budget::Withdrawal;
use crate::budget::{Account, RetryBudget, RetryKind};
use crate::classify::{Outcome, Reason, RequestView};
use crate::cooldown::{self, Cooldowns, Host, Pause};
use crate::log::{self, DelayCause};
use crate::metrics;
use crate::policy::{RetryAfterMode, RetryEvent, RetryPolicy, Shared};
use crate::rejected::Rejected;

/// Which of the two time limits ends first for the attempt in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Limit {
    /// `attempt_timeout`: the attempt is dropped and judged a timeout.
    Attempt,
    /// `max_elapsed`: the call ends.
    Deadline,
}

/// The retries of one request: feed it each attempt's outcome and do what it says.
///
/// This is the one place where retry decisions are made; the tower layer, the reqwest middleware and
/// [`retry`](crate::retry()) all drive it. A loop for any other kind of work looks like this:
///
/// ```
/// use stagger::adapter::{Attempt, Decision};
/// use stagger::{Outcome, Reason, RetryPolicy};
///
/// # async fn connect() -> Result<(), std::io::Error> { Ok(()) }
/// # async fn run() -> Result<(), std::io::Error> {
/// let policy = RetryPolicy::default();
/// let mut state = policy.start();
/// loop {
///     let result = connect().await;
///     let outcome = match &result {
///         Ok(_) => Outcome::Success,
///         Err(_) => Outcome::RetrySafe(Reason::Connect),
///     };
///     match state.decide(Attempt::new(outcome)) {
///         Decision::Retry(delay) => tokio::time::sleep(delay).await,
///         Decision::Stop(_) => return result,
///     }
///     if state.begin_retry().is_err() {
///         return result; // the deadline passed during the sleep
///     }
/// }
/// # }
/// ```
///
/// Such a loop bounds the time *between* attempts; to bound each attempt too, wrap it in
/// `tokio::time::timeout` with [`RetryPolicy::attempt_timeout`] — or use [`retry`](crate::retry()),
/// which does both.
pub struct RetryState {
    policy: RetryPolicy,
    /// The request's delay schedules, from its first draw on. Boxed: on the heap of a request that
    /// retries, they keep the futures of every request small enough for the allocator's fastest size
    /// classes (the reqwest-middleware future fits 1 KiB with them boxed, and does not without).
    delays: Option<Box<Schedules>>,
    /// The host's account of a budget kept per host, once the request's host is known.
    partition: Option<Arc<Account>>,
    /// Hedged attempts started.
    hedges: u32,
    /// When the deadline's clock started; `None` until first needed (see [`RetryPolicy::start`]).
    started: Option<Instant>,
    attempts: u32,
    /// Time slept between attempts, in nanoseconds (saturating at 584 years): half a `Duration`, in a
    /// state every request's future holds.
    slept: u64,
    stop: Option<StopReason>,
    /// A retry was allowed and its budget withdrawn, but it has not been sent yet: given back if the
    /// state is dropped first.
    withdrawn: Option<Withdrawal>,
}

impl Clone for RetryState {
    /// A copy of the state so far. A pending budget withdrawal stays with the original, so that it is
    /// given back at most once.
    fn clone(&self) -> Self {
        Self {
            policy: self.policy.clone(),
            delays: self.delays.clone(),
            partition: self.partition.clone(),
            hedges: self.hedges,
            started: self.started,
            attempts: self.attempts,
            slept: self.slept,
            stop: self.stop,
            withdrawn: None,
        }
    }
}

impl Drop for RetryState {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl fmt::Debug for RetryState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryState")
            .field("attempts", &self.attempts)
            .field("slept", &self.slept())
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

impl RetryState {
    /// A state whose deadline clock starts now, or, with `started: None`, when first needed.
    pub(crate) fn new(policy: RetryPolicy, started: Option<Instant>) -> Self {
        Self {
            policy,
            delays: None,
            partition: None,
            hedges: 0,
            started,
            attempts: 0,
            slept: 0,
            stop: None,
            withdrawn: None,
        }
    }

    /// The policy this state applies.
    ///
    /// ```
    /// # use stagger::RetryPolicy;
    /// let state = RetryPolicy::builder().max_retries(5).build()?.start();
    /// assert_eq!(state.policy().max_retries(), 5);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// Attempts decided so far.
    ///
    /// ```
    /// # use stagger::adapter::Attempt;
    /// # use stagger::{Outcome, RetryPolicy};
    /// let mut state = RetryPolicy::default().start();
    /// assert_eq!(state.attempts(), 0);
    /// let _ = state.decide(Attempt::new(Outcome::Success));
    /// assert_eq!(state.attempts(), 1);
    /// ```
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Whether a retry could still follow the attempt about to be made, as far as the count and the
    /// deadline tell before its outcome is known. When it is `false`, adapters send the request without
    /// keeping a copy.
    ///
    /// ```
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Reason, RetryPolicy};
    ///
    /// let mut state = RetryPolicy::builder().max_retries(1).build()?.start();
    /// assert!(state.may_retry()); // keep a copy of the request for a retry
    /// let refused = Attempt::new(Outcome::RetrySafe(Reason::Connect));
    /// assert!(matches!(state.decide(refused), Decision::Retry(_)));
    /// state.begin_retry().unwrap();
    /// assert!(!state.may_retry()); // the retry is the last attempt: send it without a copy
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn may_retry(&self) -> bool {
        let s = &*self.policy.shared;
        self.stop.is_none()
            && self.attempts < s.max_retries
            && self.remaining() != Some(Duration::ZERO)
    }

    /// What has happened so far.
    ///
    /// ```
    /// # use stagger::adapter::Attempt;
    /// # use stagger::{Outcome, RetryPolicy, StopReason};
    /// let mut state = RetryPolicy::default().start();
    /// let _ = state.decide(Attempt::new(Outcome::Fatal));
    /// let info = state.info();
    /// assert_eq!((info.attempts(), info.stop_reason()), (1, Some(StopReason::Fatal)));
    /// ```
    pub fn info(&self) -> RetryInfo {
        RetryInfo {
            attempts: self.attempts,
            slept: self.slept(),
            cooldown: self.delays.as_ref().map_or(Duration::ZERO, |d| d.cooldown),
            hedges: self.hedges,
            stop: self.stop,
        }
    }

    /// Records one attempt and decides: retry after a delay, or stop.
    ///
    /// The checks run in this order, and the first that applies stops the retries: success, fatal,
    /// `max_retries`, the deadline already passed, not replayable, not idempotent, `Retry-After` over
    /// `max_retry_after`, the deadline reached by the end of the sleep, the budget. The limits that
    /// [`may_retry`](Self::may_retry) foresees come before anything that depends on the request, and the
    /// budget is asked last, so that a retry refused for another reason does not spend it.
    ///
    /// A retry that is allowed withdraws from the budget; if the state is dropped before the retry is
    /// sent (the call was cancelled during the sleep, or [`begin_retry`](Self::begin_retry) found the
    /// deadline passed), the withdrawal is given back.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// let policy = RetryPolicy::builder()
    ///     .backoff(Backoff::fixed(Duration::from_millis(10)))
    ///     .max_retries(2)
    ///     .build()?;
    /// let mut state = policy.start();
    /// let refused = Attempt::new(Outcome::RetrySafe(Reason::Connect));
    /// for _ in 0..2 {
    ///     assert_eq!(state.decide(refused), Decision::Retry(Duration::from_millis(10)));
    ///     state.begin_retry().unwrap();
    /// }
    /// assert_eq!(state.decide(refused), Decision::Stop(StopReason::MaxRetries));
    /// assert_eq!(state.attempts(), 3);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn decide(&mut self, attempt: Attempt) -> Decision {
        self.decide_for(attempt, None)
    }

    /// [`decide`](Self::decide) for an attempt of `request`, whose method, host and path go into the
    /// `tracing` events.
    pub(crate) fn decide_for(
        &mut self,
        attempt: Attempt,
        request: Option<&RequestView<'_>>,
    ) -> Decision {
        // The retry decided last time was sent, since this is its outcome.
        self.withdrawn = None;
        self.attempts = self.attempts.saturating_add(1);
        self.record_response(&attempt, request);
        let (decision, cause) = match self.stop_before_delay(&attempt) {
            Some(reason) => (Decision::Stop(reason), DelayCause::Backoff),
            None => self.delay(&attempt, request),
        };
        match decision {
            Decision::Retry(delay) => {
                self.sleep(delay);
                let reason = attempt.outcome.reason().unwrap_or(Reason::Other("retry"));
                let retry_after = self.effective_retry_after(&attempt);
                log::retrying(request, self.attempts, delay, reason, cause);
                metrics::retry(request, reason, cause);
                if let Some(hook) = &self.policy.shared.on_retry {
                    hook(&RetryEvent {
                        attempt: self.attempts,
                        delay,
                        reason,
                        retry_after,
                    });
                }
            }
            Decision::Stop(reason) => self.stop(reason, attempt.outcome.reason(), request),
        }
        decision
    }

    /// Records the last attempt a request can have (it was sent without a copy) and says why the
    /// retries stop: the same checks as [`decide`](Self::decide), with "not replayable" when nothing else
    /// applies.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn finish(
        &mut self,
        attempt: Attempt,
        request: Option<&RequestView<'_>>,
    ) -> StopReason {
        self.withdrawn = None;
        self.attempts = self.attempts.saturating_add(1);
        self.record_response(&attempt, request);
        let reason = self
            .stop_before_delay(&attempt.replayable(false))
            .unwrap_or(StopReason::NotReplayable);
        self.stop(reason, attempt.outcome.reason(), request);
        reason
    }

    /// Before the first attempt of `request`: how long to wait for its host's pause to end, if the
    /// policy has `host_cooldown` on and the host asked for one; or the [`Rejected`] the call ends
    /// with, unsent, when the pause outlasts `max_retry_after` or the time left, or adaptive throttling
    /// rejects the request.
    ///
    /// With neither on, or with the cooldown on and no pause in force anywhere, this is at most one
    /// atomic load: no clock read, no lock, and `view` is not asked for.
    #[inline]
    pub(crate) fn before_first<'v>(
        &mut self,
        view: impl FnOnce() -> Option<RequestView<'v>>,
    ) -> Result<Option<Duration>, Rejected> {
        let s = &*self.policy.shared;
        let cooling = s.cooldowns.as_ref().is_some_and(Cooldowns::is_armed);
        let per_host = s.budget.as_ref().is_some_and(RetryBudget::per_host);
        if !cooling && !per_host && s.throttles.is_none() {
            return Ok(None);
        }
        self.before_first_slow(view().as_ref(), cooling)
    }

    #[cold]
    fn before_first_slow(
        &mut self,
        request: Option<&RequestView<'_>>,
        cooling: bool,
    ) -> Result<Option<Duration>, Rejected> {
        self.resolve_partition(request);
        if let Err(p) = self.admit(request) {
            self.stop(StopReason::Throttled, None, request);
            return Err(Rejected::throttled(p, self.info()));
        }
        if cooling {
            return self.wait_for_host(request);
        }
        Ok(None)
    }

    /// Asks `request`'s adaptive throttle whether an attempt may go out: `Err(p)` if it is rejected
    /// locally, with probability `p`. Always `Ok` without adaptive throttling.
    fn admit(&mut self, request: Option<&RequestView<'_>>) -> Result<(), f64> {
        let s = &*self.policy.shared;
        let Some(throttles) = &s.throttles else {
            return Ok(());
        };
        let delays = &mut self.delays;
        throttles
            .of(request.and_then(Host::of))
            .admit(Instant::now(), || Schedules::of(delays, s).transient.unit())
    }

    /// When a pause before an attempt has ended: how much longer to wait, if the host asked for a
    /// pause meanwhile (another request's response, while this one slept), or the [`Rejected`] the
    /// call ends with when that pause outlasts the limits. One atomic load with no pause in force.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    #[inline]
    pub(crate) fn recheck_pause(
        &mut self,
        request: Option<&RequestView<'_>>,
    ) -> Result<Option<Duration>, Rejected> {
        match &self.policy.shared.cooldowns {
            Some(cooldowns) if cooldowns.is_armed() => self.wait_for_host(request),
            _ => Ok(None),
        }
    }

    #[cold]
    fn wait_for_host(
        &mut self,
        request: Option<&RequestView<'_>>,
    ) -> Result<Option<Duration>, Rejected> {
        let Some(pause) = self.host_pause(request) else {
            return Ok(None);
        };
        let policy = self.policy.clone();
        let s = &*policy.shared;
        if s.max_elapsed.is_some() && self.started.is_none() {
            // The wait is part of the call.
            self.started = Some(Instant::now());
        }
        let remaining = self.remaining();
        let delays = Schedules::of(&mut self.delays, s);
        match cooldown::wait(pause, s.max_retry_after, remaining, |window| {
            delays.transient.uniform(window)
        }) {
            Ok(wait) => {
                // Before the first attempt the wait is the cooldown; before a retry, more sleep.
                if self.attempts == 0 {
                    let schedules = Schedules::of(&mut self.delays, s);
                    schedules.cooldown = schedules.cooldown.saturating_add(wait);
                } else {
                    self.sleep(wait);
                }
                log::cooling_down(request, wait);
                metrics::cooldown_wait(request);
                Ok(Some(wait))
            }
            Err(limit) => {
                if self.attempts == 0 {
                    self.stop(StopReason::Cooldown, None, request);
                } else {
                    self.abandon(StopReason::Cooldown, request);
                }
                let info = self.info();
                Err(match limit {
                    cooldown::Limit::MaxRetryAfter => {
                        Rejected::over_max_retry_after(pause.left, s.max_retry_after, info)
                    }
                    cooldown::Limit::Deadline => {
                        Rejected::past_deadline(pause.left, remaining.unwrap_or_default(), info)
                    }
                })
            }
        }
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// Whether the attempt in flight may be hedged now: the request is safe to send twice (idempotent,
    /// or it carries an `Idempotency-Key`), another attempt is within `max_retries`, the deadline is
    /// ahead, its host is not pausing, adaptive throttling admits it and the budget pays for it, as for
    /// a retry. If so, the hedge is counted and its withdrawal is final: it is sent at once.
    pub(crate) fn begin_hedge(&mut self, request: Option<&RequestView<'_>>) -> bool {
        let s = &*self.policy.shared;
        let idempotent = request.is_none_or(RequestView::is_idempotent) || !s.idempotency;
        if self.stop.is_some()
            || !idempotent
            || self.attempts.saturating_add(self.hedges) >= s.max_retries
            || self.remaining() == Some(Duration::ZERO)
            || self.host_pause(request).is_some()
            || self.admit(request).is_err()
        {
            return false;
        }
        match self.withdraw(request, RetryKind::Plain) {
            // Sent now: nothing to give back.
            Ok(_) => {}
            Err(()) => return false,
        }
        self.hedges = self.hedges.saturating_add(1);
        log::hedging(request, self.attempts.saturating_add(1));
        metrics::hedge(request);
        true
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// Counts the attempt of a hedged race that lost and was dropped while it ran: made, but never
    /// answered.
    pub(crate) fn count_cancelled(&mut self) {
        self.attempts = self.attempts.saturating_add(1);
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    /// Records an attempt of a hedged race that failed in a way worth retrying while the other attempt
    /// still ran: made, and set aside for the other's answer.
    pub(crate) fn set_aside(&mut self, attempt: Attempt, request: Option<&RequestView<'_>>) {
        self.attempts = self.attempts.saturating_add(1);
        self.record_response(&attempt, request);
    }

    /// Records what an attempt's response says of its host: the pause it asked for, when the policy
    /// keeps pauses, and whether the backend accepted it, for adaptive throttling.
    fn record_response(&self, attempt: &Attempt, request: Option<&RequestView<'_>>) {
        let s = &*self.policy.shared;
        if let (Some(cooldowns), Some(asked)) = (&s.cooldowns, attempt.cooldown)
            && let Some(host) = request.and_then(Host::of)
        {
            cooldowns.record(host, asked, Instant::now());
        }
        if let Some(throttles) = &s.throttles
            && !attempt.outcome.is_retryable()
        {
            throttles
                .of(request.and_then(Host::of))
                .accepted(Instant::now());
        }
    }

    /// The pause `request`'s host is in, if the policy keeps pauses and one is in force.
    fn host_pause(&self, request: Option<&RequestView<'_>>) -> Option<Pause> {
        let cooldowns = self.policy.shared.cooldowns.as_ref()?;
        if !cooldowns.is_armed() {
            return None;
        }
        cooldowns.pause(request.and_then(Host::of)?, Instant::now)
    }

    /// Call right before sending a retry that [`decide`](Self::decide) allowed: checks the deadline
    /// again, since the sleep or the inner service's readiness may have overrun it, and commits the
    /// retry's budget withdrawal.
    ///
    /// `Err(StopReason::Deadline)` means the retry must not be sent: the call ends, and the withdrawal is
    /// given back.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stagger::ConfigError> {
    /// let policy = RetryPolicy::builder()
    ///     .backoff(Backoff::fixed(Duration::from_secs(1)))
    ///     .max_elapsed(Duration::from_secs(5))
    ///     .build()?;
    /// let mut state = policy.start();
    /// let refused = Attempt::new(Outcome::RetrySafe(Reason::Connect));
    ///
    /// let Decision::Retry(delay) = state.decide(refused) else { unreachable!() };
    /// tokio::time::sleep(delay).await;
    /// assert_eq!(state.begin_retry(), Ok(())); // send the retry
    ///
    /// let Decision::Retry(_) = state.decide(refused) else { unreachable!() };
    /// tokio::time::sleep(Duration::from_secs(10)).await; // a sleep that overran the deadline
    /// assert_eq!(state.begin_retry(), Err(StopReason::Deadline)); // do not send it
    /// # Ok(())
    /// # }
    /// ```
    pub fn begin_retry(&mut self) -> Result<(), StopReason> {
        self.begin_retry_for(None)
    }

    /// [`begin_retry`](Self::begin_retry) for a retry of `request`, for the `tracing` events.
    pub(crate) fn begin_retry_for(
        &mut self,
        request: Option<&RequestView<'_>>,
    ) -> Result<(), StopReason> {
        if self.remaining() == Some(Duration::ZERO) {
            self.abandon(StopReason::Deadline, request);
            return Err(StopReason::Deadline);
        }
        self.withdrawn = None;
        Ok(())
    }

    /// Ends the retries for `reason` with the retry that was decided unsent, giving back its withdrawal.
    pub(crate) fn abandon(&mut self, reason: StopReason, request: Option<&RequestView<'_>>) {
        self.give_back();
        // The call ends with a retry due: it is still failing.
        self.stop(reason, Some(Reason::Other("retry due")), request);
    }

    fn give_back(&mut self) {
        let Some(withdrawal) = self.withdrawn.take() else {
            return;
        };
        match (&self.partition, &self.policy.shared.budget) {
            (Some(partition), _) => partition.refund(withdrawal),
            (None, Some(budget)) => budget.refund(withdrawal),
            (None, None) => {}
        }
    }

    /// Takes one retry from the budget: from the host's own account when the budget is kept per host
    /// (the host's request deposits there when first seen), from the shared one otherwise. `Err` if
    /// the balance does not allow it; `Ok(None)` without a budget.
    fn withdraw(
        &mut self,
        request: Option<&RequestView<'_>>,
        kind: RetryKind,
    ) -> Result<Option<Withdrawal>, ()> {
        let Some(budget) = &self.policy.shared.budget else {
            return Ok(None);
        };
        let withdrawal = if budget.per_host() {
            self.resolve_partition(request);
            self.partition
                .as_ref()
                .and_then(|partition| partition.withdraw(kind))
        } else {
            budget.withdraw(kind)
        };
        withdrawal.map(Some).ok_or(())
    }

    /// With a budget kept per host, finds the request's host's account and deposits the request in it,
    /// once.
    fn resolve_partition(&mut self, request: Option<&RequestView<'_>>) {
        if self.partition.is_some() {
            return;
        }
        if let Some(partition) = (self.policy.shared.budget.as_ref())
            .and_then(|budget| budget.partition(request.and_then(Host::of)))
        {
            partition.deposit();
            self.partition = Some(partition);
        }
    }

    /// The deadline passed while an attempt was in flight, which counts as made.
    pub(crate) fn cut_by_deadline(&mut self, request: Option<&RequestView<'_>>) {
        self.attempts = self.attempts.saturating_add(1);
        self.stop(StopReason::Deadline, Some(Reason::Timeout), request);
    }

    /// When the attempt about to wait must end, and which limit that is: the earlier of `attempt_timeout`
    /// from now and the deadline. Starts the deadline's clock if it has not started. `None` without
    /// either limit (or with limits beyond what an `Instant` can hold).
    pub(crate) fn attempt_limit(&mut self) -> Option<(Instant, Limit)> {
        let s = &*self.policy.shared;
        let attempt = s
            .attempt_timeout
            .and_then(|timeout| Instant::now().checked_add(timeout));
        match (attempt, self.deadline()) {
            (Some(attempt), Some(deadline)) if attempt < deadline => {
                Some((attempt, Limit::Attempt))
            }
            (_, Some(deadline)) => Some((deadline, Limit::Deadline)),
            (Some(attempt), None) => Some((attempt, Limit::Attempt)),
            (None, None) => None,
        }
    }

    /// When the deadline passes, starting its clock if it has not started.
    pub(crate) fn deadline(&mut self) -> Option<Instant> {
        let max = self.policy.shared.max_elapsed?;
        self.started
            .get_or_insert_with(Instant::now)
            .checked_add(max)
    }

    /// Time slept between attempts.
    fn slept(&self) -> Duration {
        Duration::from_nanos(self.slept)
    }

    fn sleep(&mut self, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.slept = self.slept.saturating_add(nanos);
    }

    /// Ends the retries for `reason`; `failure` is why the last attempt failed, if it did in a way
    /// worth retrying.
    fn stop(
        &mut self,
        reason: StopReason,
        failure: Option<Reason>,
        request: Option<&RequestView<'_>>,
    ) {
        self.stop = Some(reason);
        log::stopped(request, self.attempts, self.slept(), reason, failure);
        metrics::call_ended(
            request,
            self.attempts,
            self.slept(),
            reason,
            failure.is_some(),
        );
    }

    /// Time left before the deadline, if there is one and its clock has started.
    fn remaining(&self) -> Option<Duration> {
        let max = self.policy.shared.max_elapsed?;
        let started = self.started?;
        Some(max.saturating_sub(started.elapsed()))
    }

    fn effective_retry_after(&self, attempt: &Attempt) -> Option<Duration> {
        match self.policy.shared.retry_after {
            RetryAfterMode::Ignore => None,
            RetryAfterMode::Spread | RetryAfterMode::Strict => attempt.retry_after,
        }
    }

    /// Every reason to stop that does not depend on the delay; `None` if a retry may follow.
    fn stop_before_delay(&mut self, attempt: &Attempt) -> Option<StopReason> {
        let s = &*self.policy.shared;
        match attempt.outcome {
            Outcome::Success => return Some(StopReason::Success),
            Outcome::Fatal => return Some(StopReason::Fatal),
            Outcome::RetrySafe(_) | Outcome::RetryIfIdempotent(_) => {}
        }
        if self.attempts > s.max_retries {
            return Some(StopReason::MaxRetries);
        }
        if s.max_elapsed.is_some() && self.started.is_none() {
            // An adapter starts the clock when an attempt first waits; one that never waited took no time.
            self.started = Some(Instant::now());
        }
        if self.remaining() == Some(Duration::ZERO) {
            return Some(StopReason::Deadline);
        }
        if !attempt.replayable {
            return Some(StopReason::NotReplayable);
        }
        if s.idempotency
            && !attempt.idempotent
            && matches!(attempt.outcome, Outcome::RetryIfIdempotent(_))
        {
            return Some(StopReason::NotIdempotent);
        }
        if self
            .effective_retry_after(attempt)
            .is_some_and(|f| f > s.max_retry_after)
        {
            return Some(StopReason::RetryAfterTooLong);
        }
        None
    }

    /// The delay before the retry and what set it, or why there is none: the deadline, the host's
    /// pause, or the budget.
    fn delay(
        &mut self,
        attempt: &Attempt,
        request: Option<&RequestView<'_>>,
    ) -> (Decision, DelayCause) {
        let s = &*self.policy.shared;
        let mut floor = self.effective_retry_after(attempt);
        let mut cause = match floor {
            Some(_) => DelayCause::ServerDelay,
            None if attempt.throttled => DelayCause::Throttle,
            None => DelayCause::Backoff,
        };
        // A pause the host asked of every request holds this retry too.
        if let Some(pause) = self.host_pause(request)
            && floor.is_none_or(|floor| pause.left > floor)
        {
            if pause.left > s.max_retry_after {
                return (Decision::Stop(StopReason::Cooldown), cause);
            }
            floor = Some(pause.left);
            cause = DelayCause::Cooldown;
        }
        let remaining = self.remaining();
        // The generators are seeded at the first retry, so a request that succeeds at once pays nothing
        // for them.
        let schedules = Schedules::of(&mut self.delays, s);
        let backoff_delay = if cause == DelayCause::Throttle {
            schedules
                .throttle
                .get_or_insert_with(|| {
                    DelayState::new(&s.throttle_backoff, s.streams.next_stream())
                })
                .next_delay(&s.throttle_backoff)
        } else {
            schedules.transient.next_delay(&s.backoff)
        };
        let delay = match (s.retry_after, floor) {
            (_, None) => backoff_delay,
            (RetryAfterMode::Ignore, Some(floor)) => backoff_delay.max(floor),
            // `floor <= max_retry_after` was checked: the cap keeps the floor and bounds the backoff.
            (RetryAfterMode::Strict, Some(floor)) => {
                floor.max(backoff_delay).min(s.max_retry_after)
            }
            (RetryAfterMode::Spread, Some(floor)) => {
                let ceiling = s.backoff.ceiling(self.attempts);
                let mut window = ceiling.max(floor).min(s.max_retry_after - floor);
                if let Some(remaining) = remaining {
                    window = window.min(remaining.saturating_sub(floor));
                }
                floor + Schedules::of(&mut self.delays, s).transient.uniform(window)
            }
        };
        // A retry due at the deadline itself would have no time to run: it is not taken either.
        if remaining.is_some_and(|remaining| delay >= remaining) {
            return (Decision::Stop(StopReason::Deadline), cause);
        }
        // Adaptive throttling is asked before the budget, so that a retry it rejects spends nothing.
        if self.admit(request).is_err() {
            return (Decision::Stop(StopReason::Throttled), cause);
        }
        // A timeout's retry is the one that can keep an overloaded server overloaded: the attempt it
        // replaces may still be in the server's queue, to be served for nobody. It is paid from the
        // requests' deposits only, never the floor (see `RetryBudget`).
        let kind = match attempt.outcome.reason() {
            Some(Reason::Timeout) => RetryKind::Timeout,
            _ => RetryKind::Plain,
        };
        match self.withdraw(request, kind) {
            Ok(withdrawal) => self.withdrawn = withdrawal,
            Err(()) => return (Decision::Stop(StopReason::Budget), cause),
        }
        (Decision::Retry(delay), cause)
    }
}

/// A request's delay schedules: the backoff's, and the throttle schedule's once a throttled attempt
/// needs it. Made at the first draw: a request that succeeds at once seeds no generator.
#[derive(Debug, Clone)]
struct Schedules {
    transient: DelayState,
    throttle: Option<DelayState>,
    /// Time waited for the host's pause before the first attempt: here rather than inline, since
    /// only a request that waited (and drew its wait's spread from here) has any.
    cooldown: Duration,
}

impl Schedules {
    fn of<'a>(slot: &'a mut Option<Box<Self>>, s: &Shared) -> &'a mut Self {
        slot.get_or_insert_with(|| {
            Box::new(Self {
                transient: DelayState::new(&s.backoff, s.streams.next_stream()),
                throttle: None,
                cooldown: Duration::ZERO,
            })
        })
    }
}
