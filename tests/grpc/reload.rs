//! A service config reloaded while the channel runs, as a resolver sends its next one
//! (`ServiceConfigLayer::reload`, issue 36, item 3), against the server on loopback: the next calls
//! follow the new config and a call in flight the one it started with; each server's retry
//! throttling keeps its tokens, scaled as C-core scales them; a host down stays down.

use stagger::tower::ServiceConfigLayer;
use stagger::{Breaker, GrpcServiceConfig, HostState};

use super::*;

/// A default method config retrying `UNAVAILABLE` up to `max_attempts` times, 10 ms apart at most,
/// and, with `max_tokens`, A6's retry throttling with a `tokenRatio` of 0.1.
fn config(max_attempts: u32, max_tokens: Option<u32>) -> GrpcServiceConfig {
    let throttling = max_tokens.map_or_else(String::new, |max| {
        format!(r#", "retryThrottling": {{"maxTokens": {max}, "tokenRatio": 0.1}}"#)
    });
    GrpcServiceConfig::from_json(&format!(
        r#"{{"methodConfig": [{{"name": [{{}}], "retryPolicy": {{"maxAttempts": {max_attempts},
            "initialBackoff": "0.01s", "maxBackoff": "0.01s", "backoffMultiplier": 1,
            "retryableStatusCodes": ["UNAVAILABLE"]}}}}]{throttling}}}"#
    ))
    .unwrap()
}

fn layer(config: &GrpcServiceConfig, builder: stagger::RetryPolicyBuilder) -> ServiceConfigLayer {
    RetryLayer::grpc_service_config(builder, config).unwrap()
}

/// A `Say` through `layer` over a channel to `addr`: its status, and the attempts the server saw
/// of it. Its requests name their host (`with_origin`), whose state the breaker keeps.
async fn say_through(layer: &ServiceConfigLayer, addr: SocketAddr, echo: &Echo) -> (Code, usize) {
    let before = echo.seen().len();
    let origin = format!("http://{addr}").parse().unwrap();
    let mut client = tonic::client::Grpc::with_origin(layer.layer(channel(addr)), origin);
    client.ready().await.unwrap();
    let codec = ProstCodec::<Ping, Pong>::default();
    let path = PathAndQuery::from_static("/test.Echo/Say");
    let code = match client.unary(tonic::Request::new(ping()), path, codec).await {
        Ok(_) => Code::Ok,
        Err(status) => status.code(),
    };
    (code, echo.seen().len() - before)
}

#[tokio::test]
async fn a_reload_changes_the_next_calls_and_not_one_in_flight() {
    let late = Step::Late(Duration::from_millis(300), Status::unavailable("late"));
    let steps = [unavailable(), unavailable(), late];
    let echo = Echo::scripted(steps.into_iter().chain((0..20).map(|_| unavailable())));
    let addr = serve(echo.clone()).await;
    let builder = || RetryPolicy::builder().breaker(None).budget(None);
    let layer = layer(&config(2, None), builder());
    assert_eq!(
        say_through(&layer, addr, &echo).await,
        (Code::Unavailable, 2)
    );

    // A call whose first attempt the server answers in 300 ms: the reload comes meanwhile.
    let in_flight = {
        let (layer, echo) = (layer.clone(), echo.clone());
        tokio::spawn(async move { say_through(&layer, addr, &echo).await })
    };
    let waiting = tokio::time::Instant::now();
    while echo.seen().len() < 3 {
        assert!(waiting.elapsed() < Duration::from_secs(5), "never sent");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    layer.reload(&config(4, None));
    assert_eq!(layer.policy_of("/test.Echo/Say").max_retries(), 3);
    assert_eq!(
        in_flight.await.unwrap(),
        (Code::Unavailable, 2),
        "the first config's"
    );
    assert_eq!(
        say_through(&layer, addr, &echo).await,
        (Code::Unavailable, 4),
        "the new config's"
    );
}

#[tokio::test]
async fn a_reload_keeps_each_server_s_tokens_scaled_to_the_new_max_tokens() {
    let echo = Echo::scripted((0..40).map(|_| unavailable()));
    let addr = serve(echo.clone()).await;
    let builder = || RetryPolicy::builder().breaker(None);
    let layer = layer(&config(2, Some(10)), builder());
    // 10 tokens: 9, retried; 8. 7, retried; 6. 5, not more than half: not retried.
    let mut attempts = Vec::new();
    for _ in 0..3 {
        attempts.push(say_through(&layer, addr, &echo).await.1);
    }
    assert_eq!(attempts, [2, 2, 1]);
    // The same config again: the tokens as they were.
    layer.reload(&config(2, Some(10)));
    assert_eq!(say_through(&layer, addr, &echo).await.1, 1, "4 of 10");
    // 4 of 10 is 8 of 20: throttled still, where a channel made anew is not.
    layer.reload(&config(2, Some(20)));
    assert_eq!(say_through(&layer, addr, &echo).await.1, 1, "8 of 20");
    let anew = self::layer(&config(2, Some(20)), builder());
    assert_eq!(say_through(&anew, addr, &echo).await.1, 2);
    // Without retryThrottling, the builder's budget again: retried.
    layer.reload(&config(2, None));
    assert_eq!(say_through(&layer, addr, &echo).await.1, 2);
}

#[tokio::test]
async fn a_reload_keeps_a_host_the_breaker_found_down() {
    let echo = Echo::scripted((0..10).map(|_| unavailable()));
    let addr = serve(echo.clone()).await;
    let layer = layer(
        &config(2, None),
        RetryPolicy::builder().breaker(Breaker::fail_fast()),
    );
    let host = addr.to_string();
    assert!(layer.policy_of("/test.Echo/Say").mark_down(&host));
    layer.reload(&config(5, None));
    let down = layer.policy_of("/test.Echo/Say").host_state(&host);
    assert!(matches!(down, HostState::Down { .. }), "{down:?}");
    // Not sent: failed at once, as gRPC's clients fail a call they cannot send.
    assert_eq!(
        say_through(&layer, addr, &echo).await,
        (Code::Unavailable, 0)
    );
}
