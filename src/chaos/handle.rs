//! [`Chaos`]: the rules, the switch and the counts that every clone of a chaos layer or middleware
//! shares.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::fault::{Action, Fault};
use super::rule::Rule;
use crate::classify::RequestView;
use crate::engine::rng::{entropy_seed, splitmix64};
use crate::observe::log;

/// Fault injection for the calls beneath a [`ChaosLayer`](crate::chaos::ChaosLayer) or a
/// [`ChaosMiddleware`]: its [`Rule`]s, a switch that turns them on
/// and off at run time, and the counts of what it injected.
///
/// Cheap to clone, and every clone is the same chaos: keep one in the test (or behind a deployment's
/// flag) to switch it and read its counts while the clients use the others.
///
/// ```
/// use http::StatusCode;
/// use stagger::chaos::{Chaos, Fault, Rule};
///
/// let chaos = Chaos::builder()
///     .rule(Rule::rate(0.05, Fault::status(StatusCode::SERVICE_UNAVAILABLE))?)
///     .seed(7) // the same calls picked on every run
///     .enabled(false) // off until the flag says otherwise
///     .build();
/// let flag = chaos.clone();
/// flag.set_enabled(true); // takes effect on the next call
/// assert!(chaos.is_enabled());
/// assert_eq!(chaos.counts().injected(), 0);
/// # Ok::<(), stagger::ConfigError>(())
/// ```
#[cfg_attr(
    feature = "reqwest-middleware",
    doc = "[`ChaosMiddleware`]: crate::chaos::ChaosMiddleware"
)]
#[cfg_attr(
    not(feature = "reqwest-middleware"),
    doc = "[`ChaosMiddleware`]: crate#features"
)]
#[derive(Clone)]
pub struct Chaos {
    shared: Arc<Shared>,
}

struct Shared {
    enabled: AtomicBool,
    rules: Box<[Armed]>,
    seed: u64,
    counts: Tally,
}

/// A rule, its own seed and the calls it has been asked about.
struct Armed {
    rule: Rule,
    seed: u64,
    asked: AtomicU64,
}

#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    injected: AtomicU64,
    answers: AtomicU64,
    errors: AtomicU64,
    hangs: AtomicU64,
    delayed: AtomicU64,
}

impl Chaos {
    /// A builder with no rule, on, seeded from OS entropy.
    pub fn builder() -> ChaosBuilder {
        ChaosBuilder {
            rules: Vec::new(),
            seed: None,
            enabled: true,
        }
    }

    /// Chaos of one rule, on, seeded from OS entropy.
    ///
    /// ```
    /// use stagger::chaos::{Chaos, Fault, Rule};
    ///
    /// let refusing = Chaos::new(Rule::always(Fault::refused()));
    /// assert!(refusing.is_enabled());
    /// ```
    pub fn new(rule: Rule) -> Self {
        Self::builder().rule(rule).build()
    }

    /// Turns the injection on or off, for every clone, from the next call on; a fault already
    /// injected (a hang, a delay under way) runs its course. Off, a call costs one atomic load.
    pub fn set_enabled(&self, enabled: bool) {
        self.shared.enabled.store(enabled, Ordering::Relaxed);
    }

    /// Whether the injection is on.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.shared.enabled.load(Ordering::Relaxed)
    }

    /// What it has done so far, every clone's calls together.
    pub fn counts(&self) -> Counts {
        let c = &self.shared.counts;
        let load = |count: &AtomicU64| count.load(Ordering::Relaxed);
        Counts {
            calls: load(&c.calls),
            injected: load(&c.injected),
            answers: load(&c.answers),
            errors: load(&c.errors),
            hangs: load(&c.hangs),
            delayed: load(&c.delayed),
        }
    }

    /// The seed its draws come from: the one given, or the one drawn from OS entropy (worth logging
    /// in staging, to pick the same calls again).
    pub fn seed(&self) -> u64 {
        self.shared.seed
    }

    /// The fault a call to `request` gets, asked only while the chaos is on: every rule that applies
    /// counts the call, and the first one that picks a fault injects it.
    pub(crate) fn pick(&self, request: &RequestView<'_>) -> Option<Fault> {
        let shared = &*self.shared;
        shared.counts.calls.fetch_add(1, Ordering::Relaxed);
        let mut picked = None;
        for armed in shared.rules.iter() {
            if !armed.rule.applies_to(request) {
                continue;
            }
            let n = armed.asked.fetch_add(1, Ordering::Relaxed);
            let fault = armed.rule.pick(armed.seed, n, request);
            if picked.is_none() {
                picked = fault;
            }
        }
        let fault = picked?;
        shared.counts.record(&fault);
        log::injected(request, fault.kind(), &fault);
        Some(fault)
    }
}

