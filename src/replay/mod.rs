//! How an adapter copies one kind of request and judges its attempts; shared by both adapters.

pub(crate) mod body;
pub(crate) mod judge;

use std::fmt;
use std::sync::Arc;

use http::{HeaderMap, Method, Uri};

use crate::attempt::{Attempt, RetryInfo};
use crate::classify::{AsError, IDEMPOTENCY_KEY, Outcome, RequestView};
use crate::engine::policy::RetryPolicy;
use crate::replay::body::{Recorder, ReplayBody, declared_length};
#[cfg(feature = "reqwest")]
use crate::replay::body::{Recording, Unread};
use crate::replay::judge::{HttpResponse, judge, record};

/// The request of an attempt, as the layer still has it when the result arrives.
///
/// A [`Replay`] reads either: the copy kept for retries, or, for the last attempt a request can have
/// (sent without a copy), what [`Replay::keep`] kept of it. [`HttpReplay`] keeps the method and URI:
///
/// ```
/// use http::{HeaderMap, Method, Uri};
/// use stagger::adapter::Sent;
///
/// fn method_of<B>(sent: Sent<'_, http::Request<B>, (Method, Uri, HeaderMap)>) -> &Method {
///     match sent {
///         Sent::Copy(request) => request.method(),
///         Sent::Kept((method, _uri, _headers)) => method,
///     }
/// }
///
/// let request = http::Request::post("http://example.com/orders").body(()).unwrap();
/// assert_eq!(method_of(Sent::Copy(&request)), Method::POST);
/// let kept = (Method::GET, Uri::from_static("http://example.com/items"), http::HeaderMap::new());
/// assert_eq!(method_of::<()>(Sent::Kept(&kept)), Method::GET);
/// ```
#[derive(Debug)]
pub enum Sent<'a, Req, K> {
    /// The copy kept for the next attempt.
    Copy(&'a Req),
    /// What was kept of a request sent without a copy (see [`Replay::keep`]).
    Kept(&'a K),
}

impl<Req, K> Clone for Sent<'_, Req, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Req, K> Copy for Sent<'_, Req, K> {}

/// How an adapter copies one kind of request and judges its attempts.
///
/// [`HttpReplay`] serves `http` and `reqwest` types; [`ReplayFn`] any request that is [`Clone`].
/// A type of your own can do what neither does, such as record the [`RetryInfo`] in a response that is
/// not HTTP, and goes to the tower `Retry` service with `stagger::tower::Retry::new`:
///
/// ```
/// use std::io;
/// use stagger::adapter::{Attempt, Replay, Sent};
/// use stagger::classify::RequestView;
/// use stagger::{Outcome, Reason, RetryInfo, RetryPolicy};
///
/// /// An RPC's reply, with room for what the retries did.
/// struct Reply {
///     value: u32,
///     retries: Option<RetryInfo>,
/// }
///
/// /// Copies `u32` requests, retries refused connections, records the `RetryInfo` in the reply.
/// #[derive(Clone)]
/// struct RpcReplay;
///
/// impl Replay<u32, Reply, io::Error> for RpcReplay {
///     type Kept = ();
///
///     fn clone_request(&self, request: &u32) -> Option<u32> {
///         Some(*request)
///     }
///
///     fn keep(&self, _request: &u32) {}
///
///     fn attempt(
///         &self,
///         _policy: &RetryPolicy,
///         _request: Sent<'_, u32, ()>,
///         result: &Result<Reply, io::Error>,
///     ) -> Attempt {
///         let outcome = match result {
///             Ok(_) => Outcome::Success,
///             Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
///                 Outcome::RetrySafe(Reason::Connect)
///             }
///             Err(_) => Outcome::Fatal,
///         };
///         Attempt::new(outcome)
///     }
///
///     fn view<'a>(&self, _request: Sent<'a, u32, ()>) -> Option<RequestView<'a>> {
///         None
///     }
///
///     fn record(&self, reply: &mut Reply, info: RetryInfo) {
///         reply.retries = Some(info);
///     }
/// }
///
/// # #[cfg(feature = "tower")]
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// # use tower::ServiceExt;
/// # let calls = std::sync::atomic::AtomicU32::new(0);
/// # let flaky = tower::service_fn(|n: u32| {
/// #     let first = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
/// #     async move {
/// #         if first { Err(io::Error::from(io::ErrorKind::ConnectionRefused)) }
/// #         else { Ok(Reply { value: n * 2, retries: None }) }
/// #     }
/// # });
/// // `flaky` refuses the first connection, then answers twice the request:
/// let service = stagger::tower::Retry::new(flaky, RetryPolicy::default(), RpcReplay);
/// let reply = service.oneshot(21).await.unwrap();
/// assert_eq!(reply.value, 42);
/// assert_eq!(reply.retries.unwrap().attempts(), 2);
/// # }
/// # #[cfg(not(feature = "tower"))]
/// # fn main() {}
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot copy and judge `{Req}` requests answered with `Result<{Res}, {E}>`",
    note = "`RetryLayer::new` takes `http::Request<B>` (http 1) with `B: Clone` or `B = stagger::ReplayBody<_>`, and `reqwest::Request` of reqwest 0.13 with stagger's `reqwest` feature; the inner service's error must implement `stagger::adapter::AsError`",
    note = "another major version of reqwest or http (reqwest 0.12, http 0.2) is a different crate whose types stagger does not read: `cargo tree -d` shows the second copy",
    note = "a body that is not `Clone` (hyper's `Incoming`, tonic's `Body`, a `BoxBody`): wrap it in `stagger::ReplayBody`, which records it as it streams out, or buffer it (`http_body_util::Full<Bytes>`)",
    note = "for any other request type, use `RetryLayer::with_classifier(policy, |result| ...)`"
)]
pub trait Replay<Req, Res, E> {
    /// What is kept of a request sent without a copy, to judge its result.
    type Kept;

