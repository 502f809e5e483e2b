//! The breaker's settings: [`Breaker`], and what a request to a down host meets, [`WhenDown`].

use std::time::Duration;

use crate::engine::backoff::{Backoff, Jitter};
use crate::error::config::{MAX_BREAKER_FAILURES, MAX_BREAKER_HOLD};

/// Per-host failure detection: a host whose attempts keep failing without an answer is *down*, and
/// its requests are held for it or failed at once, while one probe at a time finds out when it is
/// back. Set with [`RetryPolicyBuilder::breaker`](crate::RetryPolicyBuilder::breaker).
///
/// - **Down**: [`failures`](Self::with_failures) attempts in a row to a host (5 by default), none more
///   than a minute after the one before, failed without an answer (refused, reset, timed out, a
///   name that does not resolve) or were answered `502`, `503` or `504` (gRPC: `UNAVAILABLE`). A
///   `503` that names a delay or says it is throttling is the host speaking, not failing; a `429`, a
///   `500` and any other answer say the host is up, and start the count over. Envoy's outlier
///   detection ejects after the same 5 consecutive gateway failures.
/// - **Probing**: while the host is down, nothing is sent to it but one request per
///   [`probe_backoff`](Self::with_probe_backoff) delay (exponential from 100 ms, capped at 1 s, equal
///   jitter: 0.5–1 s apart once capped): the first request that asks once the delay has passed goes,
///   and its answer says whether the host is back. A probe that hangs does not hold the next: one
///   goes per delay whatever the last did.
/// - **Up**: a probe answered. The requests held meanwhile are let go at the rate they arrived, oldest
///   first, beside new requests, which go at once: the host gets at most twice its usual load while
///   it catches up, never the whole backlog at once.
///
/// What a request meets while its host is down is [`WhenDown`]: held for it, up to a bound
/// ([`Breaker::hold`], the default, 10 s), or failed at once ([`Breaker::fail_fast`]). Either way it
/// ends with [`Rejected`](crate::Rejected) ([`StopReason::HostDown`](crate::StopReason::HostDown),
/// naming the host and the next probe) when it is not sent; a retry that would go to a down host is
/// not sent either, and the call ends with the answer it has.
///
/// ```
/// use std::time::Duration;
/// use stagger::{Breaker, RetryPolicy, WhenDown};
///
/// let policy = RetryPolicy::builder()
///     .breaker(Breaker::fail_fast().with_failures(3))
///     .build()?;
/// let breaker = policy.breaker().unwrap();
/// assert_eq!((breaker.failures(), breaker.when_down()), (3, WhenDown::FailFast));
/// assert_eq!(Breaker::default().when_down(), WhenDown::Hold(Duration::from_secs(10)));
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Breaker {
    failures: u32,
    probe_backoff: Backoff,
    when_down: WhenDown,
    route_scope: bool,
}

/// What a request to a down host meets.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenDown {
    /// It waits for the host, within its deadline, and goes when a probe finds the host back, its turn
    /// paced; once the host has been down this long, every request held is failed and new ones fail
    /// at once. A restart shorter than the bound is ridden out with no error; a dead host costs a
    /// caller at most the bound, then nothing.
    Hold(Duration),
    /// It fails at once, unsent.
    FailFast,
}

impl Breaker {
    /// Attempts in a row that fail before a host is down, by default.
    pub const DEFAULT_FAILURES: u32 = 5;
    /// How long requests wait for a down host, by default: the restarts the README's outage table
    /// measures (0.5 to 5 s) are ridden out, a 5 s one with room for the probe that finds the host
    /// back (a hold of 5 s failed 8 % of the calls that met it).
    pub const DEFAULT_HOLD: Duration = Duration::from_secs(10);
    /// The most attempts in a row [`with_failures`](Self::with_failures) accepts.
    pub const MAX_FAILURES: u32 = MAX_BREAKER_FAILURES;
    /// The longest [`Breaker::hold`] accepts: as long as a host's pause may hold it.
    pub const MAX_HOLD: Duration = MAX_BREAKER_HOLD;
    /// The probes' schedule, by default: exponential from 100 ms, capped at 1 s, equal jitter.
    pub const DEFAULT_PROBE_BACKOFF: Backoff = Backoff::exponential(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(1))
        .with_jitter(Jitter::Equal);

