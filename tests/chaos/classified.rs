//! Each fault the kit injects, side by side with the real fault on loopback, through both adapters a
//! reqwest user has: what the retries made of the two must be the same (the reason of each retry, the
//! attempts, why they stopped), for a GET and for a POST without an `Idempotency-Key` (which only a
//! failure the server surely did not act on may resend).
//!
//! The real faults: a port nothing listens on (refused), a server that reads the request and resets
//! the connection (`SO_LINGER` 0), one that reads it and never answers (a hang, ended by the attempt
//! timeout), one that answers `503`, `429 Retry-After: 2`, or answers late. Both calls go through the
//! same stack, the real one with its chaos switched off; real time, as sockets need.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Method, StatusCode};
use reqwest_middleware::ClientBuilder;
use stagger::chaos::{Chaos, ChaosLayer, ChaosMiddleware, Fault, InjectedFault, Rule};
use stagger::classify::DefaultClassifier;
use stagger::{Backoff, Reason, RetryEvent, RetryInfo, RetryLayer, RetryMiddleware, RetryPolicy};
use stagger::{RetryReport, StopReason};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tower::{ServiceBuilder, ServiceExt};

use super::ms;

/// What the retries made of a call.
#[derive(Debug, Clone, PartialEq)]
struct Made {
    /// Why each retry was taken.
    retried_for: Vec<Reason>,
    attempts: u32,
    stopped: Option<StopReason>,
    /// The final status, if the call ended on an answer.
    status: Option<StatusCode>,
}

/// Two retries 5 ms apart, an attempt timeout of 300 ms, and neither the budget nor the breaker:
/// each call is judged on its own. Each retry's reason goes to `reasons`.
fn policy(reasons: &Arc<Mutex<Vec<Reason>>>) -> RetryPolicy {
    let reasons = Arc::clone(reasons);
    RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(5)))
        .max_retries(2)
        .attempt_timeout(ms(300))
        .max_retry_after(Duration::from_secs(1))
        .budget(None)
        .breaker(None)
        .on_retry(move |event: &RetryEvent| reasons.lock().unwrap().push(event.reason))
        .build()
        .unwrap()
}

fn client() -> reqwest::Client {
    // A proxy from the environment must not stand between the client and the loopback server.
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// One call through `RetryMiddleware`, with `chaos` beneath it.
async fn through_the_middleware(method: Method, url: &str, chaos: &Chaos) -> Made {
    let reasons = Arc::default();
    let client = ClientBuilder::new(client())
        .with(RetryMiddleware::new(policy(&reasons)))
        .with(ChaosMiddleware::new(chaos.clone()))
        .build();
    let report = RetryReport::new();
    let result = client
        .request(method, url)
        .with_extension(report.clone())
        .send()
        .await;
    let info = report.get().unwrap();
    made(&reasons, info, result.as_ref().ok().map(|r| r.status()))
}

/// One call through `RetryLayer` over `reqwest::Client`, with `chaos` beneath it.
async fn through_the_layer(method: Method, url: &str, chaos: &Chaos) -> Made {
    let reasons = Arc::default();
    let client = ServiceBuilder::new()
        .layer(RetryLayer::new(policy(&reasons)))
        .layer(ChaosLayer::new(chaos.clone()))
        .service(client());
    let request = reqwest::Request::new(method, url.parse().unwrap());
    match client.oneshot(request).await {
        Ok(response) => {
            let info = response.extensions().get::<RetryInfo>().unwrap().clone();
            made(&reasons, info, Some(response.status()))
        }
        Err(error) => made(&reasons, error.info(), None),
    }
}

fn made(reasons: &Mutex<Vec<Reason>>, info: RetryInfo, status: Option<StatusCode>) -> Made {
    Made {
        retried_for: reasons.lock().unwrap().clone(),
        attempts: info.attempts(),
        stopped: info.stop_reason(),
        status,
    }
}

/// What the retries make of the real fault at `real` and of `fault` injected over a healthy server,
/// for a GET and a POST through both adapters: the same, each time. The real call's chaos is off.
async fn side_by_side(real: &str, fault: Fault) -> [Made; 2] {
    let healthy = serve(|stream| answer(stream, "200 OK", "")).await;
    let healthy = format!("http://{healthy}/");
    let off = Chaos::builder().enabled(false).build();
    let injected = Chaos::new(Rule::always(fault.clone()));
    let mut made = Vec::new();
    for method in [Method::GET, Method::POST] {
        let real_made = through_the_middleware(method.clone(), real, &off).await;
        let injected_made = through_the_middleware(method.clone(), &healthy, &injected).await;
        assert_eq!(
            real_made, injected_made,
            "{fault} through the middleware, {method}"
        );
        let real_made = through_the_layer(method.clone(), real, &off).await;
        let injected_made = through_the_layer(method.clone(), &healthy, &injected).await;
        assert_eq!(
            real_made, injected_made,
            "{fault} through the layer, {method}"
        );
        made.push(real_made);
    }
    assert_eq!(off.counts().calls(), 0);
    made.try_into().unwrap()
}

/// Serves every connection to a fresh loopback port with `handle`.
async fn serve<F, Fut>(handle: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = std::io::Result<()>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(handle(stream));
        }
    });
    addr
}

/// Reads one request's head (the requests here have no body).
async fn read_request(stream: &mut TcpStream) -> std::io::Result<()> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0];
        if stream.read(&mut byte).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(byte[0]);
    }
    Ok(())
}

/// Answers every request on the connection with `status` and `headers` (each ending in `\r\n`).
async fn answer(mut stream: TcpStream, status: &str, headers: &str) -> std::io::Result<()> {
    loop {
        read_request(&mut stream).await?;
        let response = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n{headers}\r\n");
        stream.write_all(response.as_bytes()).await?;
    }
}

