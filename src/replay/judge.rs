//! What both HTTP adapters share: turning an attempt of an HTTP request into an [`Attempt`].

use std::time::SystemTime;

use http::{Extensions, HeaderMap, Method, StatusCode};

use crate::attempt::Signal;
use crate::attempt::{Attempt, RetryInfo};
use crate::classify::grpc::{self, GrpcCode};
use crate::classify::{AsError, AttemptResult, Outcome, Reason, RequestView};
use crate::engine::policy::RetryPolicy;
use crate::signals::grpc::{Pushback, pushback, retry_info};
use crate::signals::pushback::{quota_exhausted, quota_pace, says_throttled, server_delay};

/// An HTTP response as the adapters see it: `http::Response` and `reqwest::Response`.
///
/// Code generic over it works with either client's responses:
///
/// ```
/// use stagger::adapter::HttpResponse;
/// use stagger::RetryInfo;
///
/// fn describe(response: &impl HttpResponse) -> String {
///     let attempts = response.extensions().get::<RetryInfo>().map_or(1, RetryInfo::attempts);
///     format!("{} after {attempts} attempt(s)", response.status())
/// }
///
/// let response = http::Response::builder().status(503).body(()).unwrap();
/// assert_eq!(describe(&response), "503 Service Unavailable after 1 attempt(s)");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a response stagger's HTTP classifier can read",
    note = "stagger reads `http::Response<B>` (http 1.x), and `reqwest::Response` with its `reqwest` feature (reqwest 0.13)",
    note = "a second copy of `http` or `reqwest` in `cargo tree -d` (another major version) is a different type: align the versions",
    note = "for a service whose responses are not HTTP, use `RetryLayer::classify_with`"
)]
pub trait HttpResponse {
    /// The response's status.
    fn status(&self) -> StatusCode;
    /// The response's headers.
    fn headers(&self) -> &HeaderMap;
    /// The response's extensions, which the classifier sees.
    fn extensions(&self) -> &Extensions;
    /// The response's extensions, where [`RetryInfo`] is put.
    fn extensions_mut(&mut self) -> &mut Extensions;
}

impl<B> HttpResponse for http::Response<B> {
    fn status(&self) -> StatusCode {
        self.status()
    }
    fn headers(&self) -> &HeaderMap {
        self.headers()
    }
    fn extensions(&self) -> &Extensions {
        self.extensions()
    }
    fn extensions_mut(&mut self) -> &mut Extensions {
        self.extensions_mut()
    }
}

#[cfg(feature = "reqwest")]
impl HttpResponse for reqwest::Response {
    fn status(&self) -> StatusCode {
        self.status()
    }
    fn headers(&self) -> &HeaderMap {
        self.headers()
    }
    fn extensions(&self) -> &Extensions {
        self.extensions()
    }
    fn extensions_mut(&mut self) -> &mut Extensions {
        self.extensions_mut()
    }
}

/// Classifies one attempt with the policy's classifier and gathers what the state machine needs:
/// idempotency from the request, `Retry-After` from a retryable response; for a gRPC call, what
/// gRPC's answers say (see [`grpc_signals`]).
pub(crate) fn judge<Res, E>(
    policy: &RetryPolicy,
    request: &RequestView<'_>,
    result: &Result<Res, E>,
) -> Attempt
where
    Res: HttpResponse,
    E: AsError,
{
    let seen = match result {
        Ok(response) => AttemptResult::Response {
            status: response.status(),
            headers: response.headers(),
            extensions: response.extensions(),
        },
        Err(error) => AttemptResult::Error(error.as_error()),
    };
    let classified = |request: &RequestView<'_>| {
        let outcome = policy.classifier().classify(request, &seen);
        Attempt::new(outcome).idempotent(policy.is_idempotent(request))
    };
    // Every gRPC call is a `POST` (gRPC over HTTP/2: `:method POST`): any other request is HTTP's,
    // and is judged without a look at gRPC's rules or headers.
    if *request.method() != Method::POST {
        return http_signals(policy, &seen, classified(request));
    }
    // The classifier sees the policy's gRPC rules through the view: the default one applies them,
    // and so does a classifier of one's own that falls back to it.
    let request = request.with_grpc_rules(policy.grpc_rules());
    let attempt = classified(&request);
    if is_grpc_call(&request, &seen) {
        return grpc_signals(policy, &request, &seen, attempt);
    }
    http_signals(policy, &seen, attempt)
}

