//! A live change of a running client's policy (`LivePolicy::reload`, issue 36, item 3) through both
//! reqwest adapters (`RetryMiddleware`, and `RetryLayer` over `reqwest::Client`) and
//! `stagger::retry`: a reload during an outage keeps the host down and its calls held; a reload
//! changes the next calls, never one in flight; a budget spent stays spent; reloads from many
//! threads while calls run lose none of them. In-process servers on tokio's paused clock, but for
//! the last, which runs real threads in real time. A service config's reload: `tests/grpc/reload.rs`.
#![cfg(all(feature = "tower", feature = "reqwest-middleware"))]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use common::scripted::{Adapter, Client, Failure, Server, both_paused, info, ms, reply};
use stagger::{
    Backoff, Breaker, HostState, Jitter, LivePolicy, Outcome, Reason, RetryBudget, RetryPolicy,
    RetryPolicyBuilder, StopReason,
};

/// Delays of exactly `delay`, no budget, no breaker: what ends a call is its settings.
fn exact(delay: Duration) -> RetryPolicyBuilder {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(delay).with_jitter(Jitter::None))
        .budget(None)
        .breaker(None)
}

/// A breaker that holds calls for 10 s, found down after `failures`, probing 1 s after it went down
/// (then 2 s, …), with no jitter; one attempt a call, of at most 1 s.
fn holding(failures: u32) -> RetryPolicyBuilder {
    let probes = Backoff::exponential(Duration::from_secs(1))
        .with_max_delay(Duration::from_secs(4))
        .with_jitter(Jitter::None);
    let breaker = Breaker::hold(Duration::from_secs(10))
        .with_failures(failures)
        .with_probe_backoff(probes);
    exact(ms(10))
        .max_retries(0)
        .attempt_timeout(Duration::from_secs(1))
        .breaker(breaker)
}

fn host_of(url: &str) -> &str {
    let rest = url.strip_prefix("http://").unwrap();
    &rest[..rest.find('/').unwrap()]
}

#[test]
fn a_reload_during_an_outage_keeps_the_host_down_and_its_held_calls_held() {
    both_paused(|adapter| async move {
        let server = Server::in_process();
        // Five attempts go unanswered (each cut by the attempt timeout); then the host is back.
        let silent = (0..5).map(|_| reply(200).after(Duration::from_secs(60)));
        let url = server.script("/orders", silent);
        let host = host_of(&url).to_owned();
        let policy = LivePolicy::new(holding(5).build().unwrap());
        let client = adapter.client(policy.clone());
        for _ in 0..5 {
            let ended = client.get(&url).await;
            assert!(ended.is_err(), "{adapter:?}: cut by its attempt timeout");
        }
        let down = |policy: &RetryPolicy| match policy.host_state(&host) {
            HostState::Down { held, .. } => Some(held),
            _ => None,
        };
        assert_eq!(down(&policy.current()), Some(0), "{adapter:?}: found down");

        // Three calls wait for the host.
        let held: Vec<_> = (0..3)
            .map(|_| {
                let (client, url) = (client.clone(), url.clone());
                tokio::spawn(async move { client.get(&url).await })
            })
            .collect();
        tokio::time::sleep(ms(200)).await;
        assert_eq!(down(&policy.current()), Some(3), "{adapter:?}");

        // The operators reload: more retries, a breaker of another threshold.
        policy
            .reload(holding(3).max_retries(2).build().unwrap())
            .unwrap();
        assert_eq!(policy.current().max_retries(), 2);
        assert_eq!(policy.current().breaker().unwrap().failures(), 3);
        // The host is still down, its calls still held, nothing sent.
        tokio::time::sleep(ms(200)).await;
        assert_eq!(down(&policy.current()), Some(3), "{adapter:?}: kept");
        assert!(held.iter().all(|call| !call.is_finished()), "{adapter:?}");
        assert_eq!(server.arrivals("/orders").len(), 5, "{adapter:?}");
        // A policy built anew, as a reload did before `LivePolicy`, knows nothing of the outage.
        let anew = holding(3).max_retries(2).build().unwrap();
        assert_eq!(anew.host_state(&host), HostState::Up { failures: 0 });
        // A call that starts now, under the new policy, waits for the host too.
        let (late_client, late_url) = (client.clone(), url.clone());
        let late = tokio::spawn(async move { late_client.get(&late_url).await });
        tokio::time::sleep(ms(100)).await;
        assert_eq!(down(&policy.current()), Some(4), "{adapter:?}");

        // The probe due 1 s after the host went down finds it back, and every held call goes.
        for call in held.into_iter().chain([late]) {
            let response = call.await.unwrap().unwrap();
            assert_eq!(response.status(), 200, "{adapter:?}");
        }
        assert_eq!(
            server.arrivals("/orders").len(),
            9,
            "{adapter:?}: a probe and four"
        );
        let first_after = server.arrivals("/orders")[5].at;
        let down_at = server.arrivals("/orders")[4].at + Duration::from_secs(1);
        assert_eq!(first_after - down_at, Duration::from_secs(1), "{adapter:?}");
    });
}

