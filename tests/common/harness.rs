//! The test harness of the suites that need something of the machine (a server such as nginx, a tool,
//! root for network namespaces): `harness = false` in Cargo.toml, and each test is a trial of
//! libtest-mimic, with libtest's command line and output. A test whose needs the machine lacks is
//! reported `ignored (<what is missing>)`, so that `cargo test` shows what did not run and why, unless
//! `CI=true`, where it fails: `.ci/run` installs what the suites need.
#![allow(dead_code)] // each suite uses the kinds of test it has

use std::future::Future;
use std::process::ExitCode;

use libtest_mimic::{Arguments, Completion, Trial};

/// How a test runs.
pub enum Body {
    /// A plain function.
    Sync(fn()),
    /// An async function, on a tokio runtime of one thread, as `#[tokio::test]` runs it.
    Async(fn() -> std::pin::Pin<Box<dyn Future<Output = ()>>>),
    /// An async function, on a tokio runtime of two worker threads.
    MultiThread(fn() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>),
}

/// A test of `name` that runs `body`, unless `missing` names what the machine lacks for it.
pub fn trial(
    name: &str,
    missing: impl FnOnce() -> Option<String> + Send + 'static,
    body: Body,
) -> Trial {
    Trial::ignorable_test(name, move || {
        if let Some(why) = missing() {
            if std::env::var("CI").is_ok_and(|ci| ci == "true") {
                return Err(format!(
                    "{why}. CI=true, so this suite must run: .ci/run installs what it needs"
                )
                .into());
            }
            return Ok(Completion::ignored_with(why));
        }
        match body {
            Body::Sync(test) => test(),
            Body::Async(test) => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime")
                .block_on(test()),
            Body::MultiThread(test) => tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("a tokio runtime")
                .block_on(test()),
        }
        Ok(Completion::Completed)
    })
}

/// Runs `trials` as libtest would, with its arguments (a filter, `--nocapture`, `--test-threads`).
pub fn run(trials: Vec<Trial>) -> ExitCode {
    libtest_mimic::run(&Arguments::from_args(), trials).exit_code()
}

/// A trial of `$module::$test`, an async test function, needing `$needs` (checked by `$missing`).
#[macro_export]
macro_rules! trials {
    ($missing:path; $($kind:ident $module:ident :: $test:ident [$($need:expr),*];)*) => {
        vec![$(
            $crate::harness::trial(
                concat!(stringify!($module), "::", stringify!($test)),
                || $missing(&[$($need),*]),
                trials!(@body $kind $module::$test),
            ),
        )*]
    };
    (@body sync $module:ident :: $test:ident) => {
        $crate::harness::Body::Sync($module::$test)
    };
    (@body async $module:ident :: $test:ident) => {
        $crate::harness::Body::Async(|| Box::pin($module::$test()))
    };
    (@body multi_thread $module:ident :: $test:ident) => {
        $crate::harness::Body::MultiThread(|| Box::pin($module::$test()))
    };
}
