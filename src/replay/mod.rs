//! Sending a request again: how an adapter copies a request ([`Replay`]) and judges its attempts
//! ([`Judge`]), for `http` and `reqwest` requests ([`HttpReplay`]), for any `Clone` request judged by a
//! closure ([`ReplayFn`]), and the body that records itself as it streams out ([`ReplayBody`]).
//!
//! [`ReplayBody`]: crate::ReplayBody

pub(crate) mod body;
#[cfg(feature = "tonic")]
mod grpc;
pub(crate) mod http_replay;
mod replay_fn;
#[cfg(all(
    feature = "tower",
    feature = "reqwest",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
mod with_extensions;

#[cfg(feature = "tonic")]
pub use grpc::GrpcReplay;
pub use http_replay::HttpReplay;
pub use replay_fn::ReplayFn;
#[cfg(all(
    feature = "tower",
    feature = "reqwest",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub use with_extensions::WithExtensions;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::attempt::{Attempt, RetryInfo};
use crate::classify::RequestView;
use crate::engine::policy::RetryPolicy;
use crate::engine::state::RetryState;
use crate::error::Error;
use crate::replay::body::Recorder;
#[cfg(all(
    feature = "reqwest",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
use crate::replay::body::Unread;

/// The request of an attempt, as the layer still has it when the result arrives.
///
/// A [`Replay`] reads either: the copy kept for retries, or, for the last attempt a request can have
/// (sent without a copy), what [`Replay::keep`] kept of it. [`HttpReplay`] keeps the method and URI:
///
/// ```
/// use http::{HeaderMap, Method, Uri};
/// use stagger::adapter::Sent;
///
/// fn method_of<B>(sent: Sent<'_, http::Request<B>, (Method, Uri, HeaderMap)>) -> &Method {
///     match sent {
///         Sent::Copy(request) => request.method(),
///         Sent::Kept((method, _uri, _headers)) => method,
///     }
/// }
///
/// let request = http::Request::post("http://example.com/orders").body(()).unwrap();
/// assert_eq!(method_of(Sent::Copy(&request)), Method::POST);
/// let kept = (Method::GET, Uri::from_static("http://example.com/items"), http::HeaderMap::new());
/// assert_eq!(method_of::<()>(Sent::Kept(&kept)), Method::GET);
/// ```
#[derive(Debug)]
pub enum Sent<'a, Req, K> {
    /// The copy kept for the next attempt.
    Copy(&'a Req),
    /// What was kept of a request sent without a copy (see [`Replay::keep`]).
    Kept(&'a K),
}

impl<Req, K> Clone for Sent<'_, Req, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Req, K> Copy for Sent<'_, Req, K> {}

/// How an adapter sends one kind of request again: copies it for a retry, keeps what judging needs of
/// a request sent without a copy, records a body that cannot be copied as it streams out, and tells
/// the request's HTTP view. Its companion, [`Judge`], says what an attempt's result means.
///
/// [`HttpReplay`] serves `http` and `reqwest` types; [`ReplayFn`] any request that is [`Clone`]. A
/// type of your own implements both traits, and goes to the tower `Retry` service with
/// `stagger::tower::Retry::new` (see [`Judge`] for an example).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot copy `{Req}` requests for a retry",
    note = "`RetryLayer::new` takes `http::Request<B>` (http 1) with `B: Clone` or `B = stagger::ReplayBody<_>`, and `reqwest::Request` of reqwest 0.13 with stagger's `reqwest` feature",
    note = "another major version of reqwest or http (reqwest 0.12, http 0.2) is a different crate whose types stagger does not read: `cargo tree -d` shows the second copy",
    note = "a body that is not `Clone` (hyper's `Incoming`, a `BoxBody`): wrap it in `stagger::ReplayBody`, which records it as it streams out, or buffer it (`http_body_util::Full<Bytes>`)",
    note = "a tonic client (`tonic::body::Body`, a `Channel`): use `RetryLayer::grpc` (stagger's feature `tonic`)",
    note = "for any other request type, use `RetryLayer::classify_with(policy, |result| ...)`"
)]
pub trait Replay<Req> {
    /// What is kept of a request sent without a copy, to judge its result.
    type Kept;

    /// A copy of `request` for another attempt, or `None` if it cannot be copied (a streaming body), in
    /// which case it is recorded as it streams out ([`start_recording`](Self::start_recording)) or
    /// sent once.
    ///
    /// A request copied once must copy again: the adapters keep one copy and make each retry's request
    /// from it when the retry is due. Should a copy refuse, the call ends there, with the last response
    /// received or an [`Error`](crate::Error) that says the request could not be replayed.
    fn clone_request(&self, request: &Req) -> Option<Req>;

