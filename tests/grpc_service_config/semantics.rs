//! What a service config makes of a builder's policy, without a network: which method config a call
//! uses, A6's backoff and attempts, the builder's guards and limits kept, and A6's retry throttling
//! in the budget's place.

use std::time::Duration;

use stagger::adapter::{Attempt, Decision};
use stagger::classify::{GrpcCode, GrpcCodes};
use stagger::tower::ServiceConfigLayer;
use stagger::{
    Breaker, GrpcServiceConfig, Jitter, Outcome, Reason, RetryLayer, RetryPolicy, StopReason,
};

fn layer(json: &str, builder: stagger::RetryPolicyBuilder) -> ServiceConfigLayer {
    let config = GrpcServiceConfig::from_json(json).unwrap();
    RetryLayer::grpc_service_config(builder, &config).unwrap()
}

fn retry_policy(max_attempts: u32) -> String {
    format!(
        r#"{{"maxAttempts": {max_attempts}, "initialBackoff": "0.1s", "maxBackoff": "1s",
            "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE", "ABORTED"]}}"#
    )
}

/// A6 and the service config doc: a call uses the method config that names its service and method,
/// else the one that names its service, else the default; none, no retries.
pub(crate) fn a_call_uses_its_method_s_config_else_its_service_s_else_the_default() {
    let json = format!(
        r#"{{"methodConfig": [
            {{"name": [{{"service": "MyService", "method": "Foo"}}], "retryPolicy": {}}},
            {{"name": [{{"service": "MyService"}}], "retryPolicy": {}}},
            {{"name": [{{}}], "retryPolicy": {}}}
        ]}}"#,
        retry_policy(2),
        retry_policy(3),
        retry_policy(4)
    );
    let layer = layer(&json, RetryPolicy::builder());
    let retries = |name: &str| layer.policy_of(name).max_retries();
    assert_eq!(retries("/MyService/Foo"), 1);
    assert_eq!(retries("MyService/Foo"), 1);
    assert_eq!(retries("/MyService/Bar"), 2);
    assert_eq!(retries("/Other/Foo"), 3);
    let codes = GrpcCodes::new(&[GrpcCode::Unavailable, GrpcCode::Aborted]);
    assert_eq!(layer.policy_of("/MyService/Bar").grpc_retry_on(), codes);

    let no_default = format!(
        r#"{{"methodConfig": [{{"name": [{{"service": "MyService"}}], "retryPolicy": {}}},
            {{"name": [{{"service": "MyService", "method": "Buy"}}], "timeout": "1s"}}]}}"#,
        retry_policy(3)
    );
    let layer = self::layer(&no_default, RetryPolicy::builder());
    assert_eq!(layer.policy_of("/Other/Foo").max_retries(), 0);
    assert_eq!(
        layer.policy_of("/Other/Foo").grpc_retry_on(),
        GrpcCodes::NONE
    );
    // Its own method config, without a retryPolicy: the service's does not apply.
    assert_eq!(layer.policy_of("/MyService/Buy").max_retries(), 0);
    assert_eq!(
        layer.service_config().timeout_of("/MyService/Buy"),
        Some(Duration::from_secs(1))
    );
}

/// A6: attempt n waits random(0, min(initialBackoff · backoffMultiplier^(n−1), maxBackoff)), for any
/// multiplier C-core accepts, a shrinking one or an infinite one too; at most 5 attempts.
pub(crate) fn a_retry_policy_becomes_a6_s_backoff_and_attempts() {
    let json = |multiplier: &str, max_attempts: u32| {
        format!(
            r#"{{"methodConfig": [{{"name": [{{}}], "retryPolicy": {{"maxAttempts": {max_attempts},
              "initialBackoff": "0.4s", "maxBackoff": "1s", "backoffMultiplier": {multiplier},
              "retryableStatusCodes": ["UNAVAILABLE"]}}}}]}}"#
        )
    };
    let ceilings = |multiplier: &str| {
        let layer = layer(&json(multiplier, 5), RetryPolicy::builder());
        let backoff = *layer.policy_of("/a.B/C").backoff();
        assert_eq!(backoff.jitter(), Jitter::Full);
        (1..=4)
            .map(|n| backoff.ceiling(n).as_millis())
            .collect::<Vec<_>>()
    };
    assert_eq!(ceilings("2"), [400, 800, 1000, 1000]);
    assert_eq!(ceilings("0.5"), [400, 200, 100, 50]);
    assert_eq!(ceilings("\"inf\""), [400, 1000, 1000, 1000]);
    assert_eq!(ceilings("1"), [400, 400, 400, 400]);
    let clamped = layer(&json("2", 9), RetryPolicy::builder());
    assert_eq!(clamped.policy_of("/a.B/C").max_retries(), 4);
    assert_eq!(clamped.service_config().notices().len(), 1);
}

