//! The replay buffer: a body that cannot be copied is recorded as it streams out, so that a retry can
//! send it again byte for byte (see
//! [`RetryPolicyBuilder::replay_buffer`](crate::RetryPolicyBuilder::replay_buffer)).
//!
//! A recording keeps the chunks the body yielded (`Bytes`, so a chunk costs a reference count, not a
//! copy), up to a limit; a body longer than the limit, or one that ends with trailers or an error, is
//! not replayable, and its request is not retried. The recording is freed with the call.
//!
//! A recording is whole once the body has ended, and a client does not always poll a body to its end
//! to learn that: hyper never polls a body whose `is_end_stream()` is true, stops after the frame that
//! makes it true, and stops once it has sent the length the request declared (its `Content-Length`,
//! or the body's exact size hint). Each of these ends the recording too.
//!
//! A body that was never read — the attempt failed before the client polled it, as when the
//! connection is refused — needs no recording: no byte of it left, and it is still whole. When the
//! request is dropped, its body goes back to a slot ([`Unread`]) that the retry takes it from, without
//! a copy, whatever its length. Only a dropped body is taken, never one a client still holds: no
//! connection can be sending it meanwhile.

use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes, BytesMut};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};

/// What a request's body yielded, as far as the limit allows.
pub(crate) struct Recorder {
    limit: usize,
    /// The length the request declared for its body, if it did: a client that has sent that much
    /// stops without polling the body to its end.
    declared: Option<u64>,
    tape: Mutex<Tape>,
}

/// How far a recording has got.
enum Tape {
    /// The body has yielded nothing yet: it is whole as given.
    Unread,
    /// The chunks so far; the body has not said it ended.
    Partial(Chunks),
    /// The body ended, and every byte of it was kept.
    Whole(Chunks),
    /// The body was dropped before it yielded anything, and went back to its [`Unread`] slot.
    Returned,
    /// The body went past the limit, yielded trailers or failed: it cannot be replayed.
    Lost,
}

#[derive(Default)]
struct Chunks {
    chunks: Vec<Bytes>,
    len: usize,
}

impl Recorder {
    /// A recording of `body`, up to `limit` bytes, for a request that `declared` its body's length (see
    /// [`declared_length`]), or whose body knows its exact size. A body at its end before it is sent
    /// (an empty one) is whole at once: no client polls it.
    pub(crate) fn start<B: Body>(limit: usize, declared: Option<u64>, body: &B) -> Arc<Self> {
        let declared = declared.or_else(|| body.size_hint().exact());
        let tape = if body.is_end_stream() || declared == Some(0) {
            Tape::Whole(Chunks::default())
        } else {
            Tape::Unread
        };
        Arc::new(Self {
            limit,
            declared,
            tape: Mutex::new(tape),
        })
    }

    fn tape(&self) -> std::sync::MutexGuard<'_, Tape> {
        // A panic while the lock is held leaves at worst a recording lost or not yet whole.
        self.tape.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `chunk`; `at_end` is whether the body said, once it had yielded it, that it has ended.
    fn push(&self, chunk: &Bytes, at_end: bool) {
        let mut tape = self.tape();
        let mut kept = match &mut *tape {
            Tape::Unread => Chunks::default(),
            Tape::Partial(kept) | Tape::Whole(kept) => std::mem::take(kept),
            // A body polled after it was dropped, or past its end: nothing to keep.
            Tape::Returned | Tape::Lost => return,
        };
        let Some(len) = kept
            .len
            .checked_add(chunk.len())
            .filter(|&len| len <= self.limit)
        else {
            // Past the limit, what was kept is no use, and is freed at once.
            *tape = Tape::Lost;
            return;
        };
        kept.len = len;
        kept.chunks.push(chunk.clone());
        // A body that goes on past its declared length has not ended there after all.
        let ended = at_end || self.declared == u64::try_from(len).ok();
        *tape = if ended {
            Tape::Whole(kept)
        } else {
            Tape::Partial(kept)
        };
    }

    /// The body was polled to its end.
    fn finish(&self) {
        let mut tape = self.tape();
        match &mut *tape {
            Tape::Unread => *tape = Tape::Whole(Chunks::default()),
            Tape::Partial(kept) => {
                let kept = std::mem::take(kept);
                *tape = Tape::Whole(kept);
            }
            Tape::Whole(_) | Tape::Returned | Tape::Lost => {}
        }
    }

