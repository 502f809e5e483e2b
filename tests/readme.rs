//! The README's quick starts, word for word, against a server that answers as they say (issue 35,
//! item 9): the reqwest quick start's `/status/503` answered `503` every time and its `/status/200`
//! answered `200`, as httpbin answers them; the tower quick start's `/get` answered `200`.
//!
//! Each quick start is a file of `tests/readme/`, included here and checked to be in README.md
//! exactly; its `call(api)` runs against an axum server on loopback in place of httpbin, on tokio's
//! paused clock (the server runs on the same runtime, so the clock moves only while both wait), so
//! that the 30 s deadline of the reqwest quick start is met in milliseconds. A quick start that no
//! longer does what its comments say fails here: the first run of this test found the reqwest quick
//! start's health check refused unsent (`host ... is down`) and its `main` returning `Err`.
#![cfg(all(feature = "tower", feature = "reqwest-middleware"))]

mod common;

use std::time::Duration;

use common::scripted::{Server, reply};
use tokio::time::Instant;

#[allow(dead_code)]
mod reqwest_quick_start {
    include!("readme/reqwest.rs");

    pub(crate) async fn run(api: &str) -> Result<(), Box<dyn std::error::Error>> {
        call(api).await
    }
}

#[allow(dead_code)]
mod tower_quick_start {
    include!("readme/tower.rs");

    pub(crate) async fn run(api: &str) -> Result<(), Box<dyn std::error::Error>> {
        call(api).await
    }
}

/// Every quick start tested here is in README.md as it is here.
#[test]
fn the_quick_starts_tested_are_the_readme_s_word_for_word() {
    let readme = include_str!("../README.md");
    for (name, code) in [
        ("reqwest", include_str!("readme/reqwest.rs")),
        ("tower", include_str!("readme/tower.rs")),
    ] {
        let block = format!("```rust,no_run\n{code}```");
        assert!(
            readme.contains(&block),
            "README.md's {name} quick start is not tests/readme/{name}.rs"
        );
    }
}

/// The reqwest quick start, four times (the jitter is drawn afresh each run): `main` returns `Ok`;
/// the `503` comes back within the 30 s deadline after more attempts than the five that put its path
/// down (its retries went on as the path's probes); the health check to the same host is sent and
/// answered `200`.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_reqwest_quick_start_does_what_it_says_against_a_server_that_answers_as_httpbin() {
    for run in 0..4 {
        let server = Server::start().await;
        server.script("/status/503", vec![reply(503); 1000]);
        let api = server.url("");
        let start = Instant::now();
        let result = reqwest_quick_start::run(&api).await;
        let took = start.elapsed();
        assert!(result.is_ok(), "run {run}: {result:?}");
        let failing = server.arrivals("/status/503");
        assert!(
            (6..=11).contains(&failing.len()),
            "run {run}: {} attempts",
            failing.len()
        );
        assert!(took <= Duration::from_secs(30), "run {run}: {took:?}");
        let health = server.arrivals("/status/200");
        assert_eq!(health.len(), 1, "run {run}: the health check, sent once");
        println!(
            "reqwest quick start, run {run}: 503 after {} attempts, {took:?} in all; health 200",
            failing.len()
        );
    }
}

/// The tower quick start: `/get` answered `200` at the first attempt.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_tower_quick_start_does_what_it_says_against_a_server_that_answers_as_httpbin() {
    let server = Server::start().await;
    let result = tower_quick_start::run(&server.url("")).await;
    assert!(result.is_ok(), "{result:?}");
    assert_eq!(server.arrivals("/get").len(), 1);
}
