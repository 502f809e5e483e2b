//! Server pushback beyond `Retry-After`, end to end: each header form a server sends to slow a client
//! down holds the retry exactly as long as it asks, a malformed one falls back to a schedule, and a
//! throttled attempt without a usable delay waits on the throttle schedule rather than the backoff.
//!
//! Through both adapters a reqwest user has (`RetryMiddleware`, and `RetryLayer` over
//! `reqwest::Client`), against scripted servers that timestamp each request; the waits are measured
//! between the arrivals the server saw. The waits themselves are measured on tokio's paused clock,
//! against servers in process: each is exactly what the header asked for, or the schedule's delay.
//! What travels on the wire is checked against an axum server on loopback, in real time: each header
//! form read off a real HTTP response, a reset written as a Unix time on the wall clock, and the
//! events logged; there lower bounds are exact and upper bounds leave room for a loaded machine. The
//! per-host cooldown is in `tests/cooldown.rs`.
#![cfg(all(feature = "reqwest-middleware", feature = "tower"))]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use stagger::{Backoff, Reason, RetryAfterMode, RetryEvent, RetryPolicy, StopReason};

mod common;

use common::scripted::{Adapter, Reply, Retries, Server, both, both_paused, info, ms, reply, took};

/// Room above an exact lower bound in real time: what a retry's trip through the client, the loopback
/// and the server takes on a machine busy with other test binaries. Only the tests on the wire need
/// it; the waits are measured exactly in virtual time.
const SLACK: Duration = ms(500);

/// The transient backoff, 20 ms, and the throttle schedule, 50 ms: both far from every delay a header
/// asks for, so that a floor the retry waited stands out. `Strict`, so that the retry waits the floor
/// itself rather than a spread window above it; one retry.
fn honouring(retries: &Retries) -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(20)))
        .throttle_backoff(Backoff::fixed(ms(50)))
        .retry_after(RetryAfterMode::Strict)
        .max_retries(1)
        .on_retry(retries.hook())
        .build()
        .unwrap()
}

/// What a GET through `adapter` went through, when the server answered `first` and then 200.
struct Retried {
    /// From the first attempt's arrival at the server to the retry's.
    gap: Duration,
    /// The retry as the policy decided it.
    retry: RetryEvent,
    /// When the retry reached the server, on its wall clock.
    retry_wall: SystemTime,
    /// When the first attempt reached the server, on its wall clock.
    first_wall: SystemTime,
}

/// Sends one GET through `adapter` to `server`, which answers it `first`, then 200, and checks that it
/// took one retry and ended with the 200.
async fn retried_by(
    adapter: Adapter,
    policy: impl Fn(&Retries) -> RetryPolicy,
    first: Reply,
    server: Server,
) -> Retried {
    let retries = Retries::default();
    let client = adapter.client(policy(&retries));
    let url = server.script("/limited", [first]);

    let response = client.get(&url).await.unwrap();

    assert_eq!(response.status(), 200, "{adapter:?}");
    let info = info(&response);
    assert_eq!(info.attempts(), 2, "{adapter:?}");
    assert_eq!(info.stop_reason(), Some(StopReason::Success), "{adapter:?}");
    assert_eq!(server.hits(), 2, "{adapter:?}");
    let arrivals = server.arrivals("/limited");
    let [retry] = retries.all()[..] else {
        panic!("{adapter:?}: one retry, got {:?}", retries.all());
    };
    Retried {
        gap: arrivals[1].at - arrivals[0].at,
        retry,
        retry_wall: arrivals[1].wall,
        first_wall: arrivals[0].wall,
    }
}

/// [`retried_by`] a server on loopback.
async fn retried(
    adapter: Adapter,
    policy: impl Fn(&Retries) -> RetryPolicy,
    first: Reply,
) -> Retried {
    retried_by(adapter, policy, first, Server::start().await).await
}

/// [`retried_by`] a server in process, for a test on the paused clock.
async fn retried_in_process(
    adapter: Adapter,
    policy: impl Fn(&Retries) -> RetryPolicy,
    first: Reply,
) -> Retried {
    retried_by(adapter, policy, first, Server::in_process()).await
}

// ---------------------------------------------------------------------------------------------------
// The waits, in virtual time
// ---------------------------------------------------------------------------------------------------

/// Asserts that the retry after a 429 carrying `header: value` waited `floor`, as the server asked.
async fn floor_held(adapter: Adapter, header: &'static str, value: &str, floor: Duration) {
    let first = reply(429).header(header, value);
    let Retried { gap, retry, .. } = retried_in_process(adapter, honouring, first).await;
    assert_eq!(retry.delay, floor, "{adapter:?}");
    assert_eq!(retry.retry_after, Some(floor), "{adapter:?}");
    assert_eq!(
        retry.reason,
        Reason::Status(reqwest::StatusCode::TOO_MANY_REQUESTS)
    );
    assert_eq!(gap, floor, "{adapter:?}: {header}: {value}");
}

#[test]
fn a_retry_after_ms_of_300_holds_the_retry_300_ms() {
    both_paused(|adapter| floor_held(adapter, "retry-after-ms", "300", ms(300)));
}

