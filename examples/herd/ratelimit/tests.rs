//! The two servers' arithmetic and answers, and the scenario's determinism.

use std::time::Duration;

use http::StatusCode;
use http::header::RETRY_AFTER;

use super::figures::Figures;
use super::limit_req::LimitReq;
use super::limit_req::Verdict::{self, Admitted, Refused};
use super::token_bucket::TokenBucket;
use super::{RateLimiter, SERVERS, Scenario, Server, measure, rows, table};
use crate::sim::Model;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What `server` answers requests arriving at each of `times` (in milliseconds), in turn.
fn verdicts(server: &mut LimitReq, times: &[u64]) -> Vec<Verdict> {
    times.iter().map(|&t| server.answer(ms(t))).collect()
}

#[test]
fn limit_req_at_5_per_second_admits_a_request_200_ms_after_the_last_one_admitted_not_199() {
    let mut nginx = LimitReq::new(5.0);
    assert_eq!(
        verdicts(&mut nginx, &[1000, 1199, 1200]),
        [Admitted, Refused, Admitted]
    );
    // The first request of the key is admitted whenever it comes.
    let mut nginx = LimitReq::new(5.0);
    assert_eq!(
        verdicts(&mut nginx, &[0, 0, 200]),
        [Admitted, Refused, Admitted]
    );
    assert_eq!(nginx.most_per_second(), 5.0);
}

#[test]
fn limit_req_at_800_per_second_refuses_1_ms_after_an_admission_so_admits_500_a_second() {
    let mut nginx = LimitReq::new(800.0);
    // 800 milli-requests drain in 1 ms, under one request; 1600 in 2 ms.
    assert_eq!(
        verdicts(&mut nginx, &[0, 1, 2, 2, 3, 4, 6]),
        [
            Admitted, Refused, Admitted, Refused, Refused, Admitted, Admitted
        ]
    );
    assert_eq!(nginx.most_per_second(), 500.0);
    // A request every millisecond for a second: every other one gets through.
    let mut nginx = LimitReq::new(800.0);
    let times: Vec<u64> = (0..1000).collect();
    let admitted = (verdicts(&mut nginx, &times).into_iter()).filter(|&v| v == Admitted);
    assert_eq!(admitted.count(), 500);
}

#[test]
fn a_request_limit_req_refuses_leaves_its_state_as_it_was() {
    // Were the refusal at 150 ms stored, the request at 200 ms would be 50 ms after it, and refused.
    let mut nginx = LimitReq::new(5.0);
    assert_eq!(
        verdicts(&mut nginx, &[0, 150, 199, 200, 399, 400]),
        [Admitted, Refused, Refused, Admitted, Refused, Admitted]
    );
    // Refusals in every millisecond do not push the next admission back.
    let mut nginx = LimitReq::new(800.0);
    assert_eq!(
        verdicts(&mut nginx, &[10, 11, 11, 11, 12]),
        [Admitted, Refused, Refused, Refused, Admitted]
    );
}

#[test]
fn limit_req_answers_429_with_retry_after_1_alone_and_200_with_no_header() {
    let refused = LimitReq::respond(Refused);
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers().len(), 1);
    assert_eq!(refused.headers()[RETRY_AFTER], "1");
    let admitted = LimitReq::respond(Admitted);
    assert_eq!(admitted.status(), StatusCode::OK);
    assert!(admitted.headers().is_empty());
}

#[test]
fn the_token_bucket_serves_its_depth_at_once_then_refuses_until_a_token_is_back() {
    let mut bucket = TokenBucket::new(10.0, 10.0);
    let statuses: Vec<StatusCode> = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 99, 100]
        .map(|t| TokenBucket::respond(bucket.answer(ms(t))).status())
        .into();
    let (ok, refused) = (StatusCode::OK, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(statuses[..10], [ok; 10]);
    assert_eq!(statuses[10..], [refused, refused, ok]);
    let last = TokenBucket::respond(bucket.answer(ms(100)));
    assert_eq!(last.headers()[RETRY_AFTER], "1");
    assert_eq!(last.headers()["ratelimit"], "\"default\";r=0;t=1");
    assert_eq!(last.headers()["ratelimit-policy"], "\"default\";q=10;w=1");
    // Every answer is counted, in its 100 ms slot.
    let answers = std::mem::take(bucket.answers());
    let figures = Figures::new(answers, &[]);
    assert_eq!(figures.served, [10, 1]);
    assert_eq!(figures.refused, [2, 1]);
}

#[test]
fn one_seed_gives_the_same_table_twice_on_any_number_of_threads() {
    let scenario = Scenario {
        callers: 20,
        quota: 16.0,
        seed: 3,
        peer_rng: false,
    };
    let rows = rows();
    let first = measure(&scenario, &rows, 1);
    let text = table(&scenario, &first);
    assert_eq!(text, table(&scenario, &measure(&scenario, &rows, 2)));
    assert_eq!(first.len(), SERVERS.len() * rows.len());
    let most = LimitReq::new(scenario.quota).most_per_second();
    for line in &first {
        let served: u32 = line.figures.served.iter().sum();
        assert!(served > 0, "{}: nothing served", line.row.name);
        // Until the last call ended, limit_req admitted a first request and no more than its most.
        if line.server == Server::LimitReq {
            let most = most * line.figures.last.as_secs_f64() + 1.0;
            assert!(f64::from(served) <= most, "{}: {served}", line.row.name);
        }
    }
    // Without retries, a call is one attempt: 20 callers, 20 calls each.
    for line in first.iter().filter(|l| l.row.name == "no retries") {
        assert_eq!(line.figures.attempts(), 400);
    }
}
