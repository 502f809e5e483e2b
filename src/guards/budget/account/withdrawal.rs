//! One retry taken from an account, packed in a word: where it was taken from, and how many
//! retries' worth.

use std::num::NonZeroU64;

use crate::guards::hosts::CREDIT_KEY_MASK;

/// One retry taken from a [`RetryBudget`](crate::RetryBudget): the slot it was taken in, or the
/// starting credit it was taken from, plus one (so that an `Option<Withdrawal>` is a single word).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Withdrawal(NonZeroU64);

/// The low 56 bits of a withdrawal: a slot's epoch, or a credit.
const SOURCE: u64 = (1 << 56) - 1;
/// The source of a withdrawal from the account's own starting credit: no slot has it.
const FROM_CREDIT: u64 = SOURCE;
/// The bit of a withdrawal from a host's starting credit, whose key is in the bits below it. No slot
/// has it either: 2⁵⁵ slots of 100 ms are 114 years.
const FROM_HOST_CREDIT: u64 = 1 << 55;

/// Where a withdrawal was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// The slot of this epoch.
    Slot(u64),
    /// The account's own starting credit.
    Credit,
    /// The starting credit of the host whose key this is.
    HostCredit(u64),
}

impl Withdrawal {
    /// The source in the low 56 bits (a slot's epoch: 228 years of 100 ms slots), how many retries'
    /// worth in the top 8.
    pub(super) fn new(source: Source, times: u8) -> Self {
        let source = match source {
            Source::Slot(epoch) => epoch & (FROM_HOST_CREDIT - 1),
            Source::Credit => FROM_CREDIT,
            Source::HostCredit(key) => FROM_HOST_CREDIT | (key & CREDIT_KEY_MASK),
        };
        let packed = (u64::from(times) << 56) | source;
        Self(NonZeroU64::MIN.saturating_add(packed))
    }

    /// Where it was taken from, and how many retries' worth.
    pub(super) fn parts(self) -> (Source, u8) {
        let packed = self.0.get() - 1;
        let source = match packed & SOURCE {
            FROM_CREDIT => Source::Credit,
            bits if bits & FROM_HOST_CREDIT != 0 => Source::HostCredit(bits & CREDIT_KEY_MASK),
            epoch => Source::Slot(epoch),
        };
        (source, (packed >> 56) as u8)
    }
}
