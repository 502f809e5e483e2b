//! Retries for HTTP clients that do not stampede.
//!
//! Clients that fail together retry together, and a naive retry loop turns a short outage into a herd
//! that knocks the recovering server down again. stagger retries with **capped exponential backoff and
//! full jitter**, treats a server's **`Retry-After` as a floor** and spreads the clients that received the
//! same one, respects **idempotency**, and bounds the extra load with **`max_retries`, one deadline and a
//! retry budget**.
//!
//! ```no_run
//! # #[cfg(feature = "reqwest-middleware")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use stagger::{RetryInfo, RetryMiddleware, RetryPolicy};
//!
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(RetryMiddleware::new(RetryPolicy::default()))
//!     .build();
//!
//! let response = client.get("https://httpbin.org/status/503").send().await?;
//! // What the retries did (a response answered at its first attempt carries none: `of` says so).
//! let info = RetryInfo::of(response.extensions());
//! println!("{} after {} attempts", response.status(), info.attempts()); // 503, after at most 11 attempts and 30 s
//! # Ok(())
//! # }
//! ```
//!
//! # Start here
//!
//! 1. [`RetryMiddleware`]: retries for a reqwest-middleware client (feature `reqwest-middleware`).
//! 2. [`RetryLayer`]: retries for `reqwest::Client`, hyper-util's client or any `tower::Service` over
//!    `http` types (feature `tower`, on by default).
//! 3. [`retry()`]: retries for any async operation, such as a connect or a query, on any runtime;
//!    `blocking::retry` for a blocking one (not in the browser).
//! 4. [`supervise()`]: restarts for a task that should run until told to stop.
//! 5. [`RetryPolicy::builder`]: the rules they share; [`RetryPolicy::default()`] is a good start
//!    ([defaults](#defaults)), and every call says what its retries did in a [`RetryInfo`].
//!
//! # Map of the crate
//!
//! One I/O-free engine decides, and thin adapters sleep and send.
//!
//! | to | use |
//! |---|---|
//! | set the rules | [`RetryPolicy::builder`], with [`Backoff`] and [`Jitter`], [`RetryBudget`] and [`RetryAfterMode`]; [`RestartPolicy::builder`] for [`supervise()`] |
//! | retry a tonic client's gRPC calls as gRPC's retry design (A6) says | [`RetryLayer::grpc`](crate::RetryLayer) over its `Channel`, [`classify::GrpcMethod`] for per-method rules (feature `tonic`; the repository's `docs/grpc.md`) |
//! | decide what is worth retrying | [`classify`]: a closure through [`classify::from_fn`], or the [`DefaultClassifier`](classify::DefaultClassifier) |
//! | know what the retries did | [`RetryInfo`] (in every response's extensions, in every [`Error`]), [`StopReason`], [`Elapsed`], [`Rejected`], [`RetryReport`], [`RestartEvent`], [`metrics`] |
//! | read what a server asks for yourself | [`server_delay`] (`Retry-After`, `retry-after-ms`, `RateLimit`, `X-RateLimit-Reset`), [`parse_retry_after`] |
//! | send a body that is not `Clone` again | [`ReplayBody`] |
//! | write an adapter of your own | [`adapter`]: the per-request state machine and the traits the adapters use |
//! | sleep on a runtime's timer of your own | [`time::Timer`], given to [`RetryPolicyBuilder::timer`]; without one, tokio's inside a tokio runtime, async-io's, a thread of stagger's, or the browser's (the repository's `docs/runtimes.md`, `docs/browser.md`) |
//! | test what the retries and your code do when a dependency fails | `chaos` (feature `chaos`): faults injected beneath or above the retries; `wiremock::Script` (feature `wiremock`): a mock server's answers in order; the repository's `docs/testing.md` |
//!
//! # Supported versions
//!
//! reqwest 0.13, reqwest-middleware 0.5, tonic 0.14, tower 0.5, hyper 1, hyper-util 0.1, h2 0.4 (0.4.2 or
//! later), tokio 1, http 1 and http-body 1, metrics 0.24; Rust 1.88 or later. Another major version (reqwest 0.12,
//! reqwest-middleware 0.4, hyper 0.14) is a different crate to Rust, which `cargo tree -d` shows as a
//! second copy: the compiler then says that "`HttpReplay` cannot copy" those requests, or that
//! `RetryMiddleware` is not a `Middleware`, and its notes name the fixes. The repository's
//! `docs/compatibility.md` gives the versions checked and the compiler's messages.
//!
//! # The delay convention
//!
//! Before retry `n` (after the `n`-th failed attempt) the ceiling is `c(n) = min(max_delay,
//! initial · base^(n−1))`: 100, 200, 400, 800 ms for 100 ms and base 2. [`Jitter::Full`] waits
//! `U[0, c(n)]`; see [`Jitter`] for the others. No delay ever exceeds `max_delay`.
//!
//! # Defaults
//!
//! | setting | default |
//! |---|---|
//! | backoff | exponential from 100 ms, base 2, `max_delay` 20 s, full jitter |
//! | `max_retries` | 10, a backstop: the deadline and the budget end a call that keeps failing |
//! | `max_elapsed`: one deadline for the whole call, attempts and sleeps included | 30 s |
//! | `attempt_timeout`: each attempt, to the response's head | 10 s |
//! | `Retry-After` and rate-limit headers ([`server_delay`]) | a floor, spread over `max(c(n), F)` after it; over 30 s: stop |
//! | a `429` without a usable delay | its own schedule: exponential from 500 ms, equal jitter ([`RetryPolicyBuilder::throttle_backoff`]) |
//! | breaker ([`RetryPolicyBuilder::breaker`]) | on: 5 failures in a row without an answer (or a `502`–`504`) put a host down; its calls wait for it up to 10 s while one probe per 0.1–1 s finds it back |
//! | host cooldown ([`RetryPolicyBuilder::host_cooldown`]) | off |
//! | adaptive throttling ([`RetryPolicyBuilder::adaptive_throttle`]) | off |
//! | a streaming body kept for a retry ([`RetryPolicyBuilder::replay_buffer`]) | 64 KiB |
//! | hedging ([`RetryPolicyBuilder::hedge_after`]) | off |
//! | idempotency | `POST`/`PATCH` replayed after an ambiguous failure only with `Idempotency-Key` |
//! | budget | 20 % extra load, at least 10 retries/s, 10 s window, shared by clones of a policy; a timeout's retry costs 4, paid by recent requests or a new budget's starting credit ([`RetryBudget`]) |
//! | jitter seed | OS entropy; one stream per request |
//!
//! The two time limits are what protects a caller who sets nothing: reqwest's client has no timeout by
//! default, and a server that accepts a connection and never answers would hold every call forever.
//! They are the values of Microsoft's standard resilience handler for `HttpClient` (30 s in all, 10 s
//! per attempt), the closest peer that ships a default for both; Envoy's route timeout, 15 s for the
//! whole request retries included, is of the same order, while reqwest, reqwest-retry and
//! `tower::retry` have none. 10 s bounds the wait for a response's head, not the body: a long download
//! is not cut, an endpoint that holds its headers longer (long polling) needs its own setting.
//!
//! # What a call ends with
//!
//! | the retries stop | the call ends with |
//! |---|---|
//! | on a response | `Ok(response)`, intact, with [`RetryInfo`] in its extensions |
//! | when the deadline passes, after a response was received | that response, `Ok`, [`StopReason::Deadline`] in its [`RetryInfo`] |
//! | on an error | the error: in [`Error`] from the tower layer and [`retry()`], as it came (`Error::Reqwest`) from [`RetryMiddleware`] |
//! | when the deadline passes with no response, or on an attempt that timed out | an [`Error`] whose `is_deadline()` or `is_attempt_timeout()` is true ([`Elapsed`] in `Error::Middleware` from [`RetryMiddleware`]) |
//! | a gRPC call through `RetryLayer::grpc`, when its deadline passes (the caller's, or `max_elapsed`) or a request is not sent | a `DEADLINE_EXCEEDED` or `UNAVAILABLE` status, as gRPC's clients end such a call (the repository's `docs/grpc.md`) |
//!
//! Every outcome says what the retries did: the attempts made, the time slept and why they stopped.
//! For a failure, that is the line worth logging:
//!
//! ```
//! # #[cfg(feature = "tower")]
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use std::time::Duration;
//! use stagger::{Backoff, RetryLayer, RetryPolicy};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! let service = ServiceBuilder::new()
//!     .layer(RetryLayer::new(
//!         RetryPolicy::builder().backoff(Backoff::fixed(Duration::from_millis(10))).build().unwrap(),
//!     ))
//!     .service_fn(|_: http::Request<()>| async {
//!         Err::<http::Response<()>, _>(std::io::Error::from(std::io::ErrorKind::ConnectionRefused))
//!     });
//!
//! let error = service.oneshot(http::Request::new(())).await.unwrap_err();
//! let info = error.info();
//! assert_eq!(error.to_string(), "gave up after 11 attempts (max retries reached)");
//! assert_eq!((info.attempts(), info.slept()), (11, Duration::from_millis(100)));
//! // The inner error, its type intact:
//! assert_eq!(error.inner().unwrap().kind(), std::io::ErrorKind::ConnectionRefused);
//! # }
//! # #[cfg(not(feature = "tower"))]
//! # fn main() {}
//! ```
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `tower` (default) | [`RetryLayer`] |
//! | `tokio` (default) | tokio's timer and clock inside a tokio runtime (its paused clock moves stagger's limits), tokio's and tower's `Elapsed` in the classifier; nothing in the browser |
//! | `async-io` | async-io's timer (smol's) for a call outside a tokio runtime, rather than stagger's own timer thread |
//! | `reqwest` | `reqwest` requests, responses and errors in the layer and the classifier; implies `hyper`, `hyper-util` and `h2`, whose errors reach a reqwest user |
//! | `reqwest-middleware` | [`RetryMiddleware`] |
//! | `hyper`, `hyper-util`, `h2` | recognise those crates' errors in the default classifier |
//! | `metrics` | counters and histograms of the retries through the `metrics` facade ([`metrics`]) |
//! | `tonic` | `RetryLayer::grpc` for tonic 0.14 clients, and `tonic::transport::Error` in the classifier; gRPC's service config (`GrpcServiceConfig`, `RetryLayer::grpc_service_config`), read as C-core reads it; implies `tower`, `hyper`, `hyper-util` and `h2` |
//! | `serde` | `PolicyConfig`: a policy's settings from a configuration file, in any serde format (the repository's `docs/configuration.md`) |
//! | `chaos` | fault injection for tests and staging: `chaos::ChaosLayer` (tower, over `http` types, a tonic `Channel` or `reqwest::Client`), `chaos::ChaosMiddleware` (with `reqwest-middleware`) |
//! | `wiremock` | `wiremock::Script`: a wiremock responder that answers in order and says when each request came |
//!
//! In the browser (wasm32-unknown-unknown) `RetryMiddleware`, [`retry()`], [`RetryLayer`] over a
//! service of one's own and [`supervise()`] build with the same features, on the browser's timer, clock
//! and randomness, and no tokio; `tonic`, `chaos` and `wiremock` stop the build with a message, and
//! `hyper`, `hyper-util`, `h2` and `rustls` build nothing (the repository's `docs/browser.md`).
//!
// The adapter of reqwest-middleware exists with its feature only: without it (`cargo doc` with the
// default features), its links lead to the table above, which names the feature.
#![cfg_attr(
    feature = "reqwest-middleware",
    doc = "[`RetryMiddleware`]: crate::RetryMiddleware\n[`RetryReport`]: crate::RetryReport"
)]
#![cfg_attr(
    not(feature = "reqwest-middleware"),
    doc = "[`RetryMiddleware`]: crate#features\n[`RetryReport`]: crate#features"
)]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
// Without an adapter of requests (a build with `stagger::retry` and `stagger::blocking` alone), the
// steps of the corridor that only requests walk (their spans, the hedge, the breaker's round trips)
// are left unused: one line here rather than the same condition on each of a dozen items.
#![cfg_attr(
    not(any(feature = "tower", feature = "reqwest-middleware")),
    allow(dead_code)
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod attempt;
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
pub mod blocking;
#[cfg(all(
    feature = "chaos",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub mod chaos;
