//! The same service config, against the same scripted server (C-core's, `server.py`), through
//! stagger's tonic client (`RetryLayer::grpc_service_config` over a `Channel`) and C-core's own
//! (`config_client.py`): the same attempts and final status, call by call. Each prints its row of
//! `docs/grpc.md`'s table (`ROW | scenario | stagger | C-core`).
//!
//! stagger's builder turns the breaker off: a host answering `UNAVAILABLE` on purpose, call after
//! call, would be found down (stagger's own guard, which C-core does not have).

use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use stagger::tower::ServiceConfigRetry;
use stagger::{GrpcServiceConfig, RetryLayer, RetryPolicy};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tower::Layer;

use super::c_core::{Ended, Planned, run_plan};
use super::reference::{Reference, fresh_id};

/// Messages as raw bytes: the reference server has no protobuf.
#[derive(Debug, Clone, Copy, Default)]
struct BytesCodec;

impl Codec for BytesCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = BytesCodec;
    type Decoder = BytesCodec;
    fn encoder(&mut self) -> Self::Encoder {
        *self
    }
    fn decoder(&mut self) -> Self::Decoder {
        *self
    }
}

impl Encoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;
    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put(item);
        Ok(())
    }
}

impl Decoder for BytesCodec {
    type Item = Bytes;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

type Client = tonic::client::Grpc<ServiceConfigRetry<Channel>>;

/// stagger's client under `json`, its builder's breaker off.
fn stagger(reference: &Reference, json: &str) -> Client {
    let config = GrpcServiceConfig::from_json(json).unwrap();
    let layer =
        RetryLayer::grpc_service_config(RetryPolicy::builder().breaker(None), &config).unwrap();
    let channel = Endpoint::from_shared(reference.url())
        .unwrap()
        .connect_lazy();
    tonic::client::Grpc::new(layer.layer(channel))
}

/// One call of `planned` through `client`: its status's name and how long it took.
async fn call(client: &mut Client, planned: &Planned<'_>) -> Ended {
    let mut request = tonic::Request::new(Bytes::new());
    request
        .metadata_mut()
        .insert("x-id", planned.id.parse().unwrap());
    for (key, value) in &planned.meta {
        let key = tonic::metadata::MetadataKey::from_bytes(key.as_bytes()).unwrap();
        request.metadata_mut().insert(key, value.parse().unwrap());
    }
    if let Some(timeout) = planned.timeout {
        request.set_timeout(timeout);
    }
    let path = if planned.method.contains('/') {
        format!("/{}", planned.method)
    } else {
        format!("/ref.Reference/{}", planned.method)
    };
    let started = Instant::now();
    client.ready().await.unwrap();
    let result = client
        .unary::<_, Bytes, _>(request, PathAndQuery::try_from(path).unwrap(), BytesCodec)
        .await;
    let code = result.map_or_else(|status| status.code(), |_| Code::Ok);
    Ended {
        status: name(code).to_owned(),
        elapsed: started.elapsed(),
    }
}

fn name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::Unavailable => "UNAVAILABLE",
        Code::Internal => "INTERNAL",
        Code::Cancelled => "CANCELLED",
        _ => "OTHER",
    }
}

/// `plan` through stagger (its ids suffixed `-s`) and through C-core (`-c`), side by side: each
/// call's status and the attempts the server saw, in order.
async fn side_by_side(
    reference: &Reference,
    json: &str,
    plan: &[Planned<'_>],
) -> (
    Vec<(String, usize)>,
    Vec<(String, usize)>,
    Vec<Ended>,
    Vec<Ended>,
) {
    let suffixed = |suffix: &str| -> Vec<Planned<'_>> {
        plan.iter()
            .map(|p| Planned {
                id: format!("{}{suffix}", p.id),
                ..p.clone()
            })
            .collect()
    };
    let (ours, theirs) = (suffixed("-s"), suffixed("-c"));
    let mut client = stagger(reference, json);
    let stagger_run = async {
        let mut ended = Vec::new();
        for planned in &ours {
            ended.push(call(&mut client, planned).await);
        }
        ended
    };
    let (ours_ended, theirs_ended) = tokio::join!(stagger_run, run_plan(reference, json, &theirs));
    let attempts = |plan: &[Planned<'_>], ended: &[Ended]| {
        plan.iter()
            .zip(ended)
            .map(|(p, e)| (e.status.clone(), arrivals(reference, &p.id).len()))
            .collect::<Vec<_>>()
    };
    (
        attempts(&ours, &ours_ended),
        attempts(&theirs, &theirs_ended),
        ours_ended,
        theirs_ended,
    )
}

