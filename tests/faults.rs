//! The promises a retry layer is bought for, on the bad day: a hard deadline, a time limit per attempt,
//! and an answer that says what the retries did — through every adapter (`RetryMiddleware`,
//! `RetryLayer` over `reqwest::Client`, `RetryLayer` over hyper-util's client, `stagger::retry`),
//! against real servers on loopback, in real time kept to a few hundred milliseconds.
//!
//! The servers: one that accepts connections, never answers and notes when the client closes them, one
//! that sends a response's head at once and its body slowly, and wiremock answering late.
//!
//! One module per adapter, under `tests/faults/`; this file holds what they share.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stagger::{Backoff, RetryPolicy};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};

// One module per adapter; docs/rules.md says which test pins down which promise.
#[path = "faults/generic_retry.rs"]
mod generic_retry;
#[cfg(all(feature = "tower", feature = "hyper-util"))]
#[path = "faults/layer_over_hyper_util.rs"]
mod layer_over_hyper_util;
#[cfg(all(feature = "tower", feature = "reqwest"))]
#[path = "faults/layer_over_reqwest.rs"]
mod layer_over_reqwest;
#[cfg(feature = "reqwest-middleware")]
#[path = "faults/middleware.rs"]
mod middleware;

// What the modules share: the policies, the servers, and the assertions on when a call ended.

const fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A retry 10 ms after each failure, a 300 ms deadline, the default attempt timeout (10 s).
fn deadline_300ms() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(ms(10)))
        .max_elapsed(ms(300))
        .build()
        .unwrap()
}

/// A retry at once after each failure, a 200 ms limit per attempt. No budget: these tests are about the
/// time limit, not about how many timeouts' retries the budget pays for (a new client's starting
/// credit pays for two).
fn attempt_timeout_200ms() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Backoff::fixed(Duration::ZERO))
        .attempt_timeout(ms(200))
        .budget(None)
        .build()
        .unwrap()
}

/// A server that accepts every connection, reads what it is sent, and never answers. Returns its
/// address and the count of connections it accepted.
async fn hung_server() -> (String, Arc<AtomicUsize>) {
    let hung = Hung::start().await;
    (hung.url, hung.accepted)
}

/// The server of [`hung_server`], which also notes when each connection was closed by the client: when
/// a read returned the end of the stream or an error.
struct Hung {
    url: String,
    accepted: Arc<AtomicUsize>,
    closed: Arc<Mutex<Vec<Instant>>>,
}

impl Hung {
    async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let closed = Arc::new(Mutex::new(Vec::new()));
        let (count, closes) = (Arc::clone(&accepted), Arc::clone(&closed));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let closes = Arc::clone(&closes);
                tokio::spawn(async move {
                    let mut buffer = [0; 1024];
                    while let Ok(1..) = socket.read(&mut buffer).await {}
                    closes.lock().unwrap().push(Instant::now());
                });
            }
        });
        Self {
            url: format!("http://{address}/"),
            accepted,
            closed,
        }
    }

    /// When the first connection was closed, waiting for it at most `within`.
    async fn first_closed(&self, within: Duration) -> Option<Instant> {
        let start = Instant::now();
        loop {
            if let Some(&at) = self.closed.lock().unwrap().first() {
                return Some(at);
            }
            if start.elapsed() > within {
                return None;
            }
            tokio::time::sleep(ms(2)).await;
        }
    }
}

/// How soon after a call ended at its deadline the server must see the attempt's connection closed.
/// The client closes it as soon as its connection task is polled after the attempt was dropped, within
/// milliseconds; a second leaves room for a loaded machine and is far below what a connection left
/// open would show: reqwest's pool keeps an idle one for 90 s, and one with a request in flight for as
/// long as the server keeps it.
const CLOSED_WITHIN: Duration = ms(1000);

/// Asserts that `server`'s one connection was closed at the deadline of a call that started at `start`
/// (`deadline` later) and returned at `ended`: not before the deadline, and within [`CLOSED_WITHIN`]
/// of the call's end.
async fn assert_closed_at_the_deadline(
    server: &Hung,
    start: Instant,
    deadline: Duration,
    ended: Instant,
) {
    let closed = server.first_closed(CLOSED_WITHIN).await;
    let closed = closed.unwrap_or_else(|| {
        panic!("the connection was still open {CLOSED_WITHIN:?} after the call ended")
    });
    assert!(
        closed >= start + deadline,
        "closed {:?} after the start, before the deadline",
        closed - start
    );
    assert!(
        closed.saturating_duration_since(ended) < CLOSED_WITHIN,
        "closed {:?} after the call ended",
        closed - ended
    );
    assert_eq!(server.accepted.load(Ordering::SeqCst), 1);
}

