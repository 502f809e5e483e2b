//! The handles every call records to, registered once for each series, as `metrics` means handles
//! to be used: a call that ends looks its series' handles up by a hash of its labels' sources, and
//! builds no key and registers nothing unless the series is new.
//!
//! Handles are kept only for the *lasting* recorder: the one a thread sees outside any
//! [`with_local_recorder`](metrics::with_local_recorder) scope, the global recorder once one is
//! installed, else the no-op one. Both live as long as the process, so a handle kept for either
//! always writes where it should. A local recorder (a test's) lives for its scope only, and the next
//! test's may be at the same address, which handles kept would write to: under one, each call
//! registers its handles as the `metrics` macros do.
//!
//! Which recorder is the lasting one is learnt from a short-lived thread of stagger's, which is in no
//! local recorder's scope: as the first policy is built, and again, at most once a second, when a
//! call sees a recorder that is not the lasting one it knows of (the global one, just installed, or
//! a local one).

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

use metrics::{Counter, Histogram, Key, Label, Level, Metadata, Recorder};

use super::{ATTEMPTS, CALL_ATTEMPTS, CALL_SLEPT};

/// The handles of one series of what every call records.
pub(super) struct CallHandles {
    /// [`ATTEMPTS`].
    pub(super) attempts: Counter,
    /// [`CALL_ATTEMPTS`].
    pub(super) call_attempts: Histogram,
    /// [`CALL_SLEPT`].
    pub(super) call_slept: Histogram,
}

impl CallHandles {
    fn register(recorder: &dyn Recorder, labels: Vec<Label>) -> Self {
        let key = |name: &'static str, labels: Vec<Label>| Key::from_parts(name, labels);
        Self {
            attempts: recorder.register_counter(&key(ATTEMPTS, labels.clone()), &METADATA),
            call_attempts: recorder
                .register_histogram(&key(CALL_ATTEMPTS, labels.clone()), &METADATA),
            call_slept: recorder.register_histogram(&key(CALL_SLEPT, labels), &METADATA),
        }
    }
}

/// What the metrics of this module tell a recorder of themselves, as the `metrics` macros do.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The most series whose handles are kept: the labels are bounded (a few thousand series at most),
/// and past it a call registers its handles as it comes.
const MAX_KEPT_SERIES: usize = 4096;

/// What a series' labels are made of, as a call's request has them: for an HTTP request the number
/// of its method (one of a few the labels know) and what names its host (the URI's authority, port
/// included, or its `Host` header); for a gRPC call its service, its method (never empty) and what
/// names its host. A host written two ways is two series holding the same labels, each registered
/// once.
#[derive(Clone, Copy)]
pub(super) struct Series<'a> {
    /// An HTTP request's method, as a number from 1; 0 for any other call.
    method: u8,
    parts: [&'a [u8]; 3],
}

impl<'a> Series<'a> {
    /// The series of an HTTP request whose method is the `method`-th of those the labels know (a
    /// number compares at once, where a name would be compared byte by byte), and of its target.
    pub(super) fn http(method: u8, target: &'a [u8]) -> Self {
        Self {
            method: method.saturating_add(1),
            parts: [b"", b"", target],
        }
    }

    /// The series of a gRPC call to `service`'s `method`.
    pub(super) fn grpc(service: &'a str, method: &'a str, target: &'a [u8]) -> Self {
        Self {
            method: 0,
            parts: [service.as_bytes(), method.as_bytes(), target],
        }
    }

    /// The series of calls without a request ([`retry()`](crate::retry())'s).
    pub(super) const NONE: Series<'static> = Series {
        method: 0,
        parts: [b""; 3],
    };

    /// A hash of the parts, eight bytes at a time: only where to look, as each entry keeps its
    /// series whole and a look finds it only if the series is the same.
    pub(super) fn hash(&self) -> u64 {
        let mix = |hash: u64, word: u64| {
            (hash ^ word)
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .rotate_left(29)
        };
        let mut hash = u64::from(self.method);
        for part in self.parts {
            for word in part.chunks_exact(8) {
                hash = mix(hash, word_at(word, 0));
            }
            // The last bytes, read as wyhash reads a short input: whole words that may overlap.
            let len = part.len();
            let last = match len {
                0 => 0,
                1..=3 => {
                    let byte = |at: usize| u64::from(part[at]);
                    byte(0) | byte(len / 2) << 8 | byte(len - 1) << 16
                }
                4..=7 => half_at(part, 0) | half_at(part, len - 4) << 32,
                _ => word_at(part, len - 8),
            };
            hash = mix(hash, last ^ (len as u64).rotate_right(8));
        }
        hash
    }
}

