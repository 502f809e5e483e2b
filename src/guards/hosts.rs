//! A bounded map from host to the state a policy keeps for it (an adaptive throttle, a budget
//! partition), shared by every clone of the policy.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use crate::time::Instant;

use crate::classify::RequestView;

/// Which host a request goes to: a hash of its host name and port.
///
/// A hash rather than the name, so that a lookup allocates nothing; two hosts whose 64-bit hashes
/// collide would share their state, once in 2⁶⁴.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Host(u64);

impl Host {
    /// The host of `request`, if its target (or, in origin form, its `Host` header) names one. Host
    /// names are compared without regard to case (RFC 9110 §4.2.3): `API.Example.test` is
    /// `api.example.test`. A default port, 80 or 443, is the same as none, however the request writes
    /// it: `http://api.example.test/`, `https://api.example.test:443/` and a request in origin form
    /// with `Host: api.example.test` (whose scheme the request does not say) are one host, so that a
    /// pause it asked for, its budget and its throttle hold for every request to it. Another port is
    /// another host.
    pub(crate) fn of(request: &RequestView<'_>) -> Option<Self> {
        Some(Self::hash(request.host()?, request.port()))
    }

    /// The host a user names, `name` or `name:port` (`[::1]:8080` for an IPv6 address), and its name
    /// as the reports write it (lower case, a default port left out); `None` if it names no host.
    pub(crate) fn named(authority: &str) -> Option<(Self, Box<str>)> {
        if authority.is_empty() {
            return Some((Self::unnamed(), Box::from("")));
        }
        let authority: http::uri::Authority = authority.parse().ok()?;
        let name = authority.host().to_ascii_lowercase();
        if name.is_empty() {
            return None;
        }
        let port = authority
            .port_u16()
            .filter(|port| !matches!(port, 80 | 443));
        let shown = match port {
            Some(port) => format!("{name}:{port}"),
            None => name.clone(),
        };
        Some((Self::hash(&name, port), shown.into_boxed_str()))
    }

    /// The host of the requests that name none: a tonic client made without an origin sends a path
    /// alone, and its `Channel` adds the origin beneath the retry layer. Its name is empty.
    pub(crate) fn unnamed() -> Self {
        Self::hash("", None)
    }

    fn hash(name: &str, port: Option<u16>) -> Self {
        let mut hasher = DefaultHasher::new();
        // Lowered in a buffer and hashed in one write: a write per byte cost a request that hashes
        // its host a few hundred instructions.
        let mut lowered = [0u8; 64];
        if let Some(buffer) = lowered.get_mut(..name.len()) {
            buffer.copy_from_slice(name.as_bytes());
            buffer.make_ascii_lowercase();
            hasher.write(buffer);
        } else {
            for byte in name.bytes() {
                hasher.write_u8(byte.to_ascii_lowercase());
            }
        }
        let port = port.filter(|port| !matches!(port, 80 | 443));
        port.hash(&mut hasher);
        Self(hasher.finish())
    }

    /// The key of a place in the code that calls `stagger::retry`, which has no host: its starting
    /// credit is that place's, whatever the policy each call is built with.
    pub(crate) fn site(site: &std::panic::Location<'_>) -> Self {
        let mut hasher = DefaultHasher::new();
        hasher.write(site.file().as_bytes());
        hasher.write_u32(site.line());
        hasher.write_u32(site.column());
        Self(hasher.finish())
    }

    /// The route of `path` on this host: the host and the path, the key of what a gateway failure
    /// says (see the breaker). The query is not part of it.
    pub(crate) fn route(self, path: &str) -> Self {
        let path = path.split_once('?').map_or(path, |(path, _)| path);
        let mut hasher = DefaultHasher::new();
        hasher.write_u64(self.0);
        hasher.write(path.as_bytes());
        Self(hasher.finish())
    }

    /// One replica of this host: the host (its name and port) and the address it is reached at, the
    /// key of what the breaker judges of that replica alone.
    pub(crate) fn replica(self, addr: std::net::SocketAddr) -> Self {
        let mut hasher = DefaultHasher::new();
        hasher.write_u64(self.0);
        hasher.write_u8(0xa5);
        addr.hash(&mut hasher);
        Self(hasher.finish())
    }

