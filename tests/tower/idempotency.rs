//! Which requests are replayed: a POST only where the server did not act, or with an `Idempotency-Key`,
//! and the check turned off.

use http::{Method, StatusCode};
use stagger::StopReason;

use super::*;

/// What the server saw of each attempt: method, `Idempotency-Key` and body.
type Seen = Arc<Mutex<Vec<(Method, Option<String>, String)>>>;

fn watching(
    hits: &Hits,
    seen: &Seen,
    respond: impl Fn(usize) -> u16 + Clone + Send + 'static,
) -> impl Service<Req, Response = Res, Error = Infallible> + Clone {
    let seen = Arc::clone(seen);
    server(hits, move |n, request: &Req| {
        let key = request
            .headers()
            .get("idempotency-key")
            .map(|v| v.to_str().unwrap().to_owned());
        seen.lock()
            .unwrap()
            .push((request.method().clone(), key, request.body().clone()));
        status(respond(n))
    })
}

#[tokio::test(start_paused = true)]
async fn post_is_not_replayed_after_a_500() {
    let (hits, seen) = (Hits::default(), Seen::default());
    let policy = exact(ms(10)).build().unwrap();

    let response = send(policy, watching(&hits, &seen, |_| 500), post(None))
        .await
        .unwrap();

    assert_eq!(hits.count(), 1);
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        info(&response).stop_reason(),
        Some(StopReason::NotIdempotent)
    );
}

#[tokio::test(start_paused = true)]
async fn post_is_replayed_after_a_503_with_the_same_method_and_body() {
    let (hits, seen) = (Hits::default(), Seen::default());
    let policy = exact(ms(10)).build().unwrap();

    let response = send(
        policy,
        watching(&hits, &seen, |n| if n < 3 { 503 } else { 201 }),
        post(None),
    )
    .await
    .unwrap();

    assert_eq!(hits.count(), 3);
    assert_eq!(response.status(), StatusCode::CREATED);
    let want = (Method::POST, None, r#"{"item":42}"#.to_owned());
    assert_eq!(*seen.lock().unwrap(), vec![want; 3]);
}

#[tokio::test(start_paused = true)]
async fn post_with_an_idempotency_key_is_replayed_after_a_500_with_its_key() {
    let (hits, seen) = (Hits::default(), Seen::default());
    let policy = exact(ms(10)).build().unwrap();

    let response = send(
        policy,
        watching(&hits, &seen, |n| if n < 3 { 500 } else { 201 }),
        post(Some("order-8e03978e")),
    )
    .await
    .unwrap();

    assert_eq!(hits.count(), 3);
    assert_eq!(response.status(), StatusCode::CREATED);
    assert_eq!(info(&response).attempts(), 3);
    let want = (
        Method::POST,
        Some("order-8e03978e".to_owned()),
        r#"{"item":42}"#.to_owned(),
    );
    assert_eq!(*seen.lock().unwrap(), vec![want; 3]);
}

#[tokio::test(start_paused = true)]
async fn the_idempotency_check_can_be_turned_off() {
    let (hits, seen) = (Hits::default(), Seen::default());
    let policy = exact(ms(10))
        .max_retries(2)
        .idempotency_check(false)
        .build()
        .unwrap();

    let response = send(policy, watching(&hits, &seen, |_| 500), post(None))
        .await
        .unwrap();

    assert_eq!(hits.count(), 3);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::MaxRetries));
}
