//! [`Rejected`]: a request the policy did not send at all.

use std::fmt;
use std::time::Duration;

use crate::attempt::{RetryInfo, StopReason};
use crate::classify::AsError;

/// The policy did not send the request: its host asked for a pause that outlasts what the policy
/// waits for.
///
/// With [`host_cooldown`](crate::RetryPolicyBuilder::host_cooldown) on, a request to a host that is
/// cooling down waits for the pause to end, unless the pause outlasts `max_retry_after` or the time
/// left before the deadline: then the call fails at once, before anything is sent, with this error
/// ([`StopReason::Cooldown`] in its [`RetryInfo`], no attempt made). Inside [`Error`](crate::Error)
/// from the tower layer, or as the `reqwest_middleware::Error::Middleware` of the result from
/// [`RetryMiddleware`](crate::RetryMiddleware). The default classifier counts it as fatal, so a
/// stagger layer outside another one does not retry it.
///
/// ```
/// # #[cfg(feature = "tower")]
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use stagger::{RetryLayer, RetryPolicy, StopReason};
/// use tower::{Layer, ServiceExt, service_fn};
///
/// let policy = RetryPolicy::builder()
///     .host_cooldown(true)
///     .max_retry_after(Duration::from_secs(10))
///     .build()
///     .unwrap();
/// let server = service_fn(|_: http::Request<()>| async {
///     let response = http::Response::builder().status(429).header("retry-after", "60");
///     Ok::<_, std::convert::Infallible>(response.body(()).unwrap())
/// });
/// let client = RetryLayer::new(policy).layer(server);
/// let get = || http::Request::get("http://api.example/").body(()).unwrap();
///
/// // The 429 asks for a minute, longer than max_retry_after: returned as received...
/// let response = client.clone().oneshot(get()).await.unwrap();
/// assert_eq!(response.status(), 429);
/// // ...and the next request to the host is not sent at all.
/// let error = client.oneshot(get()).await.unwrap_err();
/// let rejected = error.rejected().unwrap();
/// assert_eq!(rejected.info().stop_reason(), Some(StopReason::Cooldown));
/// assert_eq!(rejected.info().attempts(), 0);
/// assert_eq!(rejected.pause(), Duration::from_secs(60));
/// assert_eq!(
///     error.to_string(),
///     "not sent: the host asked for a pause of 60s more, longer than max_retry_after (10s)"
/// );
/// # }
/// # #[cfg(not(feature = "tower"))]
/// # fn main() {}
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    pause: Duration,
    limit: Limit,
    info: RetryInfo,
}

/// What the pause outlasts.
#[cfg_attr(
    not(any(feature = "tower", feature = "reqwest-middleware")),
    allow(dead_code, reason = "only the adapters reject a request")
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Limit {
    /// The policy's `max_retry_after`.
    MaxRetryAfter(Duration),
    /// The time left before the deadline.
    Deadline(Duration),
}

impl Rejected {
    /// A pause of `pause` more, longer than `max_retry_after`.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) const fn over_max_retry_after(
        pause: Duration,
        max_retry_after: Duration,
        info: RetryInfo,
    ) -> Self {
        Self {
            pause,
            limit: Limit::MaxRetryAfter(max_retry_after),
            info,
        }
    }

    /// A pause of `pause` more, which would end past the deadline, `left` away.
    #[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
    pub(crate) const fn past_deadline(pause: Duration, left: Duration, info: RetryInfo) -> Self {
        Self {
            pause,
            limit: Limit::Deadline(left),
            info,
        }
    }

    /// How much longer the host asked every request to wait.
    pub const fn pause(&self) -> Duration {
        self.pause
    }

    /// Why the request was not sent: [`StopReason::Cooldown`].
    pub const fn reason(&self) -> StopReason {
        StopReason::Cooldown
    }

    /// What the retries did: no attempt, and why.
    pub const fn info(&self) -> RetryInfo {
        self.info
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not sent: the host asked for a pause of {:?} more, ",
            self.pause
        )?;
        match self.limit {
            Limit::MaxRetryAfter(max) => write!(f, "longer than max_retry_after ({max:?})"),
            Limit::Deadline(left) => write!(f, "past the deadline ({left:?} left)"),
        }
    }
}

impl std::error::Error for Rejected {}

impl AsError for Rejected {
    fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        self
    }
}
