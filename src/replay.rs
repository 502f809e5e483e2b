//! How an adapter copies one kind of request and judges its attempts; shared by both adapters.

use std::fmt;

use http::Method;

use crate::classify::{AsError, Outcome, RequestView};
use crate::http::{HttpResponse, judge, record};
use crate::policy::{Attempt, RetryInfo, RetryPolicy};

/// The request of an attempt, as the layer still has it when the result arrives.
#[derive(Debug)]
pub enum Sent<'a, Req, K> {
    /// The copy kept for the next attempt.
    Copy(&'a Req),
    /// What was kept of a request sent without a copy (see [`Replay::keep`]).
    Kept(&'a K),
}

/// How an adapter copies one kind of request and judges its attempts.
///
/// [`HttpReplay`] serves `http` and `reqwest` types; [`ReplayFn`] any request that is [`Clone`].
pub trait Replay<Req, Res, E> {
    /// What is kept of a request sent without a copy, to judge its result.
    type Kept;

    /// A copy of `request` for another attempt, or `None` if it cannot be copied (a streaming body), in
    /// which case it is sent once.
    fn clone_request(&self, request: &Req) -> Option<Req>;

    /// What to keep of a request that is sent without a copy.
    fn keep(&self, request: &Req) -> Self::Kept;

    /// Judges one attempt's result. `replayable` is `false` when the request could not be copied.
    fn attempt(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, Req, Self::Kept>,
        result: &Result<Res, E>,
        replayable: bool,
    ) -> Attempt;

    /// Records what happened in the final result (for HTTP, in the response's extensions).
    fn record(&self, result: &mut Result<Res, E>, info: RetryInfo);
}

/// Copies and judges HTTP requests: `http::Request<B>` with `B: Clone`, and `reqwest::Request` (feature
/// `reqwest`), whose streaming bodies cannot be copied and are sent once. Judging uses the policy's
/// [`ClassifyHttp`](crate::ClassifyHttp).
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpReplay;

impl<B, Res, E> Replay<http::Request<B>, Res, E> for HttpReplay
where
    B: Clone,
    Res: HttpResponse,
    E: AsError,
{
    type Kept = Method;

    fn clone_request(&self, request: &http::Request<B>) -> Option<http::Request<B>> {
        // `http::Request` is not `Clone` because its extensions are not; the extensions a client reads
        // are cloneable, and `Extensions::clone` copies those.
        let mut copy = http::Request::new(request.body().clone());
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.version_mut() = request.version();
        *copy.headers_mut() = request.headers().clone();
        *copy.extensions_mut() = request.extensions().clone();
        Some(copy)
    }

    fn keep(&self, request: &http::Request<B>) -> Method {
        request.method().clone()
    }

    fn attempt(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, http::Request<B>, Method>,
        result: &Result<Res, E>,
        replayable: bool,
    ) -> Attempt {
        let view = match request {
            Sent::Copy(r) => RequestView::new(r.method(), r.uri(), r.headers()),
            Sent::Kept(method) => RequestView::method_only(method),
        };
        judge(policy, &view, result, replayable)
    }

    fn record(&self, result: &mut Result<Res, E>, info: RetryInfo) {
        record(result, info);
    }
}

#[cfg(feature = "reqwest")]
impl<E: AsError> Replay<reqwest::Request, reqwest::Response, E> for HttpReplay {
    type Kept = Method;

    fn clone_request(&self, request: &reqwest::Request) -> Option<reqwest::Request> {
        request.try_clone()
    }

    fn keep(&self, request: &reqwest::Request) -> Method {
        request.method().clone()
    }

    fn attempt(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, reqwest::Request, Method>,
        result: &Result<reqwest::Response, E>,
        replayable: bool,
    ) -> Attempt {
        let view = match request {
            Sent::Copy(r) => RequestView::from_reqwest(r),
            Sent::Kept(method) => RequestView::method_only(method),
        };
        judge(policy, &view, result, replayable)
    }

    fn record(&self, result: &mut Result<reqwest::Response, E>, info: RetryInfo) {
        record(result, info);
    }
}

/// Copies any [`Clone`] request and judges each result with a closure; made by
/// `RetryLayer::with_classifier`.
///
/// The closure's [`Outcome`] is taken as it is: every retryable outcome counts as idempotent.
#[derive(Clone, Copy)]
pub struct ReplayFn<F> {
    classify: F,
}

impl<F> ReplayFn<F> {
    /// Judges each result with `classify`.
    pub const fn new(classify: F) -> Self {
        Self { classify }
    }
}

impl<F> fmt::Debug for ReplayFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayFn").finish_non_exhaustive()
    }
}

