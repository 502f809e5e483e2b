//! [`AsError`]: how the classifier sees an error type (in `stagger::adapter`).

use std::any::Any;
use std::error::Error;
use std::io;

/// Gives the classifier a `&dyn Error` view of an error type.
///
/// Implemented for the errors of the clients this crate supports and for boxed errors (what
/// `tower::timeout` and `tower::util::BoxService` produce). For an error type of your own, return `self`:
/// the classifier then reads it, and what its [`source`](Error::source) chain holds.
///
/// ```
/// use std::{error::Error, fmt, io};
/// use stagger::adapter::AsError;
/// use stagger::classify::DefaultClassifier;
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
/// assert_eq!(DefaultClassifier::error(error.as_error()), Outcome::RetrySafe(Reason::Connect));
/// ```
#[diagnostic::on_unimplemented(
    message = "stagger's HTTP classifier cannot read the error type `{Self}`",
    note = "implemented for std::io::Error, http::Error, boxed errors, and with their features for tower's and tokio's Elapsed (`tokio`), reqwest 0.13, hyper 1, hyper-util 0.1, h2 0.4 and tonic 0.14 (`tonic::transport::Error`) errors",
    note = "a reqwest or hyper error: turn on stagger's `reqwest` / `hyper` / `hyper-util` / `h2` feature, and check `cargo tree -d` for a second copy of that crate (another major version is a different type)",
    note = "an error type of your own: `impl stagger::adapter::AsError for MyError {{ fn as_error(&self) -> &(dyn std::error::Error + 'static) {{ self }} }}`"
)]
pub trait AsError {
    /// This error as a trait object.
    ///
    /// ```
    /// use stagger::adapter::AsError;
    /// use stagger::classify::DefaultClassifier;
    /// use stagger::{Outcome, Reason};
    ///
    /// // What `tower::timeout` fails with: a boxed error.
    /// let timeout: Box<dyn std::error::Error + Send + Sync> =
    ///     Box::new(tower::timeout::error::Elapsed::new());
    /// assert_eq!(DefaultClassifier::error(timeout.as_error()), Outcome::RetryIfIdempotent(Reason::Timeout));
    /// ```
    fn as_error(&self) -> &(dyn Error + 'static);
}

macro_rules! as_error_for {
    ($($ty:ty $(: $when:meta)?),* $(,)?) => {
        $(
            $(#[cfg($when)])?
            impl AsError for $ty {
                fn as_error(&self) -> &(dyn Error + 'static) {
                    self
                }
            }
        )*

        /// `error` as an [`Error`], if it is one of the error types above.
        fn listed(error: &dyn Any) -> Option<&(dyn Error + 'static)> {
            $(
                $(#[cfg($when)])?
                if let Some(error) = error.downcast_ref::<$ty>() {
                    return Some(error);
                }
            )*
            None
        }
    };
}

// Each with what it needs: tokio's and hyper's crates are not built in the browser (Cargo.toml).
as_error_for!(
    io::Error,
    http::Error,
    tower::timeout::error::Elapsed: all(feature = "tokio", not(all(target_arch = "wasm32", target_os = "unknown"))),
    tokio::time::error::Elapsed: all(feature = "tokio", not(all(target_arch = "wasm32", target_os = "unknown"))),
    reqwest::Error: feature = "reqwest",
    hyper::Error: all(feature = "hyper", not(all(target_arch = "wasm32", target_os = "unknown"))),
    hyper_util::client::legacy::Error: all(feature = "hyper-util", not(all(target_arch = "wasm32", target_os = "unknown"))),
    h2::Error: all(feature = "h2", not(all(target_arch = "wasm32", target_os = "unknown"))),
    tonic::transport::Error: feature = "tonic",
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
