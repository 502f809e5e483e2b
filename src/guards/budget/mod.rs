//! The retry budget: one account of retries, shared by every policy built with a clone of it.
//!
//! # Why a budget, and not just a maximum number of retries
//!
//! `max_retries = 3` bounds what one request costs, not what a fleet costs: when a dependency fails
//! outright, every request is retried three times and the failing server sees four times its normal load
//! at the moment it can least take it. A budget bounds the *ratio* of retries to requests instead: each
//! request deposits, each retry withdraws, and when the account is empty retries stop until requests
//! refill it. Under a total outage the extra load stays at the budget's ratio (0.2, 20 %, by default),
//! plus a small floor of retries per second so that a client sending few requests can still retry at all.
//!
//! # Why not `tower::retry::budget::TpsBudget`
//!
//! The accounting is Finagle's, as in tower's `TpsBudget`: deposits and withdrawals land in ten slots
//! that together span the window, and a slot's balance expires with it. stagger keeps that model but not
//! that type, for three reasons measured against it (tower 0.5.3):
//!
//! - **It rounds the ratio.** `TpsBudget` charges a whole number of deposits per retry, so 0.4 becomes
//!   0.5 and 0.3 becomes 0.33. Here a deposit is worth `ratio × 100 000` units and a retry costs 100 000
//!   of them: any ratio with five decimals is exact.
//! - **It can overdraw.** Its withdrawal checks the balance and subtracts in two steps, so concurrent
//!   retries can all pass the check. Here withdrawals check and subtract under one short lock; they happen
//!   only on the failure path.
//! - **It costs every request a lock and a clock read** (measured in `benches/tower.rs`: more than
//!   the rest of stagger's success path). Here a deposit is two relaxed atomic additions; the clock
//!   is read by one deposit in 64 and by every withdrawal, to move the window along.
//!
//! The window is kept on `tokio::time::Instant`, so tests with a paused clock see it expire.

mod account;
mod credit;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::time::Instant;

use crate::error::ConfigError;
use crate::error::config::{MAX_RATIO, MAX_WINDOW, MIN_WINDOW};

use crate::guards::hosts::Host;
use crate::guards::hosts::HostMap;

pub(crate) use account::{Account, RetryKind, Withdrawal};

