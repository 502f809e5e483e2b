//! What an attempt's outcome means: success, retryable (and how safely), or fatal.
//!
//! The vocabulary ([`Outcome`], [`Reason`]), what a classifier sees ([`RequestView`],
//! [`AttemptResult`]), the [`ClassifyHttp`] trait with [`from_fn`] for closures, and the
//! [`DefaultClassifier`]. What a classifier sees lives in `request.rs`, how errors are recognised in
//! `errors.rs`.

pub(crate) mod as_error;
mod errors;
pub(crate) mod grpc;
pub(crate) mod outcome;
mod request;

pub(crate) use as_error::{AsError, known_error};
pub use grpc::{GrpcCode, GrpcCodes, GrpcMethod, GrpcName};
pub(crate) use outcome::{Outcome, Reason};
pub use request::{AttemptResult, IDEMPOTENCY_KEY, RequestView};

use std::fmt;

use http::{Method, StatusCode};

/// Decides what an HTTP attempt's outcome means.
///
/// The easiest classifier is a closure passed to [`from_fn`]; a type of your own implements this
/// trait. To extend the default rather than replace it, fall back to [`DefaultClassifier`]:
///
/// ```
/// use http::StatusCode;
/// use stagger::classify::{AttemptResult, ClassifyHttp, DefaultClassifier, RequestView};
/// use stagger::{Outcome, Reason, RetryPolicy};
///
/// /// Our gateway answers 409 while a resource is being migrated: worth another try.
/// struct GatewayClassifier;
///
/// impl ClassifyHttp for GatewayClassifier {
///     fn classify(&self, request: &RequestView<'_>, result: &AttemptResult<'_>) -> Outcome {
///         match result {
///             AttemptResult::Response { status: StatusCode::CONFLICT, .. } => {
///                 Outcome::RetryIfIdempotent(Reason::Status(StatusCode::CONFLICT))
///             }
///             _ => DefaultClassifier.classify(request, result),
///         }
///     }
/// }
///
/// let policy = RetryPolicy::builder().classifier(GatewayClassifier).build()?;
/// # let get = http::Request::get("http://example.com/").body(()).unwrap();
/// # let request = RequestView::new(get.method(), get.uri(), get.headers());
/// # let (headers, extensions) = (http::HeaderMap::new(), http::Extensions::new());
/// # let response = |status| AttemptResult::Response { status, headers: &headers, extensions: &extensions };
/// let outcome = policy.classifier().classify(&request, &response(StatusCode::CONFLICT));
/// assert!(outcome.is_retryable());
/// let outcome = policy.classifier().classify(&request, &response(StatusCode::NOT_FOUND));
/// assert_eq!(outcome, Outcome::Fatal); // the default's verdict
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an HTTP classifier",
    label = "expected a `ClassifyHttp`",
    note = "wrap a closure in `stagger::classify::from_fn(|request, result| ...)`: its argument types are then inferred",
    note = "a closure passed here directly must spell its argument types: `|request: &RequestView<'_>, result: &AttemptResult<'_>|`"
)]
pub trait ClassifyHttp: Send + Sync + 'static {
    /// Classifies one attempt of `request`.
    ///
    /// ```
    /// use stagger::classify::{AttemptResult, ClassifyHttp, DefaultClassifier, RequestView};
    /// use stagger::{Outcome, Reason};
    ///
    /// let get = http::Request::get("http://example.com/").body(()).unwrap();
    /// let request = RequestView::new(get.method(), get.uri(), get.headers());
    /// let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    /// let outcome = DefaultClassifier.classify(&request, &AttemptResult::Error(&refused));
    /// assert_eq!(outcome, Outcome::RetrySafe(Reason::Connect));
    /// ```
    fn classify(&self, request: &RequestView<'_>, result: &AttemptResult<'_>) -> Outcome;
}

impl<F> ClassifyHttp for F
where
    F: Fn(&RequestView<'_>, &AttemptResult<'_>) -> Outcome + Send + Sync + 'static,
{
    fn classify(&self, request: &RequestView<'_>, result: &AttemptResult<'_>) -> Outcome {
        self(request, result)
    }
}

