//! The starting credit of a host: what the first timed-out attempts to it may spend, once per host
//! while the process sends to it, whatever the number of policies that send to it. An operation of
//! `stagger::retry`, which has no host, is keyed by the place in the code it is called from.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};
use std::time::Duration;

use crate::time::Instant;

use crate::guards::hosts::{CREDIT_KEY_MASK, Host};

/// The most hosts whose credit is kept apart. Past them, a new host first makes room by forgetting
/// the hosts not asked about for [`FORGOTTEN_AFTER`] (it takes the credit a fresh one would), and,
/// when none is, shares one overflow credit with the other hosts that did not fit: never none at
/// all, never a fresh one for each.
const MAX_CREDITED_HOSTS: usize = 4096;

/// A host not asked about for this long leaves the table when room is needed: a credit pays for the
/// timeouts of budgets in their first window (60 s at most), and after this long no budget that
/// spent a host's credit is young any more.
const FORGOTTEN_AFTER: Duration = Duration::from_secs(600);

/// The key of the overflow credit: no host's (a host's key has bits above [`CREDIT_KEY_MASK`] clear).
const OVERFLOW: u64 = CREDIT_KEY_MASK + 1;

#[derive(Debug)]
struct Credit {
    /// What is left, in units of an account (`RETRY_COST` a retry).
    left: i64,
    /// When it was last asked about.
    asked: Instant,
}

/// What is left of each host's credit by the key of [`Host::credit_key`]: made at the first timeout
/// to the host with the size of the budget that met it, spent by every budget of the process.
static HOSTS: LazyLock<Mutex<HashMap<u64, Credit>>> = LazyLock::new(Mutex::default);

/// Takes `cost` from the credit of `host`, which starts at `size` the first time: whether it could.
pub(crate) fn take(host: Host, size: i64, cost: i64) -> bool {
    let mut hosts = HOSTS.lock().unwrap_or_else(PoisonError::into_inner);
    take_from(&mut hosts, host.credit_key(), size, cost, Instant::now())
}

fn take_from(
    hosts: &mut HashMap<u64, Credit>,
    key: u64,
    size: i64,
    cost: i64,
    now: Instant,
) -> bool {
    let key = if hosts.contains_key(&key) || has_room(hosts, now) {
        key
    } else {
        OVERFLOW
    };
    let credit = hosts.entry(key).or_insert(Credit {
        left: size,
        asked: now,
    });
    credit.asked = now;
    if credit.left < cost {
        return false;
    }
    credit.left -= cost;
    true
}

/// Whether a new host can have a credit of its own, room made if it must be.
fn has_room(hosts: &mut HashMap<u64, Credit>, now: Instant) -> bool {
    if hosts.len() < MAX_CREDITED_HOSTS {
        return true;
    }
    hosts.retain(|&key, credit| {
        key == OVERFLOW || now.saturating_duration_since(credit.asked) < FORGOTTEN_AFTER
    });
    hosts.len() < MAX_CREDITED_HOSTS
}

/// Gives `cost` back to the credit of the host whose key is `key`: a retry it paid for was never sent.
/// (A host that has since been forgotten, or that drew on the overflow, gives it to the overflow.)
pub(crate) fn give_back(key: u64, cost: i64) {
    let mut hosts = HOSTS.lock().unwrap_or_else(PoisonError::into_inner);
    let key = if hosts.contains_key(&key) {
        key
    } else {
        OVERFLOW
    };
    if let Some(credit) = hosts.get_mut(&key) {
        credit.left = credit.left.saturating_add(cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_bound_a_new_host_shares_the_overflow_credit_and_old_hosts_make_room() {
        let mut hosts = HashMap::new();
        let t0 = Instant::now();
        for key in 0..MAX_CREDITED_HOSTS as u64 {
            assert!(take_from(&mut hosts, key, 10, 4, t0));
        }
        // Full, and every host recent: a new one shares one overflow credit, as do the next.
        let later = t0 + Duration::from_secs(1);
        assert!(take_from(&mut hosts, 1 << 40, 10, 4, later));
        assert!(take_from(&mut hosts, 1 << 41, 10, 4, later));
        assert!(!take_from(&mut hosts, 1 << 42, 10, 4, later), "spent");
        // A host already known keeps its own.
        assert!(take_from(&mut hosts, 7, 10, 4, later));
        assert!(!take_from(&mut hosts, 7, 10, 4, later));
        // Ten minutes on, the hosts not asked about since make room: a new host has its own.
        let much_later = t0 + FORGOTTEN_AFTER + Duration::from_secs(2);
        assert!(take_from(&mut hosts, 1 << 43, 10, 4, much_later));
        assert!(take_from(&mut hosts, 1 << 43, 10, 4, much_later));
        assert!(hosts.len() <= MAX_CREDITED_HOSTS);
    }
}