#[test]
fn a_reload_that_lowers_max_retries_applies_to_the_next_call_not_to_one_in_flight() {
    both_paused(|adapter| async move {
        let server = Server::in_process();
        let url = server.script("/busy", (0..20).map(|_| reply(503)));
        let policy = LivePolicy::new(exact(ms(100)).max_retries(5).build().unwrap());
        let client = adapter.client(policy.clone());
        let (in_flight, at) = (client.clone(), url.clone());
        let in_flight = tokio::spawn(async move { in_flight.get(&at).await });
        // Sent at 0 and 100 ms: it is between its second and third attempts.
        tokio::time::sleep(ms(150)).await;
        assert_eq!(server.arrivals("/busy").len(), 2);
        policy
            .reload(exact(ms(100)).max_retries(1).build().unwrap())
            .unwrap();

        let next = client.get(&url).await.unwrap();
        assert_eq!(next.status(), 503);
        assert_eq!(info(&next).attempts(), 2, "{adapter:?}: the new policy's");
        assert_eq!(info(&next).stop_reason(), Some(StopReason::MaxRetries));
        let first = in_flight.await.unwrap().unwrap();
        assert_eq!(
            info(&first).attempts(),
            6,
            "{adapter:?}: the policy it started with"
        );
        assert_eq!(server.arrivals("/busy").len(), 8);
    });
}

#[tokio::test(start_paused = true)]
async fn stagger_retry_runs_each_call_under_the_policy_it_started_with() {
    let policy = LivePolicy::new(exact(ms(100)).max_retries(5).build().unwrap());
    let attempts = Arc::new(AtomicU32::new(0));
    let count = Arc::clone(&attempts);
    let busy = move || {
        count.fetch_add(1, Ordering::SeqCst);
        async { Err::<(), _>("busy") }
    };
    let busy_again = busy.clone();
    let retried = |_: &Result<(), &str>| Outcome::RetrySafe(Reason::Other("busy"));
    let in_flight = {
        let policy = policy.clone();
        tokio::spawn(async move { stagger::retry(&policy, busy_again, retried).await })
    };
    tokio::time::sleep(ms(150)).await;
    policy
        .reload(exact(ms(100)).max_retries(1).build().unwrap())
        .unwrap();
    let next = stagger::retry(&policy, busy, retried).await.unwrap_err();
    assert_eq!(next.info().attempts(), 2);
    assert_eq!(in_flight.await.unwrap().unwrap_err().info().attempts(), 6);
    assert_eq!(attempts.load(Ordering::SeqCst), 8);
}

/// A budget of 2 retries a second and nothing more, exact: what a call against a server that keeps
/// failing spends.
fn spent_by(ratio: f64) -> RetryPolicyBuilder {
    let budget = RetryBudget::builder()
        .ratio(ratio)
        .min_per_second(2)
        .window(Duration::from_secs(1))
        .build()
        .unwrap();
    exact(ms(1)).max_retries(10).budget(budget)
}

