//! The breaker under `RetryLayer::grpc`, over a real channel to a real tonic server: a method that
//! fails costs its service's other methods nothing; a caller's own deadline (`grpc-timeout`) never
//! moves the breaker; a held call given up by its caller leaves nothing behind (issue 35).

use std::net::TcpListener as StdListener;

use stagger::{Breaker, HostState};

use super::*;

/// The service `test.Gate`: `Broken` answers `UNAVAILABLE` to every call, as a method whose own
/// dependency is gone; every other method answers at once.
#[derive(Clone, Default)]
struct Gate {
    calls: Arc<Mutex<Vec<String>>>,
}

impl tonic::server::NamedService for Gate {
    const NAME: &'static str = "test.Gate";
}

impl Service<http::Request<Body>> for Gate {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let calls = Arc::clone(&self.calls);
        Box::pin(async move {
            let path = request.uri().path().to_owned();
            calls.lock().unwrap().push(path.clone());
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Pong, Ping>::default());
            let unary = tower::service_fn(move |_: tonic::Request<Ping>| {
                let broken = path == "/test.Gate/Broken";
                async move {
                    if broken {
                        Err(Status::unavailable("its dependency is gone"))
                    } else {
                        Ok(tonic::Response::new(Pong {
                            text: "fine".to_owned(),
                        }))
                    }
                }
            });
            Ok(grpc.unary(unary, request).await)
        })
    }
}

async fn serve_gate(gate: Gate) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(gate)
            .serve_with_incoming(incoming),
    );
    addr
}

#[tokio::test]
async fn a_method_answering_unavailable_costs_nothing_to_its_service_s_other_methods() {
    for breaker in [Breaker::default(), Breaker::fail_fast()] {
        let gate = Gate::default();
        let addr = serve_gate(gate.clone()).await;
        let policy = quick().max_retries(2).breaker(breaker).build().unwrap();
        let service = RetryLayer::grpc(policy.clone()).layer(channel(addr));
        // Broken's calls put its route down (five UNAVAILABLEs in a row)…
        for _ in 0..3 {
            let status = call(
                service.clone(),
                "/test.Gate/Broken",
                tonic::Request::new(ping()),
            )
            .await
            .unwrap_err();
            assert_eq!(status.code(), Code::Unavailable, "{breaker:?}");
        }
        // A client made without an origin (as generated clients are, `Client::new(channel)`) names
        // no host: its calls are the unnamed host's, its methods its routes.
        let host = "";
        assert!(
            matches!(
                policy.route_state(host, "/test.Gate/Broken"),
                HostState::Down { .. }
            ),
            "{breaker:?}: {:?}",
            policy.route_state(host, "/test.Gate/Broken")
        );
        // …and every other method is sent and answered, at once.
        for n in 0..20 {
            let start = Instant::now();
            let response = call(
                service.clone(),
                "/test.Gate/Fine",
                tonic::Request::new(ping()),
            )
            .await
            .unwrap_or_else(|status| panic!("{breaker:?}, call {n}: {status:?}"));
            assert_eq!(response.get_ref().text, "fine");
            assert!(
                start.elapsed() < Duration::from_millis(500),
                "{breaker:?}: held"
            );
        }
        let fine = gate.calls.lock().unwrap();
        assert_eq!(fine.iter().filter(|p| *p == "/test.Gate/Fine").count(), 20);
        assert_eq!(policy.host_state(host), HostState::Up { failures: 0 });
    }
}

#[tokio::test]
async fn a_caller_s_own_deadline_never_moves_the_breaker() {
    // A method that takes 100 ms, called with a deadline of 50 ms, five times.
    let echo = Echo::scripted(std::iter::repeat_n(
        Step::Slow(Duration::from_millis(100)),
        6,
    ));
    let addr = serve(echo.clone()).await;
    let policy = quick().breaker(Breaker::fail_fast()).build().unwrap();
    let service = RetryLayer::grpc(policy.clone()).layer(channel(addr));
    for _ in 0..5 {
        let mut request = tonic::Request::new(ping());
        request.set_timeout(Duration::from_millis(50));
        let status = call(service.clone(), "/test.Echo/Say", request)
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::DeadlineExceeded);
    }
    for host in ["", &addr.to_string()] {
        assert_eq!(policy.host_state(host), HostState::Up { failures: 0 });
    }
    assert_eq!(
        policy.route_state("", "/test.Echo/Say"),
        HostState::Up { failures: 0 }
    );
    // The next call, without a deadline of its own, is sent and answered in its 100 ms.
    let start = Instant::now();
    let response = call(service, "/test.Echo/Say", tonic::Request::new(ping()))
        .await
        .unwrap();
    assert_eq!(response.get_ref().text, "attempt 6");
    assert!(start.elapsed() < Duration::from_millis(500), "held");
}

#[tokio::test]
async fn a_held_call_given_up_by_its_caller_leaves_nothing_behind() {
    // A port nothing listens on: refused connections put the host down; calls are held for it.
    let addr = {
        let listener = StdListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let policy = quick()
        .max_retries(0)
        .breaker(Breaker::hold(Duration::from_secs(10)))
        .build()
        .unwrap();
    let service = RetryLayer::grpc(policy.clone()).layer(channel(addr));
    // A client made with its origin: its calls name their host.
    let origin: http::Uri = format!("http://{addr}").parse().unwrap();
    let named = move |service: Retry<Channel, GrpcReplay>| {
        let origin = origin.clone();
        async move {
            let mut client = tonic::client::Grpc::with_origin(service, origin);
            client
                .ready()
                .await
                .map_err(|e| Status::unknown(e.to_string()))?;
            let codec = ProstCodec::<Ping, Pong>::default();
            let path = PathAndQuery::from_static("/test.Echo/Say");
            client.unary(tonic::Request::new(ping()), path, codec).await
        }
    };
    for _ in 0..5 {
        let status = named(service.clone()).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
    }
    let host = addr.to_string();
    let held: Vec<_> = (0..50)
        .map(|_| {
            let (service, named) = (service.clone(), named.clone());
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_millis(30), named(service)).await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(15)).await;
    match policy.host_state(&host) {
        HostState::Down { held, .. } => assert!(held >= 40, "{held} held"),
        state => panic!("{state:?}"),
    }
    for call in held {
        // Given up, or, for the few that went as a probe, refused again.
        if let Ok(result) = call.await.unwrap() {
            assert_eq!(result.unwrap_err().code(), Code::Unavailable);
        }
    }
    match policy.host_state(&host) {
        HostState::Down { held, .. } => assert_eq!(held, 0, "the given-up calls are held no more"),
        state => panic!("{state:?}"),
    }
}
