//! [`GrpcReplay`]: copying and judging the requests of a tonic client (feature `tonic`).

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Uri};

use crate::attempt::{Attempt, RetryInfo};
use crate::classify::AsError;
use crate::engine::policy::RetryPolicy;
use crate::error::Error;
use crate::judge::{judge, record, status_response};
use crate::replay::body::{ReplayBody, declared_length};
use crate::replay::http_replay::{http_view, keep_head, mark_resend, with_body};
use crate::replay::{Judge, NextAttempt, Recorded, Replay, Sent};
use crate::signals::grpc::{encode_timeout, parse_timeout};

type GrpcRequest = http::Request<tonic::body::Body>;

/// Copies and judges the requests of a tonic client (`http::Request<tonic::body::Body>`), as
/// [`RetryLayer::grpc`](crate::RetryLayer::grpc) does; judging is [`HttpReplay`]'s, which reads gRPC's
/// statuses in gRPC's responses.
///
/// tonic's body streams the call's messages out and cannot be copied: it is recorded as it goes, within
/// the policy's [`replay_buffer`](crate::RetryPolicyBuilder::replay_buffer), and a retry sends the
/// recording (a unary call, a client stream that fits), or the body itself if it was never read (the
/// connection was refused). A body longer than the buffer is sent once.
///
/// The deadline the caller set (`tonic::Request::set_timeout`, a generated client's `grpc-timeout`)
/// is the call's deadline, as gRPC defines it: no retry waits past it, none is sent after it, and a
/// call it ends without an answer ends with `DEADLINE_EXCEEDED`.
///
/// Before each attempt it sets gRPC's headers of a retry (A6): `grpc-previous-rpc-attempts` on every
/// attempt after the first (1, 2, …; an attempt the server never saw, retried transparently, is not
/// counted), and `grpc-timeout` to what is left of the call's deadline: the caller's, and the
/// policy's `max_elapsed` only with
/// [`grpc_send_max_elapsed`](crate::RetryPolicyBuilder::grpc_send_max_elapsed). A server takes
/// `grpc-timeout` as the deadline of the whole call, a stream included, so `attempt_timeout` (the
/// client's limit on a response's head) never goes on the wire, and a call without a deadline goes
/// without one: a server stream then lasts as long as the server sends.
///
/// Why not [`HttpReplay`] itself: it copies every `http::Request<B>` whose body is `Clone`, and Rust
/// does not let a second rule for `tonic::body::Body` stand beside that one (tonic could make its body
/// `Clone` one day).
///
/// [`HttpReplay`]: crate::adapter::HttpReplay
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcReplay;

/// The bytes of a replayed body, kept in the request's extensions so that its copies can be made
/// again: a `tonic::body::Body` gives none back. Extensions stay in the process: hyper does not send
/// them.
#[derive(Clone)]
struct ReplayedBody(Bytes);

fn replayed(template: &GrpcRequest, bytes: Bytes) -> GrpcRequest {
    let body: ReplayBody<tonic::body::Body> = ReplayBody::replayed(bytes.clone());
    let body = tonic::body::Body::new(body);
    let mut request = with_body(template, body);
    request.extensions_mut().insert(ReplayedBody(bytes));
    request
}

impl Replay<GrpcRequest> for GrpcReplay {
    type Kept = (Method, Uri, HeaderMap);

    fn clone_request(&self, request: &GrpcRequest) -> Option<GrpcRequest> {
        // Only a body replayed from a recording can be copied.
        let ReplayedBody(bytes) = request.extensions().get::<ReplayedBody>()?;
        Some(replayed(request, bytes.clone()))
    }

    fn keep(&self, request: &GrpcRequest) -> (Method, Uri, HeaderMap) {
        keep_head(request)
    }

