//! Delay arithmetic: capped exponential backoff and its jitters. No I/O, no clock, no sleeping.

use std::time::Duration;

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::SmallRng;

use crate::error::ConfigError;

/// How a delay is drawn below the backoff's ceiling.
///
/// With `c(n) = min(max_delay, initial · base^(n−1))` the ceiling before retry `n`:
///
/// | jitter         | waits before retry `n`                                   |
/// |----------------|----------------------------------------------------------|
/// | `None`         | `c(n)`                                                   |
/// | `Full`         | `U[0, c(n)]`                                             |
/// | `Equal`        | `c(n)/2 + U[0, c(n)/2]`                                  |
/// | `Decorrelated` | `d(n) = min(max_delay, U[initial, 3·d(n−1)])`, `d(0) = initial` |
///
/// The formulas are those of "Exponential Backoff and Jitter" (AWS Architecture Blog, 2015). Jitter is
/// applied *under* the cap, so no jitter ever waits longer than `max_delay`.
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, Jitter};
///
/// let backoff = Backoff::exponential(Duration::from_millis(100)).with_jitter(Jitter::Equal);
/// // Equal jitter waits at least half the ceiling, and never more than the ceiling.
/// for (n, delay) in (1..).zip(backoff.delays_seeded(1).take(8)) {
///     let ceiling = backoff.ceiling(n);
///     assert!(ceiling / 2 <= delay && delay <= ceiling);
/// }
///
/// // Decorrelated jitter grows from the previous delay instead, and stays under `max_delay` too.
/// let backoff = backoff.with_jitter(Jitter::Decorrelated).with_max_delay(Duration::from_secs(1));
/// assert!(backoff.delays_seeded(1).take(50).all(|delay| delay <= Duration::from_secs(1)));
/// ```
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Jitter {
    /// No randomness: every client waits exactly the ceiling. Clients that failed together retry together.
    None,
    /// Uniform between zero and the ceiling. The default: the least total work for a contended server.
    Full,
    /// Half the ceiling, plus uniform up to the other half: never retries almost at once.
    Equal,
    /// Uniform between `initial` and three times the previous delay, capped; grows without a base.
    Decorrelated,
}

/// Capped exponential backoff with jitter: the delays before retry 1, 2, 3, …
///
/// Before retry `n` (that is, after the `n`-th failed attempt) the ceiling is
///
/// ```text
/// c(n) = min(max_delay, initial · base^(n−1))
/// ```
///
/// so 100 ms with base 2 gives ceilings of 100, 200, 400, 800 ms, … The [`Jitter`] then draws the actual
/// delay at or below the ceiling. `max_delay` is a true maximum: no delay ever exceeds it.
///
/// # Default
///
/// [`Backoff::exponential`] starts with base `2.0`, `max_delay` 20 s and [`Jitter::Full`];
/// [`Backoff::fixed`] waits its delay every time, without jitter.
///
/// # Saturation
///
/// Every computation saturates: any `n` up to `u32::MAX`, any finite base and durations up to
/// [`Duration::MAX`] give an answer no greater than `max_delay`, never a panic. Setters accept any value;
/// [`Backoff::validate`] (called by [`RetryPolicy`](crate::RetryPolicy)'s builder) rejects the
/// meaningless ones with a [`ConfigError`].
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, Jitter};
///
/// let backoff = Backoff::exponential(Duration::from_millis(100))
///     .with_max_delay(Duration::from_secs(5))
///     .with_jitter(Jitter::None);
/// let delays: Vec<_> = backoff.delays().take(4).collect();
/// assert_eq!(delays, [100, 200, 400, 800].map(Duration::from_millis));
///
/// // Full jitter, reproducibly: every delay is at or below its ceiling.
/// let backoff = backoff.with_jitter(Jitter::Full);
/// for (n, delay) in (1..).zip(backoff.delays_seeded(7).take(10)) {
///     assert!(delay <= backoff.ceiling(n));
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    initial: Duration,
    base: f64,
    max_delay: Duration,
    jitter: Jitter,
}

