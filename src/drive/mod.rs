//! One call's async loop as every adapter drives it, and the only timers: each attempt under its
//! time limit, the pause before a retry, the held copy of the request and the hedged race.

pub(crate) mod call;
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
pub(crate) mod hedge;
#[cfg(any(feature = "tower", feature = "reqwest-middleware"))]
pub(crate) mod held;
pub(crate) mod timer;
