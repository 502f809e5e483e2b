use super::*;

const MS: Duration = Duration::from_millis(1);

#[test]
fn ceilings_double_from_initial_and_stop_at_the_cap() {
    let b = Backoff::exponential(100 * MS).with_max_delay(Duration::from_secs(1));
    let got: Vec<_> = (1..=6).map(|n| b.ceiling(n)).collect();
    assert_eq!(got, [100, 200, 400, 800, 1000, 1000].map(|m| m * MS));
    assert_eq!(b.ceiling(0), 100 * MS);
}

#[test]
fn ceilings_follow_a_fractional_base() {
    let b = Backoff::exponential(Duration::from_secs(1)).with_base(1.5);
    let got: Vec<_> = (1..=4).map(|n| b.ceiling(n)).collect();
    assert_eq!(got, [1000, 1500, 2250, 3375].map(|m| m * MS));
}

#[test]
fn ceiling_saturates_for_any_retry_count() {
    let b = Backoff::exponential(Duration::MAX).with_max_delay(Duration::MAX);
    assert_eq!(b.ceiling(u32::MAX), Duration::MAX);
    let b = Backoff::exponential(MS).with_base(f64::MAX);
    assert_eq!(b.ceiling(u32::MAX), Backoff::DEFAULT_MAX_DELAY);
    assert_eq!(b.ceiling(3), Backoff::DEFAULT_MAX_DELAY);
    let b = Backoff::exponential(MS).with_base(1.000_001);
    assert_eq!(b.ceiling(u32::MAX), Backoff::DEFAULT_MAX_DELAY);
    assert_eq!(b.ceiling(i32::MAX as u32 + 2), Backoff::DEFAULT_MAX_DELAY);
}

#[test]
fn meaningless_settings_still_never_panic_and_respect_the_cap() {
    for base in [f64::NAN, f64::INFINITY, -3.0, 0.0, 0.5] {
        let b = Backoff::exponential(10 * MS)
            .with_base(base)
            .with_max_delay(MS);
        for n in [0, 1, 2, 3, 64, u32::MAX] {
            assert!(b.ceiling(n) <= MS, "base {base}, n {n}");
        }
        for jitter in [
            Jitter::None,
            Jitter::Full,
            Jitter::Equal,
            Jitter::Decorrelated,
        ] {
            assert!(
                b.with_jitter(jitter)
                    .delays_seeded(1)
                    .take(50)
                    .all(|d| d <= MS)
            );
        }
    }
}

#[test]
fn carried_ceilings_match_the_formula() {
    // The draw carries the ceiling from one retry to the next (a shift for base 2); without jitter
    // every delay must be exactly `ceiling(n)`, on both sides of the u64-nanosecond boundary.
    let huge = Duration::from_nanos(u64::MAX / 3);
    for base in [1.0, 1.5, 2.0, 3.0, 10.0] {
        for initial in [Duration::ZERO, Duration::from_nanos(1), 100 * MS, huge] {
            for max in [
                initial,
                Duration::from_secs(20),
                Duration::from_nanos(u64::MAX),
                Duration::MAX,
            ] {
                let b = Backoff::exponential(initial)
                    .with_base(base)
                    .with_max_delay(max)
                    .with_jitter(Jitter::None);
                for (n, delay) in (1..).zip(b.delays_seeded(0).take(200)) {
                    assert_eq!(
                        delay,
                        b.ceiling(n),
                        "base {base}, initial {initial:?}, max {max:?}, n {n}"
                    );
                }
            }
        }
    }
}

#[test]
fn fixed_waits_its_delay_every_time() {
    let b = Backoff::fixed(250 * MS);
    assert!(b.delays().take(100).all(|d| d == 250 * MS));
    assert_eq!(b.ceiling(u32::MAX), 250 * MS);
}

#[test]
fn uniform_handles_durations_beyond_u64_nanoseconds() {
    let mut rng = SmallRng::seed_from_u64(3);
    for _ in 0..1000 {
        assert!(uniform(&mut rng, Duration::MAX) <= Duration::MAX);
    }
    assert_eq!(uniform(&mut rng, Duration::ZERO), Duration::ZERO);
}

#[test]
fn seeded_sequences_repeat_and_differ_between_seeds() {
    let b = Backoff::exponential(100 * MS);
    let a: Vec<_> = b.delays_seeded(1).take(8).collect();
    assert_eq!(a, b.delays_seeded(1).take(8).collect::<Vec<_>>());
    assert_ne!(a, b.delays_seeded(2).take(8).collect::<Vec<_>>());
}