impl Backoff {
    /// The default `max_delay` of [`Backoff::exponential`]: 20 s.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use stagger::Backoff;
    /// let backoff = Backoff::exponential(Duration::from_millis(100));
    /// assert_eq!(backoff.max_delay(), Backoff::DEFAULT_MAX_DELAY);
    /// assert_eq!(Backoff::DEFAULT_MAX_DELAY, Duration::from_secs(20));
    /// ```
    pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(20);

    /// Exponential backoff whose first ceiling is `initial`: base `2.0`, `max_delay` 20 s, full jitter.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, Jitter};
    ///
    /// let backoff = Backoff::exponential(Duration::from_millis(100));
    /// assert_eq!(backoff.initial(), Duration::from_millis(100));
    /// assert_eq!(backoff.base(), 2.0);
    /// assert_eq!(backoff.max_delay(), Duration::from_secs(20));
    /// assert_eq!(backoff.jitter(), Jitter::Full);
    /// // Ceilings of 100, 200, 400 ms…; full jitter draws each delay at or below its ceiling.
    /// assert_eq!(backoff.ceiling(3), Duration::from_millis(400));
    /// ```
    pub const fn exponential(initial: Duration) -> Self {
        Self {
            initial,
            base: 2.0,
            max_delay: Self::DEFAULT_MAX_DELAY,
            jitter: Jitter::Full,
        }
    }

    /// The same `delay` before every retry, without jitter (add one with [`Backoff::jitter`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, Jitter};
    ///
    /// let backoff = Backoff::fixed(Duration::from_millis(250));
    /// assert!(backoff.delays().take(5).all(|delay| delay == Duration::from_millis(250)));
    ///
    /// // With jitter, each delay is drawn up to 250 ms instead, so that clients spread out.
    /// let spread = backoff.with_jitter(Jitter::Full);
    /// assert!(spread.delays().take(5).all(|delay| delay <= Duration::from_millis(250)));
    /// ```
    pub const fn fixed(delay: Duration) -> Self {
        Self {
            initial: delay,
            base: 1.0,
            max_delay: delay,
            jitter: Jitter::None,
        }
    }

    /// Sets the multiplier between consecutive ceilings. Defaults to `2.0`.
    ///
    /// A base below `1.0`, NaN or infinite is refused by [`Backoff::validate`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::Backoff;
    ///
    /// let backoff = Backoff::exponential(Duration::from_millis(100)).with_base(3.0);
    /// let ceilings: Vec<_> = (1..=4).map(|n| backoff.ceiling(n)).collect();
    /// assert_eq!(ceilings, [100, 300, 900, 2700].map(Duration::from_millis));
    /// ```
    pub const fn with_base(mut self, base: f64) -> Self {
        self.base = base;
        self
    }

