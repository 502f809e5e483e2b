//! The guards shared by every request of a policy (and its clones): the table of hosts, the retry
//! budget, the host cooldown and adaptive throttling.

pub(crate) mod budget;
pub(crate) mod host_state;
pub(crate) mod hosts;
pub(crate) mod throttle;
