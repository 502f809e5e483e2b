//! The pure pieces: one jittered delay draw, and `Retry-After` parsing in each of its forms.
//!
//! Targets: a draw ≤ 10 ns; delta-seconds ≤ 50 ns; an HTTP-date ≤ 200 ns.

use std::hint::black_box;
use std::time::{Duration, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use http::HeaderValue;
use stagger::{Backoff, Jitter, parse_retry_after};

/// Retries a request makes before its delays start again: draws stay in the realistic range of retry
/// counts, where the ceiling still grows, rather than at retry 10⁹.
const DRAWS_PER_REQUEST: u32 = 8;

fn delay_draw(c: &mut Criterion) {
    let mut group = c.benchmark_group("delay_draw");
    let exponential = Backoff::exponential(Duration::from_millis(100));
    for (name, backoff) in [
        ("full", exponential.with_jitter(Jitter::Full)),
        ("equal", exponential.with_jitter(Jitter::Equal)),
        (
            "decorrelated",
            exponential.with_jitter(Jitter::Decorrelated),
        ),
        ("none", exponential.with_jitter(Jitter::None)),
        // A base other than 2 computes each ceiling with a floating-point power until the cap.
        ("full_base_1_5", exponential.with_base(1.5)),
    ] {
        let fresh = backoff.delays_seeded(1);
        // One `next()` per iteration; every `DRAWS_PER_REQUEST` draws the sequence restarts from a copy of
        // the fresh one (a predictable branch and a small copy, amortised over the draws).
        group.bench_function(name, |b| {
            let mut delays = fresh.clone();
            let mut drawn = 0;
            b.iter(|| {
                if drawn == DRAWS_PER_REQUEST {
                    delays = fresh.clone();
                    drawn = 0;
                }
                drawn += 1;
                black_box(&mut delays).next()
            });
        });
    }
    // The same iterator never restarted: after a few million draws the retry count is in the millions,
    // the ceiling long saturated at `max_delay`.
    group.bench_function("full_never_restarted", |b| {
        let mut delays = exponential.delays_seeded(1);
        b.iter(|| black_box(&mut delays).next());
    });
    group.finish();
}

fn retry_after(c: &mut Criterion) {
    // Sun, 06 Nov 1994 08:49:30 GMT: seven seconds before the dates below.
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_770);
    let mut group = c.benchmark_group("parse_retry_after");
    for (name, value) in [
        ("delta_seconds", "120"),
        ("imf_fixdate", "Sun, 06 Nov 1994 08:49:37 GMT"),
        ("rfc850", "Sunday, 06-Nov-94 08:49:37 GMT"),
        ("asctime", "Sun Nov  6 08:49:37 1994"),
    ] {
        let value = HeaderValue::from_static(value);
        assert!(parse_retry_after(&value, now).is_some(), "{value:?}");
        group.bench_function(name, |b| {
            b.iter(|| parse_retry_after(black_box(&value), black_box(now)));
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50);
    targets = delay_draw, retry_after
}
criterion_main!(benches);