    fn lose(&self) {
        *self.tape() = Tape::Lost;
    }

    /// Whether the body ended within the limit, every byte kept.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn is_whole(&self) -> bool {
        matches!(*self.tape(), Tape::Whole(_))
    }

    /// Whether a retry can send the body again: its recording is whole, or the body itself came back
    /// unread.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn is_replayable(&self) -> bool {
        matches!(*self.tape(), Tape::Whole(_) | Tape::Returned)
    }

    /// The most a recording keeps.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) const fn limit(&self) -> usize {
        self.limit
    }

    /// The whole body, if it ended within the limit; one contiguous buffer (a single chunk is shared,
    /// not copied).
    pub(crate) fn body(&self) -> Option<Bytes> {
        let tape = self.tape();
        let Tape::Whole(kept) = &*tape else {
            return None;
        };
        Some(match kept.chunks.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            chunks => {
                let mut all = BytesMut::with_capacity(kept.len);
                for chunk in chunks {
                    all.extend_from_slice(chunk);
                }
                all.freeze()
            }
        })
    }
}

/// The length a request declares for its body: its `Content-Length`, if it has a valid one, which a
/// client sends rather than the body's own size hint.
pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    let value = headers.get(http::header::CONTENT_LENGTH)?;
    value.to_str().ok()?.trim().parse().ok()
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (tape, recorded) = match &*self.tape() {
            Tape::Unread => ("unread", 0),
            Tape::Partial(kept) => ("partial", kept.len),
            Tape::Whole(kept) => ("whole", kept.len),
            Tape::Returned => ("returned", 0),
            Tape::Lost => ("lost", 0),
        };
        f.debug_struct("Recorder")
            .field("limit", &self.limit)
            .field("declared", &self.declared)
            .field("tape", &tape)
            .field("recorded", &recorded)
            .finish()
    }
}

/// Where a body that was dropped unread goes back, for a retry to send it (see [`Recording`]).
pub(crate) struct Unread<B>(Mutex<Option<B>>);

impl<B> Unread<B> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self(Mutex::new(None)))
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<B>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The body, if it came back unread; at most once.
    pub(crate) fn take(&self) -> Option<B> {
        self.slot().take()
    }
}

/// Passes a body through, its data as `Bytes`, recording what it yields once it has a recorder. If it
/// is dropped before it yielded anything, the body goes back to its [`Unread`] slot.
pub(crate) struct Recording<B> {
    /// `None` only once dropped.
    inner: Option<B>,
    recorder: Option<Arc<Recorder>>,
    unread: Option<Arc<Unread<B>>>,
}

impl<B> Recording<B> {
    pub(crate) const fn new(
        inner: B,
        recorder: Option<Arc<Recorder>>,
        unread: Option<Arc<Unread<B>>>,
    ) -> Self {
        Self {
            inner: Some(inner),
            recorder,
            unread,
        }
    }
}

