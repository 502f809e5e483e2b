//! The guards shared by every request of a policy (and its clones): the table of hosts, the retry
//! budget, the host cooldown, the hosts' round trips (for the breaker), adaptive throttling,
//! gRPC's retry throttling, and the replicas of a name with what each costs lately.

pub(crate) mod budget;
pub(crate) mod host_state;
pub(crate) mod hosts;
pub(crate) mod latency;
pub(crate) mod replicas;
pub(crate) mod retry_throttling;
pub(crate) mod throttle;
