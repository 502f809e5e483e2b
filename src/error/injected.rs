//! [`InjectedFault`]: the mark on an error the chaos layer made (feature `chaos`).

use std::error::Error;
use std::fmt;
use std::io;

/// What an error injected by [`ChaosLayer`](crate::chaos::ChaosLayer) or
/// [`ChaosMiddleware`] carries, so that a test or a log can tell it
/// from a real one.
///
/// An injected error is an `io::Error` of the fault's kind (`ConnectionRefused`, `ConnectionReset`,
/// ...), which is what the default classifier reads, with this mark inside it: the retries treat it
/// exactly as the real fault, and [`InjectedFault::find`] tells it apart.
///
/// ```
/// use std::io;
/// use stagger::chaos::InjectedFault;
///
/// let real = io::Error::from(io::ErrorKind::ConnectionRefused);
/// assert!(InjectedFault::find(&real).is_none());
/// ```
#[cfg_attr(
    feature = "reqwest-middleware",
    doc = "[`ChaosMiddleware`]: crate::chaos::ChaosMiddleware"
)]
#[cfg_attr(
    not(feature = "reqwest-middleware"),
    doc = "[`ChaosMiddleware`]: crate#features"
)]
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InjectedFault {
    kind: io::ErrorKind,
}

impl InjectedFault {
    pub(crate) const fn new(kind: io::ErrorKind) -> Self {
        Self { kind }
    }

    /// The kind of the `io::Error` it was injected as.
    pub const fn kind(&self) -> io::ErrorKind {
        self.kind
    }

    /// The mark of an injected fault in `error` or anywhere along its chain of causes: an `io::Error`
    /// it is wrapped in (whose `source()` skips what it wraps) is opened, and so is a
    /// `reqwest_middleware::Error` (feature `reqwest-middleware`), and a `stagger::Error`, a
    /// `tonic::ConnectError` or a `tonic::Status` give what they wrap as their source.
    ///
    /// ```
    /// # #[cfg(feature = "tower")]
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use stagger::chaos::{Chaos, ChaosLayer, Fault, InjectedFault, Rule};
    /// use stagger::{RetryLayer, RetryPolicy};
    /// use tower::{ServiceBuilder, ServiceExt};
    ///
    /// let chaos = Chaos::new(Rule::always(Fault::refused()));
    /// let client = ServiceBuilder::new()
    ///     .layer(RetryLayer::new(RetryPolicy::builder().max_retries(1).build().unwrap()))
    ///     .layer(ChaosLayer::new(chaos))
    ///     .service_fn(|_: http::Request<String>| async {
    ///         Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
    ///     });
    /// let error = client.oneshot(http::Request::new(String::new())).await.unwrap_err();
    /// let injected = InjectedFault::find(&error).unwrap();
    /// assert_eq!(injected.kind(), std::io::ErrorKind::ConnectionRefused);
    /// # }
    /// # #[cfg(not(feature = "tower"))]
    /// # fn main() {}
    /// ```
    pub fn find<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a InjectedFault> {
        let mut next = Some(error);
        while let Some(error) = next {
            if let Some(found) = open(error) {
                return Some(found);
            }
            next = error.source();
        }
        None
    }
}

/// The mark in `error` itself, or in what it wraps without giving it as its `source()`.
fn open<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a InjectedFault> {
    if let Some(found) = error.downcast_ref::<InjectedFault>() {
        return Some(found);
    }
    if let Some(io) = error.downcast_ref::<io::Error>() {
        let inner: &(dyn Error + 'static) = io.get_ref()?;
        return InjectedFault::find(inner);
    }
    #[cfg(feature = "reqwest-middleware")]
    if let Some(reqwest_middleware::Error::Middleware(inner)) =
        error.downcast_ref::<reqwest_middleware::Error>()
    {
        let inner: &(dyn Error + Send + Sync + 'static) = inner.as_ref();
        return InjectedFault::find(inner);
    }
    None
}

impl fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (injected by stagger's chaos layer)", self.kind)
    }
}

impl Error for InjectedFault {}
