//! The retry budget shared by every clone of a policy.
//!
//! # Why a budget, and not just a maximum number of retries
//!
//! `max_retries = 3` bounds what one request costs, not what a fleet costs: when a dependency fails
//! outright, every request is retried three times and the failing server sees four times its normal load
//! at the moment it can least take it. A budget bounds the *ratio* of retries to requests instead: each
//! request deposits, each retry withdraws, and when the account is empty retries stop until requests
//! refill it. Under a total outage the extra load stays at the budget's percentage (20 % by default), plus
//! a small floor of retries per second so that a client sending few requests can still retry at all.
//!
//! # Why not `tower::retry::budget::TpsBudget`
//!
//! The accounting is Finagle's, as in tower's `TpsBudget`: deposits and withdrawals land in ten slots
//! that together span the window, and a slot's balance expires with it. stagger keeps that model but not
//! that type, for three reasons measured against it (tower 0.5.3):
//!
//! - **It rounds the percentage.** `TpsBudget` charges a whole number of deposits per retry, so 40 %
//!   becomes 50 % and 30 % becomes 33 %. Here a deposit is worth `percent` thousandths of a unit and a
//!   retry costs 100 of them: any percentage with three decimals is exact.
//! - **It can overdraw.** Its withdrawal checks the balance and subtracts in two steps, so concurrent
//!   retries can all pass the check. Here withdrawals check and subtract under one short lock; they happen
//!   only on the failure path.
//! - **It costs every request a lock and a clock read** (69 ns per deposit in `benches/tower.rs`, more
//!   than the rest of stagger's success path). Here a deposit is two relaxed atomic additions; the clock
//!   is read by one deposit in 64 and by every withdrawal, to move the window along.
//!
//! The window is kept on `tokio::time::Instant`, so tests with a paused clock see it expire.

use std::num::NonZeroU64;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::ConfigError;

/// The shape of a retry budget: how much extra load retries may add.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct BudgetConfig {
    /// How long a deposit or a withdrawal counts.
    pub(crate) window: Duration,
    /// Retries per second always allowed, whatever the traffic.
    pub(crate) min_per_second: u32,
    /// Retries allowed per 100 requests.
    pub(crate) percent: f32,
}

impl Default for BudgetConfig {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(10),
            min_per_second: 10,
            percent: 20.0,
        }
    }
}

impl BudgetConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1000.0).contains(&self.percent) {
            return Err(ConfigError::BudgetPercent(self.percent));
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&self.window) {
            return Err(ConfigError::BudgetWindow(self.window));
        }
        Ok(())
    }

    /// Builds the budget of a validated configuration.
    pub(crate) fn build(&self) -> RetryBudget {
        RetryBudget::new(self)
    }
}

/// Slots across the window: a deposit expires between 90 % and 100 % of the window after it was made.
const SLOTS: usize = 10;
/// What one retry costs, in units; a deposit is worth `percent × 1000` units.
const RETRY_COST: i64 = 100_000;
/// A deposit reads the clock once in this many, to move the window along without a per-request clock.
const CLOCK_EVERY: u64 = 64;

/// One retry taken from a [`RetryBudget`]: the slot it was taken in, plus one (so that an
/// `Option<Withdrawal>` is a single word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Withdrawal(NonZeroU64);

/// A Finagle-style retry budget: a sliding window of deposits (one per request) and withdrawals (one per
/// retry) over a floor of retries per second.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    origin: Instant,
    slot: Duration,
    /// How many slots have begun since `origin`; moved along under `rotation`.
    epoch: AtomicU64,
    balances: [AtomicI64; SLOTS],
    deposits: AtomicU64,
    reserve: i64,
    deposit: i64,
    /// Serialises the rare writers: moving the window, and withdrawals' check-and-subtract.
    rotation: Mutex<()>,
}

impl RetryBudget {
    fn new(config: &BudgetConfig) -> Self {
        // Both products stay far below `i64::MAX`: percent ≤ 1000 and min_per_second × 60 s × 100 000 < 2^55.
        let deposit = (f64::from(config.percent) * 1000.0).round() as i64;
        let reserve = (f64::from(config.min_per_second)
            * config.window.as_secs_f64()
            * RETRY_COST as f64) as i64;
        Self {
            origin: Instant::now(),
            slot: config.window / SLOTS as u32,
            epoch: AtomicU64::new(0),
            balances: Default::default(),
            deposits: AtomicU64::new(0),
            reserve,
            deposit,
            rotation: Mutex::new(()),
        }
    }

    /// Records one request.
    pub(crate) fn deposit(&self) {
        if self
            .deposits
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(CLOCK_EVERY)
        {
            let _guard = self.lock();
            self.rotate(Instant::now());
        }
        let epoch = self.epoch.load(Ordering::Relaxed);
        self.balances[slot_of(epoch)].fetch_add(self.deposit, Ordering::Relaxed);
    }

