//! Every rule of a service config's checks, accepted or refused by stagger as by C-core: each
//! document of the corpus is read by `GrpcServiceConfig::from_json` and set on a channel of C-core's
//! client, and the two verdicts must agree, a refusal naming one of the fields C-core names. The
//! corpus holds A6's examples and those of gRPC's `doc/service_config.md` too.

use stagger::{GrpcServiceConfig, ServiceConfigNotice};

use super::c_core::{Verdict, verdicts};
use super::reference::Reference;

/// A method config for `a.B` whose `retryPolicy` is a valid one with `field` (`"key": value`, as
/// written) in place of its own.
fn retry(field: &str) -> String {
    let valid = [
        r#""maxAttempts": 2"#,
        r#""initialBackoff": "1s""#,
        r#""maxBackoff": "1s""#,
        r#""backoffMultiplier": 2"#,
        r#""retryableStatusCodes": ["UNAVAILABLE"]"#,
    ];
    let key = field.split(':').next().unwrap_or_default();
    let mut members: Vec<&str> = valid
        .into_iter()
        .filter(|member| key.is_empty() || !member.starts_with(key))
        .collect();
    if !field.is_empty() {
        members.push(field);
    }
    format!(
        r#"{{"methodConfig": [{{"name": [{{"service": "a.B"}}], "retryPolicy": {{{}}}}}]}}"#,
        members.join(", ")
    )
}

