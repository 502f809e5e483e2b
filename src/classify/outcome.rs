//! [`Outcome`] and [`Reason`]: the classifier's words, at the crate's root.

use std::fmt;
use std::time::Duration;

use http::StatusCode;

use crate::classify::grpc::GrpcCode;

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
/// let post = |outcome| policy.start().decide(Attempt::new(outcome).idempotent(false), None);
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
    /// The server did not act on the request and named, in a form only the classifier reads (a header
    /// of its own, a field of a body a layer below has read), how long to wait: as
    /// [`RetrySafe`](Self::RetrySafe), with that delay treated exactly as a `Retry-After` of it.
    ///
    /// The delay is a floor, spread like any server delay, ended by
    /// [`max_retry_after`](crate::RetryPolicyBuilder::max_retry_after) when it is longer, and a pause
    /// the host asked for when the policy keeps a [host cooldown](crate::RetryPolicyBuilder::host_cooldown).
    /// When the answer also carries a delay stagger reads itself (`Retry-After`, a rate-limit header,
    /// gRPC's pushback), the longer of the two is waited.
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use stagger::classify::{self, AttemptResult, ClassifyHttp, DefaultClassifier};
    /// use stagger::{Outcome, Reason, RetryPolicy};
    ///
    /// // A server that answers 429 with `x-wait-ms: 1500`.
    /// let classifier = classify::from_fn(|request, result| match result {
    ///     AttemptResult::Response { status: StatusCode::TOO_MANY_REQUESTS, headers, .. } => {
    ///         let wait = headers.get("x-wait-ms").and_then(|v| v.to_str().ok()?.parse().ok());
    ///         let reason = Reason::Status(StatusCode::TOO_MANY_REQUESTS);
    ///         match wait {
    ///             Some(ms) => Outcome::RetryAfter(reason, Duration::from_millis(ms)),
    ///             None => Outcome::RetrySafe(reason),
    ///         }
    ///     }
    ///     _ => DefaultClassifier.classify(request, result),
    /// });
    /// let policy = RetryPolicy::builder().classifier(classifier).build()?;
    /// # let _ = policy;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    RetryAfter(Reason, Duration),
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
        matches!(
            self,
            Self::RetrySafe(_) | Self::RetryIfIdempotent(_) | Self::RetryAfter(..)
        )
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
            Self::RetrySafe(reason)
            | Self::RetryIfIdempotent(reason)
            | Self::RetryAfter(reason, _) => Some(*reason),
            Self::Success | Self::Fatal => None,
        }
    }

    /// The delay a [`RetryAfter`](Self::RetryAfter) outcome names.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Outcome, Reason};
    ///
    /// let named = Outcome::RetryAfter(Reason::Other("quota"), Duration::from_secs(6));
    /// assert_eq!(named.server_delay(), Some(Duration::from_secs(6)));
    /// assert_eq!(Outcome::RetrySafe(Reason::Connect).server_delay(), None);
    /// ```
    pub const fn server_delay(&self) -> Option<Duration> {
        match self {
            Self::RetryAfter(_, delay) => Some(*delay),
            _ => None,
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
    /// In the browser, `fetch` failed with a network error, which does not say why: a refused or
    /// reset connection, an unreachable or unknown host, a request blocked by CORS. The request may
    /// have been sent.
    NetworkError,
    /// HTTP/2 `REFUSED_STREAM`: the server did not process the stream.
    RefusedStream,
    /// HTTP/2 graceful `GOAWAY` (`NO_ERROR`) from the server, for a stream above its last-stream-id: the
    /// server is shutting the connection down and did not process the stream.
    GoAway,
    /// A gRPC status the method's policy retries, from a response that carried no message (see
    /// [`classify::GrpcCode`](crate::classify::GrpcCode)).
    Grpc(GrpcCode),
    /// A reason given by a custom classifier: a name from the program's text, so that the values of
    /// `error.type` stay a bounded set.
    Other(&'static str),
}

impl Reason {
    /// A stable `snake_case` token for the reason, as the `error.type` field of the `tracing` events
    /// and the `error.type` label of the metrics carry it: a status is its code, as in OpenTelemetry's
    /// `error.type`; an error is `connect`, `timeout`, `connection_closed`, `network_error`,
    /// `refused_stream` or `goaway`; a gRPC status is its name (`UNAVAILABLE`); [`Reason::Other`] is its name as the classifier gave it. Its
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
            Self::NetworkError => "network_error",
            Self::RefusedStream => "refused_stream",
            Self::GoAway => "goaway",
            Self::Grpc(code) => code.as_str(),
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
            Self::NetworkError => f.write_str("network error"),
            Self::RefusedStream => f.write_str("refused stream"),
            Self::GoAway => f.write_str("goaway"),
            Self::Grpc(code) => write!(f, "grpc status {} ({code})", code.code()),
            Self::Other(reason) => f.write_str(reason),
        }
    }
}
