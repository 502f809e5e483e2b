//! The reference itself: what C-core's server and client do, and what a tonic client without
//! stagger sees of them.

use super::*;

pub(crate) async fn c_core_retries_a_unary_call_that_fails_twice() {
    let reference = Reference::start().await;
    let id = fresh_id("unary-fail-2");
    let call = CCoreCall {
        id: &id,
        meta: &[("x-fail", "2")],
        ..CCoreCall::default()
    };
    let result = c_core_call(&reference, &call).await;
    println!("C-core client: {result:?}");
    assert_eq!(result.status, "OK", "{result:?}");
    assert_eq!(result.messages, 1);

    let log = reference.log(&id);
    let arrivals: Vec<_> = log.iter().filter(|l| l.is_arrival()).collect();
    let previous: Vec<_> = arrivals.iter().map(|l| l.previous_attempts).collect();
    println!(
        "arrivals: {}, grpc-previous-rpc-attempts seen: {previous:?}",
        arrivals.len()
    );
    let outcomes: Vec<_> = log.iter().filter_map(|l| l.outcome.as_deref()).collect();
    println!("outcomes: {outcomes:?}");
    assert_eq!(arrivals.len(), 3);
    assert_eq!(previous, [None, Some(1), Some(2)]);
    assert_eq!(outcomes, ["UNAVAILABLE", "UNAVAILABLE", "OK"]);
    let gaps: Vec<_> = arrivals
        .windows(2)
        .map(|w| Duration::from_secs_f64(w[1].t - w[0].t))
        .collect();
    println!("gaps between attempts: {gaps:?}");
}

pub(crate) async fn a_tonic_client_sees_the_reference_server_fail_and_stream() {
    let reference = Reference::start().await;
    let mut client = tonic::client::Grpc::new(channel(&reference));

    // Unary, failing once, no retry layer: the failure itself.
    let id = fresh_id("tonic-unary-fail-1");
    client.ready().await.unwrap();
    let status = client
        .unary::<_, Bytes, _>(
            request(&id, &[("x-fail", "1"), ("x-pushback-ms", "250")]),
            PathAndQuery::from_static("/ref.Reference/Unary"),
            BytesCodec,
        )
        .await
        .unwrap_err();
    println!("tonic, Unary x-fail=1: {status:?}");
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(
        status.metadata().get("grpc-retry-pushback-ms").unwrap(),
        "250"
    );
    assert_eq!(reference.log(&id).len(), 2);

    // A failure before any message, as http: a Trailers-Only response, `grpc-status` in its head and
    // a body with no frame and no trailers.
    let id = fresh_id("raw-unary-fail-1");
    let raw = raw_call(&reference, "Unary", &[("x-id", &id), ("x-fail", "1")], None).await;
    println!("http, Unary x-fail=1: {raw:?}");
    assert_eq!(raw.head.status, http::StatusCode::OK);
    assert_eq!(raw.head.headers.get("grpc-status").unwrap(), "14");
    assert_eq!((raw.data.len(), &raw.trailers), (0, &None));

    // Stream, three messages.
    let id = fresh_id("tonic-stream-3");
    client.ready().await.unwrap();
    let mut stream = client
        .server_streaming::<_, Bytes, _>(
            request(&id, &[("x-messages", "3"), ("x-interval-ms", "10")]),
            PathAndQuery::from_static("/ref.Reference/Stream"),
            BytesCodec,
        )
        .await
        .unwrap()
        .into_inner();
    let mut received = 0;
    while let Some(message) = stream.message().await.unwrap() {
        assert_eq!(message.len(), 16);
        received += 1;
    }
    assert_eq!(received, 3);
    let end = reference.log(&id).pop().unwrap();
    assert_eq!((end.outcome.as_deref(), end.sent), (Some("OK"), Some(3)));

    // Unary, the deadline (grpc-timeout 200 ms) passing while the server waits 500 ms. tonic's
    // `Channel` enforces grpc-timeout itself, but only until the response's head arrives: here it
    // gives up first, as `Cancelled: Timeout expired`, and the server's handler sees the deadline.
    let id = fresh_id("tonic-unary-deadline");
    let mut slow = request(&id, &[("x-delay-ms", "500")]);
    slow.set_timeout(Duration::from_millis(200));
    client.ready().await.unwrap();
    let started = std::time::Instant::now();
    let status = client
        .unary::<_, Bytes, _>(
            slow,
            PathAndQuery::from_static("/ref.Reference/Unary"),
            BytesCodec,
        )
        .await
        .unwrap_err();
    println!(
        "tonic, deadline during Unary's wait: {status:?} after {:?}",
        started.elapsed()
    );
    let log = reference
        .log_when(&id, Duration::from_secs(2), |log| log.len() == 2)
        .await;
    println!("server log: {log:?}");
    assert!(
        matches!(status.code(), Code::Cancelled | Code::DeadlineExceeded),
        "{status:?}"
    );
    // The server's own timer and tonic's race: whichever fires first ends the call there, as
    // DEADLINE_EXCEEDED, or as CANCELLED when tonic's reset arrives first (a loaded machine).
    let outcome = log[1].outcome.as_deref();
    assert!(
        matches!(outcome, Some("DEADLINE_EXCEEDED" | "CANCELLED")),
        "{log:?}"
    );

    // Stream, the deadline (grpc-timeout 500 ms) passing after three of ten messages: what C-core's
    // server sends then (the head has arrived, so tonic's own timer is out of the way).
    let id = fresh_id("tonic-stream-deadline");
    let mut deadline = request(&id, &[("x-messages", "10"), ("x-interval-ms", "200")]);
    deadline.set_timeout(Duration::from_millis(500));
    client.ready().await.unwrap();
    let started = std::time::Instant::now();
    let mut stream = client
        .server_streaming::<_, Bytes, _>(
            deadline,
            PathAndQuery::from_static("/ref.Reference/Stream"),
            BytesCodec,
        )
        .await
        .unwrap()
        .into_inner();
    let mut received = 0;
    let status = loop {
        match stream.message().await {
            Ok(Some(_)) => received += 1,
            Ok(None) => break Status::ok(""),
            Err(status) => break status,
        }
    };
    println!(
        "tonic, deadline mid-stream: {received} messages, then {:?} after {:?}: {status:?}",
        status.code(),
        started.elapsed()
    );
    let log = reference
        .log_when(&id, Duration::from_secs(2), |log| log.len() == 2)
        .await;
    println!("server log: {log:?}");
    assert_eq!(received, 3);
    assert_eq!(status.code(), Code::DeadlineExceeded);
    assert_eq!(log[1].outcome.as_deref(), Some("DEADLINE_EXCEEDED"));

    // The same as http: the status is C-core's, in trailers after the messages.
    let id = fresh_id("raw-stream-deadline");
    let meta = [
        ("x-id", id.as_str()),
        ("x-messages", "10"),
        ("x-interval-ms", "200"),
    ];
    let raw = raw_call(&reference, "Stream", &meta, Some("500m")).await;
    println!("http, deadline mid-stream: {raw:?}");
    let trailers = raw.trailers.expect("trailers");
    assert_eq!(trailers.get("grpc-status").unwrap(), "4");
    assert_eq!(raw.data.len(), 3 * (5 + 16));
}

