//! The rules themselves, in virtual time, over an in-process service of `http` types through
//! `RetryLayer::new`: gRPC's classification is the HTTP classifier's for gRPC's responses, whatever
//! the client.

use stagger::classify::{AttemptResult, ClassifyHttp, DefaultClassifier, GrpcCodes};
use stagger::{Outcome, Reason, StopReason};
use tower::ServiceExt;

use super::*;

type Answer = fn(u32) -> Result<http::Response<String>, std::io::Error>;

type Sent = Result<http::Response<String>, stagger::Error<std::io::Error>>;

/// Sends one gRPC request of `method` to a service that answers its `n`-th call (from 1) with
/// `answer(n)`; the call's result and how many calls the service saw.
async fn send(policy: RetryPolicy, method: &'static str, answer: Answer) -> (Sent, u32) {
    let (result, seen) = send_request(policy, call_of(method), answer).await;
    (result, u32::try_from(seen.len()).unwrap())
}

/// A gRPC request of `path`, as a client sends it.
fn call_of(path: &str) -> http::Request<String> {
    http::Request::post(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(String::from("\0\0\0\0\0"))
        .unwrap()
}

/// Sends `request` to a service that answers its `n`-th call (from 1) with `answer(n)`; the call's
/// result and the headers of every call the service saw.
async fn send_request(
    policy: RetryPolicy,
    request: http::Request<String>,
    answer: Answer,
) -> (Sent, Vec<http::HeaderMap>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let calls = Arc::clone(&seen);
    let service = tower::service_fn(move |request: http::Request<String>| {
        let n = {
            let mut calls = calls.lock().unwrap();
            calls.push(request.headers().clone());
            u32::try_from(calls.len()).unwrap()
        };
        async move {
            if n == 1 && answer(0).is_err() {
                // `answer(0)` asks for a first attempt that never answers.
                std::future::pending::<()>().await;
            }
            answer(n)
        }
    });
    let result = RetryLayer::new(policy)
        .layer(service)
        .oneshot(request)
        .await;
    let seen = seen.lock().unwrap().clone();
    (result, seen)
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
        Ok(response) => RetryInfo::of(response.extensions()),
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

/// Issue 28, item 7: `RESOURCE_EXHAUSTED` is a quota that may not come back for hours, or a request
/// no retry can fix (AIP-194), unless the server says when to come back.
#[tokio::test(start_paused = true)]
async fn resource_exhausted_is_returned_at_once_unless_the_server_names_a_delay() {
    let exhausted_once: Answer = |n| {
        Ok(if n == 1 {
            grpc(Some(8), &[])
        } else {
            grpc(Some(0), &[])
        })
    };
    let (result, calls) = send(quick().build().unwrap(), "/a.B/C", exhausted_once).await;
    assert_eq!(calls, 1);
    assert_eq!(info(&result).stop_reason(), Some(StopReason::Fatal));
    // Listed explicitly, the same.
    let listed = GrpcCodes::new(&[GrpcCode::ResourceExhausted]);
    let policy = quick().grpc_retry_on(listed).build().unwrap();
    let (_, calls) = send(policy, "/a.B/C", exhausted_once).await;
    assert_eq!(calls, 1);
    // With a delay named, by a pushback or a RetryInfo: retried after it.
    let (result, calls) = send(quick().build().unwrap(), "/a.B/C", |n| {
        Ok(if n == 1 {
            grpc(Some(8), &[("grpc-retry-pushback-ms", "700")])
        } else {
            grpc(Some(0), &[])
        })
    })
    .await;
    assert_eq!(calls, 2);
    assert!(info(&result).slept() >= Duration::from_millis(700));
}

#[tokio::test(start_paused = true)]
async fn resource_exhausted_retried_by_a_classifier_of_one_s_own_waits_on_the_throttle_schedule() {
    let throttle = Backoff::fixed(Duration::from_secs(3));
    let retry_exhausted = stagger::classify::from_fn(|request, result| {
        let exhausted = matches!(result, AttemptResult::Response { headers, .. }
            if headers.get("grpc-status").is_some_and(|status| status == "8"));
        if exhausted {
            Outcome::RetrySafe(Reason::Grpc(GrpcCode::ResourceExhausted))
        } else {
            DefaultClassifier.classify(request, result)
        }
    });
    let policy = quick()
        .throttle_backoff(throttle)
        .classifier(retry_exhausted)
        .build()
        .unwrap();
    let (result, calls) = send(policy, "/a.B/C", |n| {
        Ok(if n == 1 {
            grpc(Some(8), &[])
        } else {
            grpc(Some(0), &[])
        })
    })
    .await;
    assert_eq!(calls, 2);
    assert_eq!(info(&result).slept(), Duration::from_secs(3));
}

/// A server of one's own puts its delay in `x-wait-ms`: this classifier names it.
fn named_wait(request: &stagger::classify::RequestView<'_>, result: &AttemptResult<'_>) -> Outcome {
    match result {
        AttemptResult::Response { headers, .. } if headers.contains_key("x-wait-ms") => {
            let ms = headers["x-wait-ms"].to_str().unwrap().parse().unwrap();
            let reason = Reason::Grpc(GrpcCode::Unavailable);
            Outcome::RetryAfter(reason, Duration::from_millis(ms))
        }
        _ => DefaultClassifier.classify(request, result),
    }
}

#[tokio::test(start_paused = true)]
async fn a_delay_a_classifier_names_floors_the_retry_and_the_longer_of_it_and_a_pushback_is_waited()
{
    let policy = || {
        quick()
            .retry_after(stagger::RetryAfterMode::Strict)
            .classifier(stagger::classify::from_fn(named_wait))
            .build()
            .unwrap()
            .clone()
    };
    let (alone, calls) = send(policy(), "/a.B/C", |n| {
        Ok(match n {
            1 => grpc(Some(14), &[("x-wait-ms", "3000")]),
            _ => grpc(Some(0), &[]),
        })
    })
    .await;
    assert_eq!(calls, 2);
    assert_eq!(info(&alone).slept(), Duration::from_secs(3));
    // Beside a shorter pushback, the named 3 s; beside a longer one, the pushback.
    let (shorter, _) = send(policy(), "/a.B/C", |n| {
        Ok(match n {
            1 => grpc(
                Some(14),
                &[("x-wait-ms", "3000"), ("grpc-retry-pushback-ms", "1000")],
            ),
            _ => grpc(Some(0), &[]),
        })
    })
    .await;
    assert_eq!(info(&shorter).slept(), Duration::from_secs(3));
    let (longer, _) = send(policy(), "/a.B/C", |n| {
        Ok(match n {
            1 => grpc(
                Some(14),
                &[("x-wait-ms", "3000"), ("grpc-retry-pushback-ms", "5000")],
            ),
            _ => grpc(Some(0), &[]),
        })
    })
    .await;
    assert_eq!(info(&longer).slept(), Duration::from_secs(5));
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

/// The pair of method and host the labels test records, recorded before the test of their bound
/// fills the process's table of pairs with others: the pairs that keep their own series are the
/// first the process sees.
#[cfg(feature = "metrics")]
fn catalog_list_first() {
    static FIRST: std::sync::Once = std::sync::Once::new();
    FIRST.call_once(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let (result, _) =
            runtime.block_on(send(quick().build().unwrap(), "/shop.Catalog/List", |_| {
                Ok(grpc(Some(0), &[]))
            }));
        assert!(result.is_ok());
    });
}

/// OpenTelemetry's RPC labels on the metrics of a gRPC call (feature `metrics`).
#[cfg(feature = "metrics")]
#[test]
fn the_metrics_of_a_grpc_call_carry_rpc_labels() {
    use metrics_util::debugging::DebuggingRecorder;

    catalog_list_first();
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
    // OpenTelemetry's RPC conventions since 1.39: `rpc.system.name`, `rpc.method` fully qualified,
    // `rpc.response.status_code` by name.
    assert_eq!(
        retries,
        [vec![
            label("delay.reason", "backoff"),
            label("error.type", "UNAVAILABLE"),
            label("rpc.method", "shop.Catalog/List"),
            label("rpc.response.status_code", "UNAVAILABLE"),
            label("rpc.system.name", "grpc"),
            label("server.address", "localhost"),
        ]]
    );
}

/// Issue 28, item 8: `rpc.method` and `server.address` bounded together. 40 methods on each of 40
/// hosts are 1 600 pairs; one metric keeps at most 1 000 series of them.
#[cfg(feature = "metrics")]
#[test]
fn rpc_method_and_server_address_make_at_most_a_thousand_series_together() {
    use metrics_util::debugging::DebuggingRecorder;

    catalog_list_first();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let policy = quick().build().unwrap();
            let ok = tower::service_fn(|_: http::Request<String>| async {
                Ok::<_, std::io::Error>(grpc(Some(0), &[]))
            });
            let service = RetryLayer::new(policy).layer(ok);
            for host in 0..40 {
                for method in 0..40 {
                    let request = http::Request::post(format!(
                        "http://host-{host}.test/pkg.Service/Method{method}"
                    ))
                    .header("content-type", "application/grpc")
                    .body(String::new())
                    .unwrap();
                    service.clone().oneshot(request).await.unwrap();
                }
            }
        })
    });
    let series: Vec<_> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == stagger::metrics::CALL_ATTEMPTS)
        .map(|(key, ..)| key.key().clone())
        .collect();
    println!(
        "{} series of {}",
        series.len(),
        stagger::metrics::CALL_ATTEMPTS
    );
    assert!(series.len() <= 1000, "{}", series.len());
    let other = series.iter().filter(|key| {
        key.labels()
            .any(|l| l.key() == "rpc.method" && l.value() == "_OTHER")
    });
    assert_eq!(other.count(), 1);
}

