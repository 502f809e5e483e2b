//! What `RetryLayer::grpc` tells the server and the caller, in virtual time, over an in-process
//! service of tonic's bodies: the call's deadline (`grpc-timeout`, issue 28, item 2), the attempts
//! before (`grpc-previous-rpc-attempts`), and the status a call ends with when stagger ends it.

use tower::ServiceExt;

use super::*;

type Reply = Result<http::Response<Body>, std::io::Error>;

/// What the service does with its `n`-th call (from 1): answer after a delay, or fail.
type Script = fn(u32) -> (Duration, Reply);

/// A call as the service saw it: when (virtual time since the call started) and its headers.
#[derive(Debug, Clone)]
struct Arrival {
    at: Duration,
    headers: http::HeaderMap,
}

impl Arrival {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
    }

    fn grpc_timeout(&self) -> Option<Duration> {
        self.header("grpc-timeout").map(|value| timeout_of(&value))
    }
}

/// A gRPC request of `path`, with the caller's `grpc-timeout` if given (as tonic writes it).
fn call(path: &str, grpc_timeout: Option<&str>) -> http::Request<Body> {
    let mut request = http::Request::post(format!("http://backend.test{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if let Some(timeout) = grpc_timeout {
        request = request.header("grpc-timeout", timeout);
    }
    request
        .body(Body::new(Full::new(Bytes::from_static(b"\0\0\0\0\0"))))
        .unwrap()
}

fn status(code: u32, headers: &[(&'static str, &'static str)]) -> http::Response<Body> {
    let mut response = http::Response::builder()
        .header("content-type", "application/grpc")
        .header("grpc-status", code);
    for (name, value) in headers {
        response = response.header(*name, *value);
    }
    response.body(Body::default()).unwrap()
}

/// Sends `request` through `RetryLayer::grpc(policy)` to a service following `script`; the call's
/// result, how long it took, and every call the service saw.
async fn send(
    policy: RetryPolicy,
    request: http::Request<Body>,
    script: Script,
) -> (
    Result<http::Response<Body>, stagger::Error<std::io::Error>>,
    Duration,
    Vec<Arrival>,
) {
    let started = tokio::time::Instant::now();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let calls = Arc::clone(&seen);
    let service = tower::service_fn(move |request: http::Request<Body>| {
        let n = {
            let mut calls = calls.lock().unwrap();
            calls.push(Arrival {
                at: started.elapsed(),
                headers: request.headers().clone(),
            });
            u32::try_from(calls.len()).unwrap()
        };
        async move {
            let (delay, reply) = script(n);
            tokio::time::sleep(delay).await;
            reply
        }
    });
    let result = RetryLayer::grpc(policy)
        .layer(service)
        .oneshot(request)
        .await;
    let took = started.elapsed();
    let seen = seen.lock().unwrap().clone();
    (result, took, seen)
}

fn code_of(result: &Result<http::Response<Body>, stagger::Error<std::io::Error>>) -> Option<u32> {
    let response = result.as_ref().ok()?;
    response
        .headers()
        .get("grpc-status")?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

const fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

#[tokio::test(start_paused = true)]
async fn without_a_caller_deadline_no_grpc_timeout_is_sent() {
    // The defaults: a 10 s attempt timeout and a 30 s `max_elapsed`, neither of them the call's
    // deadline as gRPC means it (which a server applies to the whole call, a stream included).
    let (result, _, seen) = send(RetryPolicy::default(), call("/a.B/C", None), |n| {
        (ms(0), Ok(status(if n == 1 { 14 } else { 0 }, &[])))
    })
    .await;
    assert_eq!(code_of(&result), Some(0));
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter().all(|arrival| arrival.grpc_timeout().is_none()),
        "{seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_caller_s_deadline_is_sent_less_the_time_run_rounded_up_never_zero() {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(100)))
        .build()
        .unwrap();
    let (result, _, seen) = send(policy, call("/a.B/C", Some("2S")), |n| {
        (ms(7), Ok(status(if n < 3 { 14 } else { 0 }, &[])))
    })
    .await;
    assert_eq!(code_of(&result), Some(0));
    let timeouts: Vec<Duration> = seen.iter().map(|a| a.grpc_timeout().unwrap()).collect();
    // 2 s, then 2 s less 107 ms, then less 214 ms: the caller's deadline runs from the call's start.
    assert_eq!(timeouts, [ms(2000), ms(1893), ms(1786)]);
}

/// Goal: caller's deadline 500 ms, `UNAVAILABLE` after 200 ms every time: the call ends by 650 ms
/// with `DEADLINE_EXCEEDED` or `UNAVAILABLE`, and no attempt reaches the server with no time left.
#[tokio::test(start_paused = true)]
async fn the_caller_s_deadline_ends_the_call_with_deadline_exceeded() {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(20)))
        .build()
        .unwrap();
    let (result, took, seen) = send(policy, call("/a.B/C", Some("500m")), |_| {
        (ms(200), Ok(status(14, &[])))
    })
    .await;
    println!("ended after {took:?}, {} attempts", seen.len());
    assert_eq!(took, ms(500));
    assert_eq!(code_of(&result), Some(4), "DEADLINE_EXCEEDED");
    let response = result.unwrap();
    let message = response.headers()["grpc-message"].to_str().unwrap();
    assert_eq!(message, "deadline of 500ms passed after 3 attempts");
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!(info.stop_reason(), Some(stagger::StopReason::Deadline));
    assert!(seen.iter().all(|a| a.grpc_timeout().unwrap() >= ms(1)));
    let sent: Vec<_> = seen
        .iter()
        .map(|a| (a.at, a.grpc_timeout().unwrap()))
        .collect();
    assert_eq!(
        sent,
        [(ms(0), ms(500)), (ms(220), ms(280)), (ms(440), ms(60))]
    );
}

