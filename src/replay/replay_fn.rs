//! [`ReplayFn`]: copying any `Clone` request and judging its results with a closure.

use std::fmt;

use crate::attempt::{Attempt, RetryInfo};
use crate::classify::{Outcome, RequestView};
use crate::engine::policy::RetryPolicy;
use crate::replay::{Judge, Replay, Sent};

/// Copies any [`Clone`] request and judges each result with a closure; made by
/// `RetryLayer::classify_with`.
///
/// The closure's [`Outcome`] is taken as it is: every retryable outcome counts as idempotent.
///
/// ```
/// use stagger::adapter::{Decision, Judge, ReplayFn, Sent};
/// use stagger::{Outcome, Reason, RetryPolicy};
///
/// let replay = ReplayFn::new(|result: &Result<u32, &str>| match result {
///     Ok(_) => Outcome::Success,
///     Err(_) => Outcome::RetryIfIdempotent(Reason::Other("rpc failed")),
/// });
/// let policy = RetryPolicy::default();
/// let attempt = replay.judge(&policy, Sent::Copy(&7), &Err("rpc failed"));
/// // There is no method to tell: the request counts as idempotent, and is retried.
/// assert!(matches!(policy.start().decide(attempt, None), Decision::Retry(_)));
/// ```
#[derive(Clone, Copy)]
pub struct ReplayFn<F> {
    classify: F,
}

impl<F> ReplayFn<F> {
    /// Judges each result with `classify`.
    ///
    /// ```
    /// use stagger::adapter::{Judge, ReplayFn, Sent};
    /// use stagger::{Outcome, Reason, RetryPolicy};
    ///
    /// let replay = ReplayFn::new(|result: &Result<String, std::io::Error>| match result {
    ///     Ok(_) => Outcome::Success,
    ///     Err(_) => Outcome::RetrySafe(Reason::Connect),
    /// });
    /// let answered = Ok("pong".to_string());
    /// let attempt = replay.judge(&RetryPolicy::default(), Sent::Copy(&"ping"), &answered);
    /// assert_eq!(attempt.outcome(), Outcome::Success);
    /// ```
    pub const fn new(classify: F) -> Self {
        Self { classify }
    }
}

impl<F> fmt::Debug for ReplayFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayFn").finish_non_exhaustive()
    }
}

impl<F, Req: Clone> Replay<Req> for ReplayFn<F> {
    type Kept = ();

    fn clone_request(&self, request: &Req) -> Option<Req> {
        Some(request.clone())
    }

    fn keep(&self, _request: &Req) {}

    fn view<'a>(&self, _request: Sent<'a, Req, ()>) -> Option<RequestView<'a>> {
        None
    }
}

impl<F, Req, Res, E> Judge<Req, Res, E> for ReplayFn<F>
where
    Req: Clone,
    F: Fn(&Result<Res, E>) -> Outcome,
{
    fn judge(
        &self,
        _policy: &RetryPolicy,
        _request: Sent<'_, Req, ()>,
        result: &Result<Res, E>,
    ) -> Attempt {
        Attempt::new((self.classify)(result))
    }

    fn report(_response: &mut Res, _info: RetryInfo) {}
}