/// A classifier from a closure, whose argument types need no annotation.
///
/// The closure gets the request (method, target, headers) and what the attempt produced (a response's
/// status, headers and extensions, or an error) and returns an [`Outcome`]. Falling back to
/// [`DefaultClassifier`] keeps every other rule:
///
/// ```
/// use http::{Method, StatusCode};
/// use stagger::classify::{self, AttemptResult, ClassifyHttp, DefaultClassifier};
/// use stagger::{Outcome, Reason};
/// use stagger::RetryPolicy;
///
/// let policy = RetryPolicy::builder()
///     .classifier(classify::from_fn(|request, result| {
///         match result {
///             // Never retry the payment endpoint, whatever happened.
///             _ if request.path() == Some("/payments") => Outcome::Fatal,
///             // This service answers 409 on /orders for "try again".
///             AttemptResult::Response { status: StatusCode::CONFLICT, .. }
///                 if request.path() == Some("/orders") =>
///             {
///                 Outcome::RetryIfIdempotent(Reason::Status(StatusCode::CONFLICT))
///             }
///             _ => DefaultClassifier.classify(request, result),
///         }
///     }))
///     .build()
///     .unwrap();
/// # let _ = (policy, Method::GET);
/// ```
///
/// A flag in the body (say a JSON `{"retryable": true}`) is read by a layer below the retry layer,
/// which buffers the body, gives the response a copy of it, and leaves the verdict in the response's
/// extensions, where the closure finds it: `examples/classifier.rs` does so with a reqwest-middleware `Middleware` placed after
/// `RetryMiddleware`.
///
/// ```
/// use stagger::classify::{self, AttemptResult, ClassifyHttp, DefaultClassifier};
/// use stagger::{Outcome, Reason};
///
/// /// Put into a response's extensions by the layer that read its body.
/// #[derive(Clone, Copy)]
/// struct BodySaysRetryable;
///
/// let classifier = classify::from_fn(|request, result| match result {
///     AttemptResult::Response { status, extensions, .. }
///         if extensions.get::<BodySaysRetryable>().is_some() =>
///     {
///         Outcome::RetryIfIdempotent(Reason::Status(*status))
///     }
///     _ => DefaultClassifier.classify(request, result),
/// });
/// # let _ = stagger::RetryPolicy::builder().classifier(classifier);
/// ```
pub fn from_fn<F>(classify: F) -> FromFn<F>
where
    F: Fn(&RequestView<'_>, &AttemptResult<'_>) -> Outcome + Send + Sync + 'static,
{
    FromFn(classify)
}

/// The classifier [`from_fn`] makes.
///
/// It is [`Clone`] and [`Copy`] when the closure is: one classifier can serve several policies.
///
/// ```
/// use stagger::classify::{self, ClassifyHttp, DefaultClassifier, FromFn};
/// use stagger::{Outcome, RetryPolicy};
///
/// let never_post: FromFn<_> = classify::from_fn(|request, result| {
///     if request.method() == http::Method::POST {
///         Outcome::Fatal
///     } else {
///         DefaultClassifier.classify(request, result)
///     }
/// });
/// let reads = RetryPolicy::builder().classifier(never_post).build()?;
/// let writes = RetryPolicy::builder().classifier(never_post).max_retries(1).build()?;
/// # let _ = (reads, writes);
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Clone, Copy)]
pub struct FromFn<F>(F);

impl<F> fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FromFn").finish_non_exhaustive()
    }
}

impl<F> ClassifyHttp for FromFn<F>
where
    F: Fn(&RequestView<'_>, &AttemptResult<'_>) -> Outcome + Send + Sync + 'static,
{
    fn classify(&self, request: &RequestView<'_>, result: &AttemptResult<'_>) -> Outcome {
        (self.0)(request, result)
    }
}

