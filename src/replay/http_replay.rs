//! [`HttpReplay`]: copying and judging `http` and `reqwest` requests.

#[cfg(all(
    feature = "reqwest",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
use std::sync::Arc;

use http::{HeaderMap, Method, Uri};

use crate::attempt::{Attempt, RetryInfo};
use crate::classify::grpc::is_grpc;
use crate::classify::{AsError, IDEMPOTENCY_KEY, RequestView};
use crate::engine::overrides::Overrides;
use crate::engine::policy::RetryPolicy;
#[cfg(all(feature = "reqwest", target_arch = "wasm32", target_os = "unknown"))]
use crate::judge::judge_answer as judge_reqwest;
use crate::judge::{HttpResponse, judge, record};
#[cfg(all(
    feature = "reqwest",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
use crate::replay::body::{Recorder, Recording, Unread};
use crate::replay::body::{ReplayBody, declared_length};
use crate::replay::{Judge, NextAttempt, Recorded, Replay, Sent};
#[cfg(all(
    feature = "reqwest",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
use judge as judge_reqwest;

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
/// use stagger::adapter::{Decision, HttpReplay, Judge, Sent};
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
/// let attempt = HttpReplay.judge(&policy, Sent::Copy(&request), &result);
/// let unavailable = StatusCode::SERVICE_UNAVAILABLE;
/// assert_eq!(attempt.outcome(), Outcome::RetrySafe(Reason::Status(unavailable)));
/// match policy.start().decide(attempt, None) {
///     Decision::Retry(delay) => assert!(delay >= Duration::from_secs(2)), // Retry-After is a floor
///     Decision::Stop(reason) => panic!("stopped: {reason}"),
/// }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpReplay;

/// Every `http` request it copies, answered with any HTTP response: judged with the policy's
/// classifier, the request's idempotency and the response's `Retry-After`.
impl<B, Res, E> Judge<http::Request<B>, Res, E> for HttpReplay
where
    HttpReplay: Replay<http::Request<B>, Kept = (Method, Uri, HeaderMap)>,
    Res: HttpResponse,
    E: AsError,
{
    fn judge(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, http::Request<B>, (Method, Uri, HeaderMap)>,
        result: &Result<Res, E>,
    ) -> Attempt {
        judge(policy, &http_view(request), result)
    }

    fn report(response: &mut Res, info: RetryInfo) {
        record(response, info);
    }

    fn status(&self, response: &Res) -> Option<http::StatusCode> {
        Some(response.status())
    }
}

#[cfg(feature = "reqwest")]
impl<E: AsError> Judge<reqwest::Request, reqwest::Response, E> for HttpReplay {
    fn judge(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, reqwest::Request, (Method, reqwest::Url)>,
        result: &Result<reqwest::Response, E>,
    ) -> Attempt {
        judge_reqwest(policy, &reqwest_view(request), result)
    }

    fn report(response: &mut reqwest::Response, info: RetryInfo) {
        #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
        record(response, info);
        // The browser's response has no extensions: `RetryMiddleware` puts the info in the
        // request's, and in its `RetryReport`.
        #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
        let _ = (response, info);
    }

    fn status(&self, response: &reqwest::Response) -> Option<http::StatusCode> {
        Some(response.status())
    }
}

// A body that is not `Clone` is the usual reason this impl does not apply: without the attribute, the
// compiler would say only "`Body: Clone` is not satisfied", not what `Replay`'s notes say (wrap it in
// `ReplayBody`).
#[diagnostic::do_not_recommend]
impl<B: Clone> Replay<http::Request<B>> for HttpReplay {
    type Kept = (Method, Uri, HeaderMap);

    fn clone_request(&self, request: &http::Request<B>) -> Option<http::Request<B>> {
        Some(with_body(request, request.body().clone()))
    }

    fn keep(&self, request: &http::Request<B>) -> (Method, Uri, HeaderMap) {
        keep_head(request)
    }

    fn view<'a>(
        &self,
        request: Sent<'a, http::Request<B>, (Method, Uri, HeaderMap)>,
    ) -> Option<RequestView<'a>> {
        Some(http_view(request))
    }

    fn before_send(&self, request: &mut http::Request<B>, attempt: NextAttempt<'_>) {
        mark_resend(request, attempt);
    }

    fn overrides(&self, request: &http::Request<B>) -> Option<Overrides> {
        request.extensions().get().copied()
    }
}

/// Puts a resend's [`ResendCount`](crate::ResendCount) into its extensions, for the layers below,
/// and the [`Replica`](crate::Replica) it goes to, for the sender beneath them.
pub(crate) fn mark_resend<B>(request: &mut http::Request<B>, attempt: NextAttempt<'_>) {
    if let Some(replica) = attempt.replica() {
        request.extensions_mut().insert(replica);
    }
    if let Some(count) = attempt.resend_count() {
        request.extensions_mut().insert(count);
    }
}

/// `http::Request`s whose body streams out and cannot be copied, wrapped in [`ReplayBody`]: recorded as
/// they are sent, within the policy's `replay_buffer`, and replayed from the recording.
impl<B: http_body::Body> Replay<http::Request<ReplayBody<B>>> for HttpReplay {
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

