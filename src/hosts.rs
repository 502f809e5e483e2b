//! A bounded map from host to the state a policy keeps for it (an adaptive throttle, a budget
//! partition), shared by every clone of the policy.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::cooldown::Host;

/// The most hosts a map holds. Past it, an eighth of the entries are dropped to make room: a client
/// talking to more hosts at once starts some of them afresh, which only ever forgets history, never
/// invents it.
pub(crate) const MAX_HOSTS: usize = 4096;

/// Per-host state, created on first use. Requests without a host share one entry.
#[derive(Debug)]
pub(crate) struct HostMap<T> {
    map: RwLock<HashMap<Option<Host>, Arc<T>>>,
}

impl<T> Default for HostMap<T> {
    fn default() -> Self {
        Self {
            map: RwLock::new(HashMap::new()),
        }
    }
}

impl<T> HostMap<T> {
    /// The entry of `host`, made by `make` if there is none. A read lock when it exists.
    pub(crate) fn get(&self, host: Option<Host>, make: impl FnOnce() -> T) -> Arc<T> {
        {
            let map = self.map.read().unwrap_or_else(|e| e.into_inner());
            if let Some(entry) = map.get(&host) {
                return Arc::clone(entry);
            }
        }
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(&host) && map.len() >= MAX_HOSTS {
            let mut dropped = 0;
            map.retain(|_, _| {
                dropped += 1;
                dropped > MAX_HOSTS / 8
            });
        }
        Arc::clone(map.entry(host).or_insert_with(|| Arc::new(make())))
    }

    /// How many hosts the map holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_host_made_once_and_bounded() {
        let map: HostMap<u64> = HostMap::default();
        let a = map.get(Some(Host::from_raw(1)), || 1);
        let again = map.get(Some(Host::from_raw(1)), || 2);
        assert!(Arc::ptr_eq(&a, &again));
        assert_eq!(*map.get(None, || 3), 3);
        assert_eq!(*map.get(None, || 4), 3);
        for n in 0..100_000 {
            map.get(Some(Host::from_raw(n)), || n);
            assert!(map.len() <= MAX_HOSTS);
        }
    }
}
