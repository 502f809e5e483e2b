//! [`RestartPolicy`] and its builder: how a long-running task is restarted, every setting's default and
//! the checks that refuse an invalid one.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::attempt::RestartEvent;
use crate::engine::backoff::Backoff;
use crate::engine::rng::{StreamSource, entropy_seed};
use crate::error::ConfigError;
use crate::time::Timer;

type RestartHook = dyn Fn(&RestartEvent<'_>) + Send + Sync;

/// How [`supervise`](crate::supervise()) keeps a long-running task alive: the delay before each
/// restart, when that delay starts over, and when to give up.
///
/// A run that ends before [`healthy_after`](RestartPolicyBuilder::healthy_after) is a failure, and
/// the `n`-th failure in a row waits a delay of the [`Backoff`] before its restart: under the default
/// full jitter, `U[0, c(n)]` with `c(n) = min(max_delay, initial · base^(n−1))`, the crate's
/// [delay convention](crate#the-delay-convention). A run that stayed up at least `healthy_after` ended
/// for a new reason: the task restarts at once and the sequence starts over. The first run starts at
/// once too.
///
/// Cheap to clone; clones share one seed, from which each supervision draws its own jitter stream.
///
/// # Defaults
///
/// | setting | default |
/// |---|---|
/// | backoff | [`Backoff::exponential`] from 1 s: base 2, `max_delay` 20 s, full jitter |
/// | [`healthy_after`](RestartPolicyBuilder::healthy_after) | 10 s |
/// | [`max_restarts`](RestartPolicyBuilder::max_restarts) | none: restarts go on until the stop |
/// | [`restart_on_return`](RestartPolicyBuilder::restart_on_return) | `false`: a run that returns `Ok` ends the supervision |
/// | [`finish_on_stop`](RestartPolicyBuilder::finish_on_stop) | `false`: the stop drops a run in progress |
/// | time limits | none: no deadline, and no limit on a run |
/// | seed | from OS entropy; one stream per supervision |
///
/// Why, against the peers' documented schedules:
///
/// - **1 s, doubling**: gRPC's connection backoff and task-supervisor start at 1 s, and Kubernetes'
///   KEP-4603 proposes 1 s for its CrashLoopBackOff instead of 10 s. Base 2, as Kubernetes and
///   task-supervisor.
/// - **20 s cap**, the cap of every [`Backoff`]: it bounds how long a worker stays down after its
///   dependency is back, at most 20 s and 10 s on average under full jitter. Kubernetes caps at 300 s
///   (KEP-4603: 60 s), gRPC at 120 s (±20 %), task-supervisor at 30 s (±10 %).
/// - **Full jitter**, where the peers have none (Kubernetes, systemd's `RestartSteps`) or a band around
///   the delay (task-supervisor ±10 %, Akka's `randomFactor` 0.2, gRPC ±20 %): workers that lost the
///   same dependency at once draw their restarts over the whole ceiling, and come back spread instead
///   of in a band, where the no-jitter peers come back in the same millisecond.
/// - **10 s healthy**: longer than a crash loop's runs (a connection refused, or one that fails its
///   first query), far shorter than the idle timeouts that drop healthy connections (a load
///   balancer's 60 s), whose restarts should be at once. It also bounds what a task costs whose runs
///   each end just past it: one restart per 10 s, about as often as the backoff at its cap. Kubernetes
///   resets after 10 minutes of running, task-supervisor after its 60 s window, Akka after its
///   `minBackoff`.
/// - **No restart limit**: Kubernetes and gRPC never give up either. Erlang/OTP's intensity (1 restart
///   in 5 s), systemd's `StartLimitBurst` (5 in 10 s) and task-supervisor's limit (5 in 60 s) hand the
///   failure to something above them, a supervisor tree or the init system; a task of a process has
///   nothing above it but the process, and with the backoff a failing task already costs at most a
///   restart per 10 s on average. Set one with [`max_restarts`](RestartPolicyBuilder::max_restarts)
///   where the caller has something better to do.
/// - **A return ends it**: as systemd's `Restart=on-failure` and Erlang's `transient` children, a run
///   that returns `Ok` has finished its work.
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, RestartPolicy};
///
/// let policy = RestartPolicy::default();
/// assert_eq!(policy.backoff(), &Backoff::exponential(Duration::from_secs(1)));
/// assert_eq!(policy.backoff().max_delay(), Duration::from_secs(20));
/// assert_eq!(policy.healthy_after(), Some(Duration::from_secs(10)));
/// assert_eq!(policy.max_restarts(), None);
/// assert!(!policy.restart_on_return());
/// assert!(!policy.finish_on_stop());
/// ```
// The inherent impl of `RestartPolicy`: its settings here, `start()` in `restart.rs`.
#[derive(Clone)]
pub struct RestartPolicy {
    pub(super) shared: Arc<Shared>,
}

