//! [`Restarting`]: a `MakeService` whose connections are remade on the schedule of a
//! [`RestartPolicy`], for `tower::reconnect::Reconnect`.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use ::tower::Service;
use pin_project_lite::pin_project;

use crate::drive::timer;
use crate::engine::restart::{RestartDecision, RestartState, RunEnd};
use crate::engine::restart_policy::RestartPolicy;
use crate::time::{Instant, Sleeping};

/// A `MakeService` (any `Service<Target>` whose response is a connection) that makes each new
/// connection after the delay a [`RestartPolicy`] gives a restart, for
/// [`tower::reconnect::Reconnect`](https://docs.rs/tower/latest/tower/reconnect/struct.Reconnect.html),
/// which reconnects at once.
///
/// A connection's life is a run: from the moment the inner make service's future gave it to the
/// moment a new one is asked for (`Reconnect` asks when the connection fails its `poll_ready`, or when
/// the previous make failed). The first connection is made at once; one that stayed up for
/// [`healthy_after`](crate::RestartPolicyBuilder::healthy_after) is remade at once and the delays start
/// over; after a failed make, or a connection lost sooner, the next is made after the backoff's
/// jittered delay, the same schedule as [`supervise`](crate::supervise()) with the same `tracing`
/// events, metrics and hook. The wait is in `poll_ready`, before the inner service is asked for
/// readiness, so the inner make service holds nothing while it sleeps.
///
/// The settings that end a supervision do not apply: there is no restart limit
/// ([`max_restarts`](crate::RestartPolicyBuilder::max_restarts)), since a make service that gave up
/// would have no error of its own to fail with, and the service ends when it is dropped. It reconnects
/// as long as it is asked to; `Reconnect` returns each failed make's error to the call that met it.
///
/// ```
/// use std::time::Duration;
/// use stagger::RestartPolicy;
/// use stagger::tower::Restarting;
/// use tower::reconnect::Reconnect;
/// use tower::{Service, ServiceExt, service_fn};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// // A make service: connects to `target` (here, a service answering at once).
/// let connect = service_fn(|target: &'static str| {
///     Box::pin(async move {
///         let connection = service_fn(move |query: String| async move {
///             Ok::<_, std::io::Error>(format!("{target}: {query}"))
///         });
///         Ok::<_, std::io::Error>(connection)
///     })
/// });
/// let policy = RestartPolicy::default();
/// let mut db = Reconnect::new(Restarting::new(&policy, connect), "db");
/// let answer = db.ready().await.unwrap().call("select 1".to_string()).await.unwrap();
/// assert_eq!(answer, "db: select 1");
/// # }
/// ```
#[derive(Debug)]
pub struct Restarting<M> {
    inner: M,
    policy: RestartPolicy,
    state: RestartState,
    /// When the last connection was made, shared with the future that makes it.
    connected: Arc<Mutex<Option<Instant>>>,
    next: Next,
}

/// Where the service stands with the next connection.
#[derive(Debug)]
enum Next {
    /// None was made yet: the first is made at once.
    First,
    /// The last one was asked for; its loss has not been noticed yet.
    Asked,
    /// A new one is due when the sleep ends (at once if there is none).
    Due(Option<Pin<Box<Sleeping>>>),
}

impl<M> Restarting<M> {
    /// Wraps the make service `inner`, delaying each new connection as `policy` delays a restart.
    ///
    /// Each `Restarting` keeps its own schedule, with its own jitter stream from the policy's seed; a
    /// clone starts a schedule of its own.
    pub fn new(policy: &RestartPolicy, inner: M) -> Self {
        Self {
            inner,
            policy: policy.clone(),
            state: policy.start_without_limit(),
            connected: Arc::default(),
            next: Next::First,
        }
    }

    /// The policy in use.
    pub fn policy(&self) -> &RestartPolicy {
        &self.policy
    }

    /// A reference to the inner make service.
    pub fn get_ref(&self) -> &M {
        &self.inner
    }

    /// A mutable reference to the inner make service.
    pub fn get_mut(&mut self) -> &mut M {
        &mut self.inner
    }

    /// The inner make service.
    pub fn into_inner(self) -> M {
        self.inner
    }

    /// The connection asked for last is gone: decides when the next one is made.
    fn decide(&mut self) -> Option<Pin<Box<Sleeping>>> {
        let now = Instant::now();
        let connected = self
            .connected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // A make that failed lived no time at all.
        let uptime = connected.map_or(Duration::ZERO, |at| now.saturating_duration_since(at));
        // `Reconnect` hands the error that ended the connection to the call that met it.
        let run = RunEnd {
            at: now,
            uptime,
            failed: true,
            error: None,
        };
        let delay = match self.state.run_ended(&self.policy, run) {
            RestartDecision::Restart(delay) => delay,
            // A schedule without a limit never gives up.
            RestartDecision::GiveUp => return None,
        };
        (!delay.is_zero())
            .then(|| Box::pin(Sleeping::until(timer::after(delay), self.policy.timer())))
    }
}

impl<M: Clone> Clone for Restarting<M> {
    fn clone(&self) -> Self {
        Self::new(&self.policy, self.inner.clone())
    }
}

impl<M, Target> Service<Target> for Restarting<M>
where
    M: Service<Target>,
{
    type Response = M::Response;
    type Error = M::Error;
    type Future = RestartingFuture<M::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        match &mut self.next {
            Next::First => self.next = Next::Due(None),
            Next::Asked => self.next = Next::Due(self.decide()),
            Next::Due(_) => {}
        }
        if let Next::Due(Some(sleep)) = &mut self.next {
            ready!(sleep.as_mut().poll(cx));
            self.next = Next::Due(None);
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, target: Target) -> Self::Future {
        self.next = Next::Asked;
        RestartingFuture {
            inner: self.inner.call(target),
            connected: Arc::clone(&self.connected),
        }
    }
}

pin_project! {
    /// The future of a connection made by [`Restarting`]: the inner make service's, which notes when
    /// the connection was made.
    #[derive(Debug)]
    pub struct RestartingFuture<F> {
        #[pin]
        inner: F,
        connected: Arc<Mutex<Option<Instant>>>,
    }
}

impl<F, S, E> Future for RestartingFuture<F>
where
    F: Future<Output = Result<S, E>>,
{
    type Output = Result<S, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let made = ready!(this.inner.poll(cx));
        if made.is_ok() {
            *this
                .connected
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        }
        Poll::Ready(made)
    }
}