pub mod classify;
mod config;
mod drive;
mod engine;
mod error;
mod guards;
mod judge;
mod observe;
mod replay;
pub mod replicas;
mod retry;
mod signals;
mod supervise;
pub mod time;

#[cfg(feature = "reqwest-middleware")]
mod reqwest;
#[cfg(feature = "tower")]
pub mod tower;
#[cfg(all(
    feature = "wiremock",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
pub mod wiremock;

// What the browser cannot have, said where a user would otherwise meet the dependencies' own errors
// or none at all (their dependencies are not built for wasm32-unknown-unknown: Cargo.toml).
#[cfg(all(feature = "tonic", target_arch = "wasm32", target_os = "unknown"))]
compile_error!(
    "stagger's feature `tonic` is not available on wasm32-unknown-unknown: tonic's `Channel` needs \
     hyper and tokio's sockets, which the browser does not have (gRPC-Web clients such as \
     tonic-web-wasm-client are not supported); turn the feature off for this target"
);
#[cfg(all(feature = "chaos", target_arch = "wasm32", target_os = "unknown"))]
compile_error!(
    "stagger's feature `chaos` is not available on wasm32-unknown-unknown: its faults answer with \
     responses the browser's reqwest cannot make (a `reqwest::Response` there is a `fetch`'s); turn \
     the feature off for this target"
);
#[cfg(all(feature = "wiremock", target_arch = "wasm32", target_os = "unknown"))]
compile_error!(
    "stagger's feature `wiremock` is not available on wasm32-unknown-unknown: wiremock's server \
     needs sockets the browser does not have; turn the feature off for this target"
);