/// What every clone of a policy shares.
pub(super) struct Shared {
    backoff: Backoff,
    healthy_after: Option<Duration>,
    max_restarts: Option<(u32, Duration)>,
    restart_on_return: bool,
    finish_on_stop: bool,
    pub(super) streams: StreamSource,
    on_restart: Option<Box<RestartHook>>,
    timer: Option<Arc<dyn Timer>>,
}

impl fmt::Debug for RestartPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.shared;
        f.debug_struct("RestartPolicy")
            .field("backoff", &s.backoff)
            .field("healthy_after", &s.healthy_after)
            .field("max_restarts", &s.max_restarts)
            .field("restart_on_return", &s.restart_on_return)
            .field("finish_on_stop", &s.finish_on_stop)
            .field("seed", &s.streams.seed())
            .finish_non_exhaustive()
    }
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self::builder()
            .build()
            .expect("the default configuration is valid")
    }
}

impl RestartPolicy {
    /// The default backoff: [`Backoff::exponential`] from 1 s, base 2, `max_delay` 20 s, full jitter.
    ///
    /// ```
    /// # use stagger::RestartPolicy;
    /// assert_eq!(RestartPolicy::default().backoff(), &RestartPolicy::DEFAULT_BACKOFF);
    /// ```
    pub const DEFAULT_BACKOFF: Backoff = Backoff::exponential(Duration::from_secs(1));

    /// The default time a run must stay up to count as healthy: 10 s.
    ///
    /// ```
    /// # use stagger::RestartPolicy;
    /// let policy = RestartPolicy::default();
    /// assert_eq!(policy.healthy_after(), Some(RestartPolicy::DEFAULT_HEALTHY_AFTER));
    /// ```
    pub const DEFAULT_HEALTHY_AFTER: Duration = Duration::from_secs(10);

    /// A builder starting from the defaults.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::RestartPolicy;
    ///
    /// let policy = RestartPolicy::builder().healthy_after(Duration::from_secs(1)).build()?;
    /// assert_eq!(policy.healthy_after(), Some(Duration::from_secs(1)));
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn builder() -> RestartPolicyBuilder {
        RestartPolicyBuilder::new()
    }

    /// The backoff of the restarts after failed runs.
    pub fn backoff(&self) -> &Backoff {
        &self.shared.backoff
    }

    /// How long a run must stay up to count as healthy; `None` when no run does.
    pub fn healthy_after(&self) -> Option<Duration> {
        self.shared.healthy_after
    }

    /// The restart limit, `(n, within)`: more than `n` restarts within `within` give up. `None` when
    /// there is no limit.
    pub fn max_restarts(&self) -> Option<(u32, Duration)> {
        self.shared.max_restarts
    }

    /// Whether a run that returns `Ok` is restarted.
    pub fn restart_on_return(&self) -> bool {
        self.shared.restart_on_return
    }

    /// Whether a run in progress when the stop comes is left to finish, rather than dropped.
    pub fn finish_on_stop(&self) -> bool {
        self.shared.finish_on_stop
    }

    /// The timer of one's own its restarts sleep on, if it was given one.
    pub(crate) fn timer(&self) -> Option<&Arc<dyn Timer>> {
        self.shared.timer.as_ref()
    }

    /// Tells the hook, if there is one, of a restart.
    pub(crate) fn notify(&self, event: &RestartEvent<'_>) {
        if let Some(hook) = &self.shared.on_restart {
            hook(event);
        }
    }
}

