//! A service whose request body is not `Clone` (a `BoxBody`, as tonic's `Body` and hyper's `Incoming`
//! are not) under `RetryLayer::new`, handed to code that takes a `tower::Service`, as tonic's clients
//! and axum's `route_service` do.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use http_body_util::combinators::BoxBody;
use stagger::{RetryLayer, RetryPolicy};
use tower::ServiceBuilder;

type Body = BoxBody<Bytes, Infallible>;

fn serve<S: tower::Service<http::Request<Body>>>(_service: S) {}

fn main() {
    let service = tower::service_fn(|_request: http::Request<Body>| async {
        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::new())))
    });
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(RetryPolicy::default()))
        .service(service);
    serve(client);
}
