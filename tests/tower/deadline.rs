//! The deadline (`max_elapsed`) and the attempt timeout in virtual time: a retry that would end at or
//! past the deadline is not taken, time spent in attempts counts, a hung service is cut, and which of
//! the two limits the error names.

use http::StatusCode;
use stagger::StopReason;

use super::*;

#[tokio::test(start_paused = true)]
async fn a_retry_whose_sleep_would_end_past_max_elapsed_is_not_taken() {
    let hits = Hits::default();
    // Attempts at 0 and 100 ms; the next sleep (200 ms) would end at 300 ms, past the deadline.
    let policy = exact(ms(100))
        .max_retries(10)
        .max_elapsed(ms(250))
        .build()
        .unwrap();
    let start = Instant::now();

    let response = send(policy, server(&hits, always(503)), get())
        .await
        .unwrap();

    assert_eq!(hits.offsets(start), [0, 100].map(ms));
    assert_eq!(
        start.elapsed(),
        ms(100),
        "the response comes back at once, not after a sleep"
    );
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let info = info(&response);
    assert_eq!(info.attempts(), 2);
    assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_sleep_would_end_exactly_at_max_elapsed_is_not_taken() {
    let hits = Hits::default();
    let policy = exact(ms(100))
        .max_retries(10)
        .max_elapsed(ms(300))
        .build()
        .unwrap();
    let start = Instant::now();

    let response = send(policy, server(&hits, always(503)), get())
        .await
        .unwrap();

    // The third attempt would start at the deadline, with no time left to run: it is not sent.
    assert_eq!(hits.offsets(start), [0, 100].map(ms));
    let info = info(&response);
    assert_eq!(info.attempts(), 2);
    assert_eq!(info.stop_reason(), Some(StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn the_deadline_counts_the_time_spent_in_attempts() {
    let hits = Hits::default();
    let slow = {
        let hits = hits.clone();
        service_fn(move |_: Req| {
            hits.hit();
            async {
                tokio::time::sleep(ms(100)).await;
                Ok::<_, Infallible>(status(503))
            }
        })
    };
    // Attempt 1 ends at 100 ms, sleeps 100; attempt 2 ends at 300 ms, and 200 more would end at 500.
    let policy = exact(ms(100))
        .max_retries(10)
        .max_elapsed(ms(450))
        .build()
        .unwrap();
    let start = Instant::now();

    let response = send(policy, slow, get()).await.unwrap();

    assert_eq!(hits.offsets(start), [0, 200].map(ms));
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn without_a_budget_the_default_policy_gives_up_on_a_hung_service_at_30_s_after_3_attempts() {
    let hits = Hits::default();
    let start = Instant::now();

    let policy = RetryPolicy::builder().budget(None).build().unwrap();
    let error = send(policy, hung(&hits), get()).await.unwrap_err();

    // Attempts cut at 10 s each (`attempt_timeout`), retried after a jittered 100 and 200 ms ceiling;
    // the third is cut by the 30 s deadline.
    assert_eq!(start.elapsed(), Duration::from_secs(30));
    assert!(error.is_deadline(), "{error:?}");
    assert_eq!(hits.count(), 3);
    let offsets = hits.offsets(start);
    assert!(offsets[1] >= Duration::from_secs(10) && offsets[1] <= ms(10_100));
    assert!(offsets[2] >= offsets[1] + Duration::from_secs(10));
    assert_eq!(error.info().attempts(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn an_attempt_timeout_cuts_each_attempt_and_a_get_is_retried() {
    let hits = Hits::default();
    let slow_first = {
        let hits = hits.clone();
        service_fn(move |_: Req| {
            let n = hits.hit();
            async move {
                if n == 1 {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                Ok::<_, Infallible>(status(200))
            }
        })
    };
    let policy = exact(ms(10)).attempt_timeout(ms(200)).build().unwrap();
    let start = Instant::now();

    let response = send(policy.clone(), slow_first.clone(), get())
        .await
        .unwrap();

    assert_eq!(hits.offsets(start), [0, 210].map(ms));
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(info(&response).attempts(), 2);

    // A POST without a key is not replayed after a timeout: the server may have acted on it.
    let hits = Hits::default();
    let slow = {
        let hits = hits.clone();
        service_fn(move |_: Req| {
            hits.hit();
            async {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Ok::<_, Infallible>(status(200))
            }
        })
    };
    let start = Instant::now();
    let error = send(policy, slow, post(None)).await.unwrap_err();
    assert_eq!(start.elapsed(), ms(200));
    assert!(error.is_attempt_timeout(), "{error:?}");
    assert_eq!(error.elapsed().unwrap().limit(), ms(200));
    assert_eq!(hits.count(), 1);
    assert_eq!(error.info().stop_reason(), Some(StopReason::NotIdempotent));
}

#[tokio::test(start_paused = true)]
async fn a_deadline_that_leaves_no_room_after_a_timed_out_attempt_is_the_error_s_answer() {
    // 1 s in all, 200 ms per attempt, no budget: the attempts time out until a retry no longer fits.
    let hits = Hits::default();
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(10)))
        .max_elapsed(Duration::from_secs(1))
        .attempt_timeout(ms(200))
        .budget(None)
        .build()
        .unwrap();
    let error = send(policy, hung(&hits), get()).await.unwrap_err();
    let stop = error.info().stop_reason();
    assert_eq!(stop, Some(StopReason::Deadline));
    assert!(error.is_deadline(), "{error}");
    assert!(!error.is_attempt_timeout(), "{error}");
}