    /// Requests to a down host wait for it, up to `bound` from when it went down (see
    /// [`WhenDown::Hold`]). Zero is refused by `build()`: use [`fail_fast`](Self::fail_fast).
    pub const fn hold(bound: Duration) -> Self {
        Self {
            failures: Self::DEFAULT_FAILURES,
            probe_backoff: Self::DEFAULT_PROBE_BACKOFF,
            when_down: WhenDown::Hold(bound),
            route_scope: true,
        }
    }

    /// Requests to a down host fail at once (see [`WhenDown::FailFast`]).
    pub const fn fail_fast() -> Self {
        Self {
            failures: Self::DEFAULT_FAILURES,
            probe_backoff: Self::DEFAULT_PROBE_BACKOFF,
            when_down: WhenDown::FailFast,
            route_scope: true,
        }
    }

    /// Attempts in a row that fail before the host is down: 1 to [`MAX_FAILURES`](Self::MAX_FAILURES).
    pub const fn with_failures(mut self, failures: u32) -> Self {
        self.failures = failures;
        self
    }

    /// The schedule of the probes while a host is down: the n-th probe goes the n-th delay after the
    /// one before.
    pub const fn with_probe_backoff(mut self, backoff: Backoff) -> Self {
        self.probe_backoff = backoff;
        self
    }

    /// Whether a gateway failure (`502`, `503`, `504`, gRPC `UNAVAILABLE`, naming no delay) counts
    /// against the route it came from, the host and the request's path (a gRPC method), rather than
    /// against the host. Defaults to `true`.
    ///
    /// A gateway failure is an answer: the host is there, and says that what stands behind it
    /// failed, which is often one backend of many (an API gateway with one service gone, a hot
    /// prefix of an object store, one gRPC method whose own dependency is down). Counted per route,
    /// a path that fails is held or failed fast on its own while every other path of the host is
    /// sent as ever; a host that fails every path is found down path by path. `false` counts them
    /// against the host, as attempts left unanswered always are: for a host known to be one backend,
    /// whose every path fails together, so that its first five failures, on whatever paths, put all
    /// of it down.
    ///
    /// ```
    /// use stagger::Breaker;
    ///
    /// assert!(Breaker::default().route_scope());
    /// assert!(!Breaker::default().with_route_scope(false).route_scope());
    /// ```
    pub const fn with_route_scope(mut self, route_scope: bool) -> Self {
        self.route_scope = route_scope;
        self
    }

    /// Whether gateway failures count against their route (see
    /// [`with_route_scope`](Self::with_route_scope)).
    pub const fn route_scope(&self) -> bool {
        self.route_scope
    }

    /// Attempts in a row that fail before a host is down.
    pub const fn failures(&self) -> u32 {
        self.failures
    }

    /// The probes' schedule.
    pub const fn probe_backoff(&self) -> &Backoff {
        &self.probe_backoff
    }

    /// What a request to a down host meets.
    pub const fn when_down(&self) -> WhenDown {
        self.when_down
    }

    /// How long a request waits for a down host, counted from when it went down: `None` when it
    /// fails fast.
    pub(crate) const fn hold_bound(&self) -> Option<Duration> {
        match self.when_down {
            WhenDown::Hold(bound) => Some(bound),
            WhenDown::FailFast => None,
        }
    }
}

impl Default for Breaker {
    /// [`Breaker::hold`] for [`DEFAULT_HOLD`](Self::DEFAULT_HOLD), after
    /// [`DEFAULT_FAILURES`](Self::DEFAULT_FAILURES), probing on
    /// [`DEFAULT_PROBE_BACKOFF`](Self::DEFAULT_PROBE_BACKOFF).
    fn default() -> Self {
        Self::hold(Self::DEFAULT_HOLD)
    }
}
