//! gRPC retries (issue 23, gRPC's retry design A6) through `RetryLayer::grpc` over a real
//! `tonic::transport::Channel`, against a real tonic server on loopback. The messages are written by
//! hand with `prost::Message` (no protoc); the server is a hand-rolled `NamedService` over
//! `tonic::server::Grpc`, which answers each call as its script says and records what it received:
//! when, its headers and its body's bytes.
#![cfg(feature = "tonic")]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::PathAndQuery;
use http_body_util::{BodyExt, Full};
use stagger::adapter::GrpcReplay;
use stagger::classify::{GrpcCode, GrpcMethod};
use stagger::tower::Retry;
use stagger::{Backoff, RetryInfo, RetryLayer, RetryPolicy};
use tonic::body::Body;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;
use tower::{Layer, Service};

#[derive(Clone, PartialEq, prost::Message)]
struct Ping {
    #[prost(string, tag = "1")]
    text: String,
    #[prost(uint32, tag = "2")]
    number: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Pong {
    #[prost(string, tag = "1")]
    text: String,
}

/// `google.rpc.Status`, `google.protobuf.Any`, `google.rpc.RetryInfo` and `google.protobuf.Duration`,
/// as the server writes them into `grpc-status-details-bin`.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfoMessage {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// How the server answers one call.
#[derive(Clone)]
enum Step {
    /// Fails with this status, at once (a Trailers-Only response).
    Fail(Status),
    /// Answers after this long.
    Slow(Duration),
}

/// One call as the server received it.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    headers: http::HeaderMap,
    body: Bytes,
}

#[derive(Default)]
struct Script {
    steps: VecDeque<Step>,
    seen: Vec<Seen>,
}

/// The service `test.Echo`: `Say` (unary) answers as the script says, then `attempt n`; `Collect`
/// (client streaming) reads every message, then answers as the script says; `Stream` (server
/// streaming) sends one message, then fails with `UNAVAILABLE`.
#[derive(Clone, Default)]
struct Echo {
    script: Arc<Mutex<Script>>,
}

impl Echo {
    fn scripted(steps: impl IntoIterator<Item = Step>) -> Self {
        let echo = Self::default();
        echo.script.lock().unwrap().steps = steps.into_iter().collect();
        echo
    }

    fn seen(&self) -> Vec<Seen> {
        self.script.lock().unwrap().seen.clone()
    }

    fn header(&self, name: &str) -> Vec<Option<String>> {
        self.seen()
            .iter()
            .map(|seen| {
                seen.headers
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_owned())
            })
            .collect()
    }
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
            let (parts, body) = request.into_parts();
            let bytes = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let (attempt, step) = {
                let mut script = script.lock().unwrap();
                script.seen.push(Seen {
                    at: Instant::now(),
                    headers: parts.headers.clone(),
                    body: bytes.clone(),
                });
                (script.seen.len(), script.steps.pop_front())
            };
            let path = parts.uri.path().to_owned();
            let request = http::Request::from_parts(parts, Body::new(Full::new(bytes)));
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Pong, Ping>::default());
            let response = if path == "/test.Echo/Stream" {
                let stream = tower::service_fn(move |_: tonic::Request<Ping>| async move {
                    let messages = vec![
                        Ok(Pong {
                            text: format!("attempt {attempt}"),
                        }),
                        Err(Status::unavailable("gone after the first message")),
                    ];
                    Ok::<_, Status>(tonic::Response::new(futures::stream::iter(messages)))
                });
                grpc.server_streaming(stream, request).await
            } else if path == "/test.Echo/Collect" {
                let collect = tower::service_fn(move |request: tonic::Request<_>| {
                    let step = step.clone();
                    async move {
                        let mut messages: tonic::Streaming<Ping> = request.into_inner();
                        let mut count = 0;
                        while messages.message().await?.is_some() {
                            count += 1;
                        }
                        match step {
                            Some(Step::Fail(status)) => Err(status),
                            _ => Ok(tonic::Response::new(Pong {
                                text: format!("{count} messages, attempt {attempt}"),
                            })),
                        }
                    }
                });
                grpc.client_streaming(collect, request).await
            } else {
                let unary = tower::service_fn(move |_: tonic::Request<Ping>| {
                    let step = step.clone();
                    async move {
                        match step {
                            Some(Step::Fail(status)) => Err(status),
                            Some(Step::Slow(delay)) => {
                                tokio::time::sleep(delay).await;
                                Ok(tonic::Response::new(Pong {
                                    text: format!("attempt {attempt}"),
                                }))
                            }
                            None => Ok(tonic::Response::new(Pong {
                                text: format!("attempt {attempt}"),
                            })),
                        }
                    }
                });
                grpc.unary(unary, request).await
            };
            Ok(response)
        })
    }
}