fn arrivals(reference: &Reference, id: &str) -> Vec<super::reference::Logged> {
    reference
        .log(id)
        .into_iter()
        .filter(super::reference::Logged::is_arrival)
        .collect()
}

fn planned<'a>(method: &'a str, id: &str, meta: &[(&'a str, &str)]) -> Planned<'a> {
    Planned {
        method,
        id: fresh_id(id),
        meta: meta.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        timeout: None,
    }
}

/// A method config for every method of `ref.Reference`: `retryPolicy` with `max_attempts`, 10 ms
/// doubling to 50 ms, `UNAVAILABLE`; `extra` (`, "retryThrottling": {...}`) after it.
fn retrying(max_attempts: u32, extra: &str) -> String {
    format!(
        r#"{{"methodConfig": [{{"name": [{{"service": "ref.Reference"}}],
            "retryPolicy": {{"maxAttempts": {max_attempts}, "initialBackoff": "0.01s",
              "maxBackoff": "0.05s", "backoffMultiplier": 2,
              "retryableStatusCodes": ["UNAVAILABLE"]}}}}]{extra}}}"#
    )
}

fn row(scenario: &str, ours: &[(String, usize)], theirs: &[(String, usize)]) {
    let show = |calls: &[(String, usize)]| {
        calls
            .iter()
            .map(|(status, attempts)| format!("{status} after {attempts}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("ROW | {scenario} | {} | {} |", show(ours), show(theirs));
}

/// `UNAVAILABLE` twice, then `OK`: three attempts, `OK`.
pub(crate) async fn a_retried_code_is_retried_as_c_core_retries_it() {
    let reference = Reference::start().await;
    let plan = [planned("Unary", "retried", &[("x-fail", "2")])];
    let (ours, theirs, _, _) = side_by_side(&reference, &retrying(5, ""), &plan).await;
    row("UNAVAILABLE twice then OK, maxAttempts 5", &ours, &theirs);
    assert_eq!(ours, [("OK".to_owned(), 3)]);
    assert_eq!(ours, theirs);
}

/// `INTERNAL`, not in `retryableStatusCodes`: one attempt.
pub(crate) async fn a_code_not_listed_is_not_retried() {
    let reference = Reference::start().await;
    let plan = [planned(
        "Unary",
        "not-listed",
        &[("x-fail", "5"), ("x-code", "INTERNAL")],
    )];
    let (ours, theirs, _, _) = side_by_side(&reference, &retrying(5, ""), &plan).await;
    row("INTERNAL (not listed)", &ours, &theirs);
    assert_eq!(ours, [("INTERNAL".to_owned(), 1)]);
    assert_eq!(ours, theirs);
}

/// `maxAttempts` 10, a call that always fails: 5 attempts (A6's limit, C-core's clamp).
pub(crate) async fn max_attempts_over_five_is_five_attempts() {
    let reference = Reference::start().await;
    let plan = [planned("Unary", "clamp", &[("x-fail", "100")])];
    let json = retrying(10, "");
    assert_eq!(
        GrpcServiceConfig::from_json(&json).unwrap().notices().len(),
        1
    );
    let (ours, theirs, _, _) = side_by_side(&reference, &json, &plan).await;
    row("always UNAVAILABLE, maxAttempts 10", &ours, &theirs);
    assert_eq!(ours, [("UNAVAILABLE".to_owned(), 5)]);
    assert_eq!(ours, theirs);
}

/// A pushback of 200 ms twice, then `OK`: three attempts, each retry at least 200 ms after the
/// attempt before; a negative pushback: one attempt.
pub(crate) async fn a_pushback_is_honoured_and_a_negative_one_stops() {
    let reference = Reference::start().await;
    let plan = [
        planned(
            "Unary",
            "pushback",
            &[("x-fail", "2"), ("x-pushback-ms", "200")],
        ),
        planned(
            "Unary",
            "refused",
            &[("x-fail", "2"), ("x-pushback-ms", "-1")],
        ),
    ];
    let (ours, theirs, _, _) = side_by_side(&reference, &retrying(5, ""), &plan).await;
    row("pushback 200 ms twice then OK; pushback -1", &ours, &theirs);
    assert_eq!(ours, [("OK".to_owned(), 3), ("UNAVAILABLE".to_owned(), 1)]);
    assert_eq!(ours, theirs);
    for suffix in ["-s", "-c"] {
        let seen = arrivals(&reference, &format!("{}{suffix}", plan[0].id));
        for gap in seen.windows(2).map(|w| w[1].t - w[0].t) {
            assert!(gap >= 0.19, "{suffix}: a retry {gap} s after the pushback");
        }
    }
}

/// `retryThrottling` 10 tokens, ratio 0.5, `maxAttempts` 3: six calls that always fail (10 tokens to
/// 1: 3 attempts, 2, then 1 each), thirteen that succeed (7.5 tokens), two that fail (3 attempts, to
/// 4.5 tokens; then 1): the attempts of each call as C-core's.
pub(crate) async fn throttling_stops_and_brings_back_retries_call_by_call_as_c_core() {
    let reference = Reference::start().await;
    let json = retrying(
        3,
        r#", "retryThrottling": {"maxTokens": 10, "tokenRatio": 0.5}"#,
    );
    let mut plan = Vec::new();
    for _ in 0..6 {
        plan.push(planned("Unary", "throttled-fail", &[("x-fail", "100")]));
    }
    for _ in 0..13 {
        plan.push(planned("Unary", "throttled-ok", &[]));
    }
    plan.push(planned("Unary", "throttled-back", &[("x-fail", "100")]));
    plan.push(planned("Unary", "throttled-again", &[("x-fail", "100")]));
    let (ours, theirs, _, _) = side_by_side(&reference, &json, &plan).await;
    let attempts = |calls: &[(String, usize)]| calls.iter().map(|c| c.1).collect::<Vec<_>>();
    println!(
        "ROW | retryThrottling 10/0.5, maxAttempts 3: 6 failing calls, 13 OK, 2 failing | attempts {:?} | attempts {:?} |",
        attempts(&ours),
        attempts(&theirs)
    );
    let mut expected = vec![3, 2, 1, 1, 1, 1];
    expected.extend([1; 13]);
    expected.extend([3, 1]);
    assert_eq!(attempts(&ours), expected);
    assert_eq!(ours, theirs);
}

/// A method config for `ref.Reference/Unary` (2 attempts), one for the service (3: `StreamFail`'s
/// Trailers-Only failure is retried as any), a default (4: `ref.Other/Unary`).
pub(crate) async fn names_match_by_method_then_service_then_default() {
    let reference = Reference::start().await;
    let policy = |n: u32| {
        format!(
            r#"{{"maxAttempts": {n}, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
                "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}"#
        )
    };
    let json = format!(
        r#"{{"methodConfig": [
            {{"name": [{{"service": "ref.Reference", "method": "Unary"}}], "retryPolicy": {}}},
            {{"name": [{{"service": "ref.Reference"}}], "retryPolicy": {}}},
            {{"name": [{{}}], "retryPolicy": {}}}]}}"#,
        policy(2),
        policy(3),
        policy(4)
    );
    let fail = [("x-fail", "100")];
    let plan = [
        planned("Unary", "by-method", &fail),
        planned("Echo", "by-service", &[]),
        planned("ref.Other/Unary", "by-default", &fail),
    ];
    let (ours, theirs, _, _) = side_by_side(&reference, &json, &plan).await;
    row("method (2), service (3), default (4)", &ours, &theirs);
    assert_eq!(
        ours,
        [
            ("UNAVAILABLE".to_owned(), 2),
            ("OK".to_owned(), 1),
            ("UNAVAILABLE".to_owned(), 4)
        ]
    );
    assert_eq!(ours, theirs);
    // The service's config for another of its methods: Unary under the service name alone is
    // Unary; a second service without a name of its own takes the default. Both as C-core.
}

