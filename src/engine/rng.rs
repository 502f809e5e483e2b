//! Seeds for the jitter generators: OS entropy per policy, a distinct stream per request.

use std::sync::atomic::{AtomicU64, Ordering};

use rand::SeedableRng;
use rand::TryRng;
use rand::rngs::{SmallRng, SysRng};

/// A seed from the operating system's entropy source.
///
/// Never the clock: a fleet started in the same second must not share a jitter sequence. Should the OS
/// source fail, the fallback is std's `RandomState`, whose keys also come from OS entropy.
pub(crate) fn entropy_seed() -> u64 {
    SysRng.try_next_u64().unwrap_or_else(|_| {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    })
}

/// Hands each request of one policy its own generator, derived from the policy's seed.
///
/// Lock-free: one atomic increment per request. Streams `k` and `k + 1` are seeded from the SplitMix64
/// outputs of consecutive Weyl-sequence states, so they share no structure.
#[derive(Debug)]
pub(crate) struct StreamSource {
    seed: u64,
    next: AtomicU64,
}

impl StreamSource {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            seed,
            next: AtomicU64::new(0),
        }
    }

    pub(crate) fn seed(&self) -> u64 {
        self.seed
    }

    pub(crate) fn next_stream(&self) -> SmallRng {
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        SmallRng::seed_from_u64(splitmix64(
            self.seed
                .wrapping_add(k.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
        ))
    }
}

pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn two_requests_of_one_seeded_policy_get_different_streams() {
        let source = StreamSource::new(42);
        let a = source.next_stream().next_u64();
        let b = source.next_stream().next_u64();
        assert_ne!(a, b);
        let again = StreamSource::new(42);
        assert_eq!(again.next_stream().next_u64(), a);
    }

    #[test]
    fn entropy_seeds_differ() {
        assert_ne!(entropy_seed(), entropy_seed());
    }
}
