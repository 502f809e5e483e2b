//! Every public error: an invalid configuration ([`ConfigError`]), a call that ended without a
//! response ([`Error`]), a time limit that ended it ([`Elapsed`]), a request not sent ([`Rejected`]),
//! and the mark of a fault the chaos layer injected (`InjectedFault`, feature `chaos`).

pub(crate) mod config;
mod elapsed;
#[cfg(feature = "chaos")]
mod injected;
#[cfg(feature = "serde")]
mod policy_config;
mod rejected;
#[cfg(feature = "tonic")]
mod service_config;

pub use config::ConfigError;
pub use elapsed::Elapsed;
#[cfg(feature = "chaos")]
pub use injected::InjectedFault;
#[cfg(feature = "serde")]
pub use policy_config::PolicyConfigError;
pub use rejected::Rejected;
#[cfg(feature = "tonic")]
pub use service_config::{FieldProblem, ServiceConfigError};

use std::fmt;
use std::time::Duration;

use crate::attempt::{RetryInfo, StopReason};
use crate::classify::AsError;

/// How a call ended when it ended without a response: the inner service's error, or a time limit.
///
/// Returned by the tower [`Retry`](crate::tower::Retry) service, by [`retry()`](crate::retry()) and,
/// when a task reaches its restart limit, by [`supervise()`](crate::supervise()); the
/// `reqwest-middleware` adapter returns `reqwest_middleware::Error` as it came from the chain and gives
/// the [`RetryInfo`] through the request's extensions instead (see [`RetryMiddleware`]).
///
/// Whatever the case, [`info`](Error::info) tells how many attempts were made, how long was slept and why
/// the retries stopped, and the inner error is one call away, its type intact:
///
/// ```
/// # fn log(error: stagger::Error<std::io::Error>) {
/// let info = error.info();
/// match error.inner() {
///     Some(io) => eprintln!("{:?} after {} attempts ({:?})", io.kind(), info.attempts(), info.stop_reason()),
///     None => eprintln!("{error}"), // "deadline of 30s passed after 2 attempts", say
/// }
/// # }
/// ```
///
/// As an [`Error`](std::error::Error), it displays why the retries stopped and gives the inner error as
/// its [`source`](std::error::Error::source), so a reporter such as `anyhow`'s `{:#}` prints both:
/// `gave up after 4 attempts (max retries reached): connection refused`. A time limit or a request not
/// sent has no source: its message is the whole story (`attempt 2 timed out after 10s`). Its `Debug`,
/// which a `main` that returns the error prints, tells all of it, what the retries did included:
///
/// ```
/// # use std::io;
/// # use std::time::Duration;
/// # use stagger::{Backoff, Outcome, Reason, RetryPolicy};
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let policy = RetryPolicy::builder().backoff(Backoff::fixed(Duration::from_millis(10))).build().unwrap();
/// let refused = || async { Err::<(), _>(io::Error::from(io::ErrorKind::ConnectionRefused)) };
/// let error = stagger::retry(&policy, refused, |_| Outcome::RetrySafe(Reason::Connect))
///     .await
///     .unwrap_err();
/// assert_eq!(error.to_string(), "gave up after 11 attempts (max retries reached)");
/// assert_eq!(
///     format!("{error:?}"),
///     "gave up after 11 attempts (max retries reached, 100ms asleep): connection refused"
/// );
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
pub struct Error<E> {
    repr: Repr<E>,
}

enum Repr<E> {
    Inner(E, RetryInfo),
    Elapsed(Elapsed),
    /// A retry was due and the request could not be copied for it; only a custom `Replay` that breaks
    /// its contract gets here.
    Unsent(RetryInfo),
    /// The request was not sent at all.
    Rejected(Rejected),
}

impl<E> Error<E> {
    pub(crate) const fn from_inner(error: E, info: RetryInfo) -> Self {
        Self {
            repr: Repr::Inner(error, info),
        }
    }

    pub(crate) const fn from_elapsed(elapsed: Elapsed) -> Self {
        Self {
            repr: Repr::Elapsed(elapsed),
        }
    }

    pub(crate) const fn from_rejected(rejected: Rejected) -> Self {
        Self {
            repr: Repr::Rejected(rejected),
        }
    }

