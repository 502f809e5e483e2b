//! A call's limits, on [`RetryState`]: its deadline and attempt timeout, a caller's own deadline, and
//! what one request's [`Overrides`] change of its policy's settings (an `impl RetryState` of its own,
//! beside `state.rs`).

use std::time::Duration;

use crate::time::Instant;

use crate::attempt::TimeLimit;
use crate::classify::RequestView;
use crate::engine::overrides::Overrides;
#[cfg(doc)]
use crate::engine::policy::RetryPolicy;
use crate::engine::schedules::Schedules;
use crate::engine::state::RetryState;

/// The time limits of one attempt ([`RetryState::attempt_limits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// When the attempt is cut, by which limit, and whether it is a limit of the caller's own.
    pub(crate) cut: Option<(Instant, TimeLimit, bool)>,
    /// When its silence counts as its host's failure, if that comes before the cut.
    pub(crate) silence: Option<Instant>,
}

impl RetryState {
    /// Gives this call the settings `overrides` names, in place of its policy's: its deadline,
    /// `max_retries`, attempt timeout, hedging and idempotency. The guards the policy's clones share
    /// stay as they are. The adapters call it with the [`Overrides`] in a request's extensions, before
    /// its first attempt.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Overrides, Reason, RetryPolicy, StopReason};
    ///
    /// let mut state = RetryPolicy::default().start();
    /// state.apply_overrides(Overrides::no_retries());
    /// let refused = Attempt::new(Outcome::RetrySafe(Reason::Connect));
    /// assert_eq!(state.decide(refused, None), Decision::Stop(StopReason::MaxRetries));
    /// ```
    pub fn apply_overrides(&mut self, overrides: Overrides) {
        if overrides == Overrides::default() {
            return;
        }
        let schedules = Schedules::of(&mut self.delays, &self.policy.shared);
        schedules.overrides = Some(Box::new(overrides));
        if let Some(deadline) = overrides.deadline() {
            schedules.deadline = Some(deadline);
        }
    }

    fn overrides(&self) -> Option<&Overrides> {
        self.delays.as_ref()?.overrides.as_deref()
    }

    /// The call's `max_retries`: its own, or its policy's.
    pub(crate) fn max_retries(&self) -> u32 {
        (self.overrides().and_then(Overrides::max_retries))
            .unwrap_or(self.policy.shared.settings.max_retries)
    }

    /// The call's attempt timeout: its own, or its policy's.
    pub(crate) fn attempt_timeout(&self) -> Option<Duration> {
        (self.overrides().and_then(Overrides::attempt_timeout))
            .unwrap_or(self.policy.shared.settings.attempt_timeout)
    }

