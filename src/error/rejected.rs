//! [`Rejected`]: a request the policy did not send at all.

use std::fmt;
use std::time::Duration;

use crate::attempt::{RetryInfo, StopReason};
use crate::classify::AsError;

/// The policy did not send the request: its host asked for a pause that outlasts what the policy
/// waits for, the breaker found the host down, or adaptive throttling rejected it locally.
///
/// With [`adaptive_throttle`](crate::RetryPolicyBuilder::adaptive_throttle) on, a request to a
/// backend that has been refusing most of what the client sent is rejected locally with the
/// probability of Google SRE's client-side throttling ([`StopReason::Throttled`]).
///
/// With [`host_cooldown`](crate::RetryPolicyBuilder::host_cooldown) on, a request to a host that is
/// cooling down waits for the pause to end, unless the pause outlasts `max_retry_after` or the time
/// left before the deadline: then the call fails at once, before anything is sent, with this error
/// ([`StopReason::Cooldown`] in its [`RetryInfo`], no attempt made). Inside [`Error`](crate::Error)
/// from the tower layer, or as the `reqwest_middleware::Error::Middleware` of the result from
/// [`RetryMiddleware`]. The default classifier counts it as fatal, so a
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
#[cfg_attr(
    feature = "reqwest-middleware",
    doc = "[`RetryMiddleware`]: crate::RetryMiddleware"
)]
#[cfg_attr(
    not(feature = "reqwest-middleware"),
    doc = "[`RetryMiddleware`]: crate#features"
)]
///
/// With a [`Breaker`](crate::Breaker), a request to a host found down fails with this error when it
/// is not sent ([`StopReason::HostDown`]): [`host`](Self::host) names the host,
/// [`route`](Self::route) the path when only that path of it is down (its gateway failures), and
/// [`pause`](Self::pause) is how long until its next probe.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    pause: Duration,
    cause: Cause,
    info: RetryInfo,
}

/// What the pause outlasts, or why there is none.
#[derive(Debug, Clone, PartialEq)]
enum Cause {
    /// The host is down, or one route of it: its name, the route's path, and whether it is probed
    /// (`false`: marked down by hand).
    HostDown {
        host: Box<str>,
        route: Option<Box<str>>,
        probed: bool,
    },
    /// The policy's `max_retry_after`.
    MaxRetryAfter(Duration),
    /// The time left before the deadline.
    Deadline(Duration),
    /// Adaptive throttling, which rejected the request with this probability.
    Throttled(f64),
}

impl Rejected {
    /// A pause of `pause` more, longer than `max_retry_after`.
    pub(crate) const fn over_max_retry_after(
        pause: Duration,
        max_retry_after: Duration,
        info: RetryInfo,
    ) -> Self {
        Self {
            pause,
            cause: Cause::MaxRetryAfter(max_retry_after),
            info,
        }
    }

    /// A pause of `pause` more, which would end past the deadline, `left` away.
    pub(crate) const fn past_deadline(pause: Duration, left: Duration, info: RetryInfo) -> Self {
        Self {
            pause,
            cause: Cause::Deadline(left),
            info,
        }
    }

    /// The host named `host` is down; its next probe is `next_probe` away (`None`: it was marked down
    /// by hand, and is not probed).
    pub(crate) fn host_down(
        host: Box<str>,
        route: Option<Box<str>>,
        next_probe: Option<Duration>,
        info: RetryInfo,
    ) -> Self {
        Self {
            pause: next_probe.unwrap_or_default(),
            cause: Cause::HostDown {
                host,
                route,
                probed: next_probe.is_some(),
            },
            info,
        }
    }

    /// Adaptive throttling rejected the request, with probability `p`.
    pub(crate) const fn throttled(p: f64, info: RetryInfo) -> Self {
        Self {
            pause: Duration::ZERO,
            cause: Cause::Throttled(p),
            info,
        }
    }

    /// How much longer the host asked every request to wait; for a host found down, how long until
    /// its next probe (zero for one marked down by hand); zero for a request adaptive throttling
    /// rejected.
    pub const fn pause(&self) -> Duration {
        self.pause
    }

    /// Why the request was not sent: [`StopReason::Cooldown`], [`StopReason::HostDown`] or
    /// [`StopReason::Throttled`].
    pub const fn reason(&self) -> StopReason {
        match self.cause {
            Cause::Throttled(_) => StopReason::Throttled,
            Cause::HostDown { .. } => StopReason::HostDown,
            Cause::MaxRetryAfter(_) | Cause::Deadline(_) => StopReason::Cooldown,
        }
    }

    /// The host found down, as requests name it (`name` or `name:port`), for
    /// [`StopReason::HostDown`].
    pub fn host(&self) -> Option<&str> {
        match &self.cause {
            Cause::HostDown { host, .. } => Some(host),
            _ => None,
        }
    }

    /// The path of the host that is down, when it is one route of the host, found down by the
    /// gateway failures it answered (`502`, `503`, `504`, gRPC `UNAVAILABLE`) while its other paths
    /// are sent as ever; `None` for a host down as a whole, or another rejection.
    pub fn route(&self) -> Option<&str> {
        match &self.cause {
            Cause::HostDown { route, .. } => route.as_deref(),
            _ => None,
        }
    }

    /// The probability with which adaptive throttling rejected the request, if it did.
    pub const fn throttle_probability(&self) -> Option<f64> {
        match self.cause {
            Cause::Throttled(p) => Some(p),
            _ => None,
        }
    }

    /// What the retries did: no attempt, and why.
    pub fn info(&self) -> RetryInfo {
        self.info.clone()
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.cause {
            Cause::Throttled(p) => {
                return write!(
                    f,
                    "not sent: throttled locally, the backend refused most recent requests (p = {p:.2})"
                );
            }
            Cause::HostDown {
                host,
                route: None,
                probed: true,
            } if host.is_empty() => {
                return write!(
                    f,
                    "not sent: the host is down, next probe in {:?}",
                    self.pause
                );
            }
            Cause::HostDown {
                host,
                route: Some(route),
                probed: true,
            } if host.is_empty() => {
                return write!(
                    f,
                    "not sent: {route} is down (its gateway failures), next probe in {:?}",
                    self.pause
                );
            }
            Cause::HostDown {
                host,
                route: None,
                probed: true,
            } => {
                return write!(
                    f,
                    "not sent: host {host} is down, next probe in {:?}",
                    self.pause
                );
            }
            Cause::HostDown {
                host,
                route: Some(route),
                probed: true,
            } => {
                return write!(
                    f,
                    "not sent: {route} on host {host} is down (its gateway failures), next probe in {:?}",
                    self.pause
                );
            }
            Cause::HostDown {
                host,
                probed: false,
                ..
            } => return write!(f, "not sent: host {host} was marked down"),
            _ => {}
        }
        write!(
            f,
            "not sent: the host asked for a pause of {:?} more, ",
            self.pause
        )?;
        match self.cause {
            Cause::MaxRetryAfter(max) => write!(f, "longer than max_retry_after ({max:?})"),
            Cause::Deadline(left) => write!(f, "past the deadline ({left:?} left)"),
            Cause::Throttled(_) | Cause::HostDown { .. } => Ok(()),
        }
    }
}

impl std::error::Error for Rejected {}

impl AsError for Rejected {
    fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        self
    }
}