    /// What to keep of a request that is sent without a copy.
    fn keep(&self, request: &Req) -> Self::Kept;

    /// The HTTP view of `request`, if it is an HTTP request: whether it is idempotent decides whether
    /// an attempt that timed out is retried (one without a view is retried), its host is the one whose
    /// cooldown, budget account and throttle the call uses, and its method, host and path go into the
    /// `tracing` events of the call.
    fn view<'a>(&self, request: Sent<'a, Req, Self::Kept>) -> Option<RequestView<'a>>;

    /// For a request whose body cannot be copied: starts recording the body as it streams out, up to
    /// `limit` bytes (the policy's [`replay_buffer`](crate::RetryPolicyBuilder::replay_buffer)), and
    /// returns what a retry is made from. `None`, the default, when this kind of request cannot be
    /// recorded: it is then sent once.
    fn start_recording(&self, request: &mut Req, limit: usize) -> Option<Recorded<Req>> {
        let _ = (request, limit);
        None
    }

    /// The request for a retry, made from a recording: with the recorded body, or, if the body was
    /// dropped before any of it was read (the attempt failed before sending it), with the body itself.
    /// `None` if neither is there — the body did not end within the limit, or ended with trailers or an
    /// error — in which case the call ends with the result in hand. Only called with what
    /// [`start_recording`](Self::start_recording) returned.
    fn rebuild(&self, recorded: &Recorded<Req>) -> Option<Req> {
        let _ = recorded;
        None
    }

    /// Called right before an attempt of `request` is sent, with what the call knows of it: how many
    /// attempts went before, and how long is left of its deadline. The tower layer calls it before
    /// each attempt (the first, each retry, each hedge); the reqwest middleware, whose `HttpReplay`
    /// has nothing to set, before each hedge only. Does nothing by default; `GrpcReplay` (feature
    /// `tonic`) sets gRPC's `grpc-previous-rpc-attempts` and `grpc-timeout` from it.
    fn before_send(&self, request: &mut Req, attempt: NextAttempt<'_>) {
        let _ = (request, attempt);
    }

    /// The deadline the caller set on `request`, counted from now, if its protocol carries one (a
    /// gRPC call's `grpc-timeout`, which `tonic::Request::set_timeout` sets). The adapters make it the
    /// call's deadline when it is sooner than the policy's `max_elapsed`
    /// ([`RetryState::limit_deadline`]): no retry waits past it, none is sent after it. `None`, the
    /// default, for a request without one.
    fn deadline(&self, request: &Req) -> Option<Duration> {
        let _ = request;
        None
    }

    /// The settings the caller gave `request` itself, in place of the policy's ([`Overrides`]), if
    /// its type carries them (in its extensions); the adapters apply them before the first attempt.
    /// `None`, the default, for a request without.
    ///
    /// [`Overrides`]: crate::Overrides
    fn overrides(&self, request: &Req) -> Option<crate::engine::overrides::Overrides> {
        let _ = request;
        None
    }
}

/// An attempt about to be sent, as [`Replay::before_send`] sees it.
///
/// ```
/// use std::time::Duration;
/// use stagger::RetryPolicy;
/// use stagger::adapter::{NextAttempt, Replay, ReplayFn};
///
/// let policy = RetryPolicy::default();
/// let state = policy.start();
/// let first = NextAttempt::new(&state);
/// assert_eq!(first.previous_attempts(), 0);
/// // The earlier of the attempt timeout (10 s) and the deadline (30 s).
/// assert_eq!(first.time_left(), Some(Duration::from_secs(10)));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct NextAttempt<'a> {
    state: &'a RetryState,
    /// Attempts of the call in flight, not yet judged: the one a hedge races.
    in_flight: u32,
}

impl<'a> NextAttempt<'a> {
    /// The next attempt of the call whose state is `state`.
    pub const fn new(state: &'a RetryState) -> Self {
        Self {
            state,
            in_flight: 0,
        }
    }

