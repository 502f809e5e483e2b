//! [`Fault`]: what the chaos layer does to a call in place of sending it, or before.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::classify::GrpcCode;

/// What a call the chaos layer picks gets: an answer, an error, a hang, or latency before the real
/// call; any of them after a delay of its own ([`Fault::after`]).
///
/// Each error is the kind the default classifier reads the real fault as, so that the retries above
/// treat it as they would the real one:
///
/// | fault | what the call gets | the default classifier |
/// |---|---|---|
/// | [`status`](Fault::status), [`retry_after`](Fault::retry_after), [`answer`](Fault::answer) | that response, the real upstream not called | by its status and headers, as a server's |
/// | [`grpc`](Fault::grpc), [`grpc_pushback`](Fault::grpc_pushback) | a Trailers-Only gRPC answer of that code (and `grpc-retry-pushback-ms`) | by gRPC's rules |
/// | [`refused`](Fault::refused) | an `io::Error` of kind `ConnectionRefused` | `RetrySafe(Connect)`, as a port nobody listens on |
/// | [`reset`](Fault::reset) | an `io::Error` of kind `ConnectionReset` | `RetryIfIdempotent(ConnectionClosed)`, as a server that closes the connection before answering |
/// | [`io_error`](Fault::io_error) | an `io::Error` of that kind | as that kind (`PermissionDenied`: fatal) |
/// | [`hang`](Fault::hang) | nothing, ever: only a time limit ends it | the attempt timeout's `RetryIfIdempotent(Timeout)`, as a server that accepts and never answers |
/// | [`latency`](Fault::latency) | the real call, that much later | as the real answer |
///
/// Through the tower layer an error is a `tower::BoxError` holding the `io::Error` (for a gRPC
/// request, a refusal is wrapped in a `tonic::ConnectError` as a `Channel`'s connector wraps its own,
/// so that a tonic client sees `UNAVAILABLE` for it and `UNKNOWN` for a reset, as it does for the
/// real ones); through the middleware, a `reqwest_middleware::Error::Middleware` holding it.
/// Either way [`InjectedFault::find`](crate::chaos::InjectedFault::find) tells it from a real one.
///
/// ```
/// use std::time::Duration;
/// use http::StatusCode;
/// use stagger::chaos::Fault;
/// use stagger::classify::GrpcCode;
///
/// let throttled = Fault::retry_after(StatusCode::TOO_MANY_REQUESTS, Duration::from_secs(2));
/// let slow_503 = Fault::status(StatusCode::SERVICE_UNAVAILABLE).after(Duration::from_secs(3));
/// let pushed_back = Fault::grpc_pushback(GrpcCode::Unavailable, Duration::from_millis(300));
/// assert_eq!(throttled.to_string(), "429 Too Many Requests");
/// assert_eq!(slow_503.to_string(), "503 Service Unavailable after 3s");
/// assert_eq!(pushed_back.to_string(), "gRPC UNAVAILABLE");
/// assert_eq!(Fault::latency(Duration::from_millis(250)).to_string(), "latency of 250ms");
/// ```
#[derive(Debug, Clone)]
pub struct Fault {
    delay: Duration,
    pub(crate) action: Action,
}

/// What happens once the fault's delay has passed.
#[derive(Debug, Clone)]
pub(crate) enum Action {
    /// The real call: the fault was latency.
    Send,
    /// An answer in place of the upstream's.
    Answer(Arc<Answer>),
    /// An error in place of the upstream's answer.
    Error(io::ErrorKind),
    /// Nothing, ever.
    Hang,
}

/// A response the chaos layer answers with: its head and its body, copied for each call.
#[derive(Debug)]
pub(crate) struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    /// gRPC's name of its `grpc-status`, for its description.
    grpc: Option<GrpcCode>,
}

impl Answer {
    /// A fresh response of this answer.
    pub(crate) fn response(&self) -> http::Response<Bytes> {
        let mut response = http::Response::new(self.body.clone());
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers.clone();
        response
    }
}

impl Fault {
    const fn now(action: Action) -> Self {
        Self {
            delay: Duration::ZERO,
            action,
        }
    }

    fn answered(status: StatusCode, headers: HeaderMap, grpc: Option<GrpcCode>) -> Self {
        Self::now(Action::Answer(Arc::new(Answer {
            status,
            headers,
            body: Bytes::new(),
            grpc,
        })))
    }

    /// An answer with `status`, no headers and an empty body.
    ///
    /// ```
    /// use http::StatusCode;
    /// use stagger::chaos::Fault;
    ///
    /// let unavailable = Fault::status(StatusCode::SERVICE_UNAVAILABLE);
    /// assert_eq!(unavailable.to_string(), "503 Service Unavailable");
    /// ```
    pub fn status(status: StatusCode) -> Self {
        Self::answered(status, HeaderMap::new(), None)
    }

    /// An answer with `status` and `Retry-After: delay`, in whole seconds as the header carries them
    /// (a fraction of a second rounds up: 1.2 s is `2`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use http::StatusCode;
    /// use stagger::chaos::Fault;
    ///
    /// let throttled = Fault::retry_after(StatusCode::TOO_MANY_REQUESTS, Duration::from_millis(1200));
    /// assert_eq!(throttled.to_string(), "429 Too Many Requests");
    /// ```
    pub fn retry_after(status: StatusCode, delay: Duration) -> Self {
        let seconds = delay.as_secs() + u64::from(delay.subsec_nanos() > 0);
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
        Self::answered(status, headers, None)
    }