    /// A copy of `request` for another attempt, or `None` if it cannot be copied (a streaming body), in
    /// which case it is sent once.
    ///
    /// A request copied once must copy again: the adapters keep one copy and make each retry's request
    /// from it when the retry is due. Should a copy refuse, the call ends there, with the last response
    /// received or an [`Error`](crate::Error) that says the request could not be replayed.
    fn clone_request(&self, request: &Req) -> Option<Req>;

    /// What to keep of a request that is sent without a copy.
    fn keep(&self, request: &Req) -> Self::Kept;

    /// Judges one attempt's result. Whether the request can be sent again is not the judge's to say:
    /// the adapter knows whether it holds a copy, and tells the state machine itself.
    fn attempt(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, Req, Self::Kept>,
        result: &Result<Res, E>,
    ) -> Attempt;

    /// The HTTP view of `request`, if it is an HTTP request: whether it is idempotent decides whether
    /// an attempt that timed out is retried (one without a view is retried), and its method, host and
    /// path go into the `tracing` events of the call.
    fn view<'a>(&self, request: Sent<'a, Req, Self::Kept>) -> Option<RequestView<'a>>;

    /// Records what happened in the response the call ends with (for HTTP, in its extensions).
    fn record(&self, response: &mut Res, info: RetryInfo);

    /// For a request whose body cannot be copied: starts recording the body as it streams out, up to
    /// `limit` bytes (the policy's [`replay_buffer`](crate::RetryPolicyBuilder::replay_buffer)), and
    /// returns what a retry is made from. `None`, the default, when this kind of request cannot be
    /// recorded: it is then sent once.
    fn start_recording(&self, request: &mut Req, limit: usize) -> Option<Recorded<Req>> {
        let _ = (request, limit);
        None
    }

    /// The request for a retry, made from a recording: with the recorded body, or, if the body was
    /// dropped before any of it was read (the attempt failed before sending it), with the body itself.
    /// `None` if neither is there — the body did not end within the limit, or ended with trailers or an
    /// error — in which case the call ends with the result in hand. Only called with what
    /// [`start_recording`](Self::start_recording) returned.
    fn replay(&self, recorded: &Recorded<Req>) -> Option<Req> {
        let _ = recorded;
        None
    }
}

