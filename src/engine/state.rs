//! The per-request state machine: turns each attempt's outcome into "retry after d" or "stop, because …".

use std::fmt;
use std::time::Duration;

use crate::time::Instant;

use crate::attempt::{Attempt, Decision, RetryInfo, StopReason};
use crate::classify::{Outcome, Reason, RequestView};
use crate::engine::backoff::DelayState;
use crate::engine::policy::{RetryAfterMode, RetryEvent, RetryPolicy};
use crate::engine::policy_guards::{Holdings, Payment};
use crate::engine::schedules::Schedules;
use crate::observe::log::{self, DelayCause};
use crate::observe::metrics;

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
///     match state.decide(Attempt::new(outcome), None) {
///         Decision::Retry(delay) => tokio::time::sleep(delay).await,
///         Decision::Stop(_) => return result,
///     }
///     if state.begin_retry(None).is_err() {
///         return result; // the deadline passed during the sleep
///     }
/// }
/// # }
/// ```
///
/// Such a loop bounds the time *between* attempts; to bound each attempt too, wrap it in
/// `tokio::time::timeout` with [`RetryPolicy::attempt_timeout`] — or use [`retry`](crate::retry()),
/// which does both.
// The inherent impl of `RetryState`: here, and in `policy_guards.rs` the parts that ask the policy's
// guards (see ARCHITECTURE.md: the one circle left in `engine/`, on purpose).
pub struct RetryState {
    pub(super) policy: RetryPolicy,
    /// The request's delay schedules, from its first draw on. Boxed: on the heap of a request that
    /// retries, they keep the futures of every request small enough for the allocator's fastest size
    /// classes (the reqwest-middleware future fits 1 KiB with them boxed, and does not without).
    pub(super) delays: Option<Box<Schedules>>,
    /// What the request holds of its policy's guards: its host's budget account, a withdrawal not yet
    /// spent.
    pub(super) holdings: Holdings,
    /// Hedged attempts started.
    pub(super) hedges: u32,
    /// When the call started, for its deadline and for the budget; `None` until first needed (see
    /// [`RetryPolicy::start`]): a call whose attempts all answer at their first poll never reads the
    /// clock.
    pub(super) started: Option<Instant>,
    pub(super) attempts: u32,
    /// Of `attempts`, the one retried transparently (gRPC's `REFUSED_STREAM` or `GOAWAY`), which
    /// `max_retries` does not count: at most one a call.
    pub(super) transparent: u32,
    /// Time slept between attempts, in nanoseconds (saturating at 584 years): half a `Duration`, in a
    /// state every request's future holds.
    pub(super) slept: u64,
    pub(super) stop: Option<StopReason>,
    /// The attempt being judged was cut by a time limit of the caller's own, tighter than the
    /// policy's (a request's `Overrides`, a gRPC caller's deadline): it says nothing of the host,
    /// and moves no guard the policy's requests share.
    pub(super) cut_by_caller: bool,
    /// The attempt in flight went silent long past what its host takes, which counted as the
    /// host's failure then: its end says nothing more of the host, but an answer.
    pub(super) silence_counted: bool,
}

impl RetryPolicy {
    /// Starts the retries of one request: deposits into the budget, starts the deadline's clock (when
    /// there is a deadline) and draws the request's own jitter stream.
    ///
    /// For an adapter of your own (see [`RetryState`]); the tower layer, the middleware and
    /// [`retry`](crate::retry()) call it for you.
    ///
    /// ```
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// let policy = RetryPolicy::default();
    /// let mut state = policy.start(); // one per request
    /// let refused = Attempt::new(Outcome::RetrySafe(Reason::Connect));
    /// assert!(matches!(state.decide(refused, None), Decision::Retry(_)));
    /// state.begin_retry(None).unwrap();
    /// let answered = Attempt::new(Outcome::Success);
    /// assert_eq!(state.decide(answered, None), Decision::Stop(StopReason::Success));
    /// assert_eq!(state.info().attempts(), 2);
    /// ```
    pub fn start(&self) -> RetryState {
        let started = self.shared.settings.max_elapsed.map(|_| Instant::now());
        self.start_at(started)
    }

