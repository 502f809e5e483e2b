//! [`ServiceConfigNotice`]: what a service config was read as, where it differs from what it says.

use std::fmt;

/// Something of a service config read otherwise than it was written, as C-core reads it: for a log
/// line, or a check in a platform's tests. See
/// [`GrpcServiceConfig::notices`](crate::GrpcServiceConfig::notices).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServiceConfigNotice {
    /// A `maxAttempts` over 5, read as 5: A6's client-side limit, which C-core, grpc-go and
    /// grpc-java apply (C-core logs it as an error).
    MaxAttemptsClamped {
        /// The field, `methodConfig[0].retryPolicy.maxAttempts`.
        path: String,
        /// What the document says.
        given: i64,
        /// What is used.
        used: u32,
    },
    /// A `hedgingPolicy` beside a `retryPolicy`: the retry policy is used, as C-core does (A6 allows
    /// one of the two; grpc-go refuses the document).
    HedgingBesideRetry {
        /// The method config, `methodConfig[0]`.
        path: String,
    },
    /// A `hedgingPolicy` that cannot be read as A6 and grpc-java read one, which C-core accepts
    /// (it reads no `hedgingPolicy` at all): not applied, the method is neither hedged nor retried,
    /// as under C-core.
    HedgingIgnored {
        /// The field at fault, `methodConfig[0].hedgingPolicy.maxAttempts`.
        path: String,
        /// Why it cannot be read.
        why: String,
    },
    /// A `hedgingDelay` of zero (A6: every attempt at once): stagger hedges one attempt at a time,
    /// and sends each hedge 1 ms after the attempt before it.
    HedgingDelayRaised {
        /// The field, `methodConfig[0].hedgingPolicy.hedgingDelay`.
        path: String,
    },
}

impl ServiceConfigNotice {
    /// The field the notice is about.
    pub fn path(&self) -> &str {
        match self {
            Self::MaxAttemptsClamped { path, .. }
            | Self::HedgingBesideRetry { path }
            | Self::HedgingIgnored { path, .. }
            | Self::HedgingDelayRaised { path } => path,
        }
    }
}

impl fmt::Display for ServiceConfigNotice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::MaxAttemptsClamped { path, given, used } => {
                write!(f, "{path}: {given} clamped to {used}, gRPC's most")
            }
            Self::HedgingBesideRetry { path } => write!(
                f,
                "{path}: hedgingPolicy beside retryPolicy, the retry policy is used (as C-core does)"
            ),
            Self::HedgingIgnored { path, why } => {
                write!(f, "{path}: hedgingPolicy not applied ({why})")
            }
            Self::HedgingDelayRaised { path } => {
                write!(
                    f,
                    "{path}: a delay of zero, each hedge goes 1ms after the attempt before it"
                )
            }
        }
    }
}