    /// Sets the largest delay ever returned. Defaults to 20 s ([`Backoff::DEFAULT_MAX_DELAY`]).
    ///
    /// A `max_delay` below the initial delay is refused by [`Backoff::validate`]; used anyway, the cap wins.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, Jitter};
    ///
    /// let backoff = Backoff::exponential(Duration::from_secs(1))
    ///     .with_max_delay(Duration::from_secs(5))
    ///     .with_jitter(Jitter::None);
    /// let delays: Vec<_> = backoff.delays().take(5).collect();
    /// assert_eq!(delays, [1, 2, 4, 5, 5].map(Duration::from_secs));
    /// ```
    pub const fn with_max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }

    /// Sets how delays are drawn below the ceiling. Defaults to [`Jitter::Full`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, Jitter};
    ///
    /// let backoff = Backoff::exponential(Duration::from_millis(100));
    /// // Without jitter every delay is its ceiling: predictable, and every client retries together.
    /// let delays: Vec<_> = backoff.with_jitter(Jitter::None).delays().take(3).collect();
    /// assert_eq!(delays, [100, 200, 400].map(Duration::from_millis));
    /// ```
    pub const fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// The first ceiling, `c(1)` before the cap.
    pub const fn initial(&self) -> Duration {
        self.initial
    }

    /// The multiplier between consecutive ceilings.
    pub const fn base(&self) -> f64 {
        self.base
    }

    /// The largest delay ever returned.
    pub const fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// The jitter in use.
    pub const fn jitter(&self) -> Jitter {
        self.jitter
    }

    /// Checks that the configuration means something: a finite base of at least `1.0`, and a `max_delay`
    /// no smaller than the initial delay.
    ///
    /// [`RetryPolicyBuilder::build`](crate::RetryPolicyBuilder::build) calls it, so a policy never holds
    /// a meaningless backoff.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{Backoff, ConfigError, RetryPolicy};
    ///
    /// let backoff = Backoff::exponential(Duration::from_secs(1)).with_max_delay(Duration::from_millis(500));
    /// let refused = ConfigError::MaxDelayBelowInitial {
    ///     max_delay: Duration::from_millis(500),
    ///     initial: Duration::from_secs(1),
    /// };
    /// assert_eq!(backoff.validate(), Err(refused.clone()));
    /// assert_eq!(RetryPolicy::builder().backoff(backoff).build().unwrap_err(), refused);
    ///
    /// let shrinking = Backoff::exponential(Duration::from_secs(1)).with_base(0.5);
    /// assert_eq!(shrinking.validate(), Err(ConfigError::InvalidBase(0.5)));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.base.is_finite() || self.base < 1.0 {
            return Err(ConfigError::InvalidBase(self.base));
        }
        if self.max_delay < self.initial {
            return Err(ConfigError::MaxDelayBelowInitial {
                max_delay: self.max_delay,
                initial: self.initial,
            });
        }
        Ok(())
    }

    /// The ceiling before retry `n`: `min(max_delay, initial · base^(n−1))`.
    ///
    /// `n` counts retries from 1; `ceiling(0)` is treated as `ceiling(1)`. Saturates to `max_delay`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::Backoff;
    ///
    /// let backoff = Backoff::exponential(Duration::from_millis(100)).with_max_delay(Duration::from_secs(1));
    /// assert_eq!(backoff.ceiling(1), Duration::from_millis(100));
    /// assert_eq!(backoff.ceiling(4), Duration::from_millis(800));
    /// assert_eq!(backoff.ceiling(5), Duration::from_secs(1)); // 1.6 s, capped
    /// assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(1)); // no overflow
    /// ```
    pub fn ceiling(&self, n: u32) -> Duration {
        let exponent = n.saturating_sub(1);
        let initial = self.initial.min(self.max_delay);
        if exponent == 0 || self.base == 1.0 {
            return initial;
        }
        if self.base == 2.0 {
            // Exact in integers: a shift instead of a power, while the product fits in a u64.
            if let (Some(nanos), Some(max)) = (nanos_u64(initial), nanos_u64(self.max_delay)) {
                if nanos == 0 {
                    return initial;
                }
                if exponent <= nanos.leading_zeros() && nanos << exponent < max {
                    return Duration::from_nanos(nanos << exponent);
                }
                return self.max_delay;
            }
        }
        let factor = match i32::try_from(exponent) {
            Ok(e) => self.base.powi(e),
            Err(_) => self.base.powf(f64::from(exponent)),
        };
        let nanos = nanos_f64(initial) * factor;
        // `!(a < b)` rather than `a >= b`: a NaN product (NaN base) must saturate too.
        #[allow(clippy::neg_cmp_op_on_partial_ord)]
        if !(nanos < nanos_f64(self.max_delay)) {
            return self.max_delay;
        }
        from_nanos_f64(nanos).min(self.max_delay)
    }

    /// The jittered delays before retry 1, 2, 3, …, drawn from a generator seeded from OS entropy.
    ///
    /// The iterator never ends; `take` what you need.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::Backoff;
    ///
    /// let backoff = Backoff::exponential(Duration::from_millis(100));
    /// let delays: Vec<Duration> = backoff.delays().take(3).collect();
    /// // Full jitter: each delay is anywhere from zero to its ceiling, 100, 200 and 400 ms.
    /// for (n, delay) in (1..).zip(delays) {
    ///     assert!(delay <= backoff.ceiling(n));
    /// }
    /// ```
    pub fn delays(&self) -> Delays {
        Delays::new(
            *self,
            SmallRng::seed_from_u64(crate::engine::rng::entropy_seed()),
        )
    }

    /// The jittered delays before retry 1, 2, 3, …, the same sequence for the same `seed`.
    ///
    /// For tests and simulations; a policy seeds its requests' delays with
    /// [`RetryPolicyBuilder::seed`](crate::RetryPolicyBuilder::seed).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::Backoff;
    ///
    /// let backoff = Backoff::exponential(Duration::from_millis(100));
    /// let first: Vec<_> = backoff.delays_seeded(42).take(5).collect();
    /// let again: Vec<_> = backoff.delays_seeded(42).take(5).collect();
    /// assert_eq!(first, again);
    /// ```
    pub fn delays_seeded(&self, seed: u64) -> Delays {
        Delays::new(*self, SmallRng::seed_from_u64(seed))
    }
}

