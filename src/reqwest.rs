//! [`RetryMiddleware`] for `reqwest-middleware`.

use std::error::Error;
use std::future::{Future, poll_fn};
use std::ops::ControlFlow;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use tracing::{Instrument, Span};

use crate::attempt::{ResendCount, RetryInfo};
use crate::classify::{AsError, RequestView};
use crate::drive::call::{Call, Start};
use crate::drive::hedge::{Hedge, HedgeContext, HeldRacers};
use crate::drive::held::Held;
use crate::engine::live::{LivePolicy, PolicySource};
use crate::engine::overrides::Overrides;
use crate::engine::policy::RetryPolicy;
use crate::observe::span;
use crate::replay::{HttpReplay, Judge, NextAttempt, Replay};

/// Retries the requests of a `reqwest-middleware` client, as its [`RetryPolicy`] says.
///
/// ```no_run
/// use reqwest_middleware::ClientBuilder;
/// use stagger::{RetryInfo, RetryMiddleware, RetryPolicy};
///
/// # async fn run() -> Result<(), reqwest_middleware::Error> {
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(RetryPolicy::default()))
///     .build();
/// let response = client.get("http://localhost:8080/").send().await?;
/// let attempts = RetryInfo::of(response.extensions()).attempts();
/// # Ok(())
/// # }
/// ```
///
/// The decisions are those of the tower [`RetryLayer`](crate::RetryLayer): the same state machine. A
/// request whose body cannot be copied (a stream) is sent once and its result returned, rather than
/// refused.
///
/// # What a call ends with
///
/// - When the retries stop on a response, that response (`Ok`, intact), with [`RetryInfo`] in its
///   extensions.
/// - When they stop on an error, the error as it came from the rest of the chain, so
///   `reqwest::Error::is_connect()` and `is_timeout()` still answer.
/// - When a time limit of the policy ends the call without a response to hand back, an
///   `Error::Middleware` holding a [`stagger::Elapsed`](crate::Elapsed).
///
/// A `reqwest::Error` has no room for the [`RetryInfo`], and wrapping it would hide its kind, so for an
/// error the info is put into the request's `Extensions`, which the caller of
/// `ClientWithMiddleware::execute_with_extensions` reads afterwards. For callers of
/// `RequestBuilder::send`, whose extensions are dropped inside `send`, the middleware writes it, for
/// every outcome, into a [`RetryReport`] that the request carries:
///
/// ```no_run
/// use reqwest_middleware::ClientBuilder;
/// use stagger::{RetryMiddleware, RetryPolicy, RetryReport};
///
/// # async fn run() {
/// # let client = ClientBuilder::new(reqwest::Client::new())
/// #     .with(RetryMiddleware::new(RetryPolicy::default()))
/// #     .build();
/// let report = RetryReport::new();
/// let result = client
///     .get("http://localhost:8080/items")
///     .with_extension(report.clone())
///     .send()
///     .await;
/// if let (Err(error), Some(info)) = (&result, report.get()) {
///     eprintln!("gave up after {} attempts ({:?}): {error}", info.attempts(), info.stop_reason());
/// }
/// # }
/// ```
///
/// One retry budget is shared by every request through the middleware, and by every clone of its policy.
///
/// Given a [`LivePolicy`](crate::LivePolicy) in place of a [`RetryPolicy`], the middleware runs each
/// call under the policy it holds when the call starts, which
/// [`reload`](crate::LivePolicy::reload) changes while the client runs.
#[derive(Debug, Clone)]
pub struct RetryMiddleware<P = RetryPolicy> {
    policy: P,
}

impl<P: PolicySource> RetryMiddleware<P> {
    /// A middleware that retries under `policy`: a [`RetryPolicy`], or a
    /// [`LivePolicy`](crate::LivePolicy).
    ///
    /// ```
    /// use std::time::Duration;
    /// use reqwest_middleware::ClientBuilder;
    /// use stagger::{Backoff, RetryMiddleware, RetryPolicy};
    ///
    /// let policy = RetryPolicy::builder()
    ///     .backoff(Backoff::exponential(Duration::from_millis(200)))
    ///     .max_retries(2)
    ///     .build()?;
    /// let middleware = RetryMiddleware::new(policy);
    /// assert_eq!(middleware.policy().max_retries(), 2);
    /// let client = ClientBuilder::new(reqwest::Client::new()).with(middleware).build();
    /// # let _ = client;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub const fn new(policy: P) -> Self {
        Self { policy }
    }

    /// The policy in use: the [`RetryPolicy`], or the [`LivePolicy`](crate::LivePolicy), it was
    /// given.
    pub fn policy(&self) -> &P {
        &self.policy
    }
}

