//! stagger against real servers and a real network, through both adapters a reqwest user has
//! (`RetryMiddleware`, and `RetryLayer` over `reqwest::Client`), over real `reqwest::Client`s:
//!
//! - nginx in front of a backend that restarts (502s), that never answers, that cuts its answer short;
//! - nginx's own rate limiting (`limit_req`, 429 with `Retry-After`), with and without the host
//!   cooldown;
//! - nginx closing connections unanswered (`return 444`), and streaming bodies answered 503;
//! - a network namespace that drops SYNs, and one that loses 10 % of the packets it receives.
//!
//! nginx runs as a child of the test with a configuration of its own, on a free port, and its access
//! log says what the server saw. The namespaces need root, iproute2 and iptables. Without nginx, or
//! without root for the namespaces, a test prints `SKIP <test>: <why>` and passes, unless `CI=true`,
//! where it fails: `.ci/run` installs what is missing.
//!
//! Some assertions are goals the library does not meet yet; each says so where it is made ("goal").
//! Every scenario prints its figures: `cargo test --all-features --test real_servers -- --nocapture`.
#![cfg(all(feature = "reqwest-middleware", feature = "tower"))]

#[path = "real_servers/client.rs"]
mod client;
#[path = "real_servers/netns.rs"]
mod netns;
#[path = "real_servers/nginx.rs"]
mod nginx;
#[path = "real_servers/skip.rs"]
mod skip;
#[path = "real_servers/upstream.rs"]
mod upstream;

#[path = "real_servers/hung_upstream.rs"]
mod hung_upstream;
#[path = "real_servers/limit_req.rs"]
mod limit_req;
#[path = "real_servers/packet_loss.rs"]
mod packet_loss;
#[path = "real_servers/resets.rs"]
mod resets;
#[path = "real_servers/restart.rs"]
mod restart;
#[path = "real_servers/streaming.rs"]
mod streaming;
#[path = "real_servers/syn_blackhole.rs"]
mod syn_blackhole;

use std::time::Duration;

pub const fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// The `q`-quantile (0 to 1) of `values`, nearest rank; zero for none.
pub fn quantile(values: &[Duration], q: f64) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    match sorted.len() {
        0 => Duration::ZERO,
        n => sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1],
    }
}
