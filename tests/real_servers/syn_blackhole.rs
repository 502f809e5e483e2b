//! A host that drops the SYNs to a port (a firewall's DROP, a dead host behind a live route): the
//! connection is never refused, it just never opens. Without a connect timeout of its own, reqwest
//! waits, and stagger's attempt timeout ends the attempt: a timeout, which stagger cannot tell from one
//! that came after the request was sent, so a POST is not sent again. With reqwest's connect timeout,
//! the failure says the connection never opened: a connect error, safe to retry for any method.

use std::time::Duration;

use reqwest::Method;
use stagger::{RetryPolicy, StopReason};

use super::client::{Adapter, Call};
use super::ms;
use super::netns::Netns;

const PORT: u16 = 8080;
const ATTEMPT_TIMEOUT: Duration = ms(300);
const DEADLINE: Duration = ms(2000);
/// Room above the deadline for a loaded machine.
const SLACK: Duration = ms(500);

/// A namespace whose iptables drops every SYN to `PORT`; nothing needs to listen there.
fn blackhole() -> Netns {
    let netns = Netns::create();
    let port = PORT.to_string();
    netns.iptables(&[
        "-A", "INPUT", "-p", "tcp", "--syn", "--dport", &port, "-j", "DROP",
    ]);
    netns
}

/// A GET and a POST (without an `Idempotency-Key`) to the blackhole through each adapter, each call
/// with a policy of its own, over the `reqwest::Client` that `reqwest` makes: per adapter, the GET
/// and the POST.
async fn get_and_post(
    netns: &Netns,
    reqwest: fn() -> reqwest::ClientBuilder,
) -> Vec<(Adapter, Call, Call)> {
    let url = format!("http://{}:{PORT}/orders", netns.addr);
    // Three retries: four attempts of 300 ms (or of reqwest's 200 ms connect timeout) and their
    // backoff fit in the deadline, so that a call ends on its own failure, not cut by the deadline.
    let policy = || {
        RetryPolicy::builder()
            .attempt_timeout(ATTEMPT_TIMEOUT)
            .max_elapsed(DEADLINE)
            .max_retries(3)
            .build()
            .unwrap()
    };
    let calls = Adapter::BOTH.map(|adapter| {
        let url = url.clone();
        async move {
            let get = adapter.client_over(reqwest(), policy());
            let post = adapter.client_over(reqwest(), policy());
            let (get, post) = tokio::join!(
                get.send(get.request(Method::GET, &url)),
                post.send(post.request(Method::POST, &url).body("order"))
            );
            (adapter, get, post)
        }
    });
    let calls = futures::future::join_all(calls).await;
    for (adapter, get, post) in &calls {
        for (method, call) in [("GET", get), ("POST", post)] {
            let error = match &call.result {
                Ok(_) => "a response".to_owned(),
                Err(error) => match error.reqwest() {
                    Some(e) => format!(
                        "{} (reqwest: is_connect {}, is_timeout {})",
                        error.chain(),
                        e.is_connect(),
                        e.is_timeout()
                    ),
                    None => error.chain(),
                },
            };
            eprintln!(
                "SYN dropped {adapter:?} {method}: {} attempt(s), {}, {:?}: {error}",
                call.info.attempts(),
                call.stop_reason(),
                call.took,
            );
        }
    }
    calls
}

pub(crate) async fn behind_dropped_syns_an_attempt_timeout_ends_a_get_as_a_timeout_and_a_post_after_one_attempt()
 {
    let netns = blackhole();
    // reqwest's default: no connect timeout.
    for (adapter, get, post) in get_and_post(&netns, reqwest::Client::builder).await {
        let error = get
            .result
            .as_ref()
            .expect_err("no response through a blackhole");
        assert!(
            error.is_attempt_timeout() || error.is_deadline(),
            "{adapter:?}: the GET ends as a timeout: {}",
            error.chain()
        );
        assert!(
            get.took < DEADLINE + SLACK,
            "{adapter:?}: {}",
            get.summary()
        );
        assert_ne!(get.stop_reason(), StopReason::NotIdempotent, "{adapter:?}");

        let error = post
            .result
            .as_ref()
            .expect_err("no response through a blackhole");
        assert!(error.is_attempt_timeout(), "{adapter:?}: {}", error.chain());
        assert_eq!(post.info.attempts(), 1, "{adapter:?}: {}", post.summary());
        assert_eq!(post.stop_reason(), StopReason::NotIdempotent, "{adapter:?}");
    }
}

pub(crate) async fn behind_dropped_syns_reqwest_s_connect_timeout_is_a_connect_error_retried_for_a_post()
 {
    let netns = blackhole();
    let with_connect_timeout = || reqwest::Client::builder().connect_timeout(ms(200));
    for (adapter, get, post) in get_and_post(&netns, with_connect_timeout).await {
        for (method, call) in [("GET", &get), ("POST", &post)] {
            let error = call
                .result
                .as_ref()
                .expect_err("no response through a blackhole");
            let connect = error.reqwest().is_some_and(reqwest::Error::is_connect);
            assert!(
                connect,
                "{adapter:?} {method}: a reqwest connect error: {}",
                error.chain()
            );
            assert!(
                call.info.attempts() > 1,
                "{adapter:?} {method}: {}",
                call.summary()
            );
            assert!(
                call.took < DEADLINE + SLACK,
                "{adapter:?}: {}",
                call.summary()
            );
        }
    }
}
