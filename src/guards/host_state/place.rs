//! Where a request goes, as the hosts' table keys it ([`Place`]: its host, the entry its health is
//! judged in, its route), and what an attempt's end says of each ([`Evidence`]).

use std::net::SocketAddr;

use super::down::Health;
use crate::classify::RequestView;
use crate::guards::hosts::Host;

/// Where a request goes, as the table keys it: its host (name and port), whose entry keeps the
/// cooldown; the entry whose health its unanswered attempts judge (the host's, or the replica's it
/// was sent to); and its route (that entry and the request's path), each an entry of its own once
/// something is known of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub(crate) host: Host,
    pub(crate) health: Host,
    pub(crate) route: Option<Host>,
    /// The replica's address, when the attempt went to one of the host's replicas.
    pub(crate) replica: Option<SocketAddr>,
}

impl Place {
    /// The place of `request`, if it names a host. A gRPC call that names none (a tonic client made
    /// without an origin, whose `Channel` adds the origin beneath the retry layer) is at the unnamed
    /// host, one for all such calls of a policy: its routes (its methods' paths) tell its methods
    /// apart. Any other request without a host has no place.
    pub(crate) fn of(request: &RequestView<'_>) -> Option<Self> {
        let host = match Host::of(request) {
            Some(host) => host,
            None if request.grpc_method().is_some() => Host::unnamed(),
            None => return None,
        };
        Some(Self::at(host, request))
    }

    /// The place of `request`, whose host is `host`.
    pub(crate) fn at(host: Host, request: &RequestView<'_>) -> Self {
        Self {
            host,
            health: host,
            route: Some(host.route(request.path().unwrap_or("/"))),
            replica: None,
        }
    }

    /// A name with replicas, before its request is placed on one: its entry keeps the cooldown;
    /// each replica's health and routes are the replica's.
    pub(crate) const fn name(host: Host) -> Self {
        Self {
            host,
            health: host,
            route: None,
            replica: None,
        }
    }

    /// The same request, sent to one of its host's replicas: its health and its route are the
    /// replica's, its cooldown still the host's.
    pub(crate) fn on_replica(self, key: Host, addr: SocketAddr, path: &str) -> Self {
        Self {
            host: self.host,
            health: key,
            route: Some(key.route(path)),
            replica: Some(addr),
        }
    }

    /// A host, whatever the path.
    #[cfg(test)]
    pub(crate) const fn host(host: Host) -> Self {
        Self {
            host,
            health: host,
            route: None,
            replica: None,
        }
    }
}

/// What an attempt's end says of its host and of its route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Evidence {
    /// Nothing: an error that is not the host's (a certificate not trusted, a body that did not
    /// decode), a stream the server refused unprocessed, an attempt cut by a limit of its caller's
    /// own, tighter than the policy's.
    Nothing,
    /// The host answered, and so did the route (any answer but a gateway failure).
    Answered,
    /// The host answered that what stands behind it failed: a `502`, `503` or `504` (gRPC
    /// `UNAVAILABLE`) naming no delay. The route's failure, and the host's answer.
    RouteFailed,
    /// No answer: refused, reset, not resolved. The host's failure.
    HostFailed,
    /// No answer within the policy's own limit: the host's failure, one whose request may have
    /// reached it.
    HostTimedOut,
    /// No answer yet, long past what the host takes to answer: the host's failure, unless its answer
    /// still comes.
    HostSilent,
}

impl Evidence {
    /// What it says of the host's entry, and of the route's (`route`).
    pub(super) fn split(self, route: Option<Host>) -> (Health, Health) {
        match (self, route) {
            (Self::Nothing, _) => (Health::Nothing, Health::Nothing),
            (Self::Answered, _) => (Health::Answered, Health::Answered),
            (Self::RouteFailed, Some(route)) => (Health::Gateway(route), Health::Failed),
            (Self::RouteFailed, None) => (Health::Failed, Health::Nothing),
            (Self::HostFailed, _) => (Health::Failed, Health::Nothing),
            (Self::HostTimedOut, _) => (Health::TimedOut, Health::Nothing),
            (Self::HostSilent, _) => (Health::Silent, Health::Nothing),
        }
    }

    /// The `host.evidence` of the event of an entry it puts down: `gateway`, `unanswered`,
    /// `timed_out` or `silent` (`none` for what puts nothing down).
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Nothing | Self::Answered => "none",
            Self::RouteFailed => "gateway",
            Self::HostFailed => "unanswered",
            Self::HostTimedOut => "timed_out",
            Self::HostSilent => "silent",
        }
    }

    /// Whether it can put an entry into the table.
    pub(super) fn fails(self) -> bool {
        matches!(
            self,
            Self::RouteFailed | Self::HostFailed | Self::HostTimedOut | Self::HostSilent
        )
    }
}
