//! Which calls get a fault, and when: a rate over 10 000 calls, the same calls for the same seed, the
//! switch taking effect on the next call, a script, a predicate, Envoy's headers, latency and hangs
//! on tokio's paused clock, beneath and above the retry layer. In process, no socket.

use std::convert::Infallible;
use std::time::Duration;

use http::{Method, StatusCode};
use stagger::chaos::{Chaos, ChaosBody, ChaosLayer, ChaosService, Fault, InjectedFault, Rule};
use stagger::{Backoff, RetryInfo, RetryLayer, RetryPolicy};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};

use super::{middleware_client, ms, upstream};

/// The in-process upstream beneath a chaos layer.
fn layered(
    chaos: &Chaos,
) -> ChaosService<
    impl Service<
        http::Request<String>,
        Response = http::Response<String>,
        Error = Infallible,
        Future: Send,
    > + Clone,
> {
    ChaosLayer::new(chaos.clone()).layer(service_fn(upstream))
}

fn get(path: &str) -> http::Request<String> {
    http::Request::get(format!("http://api.example{path}"))
        .body(String::new())
        .unwrap()
}

/// What one call through the tower layer got: the status, or the injected error's kind.
async fn through_the_layer(chaos: &Chaos, request: http::Request<String>) -> String {
    match layered(chaos).oneshot(request).await {
        // The in-process upstream answers with the body `upstream`, an injected answer with none.
        Ok(response) if response.body() == "upstream" => response.status().to_string(),
        Ok(response) => format!("{} injected", response.status()),
        Err(error) => {
            let injected = InjectedFault::find(&*error).expect("only injected errors here");
            format!("{:?}", injected.kind())
        }
    }
}

/// What one call through the middleware got, told the same way.
async fn through_the_middleware(chaos: &Chaos, request: http::Request<String>) -> String {
    let client = middleware_client(chaos);
    let request = reqwest::Request::try_from(request).unwrap();
    match client.execute(request).await {
        // The in-process end of the chain answers with the body `upstream`.
        Ok(response) => {
            let status = response.status();
            match response.text().await.unwrap().as_str() {
                "upstream" => status.to_string(),
                _ => format!("{status} injected"),
            }
        }
        Err(error) => {
            let injected = InjectedFault::find(&error).expect("only injected errors here");
            format!("{:?}", injected.kind())
        }
    }
}

fn unavailable() -> Fault {
    Fault::status(StatusCode::SERVICE_UNAVAILABLE)
}

/// The numbers of the calls, out of `calls`, that a chaos of `rate` seeded `seed` answered through
/// each adapter.
async fn injected_calls(rate: f64, seed: Option<u64>, calls: usize) -> (Vec<usize>, Vec<usize>) {
    let build = || {
        let builder = Chaos::builder().rule(Rule::rate(rate, unavailable()).unwrap());
        match seed {
            Some(seed) => builder.seed(seed).build(),
            None => builder.build(),
        }
    };
    let (layer, middleware) = (build(), build());
    let client = middleware_client(&middleware);
    let mut service = layered(&layer);
    let (mut by_layer, mut by_middleware) = (Vec::new(), Vec::new());
    for call in 0..calls {
        let response = service.ready().await.unwrap().call(get("/")).await.unwrap();
        if response.body().is_empty() {
            by_layer.push(call);
        }
        let response = client.get("http://api.example/").send().await.unwrap();
        if response.status() == StatusCode::SERVICE_UNAVAILABLE {
            by_middleware.push(call);
        }
    }
    assert_eq!(layer.counts().injected(), by_layer.len() as u64);
    assert_eq!(middleware.counts().calls(), calls as u64);
    (by_layer, by_middleware)
}

#[tokio::test]
async fn at_a_rate_the_share_injected_over_10_000_calls_is_within_2_percent_of_it() {
    const CALLS: usize = 10_000;
    for rate in [0.05, 0.1, 0.5] {
        // A seed of the OS's, as a deployment without one draws: any seed holds to the rate.
        for seed in [Some(1), None] {
            let (layer, middleware) = injected_calls(rate, seed, CALLS).await;
            for (adapter, injected) in [("layer", layer.len()), ("middleware", middleware.len())] {
                let share = injected as f64 / CALLS as f64;
                println!("rate {rate}, seed {seed:?}, {adapter}: {injected} of {CALLS} ({share})");
                assert!(
                    (share - rate).abs() <= 0.02,
                    "rate {rate}, {adapter}: {share} injected"
                );
            }
        }
    }
}

#[tokio::test]
async fn the_same_seed_injects_into_the_same_calls_through_either_adapter() {
    let (layer, middleware) = injected_calls(0.2, Some(42), 1_000).await;
    let (again, _) = injected_calls(0.2, Some(42), 1_000).await;
    assert_eq!(layer, again, "the same seed, the same calls");
    assert_eq!(layer, middleware, "the same calls through either adapter");
    let (other, _) = injected_calls(0.2, Some(43), 1_000).await;
    assert_ne!(layer, other, "another seed, other calls");
}