/// Serves `echo` on a loopback port; the server runs until the test's runtime ends.
async fn serve(echo: Echo) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    serve_on(listener, echo);
    addr
}

fn serve_on(listener: tokio::net::TcpListener, echo: Echo) {
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(echo)
            .serve_with_incoming(incoming),
    );
}

fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy()
}

/// A policy whose retries wait 20 ms.
fn quick() -> stagger::RetryPolicyBuilder {
    RetryPolicy::builder().backoff(Backoff::fixed(Duration::from_millis(20)))
}

fn ping() -> Ping {
    Ping {
        text: "hello".to_owned(),
        number: 42,
    }
}

/// One unary call of `path` through a client made the way generated clients are.
async fn call(
    service: Retry<Channel, GrpcReplay>,
    path: &'static str,
    request: tonic::Request<Ping>,
) -> Result<tonic::Response<Pong>, Status> {
    let mut client = tonic::client::Grpc::new(service);
    client
        .ready()
        .await
        .map_err(|e| Status::unknown(e.to_string()))?;
    let codec = ProstCodec::<Ping, Pong>::default();
    client
        .unary(request, PathAndQuery::from_static(path), codec)
        .await
}

async fn say(policy: RetryPolicy, addr: SocketAddr) -> Result<tonic::Response<Pong>, Status> {
    let service = RetryLayer::grpc(policy).layer(channel(addr));
    call(service, "/test.Echo/Say", tonic::Request::new(ping())).await
}

fn unavailable() -> Step {
    Step::Fail(Status::unavailable("try again"))
}

#[tokio::test]
async fn unavailable_twice_then_ok_takes_three_attempts_and_returns_the_reply() {
    let echo = Echo::scripted([unavailable(), unavailable()]);
    let addr = serve(echo.clone()).await;
    let response = say(quick().build().unwrap(), addr).await.unwrap();
    assert_eq!(response.get_ref().text, "attempt 3");
    assert_eq!(echo.seen().len(), 3);
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!(info.attempts(), 3);
    // A6: the client receives the number of retry attempts made.
    let previous = response.metadata().get("grpc-previous-rpc-attempts");
    assert_eq!(previous.unwrap(), "2");
}

#[tokio::test]
async fn a_call_that_runs_out_of_retries_ends_with_the_last_status_and_its_attempt_count() {
    let echo = Echo::scripted([unavailable(), unavailable(), unavailable()]);
    let addr = serve(echo.clone()).await;
    let policy = quick().max_retries(2).build().unwrap();
    let status = say(policy, addr).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(echo.seen().len(), 3);
    let previous = status.metadata().get("grpc-previous-rpc-attempts");
    assert_eq!(previous.unwrap(), "2");
}

#[tokio::test]
async fn a_tonic_request_s_overrides_are_its_own_settings() {
    // No retries for this one call, through a client whose policy retries twice.
    let echo = Echo::scripted([unavailable(), unavailable()]);
    let addr = serve(echo.clone()).await;
    let service = RetryLayer::grpc(quick().build().unwrap()).layer(channel(addr));
    let mut request = tonic::Request::new(ping());
    request
        .extensions_mut()
        .insert(stagger::Overrides::no_retries());
    let status = call(service.clone(), "/test.Echo/Say", request)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(echo.seen().len(), 1);
    // The next call, without, is retried as the policy says.
    let response = call(service, "/test.Echo/Say", tonic::Request::new(ping()))
        .await
        .unwrap();
    assert_eq!(response.get_ref().text, "attempt 3");
}

#[tokio::test]
async fn a_tonic_request_s_max_retries_are_its_own() {
    // Three UNAVAILABLE in a row: with one retry of its own, the call ends after two attempts.
    let echo = Echo::scripted([unavailable(), unavailable(), unavailable()]);
    let addr = serve(echo.clone()).await;
    let service = RetryLayer::grpc(quick().build().unwrap()).layer(channel(addr));
    let one = stagger::Overrides::builder()
        .max_retries(1)
        .build()
        .unwrap();
    let mut request = tonic::Request::new(ping());
    request.extensions_mut().insert(one);
    let status = call(service, "/test.Echo/Say", request).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(echo.seen().len(), 2);
    let previous = status.metadata().get("grpc-previous-rpc-attempts");
    assert_eq!(previous.unwrap(), "1");
}