    /// The host as a starting credit's withdrawal records it: the low 55 bits of its hash, which a
    /// withdrawal has room for beside a slot's epoch.
    pub(crate) const fn credit_key(self) -> u64 {
        self.0 & CREDIT_KEY_MASK
    }

    #[cfg(test)]
    pub(crate) const fn from_raw(n: u64) -> Self {
        Self(n)
    }
}

/// The bits of a host's hash that [`Host::credit_key`] keeps.
pub(crate) const CREDIT_KEY_MASK: u64 = (1 << 55) - 1;

/// The most hosts a map holds.
pub(crate) const MAX_HOSTS: usize = 4096;

/// Per-host state that can tell when it has nothing left to remember: then a fresh one is the same.
pub(crate) trait Idle {
    /// Whether nothing it counted at or before `now` still counts: a new one would decide alike.
    fn idle(&self, now: Instant) -> bool;
}

/// Per-host state, created on first use. Requests without a host share one entry.
///
/// Past [`MAX_HOSTS`], the entries that are idle make room; if none is, a new host shares one
/// overflow entry rather than forgetting what a host in use has counted: evicting a dead host's
/// budget account would give it back the floor it spent, evicting its throttle the rejections it
/// earned.
#[derive(Debug)]
pub(crate) struct HostMap<T> {
    map: RwLock<Table<T>>,
    overflow: OnceLock<Arc<T>>,
}

#[derive(Debug)]
struct Table<T> {
    hosts: HashMap<Option<Host>, Arc<T>>,
    /// A full table found nothing idle: no entry is looked at again before this, so that a stream of
    /// new hosts past the bound costs a scan per tenth of a second, not one per request.
    next_scan: Option<Instant>,
}

/// How long a full table with nothing idle is not scanned again.
const SCAN_EVERY: Duration = Duration::from_millis(100);

impl<T> Default for HostMap<T> {
    fn default() -> Self {
        Self {
            map: RwLock::new(Table {
                hosts: HashMap::new(),
                next_scan: None,
            }),
            overflow: OnceLock::new(),
        }
    }
}

impl<T: Idle> HostMap<T> {
    /// The entry of `host`, made by `make` if there is none. A read lock when it exists.
    pub(crate) fn get(&self, host: Option<Host>, make: impl FnOnce() -> T) -> Arc<T> {
        {
            let table = self.map.read().unwrap_or_else(|e| e.into_inner());
            if let Some(entry) = table.hosts.get(&host) {
                return Arc::clone(entry);
            }
        }
        let mut table = self.map.write().unwrap_or_else(|e| e.into_inner());
        if !table.hosts.contains_key(&host) && table.hosts.len() >= MAX_HOSTS {
            let now = Instant::now();
            if table.next_scan.is_none_or(|next| next <= now) {
                table.hosts.retain(|_, entry| !entry.idle(now));
                table.next_scan = (table.hosts.len() >= MAX_HOSTS).then(|| now + SCAN_EVERY);
            }
            if table.hosts.len() >= MAX_HOSTS {
                return Arc::clone(self.overflow.get_or_init(|| Arc::new(make())));
            }
        }
        Arc::clone(table.hosts.entry(host).or_insert_with(|| Arc::new(make())))
    }

    /// The entry of `host`, if it has one: none is made. A read lock.
    pub(crate) fn find(&self, host: Option<Host>) -> Option<Arc<T>> {
        let table = self.map.read().unwrap_or_else(|e| e.into_inner());
        table.hosts.get(&host).map(Arc::clone)
    }

    /// Every entry, by host (the overflow's aside): what a reload carries over.
    pub(crate) fn entries(&self) -> Vec<(Option<Host>, Arc<T>)> {
        let table = self.map.read().unwrap_or_else(|e| e.into_inner());
        (table.hosts.iter())
            .map(|(host, entry)| (*host, Arc::clone(entry)))
            .collect()
    }

