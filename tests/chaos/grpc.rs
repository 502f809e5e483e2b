//! gRPC's faults through `RetryLayer::grpc` over a real tonic `Channel`, side by side with a real tonic
//! server's: `UNAVAILABLE` with `grpc-retry-pushback-ms`, `RESOURCE_EXHAUSTED` without a delay, a
//! refused connection and a server that never answers. The retries must make the same of both, and
//! the tonic client must end with the same code.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::PathAndQuery;
use stagger::chaos::{Chaos, ChaosLayer, Fault, Rule};
use stagger::classify::{GrpcCode, GrpcMethod};
use stagger::{Backoff, Reason, RetryEvent, RetryLayer, RetryPolicy};
use tonic::body::Body;
use tonic::transport::Endpoint;
use tonic::{Code, Status};
use tonic_prost::ProstCodec;
use tower::{Service, ServiceBuilder};

use super::ms;

#[derive(Clone, PartialEq, prost::Message)]
struct Ping {
    #[prost(string, tag = "1")]
    text: String,
}

/// A unary service, `/test.Echo/Say`, that fails with each status of its script in turn, then
/// answers.
#[derive(Clone, Default)]
struct Echo {
    script: Arc<Mutex<Vec<Status>>>,
}

impl tonic::server::NamedService for Echo {
    const NAME: &'static str = "test.Echo";
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl Service<http::Request<Body>> for Echo {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let script = Arc::clone(&self.script);
        Box::pin(async move {
            let unary = tower::service_fn(move |_: tonic::Request<Ping>| {
                let step = {
                    let mut script = script.lock().unwrap();
                    (!script.is_empty()).then(|| script.remove(0))
                };
                async move {
                    match step {
                        Some(status) => Err(status),
                        None => Ok(tonic::Response::new(Ping {
                            text: "answered".into(),
                        })),
                    }
                }
            });
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Ping, Ping>::default());
            Ok(grpc.unary(unary, request).await)
        })
    }
}

async fn serve(echo: Echo) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(echo)
            .serve_with_incoming(incoming),
    );
    addr
}

/// What the retries made of a call, and the code the tonic client ended with.
#[derive(Debug, PartialEq)]
struct Made {
    /// Each retry's reason and the server's delay it honoured.
    retries: Vec<(Reason, Option<Duration>)>,
    code: Code,
}

/// One call to `addr` through `RetryLayer::grpc`, with `chaos` beneath it: one retry at most, 10 ms
/// apart, each attempt 300 ms at most; the method marked idempotent or not.
async fn say_marked(addr: SocketAddr, chaos: &Chaos, idempotent: bool) -> Made {
    let retries = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&retries);
    let mut policy = RetryPolicy::builder();
    if idempotent {
        policy = policy.grpc_method("/test.Echo/Say", GrpcMethod::idempotent());
    }
    let policy = policy
        .backoff(Backoff::fixed(ms(10)))
        .max_retries(1)
        .attempt_timeout(ms(300))
        .breaker(None)
        .on_retry(move |e: &RetryEvent| seen.lock().unwrap().push((e.reason, e.retry_after)))
        .build()
        .unwrap();
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let service = ServiceBuilder::new()
        .layer(RetryLayer::grpc(policy))
        .layer(ChaosLayer::new(chaos.clone()))
        .service(channel);
    let mut client = tonic::client::Grpc::new(service);
    let code = match client.ready().await {
        Err(error) => panic!("not ready: {error}"),
        Ok(()) => {
            let codec = ProstCodec::<Ping, Ping>::default();
            let path = PathAndQuery::from_static("/test.Echo/Say");
            let request = tonic::Request::new(Ping { text: "hi".into() });
            match client.unary(request, path, codec).await {
                Ok(_) => Code::Ok,
                Err(status) => status.code(),
            }
        }
    };
    let retries = retries.lock().unwrap().clone();
    Made { retries, code }
}

async fn say(addr: SocketAddr, chaos: &Chaos) -> Made {
    say_marked(addr, chaos, false).await
}

/// What the retries make of a real server failing with `status` once, and of `fault` injected
/// once over a healthy server: the same.
async fn side_by_side(status: Status, fault: Fault) -> Made {
    let real = serve(Echo {
        script: Arc::new(Mutex::new(vec![status])),
    })
    .await;
    let healthy = serve(Echo::default()).await;
    let off = Chaos::builder().enabled(false).build();
    let real = say(real, &off).await;
    let injected = say(healthy, &Chaos::new(Rule::script([fault]))).await;
    assert_eq!(real, injected);
    real
}