#[tokio::test]
async fn the_server_sees_grpc_previous_rpc_attempts_on_each_retry() {
    let echo = Echo::scripted([unavailable(), unavailable()]);
    let addr = serve(echo.clone()).await;
    say(quick().build().unwrap(), addr).await.unwrap();
    let previous = echo.header("grpc-previous-rpc-attempts");
    assert_eq!(previous, [None, Some("1".to_owned()), Some("2".to_owned())]);
}

#[tokio::test]
async fn a_unary_request_s_bytes_are_identical_on_every_attempt() {
    let echo = Echo::scripted([unavailable(), unavailable()]);
    let addr = serve(echo.clone()).await;
    say(quick().build().unwrap(), addr).await.unwrap();
    let bodies: Vec<Bytes> = echo.seen().into_iter().map(|seen| seen.body).collect();
    assert_eq!(bodies.len(), 3);
    // A gRPC frame: the compression flag, the length, and the message.
    assert!(bodies[0].len() > 5, "{:?}", bodies[0]);
    assert!(bodies.iter().all(|body| *body == bodies[0]), "{bodies:?}");
}

fn timeout_of(value: &str) -> Duration {
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().unwrap();
    match unit {
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        other => panic!("unit {other}"),
    }
}

#[tokio::test]
async fn grpc_timeout_is_what_is_left_of_the_caller_s_deadline_and_decreases() {
    let echo = Echo::scripted([unavailable(), unavailable()]);
    let addr = serve(echo.clone()).await;
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(100)))
        .build()
        .unwrap();
    let mut request = tonic::Request::new(ping());
    request.set_timeout(Duration::from_secs(5));
    let service = RetryLayer::grpc(policy).layer(channel(addr));
    call(service, "/test.Echo/Say", request).await.unwrap();
    let timeouts: Vec<Duration> = echo
        .header("grpc-timeout")
        .into_iter()
        .map(|value| timeout_of(&value.expect("grpc-timeout on every attempt")))
        .collect();
    println!("grpc-timeout at the server: {timeouts:?}");
    assert_eq!(timeouts.len(), 3);
    assert!(timeouts[0] <= Duration::from_secs(5));
    assert!(
        timeouts[0] > timeouts[1] && timeouts[1] > timeouts[2],
        "{timeouts:?}"
    );
    // Each retry waited 100 ms first.
    assert!(
        timeouts[0] - timeouts[2] >= Duration::from_millis(200),
        "{timeouts:?}"
    );
}

/// Issue 28, item 2: the attempt timeout is the client's limit on a response's head; a server takes
/// `grpc-timeout` as the deadline of the whole call, so only the caller's goes on the wire.
#[tokio::test]
async fn the_attempt_timeout_never_goes_on_the_wire_and_the_caller_s_deadline_does() {
    let echo = Echo::default();
    let addr = serve(echo.clone()).await;
    let policy = quick()
        .attempt_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    say(policy.clone(), addr).await.unwrap();
    let mut request = tonic::Request::new(ping());
    request.set_timeout(Duration::from_millis(700));
    let service = RetryLayer::grpc(policy).layer(channel(addr));
    call(service, "/test.Echo/Say", request).await.unwrap();
    let timeouts: Vec<Option<Duration>> = echo
        .header("grpc-timeout")
        .into_iter()
        .map(|value| value.map(|value| timeout_of(&value)))
        .collect();
    assert_eq!(timeouts, [None, Some(Duration::from_millis(700))]);
}

