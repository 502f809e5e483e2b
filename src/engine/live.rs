//! [`LivePolicy`]: a policy a running client changes, whose guards keep what they know; and
//! [`PolicySource`], where an adapter takes the policy each call starts under.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use crate::time::Instant;

use crate::engine::policy::{RetryPolicy, Settings, Shared};
use crate::engine::policy_guards::RetryBudget;
use crate::engine::state::RetryState;
use crate::error::ConfigError;

/// A retry policy that a running client changes, without forgetting what its guards know.
///
/// Give the adapters a `LivePolicy` where they take a [`RetryPolicy`] ([`RetryLayer::new`],
/// [`RetryMiddleware::new`], [`retry`](crate::retry())), keep a clone, and call
/// [`reload`](Self::reload) with the policy of a new configuration (a [`PolicyConfig`] read again,
/// say). Each call starts under the policy the `LivePolicy` holds when it starts, and ends under
/// it: a reload changes the next calls, never one in flight. What the calls share — the hosts
/// found down, with the calls held for them, the pauses hosts asked for, the budget's and the
/// throttles' accounts, the hosts' round trips — goes on from one policy to the next:
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, LivePolicy, Outcome, Reason, RetryPolicy};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), stagger::ConfigError> {
/// let fixed = Backoff::fixed(Duration::from_millis(10));
/// let policy = LivePolicy::new(RetryPolicy::builder().backoff(fixed).max_retries(3).build()?);
/// // `RetryLayer::new(policy.clone())` and `RetryMiddleware::new(policy.clone())` take it alike.
/// let busy = || async { Err::<(), _>("busy") };
/// let retried = |_: &Result<(), &str>| Outcome::RetrySafe(Reason::Other("busy"));
/// let error = stagger::retry(&policy, busy, retried).await.unwrap_err();
/// assert_eq!(error.info().attempts(), 4);
///
/// // The operators lower the retries; the budget's account and the breaker's hosts carry over.
/// policy.reload(RetryPolicy::builder().backoff(fixed).max_retries(1).build()?)?;
/// let error = stagger::retry(&policy, busy, retried).await.unwrap_err();
/// assert_eq!(error.info().attempts(), 2);
/// assert_eq!(policy.current().max_retries(), 1);
/// # Ok(())
/// # }
/// ```
///
/// # What a reload keeps
///
/// The guards are the calls' together, and there is one of each, whatever the policy of the call:
/// a reload gives them the new policy's shapes in place, for every call from then on, those in
/// flight included, and each keeps what it knows where it means the same under its new shape. A
/// guard the new policy turns off forgets; one it turns on starts afresh. In short (the
/// repository's `docs/configuration.md`, "Reloading", has every case):
///
/// - **breaker**: a host or a route down stays down, its calls held, its probes due as they were;
///   the failures in a row count toward the new threshold; the hold's bound counts from when the
///   host went down.
/// - **host cooldown**: every pause and pace stays.
/// - **budget**: the same shape keeps the same account. Another opens an account of the new shape
///   that carries the old one's: its age, its retries taken, its requests' deposits (worth the new
///   ratio), its pace. A budget the new policy shares with another policy (built with
///   [`RetryPolicyBuilder::budget`](crate::RetryPolicyBuilder::budget) and a clone kept or given
///   elsewhere) is drawn on as it is: it has an account of its own to keep.
/// - **adaptive throttling**: a new `k` keeps the counts; a new window keeps each host's counts
///   of the last window, counted from the reload.
/// - **round trips** learnt for the breaker's timing stay.
///
/// The seed of the jitter is the first policy's: a reload does not restart the streams.
///
/// The policy given to [`new`](Self::new) lends the live policy its guards: a clone of it kept
/// elsewhere shares them, and with them every reload's shapes. Give it the policy alone.
///
/// # Cost
///
/// A call through a `LivePolicy` reads the current policy under a read lock (no lock is held while
/// the call runs); a [`RetryPolicy`] given to an adapter itself costs that adapter nothing more
/// than before `LivePolicy` existed: the adapters are generic over [`PolicySource`], and a fixed
/// policy's code is the same.
///
#[cfg_attr(feature = "tower", doc = "[`RetryLayer::new`]: crate::RetryLayer::new")]
#[cfg_attr(not(feature = "tower"), doc = "[`RetryLayer::new`]: crate#features")]
#[cfg_attr(
    feature = "reqwest-middleware",
    doc = "[`RetryMiddleware::new`]: crate::RetryMiddleware::new"
)]
#[cfg_attr(
    not(feature = "reqwest-middleware"),
    doc = "[`RetryMiddleware::new`]: crate#features"
)]
#[cfg_attr(feature = "serde", doc = "[`PolicyConfig`]: crate::PolicyConfig")]
#[cfg_attr(not(feature = "serde"), doc = "[`PolicyConfig`]: crate#features")]
#[derive(Clone)]
pub struct LivePolicy {
    live: Arc<Live>,
}