/// The corpus: each document with a word on what it tries.
fn corpus() -> Vec<String> {
    let mut docs: Vec<String> = [
        // A6's examples: its retryPolicy (".1s", which C-core does not read), its hedging policies
        // (which C-core ignores), its throttling.
        r#"{"methodConfig": [{"name": [{"service": "a.B"}], "retryPolicy": {"maxAttempts": 4, "initialBackoff": ".1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "a.B"}], "hedgingPolicy": {"maxAttempts": 4, "hedgingDelay": ".5s", "nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL", "ABORTED"]}}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "a.B"}], "hedgingPolicy": {"maxAttempts": 4, "hedgingDelay": "0s", "nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL", "ABORTED"]}}]}"#,
        r#"{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}"#,
        // doc/service_config.md's examples.
        r#"{"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": [{"name": [{"service": "foo", "method": "bar"}, {"service": "baz"}], "timeout": "1.000000001s"}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "MyService"}]}, {"name": [{"service": "MyService", "method": "Foo"}]}]}"#,
        // The document.
        "{}", "[]", "null", r#""x""#, "not json", r#"{"a":1,"a":2}"#, "{}x", r#"{"a":1,}"#, " {} ",
        r#"{"a": 01}"#, r#"{"a": -01}"#, r#"{"a": 1.}"#, r#"{"a": -}"#, r#"{"a": 1e+}"#,
        "{\"a\": \"\t\"}", r#"{"a": "\u00e9"}"#, r#"{"a": "\ud800"}"#, r#"{"a":"\ud800\u0041"}"#,
        r#"{"a":"\udc00"}"#, r#"{"a":"\u0000"}"#, "{}\u{0}garbage",
        // methodConfig and names.
        r#"{"methodConfig": null}"#, r#"{"methodConfig": {}}"#, r#"{"methodConfig": [1]}"#,
        r#"{"methodConfig": [null]}"#, r#"{"methodConfig": []}"#, r#"{"methodConfig": [{}]}"#,
        r#"{"methodConfig": [{}, {}]}"#, r#"{"methodConfig": [{"name": null}, {}]}"#,
        r#"{"methodConfig": [{"name": []}]}"#, r#"{"methodConfig": [{"name": {"service": "a.B"}}]}"#,
        r#"{"methodConfig": [{"name": [null]}]}"#, r#"{"methodConfig": [{"name": [{"service": 7}]}]}"#,
        r#"{"methodConfig": [{"name": [{"method": "x"}]}]}"#,
        r#"{"methodConfig": [{"name": [{"service": null, "method": "x"}]}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "", "method": "x"}]}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "a.B", "method": null}]}]}"#,
        r#"{"methodConfig": [{"name": [{}]}, {"name": [{"service": ""}]}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "a.B"}]}, {"name": [{"service": "a.B"}]}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "a.B", "method": ""}]}, {"name": [{"service": "a.B"}]}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "a.B", "method": "C"}]}, {"name": [{"service": "a.B", "method": "C"}]}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "a.B", "method": "C"}, {"service": "a.B", "method": "C"}]}]}"#,
        // The other fields of a method config.
        r#"{"methodConfig": [{"timeout": 1}]}"#, r#"{"methodConfig": [{"timeout": "1.5s", "waitForReady": "true"}]}"#,
        r#"{"methodConfig": [{"timeout": "1.5s", "waitForReady": null}]}"#, r#"{"methodConfig": [{"waitForReady": 1}]}"#,
        r#"{"methodConfig": [{"maxRequestMessageBytes": -1}]}"#, r#"{"methodConfig": [{"maxRequestMessageBytes": "4294967295"}]}"#,
        r#"{"methodConfig": [{"maxRequestMessageBytes": "4294967296"}]}"#, r#"{"methodConfig": [{"maxResponseMessageBytes": 1.5}]}"#,
        r#"{"methodConfig": [{"maxResponseMessageBytes": 0}]}"#, r#"{"methodConfig": [{"name": [{"service": "a.B"}], "timeout": "0s"}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "a.B"}], "retryPolicy": null}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "a.B"}], "retryPolicy": []}]}"#,
        r#"{"methodConfig": [{"name": [{"service": "a.B"}], "hedgingPolicy": {"maxAttempts": "x", "hedgingDelay": 3, "nonFatalStatusCodes": ["bad"]}}]}"#,
        // retryThrottling.
        r#"{"retryThrottling": null}"#, r#"{"retryThrottling": []}"#, r#"{"retryThrottling": {}}"#,
        r#"{"retryThrottling": {"maxTokens": 10, "tokenRatio": 1}}"#, r#"{"retryThrottling": {"maxTokens": 0, "tokenRatio": 1}}"#,
        r#"{"retryThrottling": {"maxTokens": 2000, "tokenRatio": 0.0001}}"#, r#"{"retryThrottling": {"maxTokens": "10", "tokenRatio": "0.5"}}"#,
        r#"{"retryThrottling": {"maxTokens": 10.0, "tokenRatio": 0.5}}"#, r#"{"retryThrottling": {"maxTokens": -1, "tokenRatio": 0.5}}"#,
        r#"{"retryThrottling": {"maxTokens": 4294967296, "tokenRatio": 0.5}}"#, r#"{"retryThrottling": {"maxTokens": 4294967295, "tokenRatio": 0.5}}"#,
        r#"{"retryThrottling": {"maxTokens":10,"tokenRatio":1e-3}}"#, r#"{"retryThrottling": {"maxTokens":10,"tokenRatio":0.0019}}"#,
        r#"{"retryThrottling": {"maxTokens":10,"tokenRatio":-0.5}}"#, r#"{"retryThrottling": {"maxTokens":10,"tokenRatio":"abc"}}"#,
        r#"{"retryThrottling": {"maxTokens":10,"tokenRatio":null}}"#, r#"{"retryThrottling": {"maxTokens":10}}"#,
        r#"{"retryThrottling": {"tokenRatio":1}}"#, r#"{"retryThrottling": {"maxTokens":10,"tokenRatio":"1.5x"}}"#,
        r#"{"retryThrottling": {"maxTokens":10,"tokenRatio":"3000000"}}"#, r#"{"retryThrottling":{"maxTokens":" 10 ","tokenRatio":" 0.5"}}"#,
        r#"{"retryThrottling":{"maxTokens":"+10","tokenRatio":"0.5 "}}"#, r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":"1."}}"#,
        r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":".5"}}"#, r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":"3000000.5"}}"#,
        r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":"0"}}"#, r#"{"retryThrottling":{"maxTokens":10,"tokenRatio":"0.0"}}"#,
        // Load balancing, checked and left to the channel.
        r#"{"loadBalancingPolicy": "round_robin"}"#, r#"{"loadBalancingPolicy": "ROUND_ROBIN"}"#, r#"{"loadBalancingPolicy": "foo"}"#,
        r#"{"loadBalancingPolicy": 1}"#, r#"{"loadBalancingPolicy": ""}"#, r#"{"loadBalancingPolicy": "rls_experimental"}"#,
        r#"{"loadBalancingConfig": [{"foo": {}}]}"#, r#"{"loadBalancingConfig": [{"foo": {}}, {"pick_first": {}}]}"#,
        r#"{"loadBalancingConfig": {}}"#, r#"{"loadBalancingConfig": null}"#, r#"{"loadBalancingConfig": []}"#,
        r#"{"loadBalancingConfig": [1]}"#, r#"{"loadBalancingConfig": [{"round_robin": {}, "pick_first": {}}]}"#,
        r#"{"loadBalancingConfig": [{"round_robin": null}]}"#, r#"{"healthCheckConfig": {"serviceName": 1}}"#,
        r#"{"healthCheckConfig": {"serviceName": "x"}}"#, r#"{"healthCheckConfig": null}"#, r#"{"healthCheckConfig": 1}"#,
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    // retryPolicy, field by field.
    for fields in [
        "",
        r#""maxAttempts": "3""#,
        r#""maxAttempts": 2.0"#,
        r#""maxAttempts": "2.0""#,
        r#""maxAttempts": 1e1"#,
        r#""maxAttempts": " 3 ""#,
        r#""maxAttempts": "+3""#,
        r#""maxAttempts": -1"#,
        r#""maxAttempts": 1"#,
        r#""maxAttempts": 6"#,
        r#""maxAttempts": 2147483648"#,
        r#""maxAttempts": null"#,
        r#""maxAttempts": true"#,
        r#""initialBackoff": "0s""#,
        r#""initialBackoff": "0.000000001s""#,
        r#""initialBackoff": "0.0009s""#,
        r#""initialBackoff": "0.0015s""#,
        r#""initialBackoff": "1""#,
        r#""initialBackoff": 1"#,
        r#""initialBackoff": "-1s""#,
        r#""initialBackoff": "1.5s""#,
        r#""initialBackoff": "1.0000000001s""#,
        r#""initialBackoff": ".5s""#,
        r#""initialBackoff": "1.s""#,
        r#""initialBackoff": " 1 s""#,
        r#""initialBackoff": "315576000001s""#,
        r#""initialBackoff": "315576000000s""#,
        r#""initialBackoff": "1ms""#,
        r#""initialBackoff": "-0.5s""#,
        r#""initialBackoff": "1.-5s""#,
        r#""initialBackoff": "1e1s""#,
        r#""initialBackoff": "+1s""#,
        r#""initialBackoff": null"#,
        r#""maxBackoff": "0s""#,
        r#""maxBackoff": "0.5s""#,
        r#""backoffMultiplier": 0"#,
        r#""backoffMultiplier": -1"#,
        r#""backoffMultiplier": 0.5"#,
        r#""backoffMultiplier": "2""#,
        r#""backoffMultiplier": "nan""#,
        r#""backoffMultiplier": "inf""#,
        r#""backoffMultiplier": "1e400""#,
        r#""backoffMultiplier": 1e-300"#,
        r#""backoffMultiplier": "1e-40""#,
        r#""backoffMultiplier": "0x10""#,
        r#""backoffMultiplier": "Infinity""#,
        r#""backoffMultiplier": " 2""#,
        r#""backoffMultiplier": "+-1""#,
        r#""backoffMultiplier": "2x""#,
        r#""backoffMultiplier": null"#,
        r#""retryableStatusCodes": []"#,
        r#""retryableStatusCodes": null"#,
        r#""retryableStatusCodes": ["OK"]"#,
        r#""retryableStatusCodes": ["UNAVAILABLE", "UNAVAILABLE"]"#,
        r#""retryableStatusCodes": ["Unavailable"]"#,
        r#""retryableStatusCodes": ["unavailable"]"#,
        r#""retryableStatusCodes": [14]"#,
        r#""retryableStatusCodes": ["14"]"#,
        r#""retryableStatusCodes": [" UNAVAILABLE"]"#,
        r#""retryableStatusCodes": "UNAVAILABLE""#,
        r#""retryableStatusCodes": ["DO_NOT_USE"]"#,
        r#""retryableStatusCodes": ["UNAVAILABLE", 14]"#,
        r#""retryableStatusCodes": [null]"#,
        r#""perAttemptRecvTimeout": "0s""#,
        r#""perAttemptRecvTimeout": 5"#,
    ] {
        docs.push(retry(fields));
    }
    // Without retryableStatusCodes, and a hedging policy beside a retry policy.
    docs.push(r#"{"methodConfig": [{"name": [{"service": "a.B"}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 2}}]}"#.to_owned());
    docs.push(r#"{"methodConfig": [{"name": [{"service": "a.B"}], "retryPolicy": {"maxAttempts": 2, "initialBackoff": "1s", "maxBackoff": "1s", "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}, "hedgingPolicy": {"maxAttempts": 1}}]}"#.to_owned());
    docs
}

/// Every document of the corpus: stagger's verdict is C-core's, a refusal naming a field C-core
/// names.
pub(crate) async fn every_document_is_accepted_or_refused_as_c_core_does() {
    let reference = Reference::start().await;
    let docs = corpus();
    let texts: Vec<&str> = docs.iter().map(String::as_str).collect();
    let c_core = verdicts(&reference, &texts).await;
    assert_eq!(c_core.len(), docs.len());
    let (mut accepted, mut refused) = (0, 0);
    let mut disagreements = Vec::new();
    for (doc, theirs) in docs.iter().zip(&c_core) {
        let ours = GrpcServiceConfig::from_json(doc);
        let agree = match (&ours, theirs) {
            (Ok(_), Verdict::Accepted) => {
                accepted += 1;
                true
            }
            (Err(error), Verdict::Refused(fields)) => {
                refused += 1;
                (fields.is_empty() && error.path().is_empty())
                    || fields.iter().any(|field| field == error.path())
            }
            _ => false,
        };
        if !agree {
            disagreements.push(format!("{doc}\n  stagger: {ours:?}\n  C-core: {theirs:?}"));
        }
    }
    println!(
        "ROW | validation | {} documents: {accepted} accepted and {refused} refused by both, the same \
         field named; {} disagreements",
        docs.len(),
        disagreements.len()
    );
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

/// What C-core changes of a document it accepts, stagger says.
pub(crate) fn a_clamp_and_an_ignored_hedging_policy_are_notices() {
    let clamped = GrpcServiceConfig::from_json(&retry(r#""maxAttempts": 6"#)).unwrap();
    assert_eq!(
        clamped.notices(),
        [ServiceConfigNotice::MaxAttemptsClamped {
            path: "methodConfig[0].retryPolicy.maxAttempts".into(),
            given: 6,
            used: 5,
        }]
    );
    let docs = corpus();
    let a6_hedging = GrpcServiceConfig::from_json(&docs[1]).unwrap();
    assert!(matches!(
        a6_hedging.notices(),
        [ServiceConfigNotice::HedgingIgnored { path, .. }]
            if path == "methodConfig[0].hedgingPolicy.hedgingDelay"
    ));
    let all_at_once = GrpcServiceConfig::from_json(&docs[2]).unwrap();
    assert_eq!(
        all_at_once.notices()[0].path(),
        "methodConfig[0].hedgingPolicy.hedgingDelay"
    );
    let both = GrpcServiceConfig::from_json(docs.last().unwrap()).unwrap();
    assert_eq!(
        both.notices(),
        [ServiceConfigNotice::HedgingBesideRetry {
            path: "methodConfig[0]".into()
        }]
    );
    let error =
        GrpcServiceConfig::from_json(&retry(r#""retryableStatusCodes": [14]"#)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "methodConfig[0].retryPolicy.retryableStatusCodes[0]: is not a string"
    );
}
