//! Connections that end early. Before the response's head (nginx's `return 444` closes the connection
//! without a word), the server may or may not have acted: a GET is sent again, a POST without an
//! `Idempotency-Key` is not. After the head (an upstream that promises 100 000 bytes and closes after
//! 30 000), the response is the caller's: stagger never retries a response whose head arrived, and the
//! body's error reaches the reader as reqwest gave it.

use reqwest::Method;
use stagger::{RetryPolicy, StopReason};

use super::client::{Adapter, causes};
use super::nginx::{self, Nginx};
use super::upstream::cut_short;

pub(crate) async fn a_connection_closed_before_the_response_head_is_retried_for_a_get_and_not_for_a_post()
 {
    let nginx = Nginx::start("location / { return 444; }").await;
    let calls = Adapter::BOTH.map(|adapter| {
        let url = nginx.url("/orders");
        async move {
            let client = adapter.client(RetryPolicy::default());
            let get = client
                .request(Method::GET, &url)
                .header("x-request-id", format!("{adapter:?}-get"));
            let post = client
                .request(Method::POST, &url)
                .header("x-request-id", format!("{adapter:?}-post"))
                .body("order");
            // The POST first: after the GET's resets the breaker finds the host down, and a POST
            // then would not be sent at all.
            let post = client.send(post).await;
            (client.send(get).await, post)
        }
    });
    let calls = futures::future::join_all(calls).await;
    let log = nginx.access_log();

    for (adapter, (get, post)) in Adapter::BOTH.into_iter().zip(calls) {
        // How many times nginx received the request, checking it was the method sent.
        let received = |method: &str| {
            let lines = nginx::of(&log, &format!("{adapter:?}-{}", method.to_lowercase()));
            assert!(lines.iter().all(|line| line.method == method), "{lines:?}");
            lines.len()
        };
        for (method, call) in [("GET", &get), ("POST", &post)] {
            let error = call.result.as_ref().err().map(|e| e.chain());
            eprintln!(
                "444 {adapter:?} {method}: {} attempt(s), {}, nginx saw {}: {}",
                call.info.attempts(),
                call.stop_reason(),
                received(method),
                error.unwrap_or_else(|| "a response".to_owned())
            );
        }
        assert!(get.result.is_err(), "{adapter:?}: {}", get.summary());
        assert!(get.info.attempts() > 1, "{adapter:?}: {}", get.summary());
        assert_eq!(received("GET"), get.info.attempts() as usize, "{adapter:?}");
        assert!(post.result.is_err(), "{adapter:?}: {}", post.summary());
        assert_eq!(post.info.attempts(), 1, "{adapter:?}: {}", post.summary());
        assert_eq!(post.stop_reason(), StopReason::NotIdempotent, "{adapter:?}");
        assert_eq!(received("POST"), 1, "{adapter:?}");
    }
}

/// Reads `response`'s body to its end or its error: the bytes read, and the error.
async fn read_to_error(mut response: reqwest::Response) -> (usize, reqwest::Error) {
    let mut read = 0;
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => read += chunk.len(),
            Ok(None) => panic!("the whole body arrived ({read} bytes)"),
            Err(error) => return (read, error),
        }
    }
}

/// What a reader can ask of a body's error: reqwest's kinds, and the causes under it.
fn kind(error: &reqwest::Error) -> String {
    format!(
        "is_body {}, is_decode {}, is_timeout {}, is_connect {}, is_request {}: {}",
        error.is_body(),
        error.is_decode(),
        error.is_timeout(),
        error.is_connect(),
        error.is_request(),
        causes(error)
    )
}

pub(crate) async fn a_connection_cut_mid_body_hands_back_the_200_after_one_attempt_and_its_body_read_fails()
 {
    const PROMISED: usize = 100_000;
    let upstream = cut_short(PROMISED, 30_000).await;
    let nginx = Nginx::start(&format!(
        "location / {{ proxy_pass http://{}; }}",
        upstream.addr
    ))
    .await;
    // The same read without stagger: the error its caller would have had.
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    let response = plain.get(nginx.url("/export")).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let (_, without_stagger) = read_to_error(response).await;

    let reads = Adapter::BOTH.map(|adapter| {
        let url = nginx.url("/export");
        async move {
            let client = adapter.client(RetryPolicy::default());
            let get = client
                .request(Method::GET, &url)
                .header("x-request-id", format!("{adapter:?}"));
            let call = client.send(get).await;
            let summary = call.summary();
            let response = call
                .result
                .unwrap_or_else(|e| panic!("{adapter:?}: the head arrives: {}", e.chain()));
            let (read, error) = read_to_error(response).await;
            (call.info, summary, read, error)
        }
    });
    let reads = futures::future::join_all(reads).await;
    let log = nginx
        .access_log_when(std::time::Duration::from_secs(2), |log| log.len() >= 3)
        .await;

    eprintln!("cut mid-body without stagger: {}", kind(&without_stagger));
    for (adapter, (info, summary, read, error)) in Adapter::BOTH.into_iter().zip(reads) {
        let logged: Vec<String> = nginx::of(&log, &format!("{adapter:?}"))
            .iter()
            .map(|line| {
                format!(
                    "{} (upstream {}), {} bytes sent",
                    line.status, line.upstream_status, line.bytes_sent
                )
            })
            .collect();
        eprintln!(
            "cut mid-body {adapter:?}: {summary}; read {read} of {PROMISED} bytes, then {}; nginx \
             logged {logged:?}",
            kind(&error),
        );
        assert_eq!(info.attempts(), 1, "{adapter:?}");
        assert_eq!(info.stop_reason(), Some(StopReason::Success), "{adapter:?}");
        assert!(read < PROMISED, "{adapter:?}");
        // reqwest's own error, as a caller without stagger gets it: reqwest 0.13's `chunk` calls any
        // body error a decode error, with hyper's under it.
        assert_eq!(kind(&error), kind(&without_stagger), "{adapter:?}");
        assert_eq!(logged.len(), 1, "{adapter:?}: {logged:?}");
    }
}
