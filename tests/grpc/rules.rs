//! The rules themselves, in virtual time, over an in-process service of `http` types through
//! `RetryLayer::new`: gRPC's classification is the HTTP classifier's for gRPC's responses, whatever
//! the client.

use std::sync::atomic::{AtomicU32, Ordering};

use stagger::StopReason;
use tower::ServiceExt;

use super::*;

type Answer = fn(u32) -> Result<http::Response<String>, std::io::Error>;

/// Sends one gRPC request of `method` to a service that answers its `n`-th call (from 1) with
/// `answer(n)`; the call's result and how many calls the service saw.
async fn send(
    policy: RetryPolicy,
    method: &'static str,
    answer: Answer,
) -> (
    Result<http::Response<String>, stagger::Error<std::io::Error>>,
    u32,
) {
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let service = tower::service_fn(move |_: http::Request<String>| {
        let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            if n == 1 && answer(0).is_err() {
                // `answer(0)` asks for a first attempt that never answers.
                std::future::pending::<()>().await;
            }
            answer(n)
        }
    });
    let request = http::Request::post(format!("http://localhost{method}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(String::from("\0\0\0\0\0"))
        .unwrap();
    let result = RetryLayer::new(policy)
        .layer(service)
        .oneshot(request)
        .await;
    (result, calls.load(Ordering::SeqCst))
}

fn grpc(status: Option<u32>, headers: &[(&'static str, &'static str)]) -> http::Response<String> {
    let mut response = http::Response::builder().header("content-type", "application/grpc");
    if let Some(status) = status {
        response = response.header("grpc-status", status);
    }
    for (name, value) in headers {
        response = response.header(*name, *value);
    }
    response.body(String::new()).unwrap()
}

fn info(result: &Result<http::Response<String>, stagger::Error<std::io::Error>>) -> RetryInfo {
    match result {
        Ok(response) => *response.extensions().get::<RetryInfo>().unwrap(),
        Err(error) => error.info(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_negative_pushback_stops_with_stop_reason_pushback() {
    let (result, calls) = send(quick().build().unwrap(), "/a.B/C", |_| {
        Ok(grpc(Some(14), &[("grpc-retry-pushback-ms", "-1")]))
    })
    .await;
    assert_eq!(calls, 1);
    assert_eq!(info(&result).stop_reason(), Some(StopReason::Pushback));
}

#[tokio::test(start_paused = true)]
async fn a_trailers_only_unavailable_is_retried_and_a_committed_response_is_a_success() {
    let (result, calls) = send(quick().build().unwrap(), "/a.B/C", |n| {
        Ok(if n == 1 {
            grpc(Some(14), &[])
        } else {
            grpc(None, &[])
        })
    })
    .await;
    assert_eq!(calls, 2);
    assert_eq!(info(&result).stop_reason(), Some(StopReason::Success));
}

#[tokio::test(start_paused = true)]
async fn a_proxy_s_502_to_a_grpc_call_is_unavailable_and_retried() {
    let (result, calls) = send(quick().build().unwrap(), "/a.B/C", |n| {
        Ok(match n {
            1 => http::Response::builder()
                .status(502)
                .body(String::new())
                .unwrap(),
            _ => grpc(Some(0), &[]),
        })
    })
    .await;
    assert_eq!(calls, 2);
    assert_eq!(info(&result).attempts(), 2);
}

#[tokio::test(start_paused = true)]
async fn resource_exhausted_without_pushback_waits_on_the_throttle_schedule() {
    let throttle = Backoff::fixed(Duration::from_secs(3));
    let policy = quick().throttle_backoff(throttle).build().unwrap();
    let (result, _) = send(policy, "/a.B/C", |n| {
        Ok(if n == 1 {
            grpc(Some(8), &[])
        } else {
            grpc(Some(0), &[])
        })
    })
    .await;
    assert_eq!(info(&result).slept(), Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn an_attempt_that_timed_out_is_retried_only_for_a_method_marked_idempotent() {
    let timing_out: Answer = |n| match n {
        0 => Err(std::io::Error::other("never answers")),
        _ => Ok(grpc(Some(0), &[])),
    };
    let policy = |rule: Option<GrpcMethod>| {
        let builder = quick().attempt_timeout(Duration::from_secs(1));
        match rule {
            Some(rule) => builder.grpc_method("/a.B/C", rule),
            None => builder,
        }
        .build()
        .unwrap()
    };
    let (result, calls) = send(policy(None), "/a.B/C", timing_out).await;
    assert_eq!(calls, 1);
    assert!(result.unwrap_err().is_attempt_timeout());
    let (result, calls) = send(policy(Some(GrpcMethod::idempotent())), "/a.B/C", timing_out).await;
    assert_eq!(calls, 2);
    assert_eq!(info(&result).attempts(), 2);
}

#[tokio::test(start_paused = true)]
async fn with_host_cooldown_a_pushback_holds_the_next_call_to_the_host() {
    // A call that starts while the host's pause runs waits for it before its first attempt.
    let policy = quick().host_cooldown(true).build().unwrap();
    let refused = tokio::spawn(send(policy.clone(), "/a.B/C", |_| {
        Ok(grpc(Some(8), &[("grpc-retry-pushback-ms", "2000")]))
    }));
    tokio::time::sleep(Duration::from_millis(10)).await;
    let started = tokio::time::Instant::now();
    let (second, _) = send(policy, "/a.B/D", |_| Ok(grpc(Some(0), &[]))).await;
    assert!(second.is_ok());
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        started.elapsed()
    );
    refused.abort();
}

#[tokio::test(start_paused = true)]
async fn after_a_pushback_the_backoff_starts_over() {
    // 1 s, then 2 s (the backoff is longer than the 100 ms pushback, and a floor is a floor), then
    // 1 s again rather than 4 s.
    let backoff = Backoff::exponential(Duration::from_secs(1)).with_jitter(stagger::Jitter::None);
    let policy = RetryPolicy::builder()
        .backoff(backoff)
        .retry_after(stagger::RetryAfterMode::Strict)
        .build()
        .unwrap();
    let (result, calls) = send(policy, "/a.B/C", |n| {
        Ok(match n {
            1 | 3 => grpc(Some(14), &[]),
            2 => grpc(Some(14), &[("grpc-retry-pushback-ms", "100")]),
            _ => grpc(Some(0), &[]),
        })
    })
    .await;
    assert_eq!(calls, 4);
    assert_eq!(info(&result).slept(), Duration::from_secs(4));
}

#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_retried_for_any_method() {
    let policy = quick()
        .grpc_method("/a.B/C", GrpcMethod::no_retries())
        .build()
        .unwrap();
    let (result, calls) = send(policy, "/a.B/C", |n| match n {
        1 => Err(std::io::ErrorKind::ConnectionRefused.into()),
        _ => Ok(grpc(Some(0), &[])),
    })
    .await;
    assert_eq!(calls, 2);
    assert!(result.is_ok());
}

/// OpenTelemetry's RPC labels on the metrics of a gRPC call (feature `metrics`).
#[cfg(feature = "metrics")]
#[test]
fn the_metrics_of_a_grpc_call_carry_rpc_labels() {
    use metrics_util::debugging::DebuggingRecorder;

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let (result, _) = metrics::with_local_recorder(&recorder, || {
        runtime.block_on(send(quick().build().unwrap(), "/shop.Catalog/List", |n| {
            Ok(if n == 1 {
                grpc(Some(14), &[])
            } else {
                grpc(Some(0), &[])
            })
        }))
    });
    assert!(result.is_ok());
    let retries: Vec<Vec<(String, String)>> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == stagger::metrics::RETRIES)
        .map(|(key, ..)| {
            let mut labels: Vec<_> = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            labels
        })
        .collect();
    let label = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        retries,
        [vec![
            label("delay.reason", "backoff"),
            label("error.type", "UNAVAILABLE"),
            label("rpc.grpc.status_code", "14"),
            label("rpc.method", "List"),
            label("rpc.service", "shop.Catalog"),
            label("rpc.system", "grpc"),
            label("server.address", "localhost"),
        ]]
    );
}