#[tokio::test]
async fn switched_off_at_run_time_the_next_call_is_sent_and_switched_on_the_next_is_injected() {
    let chaos = Chaos::new(Rule::always(unavailable()));
    // The deployment's flag: a clone, somewhere else.
    let flag = chaos.clone();
    let flip = |on: bool| {
        let flag = flag.clone();
        tokio::spawn(async move { flag.set_enabled(on) })
    };
    let mut service = layered(&chaos);
    let client = middleware_client(&chaos);
    let mut seen = Vec::new();
    for on in [true, false, true] {
        flip(on).await.unwrap();
        let response = service.ready().await.unwrap().call(get("/")).await.unwrap();
        seen.push(response.status());
        let response = client.get("http://api.example/").send().await.unwrap();
        seen.push(response.status());
    }
    let (unavailable, ok) = (StatusCode::SERVICE_UNAVAILABLE, StatusCode::OK);
    assert_eq!(
        seen,
        [unavailable, unavailable, ok, ok, unavailable, unavailable]
    );
    // Off, nothing is counted: the calls it was asked about while on.
    assert_eq!((chaos.counts().calls(), chaos.counts().injected()), (4, 4));
}

#[tokio::test]
async fn a_script_answers_its_nth_call_with_its_nth_step_and_sends_the_calls_after_it() {
    let script = || {
        Chaos::new(Rule::script([
            Some(unavailable()),
            None,
            Some(Fault::refused()),
            Some(Fault::reset()),
        ]))
    };
    let expected = [
        "503 Service Unavailable injected",
        "200 OK",
        "ConnectionRefused",
        "ConnectionReset",
        "200 OK",
        "200 OK",
    ];
    let (layer, middleware) = (script(), script());
    for expected in expected {
        assert_eq!(through_the_layer(&layer, get("/")).await, expected);
        assert_eq!(
            through_the_middleware(&middleware, get("/")).await,
            expected
        );
    }
    let counts = layer.counts();
    assert_eq!((counts.calls(), counts.injected()), (6, 3));
    assert_eq!((counts.answers(), counts.errors()), (1, 2));
}

#[tokio::test]
async fn a_predicate_picks_requests_by_method_path_and_header_and_its_script_counts_only_them() {
    let chaos = || {
        Chaos::builder()
            .rule(
                Rule::script([Fault::refused(), Fault::refused()])
                    .when(|r| r.method() == Method::POST && r.path() == Some("/payments")),
            )
            .rule(Rule::always(unavailable()).when(|r| {
                let headers = r.headers();
                headers
                    .and_then(|h| h.get("x-chaos"))
                    .is_some_and(|v| v == "on")
            }))
            .build()
    };
    let post = |path: &str| {
        http::Request::post(format!("http://api.example{path}"))
            .body(String::new())
            .unwrap()
    };
    let flagged = || {
        let mut request = get("/items");
        request
            .headers_mut()
            .insert("x-chaos", "on".parse().unwrap());
        request
    };
    let (layer, middleware) = (chaos(), chaos());
    let calls = [
        (get("/payments"), "200 OK"),
        (post("/items"), "200 OK"),
        (post("/payments"), "ConnectionRefused"),
        (flagged(), "503 Service Unavailable injected"),
        (get("/items"), "200 OK"),
        (post("/payments"), "ConnectionRefused"),
        (post("/payments"), "200 OK"),
    ];
    for (request, expected) in calls {
        let copy = || {
            let mut copy = http::Request::new(String::new());
            *copy.method_mut() = request.method().clone();
            *copy.uri_mut() = request.uri().clone();
            *copy.headers_mut() = request.headers().clone();
            copy
        };
        assert_eq!(through_the_layer(&layer, copy()).await, expected);
        assert_eq!(through_the_middleware(&middleware, copy()).await, expected);
    }
    assert_eq!(layer.counts().calls(), 7);
    assert_eq!(layer.counts().injected(), 3);
}

#[tokio::test(start_paused = true)]
async fn envoy_s_headers_ask_for_an_abort_a_delay_or_both() {
    let chaos = Chaos::new(Rule::envoy_headers());
    let with = |headers: &[(&'static str, &'static str)]| {
        let mut request = get("/");
        for (name, value) in headers {
            request.headers_mut().insert(*name, value.parse().unwrap());
        }
        request
    };
    type Headers = &'static [(&'static str, &'static str)];
    let cases: [(Headers, &str, Duration); 5] = [
        (&[], "200 OK", Duration::ZERO),
        (
            &[("x-envoy-fault-abort-request", "503")],
            "503 Service Unavailable injected",
            Duration::ZERO,
        ),
        (
            &[("x-envoy-fault-delay-request", "1500")],
            "200 OK",
            ms(1500),
        ),
        (
            &[
                ("x-envoy-fault-abort-request", "429"),
                ("x-envoy-fault-delay-request", "200"),
            ],
            "429 Too Many Requests injected",
            ms(200),
        ),
        (
            &[
                ("x-envoy-fault-abort-request", "503"),
                ("x-envoy-fault-abort-request-percentage", "0"),
            ],
            "200 OK",
            Duration::ZERO,
        ),
    ];
    for (headers, expected, delay) in cases {
        let start = Instant::now();
        assert_eq!(through_the_layer(&chaos, with(headers)).await, expected);
        assert_eq!(start.elapsed(), delay, "{headers:?}");
        let start = Instant::now();
        assert_eq!(
            through_the_middleware(&chaos, with(headers)).await,
            expected
        );
        assert_eq!(start.elapsed(), delay, "{headers:?}");
    }
    // A gRPC code, for a gRPC client.
    let response = layered(&chaos)
        .oneshot(with(&[("x-envoy-fault-abort-grpc-request", "14")]))
        .await
        .unwrap();
    assert_eq!(response.headers()["grpc-status"], "14");
}

