//! An upstream that accepts nginx's connection and never answers, behind an nginx that would wait a
//! minute for it (`proxy_read_timeout 60s`): the client's deadline ends the call, and closing the
//! connection is what tells nginx the client is gone.

use std::time::Duration;

use reqwest::Method;
use stagger::{RetryPolicy, StopReason};

use super::client::Adapter;
use super::ms;
use super::nginx::{self, Nginx};
use super::upstream::silent;

/// Room above the deadline for a loaded machine.
const SLACK: Duration = ms(500);

pub(crate) async fn a_call_to_an_upstream_that_never_answers_ends_at_its_1_s_deadline_and_nginx_logs_499()
 {
    let upstream = silent().await;
    let nginx = Nginx::start(&format!(
        "location / {{ proxy_read_timeout 60s; proxy_pass http://{}; }}",
        upstream.addr
    ))
    .await;
    let deadline = Duration::from_secs(1);
    let policy = RetryPolicy::builder()
        .max_elapsed(deadline)
        .build()
        .unwrap();
    let calls = Adapter::BOTH.map(|adapter| {
        let client = adapter.client(policy.clone());
        let get = client
            .request(Method::GET, &nginx.url("/report"))
            .header("x-request-id", format!("{adapter:?}"));
        async move { client.send(get).await }
    });
    let calls = futures::future::join_all(calls).await;
    // nginx logs a request when it notices the client closed the connection.
    let log = nginx
        .access_log_when(Duration::from_secs(3), |log| log.len() >= 2)
        .await;

    for (adapter, call) in Adapter::BOTH.into_iter().zip(calls) {
        let logged: Vec<String> = nginx::of(&log, &format!("{adapter:?}"))
            .iter()
            .map(|line| format!("{} after {:?}", line.status, line.request_time))
            .collect();
        eprintln!(
            "never answers {adapter:?}: {} (nginx logged {logged:?})",
            call.summary()
        );
        let error = call
            .result
            .as_ref()
            .err()
            .unwrap_or_else(|| panic!("{adapter:?}: {}", call.summary()));
        assert!(error.is_deadline(), "{adapter:?}: {}", error.chain());
        assert_eq!(
            error.elapsed().map(|e| e.limit()),
            Some(deadline),
            "{adapter:?}"
        );
        assert!(
            call.took >= deadline && call.took < deadline + SLACK,
            "{adapter:?}: took {:?}",
            call.took
        );
        assert_eq!(call.info.attempts(), 1, "{adapter:?}");
        assert_eq!(call.stop_reason(), StopReason::Deadline, "{adapter:?}");
        // 499: nginx's "client closed request", logged when it saw the connection close.
        let statuses: Vec<u16> = nginx::of(&log, &format!("{adapter:?}"))
            .iter()
            .map(|line| line.status)
            .collect();
        assert_eq!(statuses, [499], "{adapter:?}: {logged:?}");
    }
}
