//! The builder's setting of the timer a policy's calls sleep on.

use std::sync::Arc;

use crate::engine::builder::RetryPolicyBuilder;
use crate::time::Timer;

impl RetryPolicyBuilder {
    /// Sets a timer of one's own for the calls of this policy to sleep on: the pause before each
    /// retry, and each attempt's time limits. Defaults to none: a call sleeps on the timer of what
    /// runs it, tokio's inside a tokio runtime (feature `tokio`, on by default), else async-io's
    /// (feature `async-io`), else a timer thread of stagger's own; the browser's in the browser. So
    /// a call runs under smol, `futures::executor::block_on` or any executor without one; a runtime
    /// with a timer of its own (embassy's, a simulator's) gives it here. [`Timer`] has an example.
    ///
    /// `stagger::blocking::retry` does not use it: it sleeps the calling thread.
    pub fn timer(mut self, timer: impl Timer) -> Self {
        self.settings.timer = Some(Arc::new(timer));
        self
    }
}
