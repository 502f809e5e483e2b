//! The breaker is on by default, so it never costs a healthy call (issue 35): a failure in one place
//! — one path of a host, one request's own time limit, one caller that gives up — costs nothing
//! elsewhere. Through both of a reqwest user's adapters (`RetryMiddleware`, and `RetryLayer` over
//! `reqwest::Client`), against servers in process on tokio's paused clock; `RetryLayer` over `http`
//! types is in `tests/breaker.rs`, `RetryLayer::grpc` in `tests/grpc/breaker.rs`.
#![cfg(all(feature = "tower", feature = "reqwest-middleware"))]

mod common;

use std::time::Duration;

use common::scripted::{Adapter, Client, Failure, Server, both_paused, info, ms, reply};
use stagger::{
    Backoff, Breaker, HostState, Jitter, Overrides, RetryBudget, RetryPolicy, RetryPolicyBuilder,
    StopReason,
};
use tokio::time::Instant;

/// The host of an in-process server's URL.
fn host_of(url: &str) -> String {
    url.parse::<reqwest::Url>()
        .unwrap()
        .host_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_path_answered_502_costs_nothing_to_the_host_s_other_paths_at_any_moment() {
    both_paused(|adapter| async move {
        for breaker in [Breaker::default(), Breaker::fail_fast()] {
            let policy = RetryPolicy::builder().breaker(breaker).build().unwrap();
            let client = adapter.client(policy.clone());
            let server = Server::in_process();
            // One backend of a gateway gone: `/reports` answers 502 to everything; `/items` 200.
            let reports = server.script("/reports", vec![reply(502); 1000]);
            let items = server.url("/items");
            let host = host_of(&items);
            // One GET /reports, retried by the defaults, beside a GET /items every 100 ms for 20 s.
            let failing = {
                let client = client.clone();
                tokio::spawn(async move { client.get(&reports).await })
            };
            let start = Instant::now();
            for n in 0..200 {
                tokio::time::sleep_until(start + ms(100) * n).await;
                let sent = Instant::now();
                let response = client.get(&items).await.unwrap_or_else(|failure| {
                    panic!("{adapter:?}, {breaker:?}: GET /items {n}: {failure:?}")
                });
                assert_eq!(response.status(), 200, "{adapter:?}, {breaker:?}, call {n}");
                assert_eq!(
                    sent.elapsed(),
                    Duration::ZERO,
                    "{adapter:?}: held, call {n}"
                );
            }
            assert!(matches!(
                policy.route_state(&host, "/reports"),
                HostState::Down { .. }
            ));
            assert_eq!(policy.host_state(&host), HostState::Up { failures: 0 });
            assert_eq!(server.arrivals("/items").len(), 200);
            // The failing call ends with its last answer, intact, the breaker's verdict beside it.
            let last = failing.await.unwrap().unwrap();
            assert_eq!(last.status(), 502);
            assert!(info(&last).stop_reason().is_some());
        }
    });
}

/// A server in process whose every answer takes 200 ms.
fn slow(server: &Server, path: &str) -> String {
    server.script(path, vec![reply(200).after(ms(200)); 100])
}

#[test]
fn a_request_s_own_time_limits_never_move_the_breaker() {
    both_paused(|adapter| async move {
        for breaker in [Breaker::default(), Breaker::fail_fast()] {
            let policy = RetryPolicy::builder().breaker(breaker).build().unwrap();
            let client = adapter.client(policy.clone());
            let server = Server::in_process();
            let url = slow(&server, "/slow");
            let host = host_of(&url);
            // Five calls given up by their callers after 50 ms (`tokio::time::timeout`).
            for _ in 0..5 {
                let given_up = tokio::time::timeout(ms(50), client.get(&url)).await;
                assert!(given_up.is_err(), "{adapter:?}");
            }
            // Five with an attempt timeout of their own, 50 ms (`Overrides`, which reaches the
            // middleware: reqwest keeps a `reqwest::Request`'s extensions from `RetryLayer`).
            if let (Adapter::Middleware, Client::Middleware(middleware)) = (adapter, &client) {
                let quick = Overrides::builder()
                    .attempt_timeout(ms(50))
                    .max_retries(0)
                    .build()
                    .unwrap();
                for _ in 0..5 {
                    let cut = middleware.get(&url).with_extension(quick).send().await;
                    assert!(cut.is_err(), "{adapter:?}: cut by its own attempt timeout");
                }
            }
            assert_eq!(
                policy.host_state(&host),
                HostState::Up { failures: 0 },
                "{adapter:?}, {breaker:?}"
            );
            // The next plain call is sent at once and answered in its 200 ms.
            let start = Instant::now();
            let response = client.get(&url).await.unwrap();
            assert_eq!(response.status(), 200);
            assert_eq!(start.elapsed(), ms(200), "{adapter:?}, {breaker:?}");
        }
    });
}

/// Delays of exactly 100 ms, and a breaker holding calls for 10 s after 5 failures in a row.
fn holding() -> RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(100)).with_jitter(Jitter::None))
        .breaker(Breaker::default())
}

