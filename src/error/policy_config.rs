//! [`PolicyConfigError`]: why a policy's document was refused, and where.

use std::fmt;

use crate::error::ConfigError;

/// Why a [`PolicyConfig`](crate::PolicyConfig) was refused, with the path of its field
/// (`breaker.failures`, `grpc.methods./shop.Payments/Charge`).
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq)]
pub enum PolicyConfigError {
    /// The document: an unknown field, a value of the wrong type, a duration or a status code not
    /// understood.
    Document {
        /// The field, as serde's path writes it (`budget.ratoi`).
        path: String,
        /// The format's message.
        message: String,
    },
    /// A setting the builder refuses: its field, and the builder's error.
    Invalid {
        /// The field (`budget.ratio`).
        path: String,
        /// What the builder says of it.
        error: ConfigError,
    },
}

impl PolicyConfigError {
    /// The path of the field refused.
    pub fn path(&self) -> &str {
        match self {
            Self::Document { path, .. } | Self::Invalid { path, .. } => path,
        }
    }
}

impl fmt::Display for PolicyConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Document { path, message } => write!(f, "{path}: {message}"),
            Self::Invalid { path, error } => write!(f, "{path}: {error}"),
        }
    }
}

impl std::error::Error for PolicyConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Document { .. } => None,
            Self::Invalid { error, .. } => Some(error),
        }
    }
}
