//! Reconnecting to a server that comes up late: `stagger::retry` outside HTTP.
//!
//! The listener starts 400 ms after the client's first attempt; the client retries connection refusals
//! with capped, jittered backoff and gives up on anything else.
//!
//! ```text
//! cargo run --example reconnect
//! ```

use std::io;
use std::time::Duration;

use stagger::{Backoff, Outcome, Reason, RetryPolicy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Reserve a free port, then release it: connections are refused until the server binds it again.
    let addr = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let start = Instant::now();

    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        let listener = TcpListener::bind(addr)
            .await
            .expect("the port is still free");
        println!(
            "[{:>4} ms] server: listening on {addr}",
            start.elapsed().as_millis()
        );
        let (mut socket, _) = listener.accept().await.expect("accept");
        socket.write_all(b"hello\n").await.expect("write");
    });

    let policy = RetryPolicy::builder()
        .backoff(
            Backoff::exponential(Duration::from_millis(20))
                .with_max_delay(Duration::from_millis(500)),
        )
        .max_retries(20)
        .max_elapsed(Duration::from_secs(10))
        // A reconnect loop is not a fleet of requests: the budget is for request traffic.
        .budget(None)
        .on_retry(move |event| {
            println!(
                "[{:>4} ms] client: attempt {} failed ({}), next in {:?}",
                start.elapsed().as_millis(),
                event.attempt,
                event.reason,
                event.delay
            );
        })
        .build()?;

    // On failure, a `stagger::Error` that says how many attempts were made and why they stopped, with
    // the last `io::Error` as its source.
    let mut stream = stagger::retry(
        &policy,
        || TcpStream::connect(addr),
        |result| match result {
            Ok(_) => Outcome::Success,
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                Outcome::RetrySafe(Reason::Connect)
            }
            Err(_) => Outcome::Fatal,
        },
    )
    .await?;

    let mut greeting = String::new();
    stream.read_to_string(&mut greeting).await?;
    println!(
        "[{:>4} ms] client: connected, server says {:?}",
        start.elapsed().as_millis(),
        greeting.trim()
    );
    Ok(())
}