#[tokio::test]
async fn unavailable_with_pushback_is_retried_after_it_as_a_server_s() {
    let mut status = Status::unavailable("try later");
    status
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "200".parse().unwrap());
    let fault = Fault::grpc_pushback(GrpcCode::Unavailable, ms(200));
    let made = side_by_side(status, fault).await;
    let unavailable = Reason::Grpc(GrpcCode::Unavailable);
    assert_eq!(made.retries, [(unavailable, Some(ms(200)))]);
    assert_eq!(made.code, Code::Ok);
}

#[tokio::test]
async fn resource_exhausted_without_a_delay_is_not_retried_as_a_server_s() {
    let fault = Fault::grpc(GrpcCode::ResourceExhausted);
    let made = side_by_side(Status::resource_exhausted("quota"), fault).await;
    assert_eq!(made.retries, []);
    assert_eq!(made.code, Code::ResourceExhausted);
}

#[tokio::test]
async fn a_refusal_is_retried_as_a_channel_s_and_the_client_sees_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = listener.local_addr().unwrap();
    drop(listener);
    let healthy = serve(Echo::default()).await;
    let off = Chaos::builder().enabled(false).build();
    let real = say(refused, &off).await;
    // Both attempts refused, so that the client sees the error itself.
    let injected = say(healthy, &Chaos::new(Rule::always(Fault::refused()))).await;
    assert_eq!(real, injected);
    assert_eq!(real.retries, [(Reason::Connect, None)]);
    assert_eq!(real.code, Code::Unavailable);
}

#[tokio::test]
async fn a_server_that_never_answers_and_a_hang_time_out_alike_retried_only_if_idempotent() {
    // Accepts connections and never says a word, not even HTTP/2's preface.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            held.push(listener.accept().await.unwrap());
        }
    });
    let healthy = serve(Echo::default()).await;
    let off = Chaos::builder().enabled(false).build();
    let hang = Chaos::new(Rule::always(Fault::hang()));
    let real = say(silent, &off).await;
    assert_eq!(real, say(healthy, &hang).await);
    // A call is a POST that gRPC does not resend after a timeout: the server may have acted.
    assert_eq!(real.retries, []);
    assert_eq!(real.code, Code::DeadlineExceeded);
    // Unless its method is marked idempotent.
    let real = say_marked(silent, &off, true).await;
    assert_eq!(real, say_marked(healthy, &hang, true).await);
    assert_eq!(real.retries, [(Reason::Timeout, None)]);
}

#[tokio::test]
async fn a_reset_mid_call_is_a_closed_connection_retried_only_for_an_idempotent_method() {
    // An HTTP/2 server whose connection is reset (`SO_LINGER` 0, then dropped) as soon as a call
    // arrives on it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let resetting = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            stream.set_zero_linger().unwrap();
            let (called, reset) = tokio::sync::oneshot::channel::<()>();
            let called = Arc::new(Mutex::new(Some(called)));
            let service = hyper::service::service_fn(move |_: http::Request<_>| {
                if let Some(called) = called.lock().unwrap().take() {
                    let _ = called.send(());
                }
                std::future::pending::<Result<http::Response<String>, Infallible>>()
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let executor = hyper_util::rt::TokioExecutor::new();
            let connection =
                hyper::server::conn::http2::Builder::new(executor).serve_connection(io, service);
            tokio::spawn(async move {
                tokio::select! {
                    _ = connection => {}
                    _ = reset => {} // dropping the connection resets it
                }
            });
        }
    });
    let healthy = serve(Echo::default()).await;
    let off = Chaos::builder().enabled(false).build();
    let reset = Chaos::new(Rule::always(Fault::reset()));
    let real = say(resetting, &off).await;
    assert_eq!(real, say(healthy, &reset).await);
    assert_eq!(real.retries, []);
    // tonic finds no status in a transport's error.
    assert_eq!(real.code, Code::Unknown);
    let real = say_marked(resetting, &off, true).await;
    assert_eq!(real, say_marked(healthy, &reset, true).await);
    assert_eq!(real.retries, [(Reason::ConnectionClosed, None)]);
}
