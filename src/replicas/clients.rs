//! The clients of a set's replicas, made as a replica is first sent to and let go when it leaves;
//! which replica a request goes to; its attempts in flight counted while they run; and the error of
//! a set with no replica.

use std::error::Error;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

use crate::classify::AsError;
use crate::guards::replicas::{Member, Replica, ReplicaSet};

/// The clients of one set, shared by every clone of the sender.
pub(super) struct Clients<S, M> {
    set: ReplicaSet,
    make: M,
    table: Mutex<Table<S>>,
}

struct Table<S> {
    /// The set's generation the clients were last pruned at.
    generation: u64,
    /// Each replica's client, by its number in the set.
    clients: Vec<(u64, S)>,
}

impl<S: Clone, M: Fn(SocketAddr) -> S> Clients<S, M> {
    pub(super) fn new(set: ReplicaSet, make: M) -> Self {
        Self {
            set,
            make,
            table: Mutex::new(Table {
                generation: u64::MAX,
                clients: Vec::new(),
            }),
        }
    }

    pub(super) fn set(&self) -> &ReplicaSet {
        &self.set
    }

    /// The replica a request that names `named` goes to: that one, or, for a request that names
    /// none, the cheaper of two. `None` when the set is empty.
    pub(super) fn replica(&self, named: Option<&Replica>) -> Option<Arc<Member>> {
        if let Some(named) = named {
            return Some(Arc::clone(named.member()));
        }
        let members = self.set.members();
        let chosen = self.set.choose(&members, |_| true)?;
        Some(Arc::clone(&members[chosen]))
    }

    /// `member`'s client, made by `make` the first time; the clients of replicas that left the
    /// set are let go (their calls in flight keep theirs).
    pub(super) fn client(&self, member: &Member) -> S {
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let generation = self.set.generation();
        if table.generation != generation {
            let members = self.set.members();
            table
                .clients
                .retain(|(slot, _)| members.iter().any(|m| m.slot() == *slot));
            table.generation = generation;
        }
        if let Some((_, client)) = table
            .clients
            .iter()
            .find(|(slot, _)| *slot == member.slot())
        {
            return client.clone();
        }
        let client = (self.make)(member.addr());
        table.clients.push((member.slot(), client.clone()));
        client
    }

    /// The error of a request to a set with no replica.
    pub(super) fn none<E>(&self) -> ReplicaError<E> {
        ReplicaError::NoReplica(NoReplica {
            name: self.set.name().into(),
            refused: io::Error::new(io::ErrorKind::ConnectionRefused, "no replica"),
        })
    }
}

pin_project! {
    /// An attempt to a replica, counted among its attempts in flight until it ends or is dropped.
    pub(super) struct Counted<F> {
        #[pin]
        future: F,
        in_flight: InFlight,
    }
}

impl<F> Counted<F> {
    pub(super) fn new(future: F, member: Arc<Member>) -> Self {
        member.started();
        Self {
            future,
            in_flight: InFlight(member),
        }
    }
}

impl<F: Future> Future for Counted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().future.poll(cx)
    }
}

/// One attempt in flight to a replica, until dropped.
struct InFlight(Arc<Member>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.finished();
    }
}

/// What a replica's sender fails with: its client's error, or none to send to.
#[non_exhaustive]
#[derive(Debug)]
pub enum ReplicaError<E> {
    /// The replica's client failed with this.
    Inner(E),
    /// The set had no replica: read as a refused connection, and retried as one.
    NoReplica(NoReplica),
}

impl<E> ReplicaError<E> {
    /// The client's error, if it is one.
    pub fn inner(&self) -> Option<&E> {
        match self {
            Self::Inner(error) => Some(error),
            Self::NoReplica(_) => None,
        }
    }

    /// The client's error, or `Err(self)`.
    pub fn into_inner(self) -> Result<E, Self> {
        match self {
            Self::Inner(error) => Ok(error),
            other => Err(other),
        }
    }
}

impl<E: fmt::Display> fmt::Display for ReplicaError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Inner(error) => error.fmt(f),
            Self::NoReplica(none) => none.fmt(f),
        }
    }
}

impl<E: Error + 'static> Error for ReplicaError<E> {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            // The client's error is this one's, as its kind goes: `is_connect()` still answers.
            Self::Inner(error) => error.source(),
            Self::NoReplica(none) => Some(none),
        }
    }
}

impl<E: AsError> AsError for ReplicaError<E> {
    fn as_error(&self) -> &(dyn Error + 'static) {
        match self {
            Self::Inner(error) => error.as_error(),
            Self::NoReplica(none) => none,
        }
    }
}

/// A request to a [`ReplicaSet`] that had no replica.
#[derive(Debug)]
pub struct NoReplica {
    name: Box<str>,
    /// What the classifier reads: a refused connection.
    refused: io::Error,
}

impl NoReplica {
    /// The set's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for NoReplica {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no replica of {} to send to", self.name)
    }
}

impl Error for NoReplica {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.refused)
    }
}
