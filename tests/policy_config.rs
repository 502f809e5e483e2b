//! A policy's settings as a document (feature `serde`, issue 36 item 2): every field read from TOML
//! and JSON with durations as people write them, a default for each field left out, unknown fields
//! and the builder's refusals named by their path, a policy written back and read again unchanged,
//! and docs/configuration.md's example, every field at its default.
#![cfg(feature = "serde")]

use std::time::Duration;

use stagger::classify::{GrpcCode, GrpcCodes, GrpcMethod};
use stagger::{
    Backoff, Breaker, ConfigError, Jitter, PolicyConfig, PolicyConfigError, RetryAfterMode,
    RetryBudget, RetryPolicy,
};

fn toml(text: &str) -> Result<PolicyConfig, PolicyConfigError> {
    PolicyConfig::from_deserializer(toml::Deserializer::parse(text).unwrap())
}

fn json(text: &str) -> Result<PolicyConfig, PolicyConfigError> {
    PolicyConfig::from_deserializer(&mut serde_json::Deserializer::from_str(text))
}

const EVERY_FIELD: &str = r#"
max_retries = 4
max_elapsed = "1m"
attempt_timeout = "2.5s"
retry_after = "strict"
max_retry_after = "45s"
idempotency_check = false
replay_buffer = 1048576
hedge_after = "40ms"
host_cooldown = true
backoff_on_refusal = true
seed = 7

[backoff]
initial = "250ms"
base = 3.0
max_delay = "5s"
jitter = "equal"

[throttle_backoff]
initial = "1s"
base = 2.0
max_delay = "1m"
jitter = "decorrelated"

[budget]
enabled = true
ratio = 0.1
min_per_second = 5
window = "30s"
per_host = true
own_starting_credit = true

[breaker]
enabled = true
failures = 3
fail_fast = true
hold = "10s"
route_scope = false
probe_backoff = { initial = "200ms", base = 2.0, max_delay = "2s", jitter = "full" }

[adaptive_throttle]
enabled = true
k = 2.5
window = "30s"

[grpc]
retry_on = ["UNAVAILABLE", "ABORTED"]
send_max_elapsed = true

[grpc.methods."shop.Payments/Charge"]
retry_on = []

[grpc.methods."shop.Catalog/Get"]
idempotent = true
"#;

#[test]
fn every_field_is_read_from_toml_with_durations_as_people_write_them() {
    let policy = toml(EVERY_FIELD).unwrap().build().unwrap();
    assert_eq!(policy.max_retries(), 4);
    assert_eq!(policy.max_elapsed(), Some(Duration::from_secs(60)));
    assert_eq!(policy.attempt_timeout(), Some(Duration::from_millis(2500)));
    assert_eq!(
        *policy.backoff(),
        Backoff::exponential(Duration::from_millis(250))
            .with_base(3.0)
            .with_max_delay(Duration::from_secs(5))
            .with_jitter(Jitter::Equal)
    );
    assert_eq!(policy.throttle_backoff().jitter(), Jitter::Decorrelated);
    assert_eq!(policy.replay_buffer(), 1 << 20);
    assert_eq!(policy.hedge_after(), Some(Duration::from_millis(40)));
    assert!(policy.host_cooldown());
    assert!(policy.backoff_on_refusal());
    let budget = policy.budget().unwrap();
    assert_eq!((budget.ratio(), budget.min_per_second()), (0.1, 5));
    assert_eq!(budget.window(), Duration::from_secs(30));
    assert!(budget.per_host() && budget.own_starting_credit());
    let probe =
        Backoff::exponential(Duration::from_millis(200)).with_max_delay(Duration::from_secs(2));
    assert_eq!(
        policy.breaker(),
        Some(
            Breaker::fail_fast()
                .with_failures(3)
                .with_probe_backoff(probe)
                .with_route_scope(false)
        )
    );
    assert_eq!(policy.adaptive_throttle(), Some(2.5));
    assert_eq!(
        policy.grpc_retry_on(),
        GrpcCodes::new(&[GrpcCode::Unavailable, GrpcCode::Aborted])
    );
    assert_eq!(
        policy.grpc_codes_of("/shop.Payments/Charge"),
        GrpcCodes::NONE
    );
    assert!(policy.grpc_send_max_elapsed());
    let config = toml(EVERY_FIELD).unwrap();
    assert_eq!(config.retry_after, RetryAfterMode::Strict);
    assert_eq!(config.max_retry_after, Duration::from_secs(45));
    assert!(!config.idempotency_check);
    assert_eq!(config.seed, Some(7));
}