/// A retry budget: how much load the retries of a client may add to a backend, as one account that
/// every policy built with a clone of it draws on.
///
/// Each request deposits, each retry withdraws, and when the account is empty the retries stop
/// ([`StopReason::Budget`](crate::StopReason::Budget)) until requests refill it. Over any
/// [`window`](Self::window), the retries allowed are [`ratio`](Self::ratio) times the requests sent,
/// plus [`min_per_second`](Self::min_per_second) times the window's length in seconds: under a total
/// outage, the failing server sees at most `1 + ratio` times its load, plus that floor.
///
/// # Pace
///
/// The window bounds how many retries are spent; the pace, how fast. The allowance is paid out at
/// the rate it is earned: each request's share as it comes, and the floor as time goes. At once, a
/// burst of failures may spend one second of the floor and what the requests of the last fiftieth of
/// the window (200 ms by default) paid in, never what a calm spell banked. Spent at once, that would
/// leave in an outage's first moments and come back in one burst a window later, when those retries
/// expire: an echo every window (2 900 retries in one second, every 10 s, in the repository's
/// dead-host herd without a breaker). Paid out as it is earned, it comes back as smoothly as it went.
///
/// # Why a budget, and not just `max_retries`
///
/// `max_retries` bounds what one request costs, not what a fleet costs: when a dependency fails
/// outright, every request is retried that many times and the failing server sees several times its
/// normal load at the moment it can least take it. A budget bounds the *ratio* of retries to requests
/// instead, so that under a total outage the extra load stays at the ratio, plus a small floor of
/// retries per second so that a client sending few requests can still retry at all.
///
/// # Timeouts
///
/// A retry of a timed-out attempt costs four retries' worth, and is paid from the requests' deposits,
/// never from the floor: from those of the whole window, and from those of its last fifth (2 s by
/// default) alike. A timeout is the failure that keeps an overloaded server overloaded: the attempt
/// given up on may still be in the server's queue, to be served for nobody, while its retry queues
/// behind it (a metastable failure: Bronson et al., HotOS 2021). So a fleet of clients that each send
/// little cannot keep a saturated server saturated with the floors they hold between them, and a burst
/// of timeouts after a calm spell spends what the requests sent while the server was slow paid in, not
/// the whole window banked before it. Other failures (a `503`, a refused connection, a reset) cost one
/// retry and may use the floor.
///
/// A new budget has no deposits to judge a timeout by, so a starting credit pays for the timeouts of
/// the calls started in its first window: one second of the floor (10 retries' worth by default, two
/// timeouts' retries). A client that has just started has its first timed-out requests retried; a
/// fleet that has been running for a window pays for its timeouts' retries with its requests. The
/// credit is kept by the process, one for each host: the first two such retries to a host in the
/// process's life are paid by it, whichever young budget sends them. So a policy built for each
/// request, each with a fresh budget, does not bring a fresh credit with every request: 1 000
/// requests so made to a host that times out sent 1.002 attempts a request (3.00 when each budget kept
/// its own, 1.05 through one shared policy). A request without a host draws on its budget's own
/// credit, as does every request through a budget built with
/// [`own_starting_credit`](RetryBudgetBuilder::own_starting_credit). Without a floor
/// (`min_per_second(0)`) there is no credit. The repository's `docs/metastable.md` has the
/// measurements behind these rules.
///
/// # Sharing
///
/// A `RetryBudget` is a handle: a clone costs one reference count, and every clone draws on the same
/// account. Give clones to the policies that call one backend — a `GET` policy and a `POST` policy, or
/// the policies of every host of a client — and their retries are limited together, however
/// differently they back off:
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, Outcome, Reason, RetryBudget, RetryPolicy, StopReason};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), stagger::ConfigError> {
/// let backend = RetryBudget::builder()
///     .ratio(0.1) // retries may add 10 % to the load…
///     .min_per_second(5) // …plus 5 retries a second, whatever the traffic…
///     .window(Duration::from_secs(10)) // …counted over the last 10 s.
///     .build()?;
/// let reads = RetryPolicy::builder()
///     .backoff(Backoff::fixed(Duration::from_millis(10)))
///     .max_retries(100)
///     .budget(backend.clone())
///     .build()?;
/// let writes = RetryPolicy::builder()
///     .backoff(Backoff::exponential(Duration::from_millis(500)))
///     .max_retries(1)
///     .budget(backend)
///     .build()?;
///
/// // The backend is down. A read retries until the budget is spent: paid out as it is earned, that
/// // is one second of the floor at once, 5 retries (and a tenth of a retry for the one request
/// // sent); the rest of the window's 50 comes at 5 a second.
/// let down = || async { Err::<(), _>("connection refused") };
/// let refused = |_: &Result<(), &str>| Outcome::RetrySafe(Reason::Connect);
/// let read = stagger::retry(&reads, down, refused).await.unwrap_err();
/// assert_eq!(read.info().retries(), 5);
/// assert_eq!(read.info().stop_reason(), Some(StopReason::Budget));
///
/// // The write draws on the same account: nothing is left for it, and it is not retried.
/// let write = stagger::retry(&writes, down, refused).await.unwrap_err();
/// assert_eq!(write.info().retries(), 0);
/// assert_eq!(write.info().stop_reason(), Some(StopReason::Budget));
/// # Ok(())
/// # }
/// ```
///
/// A policy built without [`RetryPolicyBuilder::budget`](crate::RetryPolicyBuilder::budget) gets a
/// [`RetryBudget::default()`] of its own, shared only by the policy's clones;
/// [`budget(None)`](crate::RetryPolicyBuilder::budget) turns it off.
///
/// # Why a ratio, and not a percentage
///
/// The same number is written both ways in the field: tower's `TpsBudget` and Finagle take a
/// "percent" that is a fraction (`0.2` for 20 %), Envoy's `budget_percent` is a percentage (`20.0`),
/// and an earlier stagger took percent too, so that `0.2` meant 0.2 %. Here the setter is named for what
/// it takes, a [`ratio`](RetryBudgetBuilder::ratio) of retries to requests, and its range stops at
/// `1.0`, one retry per request: a percentage written by mistake — `ratio(20.0)`, `ratio(5.0)`, any
/// whole percentage from 2 up — is a [`ConfigError`] from [`build`](RetryBudgetBuilder::build), not a
/// budget a hundred times too generous. The one it cannot tell apart is 1 % written as `1.0`: that
/// reads as a retry per request, the largest budget there is.
///
/// # Default
///
/// | setting | default | valid |
/// |---|---|---|
/// | [`ratio`](RetryBudgetBuilder::ratio) | `0.2` (20 % extra load) | `0.0..=1.0` |
/// | [`min_per_second`](RetryBudgetBuilder::min_per_second) | 10 retries a second | any `u32` |
/// | [`window`](RetryBudgetBuilder::window) | 10 s | 1 s to 60 s |
/// | [`per_host`](RetryBudgetBuilder::per_host) | off: one account for every host | |
/// | [`own_starting_credit`](RetryBudgetBuilder::own_starting_credit) | off: the process's, one for each host | |
#[derive(Clone)]
pub struct RetryBudget {
    account: Arc<Account>,
    /// With `per_host`, an account of the same shape for each host, made on first use.
    hosts: Option<Arc<HostMap<Account>>>,
}

impl Default for RetryBudget {
    /// A new account with the defaults: ratio 0.2, at least 10 retries a second, over a 10 s window.
    fn default() -> Self {
        Self::new(RetryBudgetBuilder::new())
    }
}

impl fmt::Debug for RetryBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = &self.account.shape;
        f.debug_struct("RetryBudget")
            .field("ratio", &shape.ratio)
            .field("min_per_second", &shape.min_per_second)
            .field("window", &shape.window)
            .field("per_host", &shape.per_host)
            .field("own_starting_credit", &shape.own_starting_credit)
            .finish()
    }
}