/// `timeout` 3 s, a server that takes 10 s: `DEADLINE_EXCEEDED` after one attempt, at 3 s for
/// stagger, which tells the server; C-core ends such calls 1 to 2 s early. A caller's 1 s deadline
/// is sooner, and is the call's.
pub(crate) async fn the_timeout_is_the_call_s_deadline_unless_the_caller_s_is_sooner() {
    let reference = Reference::start().await;
    let json = r#"{"methodConfig": [{"name": [{"service": "ref.Reference"}], "timeout": "3s",
        "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.01s", "maxBackoff": "0.05s",
          "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#;
    let slow = [("x-delay-ms", "10000")];
    let mut sooner = planned("Unary", "caller-sooner", &slow);
    sooner.timeout = Some(Duration::from_secs(1));
    let plan = [planned("Unary", "config-timeout", &slow), sooner];
    let (ours, theirs, ours_ended, theirs_ended) = side_by_side(&reference, json, &plan).await;
    println!(
        "ROW | timeout 3 s, server 10 s; caller 1 s | DEADLINE_EXCEEDED after 1 ({:?}), after 1 \
         ({:?}) | {} after 1 ({:?}), {} after 1 ({:?}) |",
        ours_ended[0].elapsed,
        ours_ended[1].elapsed,
        theirs[0].0,
        theirs_ended[0].elapsed,
        theirs[1].0,
        theirs_ended[1].elapsed
    );
    let deadline = ("DEADLINE_EXCEEDED".to_owned(), 1);
    assert_eq!(ours, [deadline.clone(), deadline.clone()]);
    assert_eq!(ours, theirs);
    let (config, caller) = (ours_ended[0].elapsed, ours_ended[1].elapsed);
    assert!(config >= Duration::from_millis(2990) && config < Duration::from_millis(3500));
    assert!(caller >= Duration::from_millis(990) && caller < Duration::from_millis(1500));
    // What the server was told: the method config's deadline, and the caller's sooner one.
    let ended = |log: &[super::reference::Logged]| log.iter().any(|l| !l.is_arrival());
    for (planned, within) in [(&plan[0], 2800..3010), (&plan[1], 800..1010)] {
        let id = format!("{}-s", planned.id);
        let log = reference.log_when(&id, Duration::from_secs(3), ended).await;
        let told = log
            .iter()
            .find(|l| !l.is_arrival())
            .and_then(|l| l.time_remaining);
        let told = told.map(|t| t.as_millis());
        assert!(
            told.is_some_and(|t| within.contains(&t)),
            "{id}: told {told:?} ms"
        );
    }
}