/// The running state of one sequence of delays: the retry count, the current ceiling, the previous delay
/// (for [`Jitter::Decorrelated`]) and the generator. Allocation-free and lock-free.
///
/// Whenever `max_delay` fits in a `u64` of nanoseconds (584 years) — that is, always in practice — a
/// draw is integer arithmetic on nanoseconds: the ceiling is carried from one retry to the next (a shift
/// for base 2, which is exact), and a jittered draw is one multiply. Larger caps take the general path.
#[derive(Debug, Clone)]
pub(crate) struct DelayState {
    retries: u32,
    /// `c(retries)` in nanoseconds (fast path); once it reaches `max` it stays there.
    ceiling: u64,
    /// The previous delay in nanoseconds, for [`Jitter::Decorrelated`] (fast path).
    previous: u64,
    /// `min(initial, max_delay)` and `max_delay` in nanoseconds, or `None` when `max_delay` does not
    /// fit in a `u64` of nanoseconds.
    nanos: Option<(u64, u64)>,
    /// The previous delay for [`Jitter::Decorrelated`] on the general path.
    previous_slow: Duration,
    rng: SmallRng,
}

impl DelayState {
    pub(crate) fn new(backoff: &Backoff, rng: SmallRng) -> Self {
        let nanos = nanos_u64(backoff.max_delay).map(|max| {
            let initial = nanos_u64(backoff.initial).map_or(max, |initial| initial.min(max));
            (initial, max)
        });
        let initial = nanos.map_or(0, |(initial, _)| initial);
        Self {
            retries: 0,
            ceiling: initial,
            previous: initial,
            nanos,
            previous_slow: backoff.initial,
            rng,
        }
    }

    /// Draws the delay before the next retry and advances the count.
    #[inline]
    pub(crate) fn next_delay(&mut self, backoff: &Backoff) -> Duration {
        self.retries = self.retries.saturating_add(1);
        match self.nanos {
            Some((initial, max)) => Duration::from_nanos(self.next_nanos(backoff, initial, max)),
            None => self.next_delay_slow(backoff),
        }
    }