impl<F, Req, Res, E> Replay<Req, Res, E> for ReplayFn<F>
where
    Req: Clone,
    F: Fn(&Result<Res, E>) -> Outcome,
{
    type Kept = ();

    fn clone_request(&self, request: &Req) -> Option<Req> {
        Some(request.clone())
    }

    fn keep(&self, _request: &Req) {}

    fn attempt(
        &self,
        _policy: &RetryPolicy,
        _request: Sent<'_, Req, ()>,
        result: &Result<Res, E>,
        replayable: bool,
    ) -> Attempt {
        Attempt::new((self.classify)(result)).replayable(replayable)
    }

    fn record(&self, _result: &mut Result<Res, E>, _info: RetryInfo) {}
}

/// Judges an attempt with `replay` and asks the state machine: `Continue(delay)` to retry, the result
/// dropped now (so that its connection goes back to the pool, or is closed, before the sleep rather than
/// after it), or `Break(result)`, the final result with [`RetryInfo`] recorded in it. The one step both
/// adapters take after every attempt.
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
pub(crate) fn conclude<Req, Res, E, R>(
    replay: &R,
    retry: &mut crate::RetryState,
    sent: Sent<'_, Req, R::Kept>,
    mut result: Result<Res, E>,
    replayable: bool,
) -> std::ops::ControlFlow<Result<Res, E>, std::time::Duration>
where
    R: Replay<Req, Res, E>,
{
    use std::ops::ControlFlow;

    let attempt = replay.attempt(retry.policy(), sent, &result, replayable);
    match retry.decide(attempt) {
        crate::Decision::Retry(delay) => ControlFlow::Continue(delay),
        crate::Decision::Stop(_) => {
            replay.record(&mut result, retry.info());
            ControlFlow::Break(result)
        }
    }
}

/// What the tower adapter holds of the request in flight.
#[cfg(feature = "tower")]
pub(crate) enum Held<Req, K> {
    /// A copy for the next attempt.
    Copy(Req),
    /// What judging needs of a request sent without a copy.
    Kept(K),
}

#[cfg(feature = "tower")]
impl<Req, K> Held<Req, K> {
    /// Keeps a copy of `request` when a retry may follow it, and only what judging needs otherwise: no
    /// copy is made for an attempt that can never be retried.
    pub(crate) fn prepare<Res, E, R>(retry: &crate::RetryState, replay: &R, request: &Req) -> Self
    where
        R: Replay<Req, Res, E, Kept = K>,
    {
        if retry.may_retry()
            && let Some(copy) = replay.clone_request(request)
        {
            return Held::Copy(copy);
        }
        Held::Kept(replay.keep(request))
    }

    /// The request for a retry: a copy of the held one, which stays in place for the retry after, or,
    /// when no retry can follow this one (or the copy cannot be copied again), the held one itself.
    ///
    /// Sending a copy rather than the held request leaves the held request where it is: a future waiting
    /// in a busy runtime is cold in the cache, and moving a request out of it and a new copy back in cost
    /// more than the copy itself (`examples/herd.rs`, 10 000 clients).
    ///
    /// Returns `None` if nothing is held but what judging needs, which the state machine never retries.
    pub(crate) fn next<Res, E, R>(&mut self, retry: &crate::RetryState, replay: &R) -> Option<Req>
    where
        R: Replay<Req, Res, E, Kept = K>,
    {
        let Held::Copy(held) = self else {
            return None;
        };
        if retry.may_retry()
            && let Some(copy) = replay.clone_request(held)
        {
            return Some(copy);
        }
        let kept = Held::Kept(replay.keep(held));
        match std::mem::replace(self, kept) {
            Held::Copy(request) => Some(request),
            Held::Kept(_) => None,
        }
    }

    /// The request as judging sees it, and whether it can be sent again.
    pub(crate) fn sent(&self) -> (Sent<'_, Req, K>, bool) {
        match self {
            Held::Copy(copy) => (Sent::Copy(copy), true),
            Held::Kept(kept) => (Sent::Kept(kept), false),
        }
    }
}
