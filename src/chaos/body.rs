//! [`ChaosBody`]: the body of a response through the chaos layer, the upstream's or an injected one.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

pin_project! {
    /// The body of a response through [`ChaosLayer`](crate::chaos::ChaosLayer) over `http` types:
    /// the upstream's body as it streams, or the body of an injected answer, so that the layer can
    /// answer for any service, whatever its body (hyper's `Incoming`, tonic's, `String`).
    ///
    /// It is a [`Body`] when the upstream's is (with `Bytes` for data), and `Default` when it is, as
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
        Injected { data: Option<Bytes> },
    }
}

impl<B> ChaosBody<B> {
    /// The upstream's `body`, passed through.
    pub const fn new(body: B) -> Self {
        Self {
            kind: Kind::Upstream { body },
        }
    }

    /// An injected answer's body.
    pub(crate) fn injected(data: Bytes) -> Self {
        let data = (!data.is_empty()).then_some(data);
        Self {
            kind: Kind::Injected { data },
        }
    }

    /// Whether the chaos layer made it.
    pub const fn is_injected(&self) -> bool {
        matches!(self.kind, Kind::Injected { .. })
    }

    /// The upstream's body, if it is one.
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
                Poll::Ready(data.take().map(|d| Ok(Frame::data(d))))
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
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
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
                .field("left", &data.as_ref().map_or(0, Bytes::len))
                .finish(),
        }
    }
}
