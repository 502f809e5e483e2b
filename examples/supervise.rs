//! Keeping workers alive with `stagger::supervise`, over loopback sockets, in real time (about 22 s).
//!
//! Three workers each hold a connection to a server and read from it; a connection that ends is a
//! failed run, restarted on the schedule of a `RestartPolicy`:
//!
//! 1. For its first 6.5 s the server drops every connection 2 s after accepting it. Each run stayed
//!    up longer than `healthy_after` (1 s here), so each restart is at once.
//! 2. Then it goes down for 10 s: connections are refused, and each worker's attempts grow apart
//!    (full jitter under ceilings of 250 ms, 500 ms, 1 s, 2 s, then 4 s) and spread, each its own.
//! 3. It comes back and keeps its connections; the workers are back within 4 s, and at 22 s a stop
//!    signal ends them, dropping the runs in progress.
//!
//! ```text
//! cargo run --example supervise
//! ```

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use stagger::{Backoff, RestartEvent, RestartPolicy};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, sleep_until};

/// When the server stops dropping connections and goes down, and when it is back.
const DOWN_AT: Duration = Duration::from_millis(6500);
const BACK_AT: Duration = Duration::from_millis(16_500);
/// When the stop signal comes.
const STOP_AT: Duration = Duration::from_secs(22);
/// How long the server keeps a connection before it drops it, while it drops them.
const DROP_AFTER: Duration = Duration::from_secs(2);
const WORKERS: usize = 3;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Reserve a free port, then bind it again in the server: it is free while the server is down.
    let addr = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let start = Instant::now();
    let at = move || start.elapsed().as_secs_f64();
    let listener = TcpListener::bind(addr).await?;
    tokio::spawn(server(listener, addr, start));

    let (stop, stopped) = watch::channel(false);
    let mut workers = Vec::new();
    for id in 1..=WORKERS {
        let policy = RestartPolicy::builder()
            .backoff(
                Backoff::exponential(Duration::from_millis(250))
                    .with_max_delay(Duration::from_secs(4)),
            )
            .healthy_after(Duration::from_secs(1))
            .on_restart(move |event: &RestartEvent| {
                let when = match event.delay {
                    Duration::ZERO => "at once".to_string(),
                    delay => format!("in {:.2} s", delay.as_secs_f64()),
                };
                let run = match event.failures {
                    0 => format!("a healthy run of {:.1} s", event.uptime.as_secs_f64()),
                    1 => "a failed run".to_string(),
                    n => format!("{n} failed runs in a row"),
                };
                println!(
                    "[{:>6.3} s] worker {id}: restart {} {when}, after {run}",
                    at(),
                    event.restart
                );
            })
            .build()?;
        let mut stopped = stopped.clone();
        workers.push(tokio::spawn(async move {
            let stop = async move {
                let _ = stopped.wait_for(|&stop| stop).await;
            };
            match stagger::supervise(&policy, || consume(id, addr, at), stop).await {
                Ok(()) => println!("[{:>6.3} s] worker {id}: stopped", at()),
                Err(error) => println!("[{:>6.3} s] worker {id}: {error:?}", at()),
            }
        }));
    }

    sleep_until(start + STOP_AT).await;
    println!("[{:>6.3} s] main: stop", at());
    stop.send(true)?;
    for worker in workers {
        worker.await?;
    }
    Ok(())
}

/// One run of a worker: connects, says who it is, and reads until the connection ends. It should not
/// end, so an end is an error.
async fn consume(id: usize, addr: SocketAddr, at: impl Fn() -> f64) -> io::Result<()> {
    // While the server is down, this is refused: the hook's line says so.
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(format!("worker {id}\n").as_bytes())
        .await?;
    println!("[{:>6.3} s] worker {id}: connected", at());
    let mut buffer = [0; 64];
    while stream.read(&mut buffer).await? > 0 {}
    Err(io::ErrorKind::ConnectionReset.into())
}

/// Drops each connection after 2 s until `DOWN_AT`, is down until `BACK_AT`, then keeps them.
async fn server(listener: TcpListener, addr: SocketAddr, start: Instant) {
    let at = || start.elapsed().as_secs_f64();
    println!(
        "[{:>6.3} s] server: up, dropping each connection after 2 s",
        at()
    );
    let (down, going_down) = watch::channel(false);
    let down_at = sleep_until(start + DOWN_AT);
    tokio::pin!(down_at);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((socket, _)) = accepted else { continue };
                let mut going_down = going_down.clone();
                tokio::spawn(async move {
                    // Dropped after 2 s, or when the server goes down.
                    tokio::select! {
                        _ = tokio::time::sleep(DROP_AFTER) => {}
                        _ = going_down.wait_for(|&down| down) => {}
                    }
                    drop(socket);
                });
            }
            _ = &mut down_at => break,
        }
    }
    drop(listener);
    let _ = down.send(true);
    println!("[{:>6.3} s] server: down for 10 s", at());

    sleep_until(start + BACK_AT).await;
    let listener = TcpListener::bind(addr)
        .await
        .expect("the port is still free");
    println!("[{:>6.3} s] server: back, keeping connections", at());
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let mut lines = BufReader::new(socket).lines();
            if let Ok(Some(hello)) = lines.next_line().await {
                println!(
                    "[{:>6.3} s] server: {hello} is back",
                    start.elapsed().as_secs_f64()
                );
            }
            // Held until the worker lets go of it.
            while let Ok(Some(_)) = lines.next_line().await {}
        });
    }
}
