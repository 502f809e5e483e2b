//! Calls refused unsent (their host down): a loop of them does not keep its thread, each refusal
//! spending a unit of the task's cooperative budget as a request would in its socket, so that the
//! tasks beside the loop run (the one whose probe would find the host back among them). The same
//! through the tower layer is in `tests/refusal.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use stagger::{Rejected, StopReason};

use super::*;

#[tokio::test]
async fn a_loop_of_calls_refused_at_once_lets_the_tasks_beside_it_run() {
    // The defaults (a host found down holds its requests 10 s, then refuses them at once), with the
    // host marked down by hand, which refuses them at once from the start.
    let policy = RetryPolicy::builder().build().unwrap();
    assert!(policy.mark_down("api.test"));
    let hits = Arc::new(AtomicU32::new(0));
    let client = ClientBuilder::new(reqwest::Client::new())
        .with(RetryMiddleware::new(policy))
        .with(common::Answering {
            status: 200,
            hits: Arc::clone(&hits),
        })
        .build();
    let calls = common::refused_before_a_neighbour_runs(|| {
        let call = client.get("http://api.test/").send();
        async move {
            let error = call.await.unwrap_err();
            let rejected = match &error {
                reqwest_middleware::Error::Middleware(error) => error.downcast_ref::<Rejected>(),
                reqwest_middleware::Error::Reqwest(_) => None,
            };
            rejected.is_some_and(|rejected| {
                let info = rejected.info();
                info.stop_reason() == Some(StopReason::HostDown) && info.attempts() == 0
            })
        }
    })
    .await;
    assert!(calls <= common::YIELDS_WITHIN, "{calls}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was sent");
}
