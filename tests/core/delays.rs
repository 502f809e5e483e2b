//! Ceilings and delays: the backoff's ceilings, each jitter within them, decorrelated jitter's
//! documented formula, and properties over any backoff: the cap is a true maximum, ceilings saturate,
//! and no setter panics.

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};

use super::*;

const JITTERS: [Jitter; 4] = [
    Jitter::None,
    Jitter::Full,
    Jitter::Equal,
    Jitter::Decorrelated,
];

#[test]
fn exponential_ceilings_table() {
    let table: &[(Backoff, &[u64])] = &[
        (
            Backoff::exponential(100 * MS),
            &[100, 200, 400, 800, 1600, 3200, 6400, 12800, 20000, 20000],
        ),
        (
            Backoff::exponential(100 * MS).with_max_delay(Duration::from_secs(1)),
            &[100, 200, 400, 800, 1000, 1000, 1000, 1000, 1000, 1000],
        ),
        (
            Backoff::exponential(10 * MS).with_base(3.0),
            &[10, 30, 90, 270, 810, 2430, 7290, 20000, 20000, 20000],
        ),
        (Backoff::fixed(250 * MS), &[250; 10]),
        (Backoff::exponential(Duration::ZERO), &[0; 10]),
    ];
    for (backoff, want) in table {
        let got: Vec<u64> = (1..=10)
            .map(|n| backoff.ceiling(n).as_millis() as u64)
            .collect();
        assert_eq!(&got, want, "{backoff:?}");
    }
}

#[test]
fn no_jitter_waits_exactly_the_ceiling() {
    let backoff = Backoff::exponential(100 * MS).with_jitter(Jitter::None);
    let got: Vec<_> = backoff.delays_seeded(0).take(5).collect();
    assert_eq!(got, [100, 200, 400, 800, 1600].map(|m| m * MS));
}

#[test]
fn decorrelated_starts_from_initial_and_never_exceeds_three_times_the_previous() {
    let backoff = Backoff::exponential(10 * MS)
        .with_max_delay(Duration::from_secs(60))
        .with_jitter(Jitter::Decorrelated);
    let mut previous = 10 * MS;
    for delay in backoff.delays_seeded(11).take(1000) {
        assert!(
            delay >= 10 * MS && delay <= previous * 3,
            "{delay:?} after {previous:?}"
        );
        previous = delay;
    }
}

#[test]
fn decorrelated_mean_near_the_cap_follows_the_documented_formula() {
    // d(n) = min(max_delay, U[initial, 3·d(n−1)]), d(0) = initial, with a cap ten times `initial` that
    // most draws of d(8) exceed. The formula has no scale, so d(8) / max_delay has the same mean for
    // 100 ms and 1 s as for the caps of the u128 paths (3·d(n−1) beyond a u64 of nanoseconds, and
    // max_delay beyond it). Capping 3·d(n−1) before the draw, U[initial, min(max_delay, 3·d(n−1))], as
    // the draw once did, gave a mean d(8) / max_delay of 0.490 on all three paths against the
    // formula's 0.728 (0.729 measured now).
    const SEQUENCES: u64 = 20_000;
    const SIMULATED: u32 = 200_000;

    // The formula on its own: one generator for every sequence, seeded apart from stagger's, in f64.
    let simulate = |high: fn(f64) -> f64| {
        let mut rng = SmallRng::seed_from_u64(0x00DE_C0DE_D5EE_D000);
        (0..SIMULATED)
            .map(|_| {
                let mut d = 0.1;
                for _ in 0..8 {
                    d = f64::min(1.0, rng.random_range(0.1..high(d)));
                }
                d
            })
            .sum::<f64>()
            / f64::from(SIMULATED)
    };
    let documented = simulate(|d| 3.0 * d);
    let within = |mean: f64| (mean - documented).abs() <= 0.03 * documented;
    // The tolerance tells the formula from the cap before the draw.
    let capped_first = simulate(|d| f64::min(1.0, 3.0 * d));
    assert!(
        !within(capped_first),
        "capped first {capped_first:.4}, documented {documented:.4}"
    );

    for max_delay in [
        Duration::from_secs(1),
        Duration::from_nanos(u64::MAX),
        Duration::MAX,
    ] {
        let backoff = Backoff::exponential(max_delay / 10)
            .with_max_delay(max_delay)
            .with_jitter(Jitter::Decorrelated);
        let measured = (0..SEQUENCES)
            .map(|seed| {
                let d8 = backoff.delays_seeded(seed).nth(7).unwrap();
                d8.as_secs_f64() / max_delay.as_secs_f64()
            })
            .sum::<f64>()
            / SEQUENCES as f64;
        assert!(
            within(measured),
            "max_delay {max_delay:?}: mean d(8) / max_delay {measured:.4}, documented {documented:.4}"
        );
    }
}

