//! `RetryMiddleware` in a real browser: these tests are built for wasm32-unknown-unknown and run by
//! wasm-bindgen-test in headless Chromium, where reqwest is the browser's `fetch`, the timer
//! `setTimeout`, the clock `performance.now()` and `Date.now()`, and the randomness
//! `crypto.getRandomValues()`. The page is served from the runner's own port, so every request to
//! the scripted server (`tests/browser/server.py`) is a cross-origin one, which the browser lets
//! through only as CORS allows: the browser is the judge, as Node (which enforces no CORS) is not.
//!
//! `tests/browser/run` starts the server, builds this suite with its address
//! (`STAGGER_BROWSER_SERVER`) and runs it; `.ci/run` installs Chromium, ChromeDriver and
//! wasm-bindgen-cli first. The scenarios are `tests/browser/scenarios.rs`, which
//! `tests/browser_native.rs` runs on the native client against the same server.
#![cfg(all(target_arch = "wasm32", target_os = "unknown"))]

#[path = "browser/scenarios.rs"]
mod scenarios;

use scenarios::Server;
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

/// The scripted server this suite was built for.
fn server() -> Server {
    match option_env!("STAGGER_BROWSER_SERVER") {
        Some(origin) => Server::new(origin),
        None => panic!(
            "STAGGER_BROWSER_SERVER was not set when this suite was built: run it with \
             tests/browser/run, which starts tests/browser/server.py and sets it"
        ),
    }
}

macro_rules! scenario {
    ($($name:ident),* $(,)?) => {
        $(
            #[wasm_bindgen_test]
            async fn $name() {
                scenarios::$name(&server()).await;
            }
        )*
    };
}

scenario!(
    a_503_then_200_ends_200_after_2_attempts,
    retry_after_1_is_waited_as_a_floor,
    retry_after_as_an_http_date_is_waited,
    a_post_without_a_key_is_not_retried_after_an_ambiguous_failure,
    a_post_with_a_key_is_retried_after_an_ambiguous_failure,
    a_hanging_answer_is_cut_by_the_attempt_timeout_and_retried,
    a_refused_connection_is_retried,
    the_deadline_ends_the_call,
    the_budget_stops_the_retries,
    the_breaker_finds_a_refusing_host_down,
    the_host_cooldown_holds_the_next_call,
    stagger_retry_retries_an_async_operation,
);
