//! I/O-free decisions.

pub(crate) mod restart;
pub(crate) mod restart_policy;