    fn view<'a>(
        &self,
        request: Sent<'a, GrpcRequest, (Method, Uri, HeaderMap)>,
    ) -> Option<crate::classify::RequestView<'a>> {
        Some(http_view(request))
    }

    fn start_recording(
        &self,
        request: &mut GrpcRequest,
        limit: usize,
    ) -> Option<Recorded<GrpcRequest>> {
        let mut body = ReplayBody::new(std::mem::take(request.body_mut()));
        let recorded = body.record(limit, declared_length(request.headers()));
        *request.body_mut() = tonic::body::Body::new(body);
        let (recorder, unread) = recorded?;
        Some(Recorded {
            template: with_body(request, tonic::body::Body::empty()),
            recorder,
            #[cfg(all(
                feature = "reqwest",
                not(all(target_arch = "wasm32", target_os = "unknown"))
            ))]
            unread: None,
            tonic_unread: unread.into_unread_slot(),
        })
    }

    fn rebuild(&self, recorded: &Recorded<GrpcRequest>) -> Option<GrpcRequest> {
        match recorded.recorder.body() {
            Some(bytes) => Some(replayed(&recorded.template, bytes)),
            None => {
                let body = recorded.tonic_unread.as_ref()?.take()?;
                Some(with_body(&recorded.template, body))
            }
        }
    }

    fn overrides(&self, request: &GrpcRequest) -> Option<crate::engine::overrides::Overrides> {
        // tonic's `Request::extensions_mut` become the `http::Request`'s.
        request.extensions().get().copied()
    }

    fn before_send(&self, request: &mut GrpcRequest, attempt: NextAttempt<'_>) {
        mark_resend(request, attempt);
        let headers = request.headers_mut();
        let previous = attempt.previous_attempts();
        if previous > 0 {
            headers.insert("grpc-previous-rpc-attempts", HeaderValue::from(previous));
        }
        // The caller's own deadline runs from the call's start, as the call's clock does (the
        // layer started it when it read the header: `deadline`).
        let asked = headers
            .get("grpc-timeout")
            .and_then(parse_timeout)
            .map(|asked| asked.saturating_sub(attempt.elapsed()));
        let ours = attempt
            .deadline_left()
            .filter(|_| attempt.policy().grpc_send_max_elapsed());
        let left = match (asked, ours) {
            (Some(asked), Some(ours)) => Some(asked.min(ours)),
            (asked, ours) => asked.or(ours),
        };
        match left {
            Some(left) => {
                headers.insert("grpc-timeout", encode_timeout(left));
            }
            None => {
                headers.remove("grpc-timeout");
            }
        }
    }

    fn deadline(&self, request: &GrpcRequest) -> Option<Duration> {
        request
            .headers()
            .get("grpc-timeout")
            .and_then(parse_timeout)
    }
}

/// A tonic client's requests, answered with an HTTP response: judged as [`HttpReplay`] judges, gRPC's
/// statuses read in gRPC's responses. The response the call ends with carries its [`RetryInfo`] in
/// its extensions, and, after a retry, `grpc-previous-rpc-attempts` in its headers, which tonic hands
/// to the application as metadata: of the `tonic::Response`, or of the `tonic::Status` a Trailers-Only
/// failure becomes, whose extensions tonic drops (A6: "the client will receive the number of retry
/// attempts made").
///
/// [`HttpReplay`]: crate::adapter::HttpReplay
impl<B, E> Judge<GrpcRequest, http::Response<B>, E> for GrpcReplay
where
    B: Default,
    E: AsError,
{
    const KEEPS_LAST_RESPONSE: bool = false;

    fn judge(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, GrpcRequest, (Method, Uri, HeaderMap)>,
        result: &Result<http::Response<B>, E>,
    ) -> Attempt {
        judge(policy, &http_view(request), result)
    }

    fn report(response: &mut http::Response<B>, info: RetryInfo) {
        let previous = info
            .attempts()
            .saturating_sub(info.transparent())
            .saturating_sub(1);
        if previous > 0 {
            let value = HeaderValue::from(previous);
            response
                .headers_mut()
                .insert("grpc-previous-rpc-attempts", value);
        }
        record(response, info);
    }

    /// A time limit that passed with no answer in hand is `DEADLINE_EXCEEDED`, and a call not sent
    /// (its host paused, adaptive throttling) `UNAVAILABLE`: a Trailers-Only response, as a gRPC
    /// server or proxy answers, which tonic gives the caller as a `Status` of that code, whose
    /// message is the error's (`deadline of 500ms passed after 2 attempts`).
    fn response_for(&self, error: &Error<E>) -> Option<http::Response<B>> {
        status_response(error)
    }
}