impl RetryBudget {
    /// The default ratio of retries to requests: `0.2`, that is 20 % extra load.
    ///
    /// ```
    /// # use stagger::RetryBudget;
    /// assert_eq!(RetryBudget::default().ratio(), RetryBudget::DEFAULT_RATIO);
    /// ```
    pub const DEFAULT_RATIO: f64 = 0.2;
    /// The default floor: 10 retries a second.
    ///
    /// ```
    /// # use stagger::RetryBudget;
    /// assert_eq!(RetryBudget::default().min_per_second(), RetryBudget::DEFAULT_MIN_PER_SECOND);
    /// ```
    pub const DEFAULT_MIN_PER_SECOND: u32 = 10;
    /// The default window: 10 s.
    ///
    /// ```
    /// # use stagger::RetryBudget;
    /// assert_eq!(RetryBudget::default().window(), RetryBudget::DEFAULT_WINDOW);
    /// ```
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);

    /// A builder starting from the defaults.
    ///
    /// ```
    /// use stagger::RetryBudget;
    ///
    /// // A stricter budget: retries may add 5 % to the load, plus 2 a second.
    /// let budget = RetryBudget::builder().ratio(0.05).min_per_second(2).build()?;
    /// assert_eq!((budget.ratio(), budget.min_per_second()), (0.05, 2));
    /// assert_eq!(budget.window(), RetryBudget::DEFAULT_WINDOW); // not set: the default
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn builder() -> RetryBudgetBuilder {
        RetryBudgetBuilder::new()
    }

    /// A new account of a validated shape.
    fn new(shape: RetryBudgetBuilder) -> Self {
        Self {
            account: Arc::new(Account::new(shape)),
            hosts: shape.per_host.then(|| Arc::new(HostMap::default())),
        }
    }

    /// Whether the budget keeps a starting credit of its own, rather than drawing on its hosts'
    /// (see [`RetryBudgetBuilder::own_starting_credit`]).
    pub fn own_starting_credit(&self) -> bool {
        self.account.shape.own_starting_credit
    }

    /// Whether each host has an account of its own (see [`RetryBudgetBuilder::per_host`]).
    ///
    /// ```
    /// # use stagger::RetryBudget;
    /// assert!(!RetryBudget::default().per_host());
    /// assert!(RetryBudget::builder().per_host(true).build()?.per_host());
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn per_host(&self) -> bool {
        self.hosts.is_some()
    }

    /// The account of `host`, for a budget kept per host: made, with this budget's shape, on first use.
    pub(crate) fn partition(&self, host: Option<Host>) -> Option<Arc<Account>> {
        let hosts = self.hosts.as_ref()?;
        Some(hosts.get(host, || Account::new(self.account.shape)))
    }

    /// Retries allowed per request, on top of the floor: `0.2` is 20 % extra load.
    ///
    /// ```
    /// # use stagger::RetryBudget;
    /// let budget = RetryBudget::builder().ratio(0.1).build()?;
    /// assert_eq!(budget.ratio(), 0.1);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn ratio(&self) -> f64 {
        self.account.shape.ratio
    }

    /// Retries a second allowed whatever the traffic.
    ///
    /// ```
    /// # use stagger::RetryBudget;
    /// let budget = RetryBudget::builder().min_per_second(3).build()?;
    /// assert_eq!(budget.min_per_second(), 3);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn min_per_second(&self) -> u32 {
        self.account.shape.min_per_second
    }

    /// How long a deposit or a withdrawal counts.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use stagger::RetryBudget;
    /// let budget = RetryBudget::builder().window(Duration::from_secs(30)).build()?;
    /// assert_eq!(budget.window(), Duration::from_secs(30));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn window(&self) -> Duration {
        self.account.shape.window
    }

    /// Whether anything but one policy holds this budget: a clone kept, or given to another policy.
    pub(crate) fn is_shared(&self) -> bool {
        Arc::strong_count(&self.account) > 1
    }

    /// This budget's shape, taking over what `old` knows at `now`: `old` itself when the shapes are
    /// the same (or the two are one account); otherwise new accounts of this shape that carry
    /// `old`'s ([`Account::carried`]). Kept per host before and not now, the hosts' accounts are
    /// merged into the one; kept per host now and not before, the hosts start afresh (one account's
    /// history cannot be told apart by host); kept per host before and now, each host's account
    /// carries its own.
    pub(crate) fn taking_over(&self, old: &RetryBudget, now: Instant) -> RetryBudget {
        let shape = self.account.shape;
        if Arc::ptr_eq(&self.account, &old.account) || shape == old.account.shape {
            return old.clone();
        }
        let hosts = (old.hosts.as_ref()).map_or_else(Vec::new, |hosts| hosts.entries());
        let mut from: Vec<&Account> = vec![&old.account];
        if !shape.per_host {
            from.extend(hosts.iter().map(|(_, account)| &**account));
        }
        let account = Arc::new(Account::carried(shape, &from, now));
        let hosts = shape.per_host.then(|| {
            let map = HostMap::default();
            for (host, account) in &hosts {
                map.get(*host, || Account::carried(shape, &[account], now));
            }
            Arc::new(map)
        });
        RetryBudget { account, hosts }
    }

    /// Records one request.
    pub(crate) fn deposit(&self) {
        self.account.deposit();
    }

    /// Takes one retry from the budget, if the balance allows it: the withdrawal, to give back with
    /// [`refund`](Self::refund) should the retry never be sent.
    #[cfg(test)]
    pub(crate) fn withdraw(
        &self,
        kind: RetryKind,
        host: Option<Host>,
        call_started: Instant,
    ) -> Option<Withdrawal> {
        self.account
            .withdraw_spread(kind, host, call_started, false)
    }

    /// Takes one retry from the budget, as `withdraw` does; a retry its host's cooldown spreads
    /// (`spread`) is not held by the budget's pace as well (`Account::withdraw_spread`).
    pub(crate) fn withdraw_spread(
        &self,
        kind: RetryKind,
        host: Option<Host>,
        call_started: Instant,
        spread: bool,
    ) -> Option<Withdrawal> {
        self.account
            .withdraw_spread(kind, host, call_started, spread)
    }

    /// Gives back a withdrawal whose retry was never sent (the call was cancelled, or ran out of time,
    /// before it).
    pub(crate) fn refund(&self, withdrawal: Withdrawal) {
        self.account.refund(withdrawal);
    }
}