#[test]
fn a_budget_spent_stays_spent_through_a_reload_of_another_shape() {
    both_paused(|adapter| async move {
        let server = Server::in_process();
        let url = server.script("/down", (0..20).map(|_| reply(503)));
        let policy = LivePolicy::new(spent_by(0.0).build().unwrap());
        let client = adapter.client(policy.clone());
        let first = client.get(&url).await.unwrap();
        assert_eq!(
            info(&first).attempts(),
            3,
            "{adapter:?}: the floor's 2 retries"
        );
        assert_eq!(info(&first).stop_reason(), Some(StopReason::Budget));
        // Another ratio: another account, which carries what the old one spent.
        policy.reload(spent_by(0.01).build().unwrap()).unwrap();
        assert_eq!(policy.current().budget().unwrap().ratio(), 0.01);
        let next = client.get(&url).await.unwrap();
        assert_eq!(info(&next).attempts(), 1, "{adapter:?}: spent");
        assert_eq!(info(&next).stop_reason(), Some(StopReason::Budget));
        // A client built anew would have retried it twice.
        let anew = adapter.client(spent_by(0.01).build().unwrap());
        assert_eq!(info(&anew.get(&url).await.unwrap()).attempts(), 3);
    });
}

/// Two policies a busy client is reloaded between, whose guards differ in every shape a reload
/// carries: the budget's ratio, the breaker's threshold, adaptive throttling on and off.
fn alternate(n: usize) -> RetryPolicy {
    let budget = RetryBudget::builder()
        .ratio([0.5, 1.0][n % 2])
        .min_per_second(1_000)
        .build()
        .unwrap();
    let builder = RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(1)))
        .max_retries([3, 4][n % 2])
        .budget(budget)
        .breaker(Breaker::hold(Duration::from_secs(1)).with_failures([50, 60][n % 2]));
    let builder = match n % 2 {
        0 => builder.adaptive_throttle(10.0),
        _ => builder,
    };
    builder.build().unwrap()
}

/// Calls of every worker, and reloads from every reloading thread, at once.
const WORKERS: usize = 8;
const CALLS: usize = 150;
const RELOADERS: usize = 4;

#[test]
fn reloads_from_many_threads_while_calls_run_lose_no_call() {
    for adapter in [Adapter::Middleware, Adapter::Layer] {
        let server = Server::in_process();
        // Every other answer a 503, which the retries get past.
        let answers = (0..WORKERS * CALLS).map(|n| reply(if n % 2 == 0 { 503 } else { 200 }));
        let url = server.script("/mixed", answers);
        let policy = LivePolicy::new(alternate(0));
        let client = adapter.client(policy.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let reloads = Arc::new(AtomicUsize::new(0));
        // Real threads, reloading as fast as they can until the calls are done.
        let reloaders: Vec<_> = (0..RELOADERS)
            .map(|thread| {
                let (policy, stop, reloads) = (policy.clone(), stop.clone(), reloads.clone());
                std::thread::spawn(move || {
                    let mut n = thread;
                    while !stop.load(Ordering::Relaxed) {
                        policy.reload(alternate(n)).unwrap();
                        reloads.fetch_add(1, Ordering::Relaxed);
                        n += 1;
                    }
                })
            })
            .collect();
        // The calls, on a runtime of four threads of their own.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let ended = runtime.block_on(async {
            let workers: Vec<_> = (0..WORKERS)
                .map(|_| {
                    let (client, url) = (client.clone(), url.clone());
                    tokio::spawn(async move { calls(&client, &url).await })
                })
                .collect();
            let mut ended = Vec::new();
            for worker in workers {
                ended.extend(worker.await.unwrap());
            }
            ended
        });
        stop.store(true, Ordering::Relaxed);
        for reloader in reloaders {
            reloader.join().unwrap();
        }
        assert_eq!(
            ended.len(),
            WORKERS * CALLS,
            "{adapter:?}: every call ended"
        );
        // Each ended answered 200, or 503 when adaptive throttling or the breaker refused its retry,
        // or refused unsent by adaptive throttling (`None`), while either was on.
        let answered = (ended.iter())
            .filter(|(status, _)| *status == Some(200))
            .count();
        let other = (ended.iter()).find(|(status, _)| !matches!(status, Some(200 | 503) | None));
        assert_eq!(other, None, "{adapter:?}");
        assert!(
            answered > WORKERS * CALLS / 2,
            "{adapter:?}: {answered} answered"
        );
        // Every attempt the server saw is one a call counted: none was sent twice, none lost.
        let attempts: u32 = ended.iter().map(|(_, attempts)| attempts).sum();
        assert_eq!(
            server.arrivals("/mixed").len(),
            attempts as usize,
            "{adapter:?}"
        );
        assert!(
            reloads.load(Ordering::Relaxed) >= RELOADERS,
            "{adapter:?}: reloaded"
        );
        let current = policy.current();
        assert!([3, 4].contains(&current.max_retries()), "{adapter:?}");
        eprintln!(
            "{adapter:?}: {} calls ({answered} answered 200), {attempts} attempts, {} reloads \
             from {RELOADERS} threads meanwhile",
            ended.len(),
            reloads.load(Ordering::Relaxed)
        );
    }
}