/// One call as http, with no tonic codec: the response's head, its body's bytes and its trailers.
#[derive(Debug)]
struct Raw {
    head: http::response::Parts,
    data: Bytes,
    trailers: Option<http::HeaderMap>,
}

/// Calls `/ref.Reference/{method}` with an empty request message, `meta` as headers, and
/// `grpc-timeout` if given, straight through a `Channel` as a `tower::Service`.
async fn raw_call(
    reference: &Reference,
    method: &str,
    meta: &[(&str, &str)],
    grpc_timeout: Option<&str>,
) -> Raw {
    let mut builder = http::Request::builder()
        .method("POST")
        .uri(format!("{}/ref.Reference/{method}", reference.url()))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (key, value) in meta {
        builder = builder.header(*key, *value);
    }
    if let Some(timeout) = grpc_timeout {
        builder = builder.header("grpc-timeout", timeout);
    }
    // One message frame: not compressed, zero bytes long.
    let body = http_body_util::Full::new(Bytes::from_static(&[0, 0, 0, 0, 0]));
    let request = builder.body(tonic::body::Body::new(body)).unwrap();
    let mut channel = channel(reference);
    let response = channel.ready().await.unwrap().call(request).await.unwrap();
    let (head, body) = response.into_parts();
    let collected = body.collect().await.unwrap();
    let trailers = collected.trailers().cloned();
    let data = collected.to_bytes();
    Raw {
        head,
        data,
        trailers,
    }
}

pub(crate) async fn c_core_refuses_a_5_mib_request_with_resource_exhausted() {
    let reference = Reference::start().await;
    let id = fresh_id("echo-5mib");
    let call = CCoreCall {
        method: "Echo",
        id: &id,
        request_bytes: 5 * 1024 * 1024,
        retry_codes: &["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
        ..CCoreCall::default()
    };
    let result = c_core_call(&reference, &call).await;
    println!("C-core client, Echo 5 MiB: {result:?}");
    assert_eq!(result.status, "RESOURCE_EXHAUSTED", "{result:?}");
    let log = reference.log(&id);
    println!("server log: {log:?}");
    // Logged as it arrived, before C-core read (and refused) the request; no handler ran. One
    // attempt although RESOURCE_EXHAUSTED is retryable here: 5 MiB is over C-core's retry buffer
    // (256 KiB per call), so the call was committed to its first attempt.
    assert_eq!(log.len(), 1);
    assert!(log[0].is_arrival());

    // A small request echoes its length.
    let id = fresh_id("echo-1000");
    let call = CCoreCall {
        method: "Echo",
        id: &id,
        request_bytes: 1000,
        ..CCoreCall::default()
    };
    let result = c_core_call(&reference, &call).await;
    assert_eq!((result.status.as_str(), result.messages), ("OK", 1));
}