/// A request whose body is being recorded for a retry (see [`Replay::start_recording`]): the request
/// without its body, and the recording.
pub struct Recorded<Req> {
    /// The request but for its body. A `ReplayBody`'s template holds, as its body, the slot where the
    /// body comes back if it is dropped unread.
    template: Req,
    recorder: Arc<Recorder>,
    /// Where a reqwest body comes back if it is dropped unread: a `reqwest::Body` has no room for the
    /// slot, as a `ReplayBody` has.
    #[cfg(feature = "reqwest")]
    unread: Option<Arc<Unread<reqwest::Body>>>,
}

impl<Req> Recorded<Req> {
    /// The request as sent, but for its body: what judging and logging read.
    pub fn request(&self) -> &Req {
        &self.template
    }

    /// Whether a retry can be made: the body ended within the limit, or it came back unread.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn replayable(&self) -> bool {
        self.recorder.is_replayable()
    }

    /// Whether the recording holds the whole body, which a retry sends rather than the body itself.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn is_whole(&self) -> bool {
        self.recorder.is_whole()
    }

    /// The most the recording keeps: the policy's `replay_buffer`.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn limit(&self) -> usize {
        self.recorder.limit()
    }
}

impl<Req> fmt::Debug for Recorded<Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorded")
            .field("recorder", &self.recorder)
            .finish_non_exhaustive()
    }
}

/// Copies and judges HTTP requests: `http::Request<B>` with `B: Clone`, and `reqwest::Request` (feature
/// `reqwest`), whose streaming bodies cannot be copied and are sent once. Judging uses the policy's
/// [`ClassifyHttp`](crate::classify::ClassifyHttp).
///
/// `RetryLayer::new` uses it. It judges an attempt with the policy's
/// classifier, the request's idempotency and the response's `Retry-After`:
///
/// ```
/// use std::time::Duration;
/// use http::StatusCode;
/// use stagger::adapter::{Decision, HttpReplay, Replay, Sent};
/// use stagger::{Outcome, Reason, RetryPolicy};
///
/// let policy = RetryPolicy::default();
/// let request = http::Request::post("http://example.com/orders").body("{}").unwrap();
/// let response = http::Response::builder()
///     .status(503)
///     .header("retry-after", "2")
///     .body(())
///     .unwrap();
/// let result: Result<_, std::io::Error> = Ok(response);
///
/// let attempt = HttpReplay.attempt(&policy, Sent::Copy(&request), &result);
/// let unavailable = StatusCode::SERVICE_UNAVAILABLE;
/// assert_eq!(attempt.outcome(), Outcome::RetrySafe(Reason::Status(unavailable)));
/// match policy.start().decide(attempt) {
///     Decision::Retry(delay) => assert!(delay >= Duration::from_secs(2)), // Retry-After is a floor
///     Decision::Stop(reason) => panic!("stopped: {reason}"),
/// }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpReplay;

// A body that is not `Clone` is the usual reason this impl does not apply: without the attribute, the
// compiler would say only "`Body: Clone` is not satisfied", not what `Replay`'s notes say (wrap it in
// `ReplayBody`).
#[diagnostic::do_not_recommend]
impl<B, Res, E> Replay<http::Request<B>, Res, E> for HttpReplay
where
    B: Clone,
    Res: HttpResponse,
    E: AsError,
{
    type Kept = (Method, Uri, HeaderMap);

    fn clone_request(&self, request: &http::Request<B>) -> Option<http::Request<B>> {
        Some(with_body(request, request.body().clone()))
    }

    fn keep(&self, request: &http::Request<B>) -> (Method, Uri, HeaderMap) {
        keep_head(request)
    }

    fn attempt(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, http::Request<B>, (Method, Uri, HeaderMap)>,
        result: &Result<Res, E>,
    ) -> Attempt {
        judge(policy, &http_view(request), result)
    }

    fn view<'a>(
        &self,
        request: Sent<'a, http::Request<B>, (Method, Uri, HeaderMap)>,
    ) -> Option<RequestView<'a>> {
        Some(http_view(request))
    }

    fn record(&self, response: &mut Res, info: RetryInfo) {
        record(response, info);
    }
}

