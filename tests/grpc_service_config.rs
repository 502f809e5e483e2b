//! gRPC's service config through `RetryLayer::grpc_service_config` (issue 36), held to gRPC's C-core
//! (Python's grpcio): every check of the document accepted or refused as C-core does
//! (`grpc_service_config/validation.rs`), and the same JSON against the same scripted server
//! (`grpc_reference/server.py`) through stagger's tonic client and C-core's own
//! (`grpc_reference/config_client.py`), call by call (`grpc_service_config/scenarios.rs`). Without
//! python3 or grpcio a test is reported ignored by the suite's harness, unless `CI=true`, where it
//! fails. Each comparison prints its row of `docs/grpc.md`:
//! `cargo test --features tonic --test grpc_service_config -- --nocapture`.
#![cfg(feature = "tonic")]

#[path = "common/harness.rs"]
mod harness;
#[path = "grpc_reference/reference.rs"]
mod reference;

#[path = "grpc_service_config/c_core.rs"]
mod c_core;
#[path = "grpc_service_config/scenarios.rs"]
mod scenarios;
#[path = "grpc_service_config/semantics.rs"]
mod semantics;
#[path = "grpc_service_config/validation.rs"]
mod validation;

use reference::Need::Grpcio;

fn main() -> std::process::ExitCode {
    harness::run(trials![reference::missing;
        async validation::every_document_is_accepted_or_refused_as_c_core_does [Grpcio];
        sync validation::a_clamp_and_an_ignored_hedging_policy_are_notices [];
        sync semantics::a_call_uses_its_method_s_config_else_its_service_s_else_the_default [];
        sync semantics::a_retry_policy_becomes_a6_s_backoff_and_attempts [];
        sync semantics::every_policy_of_a_config_keeps_the_builder_s_guards_and_limits [];
        async semantics::retry_throttling_takes_the_budget_s_place_and_counts_as_a6_says [];
        async scenarios::a_retried_code_is_retried_as_c_core_retries_it [Grpcio];
        async scenarios::a_code_not_listed_is_not_retried [Grpcio];
        async scenarios::max_attempts_over_five_is_five_attempts [Grpcio];
        async scenarios::a_pushback_is_honoured_and_a_negative_one_stops [Grpcio];
        async scenarios::throttling_stops_and_brings_back_retries_call_by_call_as_c_core [Grpcio];
        async scenarios::names_match_by_method_then_service_then_default [Grpcio];
        async scenarios::the_timeout_is_the_call_s_deadline_unless_the_caller_s_is_sooner [Grpcio];
        async scenarios::backoff_delays_fall_within_a6_s_ranges [Grpcio];
        async scenarios::a_hedging_policy_hedges_where_c_core_ignores_it [Grpcio];
    ])
}