impl<B> Drop for Recording<B> {
    fn drop(&mut self) {
        let (Some(recorder), Some(unread)) = (&self.recorder, &self.unread) else {
            return;
        };
        // The tape is locked while the body goes back, so that a recorder that says it has returned
        // has its body in the slot.
        let mut tape = recorder.tape();
        if matches!(*tape, Tape::Unread)
            && let Some(body) = self.inner.take()
        {
            *unread.slot() = Some(body);
            *tape = Tape::Returned;
        }
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
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let polled = ready!(Pin::new(&mut *inner).poll_frame(cx));
        let recorder = this.recorder.as_deref();
        Poll::Ready(match polled {
            None => {
                recorder.inspect(|r| r.finish());
                None
            }
            Some(Ok(frame)) => Some(Ok(match frame.into_data() {
                Ok(mut data) => {
                    let chunk = data.copy_to_bytes(data.remaining());
                    if let Some(recorder) = recorder {
                        recorder.push(&chunk, inner.is_end_stream());
                    }
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

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(B::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), B::size_hint)
    }
}

/// A request body that can be replayed though it cannot be copied: wrap a streaming body in it, and
/// [`RetryLayer`](crate::RetryLayer) over a service of `http::Request<ReplayBody<B>>` retries its
/// requests as it retries those with a cloneable body.
///
/// The body is recorded as it streams out, up to the policy's
/// [`replay_buffer`](crate::RetryPolicyBuilder::replay_buffer); a retry sends the recording, byte for
/// byte. The recording is whole once the body has ended: polled to its end, or, as hyper sends it
/// without that last poll, once it says it has (`is_end_stream()`, an empty body included) or has
/// yielded the length the request declared (its `Content-Length`, or the body's exact size hint). A
/// body that was never read (the connection was refused) is not copied at all: the retry sends the
/// body itself, whatever its length. A body longer than the buffer that was sent, or one that ends
/// with trailers or an error, is sent once, and the result is returned as received.
/// `reqwest::Request`s need no wrapper: the adapters record a streaming reqwest body themselves.
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
    /// Not sent: the body of the request a retry is made from, where the body being recorded comes
    /// back if it is dropped unread.
    Unread(Arc<Unread<B>>),
}

impl<B> ReplayBody<B> {
    /// Wraps `body`, to be recorded as it streams out.
    pub const fn new(body: B) -> Self {
        Self {
            inner: Inner::Streaming(Recording::new(body, None, None)),
        }
    }

    /// A body that sends `bytes`: a recording, replayed.
    pub(crate) const fn replayed(bytes: Bytes) -> Self {
        Self {
            inner: Inner::Replayed(Some(bytes)),
        }
    }

    /// The bytes of a replayed body, for another copy of it.
    pub(crate) fn replayed_bytes(&self) -> Option<&Bytes> {
        match &self.inner {
            Inner::Replayed(bytes) => bytes.as_ref(),
            Inner::Streaming(_) | Inner::Unread(_) => None,
        }
    }

    /// For the body [`record`](Self::record) returned: the body recorded, if it came back unread.
    /// The slot a recording's template holds, where its body comes back if it is dropped unread.
    #[cfg(feature = "tonic")]
    pub(crate) fn into_unread_slot(self) -> Option<Arc<Unread<B>>> {
        match self.inner {
            Inner::Unread(slot) => Some(slot),
            Inner::Streaming(_) | Inner::Replayed(_) => None,
        }
    }

    pub(crate) fn take_unread(&self) -> Option<B> {
        match &self.inner {
            Inner::Unread(unread) => unread.take(),
            Inner::Streaming(_) | Inner::Replayed(_) => None,
        }
    }
}

impl<B: Body> ReplayBody<B> {
    /// Starts recording a body not sent yet, up to `limit` bytes, of a request that `declared` its
    /// length: the recorder, and a body that is never sent, for the request a retry is made from,
    /// where this one comes back if it is dropped unread ([`take_unread`](Self::take_unread)). `None`
    /// for a replayed body, or one already recording.
    pub(crate) fn record(
        &mut self,
        limit: usize,
        declared: Option<u64>,
    ) -> Option<(Arc<Recorder>, Self)> {
        match &mut self.inner {
            Inner::Streaming(Recording {
                inner: Some(inner),
                recorder: recorder @ None,
                unread,
            }) => {
                let new = Recorder::start(limit, declared, inner);
                let slot = Unread::new();
                *recorder = Some(Arc::clone(&new));
                *unread = Some(Arc::clone(&slot));
                let template = Self {
                    inner: Inner::Unread(slot),
                };
                Some((new, template))
            }
            _ => None,
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
            Inner::Unread(_) => f.debug_struct("ReplayBody").finish_non_exhaustive(),
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
            Inner::Unread(_) => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Streaming(recording) => recording.is_end_stream(),
            Inner::Replayed(bytes) => bytes.is_none(),
            Inner::Unread(_) => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Streaming(recording) => recording.size_hint(),
            Inner::Replayed(bytes) => {
                SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64))
            }
            Inner::Unread(_) => SizeHint::with_exact(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{Empty, Full};

    use super::*;

    /// A body that does not know its length and has not ended.
    struct Streaming;

    impl Body for Streaming {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Pending
        }
    }

    fn recorder(limit: usize) -> Arc<Recorder> {
        Recorder::start(limit, None, &Streaming)
    }

    #[test]
    fn a_body_within_the_limit_is_kept_whole_and_one_past_it_is_lost() {
        let recorder = recorder(10);
        recorder.push(&Bytes::from_static(b"hello"), false);
        recorder.push(&Bytes::from_static(b" you"), false);
        assert_eq!(recorder.body(), None); // not ended yet
        recorder.finish();
        assert_eq!(recorder.body().unwrap(), "hello you");

        let recorder = self::recorder(8);
        recorder.push(&Bytes::from_static(b"hello"), false);
        recorder.push(&Bytes::from_static(b" you"), false);
        recorder.finish();
        assert_eq!(recorder.body(), None);
    }

    #[test]
    fn a_single_chunk_is_shared_not_copied() {
        let recorder = recorder(64);
        let chunk = Bytes::from(vec![7u8; 32]);
        recorder.push(&chunk, false);
        recorder.finish();
        assert_eq!(recorder.body().unwrap().as_ptr(), chunk.as_ptr());
    }

    #[test]
    fn trailers_or_an_error_lose_the_recording() {
        let recorder = recorder(64);
        recorder.push(&Bytes::from_static(b"a"), false);
        recorder.lose();
        recorder.finish();
        assert_eq!(recorder.body(), None);
    }

    #[test]
    fn a_body_that_says_it_ended_is_whole_without_being_polled_to_its_end() {
        let recorder = recorder(64);
        recorder.push(&Bytes::from_static(b"all"), true);
        assert_eq!(recorder.body().unwrap(), "all");
    }

    #[test]
    fn a_body_at_its_end_before_it_is_sent_is_whole() {
        let empty = Recorder::start(64, None, &Empty::<Bytes>::new());
        assert_eq!(empty.body().unwrap(), "");
        let declared_empty = Recorder::start(64, Some(0), &Streaming);
        assert_eq!(declared_empty.body().unwrap(), "");
    }

    #[test]
    fn a_body_that_reaches_its_declared_length_is_whole() {
        let recorder = Recorder::start(64, Some(5), &Streaming);
        recorder.push(&Bytes::from_static(b"hel"), false);
        assert_eq!(recorder.body(), None);
        recorder.push(&Bytes::from_static(b"lo"), false);
        assert_eq!(recorder.body().unwrap(), "hello");
        // A body that goes on past it had not ended there.
        recorder.push(&Bytes::from_static(b"!"), false);
        assert_eq!(recorder.body(), None);
        recorder.finish();
        assert_eq!(recorder.body().unwrap(), "hello!");

        // A body that knows its exact length declares it.
        let full = Full::new(Bytes::from_static(b"hello"));
        let recorder = Recorder::start(64, None, &full);
        recorder.push(&Bytes::from_static(b"hello"), false);
        assert_eq!(recorder.body().unwrap(), "hello");
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    fn recording<B: Body>(body: B) -> (Recording<B>, Arc<Recorder>, Arc<Unread<B>>) {
        let recorder = Recorder::start(64, None, &body);
        let unread = Unread::new();
        let recording =
            Recording::new(body, Some(Arc::clone(&recorder)), Some(Arc::clone(&unread)));
        (recording, recorder, unread)
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    fn poll<B: Body<Data = Bytes> + Unpin>(recording: &mut Recording<B>) -> bool
    where
        B::Error: fmt::Debug,
    {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        Pin::new(recording).poll_frame(&mut cx).is_ready()
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    #[test]
    fn a_body_dropped_before_it_yielded_anything_goes_back_whole() {
        let (mut recording, recorder, unread) = recording(Streaming);
        assert!(!poll(&mut recording)); // a pending poll yields nothing
        assert!(!recorder.is_replayable());
        drop(recording);
        assert!(recorder.is_replayable());
        assert!(!recorder.is_whole()); // nothing recorded: the body itself is sent
        assert!(unread.take().is_some());
        assert!(unread.take().is_none()); // taken once
    }

    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    #[test]
    fn a_body_dropped_after_a_frame_stays_with_its_recording() {
        let frames = [b"a", b"b"]
            .map(|c| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from_static(c))));
        let (mut recording, recorder, unread) = recording(http_body_util::StreamBody::new(
            futures::stream::iter(frames),
        ));
        assert!(poll(&mut recording));
        drop(recording);
        assert!(!recorder.is_replayable()); // part of it left, and it did not end
        assert!(unread.take().is_none());
    }
}