/// What every clone of a [`LivePolicy`] shares.
struct Live {
    current: RwLock<RetryPolicy>,
    /// One reload at a time: each reshapes the guards from the shapes the last one left.
    reloading: Mutex<()>,
    /// An adapter judges the calls with a closure of its own (`RetryLayer::classify_with`): a
    /// policy with a classifier of its own, which would never be asked, is refused.
    judged_by_closure: AtomicBool,
}

impl fmt::Debug for LivePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LivePolicy").field(&self.current()).finish()
    }
}

impl From<RetryPolicy> for LivePolicy {
    fn from(policy: RetryPolicy) -> Self {
        Self::new(policy)
    }
}

impl LivePolicy {
    /// A live policy that starts as `policy`, and draws on its guards.
    ///
    /// ```
    /// use stagger::{LivePolicy, RetryPolicy};
    ///
    /// let policy = LivePolicy::new(RetryPolicy::builder().max_retries(2).build()?);
    /// assert_eq!(policy.current().max_retries(), 2);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn new(policy: RetryPolicy) -> Self {
        Self {
            live: Arc::new(Live {
                current: RwLock::new(policy),
                reloading: Mutex::new(()),
                judged_by_closure: AtomicBool::new(false),
            }),
        }
    }

    /// The policy the calls that start now run under: its settings, and its guards
    /// ([`host_state`](RetryPolicy::host_state), [`hosts`](RetryPolicy::hosts),
    /// [`mark_down`](RetryPolicy::mark_down) act on the ones every policy of this `LivePolicy`
    /// shares). A reload does not change it once it is returned.
    pub fn current(&self) -> RetryPolicy {
        self.live
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Starts the retries of one request under the current policy: [`RetryPolicy::start`], for an
    /// adapter of your own.
    ///
    /// ```
    /// use stagger::adapter::{Attempt, Decision};
    /// use stagger::{LivePolicy, Outcome, Reason, RetryPolicy, StopReason};
    ///
    /// let policy = LivePolicy::new(RetryPolicy::builder().max_retries(0).build()?);
    /// let mut state = policy.start();
    /// let refused = Attempt::new(Outcome::RetrySafe(Reason::Connect));
    /// assert_eq!(state.decide(refused, None), Decision::Stop(StopReason::MaxRetries));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn start(&self) -> RetryState {
        self.current().start()
    }

    /// Makes `policy` the one the calls that start from now on run under, its guards those this
    /// live policy has held from the start, given `policy`'s shapes; the calls in flight end under
    /// the policy they started with (see [What a reload keeps](Self#what-a-reload-keeps)).
    ///
    /// `policy`'s classifier and hook go with its settings: build it as the first was (a
    /// `PolicyConfig`'s `builder()`, the hook and the classifier added, then `build`).
    /// Reloads from many threads at once are taken one at a time, each whole.
    ///
    /// # Errors
    ///
    /// [`ConfigError::ClassifierUnused`] when an adapter judges this live policy's calls with a
    /// closure of its own (`RetryLayer::classify_with`) and
    /// `policy` has a classifier, which it would never ask; the current policy stays.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Breaker, LivePolicy, RetryPolicy};
    ///
    /// let policy = LivePolicy::new(RetryPolicy::default());
    /// assert!(policy.current().mark_down("api.example.com"));
    /// // A breaker of another shape: the host found down stays down.
    /// let breaker = Breaker::hold(Duration::from_secs(30)).with_failures(3);
    /// policy.reload(RetryPolicy::builder().breaker(breaker).build()?)?;
    /// assert!(matches!(policy.current().host_state("api.example.com"), stagger::HostState::Down { .. }));
    /// assert_eq!(policy.current().breaker().unwrap().failures(), 3);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn reload(&self, policy: RetryPolicy) -> Result<(), ConfigError> {
        let _one_at_a_time = (self.live.reloading)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if policy.shared.settings.custom_classifier
            && self.live.judged_by_closure.load(Ordering::Relaxed)
        {
            return Err(ConfigError::ClassifierUnused);
        }
        let next = self.current().succeeded_by(policy);
        let previous = std::mem::replace(
            &mut *(self.live.current)
                .write()
                .unwrap_or_else(PoisonError::into_inner),
            next,
        );
        // Dropped out of the lock: the last clone of a policy drops its hook and classifier.
        drop(previous);
        Ok(())
    }
}

