//! Time is evidence (issue 35, item 6), through the tower layer on tokio's paused clock: a host that
//! answered in milliseconds and answers nothing is found down after a second of silence, long
//! before the attempt timeout (10 s by default) has passed five times; a host that is merely slow is
//! never found down; failing fast, a probe of a host that answered in a millisecond waits tens of
//! milliseconds, not the attempt timeout.

use std::sync::atomic::AtomicU64;

use super::*;

/// A host in process whose answers take `latency` (`u64::MAX` milliseconds: never), switched by the
/// test; and when each attempt came.
#[derive(Clone, Default)]
struct Timed {
    latency_ms: Arc<AtomicU64>,
    hits: Arc<Mutex<Vec<Instant>>>,
}

impl Timed {
    fn answering_in(latency: Duration) -> Self {
        let host = Self::default();
        host.set(latency);
        host
    }

    fn set(&self, latency: Duration) {
        let ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX);
        self.latency_ms.store(ms, Ordering::SeqCst);
    }

    fn blackhole(&self) {
        self.latency_ms.store(u64::MAX, Ordering::SeqCst);
    }

    fn hits_since(&self, since: Instant) -> usize {
        let hits = self.hits.lock().unwrap();
        hits.iter().filter(|at| **at >= since).count()
    }

    fn service(
        self,
    ) -> impl Service<Req, Response = Res, Error = io::Error, Future: Send> + Clone + 'static {
        let host = self;
        service_fn(move |_: Req| {
            host.hits.lock().unwrap().push(Instant::now());
            let latency = host.latency_ms.load(Ordering::SeqCst);
            async move {
                if latency == u64::MAX {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(ms(latency)).await;
                Ok(Response::new(String::new()))
            }
        })
    }
}

/// Calls `host` through `policy` every `every` for `run`, each on a task of its own; what each call
/// came to, with when it was made and how long it took.
async fn calls(
    policy: &RetryPolicy,
    host: &Timed,
    every: Duration,
    run: Duration,
) -> Vec<(Instant, Duration, Result<u16, stagger::Error<io::Error>>)> {
    let start = Instant::now();
    let mut calls = Vec::new();
    let mut n = 0;
    while start.elapsed() < run {
        tokio::time::sleep_until(start + every * n).await;
        n += 1;
        let service = RetryLayer::new(policy.clone()).layer(host.clone().service());
        calls.push(tokio::spawn(async move {
            let sent = Instant::now();
            let result = service.oneshot(get("api.test")).await;
            (sent, sent.elapsed(), result.map(|r| r.status().as_u16()))
        }));
    }
    let mut ended = Vec::new();
    for call in calls {
        ended.push(call.await.unwrap());
    }
    ended
}

/// Until `policy` finds `api.test` down, or `within` passes: when it did, if it did.
async fn found_down(policy: &RetryPolicy, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < within {
        if let HostState::Down { .. } = policy.host_state("api.test") {
            return Some(start.elapsed());
        }
        tokio::time::sleep(ms(1)).await;
    }
    None
}

#[tokio::test(start_paused = true)]
async fn a_host_that_answered_in_milliseconds_and_answers_nothing_is_found_down_after_a_second() {
    // The defaults but no retry: each call is one attempt, cut at 10 s.
    let policy = RetryPolicy::builder()
        .max_retries(0)
        .breaker(Breaker::fail_fast())
        .build()
        .unwrap();
    let events = common::capture();
    let host = Timed::answering_in(ms(1));
    // It answers in a millisecond, a call every 50 ms, for 2 s.
    let answered = calls(&policy, &host, ms(50), Duration::from_secs(2)).await;
    assert!(answered.iter().all(|(_, _, r)| matches!(r, Ok(200))));
    // Then nothing: it is found down once the host has been silent a second, with calls still every
    // 50 ms, not after the 10 s attempt timeout.
    host.blackhole();
    let outage = Instant::now();
    let watch = found_down(&policy, Duration::from_secs(20));
    let (down, _) = tokio::join!(watch, calls(&policy, &host, ms(50), Duration::from_secs(3)));
    let down = down.expect("found down");
    assert!(
        down >= Duration::from_secs(1) && down < Duration::from_millis(1300),
        "found down {down:?} into the silence"
    );
    // What reached it from then on: the probes.
    let reached = host.hits_since(outage + down + ms(1));
    assert!(reached <= 8, "{reached} attempts after it was found down");
    // The event says why: its silence.
    let evidence: Vec<_> = (events.stagger().into_iter())
        .filter(|event| event.message == "host down")
        .map(|event| event.field("host.evidence").to_owned())
        .collect();
    assert_eq!(evidence, ["silent"]);
}