fn any_backoff() -> impl Strategy<Value = Backoff> {
    let duration = prop_oneof![
        (0u64..10_000_000_000).prop_map(Duration::from_nanos),
        any::<u64>().prop_map(Duration::from_secs),
        Just(Duration::MAX),
    ];
    let base = prop_oneof![1.0f64..10.0, 1.0f64..f64::MAX, Just(f64::MAX), Just(1.0)];
    let jitter = prop::sample::select(JITTERS.to_vec());
    (duration.clone(), duration, base, jitter).prop_map(|(a, b, base, jitter)| {
        let (initial, max_delay) = if a <= b { (a, b) } else { (b, a) };
        Backoff::exponential(initial)
            .with_max_delay(max_delay)
            .with_base(base)
            .with_jitter(jitter)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_cap_is_a_true_maximum_for_every_jitter(backoff in any_backoff(), seed in any::<u64>()) {
        prop_assert!(backoff.validate().is_ok());
        for (n, delay) in (1..).zip(backoff.delays_seeded(seed).take(64)) {
            prop_assert!(delay <= backoff.max_delay());
            let ceiling = backoff.ceiling(n);
            match backoff.jitter() {
                Jitter::None => prop_assert_eq!(delay, ceiling),
                Jitter::Full => prop_assert!(delay <= ceiling),
                Jitter::Equal => prop_assert!(delay >= ceiling / 2 && delay <= ceiling),
                Jitter::Decorrelated => prop_assert!(delay >= backoff.initial()),
                _ => unreachable!(),
            }
        }
    }

    #[test]
    fn ceilings_saturate_and_never_shrink(backoff in any_backoff(), n in any::<u32>()) {
        let ceiling = backoff.ceiling(n);
        prop_assert!(ceiling <= backoff.max_delay());
        prop_assert!(backoff.ceiling(n.saturating_add(1)) >= ceiling);
        prop_assert!(ceiling >= backoff.initial().min(backoff.max_delay()));
    }

    #[test]
    fn huge_retry_counts_answer_max_delay(initial_ms in 1u64..1_000_000, base in 1.5f64..1e6) {
        let backoff = Backoff::exponential(Duration::from_millis(initial_ms))
            .with_max_delay(Duration::from_secs(1_000_000))
            .with_base(base);
        prop_assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(1_000_000));
    }

    #[test]
    fn setters_never_panic_whatever_the_values(
        initial in any::<u64>(), max in any::<u64>(), base in any::<f64>(), n in any::<u32>(), seed in any::<u64>(),
    ) {
        for jitter in JITTERS {
            let backoff = Backoff::exponential(Duration::from_nanos(initial))
                .with_max_delay(Duration::from_nanos(max))
                .with_base(base)
                .with_jitter(jitter);
            let _ = backoff.validate();
            prop_assert!(backoff.ceiling(n) <= Duration::from_nanos(max));
            for delay in backoff.delays_seeded(seed).take(8) {
                prop_assert!(delay <= Duration::from_nanos(max));
            }
        }
    }
}