#[test]
fn an_x_ms_retry_after_ms_of_300_holds_the_retry_300_ms() {
    both_paused(|adapter| floor_held(adapter, "x-ms-retry-after-ms", "300", ms(300)));
}

#[test]
fn a_ratelimit_policy_with_no_quota_left_and_t_1_holds_the_retry_1_s() {
    both_paused(|adapter| floor_held(adapter, "RateLimit", r#""default";r=0;t=1"#, ms(1000)));
}

#[test]
fn an_x_ratelimit_reset_of_1_with_none_remaining_holds_the_retry_1_s() {
    both_paused(|adapter| async move {
        let first = reply(429)
            .header("X-RateLimit-Remaining", 0)
            .header("X-RateLimit-Reset", 1);
        let Retried { gap, retry, .. } = retried_in_process(adapter, honouring, first).await;
        assert_eq!(retry.delay, ms(1000), "{adapter:?}");
        assert_eq!(gap, ms(1000), "{adapter:?}");
    });
}

#[test]
fn a_retry_after_ms_floor_holds_under_the_default_spread_mode_too() {
    // Spread waits the floor plus a share of a window as long as the floor, cut to what
    // max_retry_after leaves: here 300 ms + U[0, 300 ms].
    let spread = |retries: &Retries| {
        RetryPolicy::builder()
            .backoff(Backoff::fixed(ms(20)))
            .max_retry_after(ms(600))
            .max_retries(1)
            .on_retry(retries.hook())
            .build()
            .unwrap()
    };
    both_paused(|adapter| async move {
        let first = reply(429).header("retry-after-ms", 300);
        let Retried { gap, retry, .. } = retried_in_process(adapter, spread, first).await;
        assert!(
            retry.delay >= ms(300) && retry.delay <= ms(600),
            "{adapter:?}: {:?}",
            retry.delay
        );
        assert_eq!(retry.retry_after, Some(ms(300)), "{adapter:?}");
        // A drawn delay has nanoseconds, and tokio's timer ends a sleep at its next millisecond.
        took(adapter, "the retry", gap, retry.delay, retry.delay + ms(1));
    });
}

#[test]
fn a_malformed_pushback_header_on_a_429_falls_back_to_the_throttle_schedule() {
    both_paused(|adapter| async move {
        for (header, value) in [
            ("retry-after-ms", "soon"),
            ("x-ms-retry-after-ms", "-300"),
            ("RateLimit", "garbage"),
            ("RateLimit", r#""default";r=0;t=1.5"#),
            ("Retry-After", "soon"),
        ] {
            let first = reply(429).header(header, value);
            let Retried { gap, retry, .. } = retried_in_process(adapter, honouring, first).await;
            // Not the transient backoff's 20 ms: a 429 is the server limiting the client's rate.
            assert_eq!(retry.delay, ms(50), "{adapter:?}: {header}: {value}");
            assert_eq!(retry.retry_after, None, "{adapter:?}: {header}: {value}");
            assert_eq!(gap, ms(50), "{adapter:?}: {header}: {value}");
        }
    });
}

#[test]
fn a_malformed_retry_after_on_a_503_falls_back_to_the_transient_backoff() {
    both_paused(|adapter| async move {
        // Retry-After alone is not a rate limiter's header: an overloaded server sends it too.
        let first = reply(503).header("Retry-After", "soon");
        let Retried { gap, retry, .. } = retried_in_process(adapter, honouring, first).await;
        assert_eq!(retry.delay, ms(20), "{adapter:?}");
        assert_eq!(retry.retry_after, None, "{adapter:?}");
        assert_eq!(gap, ms(20), "{adapter:?}");
    });
}

/// The transient backoff, 20 ms, and the throttle schedule, 300 ms; one retry.
fn two_schedules(retries: &Retries) -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(20)))
        .throttle_backoff(Backoff::fixed(ms(300)))
        .max_retries(1)
        .on_retry(retries.hook())
        .build()
        .unwrap()
}

/// Asserts that the retry after `first` waited `schedule`.
async fn waited(adapter: Adapter, first: Reply, schedule: Duration) {
    let what = format!("{first:?}");
    let Retried { gap, retry, .. } = retried_in_process(adapter, two_schedules, first).await;
    assert_eq!(retry.delay, schedule, "{adapter:?}: {what}");
    assert_eq!(retry.retry_after, None, "{adapter:?}: {what}");
    assert_eq!(gap, schedule, "{adapter:?}: {what}");
}

#[test]
fn a_429_without_headers_waits_on_the_throttle_schedule() {
    both_paused(|adapter| waited(adapter, reply(429), ms(300)));
}

#[test]
fn a_503_without_headers_waits_on_the_transient_backoff() {
    both_paused(|adapter| waited(adapter, reply(503), ms(20)));
}

#[test]
fn a_503_with_x_ratelimit_remaining_0_and_no_reset_waits_on_the_throttle_schedule() {
    both_paused(|adapter| {
        waited(
            adapter,
            reply(503).header("X-RateLimit-Remaining", 0),
            ms(300),
        )
    });
}