    fn view<'a>(
        &self,
        request: Sent<'a, http::Request<ReplayBody<B>>, (Method, Uri, HeaderMap)>,
    ) -> Option<RequestView<'a>> {
        Some(http_view(request))
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
            #[cfg(all(
                feature = "reqwest",
                not(all(target_arch = "wasm32", target_os = "unknown"))
            ))]
            unread: None,
            #[cfg(feature = "tonic")]
            tonic_unread: None,
        })
    }

    fn rebuild(
        &self,
        recorded: &Recorded<http::Request<ReplayBody<B>>>,
    ) -> Option<http::Request<ReplayBody<B>>> {
        let body = match recorded.recorder.body() {
            Some(bytes) => ReplayBody::replayed(bytes),
            None => ReplayBody::new(recorded.template.body().take_unread()?),
        };
        Some(with_body(&recorded.template, body))
    }

    fn before_send(&self, request: &mut http::Request<ReplayBody<B>>, attempt: NextAttempt<'_>) {
        mark_resend(request, attempt);
    }

    fn overrides(&self, request: &http::Request<ReplayBody<B>>) -> Option<Overrides> {
        request.extensions().get().copied()
    }
}

/// A copy of `request` with `body`. `http::Request` is not `Clone` because its extensions are not;
/// the extensions a client reads are cloneable, and `Extensions::clone` copies those.
pub(crate) fn with_body<B, C>(request: &http::Request<B>, body: C) -> http::Request<C> {
    let mut copy = http::Request::new(body);
    *copy.method_mut() = request.method().clone();
    *copy.uri_mut() = request.uri().clone();
    *copy.version_mut() = request.version();
    *copy.headers_mut() = request.headers().clone();
    *copy.extensions_mut() = request.extensions().clone();
    copy
}

#[cfg(feature = "reqwest")]
impl Replay<reqwest::Request> for HttpReplay {
    type Kept = (Method, reqwest::Url);

    fn clone_request(&self, request: &reqwest::Request) -> Option<reqwest::Request> {
        request.try_clone()
    }

    fn keep(&self, request: &reqwest::Request) -> (Method, reqwest::Url) {
        (request.method().clone(), request.url().clone())
    }

    fn view<'a>(
        &self,
        request: Sent<'a, reqwest::Request, (Method, reqwest::Url)>,
    ) -> Option<RequestView<'a>> {
        Some(reqwest_view(request))
    }

    // In the browser a body is bytes, which copy, or a multipart form, which does not and is sent
    // once: nothing streams, and nothing is recorded.
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
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
            #[cfg(feature = "tonic")]
            tonic_unread: None,
        })
    }

    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    fn rebuild(&self, recorded: &Recorded<reqwest::Request>) -> Option<reqwest::Request> {
        rebuild_reqwest(&recorded.template, &recorded.recorder, &recorded.unread)
    }
}

/// A retry's `reqwest::Request`, made from `template` and the body `recorder` recorded, or the body
/// itself if it came back unread (to `unread`).
#[cfg(all(
    feature = "reqwest",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub(crate) fn rebuild_reqwest(
    template: &reqwest::Request,
    recorder: &Recorder,
    unread: &Option<Arc<Unread<reqwest::Body>>>,
) -> Option<reqwest::Request> {
    let mut request = template.try_clone()?;
    let body = match recorder.body() {
        Some(bytes) => reqwest::Body::from(bytes),
        None => unread.as_ref()?.take()?,
    };
    *request.body_mut() = Some(body);
    Some(request)
}

/// What is kept of an `http` request sent without a copy: its method, its target and the headers
/// judging reads — its `Host` when the target is in origin form (the host its cooldown, budget and
/// throttle are kept for), its `Idempotency-Key`, a gRPC call's `content-type`. Nothing is allocated for a request without them.
pub(crate) fn keep_head<B>(request: &http::Request<B>) -> (Method, Uri, HeaderMap) {
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
    // A gRPC call is judged as gRPC's (its method's codes), the last attempt too.
    if is_grpc(kept)
        && let Some(content_type) = kept.get(http::header::CONTENT_TYPE)
    {
        headers.insert(http::header::CONTENT_TYPE, content_type.clone());
    }
    (request.method().clone(), request.uri().clone(), headers)
}

pub(crate) fn http_view<B>(
    request: Sent<'_, http::Request<B>, (Method, Uri, HeaderMap)>,
) -> RequestView<'_> {
    match request {
        Sent::Copy(r) => {
            RequestView::new(r.method(), r.uri(), r.headers()).with_extensions(r.extensions())
        }
        Sent::Kept((method, uri, headers)) => RequestView::new(method, uri, headers),
    }
}

#[cfg(feature = "reqwest")]
pub(crate) fn reqwest_view(
    request: Sent<'_, reqwest::Request, (Method, reqwest::Url)>,
) -> RequestView<'_> {
    match request {
        Sent::Copy(r) => RequestView::from_reqwest(r),
        Sent::Kept((method, url)) => RequestView::reqwest_without_headers(method, url),
    }
}
