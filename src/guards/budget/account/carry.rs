//! An account of another shape that keeps what older accounts know: what a reload that changes a
//! budget's shape opens.

use std::sync::atomic::Ordering;

use crate::time::Instant;

use super::{Account, Pace, SLOTS, slot_of};
use crate::guards::budget::RetryBudgetBuilder;

impl Account {
    /// A new account of `shape` at `now` that knows what the accounts `from` knew (the first is the
    /// one it takes the place of; any others are merged into it), where it means the same:
    ///
    /// - its age is the oldest's, so that a reload is not a young account's first window, with a
    ///   starting credit to spend again; what was spent of the first's own credit stays spent;
    /// - every retry taken within its window stays taken, in the slot of the time it was taken;
    /// - every request's deposit within its window stays, in the slot of the time it was made,
    ///   worth the new ratio (what a deposit is worth is the ratio's; an account whose ratio was
    ///   zero kept no trace of its requests, and carries none);
    /// - the first's pace carries: what may be spent now, and since when, and what its requests of
    ///   the last ticks paid in (worth the new ratio, as of now), which bounds what a burst may spend.
    ///
    /// A window longer than the old one holds what the old held, no more; a shorter one what fell
    /// within it.
    pub(crate) fn carried(shape: RetryBudgetBuilder, from: &[&Account], now: Instant) -> Self {
        let mut account = Self::new(shape);
        let Some(first) = from.first() else {
            return account;
        };
        account.origin = (from.iter()).map(|old| old.origin).min().unwrap_or(now);
        let elapsed = now.saturating_duration_since(account.origin);
        let epoch =
            u64::try_from(elapsed.as_nanos() / account.slot.as_nanos().max(1)).unwrap_or(u64::MAX);
        account.epoch.store(epoch, Ordering::Relaxed);
        let new_slot = account.slot.as_nanos().max(1);
        let mut recent = 0;
        for (n, old) in from.iter().enumerate() {
            let pace = old.lock();
            let old_epoch = old.rotate(now);
            let worth = |paid: i64| match old.deposit {
                0 => 0,
                deposit => (paid as f64 * account.deposit as f64 / deposit as f64) as i64,
            };
            for back in 0..SLOTS as u64 {
                let Some(old_slot) = old_epoch.checked_sub(back) else {
                    break;
                };
                // Where the old slot began, on the new account's clock.
                let began = old
                    .origin
                    .saturating_duration_since(account.origin)
                    .as_nanos()
                    + old.slot.as_nanos() * u128::from(old_slot);
                let Ok(slot) = u64::try_from(began / new_slot) else {
                    continue;
                };
                if slot > epoch || epoch - slot >= SLOTS as u64 {
                    continue;
                }
                let paid = worth(old.paid[slot_of(old_slot)].load(Ordering::Relaxed));
                let taken = old.taken[slot_of(old_slot)].load(Ordering::Relaxed);
                account.paid[slot_of(slot)].fetch_add(paid, Ordering::Relaxed);
                account.taken[slot_of(slot)].fetch_add(taken, Ordering::Relaxed);
            }
            if n == 0 {
                let mine = account
                    .rotation
                    .get_mut()
                    .unwrap_or_else(|e| e.into_inner());
                *mine = Pace {
                    ready: pace.ready,
                    at: pace.at,
                    // The new account counts its own deposits from none.
                    deposits: 0,
                };
                recent = worth(old.recent.paid());
            }
        }
        account.recent.advance(elapsed, account.slot);
        account.recent.add(recent);
        let spent = first.credit_size - first.credit.load(Ordering::Relaxed);
        let credit = (account.credit_size - spent).clamp(0, account.credit_size);
        account.credit.store(credit, Ordering::Relaxed);
        account
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::time::Instant;

    use super::super::{Account, RetryKind};
    use crate::guards::budget::{RetryBudget, RetryBudgetBuilder};

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn shape(ratio: f64, min_per_second: u32, window: u64) -> RetryBudgetBuilder {
        RetryBudget::builder()
            .ratio(ratio)
            .min_per_second(min_per_second)
            .window(secs(window))
    }

    /// The window alone: the pace, which spreads what may be spent, left out.
    fn unpaced(account: Account) -> Account {
        Account {
            paced: false,
            ..account
        }
    }

    fn deposit(account: &Account, n: u32) {
        for _ in 0..n {
            account.deposit();
        }
    }

    fn drain(account: &Account) -> u32 {
        let mut granted = 0;
        while (account.withdraw(RetryKind::Plain, None, Instant::now())).is_some() {
            granted += 1;
        }
        granted
    }

    #[tokio::test(start_paused = true)]
    async fn the_deposits_carry_worth_the_new_ratio_and_the_retries_taken_stay_taken() {
        let old = unpaced(Account::new(shape(0.1, 0, 10)));
        deposit(&old, 100);
        for _ in 0..4 {
            assert!(
                old.withdraw(RetryKind::Plain, None, Instant::now())
                    .is_some()
            );
        }
        // 100 requests were worth 10 retries; at 0.2 they are worth 20, 4 of them taken.
        let new = unpaced(Account::carried(shape(0.2, 0, 10), &[&old], Instant::now()));
        assert_eq!(drain(&new), 16);
        let halved = unpaced(Account::carried(
            shape(0.05, 0, 10),
            &[&old],
            Instant::now(),
        ));
        assert_eq!(drain(&halved), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_window_keeps_what_fell_within_it_and_a_longer_one_what_the_old_held() {
        let old = unpaced(Account::new(shape(1.0, 0, 10)));
        deposit(&old, 10);
        tokio::time::advance(secs(6)).await;
        // The window moves along with one deposit in 64: moved here, so that the next ten are
        // counted at 6 s.
        {
            let _pace = old.lock();
            old.rotate(Instant::now());
        }
        deposit(&old, 10);
        let now = Instant::now();
        let shorter = unpaced(Account::carried(shape(1.0, 0, 5), &[&old], now));
        assert_eq!(drain(&shorter), 10, "the last 5 s");
        let longer = unpaced(Account::carried(shape(1.0, 0, 20), &[&old], now));
        tokio::time::advance(secs(5)).await;
        // At 11 s the old window would have let the first ten go; a 20 s window holds them.
        assert_eq!(drain(&longer), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn what_the_last_requests_paid_in_still_bounds_a_burst() {
        let old = Account::new(shape(1.0, 0, 10));
        deposit(&old, 20);
        // No floor: at once, what the last ticks' requests paid in, 20 retries' worth at 1.0 (the
        // least a burst may spend, a timeout's cost, were it forgotten).
        let carried = Account::carried(shape(1.0, 0, 20), &[&old], Instant::now());
        assert_eq!(drain(&carried), 20);
    }

    #[tokio::test(start_paused = true)]
    async fn a_reload_is_not_a_young_account_with_a_starting_credit_to_spend_again() {
        let old = Account::new(shape(0.2, 10, 10));
        tokio::time::advance(secs(11)).await;
        let started = Instant::now();
        let fresh = Account::new(shape(0.2, 5, 10));
        assert!(fresh.withdraw(RetryKind::Timeout, None, started).is_some());
        let carried = Account::carried(shape(0.2, 5, 10), &[&old], Instant::now());
        assert!(
            carried
                .withdraw(RetryKind::Timeout, None, started)
                .is_none()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_same_shape_keeps_the_account_and_another_carries_it() {
        let old = RetryBudget::builder().build().unwrap();
        let same = RetryBudget::builder().build().unwrap();
        assert!(Arc::ptr_eq(
            &same.taking_over(&old, Instant::now()).account,
            &old.account
        ));
        let other = RetryBudget::builder().ratio(0.5).build().unwrap();
        let taken_over = other.taking_over(&old, Instant::now());
        assert!(!Arc::ptr_eq(&taken_over.account, &old.account));
        assert_eq!(taken_over.ratio(), 0.5);
        // Kept per host before, one account now: the hosts' deposits are the one's.
        let per_host = RetryBudget::builder()
            .ratio(1.0)
            .min_per_second(0)
            .per_host(true)
            .build()
            .unwrap();
        let host = crate::guards::hosts::Host::from_raw(3);
        let account = per_host.partition(Some(host)).unwrap();
        deposit(&account, 7);
        let one = RetryBudget::builder()
            .ratio(1.0)
            .min_per_second(0)
            .build()
            .unwrap();
        let merged = one.taking_over(&per_host, Instant::now());
        assert!(!merged.per_host());
        let merged = unpaced(Account::carried(
            merged.account.shape,
            &[&merged.account],
            Instant::now(),
        ));
        assert_eq!(drain(&merged), 7);
    }
}