/// What a service config cannot say stays the builder's, for every method: the breaker, the host
/// cooldown, the limits, the replay buffer; and every policy draws on one budget.
pub(crate) fn every_policy_of_a_config_keeps_the_builder_s_guards_and_limits() {
    let json = format!(
        r#"{{"methodConfig": [{{"name": [{{"service": "a.B"}}], "retryPolicy": {}}},
            {{"name": [{{"service": "a.H"}}], "hedgingPolicy": {{"maxAttempts": 3,
              "hedgingDelay": "0.05s", "nonFatalStatusCodes": ["UNAVAILABLE"]}}}}]}}"#,
        retry_policy(3)
    );
    let builder = RetryPolicy::builder()
        .breaker(Breaker::fail_fast())
        .host_cooldown(true)
        .attempt_timeout(Duration::from_secs(3))
        .max_elapsed(Duration::from_secs(7))
        .replay_buffer(1 << 20);
    let layer = layer(&json, builder);
    for name in ["/a.B/C", "/a.H/C", "/x.Y/Z"] {
        let policy = layer.policy_of(name);
        assert_eq!(policy.breaker(), Some(Breaker::fail_fast()), "{name}");
        assert!(policy.host_cooldown(), "{name}");
        assert_eq!(policy.attempt_timeout(), Some(Duration::from_secs(3)));
        assert_eq!(policy.max_elapsed(), Some(Duration::from_secs(7)));
        assert_eq!(policy.replay_buffer(), 1 << 20);
        assert_eq!(policy.budget().map(|b| b.ratio()), Some(0.2));
    }
    let hedged = layer.policy_of("/a.H/C");
    assert_eq!(hedged.hedge_after(), Some(Duration::from_millis(50)));
    assert_eq!(hedged.max_retries(), 2);
    assert_eq!(hedged.backoff().ceiling(1), Duration::ZERO);
    assert_eq!(layer.policy_of("/a.B/C").hedge_after(), None);
}

/// A6's token bucket, shared by every method of the channel: each failure worth retrying takes a
/// token, each success gives `tokenRatio` back, and retries go only while more than half are left;
/// it takes the budget's place.
pub(crate) async fn retry_throttling_takes_the_budget_s_place_and_counts_as_a6_says() {
    let json = format!(
        r#"{{"methodConfig": [{{"name": [{{}}], "retryPolicy": {}}}],
            "retryThrottling": {{"maxTokens": 10, "tokenRatio": 0.5}}}}"#,
        retry_policy(3)
    );
    let layer = layer(&json, RetryPolicy::builder().breaker(None));
    assert!(layer.policy_of("/a.B/C").budget().is_none());
    let unavailable = Attempt::new(Outcome::RetrySafe(Reason::Grpc(GrpcCode::Unavailable)));
    // A call that keeps failing, on `method`: how many attempts, and why it stopped.
    let failing = |method: &str| {
        let mut state = layer.policy_of(method).start();
        loop {
            match state.decide(unavailable, None) {
                Decision::Retry(_) => state.begin_retry(None).unwrap(),
                Decision::Stop(reason) => return (state.attempts(), reason),
            }
        }
    };
    let succeeding = |method: &str| {
        let mut state = layer.policy_of(method).start();
        assert_eq!(
            state.decide(Attempt::new(Outcome::Success), None),
            Decision::Stop(StopReason::Success)
        );
    };
    // 10 → 7 tokens; 6, then 5 (not more than half): stopped; 4; 3.
    let calls: Vec<_> = ["/a.B/C", "/a.B/D", "/x.Y/Z", "/a.B/C"]
        .iter()
        .map(|m| failing(m))
        .collect();
    assert_eq!(
        calls,
        [
            (3, StopReason::MaxRetries),
            (2, StopReason::Budget),
            (1, StopReason::Budget),
            (1, StopReason::Budget)
        ]
    );
    // Seven successes: 6.5 tokens; a failure leaves 5.5, retried; the next 4.5, not.
    for _ in 0..7 {
        succeeding("/x.Y/Z");
    }
    assert_eq!(failing("/a.B/C"), (2, StopReason::Budget));
}
