//! The database the workers connect to, without I/O: down for a while, and counting every connection
//! attempt it sees.

use std::ops::Range;
use std::time::Duration;

use http::{Response, StatusCode};

use crate::server::BUCKET;
use crate::sim::Model;

/// A database that refuses connections during `down` and accepts them the rest of the time. It
/// counts every connection attempt it sees.
pub(super) struct Database {
    down: Range<Duration>,
    /// Connection attempts per [`BUCKET`] since the start.
    pub(super) attempts: Vec<u32>,
}

impl Database {
    pub(super) fn new(down: Range<Duration>) -> Self {
        Self {
            down,
            attempts: Vec::new(),
        }
    }
}

impl Model for Database {
    /// Whether the connection is accepted.
    type Answer = bool;

    fn answer(&mut self, now: Duration) -> bool {
        let bucket = (now.as_nanos() / BUCKET.as_nanos()) as usize;
        if self.attempts.len() <= bucket {
            self.attempts.resize(bucket + 1, 0);
        }
        self.attempts[bucket] += 1;
        !self.down.contains(&now)
    }

    fn respond(accepted: bool) -> Response<()> {
        let mut response = Response::new(());
        if !accepted {
            *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        }
        response
    }
}