    /// [`start`](Self::start) for an adapter that starts the deadline's clock itself, when an attempt
    /// first has to wait: an attempt that answers at its first poll took no time, and a request that
    /// succeeds that way never reads the clock.
    pub(crate) fn start_unclocked(&self) -> RetryState {
        self.start_at(None)
    }

    fn start_at(&self, started: Option<Instant>) -> RetryState {
        self.shared.deposit();
        RetryState::new(self.clone(), started)
    }

    /// [`start_unclocked`](Self::start_unclocked) of a policy the caller gives up: one reference
    /// count less.
    pub(crate) fn into_started(self) -> RetryState {
        self.shared.deposit();
        RetryState::new(self, None)
    }
}

impl Clone for RetryState {
    /// A copy of the state so far. A pending budget withdrawal stays with the original, so that it is
    /// given back at most once.
    fn clone(&self) -> Self {
        Self {
            policy: self.policy.clone(),
            delays: self.delays.clone(),
            holdings: self.holdings.clone(),
            hedges: self.hedges,
            started: self.started,
            attempts: self.attempts,
            transparent: self.transparent,
            slept: self.slept,
            stop: self.stop,
            cut_by_caller: self.cut_by_caller,
            silence_counted: self.silence_counted,
        }
    }
}

impl Drop for RetryState {
    /// A call given up by its caller (or ended) leaves nothing behind in what the policy's requests
    /// share: a retry's withdrawal not spent goes back to the budget, and a request waiting for its
    /// host to come back leaves the host's waiters.
    fn drop(&mut self) {
        self.give_back();
        self.leave_hosts();
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
            holdings: Holdings::default(),
            hedges: 0,
            started,
            attempts: 0,
            transparent: 0,
            slept: 0,
            stop: None,
            cut_by_caller: false,
            silence_counted: false,
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
    /// let _ = state.decide(Attempt::new(Outcome::Success), None);
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
    /// assert!(matches!(state.decide(refused, None), Decision::Retry(_)));
    /// state.begin_retry(None).unwrap();
    /// assert!(!state.may_retry()); // the retry is the last attempt: send it without a copy
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn may_retry(&self) -> bool {
        self.stop.is_none()
            && self.counted() < self.max_retries()
            && self.remaining() != Some(Duration::ZERO)
    }

    /// Hedged attempts started so far.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) const fn hedges(&self) -> u32 {
        self.hedges
    }

    /// The attempts `max_retries` counts: all but a transparent one.
    pub(super) const fn counted(&self) -> u32 {
        self.attempts.saturating_sub(self.transparent)
    }

    /// Attempts that reached the server's application, as gRPC's `grpc-previous-rpc-attempts`
    /// counts them: all but a transparent one.
    pub(crate) const fn attempts_seen(&self) -> u32 {
        self.counted()
    }

    /// What has happened so far.
    ///
    /// ```
    /// # use stagger::adapter::Attempt;
    /// # use stagger::{Outcome, RetryPolicy, StopReason};
    /// let mut state = RetryPolicy::default().start();
    /// let _ = state.decide(Attempt::new(Outcome::Fatal), None);
    /// let info = state.info();
    /// assert_eq!((info.attempts(), info.stop_reason()), (1, Some(StopReason::Fatal)));
    /// ```
    pub fn info(&self) -> RetryInfo {
        RetryInfo {
            attempts: self.attempts,
            transparent: self.transparent,
            slept: self.slept(),
            cooldown: self.delays.as_ref().map_or(Duration::ZERO, |d| d.cooldown),
            hedges: self.hedges,
            stop: self.stop,
            replicas: self.replicas_reached(),
        }
    }

    /// Whether the call did anything but succeed at its first attempt, as its
    /// [`info`](Self::info) would say, read without making one: only such a call's answer carries a
    /// `RetryInfo` (see [`RetryInfo::FIRST_SUCCESS`]).
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn worth_reporting(&self) -> bool {
        match &self.delays {
            None => {
                self.attempts != 1
                    || self.transparent != 0
                    || self.hedges != 0
                    || self.slept != 0
                    || self.stop != Some(StopReason::Success)
            }
            Some(_) => self.info().worth_reporting(),
        }
    }

