//! Fault injection for tests and staging (feature `chaos`): answers, errors, hangs and latency in
//! place of an upstream's, at a rate, by a script or for the requests a predicate picks.
//!
//! A [`Chaos`] holds [`Rule`]s, each giving a [`Fault`] to some calls; a [`ChaosLayer`] (tower, over
//! `http` types, a tonic `Channel` or a `reqwest::Client`) or a [`ChaosMiddleware`]
//! (reqwest-middleware) puts it in a client. Placed beneath the retry layer, every attempt meets it:
//! a test of the retries, or of what the caller does once they give up. Placed above, the caller
//! meets it directly. Every clone shares the rules, the switch ([`Chaos::set_enabled`]: a
//! deployment's flag) and the [`Counts`].
//!
//! Each error it injects is one the default classifier reads as it reads the real fault (a refusal
//! is a connect error, safe to retry; a reset a closed connection; a hang ends at the attempt
//! timeout), so that the retries above behave as they would against the real thing, and
//! [`InjectedFault::find`] tells an injected error from a real one. Its draws come from a seed: the
//! same seed picks the same calls.
//!
//! ```
//! # #[cfg(feature = "tower")]
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! use http::StatusCode;
//! use stagger::chaos::{Chaos, ChaosLayer, Fault, Rule};
//! use stagger::{RetryLayer, RetryPolicy};
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! // 30 % of the attempts refused, and every POST to /payments reset.
//! let chaos = Chaos::builder()
//!     .rule(Rule::always(Fault::reset()).when(|request| request.path() == Some("/payments")))
//!     .rule(Rule::rate(0.3, Fault::refused()).unwrap())
//!     .seed(1)
//!     .build();
//! let client = ServiceBuilder::new()
//!     .layer(RetryLayer::new(RetryPolicy::default()))
//!     .layer(ChaosLayer::new(chaos.clone()))
//!     .service_fn(|_: http::Request<String>| async {
//!         Ok::<_, std::convert::Infallible>(http::Response::new(String::from("ok")))
//!     });
//! for _ in 0..10 {
//!     let get = http::Request::get("http://shop.internal/items").body(String::new()).unwrap();
//!     let response = client.clone().oneshot(get).await.unwrap();
//!     assert_eq!(response.status(), StatusCode::OK); // the refusals were retried
//! }
//! assert!(chaos.counts().errors() > 0);
//! chaos.set_enabled(false); // the next call is sent as it is
//! # }
//! # #[cfg(not(feature = "tower"))]
//! # fn main() {}
//! ```
//!
//! The repository's `docs/testing.md` shows it in a test, on tokio's paused clock, and in staging.
//!
// The middleware exists with the feature reqwest-middleware only: without it, its links lead to the
// crate's table of features, which names it.
#![cfg_attr(
    feature = "reqwest-middleware",
    doc = "[`ChaosMiddleware`]: crate::chaos::ChaosMiddleware"
)]
#![cfg_attr(
    not(feature = "reqwest-middleware"),
    doc = "[`ChaosMiddleware`]: crate#features"
)]

mod body;
mod fault;
mod future;
mod handle;
mod layer;
#[cfg(feature = "reqwest-middleware")]
mod middleware;
mod rule;

pub use crate::error::InjectedFault;
pub use body::{AnswerBody, ChaosBody};
pub use fault::Fault;
pub use future::ChaosFuture;
pub use handle::{Chaos, ChaosBuilder, Counts};
pub use layer::{ChaosLayer, ChaosService, Injectable};
#[cfg(feature = "reqwest-middleware")]
pub use middleware::ChaosMiddleware;
pub use rule::Rule;
