//! Judging: what an attempt of an HTTP request, or of a gRPC call, means to the state machine, turned
//! into an [`Attempt`]: the policy's classifier's outcome, and what the answer says besides (a server's
//! delay, throttling, what it tells the host's cooldown), read as HTTP's ([`http`]) or gRPC's
//! ([`grpc`]). The adapters' [`Judge`](crate::adapter::Judge) implementations call it; nothing here
//! copies or sends a request.

mod grpc;
mod http;

use ::http::{Extensions, HeaderMap, Method, StatusCode};

use crate::attempt::HostSignal;
use crate::attempt::{Attempt, RetryInfo};
use crate::classify::grpc::is_grpc;
use crate::classify::{AsError, AttemptResult, RequestView};
use crate::engine::policy::RetryPolicy;
use grpc::grpc_signals;
#[cfg(feature = "tonic")]
pub(crate) use grpc::status_response;
use http::http_signals;

/// An HTTP response as the adapters see it: `http::Response` and `reqwest::Response`.
///
/// Code generic over it works with either client's responses:
///
/// ```
/// use stagger::adapter::HttpResponse;
/// use stagger::RetryInfo;
///
/// fn describe(response: &impl HttpResponse) -> String {
///     let attempts = RetryInfo::of(response.extensions()).attempts();
///     format!("{} after {attempts} attempt(s)", response.status())
/// }
///
/// let response = http::Response::builder().status(503).body(()).unwrap();
/// assert_eq!(describe(&response), "503 Service Unavailable after 1 attempt(s)");
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a response stagger's HTTP classifier can read",
    note = "stagger reads `::http::Response<B>` (http 1.x), and `reqwest::Response` with its `reqwest` feature (reqwest 0.13)",
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

impl<B> HttpResponse for ::http::Response<B> {
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

// The browser's `reqwest::Response` has no extensions: it is judged by its status and headers
// (`judge_answer`), and is no `HttpResponse`.
#[cfg(all(
    feature = "reqwest",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
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
    judge_seen(policy, request, &seen)
}

/// [`judge`] for an answer read by its status and headers alone: the browser's reqwest response,
/// which has no extensions.
#[cfg(all(feature = "reqwest", target_arch = "wasm32", target_os = "unknown"))]
pub(crate) fn judge_answer<E: AsError>(
    policy: &RetryPolicy,
    request: &RequestView<'_>,
    result: &Result<reqwest::Response, E>,
) -> Attempt {
    let none = Extensions::new();
    let seen = match result {
        Ok(response) => AttemptResult::Response {
            status: response.status(),
            headers: response.headers(),
            extensions: &none,
        },
        Err(error) => AttemptResult::Error(error.as_error()),
    };
    judge_seen(policy, request, &seen)
}

/// What an attempt whose result was `seen` means, judged by the policy's classifier: see [`judge`].
fn judge_seen(
    policy: &RetryPolicy,
    request: &RequestView<'_>,
    seen: &AttemptResult<'_>,
) -> Attempt {
    let answered = matches!(seen, AttemptResult::Response { .. });
    let classified = |request: &RequestView<'_>| {
        let outcome = policy.classifier().classify(request, seen);
        (Attempt::new(outcome).idempotent(policy.is_idempotent(request))).answered(answered)
    };
    // Every gRPC call is a `POST` (gRPC over HTTP/2: `:method POST`): any other request is HTTP's,
    // and is judged without a look at gRPC's rules or headers.
    if *request.method() != Method::POST {
        return http_signals(policy, seen, classified(request));
    }
    // The classifier sees the policy's gRPC rules through the view: the default one applies them,
    // and so does a classifier of one's own that falls back to it.
    let request = request.with_grpc_rules(policy.grpc_rules());
    let attempt = classified(&request);
    if is_grpc_call(&request, seen) {
        return grpc_signals(policy, &request, seen, attempt);
    }
    http_signals(policy, seen, attempt)
}

/// Whether an attempt is a gRPC call's: its request says so, or its response does.
fn is_grpc_call(request: &RequestView<'_>, seen: &AttemptResult<'_>) -> bool {
    request.grpc_method().is_some()
        || matches!(seen, AttemptResult::Response { headers, .. } if is_grpc(headers))
}

/// What an answer the host did not refuse tells its cooldown, when the policy keeps one.
pub(super) fn accepted(policy: &RetryPolicy) -> HostSignal {
    if policy.host_cooldown() {
        HostSignal::Accepted {
            spent: None,
            pace: None,
        }
    } else {
        HostSignal::Nothing
    }
}

/// Puts what happened into the response the call ends with.
pub(crate) fn record<Res: HttpResponse>(response: &mut Res, info: RetryInfo) {
    response.extensions_mut().insert(info);
}