impl Tally {
    fn record(&self, fault: &Fault) {
        let add = |count: &AtomicU64| {
            count.fetch_add(1, Ordering::Relaxed);
        };
        add(&self.injected);
        if !fault.delay().is_zero() {
            add(&self.delayed);
        }
        match fault.action {
            Action::Send => {}
            Action::Answer(_) => add(&self.answers),
            Action::Error(_) => add(&self.errors),
            Action::Hang => add(&self.hangs),
        }
    }
}

impl fmt::Debug for Chaos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chaos")
            .field("enabled", &self.is_enabled())
            .field(
                "rules",
                &self
                    .shared
                    .rules
                    .iter()
                    .map(|a| &a.rule)
                    .collect::<Vec<_>>(),
            )
            .field("seed", &self.shared.seed)
            .field("counts", &self.counts())
            .finish()
    }
}

/// Builds a [`Chaos`]: its rules, in the order they are asked, its seed, and whether it starts on.
#[derive(Debug)]
pub struct ChaosBuilder {
    rules: Vec<Rule>,
    seed: Option<u64>,
    enabled: bool,
}

impl ChaosBuilder {
    /// Adds a rule, asked after those added before it.
    pub fn rule(mut self, rule: Rule) -> Self {
        self.rules.push(rule);
        self
    }

    /// Seeds the draws of its [`Rule::rate`] and [`Rule::envoy_headers`] rules: the same seed picks
    /// the same calls. Defaults to a seed from OS entropy, never the clock.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Whether it starts on. Defaults to `true`.
    pub fn enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// The chaos.
    pub fn build(self) -> Chaos {
        let seed = self.seed.unwrap_or_else(entropy_seed);
        let rules = (self.rules.into_iter().zip(0u64..))
            .map(|(rule, i)| Armed {
                rule,
                // Each rule a seed of its own, so that two rules of one chaos draw apart.
                seed: splitmix64(seed ^ i.wrapping_mul(0xD1B5_4A32_D192_ED03)),
                asked: AtomicU64::new(0),
            })
            .collect();
        Chaos {
            shared: Arc::new(Shared {
                enabled: AtomicBool::new(self.enabled),
                rules,
                seed,
                counts: Tally::default(),
            }),
        }
    }
}

/// What a [`Chaos`] has done: the calls it was asked about while on, and what it injected.
///
/// ```
/// # #[cfg(feature = "tower")]
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use http::StatusCode;
/// use stagger::chaos::{Chaos, ChaosLayer, Fault, Rule};
/// use stagger::{RetryLayer, RetryPolicy};
/// use tower::{ServiceBuilder, ServiceExt};
///
/// // The first two attempts answered 503, the third sent to the real service.
/// let chaos = Chaos::new(Rule::script(vec![Fault::status(StatusCode::SERVICE_UNAVAILABLE); 2]));
/// let client = ServiceBuilder::new()
///     .layer(RetryLayer::new(RetryPolicy::default()))
///     .layer(ChaosLayer::new(chaos.clone()))
///     .service_fn(|_: http::Request<String>| async {
///         Ok::<_, std::convert::Infallible>(http::Response::new(String::from("fresh")))
///     });
/// let response = client.oneshot(http::Request::new(String::new())).await.unwrap();
/// assert_eq!(response.status(), StatusCode::OK);
/// let counts = chaos.counts();
/// assert_eq!((counts.calls(), counts.injected(), counts.answers()), (3, 2, 2));
/// # }
/// # #[cfg(not(feature = "tower"))]
/// # fn main() {}
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    calls: u64,
    injected: u64,
    answers: u64,
    errors: u64,
    hangs: u64,
    delayed: u64,
}

impl Counts {
    /// The calls it was asked about while on (off, it counts nothing).
    pub const fn calls(&self) -> u64 {
        self.calls
    }

    /// The calls it injected a fault into, of any kind.
    pub const fn injected(&self) -> u64 {
        self.injected
    }

    /// The calls it answered in place of the upstream.
    pub const fn answers(&self) -> u64 {
        self.answers
    }

    /// The calls it failed with an error.
    pub const fn errors(&self) -> u64 {
        self.errors
    }

    /// The calls it left hanging.
    pub const fn hangs(&self) -> u64 {
        self.hangs
    }

    /// The calls it delayed: latency, or a fault [after](Fault::after) a delay.
    pub const fn delayed(&self) -> u64 {
        self.delayed
    }
}