    /// Records one attempt of `request` and decides: retry after a delay, or stop.
    ///
    /// `request` is the attempt's HTTP view, if it has one (`None` for work that is not HTTP): its
    /// host's cooldown, budget account and adaptive throttle take part in the decision, and its
    /// method, host and path go into the `tracing` events and the metrics. An adapter that passes
    /// `None` for an HTTP request gets none of the per-host guards.
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
    ///     assert_eq!(state.decide(refused, None), Decision::Retry(Duration::from_millis(10)));
    ///     state.begin_retry(None).unwrap();
    /// }
    /// assert_eq!(state.decide(refused, None), Decision::Stop(StopReason::MaxRetries));
    /// assert_eq!(state.attempts(), 3);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn decide(&mut self, mut attempt: Attempt, request: Option<&RequestView<'_>>) -> Decision {
        // The retry decided last time was sent, since this is its outcome.
        self.spend_payment();
        self.attempts = self.attempts.saturating_add(1);
        if let Some(idempotent) = self.idempotent_override() {
            attempt.idempotent = idempotent;
        }
        self.count_transparent(&mut attempt);
        self.record_response(&attempt, request);
        self.cut_by_caller = false;
        self.silence_counted = false;
        if attempt.outcome.is_retryable() {
            self.add_set_aside(&mut attempt);
        }
        let (decision, cause) = match self.stop_before_delay(&attempt) {
            Some(reason) => (Decision::Stop(reason), DelayCause::Backoff),
            None => self.delay(&attempt, request),
        };
        match decision {
            Decision::Retry(delay) => {
                self.sleep(delay);
                // Only a failure worth retrying is retried: `stop_before_delay` stops on the others.
                if let Some(reason) = attempt.outcome.reason() {
                    self.retried(&attempt, reason, delay, cause, request);
                }
            }
            Decision::Stop(reason) => self.stop(reason, attempt.outcome.reason(), request),
        }
        decision
    }

    /// Counts `attempt` as transparent if it is one the server never saw and the call has had none:
    /// A6 retries such a failure once, at once, uncounted; a second one is an ordinary retry.
    fn count_transparent(&mut self, attempt: &mut Attempt) {
        if !attempt.transparent {
            return;
        }
        if self.transparent == 0 && attempt.outcome.is_retryable() {
            self.transparent = 1;
        } else {
            attempt.transparent = false;
        }
    }

    /// Reports a retry decided for `reason`, and keeps the reason for the call's end, should the
    /// retry never be sent.
    fn retried(
        &mut self,
        attempt: &Attempt,
        reason: Reason,
        delay: Duration,
        cause: DelayCause,
        request: Option<&RequestView<'_>>,
    ) {
        let retry_after = self.effective_retry_after(attempt);
        log::retrying(request, self.attempts, delay, reason, cause);
        metrics::retry(request, reason, cause);
        if let Some(hook) = &self.policy.shared.settings.on_retry {
            hook(&RetryEvent {
                attempt: self.attempts,
                delay,
                reason,
                retry_after,
            });
        }
        // The delay was drawn from the schedules, which are there.
        if let Some(delays) = &mut self.delays {
            delays.failing = Some(reason);
        }
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
        let mut attempt = attempt;
        self.spend_payment();
        self.attempts = self.attempts.saturating_add(1);
        self.count_transparent(&mut attempt);
        self.record_response(&attempt, request);
        self.cut_by_caller = false;
        self.silence_counted = false;
        let reason = self
            .stop_before_delay(&attempt.replayable(false))
            .unwrap_or(StopReason::NotReplayable);
        self.stop(reason, attempt.outcome.reason(), request);
        reason
    }

    /// Call right before sending a retry of `request` that [`decide`](Self::decide) allowed (after
    /// [`recheck_pause`](Self::recheck_pause), with the host cooldown): checks the deadline again,
    /// since the sleep or the inner service's readiness may have overrun it, and commits the retry's
    /// budget withdrawal.
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
    /// let Decision::Retry(delay) = state.decide(refused, None) else { unreachable!() };
    /// tokio::time::sleep(delay).await;
    /// assert_eq!(state.begin_retry(None), Ok(())); // send the retry
    ///
    /// let Decision::Retry(_) = state.decide(refused, None) else { unreachable!() };
    /// tokio::time::sleep(Duration::from_secs(10)).await; // a sleep that overran the deadline
    /// assert_eq!(state.begin_retry(None), Err(StopReason::Deadline)); // do not send it
    /// # Ok(())
    /// # }
    /// ```
    pub fn begin_retry(&mut self, request: Option<&RequestView<'_>>) -> Result<(), StopReason> {
        if self.remaining() == Some(Duration::ZERO) {
            self.abandon(StopReason::Deadline, request);
            return Err(StopReason::Deadline);
        }
        self.spend_payment();
        Ok(())
    }

    /// Ends the retries for `reason` with the retry that was decided unsent, giving back its withdrawal.
    pub(crate) fn abandon(&mut self, reason: StopReason, request: Option<&RequestView<'_>>) {
        self.give_back();
        // The call ends with a retry due: it is still failing, for the reason the retry was for.
        let failing = self.delays.as_ref().and_then(|d| d.failing);
        self.stop(reason, failing, request);
    }

    /// Whether the call's deadline has passed: only a caller's deadline can have passed before the
    /// first attempt ([`limit_deadline`](Self::limit_deadline)).
    #[inline]
    pub(crate) fn out_of_time(&self) -> bool {
        self.remaining() == Some(Duration::ZERO)
    }

    /// The call's deadline passed before its first attempt could be sent: it ends with none made.
    pub(crate) fn expired_before_sending(&mut self, request: Option<&RequestView<'_>>) {
        self.stop(StopReason::Deadline, None, request);
    }

    /// The deadline passed while an attempt was in flight, which counts as made.
    pub(crate) fn cut_by_deadline(&mut self, request: Option<&RequestView<'_>>) {
        self.attempts = self.attempts.saturating_add(1);
        // A deadline the caller set, tighter than the policy's (a gRPC call's `grpc-timeout`, which
        // the channel's own timer may have enforced first), is the caller's limit, not the host's.
        let policy = self.policy.shared.settings.max_elapsed;
        if self
            .max_elapsed()
            .is_some_and(|deadline| policy.is_none_or(|policy| deadline < policy))
        {
            self.cut_by_caller = true;
        }
        // To adaptive throttling, an answer not had in time; to the breaker, a failure. Neither, for
        // a deadline of the caller's own, tighter than the policy's.
        if !self.cut_by_caller {
            self.count_answered(request, false);
        }
        self.record_unanswered(request);
        self.cut_by_caller = false;
        self.silence_counted = false;
        self.stop(StopReason::Deadline, Some(Reason::Timeout), request);
    }

    /// The attempt in flight was cut by a time limit of the caller's own, tighter than the
    /// policy's: what it says of the host, when it is judged, is nothing.
    pub(crate) fn cut_by_callers_limit(&mut self) {
        self.cut_by_caller = true;
    }

    /// How long the call has run, since its clock started; zero before.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started
            .map_or(Duration::ZERO, |started| started.elapsed())
    }

    /// When the deadline passes, starting its clock if it has not started (the tower adapter's,
    /// while its inner service gets ready).
    #[cfg(feature = "tower")]
    pub(crate) fn deadline(&mut self) -> Option<Instant> {
        let max = self.max_elapsed()?;
        self.started
            .get_or_insert_with(Instant::now)
            .checked_add(max)
    }

    /// Time slept between attempts.
    pub(super) fn slept(&self) -> Duration {
        Duration::from_nanos(self.slept)
    }

    pub(super) fn sleep(&mut self, delay: Duration) {
        let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        self.slept = self.slept.saturating_add(nanos);
    }

    /// Ends the retries for `reason`; `failure` is why the last attempt failed, if it did in a way
    /// worth retrying.
    pub(super) fn stop(
        &mut self,
        reason: StopReason,
        failure: Option<Reason>,
        request: Option<&RequestView<'_>>,
    ) {
        self.stop = Some(reason);
        log::stopped(request, self.attempts, self.slept(), reason, failure);
        metrics::call_ended(request, self.attempts, self.slept(), reason, failure);
    }

    /// Time left before the deadline, if there is one and its clock has started.
    pub(super) fn remaining(&self) -> Option<Duration> {
        // The clock first: a call whose attempts all answered at their first poll never started it.
        let started = self.started?;
        let max = self.max_elapsed()?;
        Some(max.saturating_sub(started.elapsed()))
    }

    pub(super) fn effective_retry_after(&self, attempt: &Attempt) -> Option<Duration> {
        match self.policy.shared.settings.retry_after {
            RetryAfterMode::Ignore => None,
            RetryAfterMode::Spread | RetryAfterMode::Strict => attempt.retry_after,
        }
    }

    /// Every reason to stop that does not depend on the delay; `None` if a retry may follow.
    pub(super) fn stop_before_delay(&mut self, attempt: &Attempt) -> Option<StopReason> {
        let s = &self.policy.shared.settings;
        match attempt.outcome {
            Outcome::Success => return Some(StopReason::Success),
            Outcome::Fatal if attempt.opted_out => return Some(StopReason::OptedOut),
            Outcome::Fatal => return Some(StopReason::Fatal),
            Outcome::RetrySafe(_) | Outcome::RetryIfIdempotent(_) | Outcome::RetryAfter(..) => {}
        }
        if attempt.refused_retry {
            return Some(StopReason::Pushback);
        }
        if self.counted() > self.max_retries() {
            return Some(StopReason::MaxRetries);
        }
        if self.max_elapsed().is_some() && self.started.is_none() {
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
    pub(super) fn delay(
        &mut self,
        attempt: &Attempt,
        request: Option<&RequestView<'_>>,
    ) -> (Decision, DelayCause) {
        let shared = &*self.policy.shared;
        let s = &shared.settings;
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
        if self.host_fails_fast(request) {
            self.linger(None);
            return (Decision::Stop(StopReason::HostDown), cause);
        }
        let remaining = self.remaining();
        let requeue = self.requeue();
        // Seeded at the first retry: a request that succeeds at once pays nothing for them.
        let schedules = Schedules::of(&mut self.delays, shared);
        // A transparent retry goes at once (A6), and leaves the backoff where it was; so does the
        // retry of a failed probe of a down replica, to a replica that is up: the call is not made
        // to pay for the breaker's probing.
        let backoff_delay = if attempt.transparent || requeue {
            Duration::ZERO
        } else if cause == DelayCause::Throttle {
            schedules
                .throttle
                .get_or_insert_with(|| {
                    Box::new(DelayState::new(
                        &s.throttle_backoff,
                        shared.guards.next_stream(),
                    ))
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
                floor
                    + Schedules::of(&mut self.delays, shared)
                        .transient
                        .uniform(window)
            }
        };
        // A retry due at the deadline itself would have no time to run: it is not taken either.
        if remaining.is_some_and(|remaining| delay >= remaining) {
            return (Decision::Stop(StopReason::Deadline), cause);
        }
        // Adaptive throttling is asked before the budget, so that a retry it rejects spends nothing.
        if self.admit(request).is_err() {
            self.linger(Some(delay));
            return (Decision::Stop(StopReason::Throttled), cause);
        }
        // A refusal that asked for a pause, with the host cooldown on: the retry waits its turn.
        let spread = matches!(attempt.signal, crate::attempt::HostSignal::Refused { .. })
            && self.policy.shared.guards.hosts().cooldown();
        match self.pay(request, attempt.outcome.reason(), spread) {
            Payment::Free => {}
            Payment::Paid(withdrawal) => self.hold_payment(withdrawal),
            Payment::Refused => {
                self.linger(Some(delay));
                return (Decision::Stop(StopReason::Budget), cause);
            }
        }
        if attempt.restarts_backoff
            && let Some(delays) = &mut self.delays
        {
            // The schedules are there: the delay was drawn from them.
            delays
                .transient
                .restart(&self.policy.shared.settings.backoff);
        }
        (Decision::Retry(delay), cause)
    }
}