    pub(crate) const fn unsent(info: RetryInfo) -> Self {
        Self {
            repr: Repr::Unsent(info),
        }
    }

    /// What the retries did: attempts, time slept, and why they stopped.
    ///
    /// ```
    /// # use std::io;
    /// # use std::time::Duration;
    /// # use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let backoff = Backoff::fixed(Duration::from_millis(10));
    /// let policy = RetryPolicy::builder().backoff(backoff).build().unwrap();
    /// let refused = || async { Err::<(), _>(io::Error::from(io::ErrorKind::ConnectionRefused)) };
    /// let error = stagger::retry(&policy, refused, |_| Outcome::RetrySafe(Reason::Connect))
    ///     .await
    ///     .unwrap_err();
    /// let info = error.info();
    /// assert_eq!((info.attempts(), info.slept()), (11, Duration::from_millis(100)));
    /// assert_eq!(info.stop_reason(), Some(StopReason::MaxRetries));
    /// # }
    /// ```
    pub fn info(&self) -> RetryInfo {
        match &self.repr {
            Repr::Inner(_, info) | Repr::Unsent(info) => info.clone(),
            Repr::Elapsed(elapsed) => elapsed.info(),
            Repr::Rejected(rejected) => rejected.info(),
        }
    }

    /// The last attempt's own error, as the inner service returned it; `None` when a time limit ended
    /// the call.
    ///
    /// ```
    /// # use std::io;
    /// # use std::time::Duration;
    /// # use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// # let policy = RetryPolicy::builder().backoff(Backoff::fixed(Duration::from_millis(10))).build().unwrap();
    /// let refused = || async { Err::<(), _>(io::Error::from(io::ErrorKind::ConnectionRefused)) };
    /// let error = stagger::retry(&policy, refused, |_| Outcome::RetrySafe(Reason::Connect))
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!(error.inner().map(io::Error::kind), Some(io::ErrorKind::ConnectionRefused));
    ///
    /// let hangs = || std::future::pending::<io::Result<()>>();
    /// let error = stagger::retry(&policy, hangs, |_| Outcome::Success).await.unwrap_err();
    /// assert!(error.inner().is_none()); // a time limit ended the call: no error of its own
    /// # }
    /// ```
    pub const fn inner(&self) -> Option<&E> {
        match &self.repr {
            Repr::Inner(error, _) => Some(error),
            Repr::Elapsed(_) | Repr::Unsent(_) | Repr::Rejected(_) => None,
        }
    }

    /// The last attempt's own error, by value; `None` when a time limit ended the call.
    ///
    /// Back to the caller's own error type, with a time limit turned into one:
    ///
    /// ```
    /// use std::io;
    /// use stagger::{Outcome, Reason, RetryPolicy};
    ///
    /// async fn connect(policy: &RetryPolicy) -> io::Result<()> {
    ///     let refused = || async { Err::<(), _>(io::Error::from(io::ErrorKind::ConnectionRefused)) };
    ///     stagger::retry(policy, refused, |_| Outcome::RetrySafe(Reason::Connect))
    ///         .await
    ///         .map_err(|error| error.into_inner().unwrap_or_else(|| io::ErrorKind::TimedOut.into()))
    /// }
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let error = connect(&RetryPolicy::default()).await.unwrap_err();
    /// assert_eq!(error.kind(), io::ErrorKind::ConnectionRefused);
    /// # }
    /// ```
    pub fn into_inner(self) -> Option<E> {
        self.split().ok()
    }

    /// The inner error, or this error without one.
    pub(crate) fn split(self) -> Result<E, Error<std::convert::Infallible>> {
        match self.repr {
            Repr::Inner(error, _) => Ok(error),
            Repr::Elapsed(elapsed) => Err(Error::from_elapsed(elapsed)),
            Repr::Unsent(info) => Err(Error::unsent(info)),
            Repr::Rejected(rejected) => Err(Error::from_rejected(rejected)),
        }
    }