/// `http::Request`s whose body streams out and cannot be copied, wrapped in [`ReplayBody`]: recorded as
/// they are sent, within the policy's `replay_buffer`, and replayed from the recording.
impl<B, Res, E> Replay<http::Request<ReplayBody<B>>, Res, E> for HttpReplay
where
    B: http_body::Body,
    Res: HttpResponse,
    E: AsError,
{
    type Kept = (Method, Uri, HeaderMap);

    fn clone_request(
        &self,
        request: &http::Request<ReplayBody<B>>,
    ) -> Option<http::Request<ReplayBody<B>>> {
        // Only a body replayed from a recording can be copied.
        let bytes = request.body().replayed_bytes()?.clone();
        Some(with_body(request, ReplayBody::replayed(bytes)))
    }

    fn keep(&self, request: &http::Request<ReplayBody<B>>) -> (Method, Uri, HeaderMap) {
        keep_head(request)
    }

    fn attempt(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, http::Request<ReplayBody<B>>, (Method, Uri, HeaderMap)>,
        result: &Result<Res, E>,
    ) -> Attempt {
        judge(policy, &http_view(request), result)
    }

    fn view<'a>(
        &self,
        request: Sent<'a, http::Request<ReplayBody<B>>, (Method, Uri, HeaderMap)>,
    ) -> Option<RequestView<'a>> {
        Some(http_view(request))
    }

    fn record(&self, response: &mut Res, info: RetryInfo) {
        record(response, info);
    }

    fn start_recording(
        &self,
        request: &mut http::Request<ReplayBody<B>>,
        limit: usize,
    ) -> Option<Recorded<http::Request<ReplayBody<B>>>> {
        let declared = declared_length(request.headers());
        let (recorder, unread) = request.body_mut().record(limit, declared)?;
        Some(Recorded {
            template: with_body(request, unread),
            recorder,
            #[cfg(feature = "reqwest")]
            unread: None,
        })
    }

    fn replay(
        &self,
        recorded: &Recorded<http::Request<ReplayBody<B>>>,
    ) -> Option<http::Request<ReplayBody<B>>> {
        let body = match recorded.recorder.body() {
            Some(bytes) => ReplayBody::replayed(bytes),
            None => ReplayBody::new(recorded.template.body().take_unread()?),
        };
        Some(with_body(&recorded.template, body))
    }
}

/// A copy of `request` with `body`. `http::Request` is not `Clone` because its extensions are not;
/// the extensions a client reads are cloneable, and `Extensions::clone` copies those.
fn with_body<B, C>(request: &http::Request<B>, body: C) -> http::Request<C> {
    let mut copy = http::Request::new(body);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    *copy.extensions_mut() = request.extensions().clone();
    copy
}

#[cfg(feature = "reqwest")]
impl<E: AsError> Replay<reqwest::Request, reqwest::Response, E> for HttpReplay {
    type Kept = (Method, reqwest::Url);

    fn clone_request(&self, request: &reqwest::Request) -> Option<reqwest::Request> {
        request.try_clone()
    }

    fn keep(&self, request: &reqwest::Request) -> (Method, reqwest::Url) {
        (request.method().clone(), request.url().clone())
    }

    fn attempt(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, reqwest::Request, (Method, reqwest::Url)>,
        result: &Result<reqwest::Response, E>,
    ) -> Attempt {
        judge(policy, &reqwest_view(request), result)
    }

    fn view<'a>(
        &self,
        request: Sent<'a, reqwest::Request, (Method, reqwest::Url)>,
    ) -> Option<RequestView<'a>> {
        Some(reqwest_view(request))
    }

    fn record(&self, response: &mut reqwest::Response, info: RetryInfo) {
        record(response, info);
    }

    fn start_recording(
        &self,
        request: &mut reqwest::Request,
        limit: usize,
    ) -> Option<Recorded<reqwest::Request>> {
        let body = request.body_mut().take()?;
        // Without its body the request copies; the body goes back, recording as it streams out.
        let template = request.try_clone();
        let recorder = Recorder::start(limit, declared_length(request.headers()), &body);
        let unread = Unread::new();
        *request.body_mut() = Some(reqwest::Body::wrap(Recording::new(
            body,
            Some(Arc::clone(&recorder)),
            Some(Arc::clone(&unread)),
        )));
        Some(Recorded {
            template: template?,
            recorder,
            unread: Some(unread),
        })
    }

    fn replay(&self, recorded: &Recorded<reqwest::Request>) -> Option<reqwest::Request> {
        let mut request = recorded.template.try_clone()?;
        let body = match recorded.recorder.body() {
            Some(bytes) => reqwest::Body::from(bytes),
            None => recorded.unread.as_ref()?.take()?,
        };
        *request.body_mut() = Some(body);
        Some(request)
    }
}