    /// A hedge, sent while an attempt of the call is in flight.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) const fn hedge(state: &'a RetryState) -> Self {
        Self {
            state,
            in_flight: 1,
        }
    }

    /// How many attempts of the call were sent before this one: 0 for the first. An attempt the
    /// server's application never saw, retried transparently, is not counted (gRPC's
    /// `grpc-previous-rpc-attempts`, see [`RetryInfo::transparent`]).
    pub fn previous_attempts(&self) -> u32 {
        self.state.attempts_seen().saturating_add(self.in_flight)
    }

    /// Which resend this attempt is, every attempt before it counted (a transparent retry's too):
    /// `None` for the first send. The adapters put it into the request ([`ResendCount`]).
    ///
    /// [`ResendCount`]: crate::ResendCount
    pub fn resend_count(&self) -> Option<crate::attempt::ResendCount> {
        crate::attempt::ResendCount::of(self.state.attempts().saturating_add(self.in_flight))
    }

    /// The replica this attempt goes to, when its name has a [`ReplicaSet`](crate::ReplicaSet) in
    /// the policy: the adapters put it into the request (its extensions, or reqwest-middleware's),
    /// for the sender beneath them to send it there.
    pub fn replica(&self) -> Option<crate::Replica> {
        self.state.replica_for(self.in_flight > 0).cloned()
    }

    /// How long this attempt may take: the earlier of the policy's `attempt_timeout` and what is left
    /// before the call's deadline; `None` without either.
    pub fn time_left(&self) -> Option<Duration> {
        self.state.attempt_time_left()
    }

    /// What is left before the call's deadline: the policy's `max_elapsed`, or the caller's own if
    /// sooner ([`Replay::deadline`]); `None` without one. The attempt timeout is not part of it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::RetryPolicy;
    /// use stagger::adapter::NextAttempt;
    ///
    /// let state = RetryPolicy::default().start(); // the 30 s deadline's clock starts
    /// let left = NextAttempt::new(&state).deadline_left().unwrap();
    /// assert!(left <= Duration::from_secs(30) && left > Duration::from_secs(29));
    /// ```
    pub fn deadline_left(&self) -> Option<Duration> {
        self.state.deadline_left()
    }

    /// The policy the call runs under.
    pub fn policy(&self) -> &'a RetryPolicy {
        self.state.policy()
    }

    /// How long the call has run, from when its clock started (at its first attempt that had to
    /// wait); zero before.
    pub fn elapsed(&self) -> Duration {
        self.state.elapsed()
    }
}

/// How an adapter judges the attempts of one kind of request: what a result means to the state
/// machine, and where the call's [`RetryInfo`] goes in the response it ends with.
///
/// [`HttpReplay`] judges with the policy's HTTP classifier; [`ReplayFn`] with a closure. A type of
/// your own can do what neither does, such as record the [`RetryInfo`] in a response that is not
/// HTTP:
///
/// ```
/// use std::io;
/// use stagger::adapter::{Attempt, Judge, Replay, Sent};
/// use stagger::classify::RequestView;
/// use stagger::{Outcome, Reason, RetryInfo, RetryPolicy};
///
/// /// An RPC's reply, with room for what the retries did.
/// struct Reply {
///     value: u32,
///     retries: Option<RetryInfo>,
/// }
///
/// /// Copies `u32` requests, retries refused connections, records the `RetryInfo` in the reply.
/// #[derive(Clone)]
/// struct Rpc;
///
/// impl Replay<u32> for Rpc {
///     type Kept = ();
///
///     fn clone_request(&self, request: &u32) -> Option<u32> {
///         Some(*request)
///     }
///
///     fn keep(&self, _request: &u32) {}
///
///     fn view<'a>(&self, _request: Sent<'a, u32, ()>) -> Option<RequestView<'a>> {
///         None
///     }
/// }
///
/// impl Judge<u32, Reply, io::Error> for Rpc {
///     fn judge(
///         &self,
///         _policy: &RetryPolicy,
///         _request: Sent<'_, u32, ()>,
///         result: &Result<Reply, io::Error>,
///     ) -> Attempt {
///         let outcome = match result {
///             Ok(_) => Outcome::Success,
///             Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
///                 Outcome::RetrySafe(Reason::Connect)
///             }
///             Err(_) => Outcome::Fatal,
///         };
///         Attempt::new(outcome)
///     }
///
///     fn report(reply: &mut Reply, info: RetryInfo) {
///         reply.retries = Some(info);
///     }
/// }
///
/// # #[cfg(feature = "tower")]
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// # use tower::ServiceExt;
/// # let calls = std::sync::atomic::AtomicU32::new(0);
/// # let flaky = tower::service_fn(|n: u32| {
/// #     let first = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
/// #     async move {
/// #         if first { Err(io::Error::from(io::ErrorKind::ConnectionRefused)) }
/// #         else { Ok(Reply { value: n * 2, retries: None }) }
/// #     }
/// # });
/// // `flaky` refuses the first connection, then answers twice the request:
/// let service = stagger::tower::Retry::new(flaky, RetryPolicy::default(), Rpc);
/// let reply = service.oneshot(21).await.unwrap();
/// assert_eq!(reply.value, 42);
/// assert_eq!(reply.retries.unwrap().attempts(), 2);
/// # }
/// # #[cfg(not(feature = "tower"))]
/// # fn main() {}
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot judge `{Req}` requests answered with `Result<{Res}, {E}>`",
    note = "`RetryLayer::new` judges `http::Response<B>` (http 1), and `reqwest::Response` of reqwest 0.13 with stagger's `reqwest` feature; the inner service's error must implement `stagger::adapter::AsError`",
    note = "another major version of reqwest or http (reqwest 0.12, http 0.2) is a different crate whose types stagger does not read: `cargo tree -d` shows the second copy",
    note = "a body that is not `Clone` (hyper's `Incoming`, a `BoxBody`): wrap it in `stagger::ReplayBody`, which records it as it streams out, or buffer it (`http_body_util::Full<Bytes>`)",
    note = "a tonic client (`tonic::body::Body`, a `Channel`): use `RetryLayer::grpc` (stagger's feature `tonic`)",
    note = "for any other request type, use `RetryLayer::classify_with(policy, |result| ...)`"
)]
pub trait Judge<Req, Res, E>: Replay<Req> {
    /// Whether a call whose deadline passes after it received a response worth retrying ends with
    /// that response, intact: `true` for HTTP, the default. `GrpcReplay` says `false`: a gRPC call
    /// whose deadline passes ends with `DEADLINE_EXCEEDED` ([`response_for`](Self::response_for)),
    /// as gRPC's clients end it, unless its retries stopped first.
    const KEEPS_LAST_RESPONSE: bool = true;