pub use crate::attempt::{ResendCount, RestartEvent, RetryInfo, StopReason};
pub use crate::classify::outcome::{Outcome, Reason};
pub use crate::engine::backoff::{Backoff, Delays, Jitter};
pub use crate::engine::breaker::{Breaker, WhenDown};
pub use crate::engine::builder::RetryPolicyBuilder;
pub use crate::engine::live::{LivePolicy, PolicySource};
pub use crate::engine::overrides::{Overrides, OverridesBuilder};
pub use crate::engine::policy::{RetryAfterMode, RetryEvent, RetryPolicy};

pub use crate::engine::restart_policy::{RestartPolicy, RestartPolicyBuilder};
pub use crate::error::Rejected;
pub use crate::error::{ConfigError, Elapsed, Error};
pub use crate::guards::budget::{RetryBudget, RetryBudgetBuilder};
pub use crate::guards::host_state::{HostReport, HostState};
pub use crate::guards::replicas::{Replica, ReplicaChange, ReplicaSet};
pub use crate::observe::metrics;
pub use crate::replay::body::ReplayBody;
pub use crate::retry::retry;
pub use crate::signals::retry_after::parse_retry_after;
pub use crate::signals::server_delay::server_delay;
pub use crate::supervise::supervise;

#[cfg(feature = "serde")]
pub use crate::config::policy::{
    AdaptiveThrottleConfig, BackoffConfig, BreakerConfig, BudgetConfig, GrpcConfig,
    GrpcMethodConfig, PolicyConfig, ProbeBackoffConfig, ThrottleBackoffConfig,
};
#[cfg(feature = "tonic")]
pub use crate::config::service_config::{GrpcServiceConfig, ServiceConfigNotice};
#[cfg(feature = "serde")]
pub use crate::error::PolicyConfigError;
#[cfg(feature = "tonic")]
pub use crate::error::{FieldProblem, ServiceConfigError};
#[cfg(feature = "reqwest-middleware")]
pub use crate::reqwest::{RetryMiddleware, RetryReport};
#[cfg(feature = "tower")]
pub use crate::tower::layer::RetryLayer;