/// Builds a [`RetryBudget`]; every setter documents its default and its range, and
/// [`build`](Self::build) reports a value out of range as a [`ConfigError`], never by a panic or a
/// silent clamp.
///
/// ```
/// use std::time::Duration;
/// use stagger::RetryBudget;
///
/// let budget = RetryBudget::builder()
///     .ratio(0.2)
///     .min_per_second(10)
///     .window(Duration::from_secs(10))
///     .build()?;
/// assert_eq!(budget.ratio(), 0.2);
///
/// // A percentage where a ratio belongs is refused, with the reason:
/// let error = RetryBudget::builder().ratio(20.0).build().unwrap_err();
/// assert!(error.to_string().contains("20 % is 0.2"));
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudgetBuilder {
    ratio: f64,
    min_per_second: u32,
    window: Duration,
    per_host: bool,
    own_starting_credit: bool,
}

impl Default for RetryBudgetBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RetryBudgetBuilder {
    /// A builder starting from the defaults of [`RetryBudget`]; the same as [`RetryBudget::builder`].
    ///
    /// ```
    /// use stagger::{RetryBudget, RetryBudgetBuilder};
    ///
    /// assert_eq!(RetryBudgetBuilder::new(), RetryBudget::builder());
    /// let budget = RetryBudgetBuilder::new().build()?;
    /// assert_eq!(budget.ratio(), RetryBudget::DEFAULT_RATIO);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub const fn new() -> Self {
        Self {
            ratio: RetryBudget::DEFAULT_RATIO,
            min_per_second: RetryBudget::DEFAULT_MIN_PER_SECOND,
            window: RetryBudget::DEFAULT_WINDOW,
            per_host: false,
            own_starting_credit: false,
        }
    }

    /// Sets the retries allowed per request sent, on top of the floor: a ratio, not a percentage, so
    /// 20 % extra load is `0.2`. Defaults to `0.2` ([`RetryBudget::DEFAULT_RATIO`]).
    ///
    /// Valid within `0.0..=1.0`: `0.0` leaves only the floor of
    /// [`min_per_second`](Self::min_per_second), and `1.0`, a retry for every request, at most doubles
    /// the load on a failing server; above that a budget no longer protects it, and
    /// [`budget(None)`](crate::RetryPolicyBuilder::budget) says so more plainly. Exact to five
    /// decimals (thousandths of a percent).
    ///
    /// ```
    /// use stagger::{ConfigError, RetryBudget};
    ///
    /// // Retries may add 5 % to the load:
    /// let budget = RetryBudget::builder().ratio(0.05).build()?;
    /// assert_eq!(budget.ratio(), 0.05);
    ///
    /// // 5.0 would be five retries per request: a percentage written where the ratio belongs.
    /// let error = RetryBudget::builder().ratio(5.0).build().unwrap_err();
    /// assert_eq!(error, ConfigError::BudgetRatio(5.0));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub const fn ratio(mut self, ratio: f64) -> Self {
        self.ratio = ratio;
        self
    }

    /// Sets the floor: retries a second allowed whatever the traffic, so that a client sending few
    /// requests can still retry. Defaults to 10 ([`RetryBudget::DEFAULT_MIN_PER_SECOND`]).
    ///
    /// Any value is valid; `0` leaves only the [`ratio`](Self::ratio). The floor is held as
    /// `min_per_second × window` retries per window, not spread evenly within it.
    ///
    /// With a ratio of zero, the floor is all there is: here one retry a second, and an operation that
    /// keeps failing gets one retry before the budget stops it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, Outcome, Reason, RetryBudget, RetryPolicy, StopReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stagger::ConfigError> {
    /// let budget = RetryBudget::builder()
    ///     .ratio(0.0)
    ///     .min_per_second(1)
    ///     .window(Duration::from_secs(1))
    ///     .build()?;
    /// let policy = RetryPolicy::builder()
    ///     .backoff(Backoff::fixed(Duration::from_millis(10)))
    ///     .budget(budget)
    ///     .build()?;
    /// let always_down = || async { Err::<(), _>("connection refused") };
    /// let error = stagger::retry(&policy, always_down, |_| Outcome::RetrySafe(Reason::Connect))
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!(error.info().retries(), 1);
    /// assert_eq!(error.info().stop_reason(), Some(StopReason::Budget));
    /// # Ok(())
    /// # }
    /// ```
    pub const fn min_per_second(mut self, min_per_second: u32) -> Self {
        self.min_per_second = min_per_second;
        self
    }

    /// Sets how long a deposit or a withdrawal counts: the span over which the ratio is measured.
    /// Defaults to 10 s ([`RetryBudget::DEFAULT_WINDOW`]).
    ///
    /// Valid from 1 s to 60 s, the bounds Finagle (and tower) use. Under 1 s the floor, held in whole
    /// retries per window, can round to none: 1 retry a second over 500 ms is half a retry. Over 60 s
    /// the window banks the deposits of a long calm spell, which the first moments of an outage could
    /// then spend in one burst.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{ConfigError, RetryBudget};
    ///
    /// let budget = RetryBudget::builder().window(Duration::from_secs(30)).build()?;
    /// assert_eq!(budget.window(), Duration::from_secs(30));
    ///
    /// let error = RetryBudget::builder().window(Duration::from_millis(500)).build().unwrap_err();
    /// assert_eq!(error, ConfigError::BudgetWindow(Duration::from_millis(500)));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub const fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// Sets whether each host (name and port) has an account of its own, of this shape: a host that
    /// keeps failing then spends only its own retries, and the retries of a healthy host it shares a
    /// client with are still there when that host needs one. Defaults to `false`: one account for
    /// every request, whatever its host.
    ///
    /// With one account, a client that calls a dead dependency beside healthy ones retries the dead one
    /// with the deposits of every request to the healthy ones — more load on the host that can least
    /// take it — and has nothing left for a healthy host's occasional failure. With `per_host(true)`,
    /// each host's retries are bounded by its own traffic. The cost: a look-up (a read lock and a hash)
    /// per request, where one account costs two atomic additions. At most 4 096 hosts have an
    /// account of their own: past that, a host's account is dropped only once its window has nothing
    /// left in it, and a new host meanwhile shares one account with the others that did not fit, so
    /// that no host in use gets back a floor it spent.
    ///
    /// ```
    /// use stagger::{RetryBudget, RetryPolicy};
    ///
    /// let budget = RetryBudget::builder().per_host(true).build()?;
    /// let policy = RetryPolicy::builder().budget(budget).build()?;
    /// assert!(policy.budget().unwrap().per_host());
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub const fn per_host(mut self, per_host: bool) -> Self {
        self.per_host = per_host;
        self
    }

    /// Sets whether the budget keeps a starting credit of its own, rather than drawing on its
    /// hosts' starting credits, which the process keeps (see [`RetryBudget`]'s "Timeouts"). Defaults
    /// to `false`.
    ///
    /// The process keeps one credit for each host so that a client made for each request (a policy
    /// built where the request is) does not bring a fresh one with every request. A budget of its own
    /// is for what stands for a process of its own: a simulation of many processes in one (the
    /// repository's `examples/herd/` builds each simulated client's budget this way), or a test that
    /// must not share a host's credit with the tests that run beside it.
    ///
    /// ```
    /// use stagger::RetryBudget;
    ///
    /// let budget = RetryBudget::builder().own_starting_credit(true).build()?;
    /// assert!(budget.own_starting_credit());
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub const fn own_starting_credit(mut self, own: bool) -> Self {
        self.own_starting_credit = own;
        self
    }

    /// Validates the shape and opens a new account with it.
    ///
    /// Each call opens an account of its own: policies share a budget by holding clones of one
    /// `RetryBudget`, not by being built from equal builders.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{ConfigError, RetryBudget};
    ///
    /// let shape = RetryBudget::builder().ratio(0.1).window(Duration::from_secs(20));
    /// let budget = shape.build()?;
    /// assert_eq!((budget.ratio(), budget.window()), (0.1, Duration::from_secs(20)));
    ///
    /// // Out of range: refused, with the field and the value.
    /// match RetryBudget::builder().ratio(f64::NAN).build() {
    ///     Err(ConfigError::BudgetRatio(ratio)) => assert!(ratio.is_nan()),
    ///     other => panic!("expected BudgetRatio, got {other:?}"),
    /// }
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn build(self) -> Result<RetryBudget, ConfigError> {
        // Written so that NaN fails too.
        if !(0.0..=MAX_RATIO).contains(&self.ratio) {
            return Err(ConfigError::BudgetRatio(self.ratio));
        }
        if !(MIN_WINDOW..=MAX_WINDOW).contains(&self.window) {
            return Err(ConfigError::BudgetWindow(self.window));
        }
        Ok(RetryBudget::new(self))
    }
}
