//! What a call ends with: `RetryInfo` in the final response, the last response intact, fatal statuses
//! and `max_retries(0)` after one attempt, and errors (the inner service's, a time limit's, a
//! rejection) along their chain.

use http::StatusCode;
use stagger::StopReason;

use super::*;

#[tokio::test(start_paused = true)]
async fn retry_info_in_the_final_response_counts_the_attempts() {
    let hits = Hits::default();
    let policy = exact(ms(100)).build().unwrap();

    let response = send(policy.clone(), server(&hits, fails_until(3)), get())
        .await
        .unwrap();

    assert_eq!(hits.count(), 3);
    assert_eq!(response.status(), StatusCode::OK);
    let info = info(&response);
    assert_eq!(info.attempts(), 3);
    assert_eq!(info.retries(), 2);
    assert_eq!(info.slept(), ms(300));
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
    assert_eq!(response.into_body(), "ok");

    let hits = Hits::default();
    let response = send(policy, server(&hits, fails_until(1)), get())
        .await
        .unwrap();
    assert_eq!(hits.count(), 1);
    let info = self::info(&response);
    assert_eq!((info.attempts(), info.slept()), (1, Duration::ZERO));
    assert_eq!(info.stop_reason(), Some(StopReason::Success));
}

#[tokio::test(start_paused = true)]
async fn when_retries_run_out_the_last_response_comes_back_intact() {
    let hits = Hits::default();
    let numbered = |n: usize, _: &Req| {
        Response::builder()
            .status(502)
            .header("x-attempt", n.to_string())
            .header("content-type", "text/plain")
            .body(format!("bad gateway, attempt {n}"))
            .unwrap()
    };
    let policy = exact(ms(10)).max_retries(2).build().unwrap();

    let response = send(policy, server(&hits, numbered), get()).await.unwrap();

    assert_eq!(hits.count(), 3);
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(response.headers()["x-attempt"], "3");
    assert_eq!(response.headers()["content-type"], "text/plain");
    assert_eq!(info(&response).stop_reason(), Some(StopReason::MaxRetries));
    assert_eq!(response.into_body(), "bad gateway, attempt 3");
}

#[tokio::test(start_paused = true)]
async fn fatal_statuses_come_back_after_one_attempt() {
    for code in [400, 401, 403, 404, 409, 422, 501, 505] {
        let hits = Hits::default();
        let policy = exact(ms(10)).build().unwrap();
        let response = send(policy, server(&hits, always(code)), get())
            .await
            .unwrap();
        assert_eq!(hits.count(), 1, "{code}");
        assert_eq!(response.status().as_u16(), code);
        assert_eq!(info(&response).stop_reason(), Some(StopReason::Fatal));
    }
}

/// The messages along an error's source chain, from the error itself inwards: what a reporter such as
/// anyhow's `{:#}` joins.
fn chain(error: &(dyn std::error::Error + 'static)) -> Vec<String> {
    std::iter::successors(Some(error), |e| e.source())
        .map(ToString::to_string)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_time_limit_or_a_rejection_is_said_once_along_the_error_chain() {
    let hangs = || service_fn(|_: Req| std::future::pending::<Result<Res, io::Error>>());

    let policy = exact(ms(10))
        .attempt_timeout(ms(300))
        .max_retries(0)
        .build()
        .unwrap();
    let error = send(policy, hangs(), get()).await.unwrap_err();
    assert_eq!(chain(&error), ["attempt 1 timed out after 300ms"]);
    assert_eq!(
        format!("{error:?}"),
        "attempt 1 timed out after 300ms (max retries reached)"
    );

    let policy = exact(ms(100))
        .max_elapsed(ms(250))
        .attempt_timeout(ms(100))
        .build()
        .unwrap();
    let error = send(policy, hangs(), get()).await.unwrap_err();
    assert_eq!(chain(&error), ["deadline of 250ms passed after 2 attempts"]);
    assert_eq!(
        format!("{error:?}"),
        "deadline of 250ms passed after 2 attempts (100ms asleep)"
    );

    // A 429 asking for a minute, longer than `max_retry_after`: the next request is not sent.
    let policy = exact(ms(10)).host_cooldown(true).build().unwrap();
    let limited = |_, _: &Req| {
        let response = Response::builder().status(429).header("retry-after", "60");
        response.body(String::new()).unwrap()
    };
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy))
        .service(server(&Hits::default(), limited));
    client.clone().oneshot(get()).await.unwrap();
    let error = client.oneshot(get()).await.unwrap_err();
    assert!(error.rejected().is_some());
    let rejected =
        "not sent: the host asked for a pause of 60s more, longer than max_retry_after (30s)";
    assert_eq!(chain(&error), [rejected]);
    assert_eq!(format!("{error:?}"), rejected);
    // `{:#?}` shows the fields.
    assert!(format!("{error:#?}").starts_with("Error(\n    Rejected {"));
}

