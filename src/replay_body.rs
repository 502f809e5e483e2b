//! The replay buffer: a body that cannot be copied is recorded as it streams out, so that a retry can
//! send it again byte for byte (see
//! [`RetryPolicyBuilder::replay_buffer`](crate::RetryPolicyBuilder::replay_buffer)).
//!
//! A recording keeps the chunks the body yielded (`Bytes`, so a chunk costs a reference count, not a
//! copy), up to a limit; a body longer than the limit, or one that ends with trailers or an error, is
//! not replayable, and its request is not retried. The recording is freed with the call.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// What a request's body yielded, as far as the limit allows.
pub(crate) struct Recorder {
    limit: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    chunks: Vec<Bytes>,
    len: usize,
    /// The body ended, and every byte of it was kept.
    complete: bool,
    /// The body went past the limit, yielded trailers or failed: it cannot be replayed.
    lost: bool,
}

impl Recorder {
    pub(crate) fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            state: Mutex::default(),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while the lock is held leaves at worst a recording marked lost or incomplete.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, chunk: &Bytes) {
        let mut state = self.state();
        if state.lost {
            return;
        }
        match state.len.checked_add(chunk.len()) {
            Some(len) if len <= self.limit => {
                state.len = len;
                state.chunks.push(chunk.clone());
            }
            // Past the limit: what was kept is no use, and is freed at once.
            _ => {
                *state = State {
                    lost: true,
                    ..State::default()
                }
            }
        }
    }

    fn finish(&self) {
        let mut state = self.state();
        state.complete = !state.lost;
    }

    fn lose(&self) {
        *self.state() = State {
            lost: true,
            ..State::default()
        };
    }

    /// Whether the body ended within the limit, every byte kept.
    pub(crate) fn is_whole(&self) -> bool {
        self.state().complete
    }

    /// The whole body, if it ended within the limit; one contiguous buffer (a single chunk is shared,
    /// not copied).
    pub(crate) fn body(&self) -> Option<Bytes> {
        let state = self.state();
        if !state.complete {
            return None;
        }
        Some(match state.chunks.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            chunks => {
                let mut all = BytesMut::with_capacity(state.len);
                for chunk in chunks {
                    all.extend_from_slice(chunk);
                }
                all.freeze()
            }
        })
    }
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state();
        f.debug_struct("Recorder")
            .field("limit", &self.limit)
            .field("recorded", &state.len)
            .field("complete", &state.complete)
            .field("lost", &state.lost)
            .finish()
    }
}

/// Passes a body through, its data as `Bytes`, recording what it yields once it has a recorder.
pub(crate) struct Recording<B> {
    inner: B,
    recorder: Option<Arc<Recorder>>,
}

impl<B> Recording<B> {
    pub(crate) const fn new(inner: B, recorder: Option<Arc<Recorder>>) -> Self {
        Self { inner, recorder }
    }
}

impl<B> Body for Recording<B>
where
    B: Body + Unpin,
    B::Data: Buf,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        record(
            Pin::new(&mut this.inner).poll_frame(cx),
            this.recorder.as_deref(),
        )
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Records one poll's outcome, if there is a recorder, and passes it on, its data as `Bytes`.
fn record<D: Buf, E>(
    polled: Poll<Option<Result<Frame<D>, E>>>,
    recorder: Option<&Recorder>,
) -> Poll<Option<Result<Frame<Bytes>, E>>> {
    let Poll::Ready(polled) = polled else {
        return Poll::Pending;
    };
    Poll::Ready(match polled {
        None => {
            recorder.inspect(|r| r.finish());
            None
        }
        Some(Ok(frame)) => Some(Ok(match frame.into_data() {
            Ok(mut data) => {
                let chunk = data.copy_to_bytes(data.remaining());
                recorder.inspect(|r| r.push(&chunk));
                Frame::data(chunk)
            }
            Err(frame) => {
                // Trailers are not kept: a body that has them is not replayed.
                recorder.inspect(|r| r.lose());
                frame.map_data(|mut data| data.copy_to_bytes(data.remaining()))
            }
        })),
        Some(Err(error)) => {
            recorder.inspect(|r| r.lose());
            Some(Err(error))
        }
    })
}