#[tokio::test]
async fn resource_exhausted_with_pushback_300_ms_is_retried_at_least_300_ms_later() {
    let mut status = Status::resource_exhausted("slow down");
    status
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "300".parse().unwrap());
    let echo = Echo::scripted([Step::Fail(status)]);
    let addr = serve(echo.clone()).await;
    let response = say(quick().build().unwrap(), addr).await.unwrap();
    assert_eq!(response.get_ref().text, "attempt 2");
    let seen = echo.seen();
    let waited = seen[1].at - seen[0].at;
    println!("pushback 300 ms: retried {waited:?} later");
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    // Spread after the floor, over at most the floor again (600 ms), with room for a slow machine.
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test]
async fn a_negative_pushback_is_not_retried() {
    let mut status = Status::unavailable("do not come back");
    status
        .metadata_mut()
        .insert("grpc-retry-pushback-ms", "-1".parse().unwrap());
    let echo = Echo::scripted([Step::Fail(status)]);
    let addr = serve(echo.clone()).await;
    let error = say(quick().build().unwrap(), addr).await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(echo.seen().len(), 1);
}

#[tokio::test]
async fn retry_info_in_grpc_status_details_bin_is_the_retry_s_floor() {
    let retry_info = RetryInfoMessage {
        retry_delay: Some(ProtoDuration {
            seconds: 0,
            nanos: 250_000_000,
        }),
    };
    let details = RpcStatus {
        code: Code::Unavailable as i32,
        message: "busy".to_owned(),
        details: vec![Any {
            type_url: "type.googleapis.com/google.rpc.RetryInfo".to_owned(),
            value: prost::Message::encode_to_vec(&retry_info),
        }],
    };
    let status = Status::with_details(
        Code::Unavailable,
        "busy",
        prost::Message::encode_to_vec(&details).into(),
    );
    let echo = Echo::scripted([Step::Fail(status)]);
    let addr = serve(echo.clone()).await;
    say(quick().build().unwrap(), addr).await.unwrap();
    let seen = echo.seen();
    let waited = seen[1].at - seen[0].at;
    println!("RetryInfo 250 ms: retried {waited:?} later");
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
}

#[tokio::test]
async fn invalid_argument_is_not_retried() {
    let echo = Echo::scripted([Step::Fail(Status::invalid_argument("no"))]);
    let addr = serve(echo.clone()).await;
    let error = say(quick().build().unwrap(), addr).await.unwrap_err();
    assert_eq!(error.code(), Code::InvalidArgument);
    assert_eq!(echo.seen().len(), 1);
}

#[tokio::test]
async fn a_method_opted_out_is_not_retried_on_unavailable() {
    let echo = Echo::scripted([unavailable()]);
    let addr = serve(echo.clone()).await;
    let policy = quick()
        .grpc_method("/test.Echo/Say", GrpcMethod::no_retries())
        .build()
        .unwrap();
    let error = say(policy, addr).await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(echo.seen().len(), 1);
}

#[tokio::test]
async fn codes_of_the_policy_s_own_are_retried() {
    let echo = Echo::scripted([Step::Fail(Status::aborted("conflict"))]);
    let addr = serve(echo.clone()).await;
    let policy = quick()
        .grpc_retry_on(stagger::classify::GrpcCodes::new(&[GrpcCode::Aborted]))
        .build()
        .unwrap();
    let response = say(policy, addr).await.unwrap();
    assert_eq!(response.get_ref().text, "attempt 2");
}

#[tokio::test]
async fn a_server_stream_that_fails_after_its_first_message_is_not_retried() {
    let echo = Echo::default();
    let addr = serve(echo.clone()).await;
    let service = RetryLayer::grpc(quick().build().unwrap()).layer(channel(addr));
    let mut client = tonic::client::Grpc::new(service);
    client.ready().await.unwrap();
    let codec = ProstCodec::<Ping, Pong>::default();
    let path = PathAndQuery::from_static("/test.Echo/Stream");
    let response = client
        .server_streaming(tonic::Request::new(ping()), path, codec)
        .await
        .unwrap();
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    let mut stream = response.into_inner();
    let first = stream.message().await.unwrap().unwrap();
    assert_eq!(first.text, "attempt 1");
    let error = stream.message().await.unwrap_err();
    assert_eq!(error.code(), Code::Unavailable);
    assert_eq!(echo.seen().len(), 1);
    assert_eq!(info.attempts(), 1);
}

/// A client stream of four messages of 100 bytes to `Collect`, through `policy`.
async fn collect(policy: RetryPolicy, addr: SocketAddr) -> Result<tonic::Response<Pong>, Status> {
    let service = RetryLayer::grpc(policy).layer(channel(addr));
    let mut client = tonic::client::Grpc::new(service);
    client
        .ready()
        .await
        .map_err(|e| Status::unknown(e.to_string()))?;
    let message = Ping {
        text: "x".repeat(100),
        number: 7,
    };
    let messages = futures::stream::iter(vec![message; 4]);
    let codec = ProstCodec::<Ping, Pong>::default();
    let path = PathAndQuery::from_static("/test.Echo/Collect");
    client
        .client_streaming(tonic::Request::new(messages), path, codec)
        .await
}

