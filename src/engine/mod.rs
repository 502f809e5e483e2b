//! The I/O-free decisions: the retry policy and its builder, one call's state machine, the backoff and
//! its random numbers, a policy's guards and the state machine's dealings with them, and the restart
//! schedule of a supervised task.

pub(crate) mod backoff;
pub(crate) mod breaker;
pub(crate) mod builder;
pub(crate) mod derive;
mod limits;
pub(crate) mod live;
pub(crate) mod overrides;
pub(crate) mod policy;
pub(crate) mod policy_guards;
mod policy_hosts;
mod policy_replicas;
pub(crate) mod restart;
pub(crate) mod restart_policy;
pub(crate) mod rng;
mod schedules;
pub(crate) mod state;