/// A channel below the layer enforces the `grpc-timeout` it is sent: its timer and the layer's fire in
/// the same instant, and the attempt, polled first, ends with the channel's error. The deadline has
/// passed: the call ends as the deadline's, `DEADLINE_EXCEEDED`, not with the channel's error (which
/// tonic would turn into `CANCELLED "Timeout expired"`).
#[tokio::test(start_paused = true)]
async fn a_channel_s_own_timeout_at_the_caller_s_deadline_is_the_deadline_s() {
    let (result, took, seen) = send(RetryPolicy::default(), call("/a.B/C", Some("500m")), |_| {
        let expired = std::io::Error::new(std::io::ErrorKind::TimedOut, "Timeout expired");
        (ms(500), Err(expired))
    })
    .await;
    assert_eq!((took, seen.len()), (ms(500), 1));
    assert_eq!(code_of(&result), Some(4), "DEADLINE_EXCEEDED: {result:?}");
}

/// A pushback past the caller's deadline is not waited out: the call ends at once with the status
/// in hand.
#[tokio::test(start_paused = true)]
async fn a_pushback_past_the_caller_s_deadline_ends_the_call_with_its_status() {
    let (result, took, seen) = send(RetryPolicy::default(), call("/a.B/C", Some("250m")), |_| {
        (ms(0), Ok(status(14, &[("grpc-retry-pushback-ms", "300")])))
    })
    .await;
    assert_eq!((took, seen.len()), (ms(0), 1));
    assert_eq!(code_of(&result), Some(14));
}

#[tokio::test(start_paused = true)]
async fn a_caller_deadline_already_passed_sends_nothing() {
    let (result, _, seen) = send(RetryPolicy::default(), call("/a.B/C", Some("0n")), |_| {
        (ms(0), Ok(status(0, &[])))
    })
    .await;
    assert!(seen.is_empty());
    assert_eq!(code_of(&result), Some(4));
}

#[tokio::test(start_paused = true)]
async fn max_elapsed_goes_on_the_wire_only_when_asked() {
    let policy = |send_it| {
        RetryPolicy::builder()
            .max_elapsed(Duration::from_secs(5))
            .grpc_send_max_elapsed(send_it)
            .build()
            .unwrap()
    };
    let ok: Script = |_| (ms(0), Ok(status(0, &[])));
    let (_, _, seen) = send(policy(false), call("/a.B/C", None), ok).await;
    assert_eq!(seen[0].grpc_timeout(), None);
    let (_, _, seen) = send(policy(true), call("/a.B/C", None), ok).await;
    assert_eq!(seen[0].grpc_timeout(), Some(Duration::from_secs(5)));
    // The earlier of the two.
    let (_, _, seen) = send(policy(true), call("/a.B/C", Some("2S")), ok).await;
    assert_eq!(seen[0].grpc_timeout(), Some(Duration::from_secs(2)));
    let (_, _, seen) = send(policy(true), call("/a.B/C", Some("9S")), ok).await;
    assert_eq!(seen[0].grpc_timeout(), Some(Duration::from_secs(5)));
}

