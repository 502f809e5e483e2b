//! Fault injection (`stagger::chaos`, issue 38): which calls a rule picks, at a rate, by a script, by a
//! predicate or by Envoy's headers, and the switch (`picking`, in virtual time over in-process
//! services); each injected fault classified as the real fault is, side by side with the real one on
//! loopback, through both adapters (`classified`); gRPC's answers and errors through
//! `RetryLayer::grpc` over a real tonic `Channel` (`grpc`).
#![cfg(all(feature = "chaos", feature = "tower", feature = "reqwest-middleware"))]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use http::Extensions;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Next};
use stagger::chaos::{Chaos, ChaosMiddleware};

#[path = "chaos/classified.rs"]
mod classified;
#[cfg(feature = "tonic")]
#[path = "chaos/grpc.rs"]
mod grpc;
#[path = "chaos/picking.rs"]
mod picking;

const fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// An upstream in process that answers every request `200`, with the body `upstream`.
async fn upstream(_: http::Request<String>) -> Result<http::Response<String>, Infallible> {
    Ok(http::Response::new(String::from("upstream")))
}

type Answered<'a> =
    Pin<Box<dyn Future<Output = reqwest_middleware::Result<reqwest::Response>> + Send + 'a>>;

/// The end of a reqwest-middleware chain in place of the network: every request answered `200`.
fn answer_200<'a>(_: reqwest::Request, _: &'a mut Extensions, _: Next<'a>) -> Answered<'a> {
    Box::pin(async { Ok(reqwest::Response::from(http::Response::new("upstream"))) })
}

/// A reqwest-middleware client whose requests meet `chaos` and are then answered `200` in process.
fn middleware_client(chaos: &Chaos) -> ClientWithMiddleware {
    ClientBuilder::new(reqwest::Client::new())
        .with(ChaosMiddleware::new(chaos.clone()))
        .with(answer_200)
        .build()
}