/// Issue 28, item 4: a rule applies to its method however the call names it.
#[tokio::test(start_paused = true)]
async fn an_opted_out_method_is_sent_once_behind_a_path_prefix_and_by_grpc_java_s_name() {
    let unavailable: Answer = |_| Ok(grpc(Some(14), &[]));
    for rule_name in ["/shop.Payments/Charge", "shop.Payments/Charge"] {
        for path in ["/shop.Payments/Charge", "/grpc/shop.Payments/Charge"] {
            let policy = quick()
                .grpc_method(rule_name, GrpcMethod::no_retries())
                .build()
                .unwrap();
            let (result, calls) = send(policy, path, unavailable).await;
            assert_eq!(calls, 1, "rule {rule_name}, path {path}");
            // Said as an opt-out, not as a fatal answer.
            assert_eq!(info(&result).stop_reason(), Some(StopReason::OptedOut));
        }
    }
}

/// tonic names the method of a generated client's call in the request's extensions: the rule
/// follows that name, whatever path the request goes to.
#[tokio::test(start_paused = true)]
async fn the_method_tonic_names_in_the_extensions_is_the_one_the_rule_matches() {
    let policy = quick()
        .grpc_method("/shop.Payments/Charge", GrpcMethod::no_retries())
        .build()
        .unwrap();
    let mut request = call_of("/gateway/v1/charge");
    request
        .extensions_mut()
        .insert(tonic::GrpcMethod::new("shop.Payments", "Charge"));
    let (result, seen) = send_request(policy, request, |_| Ok(grpc(Some(14), &[]))).await;
    assert_eq!(seen.len(), 1);
    assert_eq!(info(&result).stop_reason(), Some(StopReason::OptedOut));
}

