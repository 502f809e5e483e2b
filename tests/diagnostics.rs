//! What the compiler says to a user who puts `RetryLayer::new` over a service it cannot retry: the
//! program in `tests/diagnostics/not_clone_body` is checked with cargo (offline, with this crate's
//! `Cargo.lock`, in a target directory of its own), and its error must name the fix.
#![cfg(feature = "tower")]

use std::path::Path;
use std::process::Command;

#[test]
fn a_request_body_that_is_not_clone_is_answered_with_replay_body() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = root.join("tests/diagnostics/not_clone_body");
    // The same versions as the suite's own build, so that nothing is downloaded.
    std::fs::copy(root.join("Cargo.lock"), fixture.join("Cargo.lock")).unwrap();
    let output = Command::new(env!("CARGO"))
        .args(["check", "--offline", "--quiet"])
        .current_dir(&fixture)
        .env("CARGO_TARGET_DIR", root.join("target/diagnostics"))
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap();
    std::fs::remove_file(fixture.join("Cargo.lock")).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "it compiled:\n{stderr}");
    // One error, `Replay`'s own: not "`BoxBody<Bytes, Infallible>: Clone` is not satisfied", which
    // names neither stagger nor the fix.
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error[")).collect();
    let [error] = errors[..] else {
        panic!("one error, got:\n{stderr}");
    };
    let replay = "error[E0277]: `HttpReplay` cannot copy `http::Request<BoxBody<";
    assert!(error.starts_with(replay), "{stderr}");
    assert!(
        stderr.contains("wrap it in `stagger::ReplayBody`"),
        "{stderr}"
    );
}
