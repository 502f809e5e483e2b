//! gRPC's words: its status codes ([`GrpcCode`]), a set of them ([`GrpcCodes`]), what a method allows
//! ([`GrpcMethod`]), and how an answer's status is classified, following gRPC's retry design (A6).
//!
//! A gRPC call is an HTTP/2 `POST` whose response carries `content-type: application/grpc…` and
//! ends with a `grpc-status`. A status that comes in the response's headers (a *Trailers-Only*
//! response) came before any message: the call is over, and A6 retries it if its code is one the
//! method's policy lists. Response headers without a status mean messages follow: the call is
//! *committed* and never retried, whatever status its trailers bring later.

use std::fmt;

use http::{HeaderMap, StatusCode};

use crate::classify::{Outcome, Reason};

/// A gRPC status code (the `grpc-status` of a response), 0 to 16.
///
/// ```
/// use stagger::classify::GrpcCode;
///
/// assert_eq!(GrpcCode::from_code(14), Some(GrpcCode::Unavailable));
/// assert_eq!(GrpcCode::Unavailable.as_str(), "UNAVAILABLE");
/// assert_eq!(GrpcCode::Unavailable.code(), 14);
/// assert_eq!(GrpcCode::from_code(17), None);
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GrpcCode {
    /// 0: not an error.
    Ok = 0,
    /// 1: the call was cancelled, typically by the caller.
    Cancelled = 1,
    /// 2: an unknown error.
    Unknown = 2,
    /// 3: the client sent an invalid argument.
    InvalidArgument = 3,
    /// 4: the deadline expired before the call completed.
    DeadlineExceeded = 4,
    /// 5: an entity was not found.
    NotFound = 5,
    /// 6: the entity the client tried to create exists.
    AlreadyExists = 6,
    /// 7: the caller may not do this.
    PermissionDenied = 7,
    /// 8: a resource (a quota, the server's capacity) is exhausted.
    ResourceExhausted = 8,
    /// 9: the system is not in a state the call needs.
    FailedPrecondition = 9,
    /// 10: the call was aborted, typically by a concurrency conflict.
    Aborted = 10,
    /// 11: the call went past a valid range.
    OutOfRange = 11,
    /// 12: the method is not implemented.
    Unimplemented = 12,
    /// 13: an internal error.
    Internal = 13,
    /// 14: the service is unavailable, most likely for a short while.
    Unavailable = 14,
    /// 15: data was lost or corrupted.
    DataLoss = 15,
    /// 16: the caller is not authenticated.
    Unauthenticated = 16,
}

const CODES: [GrpcCode; 17] = [
    GrpcCode::Ok,
    GrpcCode::Cancelled,
    GrpcCode::Unknown,
    GrpcCode::InvalidArgument,
    GrpcCode::DeadlineExceeded,
    GrpcCode::NotFound,
    GrpcCode::AlreadyExists,
    GrpcCode::PermissionDenied,
    GrpcCode::ResourceExhausted,
    GrpcCode::FailedPrecondition,
    GrpcCode::Aborted,
    GrpcCode::OutOfRange,
    GrpcCode::Unimplemented,
    GrpcCode::Internal,
    GrpcCode::Unavailable,
    GrpcCode::DataLoss,
    GrpcCode::Unauthenticated,
];

impl GrpcCode {
    /// The code whose number is `code`, `None` outside 0 to 16.
    pub const fn from_code(code: u32) -> Option<Self> {
        if code < 17 {
            Some(CODES[code as usize])
        } else {
            None
        }
    }