#[tokio::test(start_paused = true)]
async fn latency_sends_the_real_call_late_a_fault_after_a_delay_comes_late_and_a_hang_never_ends() {
    let cases = [
        (Fault::latency(ms(250)), "200 OK", ms(250)),
        (
            unavailable().after(Duration::from_secs(3)),
            "503 Service Unavailable injected",
            Duration::from_secs(3),
        ),
        (Fault::reset().after(ms(40)), "ConnectionReset", ms(40)),
    ];
    for (fault, expected, delay) in cases {
        let chaos = Chaos::new(Rule::always(fault));
        let start = Instant::now();
        assert_eq!(through_the_layer(&chaos, get("/")).await, expected);
        assert_eq!(start.elapsed(), delay);
        let start = Instant::now();
        assert_eq!(through_the_middleware(&chaos, get("/")).await, expected);
        assert_eq!(start.elapsed(), delay);
        assert_eq!(chaos.counts().delayed(), 2);
    }
    let chaos = Chaos::new(Rule::always(Fault::hang()));
    let hung = tokio::time::timeout(
        Duration::from_secs(3600),
        through_the_layer(&chaos, get("/")),
    );
    assert!(hung.await.is_err(), "a hang ends only at a time limit");
    let hung = tokio::time::timeout(
        Duration::from_secs(3600),
        through_the_middleware(&chaos, get("/")),
    );
    assert!(hung.await.is_err());
    assert_eq!(chaos.counts().hangs(), 2);
}

#[tokio::test(start_paused = true)]
async fn beneath_the_retry_layer_each_attempt_meets_the_rules_and_above_it_the_caller_does() {
    let policy = || {
        RetryPolicy::builder()
            .backoff(Backoff::fixed(ms(10)))
            .build()
            .unwrap()
    };
    // Beneath: two attempts answered 503, the third reaches the upstream.
    let chaos = Chaos::new(Rule::script(vec![unavailable(); 2]));
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy()))
        .layer(ChaosLayer::new(chaos.clone()))
        .service_fn(upstream);
    let response = client.oneshot(get("/")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response
            .extensions()
            .get::<RetryInfo>()
            .unwrap()
            .clone()
            .attempts(),
        3
    );
    assert_eq!(chaos.counts().calls(), 3);

    // Above: the caller meets the refusal; the retry layer beneath never saw the call.
    let chaos = Chaos::new(Rule::always(Fault::refused()));
    let client = ServiceBuilder::new()
        .layer(ChaosLayer::new(chaos.clone()))
        .layer(RetryLayer::new(policy()))
        .service_fn(upstream);
    let error = client.oneshot(get("/")).await.unwrap_err();
    assert!(InjectedFault::find(&*error).is_some());
    assert!(error.downcast_ref::<stagger::Error<Infallible>>().is_none());
    assert_eq!(chaos.counts().errors(), 1);
}

#[tokio::test]
async fn a_service_whose_body_the_layer_cannot_make_takes_it_through_chaos_body() {
    /// A body type the chaos layer knows nothing of, as hyper's `Incoming` is.
    struct Opaque;
    impl http_body::Body for Opaque {
        type Data = bytes::Bytes;
        type Error = Infallible;
        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Infallible>>> {
            std::task::Poll::Ready(None)
        }
    }
    let chaos = Chaos::new(Rule::script([Fault::answer(
        http::Response::builder().status(503).body("down").unwrap(),
    )]));
    let client = ServiceBuilder::new()
        .layer(ChaosLayer::new(chaos))
        .map_response(|response: http::Response<Opaque>| response.map(ChaosBody::new))
        .service_fn(|_: http::Request<String>| async {
            Ok::<_, Infallible>(http::Response::new(Opaque))
        });
    let injected = client.clone().oneshot(get("/")).await.unwrap();
    assert_eq!(injected.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(injected.body().is_injected());
    let body = http_body_util::BodyExt::collect(injected.into_body())
        .await
        .unwrap();
    assert_eq!(body.to_bytes(), "down");
    let passed = client.oneshot(get("/")).await.unwrap();
    assert!(matches!(passed.into_body().into_inner(), Some(Opaque)));
}
