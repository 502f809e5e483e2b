//! The I/O-free decisions: the policy and its builder, one call's state machine, the backoff and its
//! random numbers, and the guards through which the state machine reaches the fleet.

pub(crate) mod backoff;
pub(crate) mod builder;
pub(crate) mod guards;
pub(crate) mod policy;
pub(crate) mod rng;
pub(crate) mod state;
