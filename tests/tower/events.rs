//! The `tracing` events: a debug event per retry, a warn when giving up while still failing, and reasons
//! as `snake_case` tokens.

use super::*;

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn each_retry_is_a_debug_event_and_giving_up_while_failing_a_warn_with_the_request_s_fields()
{
    let events = common::capture();
    let hits = Hits::default();
    let request = Request::get("http://api.example:8080/items?page=2")
        .body(String::new())
        .unwrap();

    let response = send(
        exact(ms(100)).max_retries(2).build().unwrap(),
        server(&hits, always(503)),
        request,
    )
    .await
    .unwrap();
    assert_eq!(info(&response).attempts(), 3);

    let events = events.stagger();
    assert_eq!(events.len(), 3, "{events:#?}");
    for (n, retry) in events[..2].iter().enumerate() {
        assert_eq!(retry.level, tracing::Level::DEBUG);
        assert_eq!(retry.message, "retrying");
        assert_eq!(retry.field("http.request.method"), "GET");
        assert_eq!(retry.field("server.address"), "api.example");
        assert_eq!(retry.field("url.path"), "/items");
        assert_eq!(retry.field("attempt"), (n + 1).to_string());
        assert_eq!(
            retry.field("http.request.resend_count"),
            (n + 1).to_string()
        );
        assert_eq!(retry.field("error.type"), "503");
        assert_eq!(retry.field("delay_ms"), ["100", "200"][n]);
        assert_eq!(retry.field("delay.reason"), "backoff");
    }
    let gave_up = &events[2];
    assert_eq!(gave_up.level, tracing::Level::WARN);
    assert_eq!(gave_up.message, "gave up while still failing");
    assert_eq!(gave_up.field("url.path"), "/items");
    assert_eq!(gave_up.field("attempts"), "3");
    assert_eq!(gave_up.field("http.request.resend_count"), "2");
    assert_eq!(gave_up.field("slept_ms"), "300");
    assert_eq!(gave_up.field("stop.reason"), "max_retries");
    assert_eq!(gave_up.field("error.type"), "503");
    // No message repeats the target's name.
    assert!(events.iter().all(|e| !e.message.contains("stagger")));
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_first_success_logs_nothing_a_later_one_a_debug_event_and_a_fatal_answer_no_warn() {
    let events = common::capture();
    let policy = exact(ms(10)).build().unwrap();

    send(policy.clone(), server(&Hits::default(), always(200)), get())
        .await
        .unwrap();
    assert!(events.stagger().is_empty(), "{:#?}", events.stagger());

    send(
        policy.clone(),
        server(&Hits::default(), fails_until(2)),
        get(),
    )
    .await
    .unwrap();
    let succeeded = events.stagger().pop().unwrap();
    assert_eq!(succeeded.level, tracing::Level::DEBUG);
    assert_eq!(succeeded.message, "succeeded");
    assert_eq!(succeeded.field("http.request.resend_count"), "1");

    send(policy, server(&Hits::default(), always(404)), get())
        .await
        .unwrap();
    let stopped = events.stagger().pop().unwrap();
    assert_eq!(stopped.level, tracing::Level::DEBUG);
    assert_eq!(stopped.field("stop.reason"), "fatal");
}

/// `error.type`, `delay.reason` and `stop.reason` are stable `snake_case` tokens, which a logfmt or
/// JSON line carries as they are: no spaces, whatever the reason.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_reasons_in_the_events_are_snake_case_tokens() {
    let events = common::capture();

    // A 503 asking for a second, then 503s: retry_after, then backoff, and max_retries.
    let limited = |n, _: &Req| match n {
        1 => Response::builder()
            .status(503)
            .header("retry-after", "1")
            .body(String::new())
            .unwrap(),
        _ => status(503),
    };
    let policy = exact(ms(10)).max_retries(2).build().unwrap();
    send(policy, server(&Hits::default(), limited), get())
        .await
        .unwrap();
    // A POST answered 502, which the server may have acted on: not_idempotent.
    let post = Request::post("http://test.invalid/orders")
        .body(String::new())
        .unwrap();
    let policy = exact(ms(10)).build().unwrap();
    send(policy, server(&Hits::default(), always(502)), post)
        .await
        .unwrap();
    // Refused connections until the next retry would end past the deadline: connect, deadline.
    let policy = exact(ms(40)).max_elapsed(ms(100)).build().unwrap();
    let hits = Hits::default();
    let refused = failing(&hits, io::ErrorKind::ConnectionRefused);
    send(policy, refused, get()).await.unwrap_err();
    // Resets, and the budget's one retry: connection_closed, budget.
    let policy = exact(ms(10)).budget(one_retry()).build().unwrap();
    let reset = failing(&hits, io::ErrorKind::ConnectionReset);
    send(policy, reset, get()).await.unwrap_err();
    // Attempts that time out: timeout.
    let policy = exact(ms(10))
        .attempt_timeout(ms(50))
        .max_retries(1)
        .build()
        .unwrap();
    let hangs = service_fn(|_: Req| std::future::pending::<Result<Res, io::Error>>());
    send(policy, hangs, get()).await.unwrap_err();

    let events = events.stagger();
    let values = |field: &str| {
        let mut values: Vec<&str> = events
            .iter()
            .filter_map(|e| e.fields.get(field).map(String::as_str))
            .collect();
        values.sort_unstable();
        values.dedup();
        values
    };
    assert_eq!(values("delay.reason"), ["backoff", "retry_after"]);
    assert_eq!(
        values("stop.reason"),
        ["budget", "deadline", "max_retries", "not_idempotent"]
    );
    assert_eq!(
        values("error.type"),
        ["502", "503", "connect", "connection_closed", "timeout"]
    );
    let gave_up: Vec<_> = events
        .iter()
        .filter(|e| e.message == "gave up while still failing")
        .map(|e| (e.field("error.type"), e.field("stop.reason")))
        .collect();
    assert_eq!(
        gave_up,
        [
            ("503", "max_retries"),
            ("502", "not_idempotent"),
            ("connect", "deadline"),
            ("connection_closed", "budget"),
            ("timeout", "max_retries"),
        ]
    );
}