#[test]
fn a_field_left_out_takes_the_builder_s_default() {
    assert_eq!(toml("").unwrap(), PolicyConfig::default());
    assert_eq!(json("{}").unwrap(), PolicyConfig::default());
    // A section written in part: the rest of it is its own schedule's default.
    let config = toml("[throttle_backoff]\ninitial = \"2s\"").unwrap();
    let throttle = config.build().unwrap().throttle_backoff().to_owned();
    assert_eq!(throttle.initial(), Duration::from_secs(2));
    assert_eq!(throttle.jitter(), Jitter::Equal);
    let policy = toml("max_retries = 2").unwrap().build().unwrap();
    assert_eq!(policy.max_elapsed(), Some(RetryPolicy::DEFAULT_MAX_ELAPSED));
    assert_eq!(policy.breaker(), Some(Breaker::default()));
    assert_eq!(policy.budget().unwrap().ratio(), RetryBudget::DEFAULT_RATIO);
    let off = toml("max_elapsed = \"none\"\n[budget]\nenabled = false\n[breaker]\nenabled = false")
        .unwrap()
        .build()
        .unwrap();
    assert_eq!((off.max_elapsed(), off.breaker()), (None, None));
    assert!(off.budget().is_none());
}

#[test]
fn an_unknown_field_is_refused_with_its_path() {
    let path =
        |result: Result<PolicyConfig, PolicyConfigError>| result.unwrap_err().path().to_owned();
    assert_eq!(path(toml("max_retires = 3")), "max_retires");
    assert_eq!(path(toml("[budget]\nratoi = 0.1")), "budget.ratoi");
    assert_eq!(
        path(toml("[breaker.probe_backoff]\nintial = \"1s\"")),
        "breaker.probe_backoff.intial"
    );
    assert_eq!(
        path(json(
            r#"{"grpc": {"methods": {"a.B/C": {"idempotant": true}}}}"#
        )),
        "grpc.methods.a.B/C.idempotant"
    );
    let error = toml("[budget]\nratoi = 0.1").unwrap_err();
    let message = error.to_string();
    assert!(message.starts_with("budget.ratoi: "), "{message}");
    assert!(message.contains("unknown field `ratoi`"), "{message}");
}

#[test]
fn a_value_not_understood_is_refused_with_its_path() {
    for (document, field) in [
        ("attempt_timeout = 10", "attempt_timeout"),
        ("attempt_timeout = \"10\"", "attempt_timeout"),
        ("max_retry_after = \"none\"", "max_retry_after"),
        ("[backoff]\ninitial = \"1 day\"", "backoff.initial"),
        ("[backoff]\njitter = \"random\"", "backoff.jitter"),
        ("retry_after = \"sometimes\"", "retry_after"),
        ("[grpc]\nretry_on = [\"unavailable\"]", "grpc.retry_on"),
        ("max_retries = -1", "max_retries"),
    ] {
        let error = toml(document).unwrap_err();
        assert_eq!(error.path(), field, "{document}: {error}");
        assert!(matches!(error, PolicyConfigError::Document { .. }));
    }
}