/// Room above a deadline for a call that ends at it, on a machine busy with other test binaries (with
/// six at once on two cores, calls with a 300 ms deadline were seen to take up to 668 ms; with every
/// binary at once, a call that ended at its deadline 512 ms). It is far below what the call would
/// otherwise take: an attempt in flight at the deadline would run to the attempt timeout, 10 s by
/// default, or for as long as the server keeps it waiting.
const LATE: Duration = ms(1000);

/// Asserts that `elapsed` is at least `at_least` and under `under`.
#[track_caller]
fn took(elapsed: Duration, at_least: Duration, under: Duration) {
    assert!(
        elapsed >= at_least && elapsed < under,
        "took {elapsed:?}, expected [{at_least:?}, {under:?})"
    );
}

#[cfg(any(
    feature = "reqwest-middleware",
    all(feature = "tower", any(feature = "reqwest", feature = "hyper-util"))
))]
mod slow_body {
    use tokio::io::AsyncWriteExt;

    use super::*;

    /// The body of [`slow_body_server`]'s answer, in the chunks it sends them.
    pub const SLOW_CHUNKS: [&[u8]; 5] = [b"one ", b"two ", b"three ", b"four ", b"five"];

    /// The time [`slow_body_server`] takes to send its body after the head: its chunks are 100 ms apart,
    /// the first 100 ms after the head.
    pub const SLOW_BODY_TAKES: Duration = ms(500);

    /// A server that answers every request with a `200` whose head it sends at once and whose body, of
    /// `SLOW_CHUNKS`, takes [`SLOW_BODY_TAKES`]. Returns its address and the count of connections it
    /// accepted.
    pub async fn slow_body_server() -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    read_request(&mut socket).await?;
                    let length: usize = SLOW_CHUNKS.iter().map(|chunk| chunk.len()).sum();
                    let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {length}\r\n\r\n");
                    socket.write_all(head.as_bytes()).await?;
                    for chunk in SLOW_CHUNKS {
                        tokio::time::sleep(SLOW_BODY_TAKES / 5).await;
                        socket.write_all(chunk).await?;
                    }
                    socket.shutdown().await
                });
            }
        });
        (format!("http://{address}/"), accepted)
    }

    /// Reads an HTTP/1.1 request: its head and a `Content-Length` body.
    async fn read_request(stream: &mut TcpStream) -> std::io::Result<()> {
        let mut received = Vec::new();
        let mut buf = [0; 1024];
        let head_end = loop {
            if let Some(at) = received.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            received.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&received[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("content-length:"))
            .map_or(0, |value| value.trim().parse().unwrap());
        let mut rest = vec![0; (head_end + length).saturating_sub(received.len())];
        stream.read_exact(&mut rest).await?;
        Ok(())
    }
}

#[cfg(any(
    feature = "reqwest-middleware",
    all(feature = "tower", any(feature = "reqwest", feature = "hyper-util"))
))]
mod wiremock_servers {
    use wiremock::matchers::any;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::ms;

    /// Answers the first request 503 at once, with a header and a body to check they arrive intact,
    /// and every later one not for a minute: a retry is in flight whenever a deadline passes, however
    /// slow the machine, and the 503 came before it.
    pub async fn a_503_then_silence() -> MockServer {
        let server = MockServer::start().await;
        Mock::given(any())
            .respond_with(
                ResponseTemplate::new(503)
                    .insert_header("x-attempt", "first")
                    .set_body_string("overloaded"),
            )
            .up_to_n_times(1)
            .with_priority(1)
            .mount(&server)
            .await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(200).set_delay(ms(60_000)))
            .with_priority(2)
            .mount(&server)
            .await;
        server
    }

    /// Answers the first request after 2 s, and every later one at once with 200 "ok".
    pub async fn first_answer_late() -> MockServer {
        let server = MockServer::start().await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(200).set_delay(ms(2000)))
            .up_to_n_times(1)
            .with_priority(1)
            .mount(&server)
            .await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(200).set_body_string("ok"))
            .with_priority(2)
            .mount(&server)
            .await;
        server
    }

    pub async fn hits(server: &MockServer) -> usize {
        server.received_requests().await.unwrap().len()
    }
}