/// The default HTTP classifier.
///
/// | outcome | statuses | errors |
/// |---|---|---|
/// | [`Outcome::RetrySafe`] | 429, 503, and a 403 whose headers say a rate limit is spent (`Retry-After`, `X-RateLimit-Remaining: 0`, a `RateLimit` policy with `r=0`: GitHub's primary and secondary limits) | connect failures (refused, unreachable, DNS, a TLS handshake cut short); HTTP/2 `REFUSED_STREAM`, a server's graceful `GOAWAY` for a stream it did not process |
/// | [`Outcome::RetryIfIdempotent`] | 408, 500, 502, 504 and every other 5xx but 501 and 505 | timeouts; connection reset, aborted or closed before the response |
/// | [`Outcome::Fatal`] | other 4xx, 501, 505 | request building, redirect, body decoding, TLS certificate errors, a `GOAWAY` with an error code or sent by the client, and unrecognised errors |
/// | [`Outcome::Success`] | 1xx, 2xx, 3xx | — |
///
/// A gRPC call's answers (a `POST` whose request or response says `content-type: application/grpc`)
/// are read as gRPC's retry design (A6) reads them: a Trailers-Only status the method retries is
/// [`Outcome::RetrySafe`] (`UNAVAILABLE` by default; `RESOURCE_EXHAUSTED` only when the answer names
/// a delay), any other status is [`Outcome::Fatal`], a response whose messages follow is
/// [`Outcome::Success`] (the call is committed), and a proxy's answer has the code gRPC's clients give
/// its HTTP status ([`GrpcCode::from_http`]). The codes are those of the policy judging the call.
///
/// Errors are recognised by walking their [`source`](std::error::Error::source) chain: `std::io::Error` kinds,
/// `reqwest::Error` (feature `reqwest`), `hyper::Error` and `hyper_util`'s client error (features `hyper`,
/// `hyper-util`), `h2::Error` (feature `h2`), `tower::timeout`'s `Elapsed` and a tonic `Channel`'s
/// `TimeoutExpired` (feature `tonic`). The feature `reqwest`
/// implies the other three, so a reqwest client's errors are understood in full whatever else is enabled.
///
/// It does not look at the request: whether a retryable outcome is retried for *this* request (its
/// method, its `Idempotency-Key`) is the policy's decision, after the classifier's.
///
/// ```
/// use http::{Extensions, HeaderMap, StatusCode};
/// use stagger::classify::{AttemptResult, ClassifyHttp, DefaultClassifier, RequestView};
/// use stagger::{Outcome, Reason};
///
/// # let get = http::Request::get("http://example.com/").body(()).unwrap();
/// # let request = RequestView::new(get.method(), get.uri(), get.headers());
/// let (headers, extensions) = (HeaderMap::new(), Extensions::new());
/// let classify = |status| {
///     let response = AttemptResult::Response { status, headers: &headers, extensions: &extensions };
///     DefaultClassifier.classify(&request, &response)
/// };
/// let unavailable = StatusCode::SERVICE_UNAVAILABLE;
/// assert_eq!(classify(unavailable), Outcome::RetrySafe(Reason::Status(unavailable)));
/// let bad_gateway = StatusCode::BAD_GATEWAY;
/// assert_eq!(classify(bad_gateway), Outcome::RetryIfIdempotent(Reason::Status(bad_gateway)));
/// assert_eq!(classify(StatusCode::NOT_FOUND), Outcome::Fatal);
/// assert_eq!(classify(StatusCode::OK), Outcome::Success);
/// ```
// The inherent impl of `DefaultClassifier`: `status` here, `error` in `errors.rs`.
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultClassifier;

impl ClassifyHttp for DefaultClassifier {
    fn classify(&self, request: &RequestView<'_>, result: &AttemptResult<'_>) -> Outcome {
        if let AttemptResult::Response {
            status, headers, ..
        } = *result
            && *request.method() == Method::POST
            && let Some(outcome) = grpc_response(request, status, headers)
        {
            return outcome;
        }
        match *result {
            AttemptResult::Response {
                status: StatusCode::FORBIDDEN,
                headers,
                ..
            } if rate_limited(headers) => Outcome::RetrySafe(Reason::Status(StatusCode::FORBIDDEN)),
            AttemptResult::Response { status, .. } => DefaultClassifier::status(status),
            AttemptResult::Error(error) => DefaultClassifier::error(error),
        }
    }
}