/// `CALLS` GETs of `url`, one after another: each one's status (`None`: refused unsent by adaptive
/// throttling) and attempts.
async fn calls<P: stagger::PolicySource>(client: &Client<P>, url: &str) -> Vec<(Option<u16>, u32)> {
    let mut ended = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        match client.get(url).await {
            Ok(response) => {
                ended.push((Some(response.status().as_u16()), info(&response).attempts()));
            }
            Err(Failure::Rejected(rejected)) => {
                assert_eq!(rejected.reason(), StopReason::Throttled, "{rejected:?}");
                ended.push((None, rejected.info().attempts()));
            }
            Err(Failure::Other(error)) => panic!("{error}"),
        }
    }
    ended
}

#[test]
fn a_reload_keeps_a_host_s_pause() {
    both_paused(|adapter| async move {
        let server = Server::in_process();
        let paused = reply(429).header("retry-after", "5");
        let url = server.script("/quota", [paused]);
        let cooling = || exact(ms(10)).max_retries(0).host_cooldown(true);
        let policy = LivePolicy::new(cooling().build().unwrap());
        let client = adapter.client(policy.clone());
        assert_eq!(client.get(&url).await.unwrap().status(), 429);
        policy
            .reload(cooling().max_retries(3).build().unwrap())
            .unwrap();
        let host = host_of(&url);
        assert!(
            matches!(policy.current().host_state(host), HostState::Held { .. }),
            "{adapter:?}: {:?}",
            policy.current().host_state(host)
        );
        // The next call waits out the pause the host asked for before the reload.
        let start = tokio::time::Instant::now();
        assert_eq!(client.get(&url).await.unwrap().status(), 200);
        assert!(start.elapsed() >= Duration::from_secs(5), "{adapter:?}");
    });
}

#[test]
fn a_live_policy_judged_by_a_closure_refuses_a_reload_with_a_classifier_of_its_own() {
    let classified = || {
        RetryPolicy::builder()
            .classifier(stagger::classify::from_fn(|_, _| Outcome::Fatal))
            .build()
            .unwrap()
    };
    let policy = LivePolicy::new(exact(ms(1)).max_retries(4).build().unwrap());
    let judged = |_: &Result<u32, ()>| Outcome::Success;
    assert!(stagger::RetryLayer::classify_with(policy.clone(), judged).is_ok());
    assert_eq!(
        policy.reload(classified()),
        Err(stagger::ConfigError::ClassifierUnused)
    );
    assert_eq!(
        policy.current().max_retries(),
        4,
        "the current policy stays"
    );
    // A live policy no closure judges takes it.
    let other = LivePolicy::new(RetryPolicy::default());
    assert!(other.reload(classified()).is_ok());
}