    /// Its number, as `grpc-status` carries it.
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// Its name in gRPC's specification (`UNAVAILABLE`), as the `error.type` of the `tracing` events
    /// and of the metrics carries it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "OK",
            Self::Cancelled => "CANCELLED",
            Self::Unknown => "UNKNOWN",
            Self::InvalidArgument => "INVALID_ARGUMENT",
            Self::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Self::NotFound => "NOT_FOUND",
            Self::AlreadyExists => "ALREADY_EXISTS",
            Self::PermissionDenied => "PERMISSION_DENIED",
            Self::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Self::FailedPrecondition => "FAILED_PRECONDITION",
            Self::Aborted => "ABORTED",
            Self::OutOfRange => "OUT_OF_RANGE",
            Self::Unimplemented => "UNIMPLEMENTED",
            Self::Internal => "INTERNAL",
            Self::Unavailable => "UNAVAILABLE",
            Self::DataLoss => "DATA_LOSS",
            Self::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// The code gRPC gives a response that is not gRPC (a proxy's, say), from its HTTP status, as
    /// gRPC's "HTTP to gRPC status code mapping" says: `429`, `502`, `503` and `504` are
    /// `UNAVAILABLE`; `None` for a `200`, which says nothing by itself.
    ///
    /// ```
    /// use http::StatusCode;
    /// use stagger::classify::GrpcCode;
    ///
    /// assert_eq!(GrpcCode::from_http(StatusCode::BAD_GATEWAY), Some(GrpcCode::Unavailable));
    /// assert_eq!(GrpcCode::from_http(StatusCode::NOT_FOUND), Some(GrpcCode::Unimplemented));
    /// assert_eq!(GrpcCode::from_http(StatusCode::OK), None);
    /// ```
    pub fn from_http(status: StatusCode) -> Option<Self> {
        Some(match status.as_u16() {
            200 => return None,
            400 => Self::Internal,
            401 => Self::Unauthenticated,
            403 => Self::PermissionDenied,
            404 => Self::Unimplemented,
            429 | 502 | 503 | 504 => Self::Unavailable,
            _ => Self::Unknown,
        })
    }
}

impl fmt::Display for GrpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of [`GrpcCode`]s: the codes a policy, or a method, retries.
///
/// ```
/// use stagger::classify::{GrpcCode, GrpcCodes};
///
/// let codes = GrpcCodes::new(&[GrpcCode::Unavailable, GrpcCode::Aborted]);
/// assert!(codes.contains(GrpcCode::Aborted));
/// assert!(!codes.contains(GrpcCode::Internal));
/// assert!(GrpcCodes::DEFAULT.contains(GrpcCode::ResourceExhausted));
/// assert!(!GrpcCodes::NONE.contains(GrpcCode::Unavailable));
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrpcCodes(u32);

impl GrpcCodes {
    /// No code: nothing is retried on its status.
    pub const NONE: Self = Self(0);

    /// What a policy retries unless told otherwise: `UNAVAILABLE` (as Envoy's and Istio's
    /// `retry_on: unavailable`), and `RESOURCE_EXHAUSTED`, as throttling (it waits on the policy's
    /// [`throttle_backoff`](crate::RetryPolicyBuilder::throttle_backoff)).
    pub const DEFAULT: Self = Self::new(&[GrpcCode::Unavailable, GrpcCode::ResourceExhausted]);

    /// The set of `codes`.
    pub const fn new(codes: &[GrpcCode]) -> Self {
        let mut bits = 0;
        let mut i = 0;
        while i < codes.len() {
            bits |= 1 << codes[i] as u32;
            i += 1;
        }
        Self(bits)
    }

    /// Whether `code` is in the set.
    pub const fn contains(self, code: GrpcCode) -> bool {
        self.0 & (1 << code as u32) != 0
    }
}

impl Default for GrpcCodes {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl fmt::Debug for GrpcCodes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let codes = CODES.iter().filter(|c| self.contains(**c));
        f.debug_set().entries(codes).finish()
    }
}

/// What one gRPC method allows, set by its full name with
/// [`RetryPolicyBuilder::grpc_method`](crate::RetryPolicyBuilder::grpc_method).
///
/// A method without a rule retries the policy's codes
/// ([`grpc_retry_on`](crate::RetryPolicyBuilder::grpc_retry_on)) and is not idempotent: an attempt
/// that timed out or lost its connection midway is not sent again, and the method is never hedged.
///
/// ```
/// use stagger::classify::{GrpcCode, GrpcCodes, GrpcMethod};
/// use stagger::RetryPolicy;
///
/// let policy = RetryPolicy::builder()
///     // Charges a card: a retry after UNAVAILABLE might charge twice.
///     .grpc_method("/shop.Payments/Charge", GrpcMethod::no_retries())
///     // Reads: safe to send twice, so timeouts are retried and the method may be hedged.
///     .grpc_method("/shop.Catalog/GetItem", GrpcMethod::idempotent())
///     .grpc_method(
///         "/shop.Orders/Submit",
///         GrpcMethod::retry_on(GrpcCodes::new(&[GrpcCode::Unavailable, GrpcCode::Aborted])),
///     )
///     .build()?;
/// # let _ = policy;
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcMethod {
    pub(crate) codes: Option<GrpcCodes>,
    pub(crate) idempotent: bool,
}