/// Where [`RetryMiddleware`] writes the [`RetryInfo`] of a request sent with
/// `RequestBuilder::send`: attach a clone with `.with_extension(report.clone())`, read it after.
///
/// Clones share one slot; each request through the middleware overwrites it.
///
/// An error from `send` has no room for the [`RetryInfo`]; the report has it. Against a server that
/// refuses every connection:
///
/// ```
/// use reqwest_middleware::ClientBuilder;
/// use stagger::{RetryMiddleware, RetryPolicy, RetryReport, StopReason};
///
/// # fn refuse<'a>(
/// #     _: reqwest::Request,
/// #     _: &'a mut http::Extensions,
/// #     _: reqwest_middleware::Next<'a>,
/// # ) -> std::pin::Pin<Box<dyn std::future::Future<Output = reqwest_middleware::Result<reqwest::Response>> + Send + 'a>> {
/// #     Box::pin(async { Err(reqwest_middleware::Error::middleware(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))) })
/// # }
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let policy = RetryPolicy::builder().max_retries(3).build().unwrap();
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(policy))
/// #   .with(refuse) // in place of the network
///     .build();
/// let report = RetryReport::new();
/// let result = client
///     .get("http://localhost:8080/items")
///     .with_extension(report.clone())
///     .send()
///     .await;
/// assert!(result.is_err());
/// let info = report.get().unwrap();
/// assert_eq!((info.attempts(), info.stop_reason()), (4, Some(StopReason::MaxRetries)));
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct RetryReport(Arc<Mutex<Option<RetryInfo>>>);

impl RetryReport {
    /// An empty report.
    ///
    /// ```
    /// # use stagger::RetryReport;
    /// let report = RetryReport::new();
    /// assert_eq!(report.get(), None);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The [`RetryInfo`] of the last request that carried this report, once it has ended.
    ///
    /// ```
    /// use reqwest_middleware::ClientBuilder;
    /// use stagger::{RetryMiddleware, RetryPolicy, RetryReport, StopReason};
    ///
    /// # fn answer<'a>(
    /// #     _: reqwest::Request,
    /// #     _: &'a mut http::Extensions,
    /// #     _: reqwest_middleware::Next<'a>,
    /// # ) -> std::pin::Pin<Box<dyn std::future::Future<Output = reqwest_middleware::Result<reqwest::Response>> + Send + 'a>> {
    /// #     Box::pin(async { Ok(reqwest::Response::from(http::Response::new(""))) })
    /// # }
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let client = ClientBuilder::new(reqwest::Client::new())
    ///     .with(RetryMiddleware::new(RetryPolicy::default()))
    /// #   .with(answer) // in place of the network
    ///     .build();
    /// let report = RetryReport::new();
    /// let request = client.get("http://localhost:8080/").with_extension(report.clone());
    /// assert_eq!(report.get(), None); // not sent yet
    /// let response = request.send().await.unwrap();
    /// assert_eq!(report.get().unwrap().stop_reason(), Some(StopReason::Success));
    /// # let _ = response;
    /// # }
    /// ```
    pub fn get(&self) -> Option<RetryInfo> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn set(&self, info: RetryInfo) {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(info);
    }
}

type MiddlewareResult = reqwest_middleware::Result<Response>;
/// A trip through the rest of the chain, as reqwest-middleware's `Next::run` gives it: `Send`, but
/// in the browser, where reqwest-middleware's futures are not.
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
type Trip<'a> = dyn Future<Output = MiddlewareResult> + Send + 'a;
#[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
type Trip<'a> = dyn Future<Output = MiddlewareResult> + 'a;
type BoxFuture<'a> = Pin<Box<Trip<'a>>>;