/// A hedge is told what is left of the call's deadline when it goes, not a deadline of its own.
#[tokio::test(start_paused = true)]
async fn a_hedge_is_told_what_is_left_of_the_call_s_deadline() {
    let policy = RetryPolicy::builder()
        .hedge_after(ms(100))
        .grpc_method("/a.B/C", GrpcMethod::idempotent())
        .build()
        .unwrap();
    let (result, took, seen) = send(policy, call("/a.B/C", Some("2S")), |n| {
        (if n == 1 { ms(3000) } else { ms(10) }, Ok(status(0, &[])))
    })
    .await;
    assert_eq!(code_of(&result), Some(0));
    assert_eq!(took, ms(110));
    let timeouts: Vec<_> = seen.iter().map(|a| a.grpc_timeout().unwrap()).collect();
    assert_eq!(timeouts, [ms(2000), ms(1900)]);
    assert_eq!(
        seen[1].header("grpc-previous-rpc-attempts").as_deref(),
        Some("1")
    );
}

/// A stream the server refused is retried transparently, and the server is told of the attempts it
/// saw: the refused one is not among them, as grpc-go's `numRetries` leaves it out.
#[tokio::test(start_paused = true)]
async fn a_transparent_retry_is_not_counted_in_grpc_previous_rpc_attempts() {
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(20)))
        .build()
        .unwrap();
    let (result, _, seen) = send(policy, call("/a.B/C", None), |n| match n {
        1 => (
            ms(0),
            Err(std::io::Error::other(h2::Error::from(
                h2::Reason::REFUSED_STREAM,
            ))),
        ),
        2 => (ms(0), Ok(status(14, &[]))),
        _ => (ms(0), Ok(status(0, &[]))),
    })
    .await;
    let previous: Vec<_> = seen
        .iter()
        .map(|arrival| arrival.header("grpc-previous-rpc-attempts"))
        .collect();
    assert_eq!(previous, [None, None, Some("1".to_owned())]);
    let response = result.unwrap();
    assert_eq!(response.headers()["grpc-previous-rpc-attempts"], "1");
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!((info.attempts(), info.transparent()), (3, 1));
}

/// A call stagger ends without an answer ends as a gRPC client ends it: an attempt timeout (for a
/// method whose timeouts are not retried) is `DEADLINE_EXCEEDED`, a call its host's pause refuses
/// `UNAVAILABLE`.
#[tokio::test(start_paused = true)]
async fn a_call_stagger_ends_without_an_answer_ends_with_a_grpc_status() {
    let policy = RetryPolicy::builder()
        .attempt_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let (result, took, _) = send(policy, call("/a.B/C", None), |_| {
        (Duration::from_secs(60), Ok(status(0, &[])))
    })
    .await;
    assert_eq!(took, Duration::from_secs(1));
    assert_eq!(code_of(&result), Some(4));
    let response = result.unwrap();
    assert_eq!(
        response.headers()["grpc-message"],
        "attempt 1 timed out after 1s"
    );

    let policy = RetryPolicy::builder().host_cooldown(true).build().unwrap();
    let paused: Script = |_| {
        let pushback = [("grpc-retry-pushback-ms", "60000")];
        (ms(0), Ok(status(8, &pushback)))
    };
    let (first, _, _) = send(policy.clone(), call("/a.B/C", None), paused).await;
    assert_eq!(
        code_of(&first),
        Some(8),
        "over max_retry_after: returned as it came"
    );
    let (second, _, seen) = send(policy, call("/a.B/D", None), paused).await;
    assert!(seen.is_empty(), "not sent: the host asked for a minute");
    assert_eq!(code_of(&second), Some(14));
}