    /// An answer of your own: its status, headers and body (its extensions and version are not kept).
    ///
    /// ```
    /// use stagger::chaos::Fault;
    ///
    /// let limited = http::Response::builder()
    ///     .status(429)
    ///     .header("x-ratelimit-remaining", "0")
    ///     .header("x-ratelimit-reset", "30")
    ///     .body(r#"{"error":"slow down"}"#)
    ///     .unwrap();
    /// let fault = Fault::answer(limited);
    /// assert_eq!(fault.to_string(), "429 Too Many Requests");
    /// ```
    pub fn answer<B: Into<Bytes>>(response: http::Response<B>) -> Self {
        let (parts, body) = response.into_parts();
        Self::now(Action::Answer(Arc::new(Answer {
            status: parts.status,
            headers: parts.headers,
            body: body.into(),
            grpc: None,
        })))
    }

    /// A gRPC answer with status `code`, Trailers-Only (the status in the head, no message), as a
    /// gRPC server or proxy sends a failure.
    ///
    /// ```
    /// use stagger::chaos::Fault;
    /// use stagger::classify::GrpcCode;
    ///
    /// assert_eq!(Fault::grpc(GrpcCode::Unavailable).to_string(), "gRPC UNAVAILABLE");
    /// ```
    pub fn grpc(code: GrpcCode) -> Self {
        Self::answered(StatusCode::OK, grpc_head(code), Some(code))
    }

    /// A gRPC answer with status `code` that asks for a retry no sooner than `pushback`
    /// (`grpc-retry-pushback-ms`, in milliseconds), as gRPC's retry design (A6) has servers do.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::chaos::Fault;
    /// use stagger::classify::GrpcCode;
    ///
    /// let pushed = Fault::grpc_pushback(GrpcCode::ResourceExhausted, Duration::from_millis(300));
    /// assert_eq!(pushed.to_string(), "gRPC RESOURCE_EXHAUSTED");
    /// ```
    pub fn grpc_pushback(code: GrpcCode, pushback: Duration) -> Self {
        let mut headers = grpc_head(code);
        let millis = u64::try_from(pushback.as_millis()).unwrap_or(u64::MAX);
        headers.insert("grpc-retry-pushback-ms", HeaderValue::from(millis));
        Self::answered(StatusCode::OK, headers, Some(code))
    }

    /// A connection refused: nothing reached the server, safe to retry for any method.
    pub const fn refused() -> Self {
        Self::now(Action::Error(io::ErrorKind::ConnectionRefused))
    }

    /// A connection reset before the response: the server may have acted, retried only for an
    /// idempotent request.
    pub const fn reset() -> Self {
        Self::now(Action::Error(io::ErrorKind::ConnectionReset))
    }

    /// An `io::Error` of `kind`, classified as that kind is: `TimedOut` a timeout, `NotConnected` a
    /// closed connection, `PermissionDenied` fatal.
    ///
    /// ```
    /// use std::io::ErrorKind;
    /// use stagger::chaos::Fault;
    ///
    /// assert_eq!(Fault::io_error(ErrorKind::TimedOut).to_string(), "timed out");
    /// ```
    pub const fn io_error(kind: io::ErrorKind) -> Self {
        Self::now(Action::Error(kind))
    }

    /// No answer, ever: the call waits until a time limit above ends it (the policy's
    /// `attempt_timeout` or deadline). Without one, it waits forever.
    pub const fn hang() -> Self {
        Self::now(Action::Hang)
    }

    /// The real call, `delay` late: a slow network or a slow upstream.
    pub const fn latency(delay: Duration) -> Self {
        Self {
            delay,
            action: Action::Send,
        }
    }

    /// The same fault, `delay` later: a `503` that takes 3 s to come, a refusal after a slow
    /// connect. Latency's delay grows by `delay`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::chaos::Fault;
    ///
    /// let slow = Fault::reset().after(Duration::from_secs(2));
    /// assert_eq!(slow.delay(), Duration::from_secs(2));
    /// ```
    pub const fn after(mut self, delay: Duration) -> Self {
        self.delay = self.delay.saturating_add(delay);
        self
    }

    /// How long the fault waits before it acts (latency's own delay included).
    pub const fn delay(&self) -> Duration {
        self.delay
    }

    /// What the fault is, as a token for events: `answer`, `error`, `hang` or `latency`.
    pub(crate) const fn kind(&self) -> &'static str {
        match self.action {
            Action::Send => "latency",
            Action::Answer(_) => "answer",
            Action::Error(_) => "error",
            Action::Hang => "hang",
        }
    }
}

fn grpc_head(code: GrpcCode) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(u16::from(code.code())));
    headers.insert(
        "grpc-message",
        HeaderValue::from_static("injected by stagger's chaos layer"),
    );
    headers
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.action {
            Action::Send => return write!(f, "latency of {:?}", self.delay),
            Action::Answer(answer) => match answer.grpc {
                Some(code) => write!(f, "gRPC {}", code.as_str())?,
                None => write!(f, "{}", answer.status)?,
            },
            Action::Error(kind) => write!(f, "{kind}")?,
            Action::Hang => f.write_str("hang")?,
        }
        if !self.delay.is_zero() {
            write!(f, " after {:?}", self.delay)?;
        }
        Ok(())
    }
}