/// `maxAttempts` 5, 200 ms doubling to 500 ms, always `UNAVAILABLE`: the n-th retry of every call
/// within A6's random(0, min(200 ms · 2^(n−1), 500 ms)), spread across it (full jitter); C-core's
/// within ±20 % of that ceiling.
pub(crate) async fn backoff_delays_fall_within_a6_s_ranges() {
    let reference = Reference::start().await;
    let json = r#"{"methodConfig": [{"name": [{"service": "ref.Reference"}],
        "retryPolicy": {"maxAttempts": 5, "initialBackoff": "0.2s", "maxBackoff": "0.5s",
          "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#;
    let plan: Vec<_> = (0..8)
        .map(|_| planned("Unary", "backoff", &[("x-fail", "100")]))
        .collect();
    let (ours, theirs, _, _) = side_by_side(&reference, json, &plan).await;
    assert!(
        ours.iter()
            .chain(&theirs)
            .all(|(_, attempts)| *attempts == 5)
    );
    let ceilings = [0.2, 0.4, 0.5, 0.5];
    let gaps = |suffix: &str| -> Vec<Vec<f64>> {
        plan.iter()
            .map(|p| {
                let seen = arrivals(&reference, &format!("{}{suffix}", p.id));
                seen.windows(2).map(|w| w[1].t - w[0].t).collect()
            })
            .collect()
    };
    let (ours, theirs) = (gaps("-s"), gaps("-c"));
    // A retry's gap is its wait plus an attempt's round trip on loopback (a few ms).
    let slack = 0.05;
    let mut fractions = Vec::new();
    for call in &ours {
        for (n, gap) in call.iter().enumerate() {
            assert!(*gap <= ceilings[n] + slack, "retry {} after {gap} s", n + 1);
            fractions.push(gap / ceilings[n]);
        }
    }
    let mean = fractions.iter().sum::<f64>() / fractions.len() as f64;
    let below_half = fractions.iter().filter(|f| **f < 0.5).count();
    let mut theirs_fractions = Vec::new();
    for call in &theirs {
        for (n, gap) in call.iter().enumerate() {
            theirs_fractions.push(gap / ceilings[n]);
        }
    }
    let (low, high) = theirs_fractions
        .iter()
        .fold((f64::MAX, 0.0_f64), |(l, h), f| (l.min(*f), h.max(*f)));
    println!(
        "ROW | backoff 0.2 s ×2 to 0.5 s, 8 calls of 5 attempts | delays / ceiling: mean {mean:.2}, \
         {below_half} of {} below half, all at most the ceiling | {low:.2} to {high:.2} of the ceiling |",
        fractions.len()
    );
    // U[0, 1] of the ceiling (a round trip of a few ms added): a mean near 0.5 and about half
    // below it, over 32 draws; bounds at more than 3 standard deviations, for a test that does not
    // fail by chance. C-core's waits, the ceiling ±20 %, would give a mean near 1 and none below.
    assert!((0.3..=0.75).contains(&mean), "mean {mean}");
    assert!(
        (4..=26).contains(&below_half),
        "{below_half} of 32 below half"
    );
    assert!(low >= 0.75 && high <= 1.3, "C-core: {low}..{high}");
}

/// A `hedgingPolicy` (delay 100 ms), a first attempt that takes 2 s: stagger's hedge answers in
/// about 100 ms; C-core, which reads no hedging policy, waits the 2 s.
pub(crate) async fn a_hedging_policy_hedges_where_c_core_ignores_it() {
    let reference = Reference::start().await;
    let json = r#"{"methodConfig": [{"name": [{"service": "ref.Reference"}],
        "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.1s",
          "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}"#;
    let plan = [planned(
        "Unary",
        "hedged",
        &[("x-delay-ms", "2000"), ("x-slow", "1")],
    )];
    let (ours, theirs, ours_ended, theirs_ended) = side_by_side(&reference, json, &plan).await;
    println!(
        "ROW | hedgingPolicy, delay 100 ms; first attempt 2 s | OK after {:?}, {} attempts | OK \
         after {:?}, {} attempt (no hedging) |",
        ours_ended[0].elapsed, ours[0].1, theirs_ended[0].elapsed, theirs[0].1
    );
    assert_eq!(ours, [("OK".to_owned(), 2)]);
    assert!(ours_ended[0].elapsed < Duration::from_millis(1000));
    assert_eq!(theirs, [("OK".to_owned(), 1)]);
    assert!(theirs_ended[0].elapsed >= Duration::from_millis(1900));
}
