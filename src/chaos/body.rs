//! The bodies of the answers the chaos layer injects: [`AnswerBody`], the bodies it can make, and
//! [`ChaosBody`], for a service whose body it cannot.

use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt, Empty, Full};
use pin_project_lite::pin_project;

/// A response body [`ChaosLayer`](crate::chaos::ChaosLayer) can make an injected answer's body of,
/// so that the layer answers with the service's own response type and a call it lets through
/// passes as it came.
///
/// Implemented for `Bytes`, `Vec<u8>`, `String` (its bytes read as UTF-8, an invalid sequence
/// replaced), http-body-util's `Full<Bytes>`, `Empty<Bytes>` and `()` (which keep no body),
/// `BoxBody` and `UnsyncBoxBody`, reqwest's `Body` (feature `reqwest`), tonic's (feature
/// `tonic`), and [`ChaosBody`]. Implement it for a body type of your own.
///
/// A service whose body is none of them (hyper's `Incoming`, from hyper-util's client) takes the
/// layer once its responses' bodies are a [`ChaosBody`] of theirs:
///
/// ```
/// # #[cfg(feature = "hyper-util")]
/// # fn client() {
/// use stagger::chaos::{Chaos, ChaosBody, ChaosLayer};
/// use tower::ServiceBuilder;
///
/// let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
///     .build_http::<String>();
/// let chaos = Chaos::builder().build();
/// let client = ServiceBuilder::new()
///     .layer(ChaosLayer::new(chaos))
///     .map_response(|response: http::Response<hyper::body::Incoming>| {
///         response.map(ChaosBody::new)
///     })
///     .service(client);
/// # let _ = client;
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "the chaos layer cannot make an answer's body of `{Self}`",
    note = "beneath the layer, make the service's bodies a `ChaosBody` of theirs: `.map_response(|response| response.map(stagger::chaos::ChaosBody::new))`"
)]
pub trait AnswerBody: Sized {
    /// A body of `bytes`.
    fn from_bytes(bytes: Bytes) -> Self;
}

impl AnswerBody for Bytes {
    fn from_bytes(bytes: Bytes) -> Self {
        bytes
    }
}

impl AnswerBody for Vec<u8> {
    fn from_bytes(bytes: Bytes) -> Self {
        bytes.into()
    }
}

impl AnswerBody for String {
    fn from_bytes(bytes: Bytes) -> Self {
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl AnswerBody for () {
    fn from_bytes(_: Bytes) -> Self {}
}

impl AnswerBody for Full<Bytes> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes)
    }
}

impl AnswerBody for Empty<Bytes> {
    fn from_bytes(_: Bytes) -> Self {
        Empty::new()
    }
}

impl<E: 'static> AnswerBody for BoxBody<Bytes, E> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes).map_err(never).boxed()
    }
}

impl<E: 'static> AnswerBody for UnsyncBoxBody<Bytes, E> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes).map_err(never).boxed_unsync()
    }
}

#[cfg(feature = "reqwest")]
impl AnswerBody for reqwest::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        bytes.into()
    }
}

#[cfg(feature = "tonic")]
impl AnswerBody for tonic::body::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        if bytes.is_empty() {
            // A Trailers-Only gRPC answer: the status is in the head.
            return tonic::body::Body::empty();
        }
        tonic::body::Body::new(Full::new(bytes))
    }
}

impl<B> AnswerBody for ChaosBody<B> {
    fn from_bytes(bytes: Bytes) -> Self {
        Self::injected(bytes)
    }
}

fn never<E>(never: Infallible) -> E {
    match never {}
}

pin_project! {
    /// A service's response body, or an injected answer's: what makes
    /// [`ChaosLayer`](crate::chaos::ChaosLayer) work over a service whose body it cannot make
    /// ([`AnswerBody`]), such as hyper's `Incoming`.
    ///
    /// A [`Body`] when the service's is (with `Bytes` for data), and `Default` when it is, as
    /// `RetryLayer::grpc` asks of a response's body.
    ///
    /// ```
    /// use http_body::Body;
    /// use stagger::chaos::ChaosBody;
    ///
    /// let passed = ChaosBody::new(String::from("from upstream"));
    /// assert!(!passed.is_injected());
    /// assert_eq!(passed.size_hint().exact(), Some(13));
    /// assert_eq!(passed.into_inner(), Some(String::from("from upstream")));
    /// ```
    pub struct ChaosBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProjection]
    enum Kind<B> {
        Upstream { #[pin] body: B },
        // Boxed: the upstream's body alone sets the size.
        Injected { data: Option<Box<Bytes>> },
    }
}

impl<B> ChaosBody<B> {
    /// The service's `body`, passed through.
    pub const fn new(body: B) -> Self {
        Self {
            kind: Kind::Upstream { body },
        }
    }

    /// An injected answer's body.
    fn injected(data: Bytes) -> Self {
        let data = (!data.is_empty()).then(|| Box::new(data));
        Self {
            kind: Kind::Injected { data },
        }
    }

    /// Whether the chaos layer made it.
    pub const fn is_injected(&self) -> bool {
        matches!(self.kind, Kind::Injected { .. })
    }

    /// The service's body, if it is one.
    pub fn into_inner(self) -> Option<B> {
        match self.kind {
            Kind::Upstream { body } => Some(body),
            Kind::Injected { .. } => None,
        }
    }
}

impl<B: Body<Data = Bytes>> Body for ChaosBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProjection::Upstream { body } => body.poll_frame(cx),
            KindProjection::Injected { data } => {
                Poll::Ready(data.take().map(|data| Ok(Frame::data(*data))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Upstream { body } => body.is_end_stream(),
            Kind::Injected { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Upstream { body } => body.size_hint(),
            Kind::Injected { data } => {
                SizeHint::with_exact(data.as_deref().map_or(0, |data| data.len() as u64))
            }
        }
    }
}

impl<B: Default> Default for ChaosBody<B> {
    fn default() -> Self {
        Self::new(B::default())
    }
}

impl<B> fmt::Debug for ChaosBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Upstream { .. } => f.write_str("ChaosBody::Upstream"),
            Kind::Injected { data } => f
                .debug_struct("ChaosBody::Injected")
                .field("left", &data.as_deref().map_or(0, Bytes::len))
                .finish(),
        }
    }
}
