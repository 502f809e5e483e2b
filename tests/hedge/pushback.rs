//! What the server says to slow down, in an answer set aside while the other attempt of the race ran.

use std::sync::Mutex;

use stagger::{Backoff, RetryAfterMode, RetryEvent};
use tower::Layer;

use super::common::scripted::{self as loopback, Server, both, reply};
use super::scripted::{Answer, answer, backend, get, ms};
use super::*;

/// The `Retry-After` of each retry decided.
fn hook(events: &Arc<Mutex<Vec<RetryEvent>>>) -> impl Fn(&RetryEvent) + Send + Sync + 'static {
    let events = Arc::clone(events);
    move |event| events.lock().unwrap().push(*event)
}

/// A call whose first attempt answers `first` and its hedge (sent at 100 ms) `hedge`, then 200:
/// the retry as decided, and when the call ended.
async fn race_then_retry(first: Answer, hedge: Answer) -> (RetryEvent, Duration) {
    let (inner, calls) = backend(move |n, _| match n {
        0 => first.clone(),
        1 => hedge.clone(),
        _ => answer(0, 200),
    });
    let events = Arc::new(Mutex::new(Vec::new()));
    let policy = hedging()
        .backoff(Backoff::fixed(ms(10)))
        .max_retries(3)
        .on_retry(hook(&events))
        .build()
        .unwrap();
    let start = tokio::time::Instant::now();
    let response = RetryLayer::new(policy)
        .layer(inner)
        .oneshot(get("/"))
        .await
        .unwrap();
    let took = start.elapsed();
    assert_eq!(response.status(), 200);
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.hedges()), (3, 1));
    assert_eq!(calls.to("/"), 3);
    let [retry] = events.lock().unwrap()[..] else {
        panic!("one retry: {:?}", events.lock().unwrap());
    };
    (retry, took)
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_set_aside_in_a_race_floors_the_retry_after_a_plain_503() {
    // The hedge's 429 comes at 120 ms and is set aside; the first attempt's 503 ends the race at
    // 150 ms.
    let (retry, took) =
        race_then_retry(answer(150, 503), answer(20, 429).header("retry-after", "5")).await;
    assert_eq!(retry.retry_after, Some(Duration::from_secs(5)));
    assert!(retry.delay >= Duration::from_secs(5), "{retry:?}");
    assert!(took >= ms(150) + Duration::from_secs(5), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn the_longest_retry_after_seen_in_a_race_floors_the_retry() {
    // The set-aside 429 asks for 5 s, the 503 that ends the race for 1 s.
    let (retry, took) = race_then_retry(
        answer(150, 503).header("retry-after", "1"),
        answer(20, 429).header("retry-after", "5"),
    )
    .await;
    assert_eq!(retry.retry_after, Some(Duration::from_secs(5)));
    assert!(took >= ms(150) + Duration::from_secs(5), "{took:?}");
    // The first attempt's 429 set aside (at 150 ms), the hedge's later 503 (at 200 ms) asks for
    // less.
    let (retry, took) = race_then_retry(
        answer(150, 429).header("retry-after", "5"),
        answer(100, 503).header("retry-after", "1"),
    )
    .await;
    assert_eq!(retry.retry_after, Some(Duration::from_secs(5)));
    assert!(took >= ms(200) + Duration::from_secs(5), "{took:?}");
}

#[tokio::test(start_paused = true)]
async fn a_throttled_answer_set_aside_in_a_race_puts_the_retry_on_the_throttle_schedule() {
    // A 429 without a delay set aside, then a plain 503: the retry waits on the throttle
    // schedule (250-500 ms at first, equal jitter), not the 10 ms backoff.
    let (retry, _) = race_then_retry(answer(150, 503), answer(20, 429)).await;
    assert_eq!(retry.retry_after, None);
    assert!(retry.delay >= ms(250), "{retry:?}");
}

/// Over loopback, through both adapters: the hedge's `429` with `Retry-After: 1` is set aside,
/// the first attempt's plain `503` ends the race, and the retry waits the second asked for.
#[test]
fn a_retry_after_set_aside_in_a_race_floors_the_retry_through_both_adapters() {
    both(|adapter| async move {
        let server = Server::start().await;
        let url = server.script(
            "/race",
            [
                reply(503).after(ms(150)),
                reply(429).header("retry-after", 1),
            ],
        );
        let policy = hedging()
            .backoff(Backoff::fixed(ms(20)))
            .retry_after(RetryAfterMode::Strict)
            .max_retries(3)
            .build()
            .unwrap();
        let response = adapter.client(policy).get(&url).await.unwrap();
        assert_eq!(response.status(), 200, "{adapter:?}");
        let info = loopback::info(&response);
        assert_eq!((info.attempts(), info.hedges()), (3, 1), "{adapter:?}");
        let arrivals = server.arrivals("/race");
        assert_eq!(arrivals.len(), 3, "{adapter:?}");
        // The race ended at the 503, 150 ms after the first attempt arrived; the retry waited
        // 1 s from there.
        loopback::took(
            adapter,
            "the retry after the race",
            arrivals[2].at - arrivals[0].at,
            Duration::from_secs(1) + ms(150),
            Duration::from_secs(1) + ms(650),
        );
    });
}

/// The host cooldown hears a pushback set aside in a race, though the race was won: the next
/// request to the host waits for the pause it asked.
#[test]
fn a_pushback_set_aside_in_a_race_pauses_its_host_through_both_adapters() {
    both(|adapter| async move {
        let server = Server::start().await;
        // The first attempt answers 200 at 300 ms; its hedge, at 100 ms, a 429 asking for 1 s.
        let url = server.script(
            "/race",
            [
                reply(200).after(ms(300)),
                reply(429).header("retry-after", 1),
            ],
        );
        let policy = hedging().host_cooldown(true).build().unwrap();
        let client = adapter.client(policy);
        let response = client.get(&url).await.unwrap();
        assert_eq!(response.status(), 200, "{adapter:?}");
        let info = loopback::info(&response);
        assert_eq!((info.attempts(), info.hedges()), (2, 1), "{adapter:?}");

        // The pause runs from the 429 (at about 100 ms) for 1 s, plus a share of as long again.
        let next = client.get(&server.url("/next")).await.unwrap();
        let waited = loopback::info(&next).cooldown();
        assert!(
            waited >= ms(700) && waited < Duration::from_secs(2),
            "{adapter:?}: {waited:?}"
        );
    });
}