#[test]
fn build_refuses_a_name_no_call_could_match() {
    for name in [
        "/shop.Payments.Charge",
        "/grpc/shop.Payments/Charge",
        "",
        "/a/",
        "a b/C",
    ] {
        let built = RetryPolicy::builder()
            .grpc_method(name, GrpcMethod::no_retries())
            .build();
        assert_eq!(
            built.unwrap_err(),
            stagger::ConfigError::GrpcMethodName(name.to_owned()),
            "{name:?}"
        );
    }
}

/// Issue 28, item 5: a classifier of one's own refines the gRPC verdict; the default one, set
/// explicitly or fallen back to, changes nothing.
#[tokio::test(start_paused = true)]
async fn the_grpc_rules_survive_a_classifier_of_one_s_own() {
    let fallback =
        stagger::classify::from_fn(|request, result| DefaultClassifier.classify(request, result));
    let pushback_then_ok: Answer = |n| {
        Ok(match n {
            1 => grpc(Some(14), &[("grpc-retry-pushback-ms", "500")]),
            _ => grpc(Some(0), &[]),
        })
    };
    let explicit = quick().classifier(DefaultClassifier);
    let fallen_back = quick().classifier(fallback);
    for builder in [explicit, fallen_back] {
        let policy = builder
            .grpc_method("/a.B/Charge", GrpcMethod::no_retries())
            .build()
            .unwrap();
        let (result, calls) = send(policy.clone(), "/a.B/C", pushback_then_ok).await;
        assert_eq!(calls, 2);
        assert!(info(&result).slept() >= Duration::from_millis(500));
        let (result, calls) = send(policy, "/a.B/Charge", pushback_then_ok).await;
        assert_eq!(calls, 1);
        assert_eq!(info(&result).stop_reason(), Some(StopReason::OptedOut));
    }
    // And one that retries INTERNAL for a method it knows, keeping the rest.
    let refining = stagger::classify::from_fn(|request, result| match result {
        AttemptResult::Response { headers, .. }
            if request.grpc_method().is_some_and(|m| m.method() == "Flaky")
                && headers.get("grpc-status").is_some_and(|s| s == "13") =>
        {
            Outcome::RetrySafe(Reason::Grpc(GrpcCode::Internal))
        }
        _ => DefaultClassifier.classify(request, result),
    });
    let policy = quick().classifier(refining).build().unwrap();
    let internal_then_ok: Answer = |n| Ok(grpc(Some(if n == 1 { 13 } else { 0 }), &[]));
    let (_, calls) = send(policy.clone(), "/a.B/Flaky", internal_then_ok).await;
    assert_eq!(calls, 2);
    let (_, calls) = send(policy.clone(), "/a.B/Other", internal_then_ok).await;
    assert_eq!(calls, 1);
    let (_, calls) = send(policy, "/a.B/Other", pushback_then_ok).await;
    assert_eq!(calls, 2);
}