/// Sends an attempt through the rest of the chain, in a span of its own inside the call's (the
/// current span, `handle`'s), entered while the attempt is polled, so that the middlewares after this
/// one nest in it. With no subscriber for it, the chain's own future, and nothing more: the span's
/// wrapper would take an allocation of its own.
fn send<'n>(
    next: Next<'n>,
    request: Request,
    extensions: &'n mut Extensions,
    resend: Option<ResendCount>,
) -> BoxFuture<'n> {
    let span = attempt_span(&request, resend);
    if span.is_disabled() {
        return next.run(request, extensions);
    }
    Box::pin(answered(next.run(request, extensions)).instrument(span))
}

/// An attempt's span, a child of the call's (the current span: `handle` instruments the call with
/// it, and an attempt's span is not entered while the next is made).
#[inline]
fn attempt_span(request: &Request, resend: Option<ResendCount>) -> Span {
    if !span::enabled() {
        return Span::none();
    }
    span::attempt(
        &Span::current(),
        || Some(RequestView::from_reqwest(request)),
        resend,
    )
}

/// The attempt, its answer's status recorded on its span (the current one while it is polled).
async fn answered(attempt: impl Future<Output = MiddlewareResult>) -> MiddlewareResult {
    let result = attempt.await;
    if let Ok(response) = &result {
        span::answered(&Span::current(), response.status());
    }
    result
}

