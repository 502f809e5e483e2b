//! Adaptive throttling counts a race as what it is to the backend.

use stagger::StopReason;
use tower::Layer;

use super::scripted::{answer, backend, get, ms};
use super::*;

/// What adaptive throttling did to a run of calls.
#[derive(Debug, Default, PartialEq, Eq)]
struct Throttled {
    /// Calls it ended, rejecting their first attempt or a retry.
    calls: u32,
    /// Hedges it did not let go, of calls that reached a slow attempt.
    hedges_refused: u32,
    /// Hedges sent.
    hedges: u32,
}

/// Sends `calls` GETs one after the other, each to a path of its own, through one layer with
/// `adaptive_throttle(k)`, hedging after 100 ms or not. Every attempt answers `200` after 150 ms,
/// but the first attempt of every `failing`-th call (if any; the 10th, the 20th, …), which
/// answers `503` at once.
async fn throttled(k: f64, hedge: bool, calls: usize, failing: Option<usize>) -> Throttled {
    let (inner, _) = backend(move |n, path| {
        let call: usize = path[1..].parse().unwrap();
        match failing {
            Some(every) if call % every == every - 1 && n == 0 => answer(0, 503),
            _ => answer(150, 200),
        }
    });
    let mut policy = RetryPolicy::builder()
        .adaptive_throttle(k)
        .budget(None)
        .seed(1);
    if hedge {
        policy = policy.hedge_after(ms(100));
    }
    let service = RetryLayer::new(policy.build().unwrap()).layer(inner);
    let mut seen = Throttled::default();
    for call in 0..calls {
        let info = match service.clone().oneshot(get(&format!("/{call}"))).await {
            Ok(response) => response.extensions().get::<RetryInfo>().unwrap().clone(),
            Err(error) => error.info(),
        };
        if info.stop_reason() == Some(StopReason::Throttled) {
            seen.calls += 1;
        } else if hedge && info.hedges() == 0 {
            // Nothing else refuses it: no budget, and max_retries is 10.
            seen.hedges_refused += 1;
        }
        seen.hedges += info.hedges();
    }
    seen
}

#[tokio::test(start_paused = true)]
async fn hedging_a_healthy_backend_is_not_throttled() {
    // Every call is hedged, and every race is won by a 200: the loser, dropped, was refused
    // nothing by the backend.
    let none = Throttled::default();
    assert_eq!(throttled(1.0, false, 60, None).await, none);
    let hedged = Throttled {
        hedges: 60,
        ..Throttled::default()
    };
    assert_eq!(throttled(1.0, true, 60, None).await, hedged);
}

#[tokio::test(start_paused = true)]
async fn hedging_is_throttled_no_more_than_retrying_alone() {
    // One call in ten meets a 503 and is retried; every call's slow attempt is hedged. The 503
    // is one refusal in the call's requests, hedged or not.
    let without = throttled(2.0, false, 200, Some(10)).await;
    assert_eq!(without, Throttled::default());
    let hedged = Throttled {
        hedges: 200,
        ..without
    };
    assert_eq!(throttled(2.0, true, 200, Some(10)).await, hedged);
}
