//! What both HTTP adapters share: turning an attempt of an HTTP request into an [`Attempt`].

use std::time::SystemTime;

use http::{Extensions, HeaderMap, Method, StatusCode};

use crate::attempt::Signal;
use crate::attempt::{Attempt, RetryInfo};
use crate::classify::grpc::{self, GrpcCode};
use crate::classify::{AsError, AttemptResult, DefaultClassifier, Outcome, RequestView};
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
/// idempotency from the request, `Retry-After` from a retryable response.
pub(crate) fn judge<Res, E>(
    policy: &RetryPolicy,
    request: &RequestView<'_>,
    result: &Result<Res, E>,
) -> Attempt
where
    Res: HttpResponse,
    E: AsError,
{
    if !policy.shared.settings.custom_classifier
        && let Some(attempt) = judge_grpc(policy, request, result)
    {
        return attempt;
    }
    let seen = match result {
        Ok(response) => AttemptResult::Response {
            status: response.status(),
            headers: response.headers(),
            extensions: response.extensions(),
        },
        Err(error) => AttemptResult::Error(error.as_error()),
    };
    let outcome = policy.classifier().classify(request, &seen);
    let attempt = Attempt::new(outcome).idempotent(policy.is_idempotent(request));
    let retryable = outcome.is_retryable();
    let cooldown = policy.host_cooldown();
    // A success or a fatal answer reads no header, unless the policy keeps the pauses hosts ask for.
    if !retryable && !cooldown {
        return attempt;
    }
    let AttemptResult::Response {
        status, headers, ..
    } = seen
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

/// Judges an attempt of a gRPC call as gRPC's retry design (A6) does, or `None` if neither the request
/// nor the response is gRPC's (`content-type: application/grpc…`).
///
/// - A Trailers-Only response (`grpc-status` in its headers) is judged by its code: `OK` succeeds, a
///   code the method retries ([`RetryPolicy::grpc_codes_of`]) is retried, any other is fatal.
///   `RESOURCE_EXHAUSTED` is throttling. To the host's cooldown, `RESOURCE_EXHAUSTED` and a retried
///   code with a pushback are refusals, as a `429` and a `503` with a delay are. Its pushback is the
///   retry's floor: `grpc-retry-pushback-ms`,
///   or else the `RetryInfo` in `grpc-status-details-bin`, after which the backoff starts over (A6);
///   a negative or malformed `grpc-retry-pushback-ms` refuses the retry.
/// - Response headers without `grpc-status` mean messages follow: the call is committed, a success to
///   the retries, whatever its trailers say later.
/// - A response that is not gRPC's to a gRPC request (a proxy's `502`) has the code gRPC's clients
///   give it ([`GrpcCode::from_http`]).
/// - An error is judged as for HTTP: what the server never saw (a refused connection,
///   `REFUSED_STREAM`) is retried, anything ambiguous (a timeout, a reset) only for a method marked
///   idempotent: a gRPC request is a `POST`.
fn judge_grpc<Res, E>(
    policy: &RetryPolicy,
    request: &RequestView<'_>,
    result: &Result<Res, E>,
) -> Option<Attempt>
where
    Res: HttpResponse,
    E: AsError,
{
    // Every gRPC call is a `POST` (gRPC over HTTP/2: `:method POST`): any other request is HTTP's,
    // and its answer is judged without reading a header here.
    if *request.method() != Method::POST {
        return None;
    }
    let response = match result {
        Ok(response) => response,
        Err(error) => {
            request.grpc_method()?;
            let outcome = DefaultClassifier::error(error.as_error());
            return Some(Attempt::new(outcome).idempotent(policy.is_idempotent(request)));
        }
    };
    let headers = response.headers();
    let code = if grpc::is_grpc(headers) {
        match grpc::status_in(headers) {
            Some(code) => code,
            None if response.status() == StatusCode::OK => {
                return Some(Attempt::new(Outcome::Success).signal(accepted(policy)));
            }
            None => GrpcCode::from_http(response.status()).unwrap_or(GrpcCode::Unknown),
        }
    } else {
        request.grpc_method()?;
        GrpcCode::from_http(response.status())?
    };
    let codes = request
        .grpc_method()
        .map_or_else(|| policy.grpc_retry_on(), |name| policy.grpc_codes_of(name));
    let outcome = grpc::classify(code, codes);
    let attempt = Attempt::new(outcome).idempotent(policy.is_idempotent(request));
    if !outcome.is_retryable() {
        return Some(attempt.signal(accepted(policy)));
    }
    let (delay, refused) = match pushback(headers) {
        Some(Pushback::After(delay)) => (Some(delay), false),
        Some(Pushback::Stop) => (None, true),
        None => (retry_info(headers), false),
    };
    let throttled = code == GrpcCode::ResourceExhausted;
    // To the host's cooldown, as a `429` and a `503` with a delay are to HTTP's: a refusal.
    let signal = if policy.host_cooldown() && (throttled || delay.is_some()) {
        Signal::Refused {
            asked: delay.unwrap_or_default(),
            pace: None,
        }
    } else {
        Signal::Nothing
    };
    Some(
        attempt
            .retry_after(delay)
            .refused_retry(refused)
            .restarts_backoff(delay.is_some())
            .throttled(throttled)
            .signal(signal),
    )
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
