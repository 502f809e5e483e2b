//! gRPC retries for a tonic client: a tonic server and a client over `RetryLayer::grpc` in one program,
//! printing what each call's retries did.
//!
//! ```text
//! cargo run --example grpc --features tonic
//! ```
//!
//! The server, `demo.Flaky`, answers from a script: `Get` fails with `UNAVAILABLE` twice, then
//! answers; `Reserve` says `RESOURCE_EXHAUSTED` with `grpc-retry-pushback-ms: 250` once; `Charge`
//! fails with `UNAVAILABLE`, but is opted out of retries (it might charge twice); `Find` says
//! `INVALID_ARGUMENT`; `Slow` takes 2 s on its first call, and is hedged after 100 ms. The messages are
//! written by hand with `prost::Message`, so no `protoc` is needed; a real client would use the
//! generated `...Client::new(channel)` with the same `channel`. Each call has a deadline of 2 s,
//! which the server sees shrink as the retries go.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http::uri::PathAndQuery;
use stagger::classify::GrpcMethod;
use stagger::{RetryInfo, RetryLayer, RetryPolicy};
use tonic::body::Body;
use tonic::{Code, Status};
use tonic_prost::ProstCodec;
use tower::{Service, ServiceBuilder};

#[derive(Clone, PartialEq, prost::Message)]
struct Request {
    #[prost(string, tag = "1")]
    item: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Reply {
    #[prost(string, tag = "1")]
    text: String,
}

/// The server: how many times each method was called, to follow its script.
#[derive(Clone, Default)]
struct Flaky {
    calls: Arc<Mutex<HashMap<String, u32>>>,
}

impl tonic::server::NamedService for Flaky {
    const NAME: &'static str = "demo.Flaky";
}

/// The `n`-th call (from 1) of `method`: how long it takes, then its answer.
fn script(method: &str, n: u32) -> (Duration, Result<Reply, Status>) {
    let ok = |text: String| Ok(Reply { text });
    match (method, n) {
        ("Get", 1 | 2) => (Duration::ZERO, Err(Status::unavailable("restarting"))),
        ("Reserve", 1) => {
            let mut status = Status::resource_exhausted("quota spent");
            let pushback = "250".parse().expect("ASCII");
            status
                .metadata_mut()
                .insert("grpc-retry-pushback-ms", pushback);
            (Duration::ZERO, Err(status))
        }
        ("Charge", _) => (Duration::ZERO, Err(Status::unavailable("gateway down"))),
        ("Find", _) => (
            Duration::ZERO,
            Err(Status::invalid_argument("no such item")),
        ),
        ("Slow", 1) => (Duration::from_secs(2), ok(format!("{method}: call {n}"))),
        _ => (Duration::ZERO, ok(format!("{method}: call {n}"))),
    }
}

impl Service<http::Request<Body>> for Flaky {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let method = request
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_owned();
        let n = {
            let mut calls = self.calls.lock().expect("not poisoned");
            let n = calls.entry(method.clone()).or_default();
            *n += 1;
            *n
        };
        let previous = request.headers().get("grpc-previous-rpc-attempts").cloned();
        let timeout = request.headers().get("grpc-timeout").cloned();
        println!(
            "  server: {method} call {n} (grpc-previous-rpc-attempts {previous:?}, grpc-timeout {timeout:?})"
        );
        Box::pin(async move {
            let (delay, answer) = script(&method, n);
            let handler = tower::service_fn(move |_: tonic::Request<Request>| {
                let answer = answer.clone();
                async move {
                    tokio::time::sleep(delay).await;
                    answer.map(tonic::Response::new)
                }
            });
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Reply, Request>::default());
            Ok(grpc.unary(handler, request).await)
        })
    }
}

async fn serve() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(Flaky::default())
            .serve_with_incoming(incoming),
    );
    addr
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = serve().await;

    let policy = RetryPolicy::builder()
        .hedge_after(Duration::from_millis(100))
        .grpc_method("/demo.Flaky/Charge", GrpcMethod::no_retries())
        .grpc_method("/demo.Flaky/Slow", GrpcMethod::idempotent())
        .build()?;
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))?.connect_lazy();
    // The one line: any generated client takes `channel` as it is.
    let channel = ServiceBuilder::new()
        .layer(RetryLayer::grpc(policy))
        .service(channel);

    for method in ["Get", "Reserve", "Charge", "Find", "Slow"] {
        println!("{method}:");
        let mut client = tonic::client::Grpc::new(channel.clone());
        client.ready().await?;
        let path = PathAndQuery::try_from(format!("/demo.Flaky/{method}"))?;
        let mut request = tonic::Request::new(Request {
            item: "book".to_owned(),
        });
        // The caller's deadline is the call's: it bounds the retries, and goes to the server as
        // `grpc-timeout`, what is left of it at each attempt.
        request.set_timeout(Duration::from_secs(2));
        let started = Instant::now();
        let result = client
            .unary(request, path, ProstCodec::<Request, Reply>::default())
            .await;
        let took = started.elapsed();
        match result {
            Ok(response) => {
                // A call answered at its first attempt carries no RetryInfo.
                let info = response.extensions().get::<RetryInfo>().cloned();
                let info = info.unwrap_or(RetryInfo::FIRST_SUCCESS);
                let (attempts, hedges) = (info.attempts(), info.hedges());
                println!(
                    "  client: OK {:?} after {attempts} attempt(s), {hedges} hedge(s), in {took:.0?}",
                    response.get_ref().text
                );
            }
            Err(status) => {
                // A failed call is a `tonic::Status`, which keeps no extensions: the count of
                // retries comes as gRPC's own metadata.
                let previous = status
                    .metadata()
                    .get("grpc-previous-rpc-attempts")
                    .and_then(|v| v.to_str().ok()?.parse::<u32>().ok())
                    .unwrap_or(0);
                let code: Code = status.code();
                println!(
                    "  client: {code:?} ({}) after {} attempt(s), in {took:.0?}",
                    status.message(),
                    previous + 1
                );
            }
        }
    }
    Ok(())
}