/// The eight bytes of `bytes` from `at`, little-endian; 0 if there are fewer (never: the hash
/// reads whole words only).
fn word_at(bytes: &[u8], at: usize) -> u64 {
    (bytes.get(at..at.saturating_add(8)))
        .and_then(|word| word.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// The four bytes of `bytes` from `at`, little-endian; 0 if there are fewer (never, as above).
fn half_at(bytes: &[u8], at: usize) -> u64 {
    (bytes.get(at..at.saturating_add(4)))
        .and_then(|half| half.try_into().ok())
        .map_or(0, |half| u64::from(u32::from_le_bytes(half)))
}

/// The handles of one series, with the series and the recorder they were registered with.
struct Entry {
    method: u8,
    parts: [Box<[u8]>; 3],
    recorder: usize,
    handles: CallHandles,
}

impl Entry {
    fn new(
        series: Series<'_>,
        address: usize,
        recorder: &dyn Recorder,
        labels: Vec<Label>,
    ) -> Self {
        Self {
            method: series.method,
            parts: series.parts.map(Box::from),
            recorder: address,
            handles: CallHandles::register(recorder, labels),
        }
    }

    /// Whether these are `series`' handles in the recorder at `recorder`.
    #[inline]
    fn holds(&self, series: Series<'_>, recorder: usize) -> bool {
        let [a, b, c] = &self.parts;
        let [x, y, z] = series.parts;
        // The lengths first: the bytes are compared only where they may be the same.
        self.recorder == recorder
            && self.method == series.method
            && (a.len(), b.len(), c.len()) == (x.len(), y.len(), z.len())
            && same(c, z)
            && (x.is_empty() || same(a, x))
            && (y.is_empty() || same(b, y))
    }
}

/// Whether `a` and `b`, of the same length, hold the same bytes: compared a word at a time, as
/// [`Series::hash`] reads them (a call to `memcmp` costs more than the few words of a host).
fn same(a: &[u8], b: &[u8]) -> bool {
    let len = a.len();
    match len {
        0 => true,
        1..=3 => a == b,
        4..=7 => half_at(a, 0) == half_at(b, 0) && half_at(a, len - 4) == half_at(b, len - 4),
        8..=16 => word_at(a, 0) == word_at(b, 0) && word_at(a, len - 8) == word_at(b, len - 8),
        _ => {
            (a.chunks_exact(8).zip(b.chunks_exact(8))).all(|(x, y)| word_at(x, 0) == word_at(y, 0))
                && word_at(a, len - 8) == word_at(b, len - 8)
        }
    }
}

/// The kept handles, by their series' hash.
type Kept = HashMap<u64, Arc<Entry>, Hashed>;

thread_local! {
    /// The entry this thread's last call recorded to: a thread that calls one host, or a few in
    /// turn, finds its handles here without hashing its series or taking a lock.
    static LAST: RefCell<Option<Arc<Entry>>> = const { RefCell::new(None) };
}

/// Runs `record` with the handles of `series`, whose labels `labels` makes, in the current
/// recorder.
pub(super) fn with_call_handles(
    series: Series<'_>,
    labels: impl FnOnce() -> Vec<Label>,
    record: impl FnOnce(&CallHandles),
) {
    static KEPT: LazyLock<RwLock<Kept>> = LazyLock::new(RwLock::default);
    metrics::with_recorder(|recorder| {
        let address = address_of(recorder);
        // An entry holds only the lasting recorder's handles: one that matches is theirs.
        let last = LAST.with_borrow(|last| {
            (last.as_ref())
                .filter(|entry| entry.holds(series, address))
                .map(Arc::clone)
        });
        if let Some(entry) = last {
            return record(&entry.handles);
        }
        if !is_lasting(address) {
            return record(&CallHandles::register(recorder, labels()));
        }
        let hash = series.hash();
        let kept = (KEPT.read().unwrap_or_else(PoisonError::into_inner))
            .get(&hash)
            .filter(|entry| entry.holds(series, address))
            .map(Arc::clone);
        let entry = kept.unwrap_or_else(|| {
            let entry = Arc::new(Entry::new(series, address, recorder, labels()));
            let mut kept = KEPT.write().unwrap_or_else(PoisonError::into_inner);
            // An entry of the same hash gives way: to this series, or to this recorder's handles.
            if kept.len() < MAX_KEPT_SERIES || kept.contains_key(&hash) {
                kept.insert(hash, Arc::clone(&entry));
            }
            entry
        });
        record(&entry.handles);
        LAST.set(Some(entry));
    });
}

fn address_of(recorder: &dyn Recorder) -> usize {
    std::ptr::from_ref(recorder).cast::<()>() as usize
}

/// The address of the lasting recorder, once learnt (0 before).
static LASTING: AtomicUsize = AtomicUsize::new(0);

/// Whether `address` is the lasting recorder's. One that is not known to be is looked for, at most
/// once a second: the first call after a global recorder is installed learns it is the lasting one.
fn is_lasting(address: usize) -> bool {
    LASTING.load(Ordering::Acquire) == address || look_again() == Some(address)
}

/// Learns which recorder is the lasting one if no call or policy has yet, as a policy is built:
/// a process's first calls then find their handles kept.
pub(super) fn learn_lasting() {
    if LASTING.load(Ordering::Acquire) == 0 {
        look();
    }
}

/// Looks for the lasting recorder again, unless a look was made less than a second ago.
#[cfg(not(target_family = "wasm"))]
#[cold]
#[inline(never)]
fn look_again() -> Option<usize> {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    static LOOKED: Mutex<Option<Instant>> = Mutex::new(None);
    {
        let mut looked = LOOKED.lock().unwrap_or_else(PoisonError::into_inner);
        if looked.is_some_and(|at| at.elapsed() < Duration::from_secs(1)) {
            return None;
        }
        *looked = Some(Instant::now());
    }
    look()
}

/// Without threads to look from, the lasting recorder is not looked for again.
#[cfg(target_family = "wasm")]
fn look_again() -> Option<usize> {
    None
}

/// Looks for the lasting recorder from a thread of its own, which is in no local recorder's scope,
/// and waits for it: tens of microseconds. A thread the system refuses leaves the lasting recorder
/// unknown, and calls registering their handles: slower, never wrong.
#[cfg(not(target_family = "wasm"))]
fn look() -> Option<usize> {
    let looking = std::thread::Builder::new()
        .name("stagger-metrics".into())
        .spawn(|| metrics::with_recorder(address_of));
    let lasting = looking.ok()?.join().ok()?;
    LASTING.store(lasting, Ordering::Release);
    Some(lasting)
}

/// Without threads to look from, no recorder is known to last, and each call registers its handles.
#[cfg(target_family = "wasm")]
fn look() -> Option<usize> {
    None
}

/// The kept handles' keys are hashes already: the map uses them as they are.
type Hashed = BuildHasherDefault<AsHashed>;

/// A hasher for keys that are a hash: it keeps the `u64` written.
#[derive(Default)]
struct AsHashed(u64);

impl Hasher for AsHashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64`s are written; anything else is folded in, never lost.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u64(&mut self, hash: u64) {
        self.0 = hash;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_compare_as_bytes_do_at_every_length() {
        let bytes: Vec<u8> = (0..40).map(|i| b'a' + i % 26).collect();
        for len in 0..=40 {
            let a = &bytes[..len];
            let copy = a.to_vec();
            assert!(same(a, &copy), "a copy, elsewhere in memory");
            for at in 0..len {
                let mut b = a.to_vec();
                b[at] = b'#';
                assert!(!same(a, &b), "{len} bytes, one differing at {at}");
            }
        }
    }

    #[test]
    fn a_series_is_found_only_by_itself() {
        let series = [
            Series::http(0, b"api.example.com:443"),
            Series::http(0, b"api.example.com:444"),
            Series::http(3, b"api.example.com:443"),
            Series::http(0, b""),
            Series::grpc("", "x", b""),
            Series::grpc("helloworld.Greeter", "SayHello", b"api.example.com:443"),
            Series::grpc("helloworld.Greeter", "SayHell", b"api.example.com:443"),
            Series::grpc("GET", "x", b"api.example.com:443"),
            Series::NONE,
        ];
        let recorder = metrics::NoopRecorder;
        for (i, one) in series.iter().enumerate() {
            let entry = Entry::new(*one, 1, &recorder, Vec::new());
            assert!(entry.holds(*one, 1));
            assert!(!entry.holds(*one, 2), "another recorder's handles");
            for (j, other) in series.iter().enumerate() {
                assert_eq!(entry.holds(*other, 1), i == j, "{i} and {j}");
                if i != j {
                    assert_ne!(one.hash(), other.hash(), "{i} and {j}");
                }
            }
        }
    }
}
