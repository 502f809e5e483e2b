//! Through `stagger::retry`, any async operation: one that never finishes ends at the deadline, which
//! drops it and its connection; a value received before the deadline is returned when it passes; an
//! attempt past its timeout is dropped and retried.

use std::io;

use stagger::{Outcome, Reason};

use super::*;

/// Connects and waits for a first byte: what a client of a line protocol does.
async fn greeting(address: &str) -> io::Result<u8> {
    let address = address.trim_start_matches("http://").trim_end_matches('/');
    let mut stream = TcpStream::connect(address).await?;
    let mut byte = [0];
    stream.read_exact(&mut byte).await?;
    Ok(byte[0])
}

fn retry_errors(result: &io::Result<u8>) -> Outcome {
    match result {
        Ok(_) => Outcome::Success,
        Err(_) => Outcome::RetrySafe(Reason::Connect),
    }
}

#[tokio::test]
async fn an_operation_that_never_finishes_ends_at_the_deadline() {
    let (url, accepted) = hung_server().await;

    let start = Instant::now();
    let error = stagger::retry(&deadline_300ms(), || greeting(&url), retry_errors)
        .await
        .unwrap_err();
    took(start.elapsed(), ms(300), ms(300) + LATE);

    assert!(error.is_deadline(), "{error:?}");
    assert_eq!(error.info().attempts(), 1);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn the_deadline_drops_the_operation_in_flight_and_its_connection_with_it() {
    let server = Hung::start().await;

    let start = Instant::now();
    let error = stagger::retry(&deadline_300ms(), || greeting(&server.url), retry_errors)
        .await
        .unwrap_err();
    let ended = Instant::now();

    assert!(error.is_deadline(), "{error:?}");
    assert_closed_at_the_deadline(&server, start, ms(300), ended).await;
}

// In virtual time: the operation needs no I/O, so the times are exact. Each attempt answers 503
// after 250 ms; the second starts at 260 ms and is cut short at 300 ms.
#[tokio::test(start_paused = true)]
async fn a_value_received_before_the_deadline_is_returned_when_it_passes() {
    let attempts = AtomicUsize::new(0);
    let start = tokio::time::Instant::now();
    let result = stagger::retry(
        &deadline_300ms(),
        || {
            attempts.fetch_add(1, Ordering::SeqCst);
            async {
                tokio::time::sleep(ms(250)).await;
                Ok::<u16, io::Error>(503)
            }
        },
        |result| match result {
            Ok(503) => Outcome::RetrySafe(Reason::Other("busy")),
            _ => Outcome::Success,
        },
    )
    .await;
    assert_eq!(start.elapsed(), ms(300));

    assert_eq!(result.unwrap(), 503);
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_attempt_past_its_timeout_is_dropped_and_retried() {
    let attempts = AtomicUsize::new(0);
    let start = Instant::now();
    let result = stagger::retry(
        &attempt_timeout_200ms(),
        || {
            let n = attempts.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    tokio::time::sleep(ms(2000)).await;
                }
                Ok::<usize, io::Error>(n + 1)
            }
        },
        |_| Outcome::Success,
    )
    .await;
    took(start.elapsed(), ms(200), ms(600));

    assert_eq!(result.unwrap(), 2, "the second attempt's value");
}