/// Whether an attempt is a gRPC call's: its request says so, or its response does.
fn is_grpc_call(request: &RequestView<'_>, seen: &AttemptResult<'_>) -> bool {
    request.grpc_method().is_some()
        || matches!(seen, AttemptResult::Response { headers, .. } if grpc::is_grpc(headers))
}

/// What an HTTP answer says besides its outcome: a server's delay, throttling, and what it tells the
/// host's cooldown.
fn http_signals(policy: &RetryPolicy, seen: &AttemptResult<'_>, attempt: Attempt) -> Attempt {
    let retryable = attempt.outcome().is_retryable();
    let cooldown = policy.host_cooldown();
    // A success or a fatal answer reads no header, unless the policy keeps the pauses hosts ask for.
    if !retryable && !cooldown {
        return attempt;
    }
    let AttemptResult::Response {
        status, headers, ..
    } = *seen
    else {
        return attempt;
    };
    // A server's delay means something on a 429 (RFC 6585), a 503 and a 413 (RFC 9110 §10.2.3,
    // §15.5.14), and on a 403 that says a rate limit is spent; on a 502 or a 500 it is read as
    // nothing, and the backoff decides.
    let rate_limit =
        status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::FORBIDDEN && retryable;
    let refusal = rate_limit || status == StatusCode::SERVICE_UNAVAILABLE;
    let delay = if refusal || status == StatusCode::PAYLOAD_TOO_LARGE && retryable {
        server_delay(headers, SystemTime::now())
    } else {
        None
    };
    let throttled =
        rate_limit || status == StatusCode::SERVICE_UNAVAILABLE && says_throttled(headers);
    let signal = if !cooldown {
        Signal::Nothing
    } else if rate_limit || refusal && delay.is_some() {
        // A refusal: a 429 (or a rate-limited 403) whatever it says, a 503 that asks for a delay.
        Signal::Refused {
            asked: delay.unwrap_or_default(),
            pace: quota_pace(headers),
        }
    } else if refusal {
        // A 503 with nothing to say of a rate: a failure, which tells the pacer nothing.
        Signal::Nothing
    } else {
        // Any other answer was admitted; it can still say the next one would not be.
        match quota_exhausted(headers, &SystemTime::now) {
            Some(spent) => Signal::Accepted {
                spent: Some(spent),
                pace: quota_pace(headers),
            },
            None => Signal::Accepted {
                spent: None,
                pace: None,
            },
        }
    };
    attempt
        .retry_after(delay.filter(|_| retryable))
        .throttled(retryable && throttled)
        .signal(signal)
}

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
fn grpc_signals(
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
    let (delay, refused) = match pushback(headers) {
        Some(Pushback::After(delay)) => (Some(delay), false),
        Some(Pushback::Stop) => (None, true),
        None => (retry_info(headers), false),
    };
    let throttled = code == GrpcCode::ResourceExhausted;
    let signal = if policy.host_cooldown() && (throttled || delay.is_some()) {
        Signal::Refused {
            asked: delay.unwrap_or_default(),
            pace: None,
        }
    } else {
        Signal::Nothing
    };
    attempt
        .retry_after(delay)
        .refused_retry(refused)
        .restarts_backoff(delay.is_some())
        .throttled(throttled)
        .signal(signal)
}

/// What an answer the host did not refuse tells its cooldown, when the policy keeps one.
fn accepted(policy: &RetryPolicy) -> Signal {
    if policy.host_cooldown() {
        Signal::Accepted {
            spent: None,
            pace: None,
        }
    } else {
        Signal::Nothing
    }
}

/// Puts what happened into the response the call ends with.
pub(crate) fn record<Res: HttpResponse>(response: &mut Res, info: RetryInfo) {
    response.extensions_mut().insert(info);
}
