//! The browser suite's scenarios (`tests/browser/scenarios.rs`) on reqwest's native client, against the
//! same scripted server (`tests/browser/server.py`, which this suite starts with `python3`): what the
//! browser suite asserts in headless Chromium holds here too, attempt for attempt and stop reason for
//! stop reason. Without `python3` a test is reported ignored, unless `CI=true`, where it fails.
#![cfg(all(
    feature = "reqwest-middleware",
    not(all(target_arch = "wasm32", target_os = "unknown"))
))]

#[path = "browser/scenarios.rs"]
mod scenarios;

#[path = "common/harness.rs"]
mod harness;

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, ExitCode, Stdio};
use std::sync::{Mutex, OnceLock};

use scenarios::Server;

/// The server's origin, and the process with its standard input, held open: it exits when the suite
/// does (`--lifeline`).
type Running = (String, Mutex<(Child, ChildStdin)>);

/// The server, started once for the whole suite; or why it could not be.
static SERVER: OnceLock<Result<Running, String>> = OnceLock::new();

fn start() -> Result<Running, String> {
    let python = std::env::var("STAGGER_PYTHON").unwrap_or_else(|_| "python3".to_owned());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/browser/server.py");
    let mut child = Command::new(&python)
        .args([script, "--lifeline"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|error| {
            format!("{python} could not be started ({error}): the scripted server needs it")
        })?;
    let stdin = child.stdin.take().expect("a piped stdin");
    let mut origin = String::new();
    BufReader::new(child.stdout.take().expect("a piped stdout"))
        .read_line(&mut origin)
        .map_err(|error| format!("the scripted server did not start: {error}"))?;
    if !origin.starts_with("http://") {
        return Err(format!("the scripted server did not start: {origin:?}"));
    }
    Ok((origin.trim().to_owned(), Mutex::new((child, stdin))))
}

/// What the machine lacks for the suite: a Python to run the server.
fn missing(_: &[()]) -> Option<String> {
    SERVER.get_or_init(start).as_ref().err().cloned()
}

fn server() -> Server {
    let (origin, _) = SERVER
        .get_or_init(start)
        .as_ref()
        .expect("the scripted server");
    Server::new(origin)
}

macro_rules! scenario {
    ($($name:ident),* $(,)?) => {
        mod run {
            $(
                pub async fn $name() {
                    super::scenarios::$name(&super::server()).await;
                }
            )*
        }
        fn main() -> ExitCode {
            harness::run(trials![missing; $(async run::$name [];)*])
        }
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
