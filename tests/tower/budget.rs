//! The retry budget across requests: its reserve, its share of the load, the starting credit that pays
//! for a new client's timeouts, and a retry given back by a call dropped mid-sleep.

use stagger::StopReason;

use super::*;

#[tokio::test(start_paused = true)]
async fn a_zero_percent_budget_allows_only_its_reserve_across_concurrent_requests() {
    let hits = Hits::default();
    // No share of the load, and a reserve of 1 retry per second over a 1 s window: one retry in all.
    let policy = exact(ms(1))
        .max_retries(3)
        .budget(one_retry())
        .build()
        .unwrap();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(server(&hits, always(503)));

    let responses =
        futures::future::join_all((0..10).map(|_| service.clone().oneshot(get()))).await;

    assert_eq!(hits.count(), 11);
    let infos: Vec<_> = responses
        .iter()
        .map(|r| info(r.as_ref().unwrap()))
        .collect();
    assert_eq!(infos.iter().map(RetryInfo::retries).sum::<u32>(), 1);
    assert!(
        infos
            .iter()
            .all(|i| i.stop_reason() == Some(StopReason::Budget))
    );

    // Once the window has passed, the reserve is there again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let response = service.oneshot(get()).await.unwrap();
    assert_eq!(hits.count(), 13);
    assert_eq!(info(&response).attempts(), 2);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Budget));
}

#[tokio::test(start_paused = true)]
async fn a_ten_percent_budget_retries_one_request_in_ten() {
    let hits = Hits::default();
    let policy = exact(ms(1))
        .max_retries(3)
        .budget(
            RetryBudget::builder()
                .ratio(0.1)
                .min_per_second(0)
                .window(Duration::from_secs(10))
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(server(&hits, always(503)));

    let mut retries = 0;
    for _ in 0..20 {
        let response = service.clone().oneshot(get()).await.unwrap();
        retries += info(&response).retries();
        assert_eq!(info(&response).stop_reason(), Some(StopReason::Budget));
    }

    assert_eq!(retries, 2);
    assert_eq!(hits.count(), 22);
}

#[tokio::test(start_paused = true)]
async fn a_new_clients_timeouts_are_retried_from_the_starting_credit_an_old_quiet_ones_are_not() {
    let hits = Hits::default();
    let policy = RetryPolicy::builder()
        .attempt_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let start = Instant::now();

    // The budget's first window: no request has paid for retrying a timeout, and the starting credit
    // (one second of the floor, 10 retries' worth) pays for two, at 4 each. The credit of a host is
    // the process's: a host of this test's own, so that no test beside it has spent it.
    let get = || {
        Request::get("http://starting-credit.invalid/")
            .body(String::new())
            .unwrap()
    };
    let error = send(policy.clone(), hung(&hits), get()).await.unwrap_err();
    assert!(error.is_attempt_timeout(), "{error:?}");
    assert_eq!(hits.count(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::Budget));
    // Three attempts of 1 s, retried after jittered 100 and 200 ms ceilings.
    assert!(start.elapsed() >= Duration::from_secs(3) && start.elapsed() <= ms(3_300));

    // A call made after the first window is judged by its recent requests, which paid for nothing:
    // a fleet of quiet clients does not keep a slow server busy with retries of timeouts.
    tokio::time::advance(Duration::from_secs(10)).await;
    let error = send(policy, hung(&hits), get()).await.unwrap_err();
    assert!(error.is_attempt_timeout(), "{error:?}");
    assert_eq!(hits.count(), 4);
    assert_eq!(error.info().stop_reason(), Some(StopReason::Budget));
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_mid_sleep_gives_its_retry_back_to_the_budget() {
    // A budget of exactly one retry: no percentage, one retry per second over a one-second window.
    let policy_of_one = || {
        RetryPolicy::builder()
            .backoff(Backoff::fixed(ms(100)))
            .max_retries(1)
            .budget(one_retry())
            .build()
            .unwrap()
    };

    // Dropped during its sleep: the retry it had withdrawn was never sent, and is given back.
    let policy = policy_of_one();
    let hits = Hits::default();
    let first = tokio::spawn(send(policy.clone(), server(&hits, always(503)), get()));
    tokio::time::sleep(ms(50)).await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    assert_eq!(hits.count(), 1);
    let response = send(policy, server(&hits, always(503)), get())
        .await
        .unwrap();
    assert_eq!(info(&response).attempts(), 2, "the retry was given back");

    // The control: a first call that sends its retry spends the budget.
    let policy = policy_of_one();
    let hits = Hits::default();
    send(policy.clone(), server(&hits, always(503)), get())
        .await
        .unwrap();
    let response = send(policy, server(&hits, always(503)), get())
        .await
        .unwrap();
    assert_eq!(info(&response).attempts(), 1);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Budget));
}