#[tokio::test(start_paused = true)]
async fn a_host_whose_answers_jump_from_1_ms_to_300_ms_is_never_found_down() {
    for breaker in [Breaker::default(), Breaker::fail_fast()] {
        let policy = RetryPolicy::builder().breaker(breaker).build().unwrap();
        let host = Timed::answering_in(ms(1));
        let fast = calls(&policy, &host, ms(20), Duration::from_secs(2)).await;
        assert!(fast.iter().all(|(_, _, r)| matches!(r, Ok(200))));
        host.set(ms(300));
        let watch = found_down(&policy, Duration::from_secs(10));
        let (down, slow) = tokio::join!(
            watch,
            calls(&policy, &host, ms(20), Duration::from_secs(10))
        );
        assert_eq!(down, None, "{breaker:?}");
        for (_, took, result) in &slow {
            assert!(matches!(result, Ok(200)), "{breaker:?}: {result:?}");
            assert_eq!(*took, ms(300), "{breaker:?}");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_host_whose_queue_builds_up_answering_slower_and_slower_is_never_found_down() {
    // An overload: its answers take 1 ms, then 100 ms more each second, up to 3 s, while it keeps
    // answering; a call every 10 ms, each with the default attempt timeout (10 s).
    let policy = RetryPolicy::default();
    let host = Timed::answering_in(ms(1));
    let ramp = {
        let host = host.clone();
        async move {
            for second in 1..=30u64 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                host.set(ms(100 * second));
            }
        }
    };
    let watch = found_down(&policy, Duration::from_secs(34));
    let (down, _, ended) = tokio::join!(
        watch,
        ramp,
        calls(&policy, &host, ms(10), Duration::from_secs(30))
    );
    assert_eq!(down, None);
    assert!(ended.iter().all(|(_, _, r)| matches!(r, Ok(200))));
}

#[tokio::test(start_paused = true)]
async fn failing_fast_a_probe_of_a_host_that_answered_in_a_millisecond_waits_tens_of_milliseconds()
{
    let policy = RetryPolicy::builder()
        .attempt_timeout(ms(500))
        .breaker(Breaker::fail_fast())
        .build()
        .unwrap();
    let host = Timed::answering_in(ms(1));
    calls(&policy, &host, ms(20), Duration::from_secs(2)).await;
    host.blackhole();
    let outage = Instant::now();
    let ended = calls(&policy, &host, ms(20), Duration::from_secs(10)).await;
    // The calls made 2 s and more into the outage: each fails at once, or, going as a probe, within
    // its probe's wait (8 of the host's retransmission timeouts, at least 20 ms), but one probe in
    // four, which waits the attempt timeout so that a host back but slower is found.
    let mut took: Vec<Duration> = (ended.iter())
        .filter(|(sent, _, _)| *sent >= outage + Duration::from_secs(2))
        .map(|(_, took, _)| *took)
        .collect();
    took.sort();
    let p99 = took[took.len() * 99 / 100];
    assert!(p99 <= ms(50), "p99 {p99:?} of {} calls", took.len());
    let long = took.iter().filter(|t| **t > ms(50)).count();
    assert!(long <= took.len() / 100, "{long} of {} calls", took.len());
}