    /// The time limit that ended the call, if one did.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let policy = RetryPolicy::builder()
    ///     .max_elapsed(Duration::from_secs(5))
    ///     .attempt_timeout(None)
    ///     .build()
    ///     .unwrap();
    /// let hangs = || std::future::pending::<std::io::Result<()>>();
    /// let error = stagger::retry(&policy, hangs, |_| Outcome::Success).await.unwrap_err();
    /// let elapsed = error.elapsed().unwrap();
    /// assert!(elapsed.is_deadline());
    /// assert_eq!(elapsed.limit(), Duration::from_secs(5));
    /// # }
    /// ```
    pub const fn elapsed(&self) -> Option<&Elapsed> {
        match &self.repr {
            Repr::Elapsed(elapsed) => Some(elapsed),
            Repr::Inner(..) | Repr::Unsent(_) | Repr::Rejected(_) => None,
        }
    }

    /// Whether the deadline (`max_elapsed`) passed with no response to hand back.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let policy = RetryPolicy::builder()
    ///     .max_elapsed(Duration::from_secs(5))
    ///     .attempt_timeout(None)
    ///     .build()
    ///     .unwrap();
    /// let hangs = || std::future::pending::<std::io::Result<()>>();
    /// let error = stagger::retry(&policy, hangs, |_| Outcome::Success).await.unwrap_err();
    /// assert!(error.is_deadline());
    /// assert_eq!(error.to_string(), "deadline of 5s passed after 1 attempt");
    /// # }
    /// ```
    pub const fn is_deadline(&self) -> bool {
        matches!(&self.repr, Repr::Elapsed(e) if e.is_deadline())
    }

    /// Whether the last attempt exceeded `attempt_timeout`.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use stagger::{Backoff, Outcome, Reason, RetryPolicy, StopReason};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// let policy = RetryPolicy::builder()
    ///     .attempt_timeout(Duration::from_secs(1))
    ///     .max_retries(1)
    ///     .budget(None)
    ///     .build()
    ///     .unwrap();
    /// let hangs = || std::future::pending::<std::io::Result<()>>();
    /// let error = stagger::retry(&policy, hangs, |_| Outcome::Success).await.unwrap_err();
    /// assert!(error.is_attempt_timeout()); // the second attempt too
    /// assert_eq!(error.to_string(), "attempt 2 timed out after 1s");
    /// # }
    /// ```
    pub const fn is_attempt_timeout(&self) -> bool {
        matches!(&self.repr, Repr::Elapsed(e) if e.is_attempt_timeout())
    }

    /// Why the request was not sent at all, if it was not: its host asked for a pause longer than the
    /// policy waits for, or adaptive throttling rejected it (see [`Rejected`], whose example gets one).
    ///
    /// ```
    /// # fn handle(error: stagger::Error<std::io::Error>) {
    /// if let Some(rejected) = error.rejected() {
    ///     // Nothing reached the server: safe to send later, or elsewhere.
    ///     eprintln!("not sent ({}), the host asked for {:?} more", rejected.reason(), rejected.pause());
    /// }
    /// # }
    /// ```
    pub const fn rejected(&self) -> Option<&Rejected> {
        match &self.repr {
            Repr::Rejected(rejected) => Some(rejected),
            Repr::Inner(..) | Repr::Elapsed(_) | Repr::Unsent(_) => None,
        }
    }
}

/// What a program that returns the error from `main` prints, and `{:?}` shows: what [`Display`]
/// says, what the retries did, and the inner error's message with its causes, as `anyhow` reports an
/// error:
///
/// ```text
/// gave up after 11 attempts (max retries reached, 1.032s asleep): Connection refused (os error 111)
/// ```
///
/// The inner error's messages are read for the error types the classifier reads (`std::io::Error`,
/// reqwest's, hyper's and h2's errors, boxed errors: see [`AsError`]); any other inner error is shown
/// by its own `Debug`. `{:#?}` shows the fields instead.
///
/// [`Display`]: fmt::Display
impl<E: fmt::Debug + 'static> fmt::Debug for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return match &self.repr {
                Repr::Inner(error, info) => f
                    .debug_struct("Error")
                    .field("inner", error)
                    .field("info", info)
                    .finish(),
                Repr::Elapsed(elapsed) => f.debug_tuple("Error").field(elapsed).finish(),
                Repr::Unsent(info) => f.debug_struct("Error").field("info", info).finish(),
                Repr::Rejected(rejected) => f.debug_tuple("Error").field(rejected).finish(),
            };
        }
        match &self.repr {
            Repr::Inner(error, info) => {
                gave_up(f, info)?;
                write!(f, "{}: ", Details(info, None))?;
                match crate::classify::known_error(error) {
                    Some(error) => {
                        write!(f, "{error}")?;
                        let mut source = error.source();
                        while let Some(cause) = source {
                            write!(f, ": {cause}")?;
                            source = cause.source();
                        }
                        Ok(())
                    }
                    None => write!(f, "{error:?}"),
                }
            }
            Repr::Unsent(info) => {
                gave_up(f, info)?;
                write!(f, "{}", Details(info, None))
            }
            // The limit's message says which; the stop reason is worth adding when it is not that.
            Repr::Elapsed(elapsed) => {
                let said = Some(StopReason::Deadline).filter(|_| elapsed.is_deadline());
                write!(f, "{elapsed}{}", Details(&elapsed.info(), said))
            }
            Repr::Rejected(rejected) => {
                let info = rejected.info();
                write!(f, "{rejected}{}", Details(&info, Some(rejected.reason())))
            }
        }
    }
}

