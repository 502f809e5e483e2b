//! The goals of issue 28, against C-core's server, each beside what C-core's own client does on the
//! same server under the nearest service config (`retryPolicy`: `UNAVAILABLE`, at most 5 attempts,
//! 100 ms doubling to 1 s, unless a scenario says otherwise). Each prints its row of the table of
//! `docs/grpc.md` (`ROW | scenario | stagger | C-core`).

use std::time::Instant;

use stagger::classify::GrpcMethod;
use stagger::{RetryLayer, RetryPolicy};
use tower::Layer;

use super::*;

/// A tonic client over `service`, as a generated client makes one.
type Client<S> = tonic::client::Grpc<S>;

/// One unary call of `/ref.Reference/{method}` through `client`; its status and how long it took.
async fn unary<S>(
    client: &mut Client<S>,
    method: &'static str,
    request: tonic::Request<Bytes>,
) -> (Result<Bytes, Status>, Duration)
where
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResponseBody: http_body::Body<Data = Bytes> + Send + 'static,
    <S::ResponseBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let started = Instant::now();
    let path = PathAndQuery::try_from(format!("/ref.Reference/{method}")).unwrap();
    let result = match client.ready().await {
        Ok(()) => client
            .unary::<_, Bytes, _>(request, path, BytesCodec)
            .await
            .map(tonic::Response::into_inner),
        Err(error) => Err(Status::from_error(error.into())),
    };
    (result, started.elapsed())
}

/// One server-streaming call through `client`, read to its end: the messages received, the status
/// it ended with, and how long it took.
async fn stream<S>(
    client: &mut Client<S>,
    method: &'static str,
    request: tonic::Request<Bytes>,
) -> (u32, Status, Duration)
where
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResponseBody: http_body::Body<Data = Bytes> + Send + 'static,
    <S::ResponseBody as http_body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let started = Instant::now();
    let path = PathAndQuery::try_from(format!("/ref.Reference/{method}")).unwrap();
    client.ready().await.map_err(|e| e.into()).unwrap();
    let mut messages = match client
        .server_streaming::<_, Bytes, _>(request, path, BytesCodec)
        .await
    {
        Ok(response) => response.into_inner(),
        Err(status) => return (0, status, started.elapsed()),
    };
    let mut received = 0;
    let status = loop {
        match messages.message().await {
            Ok(Some(_)) => received += 1,
            Ok(None) => break Status::ok(""),
            Err(status) => break status,
        }
    };
    (received, status, started.elapsed())
}

/// A tonic client through `RetryLayer::grpc(policy)` over a `Channel` to the reference server.
fn through_stagger(
    reference: &Reference,
    policy: RetryPolicy,
) -> Client<stagger::tower::Retry<Channel, stagger::adapter::GrpcReplay>> {
    tonic::client::Grpc::new(RetryLayer::grpc(policy).layer(channel(reference)))
}

/// The calls of `id` as they arrived at the server.
fn arrivals(reference: &Reference, id: &str) -> Vec<reference::Logged> {
    reference
        .log(id)
        .into_iter()
        .filter(reference::Logged::is_arrival)
        .collect()
}

/// The time between one arrival and the next.
fn gaps(arrivals: &[reference::Logged]) -> Vec<Duration> {
    arrivals
        .windows(2)
        .map(|w| Duration::from_secs_f64(w[1].t - w[0].t))
        .collect()
}