#[tokio::test]
async fn a_refusal_is_a_connect_error_safe_to_retry_for_a_post_too() {
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = format!("http://{}/", listener.local_addr().unwrap());
    drop(listener);
    let [get, post] = side_by_side(&refused, Fault::refused()).await;
    assert_eq!(get.retried_for, [Reason::Connect, Reason::Connect]);
    assert_eq!(post, get);
    assert_eq!(get.stopped, Some(StopReason::MaxRetries));

    // And the classifier's own verdict on the two errors, the real one reqwest's.
    let real = client().get(&refused).send().await.unwrap_err();
    let injected = std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "as the chaos layer makes it",
    );
    assert_eq!(
        DefaultClassifier::error(&real),
        DefaultClassifier::error(&injected)
    );
}

#[tokio::test]
async fn a_reset_is_a_closed_connection_retried_for_a_get_and_not_for_a_post() {
    // Reads the request, then resets the connection: SO_LINGER 0 sends a RST, not a FIN.
    let reset = serve(|mut stream| async move {
        read_request(&mut stream).await?;
        stream.set_zero_linger()?;
        drop(stream);
        Ok(())
    })
    .await;
    let [get, post] = side_by_side(&format!("http://{reset}/"), Fault::reset()).await;
    let closed = Reason::ConnectionClosed;
    assert_eq!(get.retried_for, [closed, closed]);
    assert_eq!(
        (post.attempts, post.stopped),
        (1, Some(StopReason::NotIdempotent))
    );
}

#[tokio::test]
async fn a_hang_ends_at_the_attempt_timeout_retried_for_a_get_and_not_for_a_post() {
    // Reads the request and never answers.
    let hung = serve(|mut stream| async move {
        read_request(&mut stream).await?;
        std::future::pending::<()>().await;
        drop(stream);
        Ok(())
    })
    .await;
    let [get, post] = side_by_side(&format!("http://{hung}/"), Fault::hang()).await;
    assert_eq!(get.retried_for, [Reason::Timeout, Reason::Timeout]);
    assert_eq!(
        (post.attempts, post.stopped),
        (1, Some(StopReason::NotIdempotent))
    );
}

#[tokio::test]
async fn an_injected_503_is_retried_as_a_server_s_and_handed_back_intact() {
    let unavailable = serve(|stream| answer(stream, "503 Service Unavailable", "")).await;
    let fault = Fault::status(StatusCode::SERVICE_UNAVAILABLE);
    let [get, post] = side_by_side(&format!("http://{unavailable}/"), fault).await;
    let status = Reason::Status(StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(get.retried_for, [status, status]);
    assert_eq!(get.status, Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(post, get, "a 503 says the server did not act");
}

#[tokio::test]
async fn an_injected_retry_after_is_read_as_a_server_s() {
    // Retry-After: 2, past the policy's max_retry_after of 1 s: handed back at once, for both.
    let throttled =
        serve(|stream| answer(stream, "429 Too Many Requests", "retry-after: 2\r\n")).await;
    let fault = Fault::retry_after(StatusCode::TOO_MANY_REQUESTS, Duration::from_secs(2));
    let [get, _] = side_by_side(&format!("http://{throttled}/"), fault).await;
    assert_eq!(
        (get.attempts, get.stopped),
        (1, Some(StopReason::RetryAfterTooLong))
    );
    assert_eq!(get.status, Some(StatusCode::TOO_MANY_REQUESTS));
}

#[tokio::test]
async fn latency_past_the_attempt_timeout_is_a_timeout_as_a_slow_server_s() {
    // Answers 200 after 400 ms, past the 300 ms attempt timeout.
    let slow = serve(|mut stream| async move {
        read_request(&mut stream).await?;
        tokio::time::sleep(ms(400)).await;
        answer(stream, "200 OK", "").await
    })
    .await;
    let [get, post] = side_by_side(&format!("http://{slow}/"), Fault::latency(ms(400))).await;
    assert_eq!(get.retried_for, [Reason::Timeout, Reason::Timeout]);
    assert_eq!(
        (post.attempts, post.stopped),
        (1, Some(StopReason::NotIdempotent))
    );
}

#[tokio::test]
async fn an_injected_error_is_marked_and_a_real_one_is_not() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused = format!("http://{}/", listener.local_addr().unwrap());
    drop(listener);
    let off = Chaos::builder().enabled(false).build();
    let on = Chaos::new(Rule::always(Fault::refused()));
    let via = |chaos: &Chaos| {
        ClientBuilder::new(client())
            .with(ChaosMiddleware::new(chaos.clone()))
            .build()
    };
    let real = via(&off).get(&refused).send().await.unwrap_err();
    assert!(real.is_connect(), "the real error is reqwest's, as it came");
    assert!(InjectedFault::find(&real).is_none());
    let injected = via(&on).get(&refused).send().await.unwrap_err();
    let mark = InjectedFault::find(&injected).unwrap();
    assert_eq!(mark.kind(), std::io::ErrorKind::ConnectionRefused);
    assert_eq!(
        injected.to_string(),
        "connection refused (injected by stagger's chaos layer)"
    );

    // Through the layer, the real error is boxed as it came.
    let layer = ServiceBuilder::new()
        .layer(ChaosLayer::new(off))
        .service(client());
    let request = reqwest::Request::new(Method::GET, refused.parse().unwrap());
    let error = layer.oneshot(request).await.unwrap_err();
    assert!(error.downcast_ref::<reqwest::Error>().unwrap().is_connect());
}