/// A proxy's answer: an HTTP response that is not gRPC's.
fn proxy(status: u16, retry_after: Option<&'static str>) -> http::Response<String> {
    let mut response = http::Response::builder().status(status);
    if let Some(after) = retry_after {
        response = response.header("retry-after", after);
    }
    response.body(String::new()).unwrap()
}

/// Issue 28, item 6: a proxy's answer to a gRPC call is read as HTTP's: its `Retry-After` is a
/// floor, and a `429` without one waits on the throttle schedule.
#[tokio::test(start_paused = true)]
async fn a_proxy_s_retry_after_is_a_floor_and_its_429_is_throttling() {
    let throttle = Backoff::fixed(Duration::from_secs(3));
    let policy = quick().throttle_backoff(throttle).build().unwrap();
    let (result, calls) = send(policy.clone(), "/a.B/C", |n| {
        Ok(match n {
            1 => proxy(429, Some("2")),
            _ => grpc(Some(0), &[]),
        })
    })
    .await;
    assert_eq!(calls, 2);
    let slept = info(&result).slept();
    assert!(slept >= Duration::from_secs(2), "{slept:?}");
    let (result, _) = send(policy.clone(), "/a.B/C", |n| {
        Ok(match n {
            1 => proxy(503, Some("1")),
            _ => grpc(Some(0), &[]),
        })
    })
    .await;
    assert!(info(&result).slept() >= Duration::from_secs(1));
    let (result, _) = send(policy, "/a.B/C", |n| {
        Ok(match n {
            1 => proxy(429, None),
            _ => grpc(Some(0), &[]),
        })
    })
    .await;
    assert_eq!(info(&result).slept(), Duration::from_secs(3));
}

fn refused() -> std::io::Error {
    std::io::Error::other(h2::Error::from(h2::Reason::REFUSED_STREAM))
}

/// A stream the server refused (`REFUSED_STREAM`, a graceful `GOAWAY`) never reached its
/// application: A6 retries it once, at once, without counting it against `maxAttempts` or in
/// `grpc-previous-rpc-attempts`, as grpc-go, grpc-java and C-core do; a second one is an ordinary
/// retry. (`max_retries(0)` keeps no copy of the request, and sends it once.) What the server is
/// told: `wire::a_transparent_retry_is_not_counted_in_grpc_previous_rpc_attempts`.
#[tokio::test(start_paused = true)]
async fn a_refused_stream_is_retried_once_at_once_and_not_counted() {
    let policy = quick().max_retries(1).build().unwrap();
    let (result, seen) = send_request(policy.clone(), call_of("/a.B/C"), |n| match n {
        1 | 2 => Err(refused()),
        // 0 too: the first attempt answers (`send_request`).
        _ => Ok(grpc(Some(0), &[])),
    })
    .await;
    assert_eq!(seen.len(), 3, "one retry allowed, and the transparent one");
    let info = info(&result);
    assert_eq!((info.attempts(), info.transparent()), (3, 1));
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    // The transparent retry went at once; the counted one waited the backoff.
    assert_eq!(info.slept(), Duration::from_millis(20));
    let (result, seen) = send_request(policy, call_of("/a.B/C"), |n| match n {
        0 => Ok(grpc(Some(0), &[])),
        _ => Err(refused()),
    })
    .await;
    assert_eq!(seen.len(), 3);
    assert_eq!(
        result.unwrap_err().info().stop_reason(),
        Some(StopReason::MaxRetries)
    );
}

/// A refused connection is a failed pick to A6 ("handled by the configured retry policy"), and
/// grpc-go and grpc-java count it as an attempt: it is retried as any failure is, for every method.
#[tokio::test(start_paused = true)]
async fn a_refused_connection_is_an_ordinary_retry() {
    let policy = quick().max_retries(2).build().unwrap();
    let (result, calls) = send(policy, "/a.B/C", |n| match n {
        // The first attempt answers (`send_request`): refused, as every other.
        0 => Ok(grpc(Some(0), &[])),
        _ => Err(std::io::ErrorKind::ConnectionRefused.into()),
    })
    .await;
    assert_eq!(calls, 3);
    let info = result.unwrap_err().info();
    assert_eq!(info.transparent(), 0);
    assert_eq!(info.stop_reason(), Some(StopReason::MaxRetries));
}