fn millis(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

/// Goal: a 15-message stream, one message every 0.5 s, through a policy whose `attempt_timeout` is
/// 2 s, from a caller without a deadline: 15 of 15 messages, status OK (before: cut at the attempt
/// timeout, which went on the wire as `grpc-timeout`).
pub(crate) async fn a_stream_longer_than_the_attempt_timeout_is_not_cut() {
    let reference = Reference::start().await;
    let meta = [("x-messages", "15"), ("x-interval-ms", "500")];
    let ours = fresh_id("stream-15");
    let theirs = fresh_id("stream-15-c-core");
    let policy = RetryPolicy::builder()
        .attempt_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut client = through_stagger(&reference, policy);
    let c_core = CCoreCall {
        method: "Stream",
        id: &theirs,
        meta: &meta,
        ..CCoreCall::default()
    };
    let ((received, status, took), c_core) = tokio::join!(
        stream(&mut client, "Stream", request(&ours, &meta)),
        c_core_call(&reference, &c_core),
    );
    println!(
        "ROW | 15 messages 0.5 s apart, attempt timeout 2 s, no deadline | {received} of 15, {:?}, \
         {} | {} of 15, {}, {}",
        status.code(),
        millis(took),
        c_core.messages,
        c_core.status,
        millis(c_core.elapsed)
    );
    let end = reference.log(&ours).pop().unwrap();
    assert_eq!((received, status.code()), (15, Code::Ok), "{status:?}");
    assert_eq!((end.outcome.as_deref(), end.sent), (Some("OK"), Some(15)));
    assert_eq!(end.time_remaining, None, "no deadline went on the wire");
    assert_eq!((c_core.messages, c_core.status.as_str()), (15, "OK"));
}

/// Goal: the caller's deadline 500 ms, `UNAVAILABLE` after 200 ms every time: the call ends by
/// 650 ms with `DEADLINE_EXCEEDED` or `UNAVAILABLE`, and no attempt reaches the server with no time
/// left (before: the retries slept past it, and attempts went out with `grpc-timeout: 0n`).
pub(crate) async fn the_caller_s_deadline_ends_the_call() {
    let reference = Reference::start().await;
    let meta = [("x-fail", "1000"), ("x-delay-ms", "200")];
    let ours = fresh_id("deadline-500");
    let theirs = fresh_id("deadline-500-c-core");
    let mut client = through_stagger(&reference, RetryPolicy::default());
    let mut call = request(&ours, &meta);
    call.set_timeout(Duration::from_millis(500));
    let c_core = CCoreCall {
        id: &theirs,
        meta: &meta,
        timeout: Some(Duration::from_millis(500)),
        ..CCoreCall::default()
    };
    let ((result, took), c_core) = tokio::join!(
        unary(&mut client, "Unary", call),
        c_core_call(&reference, &c_core)
    );
    let status = result.unwrap_err();
    let done = |log: &[reference::Logged]| {
        log.iter().filter(|l| l.is_arrival()).count()
            == log.iter().filter(|l| !l.is_arrival()).count()
    };
    let log = reference
        .log_when(&ours, Duration::from_secs(2), done)
        .await;
    let c_core_log = reference
        .log_when(&theirs, Duration::from_secs(2), done)
        .await;
    let ends = |log: &[reference::Logged]| -> Vec<Option<Duration>> {
        log.iter()
            .filter(|l| !l.is_arrival())
            .map(|l| l.time_remaining)
            .collect()
    };
    let attempts = log.iter().filter(|l| l.is_arrival()).count();
    let c_core_attempts = c_core_log.iter().filter(|l| l.is_arrival()).count();
    println!(
        "ROW | deadline 500 ms, UNAVAILABLE after 200 ms every time | {:?} after {}, {attempts} \
         attempts | {} after {}, {c_core_attempts} attempts",
        status.code(),
        millis(took),
        c_core.status,
        millis(c_core.elapsed)
    );
    println!(
        "time left at the server: stagger {:?}, C-core {:?}",
        ends(&log),
        ends(&c_core_log)
    );
    assert!(took <= Duration::from_millis(650), "{took:?}");
    assert!(
        matches!(status.code(), Code::DeadlineExceeded | Code::Unavailable),
        "{status:?}"
    );
    for remaining in ends(&log) {
        let remaining = remaining.expect("every attempt carries the deadline");
        assert!(remaining > Duration::ZERO, "an attempt with no time left");
    }
    let first = log[0].t;
    assert!(
        log.iter()
            .filter(|l| l.is_arrival())
            .all(|l| l.t - first < 0.5)
    );
}

/// Goal: pushback 300 ms twice, then OK: 3 attempts, retries at least 300 ms apart,
/// `grpc-previous-rpc-attempts` absent, 1, 2: the same attempt count as C-core's client.
pub(crate) async fn a_pushback_is_a_floor_and_the_attempts_are_c_core_s() {
    let reference = Reference::start().await;
    let meta = [("x-fail", "2"), ("x-pushback-ms", "300")];
    let ours = fresh_id("pushback-300");
    let theirs = fresh_id("pushback-300-c-core");
    let mut client = through_stagger(&reference, RetryPolicy::default());
    let c_core = CCoreCall {
        id: &theirs,
        meta: &meta,
        ..CCoreCall::default()
    };
    let ((result, took), c_core) = tokio::join!(
        unary(&mut client, "Unary", request(&ours, &meta)),
        c_core_call(&reference, &c_core)
    );
    let (ours, theirs) = (arrivals(&reference, &ours), arrivals(&reference, &theirs));
    let previous = |arrivals: &[reference::Logged]| -> Vec<Option<u32>> {
        arrivals.iter().map(|a| a.previous_attempts).collect()
    };
    println!(
        "ROW | pushback 300 ms twice, then OK | {} attempts, gaps {:?}, previous {:?}, {} | \
         {} attempts, gaps {:?}, previous {:?}, {}",
        ours.len(),
        gaps(&ours),
        previous(&ours),
        millis(took),
        theirs.len(),
        gaps(&theirs),
        previous(&theirs),
        millis(c_core.elapsed)
    );
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(ours.len(), 3);
    assert_eq!(
        ours.len(),
        theirs.len(),
        "the same attempt count as C-core's client"
    );
    assert!(
        gaps(&ours)
            .iter()
            .all(|gap| *gap >= Duration::from_millis(300))
    );
    assert_eq!(previous(&ours), [None, Some(1), Some(2)]);
    assert_eq!(c_core.status, "OK");
}

/// Goal: a 5 MiB request against the server's 4 MiB limit: 1 attempt, `RESOURCE_EXHAUSTED` (before:
/// retried as throttling, 7 times over 21 s). The replay buffer holds the whole request here, so that
/// only the rule for `RESOURCE_EXHAUSTED` decides.
pub(crate) async fn a_request_over_the_server_s_limit_is_sent_once() {
    let reference = Reference::start().await;
    let ours = fresh_id("echo-5mib");
    let theirs = fresh_id("echo-5mib-c-core");
    let policy = RetryPolicy::builder()
        .replay_buffer(8 << 20)
        .build()
        .unwrap();
    let mut client = through_stagger(&reference, policy);
    let mut call = request(&ours, &[]);
    *call.get_mut() = Bytes::from(vec![0; 5 << 20]);
    let c_core = CCoreCall {
        method: "Echo",
        id: &theirs,
        request_bytes: 5 << 20,
        retry_codes: &["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
        ..CCoreCall::default()
    };
    let ((result, took), c_core) = tokio::join!(
        unary(&mut client, "Echo", call),
        c_core_call(&reference, &c_core)
    );
    let status = result.unwrap_err();
    let (ours, theirs) = (arrivals(&reference, &ours), arrivals(&reference, &theirs));
    println!(
        "ROW | 5 MiB request, 4 MiB limit | {} attempt, {:?}, {} | {} attempt, {} (listed as \
         retryable; committed by its 256 KiB retry buffer), {}",
        ours.len(),
        status.code(),
        millis(took),
        theirs.len(),
        c_core.status,
        millis(c_core.elapsed)
    );
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(ours.len(), 1);
    assert_eq!(c_core.status, "RESOURCE_EXHAUSTED");
}

/// Goal: a method opted out, called behind an origin with a path (a gateway that strips it): 1
/// attempt (before: the rule never matched, and the method was sent 4 times on `UNAVAILABLE`). Its
/// rule is written as grpc-java writes the name, without the leading slash.
pub(crate) async fn an_opted_out_method_behind_a_path_prefix_is_sent_once() {
    let reference = Reference::start().await;
    let ours = fresh_id("opted-out");
    let theirs = fresh_id("opted-out-c-core");
    let meta = [("x-fail", "3")];
    let policy = RetryPolicy::builder()
        .grpc_method("ref.Reference/Unary", GrpcMethod::no_retries())
        .build()
        .unwrap();
    // The gateway: the path's prefix taken off on the way to the server.
    let gateway =
        tower::util::MapRequestLayer::new(|mut request: http::Request<tonic::body::Body>| {
            let path = request
                .uri()
                .path()
                .strip_prefix("/gateway")
                .unwrap_or("/")
                .to_owned();
            let uri = format!(
                "{}{path}",
                request
                    .uri()
                    .authority()
                    .map_or(String::new(), |a| format!("http://{a}"))
            );
            *request.uri_mut() = uri.parse().unwrap();
            request
        });
    let service = RetryLayer::grpc(policy).layer(gateway.layer(channel(&reference)));
    let origin: http::Uri = format!("{}/gateway", reference.url()).parse().unwrap();
    let mut client = tonic::client::Grpc::with_origin(service, origin);
    let c_core = CCoreCall {
        id: &theirs,
        meta: &meta,
        no_retry_policy: true,
        ..CCoreCall::default()
    };
    let ((result, _), c_core) = tokio::join!(
        unary(&mut client, "Unary", request(&ours, &meta)),
        c_core_call(&reference, &c_core)
    );
    let status = result.unwrap_err();
    let (ours, theirs) = (arrivals(&reference, &ours), arrivals(&reference, &theirs));
    println!(
        "ROW | method opted out, behind /gateway, UNAVAILABLE | {} attempt, {:?} | {} attempt, {} \
         (no retryPolicy)",
        ours.len(),
        status.code(),
        theirs.len(),
        c_core.status
    );
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(ours.len(), 1);
}

/// Goal: a timed-out attempt of a method marked idempotent, over a real `Channel`: retried, 5 of 5
/// calls, whether the layer's `attempt_timeout` or the channel's own `Endpoint::timeout` cut it
/// (before: the channel enforced the layer's `grpc-timeout` first and failed with
/// `tonic::TimeoutExpired`, which was fatal). C-core has no timeout per attempt: its deadline ends
/// the call.
pub(crate) async fn a_timed_out_attempt_of_an_idempotent_method_is_retried() {
    let reference = Reference::start().await;
    let meta = [("x-delay-ms", "1000"), ("x-slow", "1")];
    // The budget out of the way: five timeouts in a row from a client that sends nothing else are
    // more than its starting credit pays for (a timeout's retry costs 4; see `RetryBudget`), which
    // is the budget's to decide, not the classifier's.
    let idempotent = || {
        RetryPolicy::builder()
            .grpc_method("/ref.Reference/Unary", GrpcMethod::idempotent())
            .backoff(stagger::Backoff::fixed(Duration::from_millis(10)))
            .budget(None)
    };
    let by_the_layer = idempotent()
        .attempt_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let by_the_channel = Endpoint::from_shared(reference.url())
        .unwrap()
        .timeout(Duration::from_millis(300))
        .connect_lazy();
    let mut ok = [0, 0];
    for (i, mut client) in [
        through_stagger(&reference, by_the_layer),
        tonic::client::Grpc::new(
            RetryLayer::grpc(idempotent().build().unwrap()).layer(by_the_channel),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        for call in 0..5 {
            let id = fresh_id(&format!("timed-out-{i}-{call}"));
            let (result, _) = unary(&mut client, "Unary", request(&id, &meta)).await;
            let attempts = arrivals(&reference, &id).len();
            if result.is_ok() && attempts == 2 {
                ok[i] += 1;
            } else {
                println!("call {call}: {result:?} after {attempts} attempts");
            }
        }
    }
    let theirs = fresh_id("timed-out-c-core");
    let c_core = CCoreCall {
        id: &theirs,
        meta: &meta,
        timeout: Some(Duration::from_millis(300)),
        ..CCoreCall::default()
    };
    let c_core = c_core_call(&reference, &c_core).await;
    println!(
        "ROW | an idempotent method's first attempt hangs 1 s, cut at 300 ms | {} of 5 retried and OK \
         (attempt_timeout), {} of 5 (Endpoint::timeout) | {} after 1 attempt (its deadline, 300 ms)",
        ok[0], ok[1], c_core.status
    );
    assert_eq!(ok, [5, 5]);
}

/// A stream that fails after its first messages is committed: not retried, by either client.
pub(crate) async fn a_stream_failing_after_messages_is_not_retried() {
    let reference = Reference::start().await;
    let meta = [("x-messages", "3"), ("x-interval-ms", "50")];
    let ours = fresh_id("stream-fail");
    let theirs = fresh_id("stream-fail-c-core");
    let mut client = through_stagger(&reference, RetryPolicy::default());
    let c_core = CCoreCall {
        method: "StreamFail",
        id: &theirs,
        meta: &meta,
        ..CCoreCall::default()
    };
    let ((received, status, _), c_core) = tokio::join!(
        stream(&mut client, "StreamFail", request(&ours, &meta)),
        c_core_call(&reference, &c_core)
    );
    let (ours, theirs) = (arrivals(&reference, &ours), arrivals(&reference, &theirs));
    println!(
        "ROW | a stream failing after 3 messages | {} attempt, {received} messages, {:?} | {} \
         attempt, {} messages, {}",
        ours.len(),
        status.code(),
        theirs.len(),
        c_core.messages,
        c_core.status
    );
    assert_eq!(
        (ours.len(), received, status.code()),
        (1, 3, Code::Unavailable)
    );
    assert_eq!((theirs.len(), c_core.messages), (1, 3));
}