    /// The call's hedging delay: its own, or its policy's.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn hedge_after(&self) -> Option<Duration> {
        (self.overrides().and_then(Overrides::hedge_after))
            .unwrap_or(self.policy.shared.settings.hedge_after)
    }

    /// Whether the request may be sent again after an ambiguous failure: as its own overrides say,
    /// or as its method, its headers and the policy's rules say.
    pub(crate) fn is_idempotent(&self, request: &RequestView<'_>) -> bool {
        match self.overrides().and_then(Overrides::idempotent) {
            Some(idempotent) => idempotent,
            None => self.policy.is_idempotent(request),
        }
    }

    /// Whether the call, refused by a guard, waits the delay its retry would have waited: its own
    /// setting, or its policy's.
    pub(crate) fn backoff_on_refusal(&self) -> bool {
        (self.overrides().and_then(Overrides::backoff_on_refusal))
            .unwrap_or(self.policy.shared.settings.backoff_on_refusal)
    }

    /// How long the call waits before it ends, a guard having refused it, if it waits at all
    /// ([`backoff_on_refusal`](Self::backoff_on_refusal)); once.
    pub(crate) fn take_linger(&mut self) -> Option<Duration> {
        self.delays.as_mut()?.linger.take()
    }

    /// A guard refused the call's next attempt: with `backoff_on_refusal`, it waits `delay` (the
    /// delay its retry would have waited; `None`: the backoff's next) before it ends.
    pub(super) fn linger(&mut self, delay: Option<Duration>) {
        if !self.backoff_on_refusal() {
            return;
        }
        let backoff = self.policy.shared.settings.backoff;
        let schedules = Schedules::of(&mut self.delays, &self.policy.shared);
        let delay = delay.unwrap_or_else(|| schedules.transient.next_delay(&backoff));
        schedules.linger = Some(delay);
    }

    /// The idempotency this call's overrides give, if they give one.
    pub(crate) fn idempotent_override(&self) -> Option<bool> {
        self.overrides().and_then(Overrides::idempotent)
    }

    /// The time limits of an attempt of `request` that started waiting at `start`: when it is cut,
    /// by which limit, and whether that is a limit of the caller's own, tighter than the policy's (a
    /// request's `Overrides`, a gRPC caller's deadline) — the earlier of `attempt_timeout` from
    /// `start` and the deadline, or, for a probe of a down host, the breaker's shorter wait; and
    /// when, before that, its silence counts as its host's failure. Starts the deadline's clock at
    /// `start` if it has not started.
    pub(crate) fn attempt_limits(
        &mut self,
        request: Option<&RequestView<'_>>,
        start: Instant,
    ) -> Limits {
        // The call's start, which the budget asks when it pays for a timeout, is known from here on
        // even without a deadline.
        let started = *self.started.get_or_insert(start);
        let attempt = self
            .attempt_timeout()
            .and_then(|timeout| start.checked_add(timeout));
        let deadline = self.max_elapsed().and_then(|max| started.checked_add(max));
        let mut cut = match (attempt, deadline) {
            (Some(attempt), Some(deadline)) if attempt < deadline => {
                Some((attempt, TimeLimit::Attempt, false))
            }
            (_, Some(deadline)) => Some((deadline, TimeLimit::Deadline, false)),
            (Some(attempt), None) => Some((attempt, TimeLimit::Attempt, false)),
            (None, None) => None,
        };
        // What the policy alone would have set: an attempt cut before it says nothing of the host.
        let s = &self.policy.shared.settings;
        let policy_attempt = s
            .attempt_timeout
            .and_then(|timeout| start.checked_add(timeout));
        let policy_deadline = s.max_elapsed.and_then(|max| started.checked_add(max));
        let policy = match (policy_attempt, policy_deadline) {
            (Some(attempt), Some(deadline)) => Some(attempt.min(deadline)),
            (attempt, deadline) => attempt.or(deadline),
        };
        if let Some((at, _, own)) = &mut cut {
            *own = policy.is_none_or(|policy| *at < policy);
        }
        let (silence, probe) = self.breaker_limits(request, start);
        if let Some(probe) = probe
            && cut.is_none_or(|(at, ..)| probe < at)
        {
            // The breaker's own wait for a probe: its end is the probe's failure.
            cut = Some((probe, TimeLimit::Attempt, false));
        }
        let silence = silence.filter(|silence| cut.is_none_or(|(at, ..)| *silence < at));
        Limits { cut, silence }
    }

    /// How long after the call's start `at` is, in microseconds, for an adapter to keep in a word:
    /// `None` past what a `u32` holds (71 minutes), or before the call's clock has started.
    pub(crate) fn offset(&self, at: Instant) -> Option<u32> {
        let since = at.checked_duration_since(self.started?)?;
        u32::try_from(since.as_micros()).ok()
    }

    /// The instant `offset` microseconds after the call's start.
    pub(crate) fn at_offset(&self, offset: u32) -> Option<Instant> {
        self.started?
            .checked_add(Duration::from_micros(u64::from(offset)))
    }

    /// How long the next attempt may take: the earlier of `attempt_timeout` and what is left before the
    /// deadline (all of `max_elapsed` if its clock has not started); `None` without either.
    pub(crate) fn attempt_time_left(&self) -> Option<Duration> {
        let deadline = self.deadline_left();
        match (deadline, self.attempt_timeout()) {
            (Some(deadline), Some(attempt)) => Some(deadline.min(attempt)),
            (deadline, attempt) => deadline.or(attempt),
        }
    }

    /// Time left before the call's deadline (all of it if its clock has not started); `None` without
    /// one.
    pub(crate) fn deadline_left(&self) -> Option<Duration> {
        match self.started {
            Some(_) => self.remaining(),
            None => self.max_elapsed(),
        }
    }

    /// The call's deadline, counted from its start: the policy's `max_elapsed`, or the caller's own
    /// if sooner ([`limit_deadline`](Self::limit_deadline)).
    pub(crate) fn max_elapsed(&self) -> Option<Duration> {
        match &self.delays {
            Some(delays) if delays.deadline.is_some() => delays.deadline,
            _ => self.policy.shared.settings.max_elapsed,
        }
    }

    /// Ends the call within `within` from now, if that is sooner than its deadline so far (the
    /// policy's [`max_elapsed`](RetryPolicy::max_elapsed)): a deadline the caller set on this request,
    /// such as a gRPC call's `grpc-timeout`. No retry is decided that would wait past it, none is sent
    /// after it, and an attempt in flight when it passes is cut, as with `max_elapsed`. Starts the
    /// deadline's clock now if it had not started.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let backoff = Backoff::fixed(Duration::from_millis(10));
    /// let mut state = RetryPolicy::builder().backoff(backoff).build().unwrap().start(); // 30 s
    /// state.limit_deadline(Duration::from_millis(50)); // the caller's
    /// let refused = Attempt::new(Outcome::RetrySafe(Reason::Connect));
    /// let Decision::Retry(_) = state.decide(refused, None) else { unreachable!() };
    /// tokio::time::sleep(Duration::from_millis(50)).await;
    /// assert_eq!(state.begin_retry(None), Err(StopReason::Deadline));
    /// # }
    /// ```
    pub fn limit_deadline(&mut self, within: Duration) {
        let now = Instant::now();
        let started = *self.started.get_or_insert(now);
        let limit = now
            .saturating_duration_since(started)
            .saturating_add(within);
        let deadline = Some(self.max_elapsed().map_or(limit, |max| max.min(limit)));
        // Rare (a caller's own deadline), so kept with the call's other rare state, on the heap.
        Schedules::of(&mut self.delays, &self.policy.shared).deadline = deadline;
    }
}