    /// Calls `f` on every entry, the overflow's too.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&T)) {
        let table = self.map.read().unwrap_or_else(|e| e.into_inner());
        table.hosts.values().for_each(|entry| f(entry));
        if let Some(overflow) = self.overflow.get() {
            f(overflow);
        }
    }

    /// Puts `f(entry)` in place of every entry. The overflow, made once, stays as it is: it holds
    /// hosts that did not fit, whose counts are a mixture.
    pub(crate) fn replace_each(&self, mut f: impl FnMut(&T) -> T) {
        let mut table = self.map.write().unwrap_or_else(|e| e.into_inner());
        for entry in table.hosts.values_mut() {
            *entry = Arc::new(f(entry));
        }
    }

    /// Forgets every entry (the overflow but for its place).
    pub(crate) fn clear(&self) {
        let mut table = self.map.write().unwrap_or_else(|e| e.into_inner());
        table.hosts.clear();
        table.next_scan = None;
    }

    /// How many hosts the map holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .hosts
            .len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    struct Entry {
        n: u64,
        idle: AtomicBool,
    }

    impl Idle for Entry {
        fn idle(&self, _now: Instant) -> bool {
            self.idle.load(Ordering::Relaxed)
        }
    }

    fn entry(n: u64, idle: bool) -> Entry {
        Entry {
            n,
            idle: AtomicBool::new(idle),
        }
    }

    #[test]
    fn a_host_is_one_however_its_default_port_is_written() {
        let of = |request: http::Request<()>| {
            Host::of(&RequestView::new(
                request.method(),
                request.uri(),
                request.headers(),
            ))
        };
        let get = |uri: &str| http::Request::get(uri).body(()).unwrap();
        let origin_form = |host: &str| {
            http::Request::get("/items")
                .header("host", host)
                .body(())
                .unwrap()
        };
        let one = of(get("http://api.example.test/")).unwrap();
        for same in [
            of(get("http://API.example.test:80/items")),
            of(get("https://api.example.test/")),
            of(get("https://api.example.test:443/")),
            of(origin_form("api.example.test")),
            of(origin_form("api.example.test:80")),
        ] {
            assert_eq!(same, Some(one));
        }
        assert_ne!(of(get("http://api.example.test:8080/")), Some(one));
        assert_ne!(of(origin_form("api.example.test:8080")), Some(one));
        assert_ne!(of(get("http://other.example.test/")), Some(one));
    }

    #[test]
    fn one_entry_per_host_made_once_and_bounded() {
        let map: HostMap<Entry> = HostMap::default();
        let a = map.get(Some(Host::from_raw(1)), || entry(1, true));
        let again = map.get(Some(Host::from_raw(1)), || entry(2, true));
        assert!(Arc::ptr_eq(&a, &again));
        assert_eq!(map.get(None, || entry(3, true)).n, 3);
        assert_eq!(map.get(None, || entry(4, true)).n, 3);
        for n in 0..100_000 {
            map.get(Some(Host::from_raw(n)), || entry(n, true));
            assert!(map.len() <= MAX_HOSTS);
        }
    }

    #[test]
    fn hosts_in_use_are_never_forgotten_and_new_ones_share_the_overflow() {
        let map: HostMap<Entry> = HostMap::default();
        for n in 0..MAX_HOSTS as u64 {
            map.get(Some(Host::from_raw(n)), || entry(n, false));
        }
        let first = map.get(Some(Host::from_raw(0)), || entry(u64::MAX, false));
        let new = map.get(Some(Host::from_raw(1 << 40)), || entry(7, false));
        let newer = map.get(Some(Host::from_raw(1 << 41)), || entry(8, false));
        assert!(Arc::ptr_eq(&new, &newer), "one overflow entry");
        assert_eq!(map.len(), MAX_HOSTS);
        // Every host in use kept its own state.
        let again = map.get(Some(Host::from_raw(0)), || entry(u64::MAX, false));
        assert!(Arc::ptr_eq(&first, &again));
        // Once hosts fall idle, they make room, at the next scan.
        first.idle.store(true, Ordering::Relaxed);
        std::thread::sleep(SCAN_EVERY);
        let fresh = map.get(Some(Host::from_raw(1 << 42)), || entry(9, false));
        assert_eq!(fresh.n, 9);
        assert!(!Arc::ptr_eq(&fresh, &new));
    }
}
