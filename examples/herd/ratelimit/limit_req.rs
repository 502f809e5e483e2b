//! The second rate-limited server: nginx's `limit_req` as it comes, a leaky bucket without burst that
//! refuses with `429` and `Retry-After: 1` alone.

use std::time::Duration;

use http::header::RETRY_AFTER;
use http::{HeaderValue, Response, StatusCode};

use super::RateLimiter;
use super::figures::Answers;
use crate::sim::Model;

/// `limit_req` without `burst=`: no request in excess is let through. nginx keeps `burst` in
/// milli-requests too (`burst × 1000`).
const BURST: i64 = 0;

/// nginx's `limit_req` for one key (every caller is one process, one client address), with its own
/// arithmetic (`ngx_http_limit_req_lookup` in `ngx_http_limit_req_module.c`):
///
/// ```text
/// limit_req_zone $binary_remote_addr zone=z:1m rate=800r/s;
/// limit_req zone=z;
/// limit_req_status 429;
/// add_header Retry-After $retry_after always;   # 1 on a 429, no header on anything else
/// ```
///
/// nginx counts the excess in milli-requests and time in whole milliseconds (its cached clock, the
/// same for every request of one event-loop turn), and its rate in milli-requests per second
/// (`ctx->rate`, `rate × 1000` for `r/s`). A key's first request is admitted with no excess; a later
/// one, `ms` whole milliseconds after the last one admitted, makes
/// `excess = max(0, excess − rate × ms / 1000 + 1000)`, in integers. Over the burst (none here), the
/// request is refused and nothing is stored; else `excess` and the time are.
///
/// The whole milliseconds cost capacity: at 800 requests/s, a request 1 ms after the last one admitted
/// finds 800 milli-requests drained, under one request, and is refused; one 2 ms after is admitted. So
/// nginx admits at most one request every 2 ms, 500 a second, not 800 ([`LimitReq::most_per_second`]).
/// That is nginx as it comes, and modelled as such.
pub(crate) struct LimitReq {
    /// Milli-requests drained per second: nginx's `ctx->rate`.
    rate: i64,
    /// The key's state once it has sent a request.
    node: Option<Node>,
    answers: Answers,
}

/// What nginx keeps of a key: `lr->excess` and `lr->last`.
#[derive(Debug, Clone, Copy)]
struct Node {
    /// Milli-requests in excess after the last request admitted.
    excess: i64,
    /// When the last request was admitted, in whole milliseconds.
    last: u64,
}

/// What `limit_req` answers one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Passed on, and answered `200` (with no rate-limit header).
    Admitted,
    /// Answered `429` with `Retry-After: 1`.
    Refused,
}

impl LimitReq {
    /// `rate=<quota>r/s`, without burst.
    pub(crate) fn new(quota: f64) -> Self {
        Self {
            rate: ((quota * 1000.0).round() as i64).max(1),
            node: None,
            answers: Answers::default(),
        }
    }

    /// The most requests a second this admits: one per the fewest whole milliseconds that drain a
    /// request.
    pub(crate) fn most_per_second(&self) -> f64 {
        let gap_ms = (1_000_000 + self.rate - 1) / self.rate;
        1000.0 / gap_ms as f64
    }

    fn verdict(&mut self, now: Duration) -> Verdict {
        let now = now.as_millis() as u64;
        let Some(node) = &mut self.node else {
            self.node = Some(Node {
                excess: 0,
                last: now,
            });
            return Verdict::Admitted;
        };
        let ms = now.abs_diff(node.last) as i64;
        let excess = (node.excess - self.rate * ms / 1000 + 1000).max(0);
        if excess > BURST {
            return Verdict::Refused;
        }
        *node = Node { excess, last: now };
        Verdict::Admitted
    }
}

impl Model for LimitReq {
    type Answer = Verdict;

    fn answer(&mut self, now: Duration) -> Verdict {
        let verdict = self.verdict(now);
        self.answers.count(now, verdict == Verdict::Admitted);
        verdict
    }

    fn respond(verdict: Verdict) -> Response<()> {
        let mut response = Response::new(());
        if verdict == Verdict::Refused {
            *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            (response.headers_mut()).insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}

impl RateLimiter for LimitReq {
    fn answers(&mut self) -> &mut Answers {
        &mut self.answers
    }
}
