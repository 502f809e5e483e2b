//! What an attempt's outcome means: success, retryable (and how safely), or fatal.
//!
//! The vocabulary ([`Outcome`], [`Reason`]), what a classifier sees ([`RequestView`],
//! [`AttemptResult`]), the [`ClassifyHttp`] trait with [`from_fn`] for closures, and the
//! [`DefaultClassifier`]. What a classifier sees lives in `request.rs`, how errors are recognised in
//! `errors.rs`.

mod errors;
mod request;

pub use errors::classify_error;
pub use request::{AttemptResult, IDEMPOTENCY_KEY, RequestView};

use std::any::Any;
use std::error::Error;
use std::fmt;
use std::io;

use http::StatusCode;

/// The meaning of one attempt's outcome, as a classifier sees it.
///
/// A retryable outcome says how sure we are that the server did not act on the request, because that
/// decides whether a non-idempotent request (a `POST`) may be sent again:
///
/// - [`Outcome::RetrySafe`]: the server surely did not process it (the connection never opened, `429`,
///   `503`, HTTP/2 `REFUSED_STREAM`); any request may be replayed.
/// - [`Outcome::RetryIfIdempotent`]: it may have acted (`500`, `502`, `504`, `408`, a timeout, a reset);
///   only an idempotent method, or a request carrying an `Idempotency-Key`, is replayed.
///
/// The difference shows on a `POST`, which is not idempotent:
///
/// ```
/// use http::StatusCode;
/// use stagger::adapter::{Attempt, Decision};
/// use stagger::{Outcome, Reason, RetryPolicy, StopReason};
///
/// let policy = RetryPolicy::default();
/// let post = |outcome| policy.start().decide(Attempt::new(outcome).idempotent(false));
///
/// // A 503: the server did not act on the request, so even a POST is sent again.
/// let unavailable = Outcome::RetrySafe(Reason::Status(StatusCode::SERVICE_UNAVAILABLE));
/// assert!(matches!(post(unavailable), Decision::Retry(_)));
///
/// // A 502: it may have, so the POST is not.
/// let bad_gateway = Outcome::RetryIfIdempotent(Reason::Status(StatusCode::BAD_GATEWAY));
/// assert_eq!(post(bad_gateway), Decision::Stop(StopReason::NotIdempotent));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The attempt succeeded: return it.
    Success,
    /// The attempt failed before the server could act on it; any request may be sent again.
    RetrySafe(Reason),
    /// The attempt failed, and the server may have acted; only idempotent requests are sent again.
    RetryIfIdempotent(Reason),
    /// The attempt failed in a way another attempt will not fix: return it.
    Fatal,
}

impl Outcome {
    /// Whether the outcome is retryable at all (before idempotency and limits are considered).
    ///
    /// ```
    /// use stagger::{Outcome, Reason};
    ///
    /// assert!(Outcome::RetrySafe(Reason::Connect).is_retryable());
    /// assert!(Outcome::RetryIfIdempotent(Reason::Timeout).is_retryable());
    /// assert!(!Outcome::Success.is_retryable());
    /// assert!(!Outcome::Fatal.is_retryable());
    /// ```
    pub const fn is_retryable(&self) -> bool {
        matches!(self, Self::RetrySafe(_) | Self::RetryIfIdempotent(_))
    }

    /// The reason of a retryable outcome.
    ///
    /// ```
    /// use stagger::{Outcome, Reason};
    ///
    /// assert_eq!(Outcome::RetryIfIdempotent(Reason::Timeout).reason(), Some(Reason::Timeout));
    /// assert_eq!(Outcome::Fatal.reason(), None);
    /// ```
    pub const fn reason(&self) -> Option<Reason> {
        match self {
            Self::RetrySafe(reason) | Self::RetryIfIdempotent(reason) => Some(*reason),
            Self::Success | Self::Fatal => None,
        }
    }
}