    /// [`DelayState::next_delay`] in nanoseconds, for a `max_delay` that fits in a `u64`.
    #[inline]
    fn next_nanos(&mut self, backoff: &Backoff, initial: u64, max: u64) -> u64 {
        if backoff.jitter == Jitter::Decorrelated {
            // d(n) = min(max, U[initial, 3·d(n−1)]): the cap comes after the draw, not on 3·d(n−1).
            // `previous` starts at `initial` and no delay is below it (nor is `max`), so `high - initial`
            // cannot wrap.
            let delay = match self.previous.checked_mul(3) {
                Some(high) => initial + uniform_nanos(&mut self.rng, high - initial),
                None => decorrelated_beyond_u64(&mut self.rng, initial, self.previous),
            }
            .min(max);
            self.previous = delay;
            return delay;
        }
        if self.retries > 1 && self.ceiling < max {
            self.ceiling = if backoff.base == 2.0 {
                // c(n) = min(max, 2·c(n−1)) exactly, without a power.
                self.ceiling.saturating_mul(2).min(max)
            } else {
                nanos_u64(backoff.ceiling(self.retries)).map_or(max, |c| c.min(max))
            };
        }
        let ceiling = self.ceiling;
        match backoff.jitter {
            Jitter::Full => uniform_nanos(&mut self.rng, ceiling),
            Jitter::Equal => {
                let half = ceiling / 2;
                // `ceiling - half` rather than `half` again, so an odd nanosecond is not lost.
                half + uniform_nanos(&mut self.rng, ceiling - half)
            }
            _ => ceiling,
        }
    }

    /// The general path, in [`Duration`]s, for caps beyond 584 years.
    #[cold]
    fn next_delay_slow(&mut self, backoff: &Backoff) -> Duration {
        let delay = match backoff.jitter {
            Jitter::None => backoff.ceiling(self.retries),
            Jitter::Full => uniform(&mut self.rng, backoff.ceiling(self.retries)),
            Jitter::Equal => {
                let ceiling = backoff.ceiling(self.retries);
                let half = ceiling / 2;
                half + uniform(&mut self.rng, ceiling - half)
            }
            Jitter::Decorrelated => {
                // In u128 nanoseconds, where 3·d(n−1) fits even for `Duration::MAX`; capped after the
                // draw, as on the fast path.
                let low = backoff.initial.min(backoff.max_delay).as_nanos();
                let high = self.previous_slow.as_nanos() * 3;
                let drawn = low + uniform_nanos_u128(&mut self.rng, high.saturating_sub(low));
                let delay = from_nanos_u128(drawn).min(backoff.max_delay);
                self.previous_slow = delay;
                delay
            }
        };
        delay.min(backoff.max_delay)
    }

    /// Starts the schedule over: the next delay is the first one's again (its random stream goes on).
    /// gRPC's pushback asks for it (A6: after a retry the server timed, the backoff resets).
    pub(crate) fn restart(&mut self, backoff: &Backoff) {
        if let Some((initial, _)) = self.nanos {
            self.ceiling = initial;
            self.previous = initial;
        }
        self.previous_slow = backoff.initial;
        self.retries = 0;
    }

    /// A uniform draw in `[0, upper]`, for spreading a `Retry-After` floor.
    pub(crate) fn uniform(&mut self, upper: Duration) -> Duration {
        uniform(&mut self.rng, upper)
    }