#[tokio::test]
async fn a_client_stream_within_the_replay_buffer_is_sent_again_byte_for_byte() {
    let echo = Echo::scripted([unavailable()]);
    let addr = serve(echo.clone()).await;
    let response = collect(quick().build().unwrap(), addr).await.unwrap();
    assert_eq!(response.get_ref().text, "4 messages, attempt 2");
    let bodies: Vec<Bytes> = echo.seen().into_iter().map(|seen| seen.body).collect();
    assert_eq!(bodies.len(), 2);
    assert!(bodies[0].len() > 400, "{}", bodies[0].len());
    assert_eq!(bodies[0], bodies[1]);
}

#[tokio::test]
async fn a_client_stream_longer_than_the_replay_buffer_is_sent_once() {
    let echo = Echo::scripted([unavailable()]);
    let addr = serve(echo.clone()).await;
    let policy = quick().replay_buffer(256).build().unwrap();
    let status = collect(policy, addr).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(echo.seen().len(), 1);
}

#[tokio::test]
async fn a_hedged_unary_call_is_answered_by_the_hedge() {
    let echo = Echo::scripted([Step::Slow(Duration::from_secs(3))]);
    let addr = serve(echo.clone()).await;
    let policy = quick()
        .hedge_after(Duration::from_millis(100))
        .grpc_method("/test.Echo/Say", GrpcMethod::idempotent())
        .build()
        .unwrap();
    let started = Instant::now();
    let response = say(policy, addr).await.unwrap();
    let took = started.elapsed();
    println!("hedged call answered in {took:?}");
    assert_eq!(response.get_ref().text, "attempt 2");
    assert!(took < Duration::from_secs(2), "{took:?}");
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    assert_eq!(info.hedges(), 1);
    assert_eq!(
        echo.header("grpc-previous-rpc-attempts"),
        [None, Some("1".to_owned())]
    );
}

#[tokio::test]
async fn a_method_not_marked_idempotent_is_not_hedged() {
    let echo = Echo::scripted([Step::Slow(Duration::from_millis(400))]);
    let addr = serve(echo.clone()).await;
    let policy = quick()
        .hedge_after(Duration::from_millis(50))
        .build()
        .unwrap();
    let response = say(policy, addr).await.unwrap();
    assert_eq!(response.get_ref().text, "attempt 1");
    assert_eq!(echo.seen().len(), 1);
}

#[tokio::test]
async fn a_refused_connection_is_retried_until_the_server_is_up() {
    // A port nothing listens on, until the server takes it 300 ms later.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let echo = Echo::default();
    let late = echo.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        serve_on(listener, late);
    });
    let policy = RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::from_millis(50)))
        .max_retries(40)
        .build()
        .unwrap();
    let response = say(policy, addr).await.unwrap();
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    println!(
        "connection refused: answered after {} attempts",
        info.attempts()
    );
    assert!(info.attempts() >= 2, "{info:?}");
    assert_eq!(echo.seen().len(), 1);
}

#[tokio::test]
async fn a_generated_client_s_shape_takes_the_layer_over_a_channel() {
    // What a generated client asks of its transport: `GrpcService<Body>`, cloneable and `Send`.
    fn takes<T>(_: T)
    where
        T: tonic::client::GrpcService<Body> + Clone + Send + 'static,
        T::Future: Send,
    {
    }
    let channel = Endpoint::from_static("http://127.0.0.1:1").connect_lazy();
    let service = tower::ServiceBuilder::new()
        .layer(RetryLayer::grpc(RetryPolicy::default()))
        .service(channel);
    takes(service);
}

/// The rules themselves, in virtual time, over an in-process service of `http` types through
/// `RetryLayer::new`: gRPC's classification is the HTTP classifier's for gRPC's responses, whatever
/// the client.
#[path = "grpc/rules.rs"]
mod rules;

/// What the layer tells the server and the caller, in virtual time, over an in-process service of
/// tonic's bodies through `RetryLayer::grpc`.
#[path = "grpc/wire.rs"]
mod wire;
