//! Keeping a [`ReplicaSet`] current: the system resolver asked again on a period, a resolver of
//! one's own, or a stream of changes; each a task of its own, for as long as its [`Discovery`] is
//! kept.

use std::future::{Future, poll_fn};
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use tokio::task::JoinHandle;

use crate::guards::replicas::{ReplicaChange, ReplicaSet};

/// A task that keeps a [`ReplicaSet`] current; it stops when this is dropped (or
/// [`stop`](Self::stop)ped).
#[derive(Debug)]
#[must_use = "the discovery stops when its handle is dropped"]
pub struct Discovery {
    task: JoinHandle<()>,
}

impl Discovery {
    /// Stops the task.
    pub fn stop(self) {}

    /// Whether the task has ended: the stream it followed ended.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for Discovery {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The part of [`ReplicaSet`]'s inherent `impl` that spawns discovery tasks (the rest is in
/// `guards/replicas.rs`).
impl ReplicaSet {
    /// Asks the system's resolver (`getaddrinfo`, on tokio's blocking threads) for the set's name
    /// now and every `period`, and makes its answer the set: the replicas still in the answer keep
    /// what is known of them and their calls in flight. An error, or an answer with no address,
    /// leaves the set as it is: a resolver's bad moment does not empty it. The set's name should
    /// carry its port (`api.internal:8080`); without one, 80 is asked for. Needs a tokio runtime.
    pub fn refresh_every(&self, period: Duration) -> Discovery {
        self.refresh_with(period, |name: String| async move {
            tokio::task::spawn_blocking(move || name.to_socket_addrs().map(Iterator::collect))
                .await
                .map_err(io::Error::other)?
        })
    }

    /// [`refresh_every`](Self::refresh_every) with a resolver of your own: `resolve` is given the
    /// set's name, `name:port`, and answers its addresses.
    pub fn refresh_with<F, Fut>(&self, period: Duration, resolve: F) -> Discovery
    where
        F: Fn(String) -> Fut + Send + 'static,
        Fut: Future<Output = io::Result<Vec<SocketAddr>>> + Send,
    {
        let set = self.clone();
        let name = match set.name().rsplit_once(':') {
            Some((_, port)) if port.bytes().all(|b| b.is_ascii_digit()) => set.name().to_owned(),
            _ => format!("{}:80", set.name()),
        };
        let period = period.max(Duration::from_millis(1));
        Discovery {
            task: tokio::spawn(async move {
                let mut every = tokio::time::interval(period);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    every.tick().await;
                    if let Ok(addrs) = resolve(name.clone()).await
                        && !addrs.is_empty()
                    {
                        set.replace(addrs);
                    }
                }
            }),
        }
    }

    /// Applies each change of `changes` to the set as it comes (as tonic's `balance_channel` takes
    /// its endpoints' changes), until the stream ends. Needs a tokio runtime.
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::{ReplicaChange, ReplicaSet};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let set = ReplicaSet::new("api.internal:8080", [])?;
    /// let addr = "127.0.0.2:8080".parse()?;
    /// let changes = futures::stream::iter([ReplicaChange::Insert(addr)]);
    /// let discovery = set.follow(changes);
    /// while !discovery.is_finished() {
    ///     tokio::time::sleep(Duration::from_millis(1)).await;
    /// }
    /// assert_eq!(set.addrs(), [addr]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn follow<S>(&self, changes: S) -> Discovery
    where
        S: Stream<Item = ReplicaChange> + Send + 'static,
    {
        let set = self.clone();
        let mut changes: Pin<Box<S>> = Box::pin(changes);
        Discovery {
            task: tokio::spawn(async move {
                while let Some(change) = poll_fn(|cx| changes.as_mut().poll_next(cx)).await {
                    set.apply(change);
                }
            }),
        }
    }
}
