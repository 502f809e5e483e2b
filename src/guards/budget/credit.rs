//! The starting credit of a host: what the first timed-out attempts to it may spend, once in the
//! process's life, whatever the number of policies that send to it.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use crate::guards::hosts::Host;

/// The most hosts whose credit is kept: past them, a new host gets none. A process that sends to
/// more hosts than this (a crawler) gets no credit for the later ones, rather than a table without
/// end.
const MAX_CREDITED_HOSTS: usize = 4096;

/// What is left of each host's credit, in units of an account (`RETRY_COST` a retry), by the key of
/// [`Host::credit_key`]: made at the first timeout to the host with the size of the budget that met
/// it, spent by every budget of the process.
static HOSTS: LazyLock<Mutex<HashMap<u64, i64>>> = LazyLock::new(Mutex::default);

/// Takes `cost` from the credit of `host`, which starts at `size` the first time: whether it could.
pub(crate) fn take(host: Host, size: i64, cost: i64) -> bool {
    let mut hosts = HOSTS.lock().unwrap_or_else(PoisonError::into_inner);
    let full = hosts.len() >= MAX_CREDITED_HOSTS;
    let left = match hosts.get_mut(&host.credit_key()) {
        Some(left) => left,
        None if full => return false,
        None => hosts.entry(host.credit_key()).or_insert(size),
    };
    if *left < cost {
        return false;
    }
    *left -= cost;
    true
}

/// Gives `cost` back to the credit of the host whose key is `key`: a retry it paid for was never sent.
pub(crate) fn give_back(key: u64, cost: i64) {
    let mut hosts = HOSTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(left) = hosts.get_mut(&key) {
        *left = left.saturating_add(cost);
    }
}