/// The retry loop of a call under `policy`: send, judge, and sleep or return, as the call's state
/// machine says. One function for every [`PolicySource`], compiled here, with the engine's small
/// functions inlined into it; given the policy (a pointer) rather than the call's state, which an
/// argument of the future would hold twice (64 bytes more).
async fn run<'n>(
    policy: RetryPolicy,
    mut request: Request,
    extensions: &mut Extensions,
    next: Next<'n>,
) -> MiddlewareResult {
    // No local but these lives across an await, since each would take room in the future that
    // every request allocates (a moved-from local keeps its room to the end of its scope).
    let mut call = Call::new(policy.into_started());
    if let Some(overrides) = extensions.get::<Overrides>() {
        call.retry_mut().apply_overrides(*overrides);
    }
    // The request itself goes first; the held copy stays for the retries (see `Held`). Each
    // retry's trip through the rest of the chain is built before the pause and first polled after
    // it, so that the request waits in that future rather than in this one: reqwest-middleware's
    // chain does nothing until polled.
    // The corridor of `drive`. The request itself goes first; the held copy stays for the
    // retries (see `Held`), each made when it is due (`Call::begin_retry`) and sent at once.
    let result = 'call: {
        // With `host_cooldown`, a host that asked for a pause holds the first attempt too. The
        // verdict is taken apart before the pause, so that it takes no room in the future.
        if call.start(|| Some(RequestView::from_reqwest(&request))) == Start::AfterPause {
            let view = || Some(RequestView::from_reqwest(&request));
            if let Err(result) = poll_fn(|cx| call.poll_resume(view().as_ref(), cx)).await {
                break 'call result;
            }
            if let Err(result) = call.begin(view().as_ref()) {
                break 'call result;
            }
        }
        // Copied only now: a request that waited for its host may never have gone.
        let mut held = Held::prepare(call.retry(), &HttpReplay, &mut request);
        // A hedge goes through the rest of the chain with extensions of its own: a copy of the
        // request's, made before the first attempt borrows them.
        let mut hedge: Hedge<Trip<'n>, (Extensions, Next<'n>)> =
            Hedge::new(call.retry(), || (extensions.clone(), next.clone()));
        // For the sender beneath: the replica it goes to, when its name has replicas.
        if let Some(replica) = NextAttempt::new(call.retry()).replica() {
            extensions.insert(replica);
        }
        let mut sending = send(next.clone(), request, extensions, None);
        loop {
            let answered = poll_fn(|cx| {
                let mut racers = HeldRacers {
                    held: &mut held,
                    replay: &HttpReplay,
                    // The rest of the chain takes any request at any time.
                    ready: |_: &mut Context<'_>, _: &mut (Extensions, Next<'n>)| Poll::Ready(true),
                    send: |request,
                           (extensions, next): &mut (Extensions, Next<'n>),
                           resend,
                           replica| {
                        let mut extensions = extensions.clone();
                        if let Some(count) = resend {
                            extensions.insert(count);
                        }
                        if let Some(replica) = replica {
                            extensions.insert(replica);
                        }
                        let next = next.clone();
                        let span = attempt_span(&request, resend);
                        let hedged: BoxFuture<'n> = Box::pin(
                            async move { answered(next.run(request, &mut extensions)).await }
                                .instrument(span),
                        );
                        Some(hedged)
                    },
                };
                hedge.poll(&mut call, sending.as_mut(), cx, &mut racers)
            })
            .await;
            if let ControlFlow::Break(result) = call.decide(answered, &HttpReplay, &held) {
                break result;
            }
            // The attempt is over: its connection goes back to the pool before the pause.
            drop(sending);
            let resumed = poll_fn(|cx| {
                let view = HttpReplay.view(held.sent());
                call.poll_resume(view.as_ref(), cx)
            })
            .await;
            if let Err(result) = resumed {
                break result;
            }
            match call.begin_retry(&HttpReplay, &mut held) {
                Ok(retry) => {
                    // For the middlewares after this one: which resend it is.
                    let next_attempt = NextAttempt::new(call.retry());
                    let resend = next_attempt.resend_count();
                    if let Some(count) = resend {
                        extensions.insert(count);
                    }
                    if let Some(replica) = next_attempt.replica() {
                        extensions.insert(replica);
                    }
                    sending = send(next.clone(), retry, extensions, resend);
                }
                Err(result) => break result,
            }
        }
    };
    if call.retry().attempts() > 1 {
        // The caller's extensions as they were given: the count was for the chain below.
        extensions.remove::<ResendCount>();
    }
    if !call.retry().policy().replica_sets().is_empty() {
        // So was the replica.
        extensions.remove::<crate::Replica>();
    }
    let mut result = result;
    let report = extensions.get::<RetryReport>().cloned();
    match &mut result {
        // A success at the first attempt is not marked (`RetryInfo::FIRST_SUCCESS`), nor is its
        // `RetryInfo` made.
        Ok(_) if !call.retry().worth_reporting() => {
            if let Some(report) = report {
                report.set(RetryInfo::FIRST_SUCCESS);
            }
        }
        Ok(response) => {
            let info = call.retry().info();
            if let Some(report) = report {
                report.set(info.clone());
            }
            // The browser's response has no extensions: the request's take the info.
            #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
            extensions.insert(info.clone());
            <HttpReplay as Judge<Request, Response, reqwest_middleware::Error>>::report(
                response, info,
            );
        }
        Err(error) => {
            // A response carries its own; the request's extensions get it only for an error, since
            // an empty extensions map costs an allocation to insert into.
            let info = error.info();
            if let Some(report) = report {
                report.set(info.clone());
            }
            extensions.insert(info);
        }
    }
    result.map_err(|error| match error.split() {
        Ok(inner) => inner,
        Err(other) => match (other.elapsed(), other.rejected()) {
            (Some(elapsed), _) => reqwest_middleware::Error::middleware(elapsed.clone()),
            (_, Some(rejected)) => reqwest_middleware::Error::middleware(rejected.clone()),
            (None, None) => reqwest_middleware::Error::middleware(other),
        },
    })
}