/// Why an attempt is worth retrying; it appears in `tracing` events and retry hooks.
///
/// The `tracing` events and the metrics carry its token, [`as_str`](Reason::as_str); its
/// [`Display`](fmt::Display) is a phrase for people. A classifier of your own names its reasons with
/// [`Reason::Other`], in `snake_case` so that its token reads like the others.
///
/// ```
/// use http::StatusCode;
/// use stagger::Reason;
///
/// assert_eq!(Reason::Status(StatusCode::TOO_MANY_REQUESTS).to_string(), "status 429");
/// assert_eq!(Reason::ConnectionClosed.to_string(), "connection closed");
/// assert_eq!(Reason::Other("queue full").to_string(), "queue full");
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The response's status code.
    Status(StatusCode),
    /// The connection could not be made: refused, unreachable, DNS failure, connect timeout.
    Connect,
    /// The attempt timed out after the request may have been sent.
    Timeout,
    /// The connection was reset, aborted or closed before a complete response.
    ConnectionClosed,
    /// HTTP/2 `REFUSED_STREAM`: the server did not process the stream.
    RefusedStream,
    /// HTTP/2 graceful `GOAWAY` (`NO_ERROR`) from the server, for a stream above its last-stream-id: the
    /// server is shutting the connection down and did not process the stream.
    GoAway,
    /// A reason given by a custom classifier: a name from the program's text, so that the values of
    /// `error.type` stay a bounded set.
    Other(&'static str),
}

impl Reason {
    /// A stable `snake_case` token for the reason, as the `error.type` field of the `tracing` events
    /// and the `error.type` label of the metrics carry it: a status is its code, as in OpenTelemetry's
    /// `error.type`; an error is `connect`, `timeout`, `connection_closed`, `refused_stream` or
    /// `goaway`; [`Reason::Other`] is its name as the classifier gave it. Its
    /// [`Display`](fmt::Display) is a phrase for people.
    ///
    /// ```
    /// use http::StatusCode;
    /// use stagger::Reason;
    ///
    /// assert_eq!(Reason::Status(StatusCode::SERVICE_UNAVAILABLE).as_str(), "503");
    /// assert_eq!(Reason::ConnectionClosed.as_str(), "connection_closed");
    /// assert_eq!(Reason::ConnectionClosed.to_string(), "connection closed");
    /// assert_eq!(Reason::Other("queue_full").as_str(), "queue_full");
    /// ```
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Status(status) => status_code(*status),
            Self::Connect => "connect",
            Self::Timeout => "timeout",
            Self::ConnectionClosed => "connection_closed",
            Self::RefusedStream => "refused_stream",
            Self::GoAway => "goaway",
            Self::Other(reason) => reason,
        }
    }
}

/// The three digits of every status code, 100 to 999, one after the other: a status's token is a
/// slice of it, `'static` and made without formatting (`StatusCode::as_str` borrows the status).
const STATUS_DIGITS: &str = {
    const DIGITS: [u8; 2700] = {
        let mut digits = [0; 2700];
        let mut code = 100;
        while code < 1000 {
            let at = (code - 100) * 3;
            digits[at] = b'0' + (code / 100) as u8;
            digits[at + 1] = b'0' + (code / 10 % 10) as u8;
            digits[at + 2] = b'0' + (code % 10) as u8;
            code += 1;
        }
        digits
    };
    match std::str::from_utf8(&DIGITS) {
        Ok(digits) => digits,
        Err(_) => panic!("ASCII digits"),
    }
};

fn status_code(status: StatusCode) -> &'static str {
    // `StatusCode` holds 100 to 999.
    let at = usize::from(status.as_u16() - 100) * 3;
    &STATUS_DIGITS[at..at + 3]
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Status(status) => write!(f, "status {}", status.as_u16()),
            Self::Connect => f.write_str("connect error"),
            Self::Timeout => f.write_str("timeout"),
            Self::ConnectionClosed => f.write_str("connection closed"),
            Self::RefusedStream => f.write_str("refused stream"),
            Self::GoAway => f.write_str("goaway"),
            Self::Other(reason) => f.write_str(reason),
        }
    }
}

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
/// use stagger::classify::{self, AttemptResult, ClassifyHttp, DefaultClassifier, Outcome, Reason};
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
/// use stagger::classify::{self, AttemptResult, ClassifyHttp, DefaultClassifier, Outcome, Reason};
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
/// Errors are recognised by walking their [`source`](Error::source) chain: `std::io::Error` kinds,
/// `reqwest::Error` (feature `reqwest`), `hyper::Error` and `hyper_util`'s client error (features `hyper`,
/// `hyper-util`), `h2::Error` (feature `h2`) and `tower::timeout`'s `Elapsed`. The feature `reqwest`
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
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultClassifier;