#[test]
fn a_503_with_a_malformed_rate_limit_header_waits_on_the_throttle_schedule() {
    // Usable or not, the header says a rate limiter answered.
    both_paused(|adapter| {
        waited(
            adapter,
            reply(503).header("retry-after-ms", "soon"),
            ms(300),
        )
    });
}

// ---------------------------------------------------------------------------------------------------
// On the wire, in real time
// ---------------------------------------------------------------------------------------------------

#[test]
fn each_pushback_header_form_is_read_off_a_real_response_and_holds_the_retry() {
    both(|adapter| async move {
        let forms = [
            (reply(429).header("Retry-After", 1), ms(1000)),
            (reply(429).header("retry-after-ms", 300), ms(300)),
            (reply(429).header("x-ms-retry-after-ms", 300), ms(300)),
            (
                reply(429).header("RateLimit", r#""default";r=0;t=1"#),
                ms(1000),
            ),
            (
                reply(429)
                    .header("X-RateLimit-Remaining", 0)
                    .header("X-RateLimit-Reset", 1),
                ms(1000),
            ),
        ];
        // Side by side, each against a server of its own: a second in all.
        let retries = forms
            .iter()
            .map(|(first, _)| retried(adapter, honouring, first.clone()));
        let retries = futures::future::join_all(retries).await;
        for ((first, floor), Retried { gap, retry, .. }) in forms.iter().zip(retries) {
            let what = format!("{first:?}");
            assert_eq!(retry.retry_after, Some(*floor), "{adapter:?}: {what}");
            assert_eq!(retry.delay, *floor, "{adapter:?}: {what}");
            took(adapter, &what, gap, *floor, *floor + SLACK);
        }
    });
}

#[test]
fn an_x_ratelimit_reset_written_as_a_unix_time_holds_the_retry_until_that_second() {
    both(|adapter| async move {
        // GitHub's form: the second at which the quota comes back, read off the wall clock: two
        // seconds on from the first half of a second.
        let now = loop {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            if now.subsec_millis() < 500 {
                break now;
            }
            tokio::time::sleep(ms(10)).await;
        };
        let reset = UNIX_EPOCH + Duration::from_secs(now.as_secs() + 2);
        let first = reply(429)
            .header("X-RateLimit-Remaining", 0)
            .header("X-RateLimit-Reset", now.as_secs() + 2);
        let Retried {
            gap,
            retry,
            retry_wall,
            first_wall,
        } = retried(adapter, honouring, first).await;

        // The wait asked is what was left until the reset when the client read the 429, after the
        // server had received the request: at most the time from then to the reset. (How much less
        // depends on how long the 429 took to arrive: on a loaded machine, more than half a second.)
        let asked = retry.retry_after.expect("the reset is a floor");
        let left = reset.duration_since(first_wall).unwrap();
        assert!(
            asked > Duration::ZERO && asked <= left,
            "{adapter:?}: {asked:?} asked, {left:?} left at the first arrival"
        );
        assert_eq!(retry.delay, asked, "{adapter:?}");
        // The retry was not sent before the reset. The floor was read off the wall clock and slept on
        // the monotonic one: 2 ms for the two to drift apart while the clock is slewed.
        let early = reset.duration_since(retry_wall).unwrap_or_default();
        assert!(
            early <= ms(2),
            "{adapter:?}: the retry came {early:?} before the reset"
        );
        took(adapter, "the retry", gap, asked, asked + SLACK);
    });
}

// ---------------------------------------------------------------------------------------------------
// Logs
// ---------------------------------------------------------------------------------------------------

#[test]
fn each_retry_s_event_names_what_set_its_delay_retry_after_throttle_or_backoff() {
    let quick = |retries: &Retries| {
        RetryPolicy::builder()
            .backoff(Backoff::fixed(ms(5)))
            .throttle_backoff(Backoff::fixed(ms(15)))
            .retry_after(RetryAfterMode::Strict)
            .max_retries(1)
            .on_retry(retries.hook())
            .build()
            .unwrap()
    };
    both(|adapter| async move {
        for (first, reason, delay) in [
            (reply(429).header("retry-after-ms", 30), "retry_after", "30"),
            (
                reply(503).header("x-ms-retry-after-ms", 30),
                "retry_after",
                "30",
            ),
            (reply(429), "throttle", "15"),
            (
                reply(503).header("X-RateLimit-Remaining", 0),
                "throttle",
                "15",
            ),
            (reply(503), "backoff", "5"),
            (reply(500), "backoff", "5"),
        ] {
            let what = format!("{adapter:?}: {first:?}");
            let events = common::capture();
            retried(adapter, quick, first).await;

            let events = events.stagger();
            let retrying: Vec<_> = events.iter().filter(|e| e.message == "retrying").collect();
            let [retrying] = retrying[..] else {
                panic!("{what}: one retry event, got {events:#?}");
            };
            assert_eq!(retrying.level, tracing::Level::DEBUG, "{what}");
            assert_eq!(retrying.field("delay.reason"), reason, "{what}");
            assert_eq!(retrying.field("delay_ms"), delay, "{what}");
            assert_eq!(retrying.field("url.path"), "/limited", "{what}");
        }
    });
}
