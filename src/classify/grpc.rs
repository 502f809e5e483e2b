//! gRPC's words: its status codes ([`GrpcCode`]), a set of them ([`GrpcCodes`]), a method's name
//! ([`GrpcName`]), what a method allows ([`GrpcMethod`]), and how an answer's status is classified,
//! following gRPC's retry design (A6).
//!
//! A gRPC call is an HTTP/2 `POST` whose response carries `content-type: application/grpc…` and
//! ends with a `grpc-status`. A status that comes in the response's headers (a *Trailers-Only*
//! response) came before any message: the call is over, and A6 retries it if its code is one the
//! method's policy lists. Response headers without a status mean messages follow: the call is
//! *committed* and never retried, whatever status its trailers bring later.

use std::fmt;

use http::{HeaderMap, StatusCode};

use crate::classify::{Outcome, Reason};
use crate::signals::grpc::{GrpcPushback, pushback, retry_info};

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
    /// `retry_on: unavailable`), and `RESOURCE_EXHAUSTED` when the server names a delay.
    ///
    /// `RESOURCE_EXHAUSTED`, wherever it is listed, is retried only when its answer says when to
    /// come back (`grpc-retry-pushback-ms`, or a `google.rpc.RetryInfo`), and then after that delay:
    /// without one it is a quota that may not come back for hours, or a request over the server's
    /// message limit that no retry can fix (AIP-194 lists it as not retryable), and it is returned at
    /// once. A classifier of one's own can retry it anyway
    /// ([`RetryPolicyBuilder::classifier`](crate::RetryPolicyBuilder::classifier)): it then waits on
    /// the policy's [`throttle_backoff`](crate::RetryPolicyBuilder::throttle_backoff).
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

/// What one gRPC method allows, set by its name with
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
    /// No status of this method is retried: a call that fails with one the policy would retry stops
    /// with [`StopReason::OptedOut`](crate::StopReason::OptedOut). Failures the server never saw (a
    /// refused connection, HTTP/2 `REFUSED_STREAM`, a graceful `GOAWAY` for a stream it did not
    /// process) still are: A6's *transparent* retries.
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

/// The name of a gRPC method: its service (`package.Service`) and its method (`Method`), as a rule
/// of [`RetryPolicyBuilder::grpc_method`](crate::RetryPolicyBuilder::grpc_method) names it and as
/// [`RequestView::grpc_method`](crate::classify::RequestView::grpc_method) finds it in a call.
///
/// It is displayed as OpenTelemetry's `rpc.method` writes it, `package.Service/Method`.
///
/// ```
/// use stagger::classify::GrpcName;
///
/// let name = GrpcName::parse("/shop.Payments/Charge").unwrap();
/// assert_eq!((name.service(), name.method()), ("shop.Payments", "Charge"));
/// assert_eq!(name.to_string(), "shop.Payments/Charge");
/// // grpc-java's `getFullMethodName()` writes it without the slash: the same name.
/// assert_eq!(GrpcName::parse("shop.Payments/Charge"), Some(name));
/// assert_eq!(GrpcName::parse("/shop.Payments"), None);
/// assert_eq!(GrpcName::parse("/grpc/shop.Payments/Charge"), None); // a path, not a name
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrpcName<'a> {
    service: &'a str,
    method: &'a str,
}

impl<'a> GrpcName<'a> {
    /// The name written `/package.Service/Method` (the path of the method's requests, and gRPC's own
    /// way of writing it) or `package.Service/Method` (grpc-java's `getFullMethodName()`, and
    /// OpenTelemetry's `rpc.method`); `None` for anything else: an empty service or method, a third
    /// segment, a space, a character that is not printable ASCII.
    pub fn parse(full_name: &'a str) -> Option<Self> {
        let name = full_name.strip_prefix('/').unwrap_or(full_name);
        let (service, method) = name.split_once('/')?;
        Self::of(service, method)
    }

    /// The method called by a request to `path`: its last two segments, so that a path under a
    /// prefix (a gateway's `/grpc/package.Service/Method`, tonic's `Grpc::with_origin` with a path)
    /// names the same method.
    pub(crate) fn from_path(path: &'a str) -> Option<Self> {
        let (rest, method) = path.rsplit_once('/')?;
        let (_, service) = rest.rsplit_once('/')?;
        Self::of(service, method)
    }

    /// The name of `method` of `service`, if both are valid (see [`parse`](Self::parse)).
    pub(crate) fn of(service: &'a str, method: &'a str) -> Option<Self> {
        let valid = |part: &str| {
            !part.is_empty() && part.bytes().all(|b| b.is_ascii_graphic() && b != b'/')
        };
        (valid(service) && valid(method)).then_some(Self { service, method })
    }

    /// The service, `package.Service`.
    pub const fn service(&self) -> &'a str {
        self.service
    }

    /// The method, without its service.
    pub const fn method(&self) -> &'a str {
        self.method
    }
}

impl fmt::Display for GrpcName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.service, self.method)
    }
}

/// What a policy retries of gRPC calls: the codes of every method, and the rules of some.
#[derive(Debug, Clone, Default)]
pub(crate) struct GrpcRules {
    pub(crate) codes: GrpcCodes,
    /// By name, written `package.Service/Method`; a handful at most, so a scan.
    methods: Vec<(Box<str>, GrpcMethod)>,
}