impl RetryPolicy {
    /// The policy that takes over from this one: `next`'s settings and budget, this one's guards
    /// given `next`'s shapes, and, for a budget of `next`'s own, what this one's budget knows.
    fn succeeded_by(&self, next: RetryPolicy) -> RetryPolicy {
        let guards = Arc::clone(&self.shared.guards);
        guards.reshape(&next.shared.settings.shapes);
        let (settings, budget, own_budget) = next.into_parts();
        let budget = match (budget, &self.shared.budget) {
            (Some(budget), Some(old)) if own_budget => {
                Some(budget.taking_over(old, Instant::now()))
            }
            (budget, _) => budget,
        };
        RetryPolicy {
            shared: Arc::new(Shared {
                settings,
                budget,
                guards,
            }),
        }
    }

    /// Its settings and its budget, and whether nothing else holds the budget: taken as they are
    /// when nothing else holds the policy, shared with the clones that do otherwise.
    fn into_parts(self) -> (Settings, Option<RetryBudget>, bool) {
        let own = |budget: &Option<RetryBudget>| budget.as_ref().is_some_and(|b| !b.is_shared());
        match Arc::try_unwrap(self.shared) {
            Ok(shared) => {
                let own = own(&shared.budget);
                (shared.settings, shared.budget, own)
            }
            Err(shared) => {
                let own = own(&shared.budget);
                let policy = RetryPolicy { shared };
                (policy.settings_shared(), policy.shared.budget.clone(), own)
            }
        }
    }
}

/// Where an adapter takes the policy each call starts under: a [`RetryPolicy`], the same for every
/// call, or a [`LivePolicy`], the one it holds when the call starts. [`RetryLayer`], [`Retry`],
/// [`RetryMiddleware`] and [`retry`](crate::retry()) take either. Sealed.
///
#[cfg_attr(feature = "tower", doc = "[`RetryLayer`]: crate::RetryLayer")]
#[cfg_attr(feature = "tower", doc = "[`Retry`]: crate::tower::Retry")]
#[cfg_attr(not(feature = "tower"), doc = "[`RetryLayer`]: crate#features")]
#[cfg_attr(not(feature = "tower"), doc = "[`Retry`]: crate#features")]
#[cfg_attr(
    feature = "reqwest-middleware",
    doc = "[`RetryMiddleware`]: crate::RetryMiddleware"
)]
#[cfg_attr(
    not(feature = "reqwest-middleware"),
    doc = "[`RetryMiddleware`]: crate#features"
)]
pub trait PolicySource: sealed::Sealed + Clone + fmt::Debug + Send + Sync + 'static {}

pub(crate) mod sealed {
    //! The methods of [`PolicySource`](super::PolicySource), the adapters' alone.

    use crate::engine::policy::RetryPolicy;
    use crate::engine::state::RetryState;
    use crate::error::ConfigError;

    /// What makes a [`PolicySource`](super::PolicySource).
    pub trait Sealed {
        /// The policy a call that starts now runs under.
        fn policy_now(&self) -> RetryPolicy;

        /// Starts a call, the deadline's clock not yet started (`RetryPolicy::start_unclocked`).
        #[inline]
        fn start_call(&self) -> RetryState {
            self.policy_now().into_started()
        }

        /// The adapter judges every call with a closure of its own: a policy with a classifier of
        /// its own is refused, now and at every reload.
        fn judged_by_closure(&self) -> Result<(), ConfigError>;
    }
}

impl PolicySource for RetryPolicy {}

impl sealed::Sealed for RetryPolicy {
    #[inline]
    fn policy_now(&self) -> RetryPolicy {
        self.clone()
    }

    #[inline]
    fn start_call(&self) -> RetryState {
        self.start_unclocked()
    }

    fn judged_by_closure(&self) -> Result<(), ConfigError> {
        match self.shared.settings.custom_classifier {
            true => Err(ConfigError::ClassifierUnused),
            false => Ok(()),
        }
    }
}

impl PolicySource for LivePolicy {}

impl sealed::Sealed for LivePolicy {
    fn policy_now(&self) -> RetryPolicy {
        self.current()
    }

    fn judged_by_closure(&self) -> Result<(), ConfigError> {
        let _one_at_a_time = (self.live.reloading)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.current().judged_by_closure()?;
        self.live.judged_by_closure.store(true, Ordering::Relaxed);
        Ok(())
    }
}
