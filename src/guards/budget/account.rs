//! The account behind a [`RetryBudget`](super::RetryBudget): Finagle's sliding window of deposits and
//! withdrawals, exact for any ratio, never overdrawn, and free of locks and clock reads on deposits;
//! and the pace its retries are spent at, which never runs ahead of what the requests earn by more
//! than one second's worth.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::time::Instant;

use super::{RetryBudgetBuilder, credit};
use crate::guards::hosts::Host;

mod carry;
mod pace;
mod withdrawal;

use pace::{Pace, Recent};
use withdrawal::Source;
pub(crate) use withdrawal::Withdrawal;

/// Slots across the window: a deposit expires between 90 % and 100 % of the window after it was made.
const SLOTS: usize = 10;
/// What one retry costs, in units; a deposit is worth `ratio × RETRY_COST` units.
const RETRY_COST: i64 = 100_000;
/// A deposit reads the clock once in this many, to move the window along without a per-request clock.
const CLOCK_EVERY: u64 = 64;

/// What a retry is of, which decides what it may spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryKind {
    /// Any retry but a timeout's: one retry's worth, floor included.
    Plain,
    /// A retry of a timed-out attempt: `TIMEOUT_COST` retries' worth, from the deposits of the window
    /// and of its last `RECENT_SLOTS` slots alike, never the floor; or, for a call of the account's
    /// first window, from the starting credit.
    Timeout,
}

/// What retrying a timeout costs, in retries (`docs/metastable.md` has the figures of 1 to 5).
pub(crate) const TIMEOUT_COST: u8 = 4;

/// The slots (tenths of the window) whose deposits must also pay for a timeout's retry on their own:
/// a burst of timeouts after a calm spell spends what the requests sent while the server was slow
/// paid in, not the whole window banked before it.
const RECENT_SLOTS: u64 = 2;

/// The starting credit, in seconds of the floor: what the first timeouts, which no deposits can
/// pay for yet, may spend.
const STARTING_CREDIT_SECONDS: i64 = 1;

/// The account behind a [`RetryBudget`](super::RetryBudget) and all its clones: a Finagle-style
/// sliding window of deposits (one per request) and withdrawals (one per retry) over a floor of
/// retries per second, and the pace they are spent at.
#[derive(Debug)]
pub(crate) struct Account {
    origin: Instant,
    slot: Duration,
    /// How many slots have begun since `origin`; moved along under `rotation`.
    epoch: AtomicU64,
    /// What each slot's requests paid in, in units.
    paid: [AtomicI64; SLOTS],
    /// What each slot's retries took out, in units.
    taken: [AtomicI64; SLOTS],
    deposits: AtomicU64,
    /// What the requests of the last ticks paid in: what the pace lets a burst spend at once.
    recent: Recent,
    reserve: i64,
    deposit: i64,
    /// What is left of the starting credit, in units, for the timeouts of requests without a host
    /// (a host's own credit is the process's: see `credit.rs` and `RetryBudget`'s "Timeouts").
    credit: AtomicI64,
    /// The starting credit's size, in units: one second of the floor.
    credit_size: i64,
    /// Serialises the rare writers: moving the window, and withdrawals' check-and-subtract, which
    /// the pace of spending is kept under.
    rotation: Mutex<Pace>,
    /// The validated shape, as configured, for the accessors and `Debug`.
    pub(crate) shape: RetryBudgetBuilder,
    /// Whether retries are spent at the pace they are earned ([`Pace`]); off only in the tests of
    /// the window alone.
    paced: bool,
}