pub mod adapter {
    //! The engine's moving parts, for writing an adapter of your own: the per-request state machine
    //! ([`RetryState`], fed [`Attempt`]s, answering [`Decision`]s) and the traits through which the
    //! tower layer and the middleware copy and judge requests ([`Replay`], [`HttpResponse`],
    //! [`AsError`]).
    //!
    //! A user of [`RetryLayer`](crate::RetryLayer), [`RetryMiddleware`] or
    //! [`retry`](crate::retry()) needs none of it, but for one thing: an error type of one's own that
    //! the layer should classify implements [`AsError`].
    //!
    #![cfg_attr(
        feature = "reqwest-middleware",
        doc = "[`RetryMiddleware`]: crate::RetryMiddleware"
    )]
    #![cfg_attr(
        not(feature = "reqwest-middleware"),
        doc = "[`RetryMiddleware`]: crate#features"
    )]
    pub use crate::attempt::{Attempt, Decision};
    pub use crate::classify::as_error::AsError;
    pub use crate::engine::state::RetryState;
    pub use crate::judge::HttpResponse;
    #[cfg(feature = "tonic")]
    pub use crate::replay::GrpcReplay;
    pub use crate::replay::{HttpReplay, Judge, NextAttempt, Recorded, Replay, ReplayFn, Sent};
}

/// docs/grpc.md's examples, its README quick start among them, compiled and run with the feature
/// `tonic`.
#[cfg(all(doctest, feature = "tonic"))]
#[doc = include_str!("../docs/grpc.md")]
struct GrpcDoctests;

/// docs/testing.md's examples, compiled and run with the features its kit needs (its tests of a
/// handler are `examples/testing.rs`'s, which checks that the guide quotes it as it is).
#[cfg(all(
    doctest,
    feature = "chaos",
    feature = "reqwest-middleware",
    feature = "tower",
    feature = "wiremock"
))]
#[doc = include_str!("../docs/testing.md")]
struct TestingDoctests;

/// docs/runtimes.md's blocking example, compiled with reqwest's blocking client (a dev-dependency)
/// and the feature `reqwest`, which its `?` needs.
#[cfg(all(
    doctest,
    feature = "reqwest",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]
#[doc = include_str!("../docs/runtimes.md")]
struct RuntimesDoctests;

/// The README's examples use reqwest-middleware, tower, reqwest, tonic and chaos: compiled when all
/// five are on (`.ci/run` also builds them as a user pastes them, with
/// `../shared/tools/readme-snippets.sh`).
#[cfg(all(
    doctest,
    feature = "reqwest-middleware",
    feature = "tower",
    feature = "reqwest",
    feature = "tonic",
    feature = "chaos"
))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