/// Builds a [`RestartPolicy`]; every setter documents its default. Invalid values are reported by
/// [`build`](RestartPolicyBuilder::build) as a [`ConfigError`], never by a panic.
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, RestartPolicy};
///
/// let policy = RestartPolicy::builder()
///     .backoff(Backoff::exponential(Duration::from_millis(500)).with_max_delay(Duration::from_secs(10)))
///     .healthy_after(Duration::from_secs(30))
///     .max_restarts(5, Duration::from_secs(60))
///     .build()?;
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[must_use]
pub struct RestartPolicyBuilder {
    backoff: Backoff,
    healthy_after: Option<Duration>,
    max_restarts: Option<(u32, Duration)>,
    restart_on_return: bool,
    finish_on_stop: bool,
    seed: Option<u64>,
    on_restart: Option<Box<RestartHook>>,
    timer: Option<Arc<dyn Timer>>,
}

impl fmt::Debug for RestartPolicyBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RestartPolicyBuilder")
            .field("backoff", &self.backoff)
            .field("healthy_after", &self.healthy_after)
            .field("max_restarts", &self.max_restarts)
            .field("restart_on_return", &self.restart_on_return)
            .field("finish_on_stop", &self.finish_on_stop)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl Default for RestartPolicyBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RestartPolicyBuilder {
    /// A builder starting from the defaults of [`RestartPolicy`]; the same as
    /// [`RestartPolicy::builder`] and [`RestartPolicyBuilder::default`].
    ///
    /// ```
    /// use stagger::{RestartPolicy, RestartPolicyBuilder};
    ///
    /// let policy = RestartPolicyBuilder::new().build()?;
    /// assert_eq!(policy.backoff(), &RestartPolicy::DEFAULT_BACKOFF);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn new() -> Self {
        Self {
            backoff: RestartPolicy::DEFAULT_BACKOFF,
            healthy_after: Some(RestartPolicy::DEFAULT_HEALTHY_AFTER),
            max_restarts: None,
            restart_on_return: false,
            finish_on_stop: false,
            seed: None,
            on_restart: None,
            timer: None,
        }
    }

    /// Sets a timer of one's own for the restarts' delays. Defaults to none: the timer of what runs
    /// the supervision, as for a [`RetryPolicy`](crate::RetryPolicy)'s calls (see
    /// [`RetryPolicyBuilder::timer`](crate::RetryPolicyBuilder::timer)).
    pub fn timer(mut self, timer: impl Timer) -> Self {
        self.timer = Some(Arc::new(timer));
        self
    }

    /// Sets the backoff of the restarts after failed runs. Defaults to
    /// [`RestartPolicy::DEFAULT_BACKOFF`]: exponential from 1 s, base 2, `max_delay` 20 s, full
    /// jitter. A meaningless backoff is refused by [`build`](Self::build) (see [`Backoff::validate`]),
    /// and so is one from zero, whose every delay is zero: a task that fails at once would be
    /// restarted in a busy loop (100 000 runs in 0.12 s of CPU, measured before it was refused).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, Jitter, RestartPolicy};
    ///
    /// // systemd's RestartSec=100ms, without jitter: every restart after 100 ms.
    /// let backoff = Backoff::fixed(Duration::from_millis(100));
    /// let policy = RestartPolicy::builder().backoff(backoff).build()?;
    /// assert_eq!(policy.backoff().jitter(), Jitter::None);
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Sets how long a run must stay up to count as healthy. Defaults to 10 s
    /// ([`RestartPolicy::DEFAULT_HEALTHY_AFTER`]); `None` counts no run as healthy, so the delays
    /// never start over.
    ///
    /// A run that ends before this time is a failure, whether it returned an error or (with
    /// [`restart_on_return`](Self::restart_on_return)) `Ok`: the `n`-th failure in a row waits the
    /// backoff's delay before retry `n`. A run that stayed up this long ended for a new reason: the
    /// task restarts at once, and the next failure waits the first delay again. Zero is refused by
    /// [`build`](Self::build): every run would be healthy, and a task that fails at once would be
    /// restarted at once, forever.
    ///
    /// Here a worker whose connection is dropped every 2 s restarts at once each time:
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{RestartEvent, RestartPolicy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stagger::ConfigError> {
    /// let policy = RestartPolicy::builder()
    ///     .healthy_after(Duration::from_secs(1))
    ///     .on_restart(|event: &RestartEvent| assert_eq!(event.delay, Duration::ZERO))
    ///     .build()?;
    /// let dropped_after_2s = || async {
    ///     tokio::time::sleep(Duration::from_secs(2)).await;
    ///     Err::<(), _>("connection reset")
    /// };
    /// let stop = tokio::time::sleep(Duration::from_secs(9));
    /// stagger::supervise(&policy, dropped_after_2s, stop).await.unwrap();
    /// # Ok(())
    /// # }
    /// ```
    pub fn healthy_after(mut self, healthy_after: impl Into<Option<Duration>>) -> Self {
        self.healthy_after = healthy_after.into();
        self
    }

    /// Gives up when more than `max_restarts` restarts would fall within `within` (Erlang/OTP's
    /// intensity and period). Defaults to none; `None` turns the limit off, and `within` is then
    /// unused.
    ///
    /// A restart is counted at the moment it would happen, its delay included; the one that would be
    /// the `max_restarts + 1`-th within any `within` is not made, and
    /// [`supervise`](crate::supervise()) returns the last run's error, whose
    /// [`stop_reason`](crate::RetryInfo::stop_reason) is
    /// [`StopReason::MaxRestarts`](crate::StopReason::MaxRestarts). `0` never restarts. A zero
    /// `within` is refused by [`build`](Self::build).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, RestartPolicy, StopReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stagger::ConfigError> {
    /// let policy = RestartPolicy::builder()
    ///     .backoff(Backoff::fixed(Duration::from_secs(1)))
    ///     .max_restarts(3, Duration::from_secs(60))
    ///     .build()?;
    /// let refused = || async { Err::<(), _>("connection refused") };
    /// let error = stagger::supervise(&policy, refused, std::future::pending::<()>())
    ///     .await
    ///     .unwrap_err();
    /// assert_eq!(error.to_string(), "gave up after 3 restarts (restart limit reached)");
    /// assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRestarts));
    /// assert_eq!(error.into_inner(), Some("connection refused"));
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_restarts(mut self, max_restarts: impl Into<Option<u32>>, within: Duration) -> Self {
        self.max_restarts = max_restarts.into().map(|n| (n, within));
        self
    }

    /// Whether a run that returns `Ok` is restarted too, as one that fails. Defaults to `false`: the
    /// supervision ends with `Ok(())` when a run does (systemd's `Restart=on-failure`, Erlang's
    /// `transient`). With `true` it is restarted on the same schedule as a failure (systemd's
    /// `Restart=always`, Kubernetes' `restartPolicy: Always`).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::time::Duration;
    /// use stagger::RestartPolicy;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stagger::ConfigError> {
    /// let runs = AtomicU32::new(0);
    /// let poll_once = || async {
    ///     runs.fetch_add(1, Ordering::Relaxed);
    ///     tokio::time::sleep(Duration::from_secs(15)).await; // healthy: restarted at once
    ///     Ok::<(), ()>(())
    /// };
    /// let policy = RestartPolicy::builder().restart_on_return(true).build()?;
    /// let stop = tokio::time::sleep(Duration::from_secs(40));
    /// stagger::supervise(&policy, poll_once, stop).await.unwrap();
    /// assert_eq!(runs.load(Ordering::Relaxed), 3); // at 0, 15 and 30 s
    /// # Ok(())
    /// # }
    /// ```
    pub fn restart_on_return(mut self, restart: bool) -> Self {
        self.restart_on_return = restart;
        self
    }

    /// Whether a run in progress when the stop comes is left to finish. Defaults to `false`: the run's
    /// future is dropped, which cancels it at its next `.await`. With `true`,
    /// [`supervise`](crate::supervise()) waits for the run to end by itself and then returns `Ok(())`,
    /// whatever it returned; the task must watch the stop signal too (a clone of the same token), or
    /// it waits forever. A stop during the sleep before a restart ends it at once either way.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::RestartPolicy;
    /// use tokio::sync::watch;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stagger::ConfigError> {
    /// let (stop, stopped) = watch::channel(false);
    /// let policy = RestartPolicy::builder().finish_on_stop(true).build()?;
    /// let worker = || {
    ///     let mut stopped = stopped.clone();
    ///     async move {
    ///         let _ = stopped.wait_for(|&stop| stop).await;
    ///         tokio::time::sleep(Duration::from_millis(300)).await; // flushes what it holds
    ///         Ok::<(), ()>(())
    ///     }
    /// };
    /// let mut signal = stopped.clone();
    /// let supervision = stagger::supervise(&policy, worker, async move {
    ///     let _ = signal.wait_for(|&stop| stop).await;
    /// });
    /// let started = tokio::time::Instant::now();
    /// let (ended, _) = tokio::join!(supervision, async { stop.send(true) });
    /// assert!(ended.is_ok());
    /// assert_eq!(started.elapsed(), Duration::from_millis(300));
    /// # Ok(())
    /// # }
    /// ```
    pub fn finish_on_stop(mut self, finish: bool) -> Self {
        self.finish_on_stop = finish;
        self
    }

    /// Seeds the jitter, for reproducible tests and simulations. Each supervision still draws its
    /// own stream, derived from this seed. Defaults to a seed from OS entropy, never the clock.
    ///
    /// ```
    /// use stagger::RestartPolicy;
    ///
    /// let policy = RestartPolicy::builder().seed(7).build()?;
    /// # Ok::<(), stagger::ConfigError>(())
    /// ```
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Calls `hook` before every restart's sleep, with the restart, the run that ended (with its error)
    /// and the delay (a [`RestartEvent`]). Defaults to none; the `tracing` events are emitted either
    /// way.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use stagger::{Backoff, RestartEvent, RestartPolicy};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), stagger::ConfigError> {
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let events = Arc::clone(&seen);
    /// let policy = RestartPolicy::builder()
    ///     .backoff(Backoff::fixed(Duration::from_secs(1)))
    ///     .on_restart(move |event: &RestartEvent| {
    ///         let error = event.error.map(|error| error.to_string()).unwrap_or_default();
    ///         events.lock().unwrap().push((event.restart, event.failures, event.delay, error));
    ///     })
    ///     .build()?;
    /// let refused = || async { Err::<(), _>("connection refused") };
    /// let stop = tokio::time::sleep(Duration::from_millis(2500));
    /// stagger::supervise(&policy, refused, stop).await.unwrap();
    ///
    /// let seen = seen.lock().unwrap();
    /// assert_eq!(seen.len(), 3); // after the runs at 0, 1 and 2 s
    /// let second = Duration::from_secs(1);
    /// assert_eq!(seen[2], (3, 3, second, "connection refused".to_owned()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_restart(mut self, hook: impl Fn(&RestartEvent<'_>) + Send + Sync + 'static) -> Self {
        self.on_restart = Some(Box::new(hook));
        self
    }

    /// Validates the configuration and builds the policy.
    ///
    /// A [`ConfigError`] names the setting and the value refused: a meaningless backoff (see
    /// [`Backoff::validate`]), a backoff from zero (every delay zero: a task that fails at once would
    /// restart in a busy loop), a zero `healthy_after` or a zero window for `max_restarts`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, ConfigError, RestartPolicy};
    ///
    /// let error = RestartPolicy::builder().backoff(Backoff::fixed(Duration::ZERO)).build().unwrap_err();
    /// assert_eq!(error, ConfigError::RestartBackoff(Duration::ZERO));
    ///
    /// let error = RestartPolicy::builder().healthy_after(Duration::ZERO).build().unwrap_err();
    /// assert_eq!(error, ConfigError::HealthyAfter(Duration::ZERO));
    ///
    /// let error = RestartPolicy::builder().max_restarts(5, Duration::ZERO).build().unwrap_err();
    /// assert_eq!(error, ConfigError::RestartWindow(Duration::ZERO));
    /// ```
    pub fn build(self) -> Result<RestartPolicy, ConfigError> {
        self.backoff.validate()?;
        if self.backoff.initial().is_zero() {
            return Err(ConfigError::RestartBackoff(self.backoff.initial()));
        }
        if let Some(zero) = self.healthy_after.filter(Duration::is_zero) {
            return Err(ConfigError::HealthyAfter(zero));
        }
        if let Some((_, within)) = self.max_restarts.filter(|(_, within)| within.is_zero()) {
            return Err(ConfigError::RestartWindow(within));
        }
        Ok(RestartPolicy {
            shared: Arc::new(Shared {
                backoff: self.backoff,
                healthy_after: self.healthy_after,
                max_restarts: self.max_restarts,
                restart_on_return: self.restart_on_return,
                finish_on_stop: self.finish_on_stop,
                streams: StreamSource::new(self.seed.unwrap_or_else(entropy_seed)),
                on_restart: self.on_restart,
                timer: self.timer,
            }),
        })
    }
}
