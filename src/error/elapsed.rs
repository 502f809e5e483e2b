//! [`Elapsed`]: a time limit of the policy ended the call.

use std::fmt;
use std::time::Duration;

use crate::attempt::{RetryInfo, TimeLimit};
use crate::classify::AsError;

/// A time limit of the policy ended the call: the deadline (`max_elapsed`) passed with no response to
/// hand back, or the last attempt ran past `attempt_timeout`.
///
/// The attempt in flight was dropped, which cancels it (a client closes its connection or resets its
/// stream). Inside [`Error`](crate::Error), or, from [`RetryMiddleware`], as the
/// `reqwest_middleware::Error::Middleware` of the result. The default classifier counts it as a timeout,
/// so a stagger layer outside another one retries it like any timeout.
///
/// ```
/// use std::time::Duration;
/// use stagger::{Outcome, RetryPolicy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let hangs = || std::future::pending::<std::io::Result<()>>();
///
/// // Each attempt may take 1 s; the only one allowed takes longer.
/// let policy = RetryPolicy::builder()
///     .attempt_timeout(Duration::from_secs(1))
///     .max_retries(0)
///     .build()
///     .unwrap();
/// let error = stagger::retry(&policy, hangs, |_| Outcome::Success).await.unwrap_err();
/// let elapsed = error.elapsed().unwrap();
/// assert!(elapsed.is_attempt_timeout());
/// assert_eq!(elapsed.limit(), Duration::from_secs(1));
///
/// // The whole call may take 5 s, and the attempt has no limit of its own.
/// let policy = RetryPolicy::builder()
///     .max_elapsed(Duration::from_secs(5))
///     .attempt_timeout(None)
///     .build()
///     .unwrap();
/// let error = stagger::retry(&policy, hangs, |_| Outcome::Success).await.unwrap_err();
/// let elapsed = error.elapsed().unwrap();
/// assert!(elapsed.is_deadline());
/// assert_eq!((elapsed.limit(), elapsed.info().attempts()), (Duration::from_secs(5), 1));
/// # }
/// ```
#[cfg_attr(
    feature = "reqwest-middleware",
    doc = "[`RetryMiddleware`]: crate::RetryMiddleware"
)]
#[cfg_attr(
    not(feature = "reqwest-middleware"),
    doc = "[`RetryMiddleware`]: crate#features"
)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Elapsed {
    limit: TimeLimit,
    after: Duration,
    info: RetryInfo,
}

impl Elapsed {
    pub(crate) const fn deadline(max_elapsed: Duration, info: RetryInfo) -> Self {
        Self {
            limit: TimeLimit::Deadline,
            after: max_elapsed,
            info,
        }
    }

    pub(crate) const fn attempt(attempt_timeout: Duration, info: RetryInfo) -> Self {
        Self {
            limit: TimeLimit::Attempt,
            after: attempt_timeout,
            info,
        }
    }

    /// Whether the deadline (`max_elapsed`) passed.
    pub const fn is_deadline(&self) -> bool {
        matches!(self.limit, TimeLimit::Deadline)
    }

    /// Whether the last attempt ran past `attempt_timeout`.
    pub const fn is_attempt_timeout(&self) -> bool {
        matches!(self.limit, TimeLimit::Attempt)
    }

    /// The limit that passed: the policy's `max_elapsed` or its `attempt_timeout`.
    pub const fn limit(&self) -> Duration {
        self.after
    }

    /// What the retries did up to then.
    pub fn info(&self) -> RetryInfo {
        self.info.clone()
    }
}

impl fmt::Display for Elapsed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let attempts = self.info.attempts();
        let plural = if attempts == 1 { "" } else { "s" };
        match self.limit {
            TimeLimit::Deadline => write!(
                f,
                "deadline of {:?} passed after {attempts} attempt{plural}",
                self.after
            ),
            TimeLimit::Attempt => write!(f, "attempt {attempts} timed out after {:?}", self.after),
        }
    }
}

impl std::error::Error for Elapsed {}

impl AsError for Elapsed {
    fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        self
    }
}