/// The verdict on an answer to a gRPC call, as gRPC's retry design (A6) reads it, or `None` when
/// neither the request nor the response is gRPC's:
///
/// - a Trailers-Only response (`grpc-status` in its headers: no message was sent) is judged by its
///   code: `OK` succeeds, a code the method retries is retried (`RESOURCE_EXHAUSTED` only when the
///   answer names a delay), any other is fatal;
/// - response headers without a status mean messages follow: the call is committed, a success to the
///   retries, whatever its trailers say later;
/// - an answer that is not gRPC's (a proxy's `502`, `503`, `429`) has the code gRPC's clients give
///   it ([`GrpcCode::from_http`]): `UNAVAILABLE` for those three.
///
/// The codes a method retries are those of the policy judging it (its
/// [`grpc_method`](crate::RetryPolicyBuilder::grpc_method) rule, or its
/// [`grpc_retry_on`](crate::RetryPolicyBuilder::grpc_retry_on)), and [`GrpcCodes::DEFAULT`] for a
/// view made by hand: a classifier of one's own that falls back to the default one keeps them.
fn grpc_response(
    request: &RequestView<'_>,
    status: StatusCode,
    headers: &http::HeaderMap,
) -> Option<Outcome> {
    if !grpc::is_grpc(headers) && request.grpc_method().is_none() {
        return None;
    }
    let Some(code) = grpc::response_status(status, headers) else {
        return Some(Outcome::Success);
    };
    Some(grpc::classify(
        code,
        request.grpc_codes(),
        grpc::names_a_delay(headers),
    ))
}

/// Whether a `403`'s headers say a rate limit refused it rather than a permission: GitHub answers its
/// primary limit with `403` and `X-RateLimit-Remaining: 0`, its secondary one with `403` and
/// `Retry-After`. The server did not act on the request.
pub(crate) fn rate_limited(headers: &http::HeaderMap) -> bool {
    headers.contains_key(http::header::RETRY_AFTER)
        || crate::signals::server_delay::says_throttled(headers)
}

impl DefaultClassifier {
    /// The default classification of a status code: what [`DefaultClassifier`] makes of a response,
    /// but for a `403` that says a rate limit refused it.
    ///
    /// ```
    /// use http::StatusCode;
    /// use stagger::classify::DefaultClassifier;
    /// use stagger::{Outcome, Reason};
    ///
    /// let too_many = StatusCode::TOO_MANY_REQUESTS;
    /// assert_eq!(DefaultClassifier::status(too_many), Outcome::RetrySafe(Reason::Status(too_many)));
    /// let error = StatusCode::INTERNAL_SERVER_ERROR;
    /// assert_eq!(DefaultClassifier::status(error), Outcome::RetryIfIdempotent(Reason::Status(error)));
    /// // 501: the server will not learn the method by the next attempt.
    /// assert_eq!(DefaultClassifier::status(StatusCode::NOT_IMPLEMENTED), Outcome::Fatal);
    /// assert_eq!(DefaultClassifier::status(StatusCode::NO_CONTENT), Outcome::Success);
    /// ```
    pub fn status(status: StatusCode) -> Outcome {
        match status {
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                Outcome::RetrySafe(Reason::Status(status))
            }
            StatusCode::REQUEST_TIMEOUT => Outcome::RetryIfIdempotent(Reason::Status(status)),
            StatusCode::NOT_IMPLEMENTED | StatusCode::HTTP_VERSION_NOT_SUPPORTED => Outcome::Fatal,
            s if s.is_server_error() => Outcome::RetryIfIdempotent(Reason::Status(status)),
            s if s.is_client_error() => Outcome::Fatal,
            _ => Outcome::Success,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_s_token_is_its_code() {
        for code in 100..1000 {
            let status = StatusCode::from_u16(code).unwrap();
            assert_eq!(Reason::Status(status).as_str(), status.as_str());
        }
    }

    #[test]
    fn status_table() {
        let safe = [429, 503];
        let if_idempotent = [408, 500, 502, 504, 506, 507, 508, 510, 511, 599];
        let fatal = [
            400, 401, 403, 404, 405, 409, 410, 413, 422, 451, 499, 501, 505,
        ];
        let success = [100, 200, 201, 204, 301, 302, 304, 307];
        for code in safe {
            let s = StatusCode::from_u16(code).unwrap();
            assert_eq!(
                DefaultClassifier::status(s),
                Outcome::RetrySafe(Reason::Status(s)),
                "{code}"
            );
        }
        for code in if_idempotent {
            let s = StatusCode::from_u16(code).unwrap();
            assert_eq!(
                DefaultClassifier::status(s),
                Outcome::RetryIfIdempotent(Reason::Status(s)),
                "{code}"
            );
        }
        for code in fatal {
            assert_eq!(
                DefaultClassifier::status(StatusCode::from_u16(code).unwrap()),
                Outcome::Fatal,
                "{code}"
            );
        }
        for code in success {
            assert_eq!(
                DefaultClassifier::status(StatusCode::from_u16(code).unwrap()),
                Outcome::Success,
                "{code}"
            );
        }
    }
}
