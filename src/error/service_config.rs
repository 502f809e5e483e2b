//! [`ServiceConfigError`]: why a gRPC service config was refused, and where.

use std::fmt;

/// Why [`GrpcServiceConfig::from_json`](crate::GrpcServiceConfig::from_json) refused a document: what
/// gRPC's C-core refuses, named by the field's path as C-core names it
/// (`methodConfig[0].retryPolicy.maxAttempts`).
///
/// C-core takes such a document and fails every call of its channel with `INVALID_ARGUMENT`;
/// stagger refuses it where it is read.
///
/// ```
/// use stagger::{GrpcServiceConfig, ServiceConfigError};
///
/// let json = r#"{"methodConfig": [{"name": [{"service": "shop.Catalog"}],
///   "retryPolicy": {"maxAttempts": 1, "initialBackoff": "0.1s", "maxBackoff": "1s",
///                   "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#;
/// let error = GrpcServiceConfig::from_json(json).unwrap_err();
/// assert_eq!(error.path(), "methodConfig[0].retryPolicy.maxAttempts");
/// assert_eq!(
///     error.to_string(),
///     "methodConfig[0].retryPolicy.maxAttempts: must be at least 2, got 1"
/// );
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceConfigError {
    /// The text is not JSON as C-core reads it (RFC 8259, no key twice in an object, at most 255
    /// nested arrays and objects): the byte offset where reading stopped, and why.
    Json {
        /// The byte offset where reading stopped.
        offset: usize,
        /// What is wrong there: `"not json"`, `"duplicate key"`, `"nested too deep"`.
        reason: &'static str,
    },
    /// A field C-core refuses: its path (`methodConfig[0].timeout`; empty for the document itself)
    /// and why.
    Field {
        /// Where, as C-core names it.
        path: String,
        /// What is wrong with it.
        problem: FieldProblem,
    },
}

/// What is wrong with a field of a service config, as C-core says it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldProblem {
    /// A required field is absent (or `null`).
    Missing,
    /// Not a JSON object.
    NotAnObject,
    /// Not a JSON array.
    NotAnArray,
    /// Not a JSON string.
    NotAString,
    /// Neither a JSON number nor a string.
    NotANumber,
    /// Not `true` nor `false`.
    NotABoolean,
    /// Not an integer of the field's range (a number or a string, as written).
    NotAnInteger(String),
    /// Not a non-negative integer of the field's range (a number or a string, as written).
    NotANonNegativeInteger(String),
    /// Not a floating-point number (as written).
    NotAFloat(String),
    /// A `maxAttempts` below 2.
    AtLeastTwo(i64),
    /// A value that must be greater than zero, and is not.
    NotPositive,
    /// Not a proto3 JSON duration (`"0.1s"`): why.
    Duration(&'static str),
    /// A duration's seconds outside `0..=315576000000`.
    SecondsOutOfRange,
    /// Not a status code's upper-case name (`"UNAVAILABLE"`): as written.
    StatusCode(String),
    /// A list that must not be empty.
    Empty,
    /// A name with a `method` and no `service`.
    MethodWithoutService,
    /// A second name for the default method config (`{}`, or an empty `service`).
    DuplicateDefault,
    /// A second method config for one path (`/service/method`, or `/service/` for a service).
    DuplicateName(String),
    /// `loadBalancingPolicy` names a policy C-core does not know.
    UnknownLbPolicy(String),
    /// `loadBalancingPolicy` names a policy that only `loadBalancingConfig` can configure.
    LbPolicyNeedsConfig(String),
    /// `loadBalancingConfig` names no policy C-core knows: the names it gives.
    NoKnownLbPolicy(String),
    /// An entry of `loadBalancingConfig` that is not an object of one member.
    LbConfigEntry,
}

impl ServiceConfigError {
    /// The path of the field refused, as C-core names it (`retryThrottling.maxTokens`); empty for
    /// a text that is not JSON, or a document that is not an object.
    pub fn path(&self) -> &str {
        match self {
            Self::Json { .. } => "",
            Self::Field { path, .. } => path,
        }
    }

    pub(crate) fn field(path: impl Into<String>, problem: FieldProblem) -> Self {
        Self::Field {
            path: path.into(),
            problem,
        }
    }
}

impl fmt::Display for FieldProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str("field not present"),
            Self::NotAnObject => f.write_str("is not an object"),
            Self::NotAnArray => f.write_str("is not an array"),
            Self::NotAString => f.write_str("is not a string"),
            Self::NotANumber => f.write_str("is not a number"),
            Self::NotABoolean => f.write_str("is not a boolean"),
            Self::NotAnInteger(text) => write!(f, "failed to parse number {text:?}"),
            Self::NotANonNegativeInteger(text) => {
                write!(f, "failed to parse non-negative number {text:?}")
            }
            Self::NotAFloat(text) => write!(f, "failed to parse floating-point number {text:?}"),
            Self::AtLeastTwo(given) => write!(f, "must be at least 2, got {given}"),
            Self::NotPositive => f.write_str("must be greater than 0"),
            Self::Duration(why) => write!(f, "not a duration ({why})"),
            Self::SecondsOutOfRange => {
                f.write_str("seconds must be in the range [0, 315576000000]")
            }
            Self::StatusCode(text) => write!(
                f,
                "failed to parse status code {text:?} (an upper-case name, such as \"UNAVAILABLE\")"
            ),
            Self::Empty => f.write_str("must be non-empty"),
            Self::MethodWithoutService => f.write_str("method name populated without service name"),
            Self::DuplicateDefault => f.write_str("duplicate default method config"),
            Self::DuplicateName(path) => write!(f, "multiple method configs for path {path}"),
            Self::UnknownLbPolicy(name) => write!(f, "unknown LB policy {name:?}"),
            Self::LbPolicyNeedsConfig(name) => write!(
                f,
                "LB policy {name:?} requires a config (use loadBalancingConfig)"
            ),
            Self::NoKnownLbPolicy(names) => write!(f, "no known policies in list: {names}"),
            Self::LbConfigEntry => f.write_str("child entry should be an object of one member"),
        }
    }
}

impl fmt::Display for ServiceConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Json { offset, reason } => {
                write!(f, "service config is not json: {reason} at byte {offset}")
            }
            Self::Field { path, problem } if path.is_empty() => {
                write!(f, "service config {problem}")
            }
            Self::Field { path, problem } => write!(f, "{path}: {problem}"),
        }
    }
}

impl std::error::Error for ServiceConfigError {}
