//! What a policy says of its hosts: [`HostState`], [`HostReport`].

use std::time::Duration;

/// What a policy knows of one host, from [`RetryPolicy::host_state`](crate::RetryPolicy::host_state)
/// or [`RetryPolicy::hosts`](crate::RetryPolicy::hosts): for a health endpoint, or a test.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostState {
    /// Requests go as usual (`failures` in a row so far, short of the breaker's threshold).
    Up {
        /// Attempts in a row that failed, lately.
        failures: u32,
    },
    /// The host asked for a pause ([`host_cooldown`](crate::RetryPolicyBuilder::host_cooldown)):
    /// requests wait this much longer.
    Held {
        /// Time left.
        left: Duration,
    },
    /// The host refused more than it admits: its requests go one `pace` apart.
    Paced {
        /// The interval between requests.
        pace: Duration,
    },
    /// Found down (or marked down): only probes go.
    Down {
        /// For how long.
        down_for: Duration,
        /// Probes sent since.
        probes: u32,
        /// When the next probe may go; `None` for a host marked down by hand, which is not probed.
        next_probe: Option<Duration>,
        /// Requests waiting for it.
        held: usize,
    },
    /// A probe found it back: the requests held meanwhile are being let go, paced.
    Recovering {
        /// Until every one has gone.
        left: Duration,
    },
}

impl HostState {
    /// A stable `snake_case` token: `up`, `held`, `paced`, `down`, `recovering`; the `host.state`
    /// of the events and metrics of its changes.
    pub const fn as_str(&self) -> &'static str {
        match self {
            Self::Up { .. } => "up",
            Self::Held { .. } => "held",
            Self::Paced { .. } => "paced",
            Self::Down { .. } => "down",
            Self::Recovering { .. } => "recovering",
        }
    }
}

/// One host, one replica of a host, or one route of either, a policy keeps a state for, as
/// [`RetryPolicy::hosts`](crate::RetryPolicy::hosts) lists it.
///
/// A host is judged by the attempts it leaves unanswered (refused, reset, timed out); a route (a
/// path of a host, a gRPC method) by the gateway failures it answers (`502`, `503`, `504`, gRPC
/// `UNAVAILABLE`), so that a host with one failing backend is down on that path alone.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostReport {
    /// The host as requests name it, `name` or `name:port` (a default port omitted).
    pub host: String,
    /// The replica's address, for one of the host's replicas
    /// ([`ReplicaSet`](crate::ReplicaSet)), or a route of it; `None` for the host itself.
    pub replica: Option<std::net::SocketAddr>,
    /// The path, for a route; `None` for the host itself.
    pub route: Option<String>,
    /// Its state.
    pub state: HostState,
}