/// The hedge's copy of the request's extensions and of `next`, the same for every race of a call.
impl HedgeContext for (Extensions, Next<'_>) {}

/// Written out rather than with `#[async_trait]`, whose future would hold the arguments again beside the
/// retry loop's own future. One `impl` for each [`PolicySource`] rather than one generic over them:
/// a generic `impl` is compiled in the user's crate, where the engine's small functions are not
/// inlined into the retry loop (115 instructions more a request, callgrind).
impl Middleware for RetryMiddleware<RetryPolicy> {
    fn handle<'s, 'e, 'n, 'f>(
        &'s self,
        request: Request,
        extensions: &'e mut Extensions,
        next: Next<'n>,
    ) -> Pin<Box<Trip<'f>>>
    where
        's: 'f,
        'e: 'f,
        'n: 'f,
        Self: 'f,
    {
        handle(self.policy.clone(), request, extensions, next)
    }
}

/// As for a [`RetryPolicy`], each call under the policy the [`LivePolicy`] holds when it starts.
impl Middleware for RetryMiddleware<LivePolicy> {
    fn handle<'s, 'e, 'n, 'f>(
        &'s self,
        request: Request,
        extensions: &'e mut Extensions,
        next: Next<'n>,
    ) -> Pin<Box<Trip<'f>>>
    where
        's: 'f,
        'e: 'f,
        'n: 'f,
        Self: 'f,
    {
        handle(self.policy.current(), request, extensions, next)
    }
}

/// `Middleware::handle` of a call under `policy`: the call in its span, when one is wanted.
#[inline(always)]
fn handle<'f>(
    policy: RetryPolicy,
    request: Request,
    extensions: &'f mut Extensions,
    next: Next<'f>,
) -> Pin<Box<Trip<'f>>> {
    let call = span::call(|| Some(RequestView::from_reqwest(&request)));
    if call.is_disabled() {
        return Box::pin(run(policy, request, extensions, next));
    }
    // The caller's span, which gets the call's resend count at its end as it does untraced (the
    // count the engine records goes on the span current then: the call's own).
    let caller = Span::current();
    Box::pin(async move {
        let result = run(policy, request, extensions, next)
            .instrument(call)
            .await;
        let info = match &result {
            #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
            Ok(response) => response.extensions().get::<RetryInfo>(),
            _ => extensions.get::<RetryInfo>(),
        };
        if let Some(info) = info {
            span::resends(&caller, info.attempts());
        }
        result
    })
}

impl AsError for reqwest_middleware::Error {
    fn as_error(&self) -> &(dyn Error + 'static) {
        match self {
            reqwest_middleware::Error::Reqwest(e) => e,
            reqwest_middleware::Error::Middleware(e) => {
                let e: &(dyn Error + Send + Sync + 'static) = e.as_ref();
                e
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    static FUTURE_SIZE: AtomicUsize = AtomicUsize::new(0);

    /// Runs the retry loop as `RetryMiddleware` does, noting the size of its future.
    struct Measure(RetryMiddleware);

    #[async_trait::async_trait]
    impl Middleware for Measure {
        async fn handle(
            &self,
            request: Request,
            extensions: &mut Extensions,
            next: Next<'_>,
        ) -> reqwest_middleware::Result<Response> {
            let future = run(self.0.policy.clone(), request, extensions, next);
            FUTURE_SIZE.store(std::mem::size_of_val(&future), Ordering::SeqCst);
            future.await
        }
    }

    fn answer_200<'a>(
        _request: Request,
        _extensions: &'a mut Extensions,
        _next: Next<'a>,
    ) -> Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'a>> {
        Box::pin(async { Ok(Response::from(http::Response::new(""))) })
    }

    /// Every request boxes this future once, so its size is paid on every request, and past 1 KiB the
    /// allocation leaves glibc's per-thread cache. A guard against a regression: holding the request
    /// twice (the original and its copy) and the timer inline made it 1 176 bytes and cost 339 more
    /// instructions per request (callgrind); with the deadline's bookkeeping it was 1 072 until the
    /// delay state moved to the heap of requests that retry; 984 bytes then, 1 016 with the throttle
    /// schedule and the host's pause (whose verdict is taken apart before its await, or it would
    /// take 136 bytes more), and 1 024 with hedging, after the time waited for a pause moved to the
    /// heap with the delays, the time slept became nanoseconds in a `u64`, a recording's `Held` was
    /// boxed, and the hedge's copy of the extensions and of `next` went into the race's box (1 064
    /// bytes before).
    #[tokio::test]
    async fn the_retry_loop_future_stays_small() {
        let measure = Measure(RetryMiddleware::new(crate::RetryPolicy::default()));
        let chain: Vec<Arc<dyn Middleware>> = vec![Arc::new(measure), Arc::new(answer_200)];
        let client = reqwest_middleware::ClientWithMiddleware::new(reqwest::Client::new(), chain);
        let response = client.get("http://example.invalid/").send().await;
        assert_eq!(response.expect("answered").status(), http::StatusCode::OK);
        let size = FUTURE_SIZE.load(Ordering::SeqCst);
        assert!(size <= 1024, "the retry loop's future is {size} bytes");
    }
}
