//! The I/O-free decisions: the retry policy and its builder, one call's state machine, the backoff and
//! its random numbers, the guards through which the state machine reaches the fleet, and the restart
//! schedule of a supervised task.

pub(crate) mod backoff;
pub(crate) mod builder;
pub(crate) mod guards;
pub(crate) mod policy;
pub(crate) mod restart;
pub(crate) mod restart_policy;
pub(crate) mod rng;
pub(crate) mod state;