impl GrpcMethod {
    /// No status of this method is retried. Failures the server never saw (a refused connection,
    /// HTTP/2 `REFUSED_STREAM`, a graceful `GOAWAY` for a stream it did not process) still are: A6's
    /// *transparent* retries.
    pub const fn no_retries() -> Self {
        Self {
            codes: Some(GrpcCodes::NONE),
            idempotent: false,
        }
    }

    /// This method retries `codes` instead of the policy's.
    pub const fn retry_on(codes: GrpcCodes) -> Self {
        Self {
            codes: Some(codes),
            idempotent: false,
        }
    }

    /// This method is safe to send twice: besides the policy's codes, an attempt that timed out or
    /// whose connection closed midway is retried, and the method may be hedged
    /// ([`hedge_after`](crate::RetryPolicyBuilder::hedge_after)), as A6's hedging policy does for the
    /// methods it names.
    pub const fn idempotent() -> Self {
        Self {
            codes: None,
            idempotent: true,
        }
    }

    /// The same rule, for a method that is safe to send twice (see [`idempotent`](Self::idempotent)).
    ///
    /// ```
    /// use stagger::classify::{GrpcCode, GrpcCodes, GrpcMethod};
    ///
    /// let codes = GrpcCodes::new(&[GrpcCode::Unavailable, GrpcCode::Aborted]);
    /// let rule = GrpcMethod::retry_on(codes).and_idempotent();
    /// # let _ = rule;
    /// ```
    pub const fn and_idempotent(mut self) -> Self {
        self.idempotent = true;
        self
    }
}

/// Whether `headers` (a request's or a response's) say gRPC: `content-type: application/grpc`, or
/// one of its subtypes (`application/grpc+proto`).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

/// The status of a Trailers-Only response: its `grpc-status` header, if it has one. A value that is
/// not a code gRPC knows is `UNKNOWN`, as gRPC's clients read it.
pub(crate) fn status_in(headers: &HeaderMap) -> Option<GrpcCode> {
    let value = headers.get("grpc-status")?;
    let code = std::str::from_utf8(value.as_bytes())
        .ok()
        .and_then(|s| s.trim().parse().ok());
    Some(
        code.and_then(GrpcCode::from_code)
            .unwrap_or(GrpcCode::Unknown),
    )
}

/// What a status means under A6: `OK` succeeds, a code in `retryable` is retried (the server answered
/// before it sent any message, and the service's owner says the code is safe to retry), any other
/// code is fatal.
pub(crate) fn classify(code: GrpcCode, retryable: GrpcCodes) -> Outcome {
    match code {
        GrpcCode::Ok => Outcome::Success,
        code if retryable.contains(code) => Outcome::RetrySafe(Reason::Grpc(code)),
        _ => Outcome::Fatal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_is_its_number() {
        for n in 0..17 {
            assert_eq!(u32::from(GrpcCode::from_code(n).unwrap().code()), n);
        }
    }

    #[test]
    fn a_trailers_only_status_is_read_from_the_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!(status_in(&headers), None);
        headers.insert("grpc-status", "14".parse().unwrap());
        assert_eq!(status_in(&headers), Some(GrpcCode::Unavailable));
        headers.insert("grpc-status", "99".parse().unwrap());
        assert_eq!(status_in(&headers), Some(GrpcCode::Unknown));
    }

    #[test]
    fn the_default_codes_retry_unavailable_and_resource_exhausted_only() {
        let retried: Vec<_> = CODES
            .iter()
            .filter(|c| classify(**c, GrpcCodes::DEFAULT).is_retryable())
            .collect();
        assert_eq!(
            retried,
            [&GrpcCode::ResourceExhausted, &GrpcCode::Unavailable]
        );
        assert_eq!(classify(GrpcCode::Ok, GrpcCodes::DEFAULT), Outcome::Success);
        let invalid = classify(GrpcCode::InvalidArgument, GrpcCodes::DEFAULT);
        assert_eq!(invalid, Outcome::Fatal);
    }
}