    /// Judges one attempt's result. Whether the request can be sent again is not the judge's to say:
    /// the adapter knows whether it holds a copy, and tells the state machine itself.
    fn judge(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, Req, Self::Kept>,
        result: &Result<Res, E>,
    ) -> Attempt;

    /// Records what the retries did in the response the call ends with (for HTTP, in its
    /// extensions). Not called for a call answered with a success at its first attempt, whose
    /// response is left as it came ([`RetryInfo::FIRST_SUCCESS`]).
    fn report(response: &mut Res, info: RetryInfo);

    /// An answer's HTTP status, for its attempt's span (`http.response.status_code`); `None`, the
    /// default, for a protocol without one.
    fn status(&self, response: &Res) -> Option<http::StatusCode> {
        let _ = response;
        None
    }

    /// The response a call ends with instead of an error of stagger's own — a time limit that passed
    /// with no response in hand ([`Error::elapsed`]), a request not sent ([`Error::rejected`]) — for
    /// a protocol whose answers carry such an outcome themselves: `GrpcReplay` answers a gRPC call
    /// with the status a gRPC client gives it (`DEADLINE_EXCEEDED`, `UNAVAILABLE`), as its caller
    /// expects. Never asked about an error of the inner service, which the call ends with as it
    /// came. `None`, the default: the call ends with the error.
    fn response_for(&self, error: &Error<E>) -> Option<Res> {
        let _ = error;
        None
    }
}

/// A request whose body is being recorded for a retry (see [`Replay::start_recording`]): the request
/// without its body, and the recording.
pub struct Recorded<Req> {
    /// The request but for its body. A `ReplayBody`'s template holds, as its body, the slot where the
    /// body comes back if it is dropped unread.
    template: Req,
    recorder: Arc<Recorder>,
    /// Where a reqwest body comes back if it is dropped unread: a `reqwest::Body` has no room for the
    /// slot, as a `ReplayBody` has.
    #[cfg(all(
        feature = "reqwest",
        not(all(target_arch = "wasm32", target_os = "unknown"))
    ))]
    unread: Option<Arc<Unread<reqwest::Body>>>,
    /// Where a tonic body comes back if it is dropped unread: a `tonic::body::Body` has no room for
    /// the slot either.
    #[cfg(feature = "tonic")]
    tonic_unread: Option<Arc<body::Unread<tonic::body::Body>>>,
}

impl<Req> Recorded<Req> {
    /// The request as sent, but for its body: what judging and logging read.
    pub fn request(&self) -> &Req {
        &self.template
    }

    /// Whether a retry can be made: the body ended within the limit, or it came back unread.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn replayable(&self) -> bool {
        self.recorder.is_replayable()
    }

    /// Whether the recording holds the whole body, which a retry sends rather than the body itself.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn is_whole(&self) -> bool {
        self.recorder.is_whole()
    }

    /// The most the recording keeps: the policy's `replay_buffer`.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) fn limit(&self) -> usize {
        self.recorder.limit()
    }
}

impl<Req> fmt::Debug for Recorded<Req> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorded")
            .field("recorder", &self.recorder)
            .finish_non_exhaustive()
    }
}
