//! The table's housekeeping: which entry a ticket is of, entries found live or made, their ends
//! kept, room made in a full table, and the lock that disarms an emptied table.

use super::*;

/// Whether a health can put an entry into the table.
pub(super) fn host_health_fails(health: Health) -> bool {
    matches!(
        health,
        Health::Failed | Health::TimedOut | Health::Silent | Health::Gateway(_)
    )
}

/// The request's ticket, if it is of the entry `key`: a request holds one, of the last entry it met
/// down, and an attempt's answer speaks to that entry's probe only.
pub(super) fn mine(ticket: &mut Option<DownTicket>, key: Host) -> Option<DownTicket> {
    ticket.filter(|ticket| ticket.key == key)
}

/// Puts back the ticket [`mine`] took out, changed.
pub(super) fn put_back(ticket: &mut Option<DownTicket>, mine: Option<DownTicket>) {
    if let Some(mine) = mine {
        *ticket = Some(mine);
    }
}

/// After a change of `key`'s entry: extends the table's end to the entry's, or removes it when it
/// has nothing left to keep.
pub(super) fn settle(
    hosts: &mut HashMap<Host, Entry>,
    latest: &mut Option<Instant>,
    key: Host,
    now: Instant,
) {
    let Some(entry) = hosts.get_mut(&key) else {
        return;
    };
    if entry.advance(now) {
        extend_to(latest, entry.ends());
    } else {
        hosts.remove(&key);
    }
}

/// The table, locked; when the lock is let go with the table empty, requests skip it again.
pub(super) struct Guard<'a> {
    pub(super) table: std::sync::MutexGuard<'a, Table>,
    pub(super) armed: &'a AtomicBool,
}

impl std::ops::Deref for Guard<'_> {
    type Target = Table;

    fn deref(&self) -> &Table {
        &self.table
    }
}

impl std::ops::DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut Table {
        &mut self.table
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if self.table.hosts.is_empty() {
            self.armed.store(false, Ordering::Release);
        }
    }
}

/// The name of `request`'s host for the reports and errors: `name`, or `name:port` for a port that
/// is not its scheme's default, in lower case.
pub(crate) fn name_of(request: &RequestView<'_>) -> Box<str> {
    let name = request.host().unwrap_or_default().to_ascii_lowercase();
    match request.port().filter(|port| !matches!(port, 80 | 443)) {
        Some(port) => format!("{name}:{port}").into_boxed_str(),
        None => name.into_boxed_str(),
    }
}

pub(super) fn next_id(ids: &mut u64) -> u64 {
    *ids = ids.wrapping_add(1);
    *ids
}

/// `host`'s entry at `now`, moved along to it; `None` if it has none, or it has ended (and is
/// removed). Past the latest end of any entry the table is emptied first.
pub(super) fn live<'a>(
    hosts: &'a mut HashMap<Host, Entry>,
    latest: &mut Option<Instant>,
    host: Host,
    now: Instant,
) -> Option<&'a mut Entry> {
    if latest.is_none_or(|latest| latest <= now) {
        hosts.clear();
        *latest = None;
        return None;
    }
    let entry = hosts.get_mut(&host)?;
    if entry.advance(now) {
        return hosts.get_mut(&host);
    }
    hosts.remove(&host);
    None
}

pub(super) fn extend(latest: &mut Option<Instant>, ends: Instant) {
    *latest = Some(latest.map_or(ends, |latest| latest.max(ends)));
}

pub(super) fn extend_to(latest: &mut Option<Instant>, ends: Option<Instant>) {
    if let Some(ends) = ends {
        extend(latest, ends);
    }
}

/// Puts `key` in the table with nothing known of it yet, room made first if the table is full:
/// `false` when there is none, every entry having requests that wait on it.
pub(super) fn insert_new(
    hosts: &mut HashMap<Host, Entry>,
    key: Host,
    name: Option<Box<str>>,
    route: Option<Box<str>>,
    replica: Option<SocketAddr>,
    now: Instant,
) -> bool {
    if hosts.len() >= MAX_HOSTS && !make_room(hosts, now) {
        return false;
    }
    let entry = Entry {
        name,
        route,
        replica,
        cooldown: None,
        health: HostHealth::default(),
    };
    hosts.insert(key, entry);
    true
}

/// Frees slots: the entries that have ended, or else the eighth of them that end first, so that a
/// stream of new hosts costs a scan of the table once per `MAX_HOSTS / 8` of them, not each time.
/// An entry that requests wait on stays: evicted, its waiters would go when their timers fire, all
/// at once and unpaced. `false` when no slot could be freed.
pub(super) fn make_room(hosts: &mut HashMap<Host, Entry>, now: Instant) -> bool {
    let ends = |entry: &Entry| entry.ends().unwrap_or(now);
    let kept = |entry: &Entry| entry.health.has_waiters();
    hosts.retain(|_, entry| kept(entry) || ends(entry) > now);
    if hosts.len() < MAX_HOSTS {
        return true;
    }
    let mut all: Vec<Instant> = (hosts.values())
        .filter(|entry| !kept(entry))
        .map(ends)
        .collect();
    if all.is_empty() {
        return false;
    }
    let nth = (MAX_HOSTS / 8).min(all.len() - 1);
    let (_, &mut last_evicted, _) = all.select_nth_unstable(nth);
    hosts.retain(|_, entry| kept(entry) || ends(entry) > last_evicted);
    hosts.len() < MAX_HOSTS
}