/// "gave up after 3 attempts", or "gave up after 1 attempt"; "gave up after 5 restarts" for a
/// supervised task, whose attempts are its runs.
fn gave_up(f: &mut fmt::Formatter<'_>, info: &RetryInfo) -> fmt::Result {
    let (count, what) = match info.stop_reason() {
        Some(StopReason::MaxRestarts) => (info.retries(), "restart"),
        _ => (info.attempts(), "attempt"),
    };
    let plural = if count == 1 { "" } else { "s" };
    write!(f, "gave up after {count} {what}{plural}")
}

/// What the retries did, in parentheses: the stop reason (unless it is the one already said), the
/// time slept, the time waited for the host's pause and the hedges, those that are not zero.
struct Details<'a>(&'a RetryInfo, Option<StopReason>);

impl fmt::Display for Details<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self(info, said) = self;
        let mut open = false;
        let mut part = |f: &mut fmt::Formatter<'_>, part: fmt::Arguments<'_>| {
            f.write_str(if open { ", " } else { " (" })?;
            open = true;
            f.write_fmt(part)
        };
        if let Some(stop) = info.stop_reason().filter(|stop| Some(*stop) != *said) {
            part(f, format_args!("{stop}"))?;
        }
        if !info.slept().is_zero() {
            part(f, format_args!("{:?} asleep", readable(info.slept())))?;
        }
        if !info.cooldown().is_zero() {
            let cooldown = readable(info.cooldown());
            part(f, format_args!("{cooldown:?} waiting for the host's pause"))?;
        }
        match info.hedges() {
            0 => {}
            1 => part(f, format_args!("1 hedge"))?,
            hedges => part(f, format_args!("{hedges} hedges"))?,
        }
        if open { f.write_str(")") } else { Ok(()) }
    }
}

/// `duration` to the millisecond, or to the microsecond under one: `1.032s`, not `1.032417893s`.
fn readable(duration: Duration) -> Duration {
    let unit = if duration < Duration::from_millis(1) {
        Duration::from_micros(1)
    } else {
        Duration::from_millis(1)
    };
    let units = duration.as_nanos() / unit.as_nanos();
    Duration::from_nanos(u64::try_from(units * unit.as_nanos()).unwrap_or(u64::MAX))
}

impl<E> fmt::Display for Error<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            Repr::Inner(_, info) | Repr::Unsent(info) => {
                gave_up(f, info)?;
                if let Some(reason) = info.stop_reason() {
                    write!(f, " ({reason})")?;
                }
                Ok(())
            }
            Repr::Elapsed(elapsed) => fmt::Display::fmt(elapsed, f),
            Repr::Rejected(rejected) => fmt::Display::fmt(rejected, f),
        }
    }
}

/// The inner error is the source; a time limit or a rejection is this error itself, whose message
/// says it all, and has none: a reporter that prints the chain prints each thing once.
impl<E> std::error::Error for Error<E>
where
    E: AsError + fmt::Debug + 'static,
{
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.repr {
            Repr::Inner(error, _) => Some(error.as_error()),
            Repr::Elapsed(_) | Repr::Rejected(_) | Repr::Unsent(_) => None,
        }
    }
}

impl<E> AsError for Error<E>
where
    E: AsError + fmt::Debug + 'static,
{
    fn as_error(&self) -> &(dyn std::error::Error + 'static) {
        self
    }
}