impl GrpcRules {
    /// Sets the rule of the method `name`, replacing the one it had.
    pub(crate) fn set(&mut self, name: GrpcName<'_>, rule: GrpcMethod) {
        let name: Box<str> = name.to_string().into_boxed_str();
        self.methods.retain(|(known, _)| *known != name);
        self.methods.push((name, rule));
    }

    /// The same rules with `codes` for every method: a method's own codes are dropped, its mark of
    /// idempotence kept (a gRPC service config's codes, which replace the builder's).
    #[cfg(feature = "tonic")]
    pub(crate) fn with_codes(&self, codes: GrpcCodes) -> Self {
        let methods = self.methods.iter().filter(|(_, rule)| rule.idempotent);
        Self {
            codes,
            methods: methods
                .map(|(name, _)| (name.clone(), GrpcMethod::idempotent()))
                .collect(),
        }
    }

    /// Each method's rule, by its name (`package.Service/Method`), in the order they were set.
    #[cfg(feature = "serde")]
    pub(crate) fn methods(&self) -> impl Iterator<Item = (&str, GrpcMethod)> {
        self.methods.iter().map(|(name, rule)| (&**name, *rule))
    }

    /// The rule of the method `name`, if it has one.
    pub(crate) fn rule(&self, name: GrpcName<'_>) -> Option<&GrpcMethod> {
        self.methods.iter().find_map(|(known, rule)| {
            let (service, method) = known.split_once('/')?;
            (service == name.service && method == name.method).then_some(rule)
        })
    }

    /// The codes retried for the method `name`: its rule's, or the policy's; the policy's for a call
    /// whose method is not known.
    pub(crate) fn codes_of(&self, name: Option<GrpcName<'_>>) -> GrpcCodes {
        name.and_then(|name| self.rule(name))
            .and_then(|rule| rule.codes)
            .unwrap_or(self.codes)
    }

    /// Whether the method `name` is marked safe to send twice.
    pub(crate) fn is_idempotent(&self, name: GrpcName<'_>) -> bool {
        self.rule(name).is_some_and(|rule| rule.idempotent)
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

/// What the status of a response to a gRPC call is, as gRPC's clients read it: the `grpc-status` of
/// a Trailers-Only response; nothing for a gRPC response whose messages follow (the call is
/// committed: its status comes in the trailers); and, for an answer that is not gRPC's (a proxy's),
/// the code of its HTTP status ([`GrpcCode::from_http`]).
pub(crate) fn response_status(status: StatusCode, headers: &HeaderMap) -> Option<GrpcCode> {
    if is_grpc(headers) {
        match status_in(headers) {
            Some(code) => Some(code),
            None if status == StatusCode::OK => None,
            None => Some(GrpcCode::from_http(status).unwrap_or(GrpcCode::Unknown)),
        }
    } else {
        GrpcCode::from_http(status)
    }
}

/// Whether a gRPC answer names the delay after which to come back: a non-negative
/// `grpc-retry-pushback-ms`, or a `google.rpc.RetryInfo` in `grpc-status-details-bin`.
pub(crate) fn names_a_delay(headers: &HeaderMap) -> bool {
    match pushback(headers) {
        Some(GrpcPushback::After(_)) => true,
        Some(GrpcPushback::Stop) => false,
        None => retry_info(headers).is_some(),
    }
}

/// What a status means under A6: `OK` succeeds, a code in `retryable` is retried (the server answered
/// before it sent any message, and the service's owner says the code is safe to retry), any other
/// code is fatal. `RESOURCE_EXHAUSTED` is retried only when the answer names a delay (`delay_named`).
pub(crate) fn classify(code: GrpcCode, retryable: GrpcCodes, delay_named: bool) -> Outcome {
    match code {
        GrpcCode::Ok => Outcome::Success,
        GrpcCode::ResourceExhausted if !delay_named => Outcome::Fatal,
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
            .filter(|c| classify(**c, GrpcCodes::DEFAULT, true).is_retryable())
            .collect();
        assert_eq!(
            retried,
            [&GrpcCode::ResourceExhausted, &GrpcCode::Unavailable]
        );
        assert_eq!(
            classify(GrpcCode::Ok, GrpcCodes::DEFAULT, false),
            Outcome::Success
        );
        let invalid = classify(GrpcCode::InvalidArgument, GrpcCodes::DEFAULT, true);
        assert_eq!(invalid, Outcome::Fatal);
    }

    #[test]
    fn resource_exhausted_is_retried_only_when_a_delay_is_named() {
        let exhausted = GrpcCode::ResourceExhausted;
        assert_eq!(
            classify(exhausted, GrpcCodes::DEFAULT, true),
            Outcome::RetrySafe(Reason::Grpc(exhausted))
        );
        assert_eq!(
            classify(exhausted, GrpcCodes::DEFAULT, false),
            Outcome::Fatal
        );
        let listed = GrpcCodes::new(&[exhausted]);
        assert_eq!(classify(exhausted, listed, false), Outcome::Fatal);
        assert_eq!(classify(exhausted, GrpcCodes::NONE, true), Outcome::Fatal);
    }
}