    /// A uniform draw in `[0, 1)`, for a rejection with some probability.
    pub(crate) fn unit(&mut self) -> f64 {
        // The top 53 bits as the mantissa: every value a multiple of 2⁻⁵³, below 1.
        (self.rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The jittered delays of a [`Backoff`], from [`Backoff::delays`] or [`Backoff::delays_seeded`].
///
/// An endless [`Iterator`] of [`Duration`]s, the delay before retry 1, 2, 3, …; a clone goes on with
/// the same sequence from where it was cloned.
///
/// ```
/// use std::time::Duration;
/// use stagger::{Backoff, Delays};
///
/// let mut delays: Delays = Backoff::exponential(Duration::from_millis(100)).delays_seeded(7);
/// let first = delays.next().unwrap();
/// assert!(first <= Duration::from_millis(100));
///
/// let copy = delays.clone();
/// assert!(delays.take(3).eq(copy.take(3)));
/// ```
#[derive(Debug, Clone)]
pub struct Delays {
    backoff: Backoff,
    state: DelayState,
}

impl Delays {
    fn new(backoff: Backoff, rng: SmallRng) -> Self {
        Self {
            state: DelayState::new(&backoff, rng),
            backoff,
        }
    }
}

impl Iterator for Delays {
    type Item = Duration;

    #[inline]
    fn next(&mut self) -> Option<Duration> {
        Some(self.state.next_delay(&self.backoff))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::MAX, None)
    }
}

/// [`uniform`] on nanoseconds: `[0, upper)` (`[0, 0]` for zero) from one draw and one multiply.
#[inline]
fn uniform_nanos(rng: &mut SmallRng, upper: u64) -> u64 {
    ((u128::from(upper) * u128::from(rng.next_u64())) >> 64) as u64
}

/// [`Jitter::Decorrelated`]'s draw `initial + U[0, 3·previous − initial)` when `3·previous` overflows a
/// `u64` of nanoseconds (only under a `max_delay` beyond 195 years), saturating at `u64::MAX` for the cap
/// that follows.
#[cold]
fn decorrelated_beyond_u64(rng: &mut SmallRng, initial: u64, previous: u64) -> u64 {
    let initial = u128::from(initial);
    let drawn = initial + uniform_nanos_u128(rng, u128::from(previous) * 3 - initial);
    u64::try_from(drawn).unwrap_or(u64::MAX)
}

/// [`uniform_nanos`] for any `u128` bound, `[0, upper)` (`[0, 0]` for zero) from one `u64` draw.
#[inline]
fn uniform_nanos_u128(rng: &mut SmallRng, upper: u128) -> u128 {
    let r = u128::from(rng.next_u64());
    // Split the bound so neither product overflows 128 bits: (2^64 − 1)² + 2^64 − 1 < 2^128.
    let high = (upper >> 64) * r;
    let low = ((upper & u128::from(u64::MAX)) * r) >> 64;
    high + low
}

/// A duration's nanoseconds as a `u64`, if they fit (below 584 years).
#[inline]
fn nanos_u64(d: Duration) -> Option<u64> {
    d.as_secs()
        .checked_mul(1_000_000_000)?
        .checked_add(u64::from(d.subsec_nanos()))
}

/// A uniform draw in `[0, upper)` (`[0, 0]` for zero), by Lemire's multiply-shift: one `u64` draw, no
/// division, no rejection loop. The bias is below `upper / 2^64`, far under a nanosecond.
#[inline]
fn uniform(rng: &mut SmallRng, upper: Duration) -> Duration {
    match nanos_u64(upper) {
        // Any delay under 584 years: the common path.
        Some(upper) => Duration::from_nanos(uniform_nanos(rng, upper)),
        None => from_nanos_u128(uniform_nanos_u128(rng, upper.as_nanos())),
    }
}

/// A duration's nanoseconds as `f64`, without the slow `u128` conversion; exact below 2^53 ns (104 days).
fn nanos_f64(d: Duration) -> f64 {
    d.as_secs() as f64 * 1e9 + f64::from(d.subsec_nanos())
}

/// The duration of a non-negative, finite number of nanoseconds, rounded; negative becomes zero.
fn from_nanos_f64(nanos: f64) -> Duration {
    let nanos = nanos.round();
    // `as` saturates: a negative product becomes zero.
    if nanos < u64::MAX as f64 {
        Duration::from_nanos(nanos as u64)
    } else {
        from_nanos_u128(nanos as u128)
    }
}

/// `Duration::from_nanos` for a `u128`, saturating at [`Duration::MAX`].
fn from_nanos_u128(nanos: u128) -> Duration {
    const NANOS_PER_SEC: u128 = 1_000_000_000;
    match u64::try_from(nanos / NANOS_PER_SEC) {
        Ok(secs) => Duration::new(secs, (nanos % NANOS_PER_SEC) as u32),
        Err(_) => Duration::MAX,
    }
}

#[cfg(test)]
mod tests;
