//! The reverse proxy in front of a restarting backend, without I/O.

use std::ops::Range;
use std::time::Duration;

use http::{Response, StatusCode};

use crate::server::BUCKET;
use crate::sim::Model;

/// A proxy whose backend is down during `down`: it answers `502` at once then, since the backend
/// refuses connections, and passes on the backend's `200`, also at once, the rest of the time. It
/// counts every attempt it sees.
pub(super) struct Proxy {
    down: Range<Duration>,
    /// Attempts seen per [`BUCKET`] since the start.
    pub(super) arrivals: Vec<u32>,
}

impl Proxy {
    pub(super) fn new(down: Range<Duration>) -> Self {
        Self {
            down,
            arrivals: Vec::new(),
        }
    }
}

impl Model for Proxy {
    type Answer = StatusCode;

    fn answer(&mut self, now: Duration) -> StatusCode {
        let bucket = (now.as_nanos() / BUCKET.as_nanos()) as usize;
        if self.arrivals.len() <= bucket {
            self.arrivals.resize(bucket + 1, 0);
        }
        self.arrivals[bucket] += 1;
        if self.down.contains(&now) {
            StatusCode::BAD_GATEWAY
        } else {
            StatusCode::OK
        }
    }

    fn respond(status: StatusCode) -> Response<()> {
        let mut response = Response::new(());
        *response.status_mut() = status;
        response
    }
}