impl Account {
    pub(crate) fn new(shape: RetryBudgetBuilder) -> Self {
        // Both products stay far below `i64::MAX`: ratio ≤ 1 and min_per_second × 60 s × 100 000 < 2^55.
        let deposit = (shape.ratio * RETRY_COST as f64).round() as i64;
        let reserve = (f64::from(shape.min_per_second)
            * shape.window.as_secs_f64()
            * RETRY_COST as f64) as i64;
        let credit_size = i64::from(shape.min_per_second) * RETRY_COST * STARTING_CREDIT_SECONDS;
        Self {
            origin: Instant::now(),
            slot: shape.window / SLOTS as u32,
            epoch: AtomicU64::new(0),
            paid: Default::default(),
            taken: Default::default(),
            deposits: AtomicU64::new(0),
            recent: Recent::default(),
            reserve,
            deposit,
            credit: AtomicI64::new(credit_size),
            credit_size,
            rotation: Mutex::new(Pace::default()),
            shape,
            paced: true,
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
        self.paid[slot_of(epoch)].fetch_add(self.deposit, Ordering::Relaxed);
        if self.paced {
            self.recent.add(self.deposit);
        }
    }

    /// Takes one retry of `kind` for a request to `host` of a call that started at `call_started`, if
    /// the balance allows it.
    #[cfg(test)]
    pub(crate) fn withdraw(
        &self,
        kind: RetryKind,
        host: Option<Host>,
        call_started: Instant,
    ) -> Option<Withdrawal> {
        self.withdraw_spread(kind, host, call_started, false)
    }

    /// Takes one retry, as `withdraw` does; for a retry that its host's cooldown spreads (`spread`): the
    /// host paused or paces its requests, and the retry waits its turn, at the rate the host admits.
    /// Such a retry is bounded by the window, as every retry, but not by the pace: the cooldown is its
    /// pace already, and a burst of `429`s from a rate limiter is answered by waiting, not failing.
    pub(crate) fn withdraw_spread(
        &self,
        kind: RetryKind,
        host: Option<Host>,
        call_started: Instant,
        spread: bool,
    ) -> Option<Withdrawal> {
        let mut pace = self.lock();
        let now = Instant::now();
        let epoch = self.rotate(now);
        let (reserve, times) = match kind {
            RetryKind::Plain => (self.reserve, 1),
            RetryKind::Timeout => (0, TIMEOUT_COST),
        };
        let cost = RETRY_COST * i64::from(times);
        let paid = sum(&self.paid, 0..SLOTS as u64, epoch);
        let balance =
            reserve
                .saturating_add(paid)
                .saturating_sub(sum(&self.taken, 0..SLOTS as u64, epoch));
        let affordable = match kind {
            RetryKind::Plain => balance >= cost,
            RetryKind::Timeout => {
                let recent = sum(&self.paid, 0..RECENT_SLOTS, epoch).saturating_sub(sum(
                    &self.taken,
                    0..RECENT_SLOTS,
                    epoch,
                ));
                balance >= cost && recent >= cost
            }
        };
        if affordable && (!self.paced || spread || self.pace(&mut pace, now, cost, balance)) {
            self.taken[slot_of(epoch)].fetch_add(cost, Ordering::Relaxed);
            return Some(Withdrawal::new(Source::Slot(epoch), times));
        }
        drop(pace);
        // A call of the account's first window has no deposits to be judged by: its timeout may
        // spend the starting credit, the host's (kept by the process, whatever the policies sending
        // to it), or, for a request without a host, the account's own.
        let young = call_started.saturating_duration_since(self.origin) < self.shape.window;
        if kind != RetryKind::Timeout || !young || self.credit_size == 0 {
            return None;
        }
        match host.filter(|_| !self.shape.own_starting_credit) {
            Some(host) if credit::take(host, self.credit_size, cost) => Some(Withdrawal::new(
                Source::HostCredit(host.credit_key()),
                times,
            )),
            Some(_) => None,
            None if self.credit.load(Ordering::Relaxed) >= cost => {
                self.credit.fetch_sub(cost, Ordering::Relaxed);
                Some(Withdrawal::new(Source::Credit, times))
            }
            None => None,
        }
    }

    /// Whether `cost` units may be spent at `now`, at the pace the requests earn them, and if so,
    /// spends them from the pace's bucket: refilled with what each request pays in as it comes and
    /// the floor as time goes, it holds at most one second of the floor and what the requests of
    /// the last two ticks (a tenth of a slot each: 100 ms by default) paid in (at least one
    /// timeout's cost), and never more than the window allows (`balance`): what a calm spell banked
    /// is spent as it is earned again, not at once.
    fn pace(&self, pace: &mut Pace, now: Instant, cost: i64, balance: i64) -> bool {
        let floor = i64::from(self.shape.min_per_second).saturating_mul(RETRY_COST);
        let capacity = floor
            .saturating_add(self.recent.paid())
            .max(RETRY_COST * i64::from(TIMEOUT_COST));
        let deposits = self.deposits.load(Ordering::Relaxed);
        pace.refill(now, deposits, self.deposit, floor, capacity);
        pace.ready = pace.ready.min(balance.max(0));
        pace.spend(cost)
    }

    /// Gives back a withdrawal in the slot it was taken from. A withdrawal that has already expired with
    /// the window has nothing left to give back.
    pub(crate) fn refund(&self, withdrawal: Withdrawal) {
        let mut pace = self.lock();
        let (source, times) = withdrawal.parts();
        let cost = RETRY_COST * i64::from(times);
        let epoch = match source {
            Source::Slot(epoch) => epoch,
            Source::Credit => {
                self.credit.fetch_add(cost, Ordering::Relaxed);
                return;
            }
            Source::HostCredit(key) => {
                credit::give_back(key, cost);
                return;
            }
        };
        let current = self.rotate(Instant::now());
        if current - epoch < SLOTS as u64 {
            self.taken[slot_of(epoch)].fetch_sub(cost, Ordering::Relaxed);
            if self.paced {
                pace.give_back(cost);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pace> {
        // The pace is one number and an instant: a panic elsewhere cannot leave it inconsistent.
        self.rotation
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Moves the window to `now`, clearing the slots that expired; the caller holds `rotation`.
    fn rotate(&self, now: Instant) -> u64 {
        let elapsed = now.saturating_duration_since(self.origin);
        self.recent.advance(elapsed, self.slot);
        let target =
            u64::try_from(elapsed.as_nanos() / self.slot.as_nanos().max(1)).unwrap_or(u64::MAX);
        let current = self.epoch.load(Ordering::Relaxed);
        if target > current {
            let expired = (target - current).min(SLOTS as u64);
            for k in 0..expired {
                self.paid[slot_of(target - k)].store(0, Ordering::Relaxed);
                self.taken[slot_of(target - k)].store(0, Ordering::Relaxed);
            }
            self.epoch.store(target, Ordering::Relaxed);
        }
        target.max(current)
    }
}

/// The sum of `slots` over the slots `back` slots before `epoch`'s (0: `epoch`'s own), none before
/// the first.
fn sum(slots: &[AtomicI64; SLOTS], back: std::ops::Range<u64>, epoch: u64) -> i64 {
    back.filter_map(|k| epoch.checked_sub(k))
        .map(|epoch| slots[slot_of(epoch)].load(Ordering::Relaxed))
        .fold(0, i64::saturating_add)
}

impl crate::guards::hosts::Idle for Account {
    /// Past its first window (whose calls may spend the starting credit), with every slot expired:
    /// the balance a fresh account would have.
    fn idle(&self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.origin);
        let target =
            u64::try_from(elapsed.as_nanos() / self.slot.as_nanos().max(1)).unwrap_or(u64::MAX);
        elapsed >= self.shape.window
            && target
                >= self
                    .epoch
                    .load(Ordering::Relaxed)
                    .saturating_add(SLOTS as u64)
    }
}

fn slot_of(epoch: u64) -> usize {
    (epoch % SLOTS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::super::RetryBudget;
    use super::*;

    fn budget(ratio: f64, min_per_second: u32, window_secs: u64) -> RetryBudget {
        RetryBudget::builder()
            .ratio(ratio)
            .min_per_second(min_per_second)
            .window(Duration::from_secs(window_secs))
            .build()
            .unwrap()
    }

    /// An account of that shape whose retries are not paced: the window alone.
    fn window(ratio: f64, min_per_second: u32, window_secs: u64) -> Account {
        let shape = RetryBudget::builder()
            .ratio(ratio)
            .min_per_second(min_per_second)
            .window(Duration::from_secs(window_secs));
        Account {
            paced: false,
            ..Account::new(shape)
        }
    }

    fn drain_window(account: &Account) -> u32 {
        let mut granted = 0;
        while account
            .withdraw(RetryKind::Plain, None, Instant::now())
            .is_some()
        {
            granted += 1;
        }
        granted
    }

    fn drain(budget: &RetryBudget) -> u32 {
        let mut granted = 0;
        while budget
            .withdraw(super::RetryKind::Plain, None, Instant::now())
            .is_some()
        {
            granted += 1;
        }
        granted
    }

    /// What `budget` grants over `span`, drained every tenth of a second (at 0 s, 0.1 s, …, the last
    /// tenth before `span`): what a caller retrying as often as it may gets.
    async fn drain_over(budget: &RetryBudget, span: Duration) -> u32 {
        let mut granted = 0;
        for _ in 0..span.as_millis() / 100 {
            granted += drain(budget);
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        granted
    }

    #[tokio::test(start_paused = true)]
    async fn ratios_are_exact() {
        for (ratio, want) in [
            (0.2, 200),
            (0.4, 400),
            (0.3, 300),
            (0.125, 125),
            (1.0, 1000),
            (0.001, 1),
        ] {
            let b = budget(ratio, 0, 10);
            for _ in 0..1000 {
                b.deposit();
            }
            assert_eq!(drain(&b), want, "ratio {ratio}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_ratio_is_exact_to_five_decimals() {
        let b = budget(0.000_01, 0, 10);
        for _ in 0..100_000 {
            b.deposit();
        }
        assert_eq!(drain(&b), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_floor_is_min_per_second_over_the_window() {
        // At once, one second of the floor; over the window, the whole window's, as it is earned.
        let b = budget(0.0, 10, 10);
        assert_eq!(drain(&b), 10);
        let b = budget(0.0, 10, 10);
        assert_eq!(drain_over(&b, Duration::from_secs(10)).await, 100);
    }

    #[tokio::test(start_paused = true)]
    async fn deposits_and_withdrawals_expire_with_the_window() {
        let b = window(1.0, 0, 10);
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
        assert_eq!(drain_window(&b), batch);
        // At 15.5 s the second batch has expired too, but the withdrawals made at 10.5 s still count.
        tokio::time::advance(Duration::from_secs(5)).await;
        for _ in 0..batch {
            b.deposit();
        }
        assert_eq!(drain_window(&b), 0);
        // At 25.5 s everything has expired.
        tokio::time::advance(Duration::from_secs(10)).await;
        for _ in 0..batch {
            b.deposit();
        }
        assert_eq!(drain_window(&b), batch);
    }

    #[tokio::test(start_paused = true)]
    async fn an_allowance_banked_in_a_calm_spell_is_spent_at_the_rate_it_is_earned() {
        // 100 requests a second for 10 s, and no failure: the window holds 20 % of 1 000 requests,
        // 200 retries, beside a floor of 10 a second (100 over the window).
        let b = budget(0.2, 10, 10);
        for _ in 0..100 {
            for _ in 0..10 {
                b.deposit();
            }
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        // The outage: at once, one second of the floor and the share of the last two ticks' requests
        // (10 + 4, give or take the requests since the last clock reading, which land in its tick
        // and leave with it), not the 300 the window holds.
        let at_once = drain(&b);
        assert!((10..=16).contains(&at_once), "{at_once}");
        // Then what the requests earn, as they earn it: 100 a second pay in 20, the floor 10.
        let mut per_second = Vec::new();
        for _ in 0..20 {
            let mut granted = 0;
            for _ in 0..10 {
                for _ in 0..10 {
                    b.deposit();
                }
                tokio::time::advance(Duration::from_millis(100)).await;
                granted += drain(&b);
            }
            per_second.push(granted);
        }
        // Never a burst as the first withdrawals expire, 10 s later: the allowance comes back as it
        // is earned, 30 a second, but for the outage's tenth second, when the window's bound pays it
        // back for the first moment's share.
        assert!(per_second.iter().all(|&n| n <= 32), "{per_second:?}");
        assert!(
            per_second
                .iter()
                .enumerate()
                .all(|(second, &n)| second == 9 || (28..=32).contains(&n)),
            "{per_second:?}"
        );
        // The window's bound holds throughout: over any 10 s, at most 300.
        let first_ten: u32 = at_once + per_second[..9].iter().sum::<u32>();
        assert!(first_ten <= 300, "{first_ten}");
        // And the whole allowance is there, spent as it is earned rather than at once: over the
        // outage's first two windows, nearly all of the 600 they allow.
        let twenty: u32 = at_once + per_second.iter().sum::<u32>();
        assert!((580..=600).contains(&twenty), "{twenty}");
    }

    #[tokio::test(start_paused = true)]
    async fn deposits_between_clock_readings_land_in_the_last_slot_read() {
        // The documented approximation: after a quiet spell, up to CLOCK_EVERY - 1 deposits are counted
        // in the slot of the last clock reading, and expire with it.
        let b = budget(1.0, 0, 10);
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
        assert!(b.withdraw(RetryKind::Plain, None, Instant::now()).is_some());
        assert!(b.withdraw(RetryKind::Plain, None, Instant::now()).is_none());
        tokio::time::advance(Duration::from_millis(1100)).await;
        assert!(b.withdraw(RetryKind::Plain, None, Instant::now()).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_timeouts_of_first_window_calls_spend_the_starting_credit() {
        // No deposits: the floor alone, 10 retries a second, which a timeout may not use.
        let b = budget(0.2, 10, 10);
        let t0 = Instant::now();
        assert!(b.withdraw(RetryKind::Timeout, None, t0).is_some());
        assert!(b.withdraw(RetryKind::Timeout, None, t0).is_some());
        // One second of the floor, 10 retries' worth, is two timeouts' retries at 4 each.
        assert!(b.withdraw(RetryKind::Timeout, None, t0).is_none());
        // The floor itself is untouched: one second of it at once, the window's over the window.
        assert_eq!(drain(&b), 10);
        assert_eq!(drain_over(&b, Duration::from_secs(10)).await, 90);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_started_after_the_first_window_gets_no_credit() {
        let host = Host::from_raw(0x007e_57c4_ed16);
        let b = budget(0.2, 10, 10);
        let t0 = Instant::now();
        tokio::time::advance(Duration::from_secs(12)).await;
        let late = Instant::now();
        assert!(b.withdraw(RetryKind::Timeout, None, late).is_none());
        assert!(b.withdraw(RetryKind::Timeout, Some(host), late).is_none());
        // A call that started in the first window and timed out late still may.
        let early = t0 + Duration::from_secs(9);
        assert!(b.withdraw(RetryKind::Timeout, None, early).is_some());
        assert!(b.withdraw(RetryKind::Timeout, Some(host), early).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_host_s_credit_is_one_for_every_budget_of_the_process() {
        // A host of this test's own: the credit of a host is the process's.
        let host = Host::from_raw(0x007e_57c4_ed17);
        let per_request = || budget(0.2, 10, 10);
        assert!(
            per_request()
                .withdraw(RetryKind::Timeout, Some(host), Instant::now())
                .is_some()
        );
        assert!(
            per_request()
                .withdraw(RetryKind::Timeout, Some(host), Instant::now())
                .is_some()
        );
        // A third budget, fresh as the others, finds the host's credit spent.
        let third = per_request();
        assert!(
            third
                .withdraw(RetryKind::Timeout, Some(host), Instant::now())
                .is_none()
        );
        // Its own, for requests without a host, is whole.
        assert!(
            third
                .withdraw(RetryKind::Timeout, None, Instant::now())
                .is_some()
        );
        // A retry never sent gives the host its credit back.
        let other = Host::from_raw(0x007e_57c4_ed18);
        let b = per_request();
        let first = b
            .withdraw(RetryKind::Timeout, Some(other), Instant::now())
            .unwrap();
        assert!(
            b.withdraw(RetryKind::Timeout, Some(other), Instant::now())
                .is_some()
        );
        b.refund(first);
        assert!(
            per_request()
                .withdraw(RetryKind::Timeout, Some(other), Instant::now())
                .is_some()
        );
        assert!(
            per_request()
                .withdraw(RetryKind::Timeout, Some(other), Instant::now())
                .is_none()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refunded_credit_withdrawal_goes_back_to_the_credit() {
        let b = budget(0.2, 10, 10);
        let first = b
            .withdraw(RetryKind::Timeout, None, Instant::now())
            .unwrap();
        assert!(
            b.withdraw(RetryKind::Timeout, None, Instant::now())
                .is_some()
        );
        b.refund(first);
        assert!(
            b.withdraw(RetryKind::Timeout, None, Instant::now())
                .is_some()
        );
        assert!(
            b.withdraw(RetryKind::Timeout, None, Instant::now())
                .is_none()
        );
        // Without a floor there is no credit.
        let strict = budget(0.2, 0, 10);
        assert!(
            strict
                .withdraw(RetryKind::Timeout, None, Instant::now())
                .is_none()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn timeouts_are_paid_from_recent_deposits_not_the_calm_before() {
        let b = budget(1.0, 0, 10);
        for _ in 0..CLOCK_EVERY {
            b.deposit();
        }
        // 64 retries' worth banked at t = 0; at t = 5 s none of it is recent.
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(
            b.withdraw(RetryKind::Timeout, None, Instant::now())
                .is_none()
        );
        // Plain retries still spend the whole window.
        assert!(b.withdraw(RetryKind::Plain, None, Instant::now()).is_some());
        // Requests sent now pay for it.
        for _ in 0..CLOCK_EVERY {
            b.deposit();
        }
        assert!(
            b.withdraw(RetryKind::Timeout, None, Instant::now())
                .is_some()
        );
    }

    #[test]
    fn concurrent_withdrawals_never_overdraw() {
        let b = budget(0.0, 100, 1);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    (0..1000)
                        .filter(|_| b.withdraw(RetryKind::Plain, None, Instant::now()).is_some())
                        .count()
                })
            })
            .collect();
        let granted: usize = threads.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(granted, 100);
    }

    #[tokio::test(start_paused = true)]
    async fn clones_draw_on_one_account() {
        let b = budget(1.0, 0, 10);
        let clone = b.clone();
        for _ in 0..10 {
            b.deposit();
        }
        for _ in 0..10 {
            clone.deposit();
        }
        assert_eq!(drain(&clone), 20);
        assert_eq!(drain(&b), 0);
        // A budget built from the same shape is an account of its own.
        let other = budget(1.0, 0, 10);
        other.deposit();
        assert_eq!(drain(&other), 1);
    }

    #[test]
    fn the_default_is_a_fifth_of_the_load_ten_a_second_over_ten_seconds() {
        let b = RetryBudget::default();
        assert_eq!(
            (b.ratio(), b.min_per_second(), b.window()),
            (0.2, 10, Duration::from_secs(10))
        );
        assert_eq!(
            format!("{b:?}"),
            "RetryBudget { ratio: 0.2, min_per_second: 10, window: 10s, per_host: false, own_starting_credit: false }"
        );
    }
}
