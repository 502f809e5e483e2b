//! What a gRPC call's answer says besides its outcome, and the answer a call stagger ends without one
//! ends with.

use crate::attempt::{Attempt, HostSignal};
use crate::classify::grpc::{self, GrpcCode};
use crate::classify::{AttemptResult, Outcome, Reason, RequestView};
use crate::engine::policy::RetryPolicy;
use crate::judge::accepted;
use crate::judge::http::http_signals;
use crate::signals::grpc::{GrpcPushback, pushback, retry_info};

/// What a gRPC call's answer says besides its outcome, as gRPC's retry design (A6) reads it:
///
/// - a Trailers-Only response's pushback is the retry's floor: `grpc-retry-pushback-ms`, or else the
///   `RetryInfo` in `grpc-status-details-bin`, after which the backoff starts over; a negative or
///   malformed `grpc-retry-pushback-ms` refuses the retry. `RESOURCE_EXHAUSTED` is throttling. To
///   the host's cooldown, `RESOURCE_EXHAUSTED` and a retried code with a pushback are refusals, as a
///   `429` and a `503` with a delay are to HTTP's;
/// - a status the policy retries but the method's rule leaves out stops the call as opted out;
/// - an answer that is not gRPC's (a proxy's `429` or `503`) is read as HTTP's: its `Retry-After`
///   or rate-limit header is the floor, and a `429` waits on the throttle schedule;
/// - an error the server's application never saw (`REFUSED_STREAM`, a graceful `GOAWAY`) is A6's
///   transparent retry.
pub(super) fn grpc_signals(
    policy: &RetryPolicy,
    request: &RequestView<'_>,
    seen: &AttemptResult<'_>,
    attempt: Attempt,
) -> Attempt {
    let outcome = attempt.outcome();
    let headers = match *seen {
        AttemptResult::Response { headers, .. } => headers,
        AttemptResult::Error(_) => {
            let unseen = matches!(
                outcome,
                Outcome::RetrySafe(Reason::RefusedStream | Reason::GoAway)
            );
            return attempt.transparent(unseen);
        }
    };
    if !grpc::is_grpc(headers) {
        return http_signals(policy, seen, attempt);
    }
    let Some(code) = grpc::status_in(headers) else {
        // Messages follow: committed.
        return attempt.signal(accepted(policy));
    };
    if !outcome.is_retryable() {
        // A status the policy retries, left out by the method's own rule: an opt-out, not a fatal
        // answer.
        let opted_out = outcome == Outcome::Fatal
            && policy.grpc_retry_on().contains(code)
            && !request.grpc_codes().contains(code)
            && (code != GrpcCode::ResourceExhausted || grpc::names_a_delay(headers));
        return attempt.opted_out(opted_out).signal(accepted(policy));
    }
    let (pushed, refused) = match pushback(headers) {
        Some(GrpcPushback::After(delay)) => (Some(delay), false),
        Some(GrpcPushback::Stop) => (None, true),
        None => (retry_info(headers), false),
    };
    // A delay the classifier named (`Outcome::RetryAfter`) floors the retry as the pushback does;
    // the longer of the two is waited, and only the pushback starts the backoff over (A6).
    let delay = pushed.max(attempt.retry_after);
    let throttled = code == GrpcCode::ResourceExhausted;
    let signal = if policy.host_cooldown() && (throttled || delay.is_some()) {
        HostSignal::Refused {
            asked: delay.unwrap_or_default(),
            pace: None,
        }
    } else {
        HostSignal::Nothing
    };
    attempt
        .retry_after(delay)
        .refused_retry(refused)
        .restarts_backoff(pushed.is_some())
        .throttled(throttled)
        .signal(signal)
}

/// The answer a gRPC call ends with when stagger ends it without one: `DEADLINE_EXCEEDED` for a time
/// limit that passed with none in hand, `UNAVAILABLE` for a call not sent (its host paused, adaptive
/// throttling), as a Trailers-Only response, which tonic gives the caller as a `Status` of that code
/// whose message is the error's; `None` for any other error.
#[cfg(feature = "tonic")]
pub(crate) fn status_response<B: Default, E>(
    error: &crate::error::Error<E>,
) -> Option<::http::Response<B>> {
    use ::http::{HeaderValue, StatusCode};

    let code = if error.elapsed().is_some() {
        GrpcCode::DeadlineExceeded
    } else if error.rejected().is_some() {
        GrpcCode::Unavailable
    } else {
        return None;
    };
    let mut response = ::http::Response::new(B::default());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(
        ::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert("grpc-status", HeaderValue::from(u16::from(code.code())));
    if let Ok(message) = HeaderValue::from_str(&percent_encode(&error.to_string())) {
        headers.insert("grpc-message", message);
    }
    Some(response)
}

/// `message` as `grpc-message` carries it: percent-encoded but for printable ASCII other than `%`
/// (PROTOCOL-HTTP2).
#[cfg(feature = "tonic")]
fn percent_encode(message: &str) -> String {
    let mut encoded = String::with_capacity(message.len());
    for byte in message.bytes() {
        if (0x20..=0x7e).contains(&byte) && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}