/// A request body that can be replayed though it cannot be copied: wrap a streaming body in it, and
/// [`RetryLayer`](crate::RetryLayer) over a service of `http::Request<ReplayBody<B>>` retries its
/// requests as it retries those with a cloneable body.
///
/// The body is recorded as it streams out, up to the policy's
/// [`replay_buffer`](crate::RetryPolicyBuilder::replay_buffer); a retry sends the recording, byte for
/// byte. A body longer than that, or one that ends with trailers or an error, is sent once, and the
/// result is returned as received. `reqwest::Request`s need no wrapper: the adapters record a
/// streaming reqwest body themselves.
///
/// The inner service must accept `http::Request<ReplayBody<B>>`; `ReplayBody` is an
/// [`http_body::Body`] whose data is [`Bytes`], as hyper-util's client takes.
///
/// ```
/// # #[cfg(feature = "tower")]
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::convert::Infallible;
/// use std::sync::{Arc, Mutex};
/// use http_body_util::{BodyExt, StreamBody};
/// use stagger::{ReplayBody, RetryLayer, RetryPolicy};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// let received = Arc::new(Mutex::new(Vec::new()));
/// let seen = Arc::clone(&received);
/// let server = service_fn(move |request: http::Request<ReplayBody<_>>| {
///     let seen = Arc::clone(&seen);
///     async move {
///         let body = request.into_body().collect().await.unwrap().to_bytes();
///         let mut seen = seen.lock().unwrap();
///         seen.push(body);
///         let status = if seen.len() == 1 { 503 } else { 200 };
///         Ok::<_, Infallible>(http::Response::builder().status(status).body(()).unwrap())
///     }
/// });
/// let client = RetryLayer::new(RetryPolicy::default()).layer(server);
///
/// // A body that streams out in two chunks and cannot be copied.
/// let chunks = ["hello, ", "world"].map(|c| Ok::<_, Infallible>(http_body::Frame::data(bytes::Bytes::from(c))));
/// let body = ReplayBody::new(StreamBody::new(futures::stream::iter(chunks)));
/// let request = http::Request::post("http://api.test/upload").header("idempotency-key", "7").body(body).unwrap();
///
/// let response = client.oneshot(request).await.unwrap();
/// assert_eq!(response.status(), 200);
/// assert_eq!(*received.lock().unwrap(), ["hello, world", "hello, world"]);
/// # }
/// # #[cfg(not(feature = "tower"))]
/// # fn main() {}
/// ```
pub struct ReplayBody<B> {
    inner: Inner<B>,
}

enum Inner<B> {
    /// The body as given, recorded once the adapter has set a recorder.
    Streaming(Recording<B>),
    /// A recording, sent again.
    Replayed(Option<Bytes>),
}

impl<B> ReplayBody<B> {
    /// Wraps `body`, to be recorded as it streams out.
    pub const fn new(body: B) -> Self {
        Self {
            inner: Inner::Streaming(Recording::new(body, None)),
        }
    }

    /// A body that sends `bytes`: a recording, replayed.
    pub(crate) const fn replayed(bytes: Bytes) -> Self {
        Self {
            inner: Inner::Replayed(Some(bytes)),
        }
    }

    /// Starts recording a body not sent yet, up to `limit` bytes; `None` for a replayed body, or one
    /// already recording.
    pub(crate) fn record(&mut self, limit: usize) -> Option<Arc<Recorder>> {
        match &mut self.inner {
            Inner::Streaming(Recording { recorder, .. }) if recorder.is_none() => {
                let new = Recorder::new(limit);
                *recorder = Some(Arc::clone(&new));
                Some(new)
            }
            _ => None,
        }
    }

    /// The bytes of a replayed body, for another copy of it.
    pub(crate) fn replayed_bytes(&self) -> Option<&Bytes> {
        match &self.inner {
            Inner::Replayed(bytes) => bytes.as_ref(),
            Inner::Streaming(_) => None,
        }
    }
}

impl<B> fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Streaming(Recording { recorder, .. }) => f
                .debug_struct("ReplayBody")
                .field("recorder", recorder)
                .finish_non_exhaustive(),
            Inner::Replayed(bytes) => f
                .debug_struct("ReplayBody")
                .field("replayed", &bytes.as_ref().map(Bytes::len))
                .finish(),
        }
    }
}

impl<B> Body for ReplayBody<B>
where
    B: Body + Unpin,
    B::Data: Buf,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match &mut self.inner {
            Inner::Streaming(recording) => Pin::new(recording).poll_frame(cx),
            Inner::Replayed(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Streaming(recording) => recording.is_end_stream(),
            Inner::Replayed(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Streaming(recording) => recording.size_hint(),
            Inner::Replayed(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_within_the_limit_is_kept_whole_and_one_past_it_is_lost() {
        let recorder = Recorder::new(10);
        recorder.push(&Bytes::from_static(b"hello"));
        recorder.push(&Bytes::from_static(b" you"));
        assert_eq!(recorder.body(), None); // not ended yet
        recorder.finish();
        assert_eq!(recorder.body().unwrap(), "hello you");

        let recorder = Recorder::new(8);
        recorder.push(&Bytes::from_static(b"hello"));
        recorder.push(&Bytes::from_static(b" you"));
        recorder.finish();
        assert_eq!(recorder.body(), None);
    }

    #[test]
    fn a_single_chunk_is_shared_not_copied() {
        let recorder = Recorder::new(64);
        let chunk = Bytes::from(vec![7u8; 32]);
        recorder.push(&chunk);
        recorder.finish();
        assert_eq!(recorder.body().unwrap().as_ptr(), chunk.as_ptr());
    }

    #[test]
    fn trailers_or_an_error_lose_the_recording() {
        let recorder = Recorder::new(64);
        recorder.push(&Bytes::from_static(b"a"));
        recorder.lose();
        recorder.finish();
        assert_eq!(recorder.body(), None);
    }
}
