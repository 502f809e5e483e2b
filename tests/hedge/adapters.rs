//! Through both adapters, `RetryMiddleware` and `RetryLayer` over `reqwest::Client`, against a loopback
//! server that holds its first request for 2 s, answers the others at once, and notices when a
//! connection is closed under a request it is holding: a GET hedged after 100 ms returns with the
//! hedge's answer and drops the slow attempt's connection, a POST without a key is never hedged, and an
//! exhausted budget sends no hedge.

use std::net::SocketAddr;
use std::time::Instant;

use reqwest::{Method, StatusCode};
use reqwest_middleware::ClientBuilder;
use stagger::RetryMiddleware;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::*;

/// What the server saw.
#[derive(Clone, Default)]
struct Seen {
    requests: Arc<AtomicUsize>,
    /// When each request's head arrived, in arrival order.
    arrivals: Arc<std::sync::Mutex<Vec<Instant>>>,
    /// Connections closed by the client while the server held their request.
    dropped: Arc<AtomicUsize>,
}

/// An HTTP/1.1 server on loopback, one request per connection: the first is held for `hold` (and
/// answered `200` if the client still waits), every later one is answered `200` at once.
async fn server(hold: Duration) -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let counts = seen.clone();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                counts.arrivals.lock().unwrap().push(Instant::now());
                let n = counts.requests.fetch_add(1, Ordering::SeqCst);
                if n == 0 {
                    // Hold it; a read of 0 bytes means the client closed the connection.
                    tokio::select! {
                        read = stream.read(&mut buf) => {
                            if matches!(read, Ok(0) | Err(_)) {
                                counts.dropped.fetch_add(1, Ordering::SeqCst);
                            }
                            return;
                        }
                        () = tokio::time::sleep(hold) => {}
                    }
                }
                let body = if n == 0 { "slow" } else { "fast" };
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    (addr, seen)
}

fn reqwest_client() -> reqwest::Client {
    // One connection per request, so that the first attempt's is its own to drop.
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Adapter {
    Middleware,
    Layer,
}

/// Sends `method /` through `adapter`; the response, its body, and how long it took.
async fn send(
    adapter: Adapter,
    policy: RetryPolicy,
    addr: SocketAddr,
    method: Method,
) -> (StatusCode, String, RetryInfo, Duration) {
    let url = format!("http://{addr}/");
    // The client is built before the clock starts: loading the root certificates is no part of the call.
    let client = reqwest_client();
    let (response, took) = match adapter {
        Adapter::Middleware => {
            let client = ClientBuilder::new(client)
                .with(RetryMiddleware::new(policy))
                .build();
            let start = Instant::now();
            let response = client.request(method, &url).send().await.unwrap();
            (response, start.elapsed())
        }
        Adapter::Layer => {
            let service = ServiceBuilder::new()
                .layer(RetryLayer::new(policy))
                .service(client);
            let start = Instant::now();
            let response = (service.oneshot(reqwest::Request::new(method, url.parse().unwrap())))
                .await
                .unwrap();
            (response, start.elapsed())
        }
    };
    let status = response.status();
    let info = response.extensions().get::<RetryInfo>().unwrap().clone();
    let body = response.text().await.unwrap();
    (status, body, info, took)
}

async fn a_get_hedged_after_100_ms_returns_with_the_hedges_answer(adapter: Adapter) {
    let (addr, seen) = server(Duration::from_secs(2)).await;
    let policy = hedging().build().unwrap();
    let (status, body, info, took) = send(adapter, policy, addr, Method::GET).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "fast"),
        "{adapter:?}"
    );
    // The hedge left 100 ms after the first attempt, never earlier (the server's clock says when each
    // arrived), and its answer ended the call well before the slow one's 2 s.
    let arrivals = seen.arrivals.lock().unwrap().clone();
    assert_eq!(arrivals.len(), 2, "{adapter:?}");
    let gap = arrivals[1] - arrivals[0];
    assert!(
        gap >= Duration::from_millis(100),
        "{adapter:?}: hedge after {gap:?}"
    );
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(2),
        "{adapter:?}: {took:?}"
    );
    assert_eq!((info.attempts(), info.hedges()), (2, 1), "{adapter:?}");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 2);
    // The slow attempt was dropped, and its connection with it: the server notices the close as soon
    // as its task runs again, which a loaded machine may delay, so the test waits for it.
    let closed = common::until(Duration::from_secs(5), || {
        seen.dropped.load(Ordering::SeqCst) == 1
    });
    assert!(
        closed.await,
        "{adapter:?}: the slow attempt's connection still open 5 s after the call ended"
    );
}

async fn a_post_without_a_key_is_never_hedged(adapter: Adapter) {
    let (addr, seen) = server(Duration::from_millis(400)).await;
    let policy = hedging().build().unwrap();
    let (status, body, info, took) = send(adapter, policy, addr, Method::POST).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "slow"),
        "{adapter:?}"
    );
    assert!(took >= Duration::from_millis(400), "{adapter:?}: {took:?}");
    assert_eq!((info.attempts(), info.hedges()), (1, 0), "{adapter:?}");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
}

async fn an_exhausted_budget_sends_no_hedge(adapter: Adapter) {
    let (addr, seen) = server(Duration::from_millis(400)).await;
    let empty = RetryBudget::builder()
        .ratio(0.0)
        .min_per_second(0)
        .build()
        .unwrap();
    let policy = hedging().budget(empty).build().unwrap();
    let (status, body, info, _) = send(adapter, policy, addr, Method::GET).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, "slow"),
        "{adapter:?}"
    );
    assert_eq!((info.attempts(), info.hedges()), (1, 0), "{adapter:?}");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn middleware_a_get_hedged_after_100_ms_returns_with_the_hedges_answer() {
    a_get_hedged_after_100_ms_returns_with_the_hedges_answer(Adapter::Middleware).await;
}

#[tokio::test]
async fn layer_a_get_hedged_after_100_ms_returns_with_the_hedges_answer() {
    a_get_hedged_after_100_ms_returns_with_the_hedges_answer(Adapter::Layer).await;
}

#[tokio::test]
async fn middleware_a_post_without_a_key_is_never_hedged() {
    a_post_without_a_key_is_never_hedged(Adapter::Middleware).await;
}

#[tokio::test]
async fn layer_a_post_without_a_key_is_never_hedged() {
    a_post_without_a_key_is_never_hedged(Adapter::Layer).await;
}

#[tokio::test]
async fn middleware_an_exhausted_budget_sends_no_hedge() {
    an_exhausted_budget_sends_no_hedge(Adapter::Middleware).await;
}

#[tokio::test]
async fn layer_an_exhausted_budget_sends_no_hedge() {
    an_exhausted_budget_sends_no_hedge(Adapter::Layer).await;
}