    /// Takes one retry from the budget, if the balance allows it: the withdrawal, to give back with
    /// [`refund`](Self::refund) should the retry never be sent.
    pub(crate) fn withdraw(&self) -> Option<Withdrawal> {
        let _guard = self.lock();
        let epoch = self.rotate(Instant::now());
        let balance = self
            .balances
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .fold(self.reserve, i64::saturating_add);
        if balance < RETRY_COST {
            return None;
        }
        self.balances[slot_of(epoch)].fetch_sub(RETRY_COST, Ordering::Relaxed);
        Some(Withdrawal(NonZeroU64::MIN.saturating_add(epoch)))
    }

    /// Gives back a withdrawal whose retry was never sent (the call was cancelled, or ran out of time,
    /// before it), in the slot it was taken from. A withdrawal that has already expired with the window
    /// has nothing left to give back.
    pub(crate) fn refund(&self, withdrawal: Withdrawal) {
        let _guard = self.lock();
        let epoch = withdrawal.0.get() - 1;
        let current = self.rotate(Instant::now());
        if current - epoch < SLOTS as u64 {
            self.balances[slot_of(epoch)].fetch_add(RETRY_COST, Ordering::Relaxed);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        // The guarded data is `()`: a panic elsewhere cannot leave it inconsistent.
        self.rotation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Moves the window to `now`, clearing the slots that expired; the caller holds `rotation`.
    fn rotate(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.origin);
        let target =
            u64::try_from(elapsed.as_nanos() / self.slot.as_nanos().max(1)).unwrap_or(u64::MAX);
        let current = self.epoch.load(Ordering::Relaxed);
        if target > current {
            let expired = (target - current).min(SLOTS as u64);
            for k in 0..expired {
                self.balances[slot_of(target - k)].store(0, Ordering::Relaxed);
            }
            self.epoch.store(target, Ordering::Relaxed);
        }
        target.max(current)
    }
}

fn slot_of(epoch: u64) -> usize {
    (epoch % SLOTS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(percent: f32, min_per_second: u32, window_secs: u64) -> RetryBudget {
        let config = BudgetConfig {
            window: Duration::from_secs(window_secs),
            min_per_second,
            percent,
        };
        config.validate().unwrap();
        config.build()
    }

    fn drain(budget: &RetryBudget) -> u32 {
        let mut granted = 0;
        while budget.withdraw().is_some() {
            granted += 1;
        }
        granted
    }

    #[tokio::test(start_paused = true)]
    async fn percentages_are_exact() {
        for (percent, want) in [
            (20.0, 200),
            (40.0, 400),
            (30.0, 300),
            (12.5, 125),
            (250.0, 2500),
        ] {
            let b = budget(percent, 0, 10);
            for _ in 0..1000 {
                b.deposit();
            }
            assert_eq!(drain(&b), want, "{percent} %");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_floor_is_min_per_second_over_the_window() {
        let b = budget(0.0, 10, 10);
        assert_eq!(drain(&b), 100);
    }

    #[tokio::test(start_paused = true)]
    async fn deposits_and_withdrawals_expire_with_the_window() {
        let b = budget(100.0, 0, 10);
        let batch = CLOCK_EVERY as u32;
        for _ in 0..batch {
            b.deposit();
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        for _ in 0..batch {
            b.deposit();
        }
        // At 10.5 s the first batch has expired and the second has not.
        tokio::time::advance(Duration::from_millis(5500)).await;
        assert_eq!(drain(&b), batch);
        // At 15.5 s the second batch has expired too, but the withdrawals made at 10.5 s still count.
        tokio::time::advance(Duration::from_secs(5)).await;
        for _ in 0..batch {
            b.deposit();
        }
        assert_eq!(drain(&b), 0);
        // At 25.5 s everything has expired.
        tokio::time::advance(Duration::from_secs(10)).await;
        for _ in 0..batch {
            b.deposit();
        }
        assert_eq!(drain(&b), batch);
    }

    #[tokio::test(start_paused = true)]
    async fn deposits_between_clock_readings_land_in_the_last_slot_read() {
        // The documented approximation: after a quiet spell, up to CLOCK_EVERY - 1 deposits are counted
        // in the slot of the last clock reading, and expire with it.
        let b = budget(100.0, 0, 10);
        b.deposit();
        tokio::time::advance(Duration::from_secs(9)).await;
        for _ in 1..CLOCK_EVERY {
            b.deposit();
        }
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(drain(&b), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_reserve_comes_back_as_withdrawals_expire() {
        let b = budget(0.0, 1, 1);
        assert!(b.withdraw().is_some());
        assert!(b.withdraw().is_none());
        tokio::time::advance(Duration::from_millis(1100)).await;
        assert!(b.withdraw().is_some());
    }

    #[test]
    fn concurrent_withdrawals_never_overdraw() {
        let b = std::sync::Arc::new(budget(0.0, 100, 1));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || (0..1000).filter(|_| b.withdraw().is_some()).count())
            })
            .collect();
        let granted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(granted, 100);
    }
}
