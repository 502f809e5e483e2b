//! The pace retries are spent at, beside the window that bounds how many: a bucket refilled as the
//! requests pay in, and the ring of what they paid in over the last ticks, which bounds the bucket.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use crate::time::Instant;

/// Ticks in a slot: a tick is a tenth of a slot, 100 ms of the default 10 s window.
const TICKS_PER_SLOT: u32 = 10;

/// Ticks kept: the current one and the one before count; the others are cleared as the ring turns.
const TICKS: usize = 4;

/// What the requests of the last ticks paid in, in units, kept as `Account::paid` is: added to
/// without a lock, moved along as the window is.
#[derive(Debug, Default)]
pub(super) struct Recent {
    /// How many ticks have begun since the account's origin.
    epoch: AtomicU64,
    paid: [AtomicI64; TICKS],
}

impl Recent {
    /// Counts `units` paid in now (in the tick of the last clock reading, as the slots count them).
    pub(super) fn add(&self, units: i64) {
        let epoch = self.epoch.load(Ordering::Relaxed);
        self.paid[tick_of(epoch)].fetch_add(units, Ordering::Relaxed);
    }

    /// Moves the ring to `elapsed` since the account's origin, its ticks a tenth of `slot`; the
    /// caller holds the account's lock.
    pub(super) fn advance(&self, elapsed: Duration, slot: Duration) {
        let tick = (slot / TICKS_PER_SLOT).as_nanos().max(1);
        let target = u64::try_from(elapsed.as_nanos() / tick).unwrap_or(u64::MAX);
        let current = self.epoch.load(Ordering::Relaxed);
        if target > current {
            for k in 0..(target - current).min(TICKS as u64) {
                self.paid[tick_of(target - k)].store(0, Ordering::Relaxed);
            }
            self.epoch.store(target, Ordering::Relaxed);
        }
    }

    /// What the current tick's requests and the last one's paid in.
    pub(super) fn paid(&self) -> i64 {
        let epoch = self.epoch.load(Ordering::Relaxed);
        let last = epoch
            .checked_sub(1)
            .map_or(0, |e| self.paid[tick_of(e)].load(Ordering::Relaxed));
        self.paid[tick_of(epoch)]
            .load(Ordering::Relaxed)
            .saturating_add(last)
    }
}

fn tick_of(epoch: u64) -> usize {
    (epoch % TICKS as u64) as usize
}

/// The pace retries are spent at: a bucket of what may be spent now, refilled with what the requests
/// earn as they earn it (each its deposit, and the floor as time goes), holding at most the floor's
/// second (spendable at once, as a client sending few requests needs) and what the requests of the
/// last two ticks paid in (a burst of requests failing together retries its share at once), never
/// what a calm spell banked: that is spent as it is earned again.
///
/// The window bounds how much is spent; the bucket, how fast. Without it, the allowance the window
/// banked over a calm spell is spent in the first moments of an outage, and comes back in one burst
/// a window later, when those withdrawals expire: an echo of the outage's first moments every window
/// (2 900 retries in one second, every 10 s, in the dead-host herd). Spent no faster than it is
/// earned, it comes back as smoothly as it goes.
#[derive(Debug, Default)]
pub(super) struct Pace {
    /// Units that may be spent now.
    pub(super) ready: i64,
    /// When `ready` was last refilled; `None` before the first withdrawal (the bucket starts full).
    pub(super) at: Option<Instant>,
    /// The account's deposits counted into `ready` so far.
    pub(super) deposits: u64,
}

impl Pace {
    /// Refills the bucket at `now`, with `deposits` (the account's count) of `deposit` units each
    /// and `floor` units a second, up to `capacity`.
    pub(super) fn refill(
        &mut self,
        now: Instant,
        deposits: u64,
        deposit: i64,
        floor: i64,
        capacity: i64,
    ) {
        let ready = match self.at {
            None => capacity,
            Some(at) => {
                let new = i64::try_from(deposits.wrapping_sub(self.deposits)).unwrap_or(i64::MAX);
                let elapsed = now.saturating_duration_since(at).as_secs_f64();
                self.ready
                    .saturating_add(new.saturating_mul(deposit))
                    .saturating_add((floor as f64 * elapsed) as i64)
            }
        };
        self.ready = ready.min(capacity);
        self.at = Some(now);
        self.deposits = deposits;
    }

    /// Spends `cost` units, if the bucket has them.
    pub(super) fn spend(&mut self, cost: i64) -> bool {
        if self.ready < cost {
            return false;
        }
        self.ready -= cost;
        true
    }

    /// A withdrawal never spent comes back.
    pub(super) fn give_back(&mut self, cost: i64) {
        self.ready = self.ready.saturating_add(cost);
    }
}
