//! Streaming POST bodies (`reqwest::Body::wrap_stream`, which cannot be copied) answered `503` by a
//! backend behind nginx that reads every body whole: one that fits the replay buffer (64 KiB by
//! default) is sent again byte for byte, one that does not is sent once and its `503` handed back.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Response, StatusCode};
use reqwest::Method;
use std::time::Duration;

use stagger::{Backoff, RetryPolicy, StopReason};

use super::client::Adapter;
use super::nginx::{self, Nginx};
use super::upstream::{Backend, handler};

/// What the backend received: per request id, each body's length and hash.
type Received = Arc<Mutex<Vec<(String, usize, u64)>>>;

fn hash(bytes: &[u8]) -> u64 {
    // SipHash with fixed keys: the same bytes hash the same in the client and the backend.
    let mut hasher = DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

/// `size` bytes in chunks of 1 KiB, each chunk's bytes its own.
fn chunks(size: usize) -> Vec<Bytes> {
    (0..size / 1024)
        .map(|n| Bytes::from(vec![(n % 251) as u8; 1024]))
        .collect()
}

fn streaming(size: usize) -> reqwest::Body {
    let chunks = chunks(size).into_iter().map(Ok::<_, std::io::Error>);
    reqwest::Body::wrap_stream(futures::stream::iter(chunks))
}

pub(crate) async fn a_streaming_body_answered_503_is_replayed_within_the_buffer_and_sent_once_past_it()
 {
    let received = Received::default();
    let record = Arc::clone(&received);
    let backend = Backend::start(handler(move |request: hyper::Request<_>| {
        let record = Arc::clone(&record);
        async move {
            let id = request.headers()["x-request-id"]
                .to_str()
                .unwrap()
                .to_owned();
            let body = request.into_body().collect().await.unwrap().to_bytes();
            record.lock().unwrap().push((id, body.len(), hash(&body)));
            let mut busy = Response::new(Full::new(Bytes::from("busy")));
            *busy.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            busy
        }
    }))
    .await;
    // nginx reads each body whole before passing it on (its default), and takes up to 4 MiB.
    let nginx = Nginx::start(&format!(
        "client_max_body_size 4m; location / {{ proxy_pass http://{}; }}",
        backend.addr()
    ))
    .await;
    const SMALL: usize = 10 * 1024;
    const LARGE: usize = 1024 * 1024;
    let calls = Adapter::BOTH.map(|adapter| {
        let url = nginx.url("/upload");
        async move {
            // Retries 20 ms apart, three of them: what is tested is what each attempt sends.
            let policy = RetryPolicy::builder()
                .backoff(Backoff::fixed(Duration::from_millis(20)))
                .max_retries(3)
                .build()
                .unwrap();
            let client = adapter.client(policy);
            let post = |size: usize| {
                client
                    .request(Method::POST, &url)
                    .header("x-request-id", format!("{adapter:?}-{size}"))
                    .body(streaming(size))
            };
            let small = client.send(post(SMALL)).await;
            let large = client.send(post(LARGE)).await;
            (small, large)
        }
    });
    let calls = futures::future::join_all(calls).await;
    let log = nginx.access_log();
    let received = received.lock().unwrap().clone();

    for (adapter, (small, large)) in Adapter::BOTH.into_iter().zip(calls) {
        let bodies = |size: usize| -> Vec<(usize, u64)> {
            let id = format!("{adapter:?}-{size}");
            received
                .iter()
                .filter(|(seen, ..)| *seen == id)
                .map(|&(_, len, hash)| (len, hash))
                .collect()
        };
        eprintln!(
            "streaming 503 {adapter:?}: 10 KiB {} (backend got {} bodies, nginx logged {}); \
             1 MiB {} (backend got {} bodies)",
            small.summary(),
            bodies(SMALL).len(),
            nginx::of(&log, &format!("{adapter:?}-{SMALL}")).len(),
            large.summary(),
            bodies(LARGE).len(),
        );
        let sent = (SMALL, hash(&chunks(SMALL).concat()));
        assert_eq!(
            small.status(),
            Some(503),
            "{adapter:?}: {}",
            small.summary()
        );
        let attempts = small.info.attempts() as usize;
        assert!(attempts > 1, "{adapter:?}: {}", small.summary());
        assert_eq!(bodies(SMALL), vec![sent; attempts], "{adapter:?}");

        let sent = (LARGE, hash(&chunks(LARGE).concat()));
        assert_eq!(large.info.attempts(), 1, "{adapter:?}: {}", large.summary());
        assert_eq!(
            large.stop_reason(),
            StopReason::NotReplayable,
            "{adapter:?}"
        );
        assert_eq!(bodies(LARGE), [sent], "{adapter:?}");
        let response = large.result.expect("the 503");
        assert_eq!(response.status(), 503, "{adapter:?}");
        assert_eq!(response.text().await.unwrap(), "busy", "{adapter:?}");
    }
}