impl ClassifyHttp for DefaultClassifier {
    fn classify(&self, _request: &RequestView<'_>, result: &AttemptResult<'_>) -> Outcome {
        match *result {
            AttemptResult::Response {
                status: StatusCode::FORBIDDEN,
                headers,
                ..
            } if rate_limited(headers) => Outcome::RetrySafe(Reason::Status(StatusCode::FORBIDDEN)),
            AttemptResult::Response { status, .. } => classify_status(status),
            AttemptResult::Error(error) => classify_error(error),
        }
    }
}

/// Whether a `403`'s headers say a rate limit refused it rather than a permission: GitHub answers its
/// primary limit with `403` and `X-RateLimit-Remaining: 0`, its secondary one with `403` and
/// `Retry-After`. The server did not act on the request.
pub(crate) fn rate_limited(headers: &http::HeaderMap) -> bool {
    headers.contains_key(http::header::RETRY_AFTER)
        || crate::signals::pushback::says_throttled(headers)
}

/// The default classification of a status code; see [`DefaultClassifier`].
///
/// ```
/// use http::StatusCode;
/// use stagger::classify::classify_status;
/// use stagger::{Outcome, Reason};
///
/// let too_many = StatusCode::TOO_MANY_REQUESTS;
/// assert_eq!(classify_status(too_many), Outcome::RetrySafe(Reason::Status(too_many)));
/// let error = StatusCode::INTERNAL_SERVER_ERROR;
/// assert_eq!(classify_status(error), Outcome::RetryIfIdempotent(Reason::Status(error)));
/// // 501: the server will not learn the method by the next attempt.
/// assert_eq!(classify_status(StatusCode::NOT_IMPLEMENTED), Outcome::Fatal);
/// assert_eq!(classify_status(StatusCode::NO_CONTENT), Outcome::Success);
/// ```
pub fn classify_status(status: StatusCode) -> Outcome {
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

/// Gives the classifier a `&dyn Error` view of an error type.
///
/// Implemented for the errors of the clients this crate supports and for boxed errors (what
/// `tower::timeout` and `tower::util::BoxService` produce). For an error type of your own, return `self`:
/// the classifier then reads it, and what its [`source`](Error::source) chain holds.
///
/// ```
/// use std::{error::Error, fmt, io};
/// use stagger::adapter::AsError;
/// use stagger::classify::classify_error;
/// use stagger::{Outcome, Reason};
///
/// #[derive(Debug)]
/// struct ClientError(io::Error);
///
/// impl fmt::Display for ClientError {
///     fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
///         f.write_str("request failed")
///     }
/// }
///
/// impl Error for ClientError {
///     fn source(&self) -> Option<&(dyn Error + 'static)> {
///         Some(&self.0)
///     }
/// }
///
/// impl AsError for ClientError {
///     fn as_error(&self) -> &(dyn Error + 'static) {
///         self
///     }
/// }
///
/// // A service failing with `ClientError` can now sit under `RetryLayer::new`; the default
/// // classifier finds the `io::Error` along the source chain:
/// let error = ClientError(io::ErrorKind::ConnectionRefused.into());
/// assert_eq!(classify_error(error.as_error()), Outcome::RetrySafe(Reason::Connect));
/// ```
#[diagnostic::on_unimplemented(
    message = "stagger's HTTP classifier cannot read the error type `{Self}`",
    note = "implemented for std::io::Error, http::Error, tower's and tokio's Elapsed, boxed errors, and with their features for reqwest 0.13, hyper 1, hyper-util 0.1 and h2 0.4 errors",
    note = "a reqwest or hyper error: turn on stagger's `reqwest` / `hyper` / `hyper-util` / `h2` feature, and check `cargo tree -d` for a second copy of that crate (another major version is a different type)",
    note = "an error type of your own: `impl stagger::adapter::AsError for MyError {{ fn as_error(&self) -> &(dyn std::error::Error + 'static) {{ self }} }}`"
)]
pub trait AsError {
    /// This error as a trait object.
    ///
    /// ```
    /// use stagger::adapter::AsError;
    /// use stagger::classify::classify_error;
    /// use stagger::{Outcome, Reason};
    ///
    /// // What `tower::timeout` fails with: a boxed error.
    /// let timeout: Box<dyn std::error::Error + Send + Sync> =
    ///     Box::new(tower::timeout::error::Elapsed::new());
    /// assert_eq!(classify_error(timeout.as_error()), Outcome::RetryIfIdempotent(Reason::Timeout));
    /// ```
    fn as_error(&self) -> &(dyn Error + 'static);
}

macro_rules! as_error_for {
    ($($ty:ty $(: $feature:literal)?),* $(,)?) => {
        $(
            $(#[cfg(feature = $feature)])?
            impl AsError for $ty {
                fn as_error(&self) -> &(dyn Error + 'static) {
                    self
                }
            }
        )*

        /// `error` as an [`Error`], if it is one of the error types above.
        fn listed(error: &dyn Any) -> Option<&(dyn Error + 'static)> {
            $(
                $(#[cfg(feature = $feature)])?
                if let Some(error) = error.downcast_ref::<$ty>() {
                    return Some(error);
                }
            )*
            None
        }
    };
}

as_error_for!(
    io::Error,
    http::Error,
    tower::timeout::error::Elapsed,
    tokio::time::error::Elapsed,
    reqwest::Error: "reqwest",
    hyper::Error: "hyper",
    hyper_util::client::legacy::Error: "hyper-util",
    h2::Error: "h2",
);

/// `error` as an [`Error`], if its type is one of those this crate implements [`AsError`] for: how
/// `stagger::Error`'s `Debug` prints an inner error's messages without an `AsError` bound.
pub(crate) fn known_error(error: &dyn Any) -> Option<&(dyn Error + 'static)> {
    if let Some(error) = listed(error) {
        return Some(error);
    }
    if let Some(error) = error.downcast_ref::<Box<dyn Error + Send + Sync>>() {
        return Some(error.as_error());
    }
    if let Some(error) = error.downcast_ref::<Box<dyn Error + Send>>() {
        return Some(error.as_error());
    }
    if let Some(error) = error.downcast_ref::<Box<dyn Error>>() {
        return Some(error.as_error());
    }
    None
}

impl AsError for Box<dyn Error + Send + Sync> {
    fn as_error(&self) -> &(dyn Error + 'static) {
        &**self
    }
}

impl AsError for Box<dyn Error + Send> {
    fn as_error(&self) -> &(dyn Error + 'static) {
        &**self
    }
}

impl AsError for Box<dyn Error> {
    fn as_error(&self) -> &(dyn Error + 'static) {
        &**self
    }
}

impl AsError for std::convert::Infallible {
    fn as_error(&self) -> &(dyn Error + 'static) {
        match *self {}
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
                classify_status(s),
                Outcome::RetrySafe(Reason::Status(s)),
                "{code}"
            );
        }
        for code in if_idempotent {
            let s = StatusCode::from_u16(code).unwrap();
            assert_eq!(
                classify_status(s),
                Outcome::RetryIfIdempotent(Reason::Status(s)),
                "{code}"
            );
        }
        for code in fatal {
            assert_eq!(
                classify_status(StatusCode::from_u16(code).unwrap()),
                Outcome::Fatal,
                "{code}"
            );
        }
        for code in success {
            assert_eq!(
                classify_status(StatusCode::from_u16(code).unwrap()),
                Outcome::Success,
                "{code}"
            );
        }
    }
}