#[tokio::test(start_paused = true)]
async fn an_error_from_the_inner_service_is_returned_unchanged() {
    let policy = exact(ms(10)).max_retries(2).build().unwrap();

    // Retryable: the last attempt's error comes back.
    let hits = Hits::default();
    let error = send(
        policy.clone(),
        failing(&hits, io::ErrorKind::ConnectionRefused),
        get(),
    )
    .await
    .unwrap_err();
    assert_eq!(hits.count(), 3);
    assert_eq!(error.info().attempts(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
    let inner = error.inner().expect("the inner error");
    assert_eq!(inner.kind(), io::ErrorKind::ConnectionRefused);
    assert_eq!(inner.to_string(), "failure #3");
    assert_eq!(
        error.to_string(),
        "gave up after 3 attempts (max retries reached)"
    );
    let source = std::error::Error::source(&error).expect("the inner error as source");
    assert_eq!(source.to_string(), "failure #3");
    assert!(source.is::<io::Error>());

    // Fatal: the first.
    let hits = Hits::default();
    let error = send(
        policy,
        failing(&hits, io::ErrorKind::PermissionDenied),
        get(),
    )
    .await
    .unwrap_err();
    assert_eq!(hits.count(), 1);
    assert_eq!(error.info().attempts(), 1);
    assert_eq!(error.info().stop_reason(), Some(StopReason::Fatal));
    let inner = error.into_inner().expect("the inner error");
    assert_eq!(inner.kind(), io::ErrorKind::PermissionDenied);
    assert_eq!(inner.to_string(), "failure #1");
}

#[tokio::test(start_paused = true)]
async fn a_per_attempt_timeout_inside_the_layer_is_retried_and_its_error_kept() {
    let hits = Hits::default();
    let hanging = {
        let hits = hits.clone();
        service_fn(move |_: Req| {
            hits.hit();
            async {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok::<_, Infallible>(status(200))
            }
        })
    };
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(
            exact(ms(10)).max_retries(2).build().unwrap(),
        ))
        .layer(tower::timeout::TimeoutLayer::new(ms(100)))
        .service(hanging);
    let start = Instant::now();

    let error = service.oneshot(get()).await.unwrap_err();

    assert_eq!(hits.offsets(start), [0, 110, 230].map(ms));
    let inner = error.inner().expect("the inner error");
    assert!(inner.is::<tower::timeout::error::Elapsed>(), "{error}");
    assert_eq!(error.info().attempts(), 3);
    assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
}

#[tokio::test(start_paused = true)]
async fn max_retries_zero_sends_once() {
    let policy = exact(ms(10)).max_retries(0).build().unwrap();

    let hits = Hits::default();
    let response = send(policy.clone(), server(&hits, always(503)), get())
        .await
        .unwrap();
    assert_eq!(hits.count(), 1);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(info(&response).attempts(), 1);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::MaxRetries));

    let hits = Hits::default();
    let error = send(
        policy,
        failing(&hits, io::ErrorKind::ConnectionRefused),
        get(),
    )
    .await
    .unwrap_err();
    assert_eq!(hits.count(), 1);
    assert_eq!(error.inner().unwrap().to_string(), "failure #1");
    assert_eq!(error.info().attempts(), 1);
    assert_eq!(error.info().stop_reason(), Some(StopReason::MaxRetries));
}