/// What is kept of an `http` request sent without a copy: its method, its target and the headers
/// judging reads — its `Host` when the target is in origin form (the host its cooldown, budget and
/// throttle are kept for), its `Idempotency-Key`. Nothing is allocated for a request without them.
fn keep_head<B>(request: &http::Request<B>) -> (Method, Uri, HeaderMap) {
    let mut headers = HeaderMap::new();
    let kept = request.headers();
    if request.uri().host().is_none()
        && let Some(host) = kept.get(http::header::HOST)
    {
        headers.insert(http::header::HOST, host.clone());
    }
    if let Some(key) = kept.get(IDEMPOTENCY_KEY) {
        headers.insert(IDEMPOTENCY_KEY, key.clone());
    }
    (request.method().clone(), request.uri().clone(), headers)
}

fn http_view<B>(request: Sent<'_, http::Request<B>, (Method, Uri, HeaderMap)>) -> RequestView<'_> {
    match request {
        Sent::Copy(r) => RequestView::new(r.method(), r.uri(), r.headers()),
        Sent::Kept((method, uri, headers)) => RequestView::new(method, uri, headers),
    }
}

#[cfg(feature = "reqwest")]
fn reqwest_view(request: Sent<'_, reqwest::Request, (Method, reqwest::Url)>) -> RequestView<'_> {
    match request {
        Sent::Copy(r) => RequestView::from_reqwest(r),
        Sent::Kept((method, url)) => RequestView::reqwest_without_headers(method, url),
    }
}

/// Copies any [`Clone`] request and judges each result with a closure; made by
/// `RetryLayer::with_classifier`.
///
/// The closure's [`Outcome`] is taken as it is: every retryable outcome counts as idempotent.
///
/// ```
/// use stagger::adapter::{Decision, Replay, ReplayFn, Sent};
/// use stagger::{Outcome, Reason, RetryPolicy};
///
/// let replay = ReplayFn::new(|result: &Result<u32, &str>| match result {
///     Ok(_) => Outcome::Success,
///     Err(_) => Outcome::RetryIfIdempotent(Reason::Other("rpc failed")),
/// });
/// let policy = RetryPolicy::default();
/// let attempt = replay.attempt(&policy, Sent::Copy(&7), &Err("rpc failed"));
/// // There is no method to tell: the request counts as idempotent, and is retried.
/// assert!(matches!(policy.start().decide(attempt), Decision::Retry(_)));
/// ```
#[derive(Clone, Copy)]
pub struct ReplayFn<F> {
    classify: F,
}

impl<F> ReplayFn<F> {
    /// Judges each result with `classify`.
    ///
    /// ```
    /// use stagger::adapter::{Replay, ReplayFn, Sent};
    /// use stagger::{Outcome, Reason, RetryPolicy};
    ///
    /// let replay = ReplayFn::new(|result: &Result<String, std::io::Error>| match result {
    ///     Ok(_) => Outcome::Success,
    ///     Err(_) => Outcome::RetrySafe(Reason::Connect),
    /// });
    /// let answered = Ok("pong".to_string());
    /// let attempt = replay.attempt(&RetryPolicy::default(), Sent::Copy(&"ping"), &answered);
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
    ) -> Attempt {
        Attempt::new((self.classify)(result))
    }

    fn view<'a>(&self, _request: Sent<'a, Req, ()>) -> Option<RequestView<'a>> {
        None
    }

    fn record(&self, _response: &mut Res, _info: RetryInfo) {}
}