#[test]
fn each_check_of_the_builder_names_its_field() {
    for (document, field) in [
        ("max_elapsed = \"0s\"", "max_elapsed"),
        ("attempt_timeout = \"0s\"", "attempt_timeout"),
        ("hedge_after = \"0s\"", "hedge_after"),
        ("[backoff]\nbase = 0.5", "backoff.base"),
        ("[backoff]\ninitial = \"30s\"", "backoff.max_delay"),
        ("[throttle_backoff]\nbase = -1.0", "throttle_backoff.base"),
        ("[budget]\nratio = 20.0", "budget.ratio"),
        ("[budget]\nwindow = \"500ms\"", "budget.window"),
        ("[breaker]\nfailures = 0", "breaker.failures"),
        ("[breaker]\nhold = \"0s\"", "breaker.hold"),
        (
            "[breaker.probe_backoff]\ninitial = \"0s\"",
            "breaker.probe_backoff.initial",
        ),
        (
            "[breaker.probe_backoff]\nbase = 0.5",
            "breaker.probe_backoff.base",
        ),
        (
            "[adaptive_throttle]\nenabled = true\nk = 0.5",
            "adaptive_throttle.k",
        ),
        (
            "[adaptive_throttle]\nenabled = true\nwindow = \"1h\"",
            "adaptive_throttle.window",
        ),
        (
            "[grpc.methods.\"shop.Payments.Charge\"]\nidempotent = true",
            "grpc.methods.shop.Payments.Charge",
        ),
    ] {
        let error = toml(document).unwrap().build().unwrap_err();
        assert_eq!(error.path(), field, "{document}: {error}");
        assert!(
            matches!(error, PolicyConfigError::Invalid { .. }),
            "{error:?}"
        );
    }
    let error = toml("[budget]\nratio = 20.0").unwrap().build().unwrap_err();
    assert!(matches!(
        error,
        PolicyConfigError::Invalid { error: ConfigError::BudgetRatio(r), .. } if r == 20.0
    ));
}

/// A policy of every setting, none at its default, built by code.
fn unusual_policy() -> RetryPolicy {
    RetryPolicy::builder()
        .max_retries(3)
        .max_elapsed(None)
        .attempt_timeout(Duration::from_micros(1500))
        .backoff(Backoff::exponential(Duration::from_millis(50)).with_base(1.5))
        .throttle_backoff(Backoff::fixed(Duration::from_secs(2)))
        .retry_after(RetryAfterMode::Ignore)
        .max_retry_after(Duration::from_secs(90))
        .idempotency_check(false)
        .replay_buffer(0)
        .hedge_after(Duration::from_millis(75))
        .host_cooldown(true)
        .backoff_on_refusal(true)
        .budget(None)
        .breaker(
            Breaker::hold(Duration::from_secs(3))
                .with_failures(7)
                .with_route_scope(false),
        )
        .adaptive_throttle(3.0)
        .adaptive_throttle_window(Duration::from_secs(20))
        .grpc_retry_on(GrpcCodes::new(&[GrpcCode::Aborted]))
        .grpc_method("/a.B/C", GrpcMethod::no_retries())
        .grpc_method("a.B/D", GrpcMethod::idempotent())
        .grpc_send_max_elapsed(true)
        .seed(42)
        .build()
        .unwrap()
}

#[test]
fn a_policy_written_back_reads_as_the_same_policy_in_toml_and_json() {
    for policy in [
        unusual_policy(),
        RetryPolicy::default(),
        toml(EVERY_FIELD).unwrap().build().unwrap(),
    ] {
        let written = PolicyConfig::of(&policy);
        let in_toml = toml::to_string(&written).unwrap();
        let in_json = serde_json::to_string_pretty(&written).unwrap();
        for read in [toml(&in_toml).unwrap(), json(&in_json).unwrap()] {
            assert_eq!(read, written, "{in_toml}");
            let rebuilt = read.build().unwrap();
            assert_eq!(PolicyConfig::of(&rebuilt), written);
            assert_eq!(format!("{rebuilt:?}"), format!("{policy:?}"));
        }
    }
    let text = toml::to_string(&PolicyConfig::of(&unusual_policy())).unwrap();
    assert!(text.contains("max_elapsed = \"none\""), "{text}");
    assert!(text.contains("attempt_timeout = \"1500us\""), "{text}");
}

#[test]
fn the_example_of_docs_configuration_md_is_every_field_at_its_default() {
    let page = include_str!("../docs/configuration.md");
    let start = page.find("```toml\n").expect("a TOML example") + "```toml\n".len();
    let example = &page[start..start + page[start..].find("```").unwrap()];
    let read = toml(example).unwrap();
    assert_eq!(read, PolicyConfig::default());
    // Every field is in it: written back, the default document has no field the example lacks.
    let written = toml::to_string(&PolicyConfig::default()).unwrap();
    let keys = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|line| line.split_once(" = ").map(|(key, _)| key.trim().to_owned()))
            .collect()
    };
    for key in keys(&written) {
        assert!(keys(example).contains(&key), "{key} is not in the example");
    }
    read.build().unwrap();
}