#[test]
fn a_held_call_whose_caller_gives_up_leaves_nothing_behind() {
    both_paused(|adapter| async move {
        let policy = holding().max_retries(0).build().unwrap();
        let client = adapter.client(policy.clone());
        let server = Server::in_process();
        let url = server.script("/down", vec![reply(502); 1000]);
        let host = host_of(&url);
        for _ in 0..5 {
            let response = client.get(&url).await.unwrap();
            assert_eq!(response.status(), 502);
        }
        // 100 calls held for the path, each given up by its caller after 20 ms.
        let held: Vec<_> = (0..100)
            .map(|_| {
                let (client, url) = (client.clone(), url.clone());
                tokio::spawn(async move { tokio::time::timeout(ms(20), client.get(&url)).await })
            })
            .collect();
        tokio::time::sleep(ms(10)).await;
        match policy.route_state(&host, "/down") {
            HostState::Down { held: 100, .. } => {}
            state => panic!("{adapter:?}: {state:?}"),
        }
        for call in held {
            assert!(call.await.unwrap().is_err(), "{adapter:?}: given up");
        }
        // None of them is counted as held any more, nor keeps a waker: the release, when the path is
        // back, is paced for the calls that remain, none.
        match policy.route_state(&host, "/down") {
            HostState::Down { held: 0, .. } => {}
            state => panic!("{adapter:?}: {state:?}"),
        }
    });
}

#[test]
fn a_call_given_up_in_its_sleep_gives_its_retry_back_to_the_budget() {
    both_paused(|adapter| async move {
        // One retry in the whole window.
        let budget = RetryBudget::builder()
            .ratio(0.0)
            .min_per_second(1)
            .window(Duration::from_secs(1))
            .build()
            .unwrap();
        let policy = holding()
            .breaker(None)
            .max_retries(1)
            .budget(budget)
            .build()
            .unwrap();
        let client = adapter.client(policy);
        let server = Server::in_process();
        let url = server.script("/flaky", vec![reply(503), reply(503)]);
        // A call gets a 503, is granted its retry, and is given up while it sleeps before it.
        let given_up = tokio::time::timeout(ms(50), client.get(&url)).await;
        assert!(given_up.is_err(), "{adapter:?}");
        assert_eq!(server.arrivals("/flaky").len(), 1);
        // The retry it did not send is the next call's.
        let response = client.get(&url).await.unwrap();
        assert_eq!(response.status(), 200, "{adapter:?}");
        let retried = info(&response);
        assert_eq!(
            (retried.attempts(), retried.stop_reason()),
            (2, Some(StopReason::Success))
        );
        // And the budget is spent now.
        let url = server.script("/spent", vec![reply(503), reply(503)]);
        let response = client.get(&url).await.unwrap();
        assert_eq!(info(&response).stop_reason(), Some(StopReason::Budget));
    });
}

#[test]
fn a_host_that_is_down_fails_a_call_unsent_with_the_rejection_naming_its_path() {
    both_paused(|adapter| async move {
        let policy = holding()
            .breaker(Breaker::fail_fast())
            .max_retries(0)
            .build()
            .unwrap();
        let client = adapter.client(policy);
        let server = Server::in_process();
        let url = server.script("/down", vec![reply(502); 10]);
        for _ in 0..5 {
            client.get(&url).await.unwrap();
        }
        match client.get(&url).await {
            Err(Failure::Rejected(rejected)) => {
                assert_eq!(rejected.reason(), StopReason::HostDown);
                assert_eq!(rejected.route(), Some("/down"));
                assert!(
                    rejected.to_string().starts_with("not sent: /down on host "),
                    "{rejected}"
                );
            }
            other => panic!("{adapter:?}: {other:?}"),
        }
        assert_eq!(server.arrivals("/down").len(), 5);
    });
}
