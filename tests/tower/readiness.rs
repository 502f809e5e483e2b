//! Copies and readiness: no copy for the last allowed attempt, `poll_ready` driven before every retry, a
//! concurrency limit inside the layer, readiness that lags or fails, and a `Replay` that refuses a copy.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use http::StatusCode;
use stagger::StopReason;
use stagger::adapter::{Attempt, Judge, Replay, Sent};

use super::*;

/// A body whose clones are counted.
#[derive(Debug)]
struct CountingBody {
    clones: Arc<AtomicUsize>,
}

impl Clone for CountingBody {
    fn clone(&self) -> Self {
        self.clones.fetch_add(1, Ordering::SeqCst);
        Self {
            clones: Arc::clone(&self.clones),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn no_copy_is_made_for_the_last_allowed_attempt() {
    // (max_retries, attempts that fail before a 200, expected attempts, expected clones)
    let cases = [
        (2, usize::MAX, 3, 2),
        (0, usize::MAX, 1, 0),
        (5, usize::MAX, 6, 5),
        // A copy is kept before each attempt that may still be retried, whatever its outcome.
        (2, 0, 1, 1),
        (2, 1, 2, 2),
    ];
    for (max_retries, failures, attempts, clones) in cases {
        let hits = Hits::default();
        let inner = {
            let hits = hits.clone();
            service_fn(move |_: Request<CountingBody>| {
                let n = hits.hit();
                let code = if n <= failures { 503 } else { 200 };
                async move { Ok::<_, Infallible>(status(code)) }
            })
        };
        let counter = Arc::new(AtomicUsize::new(0));
        let request = Request::put("http://test.invalid/")
            .body(CountingBody {
                clones: Arc::clone(&counter),
            })
            .unwrap();
        let policy = exact(ms(10)).max_retries(max_retries).build().unwrap();

        let response = ServiceBuilder::new()
            .layer(RetryLayer::new(policy))
            .service(inner)
            .oneshot(request)
            .await
            .unwrap();

        let case = format!("max_retries {max_retries}, failures {failures}");
        assert_eq!(hits.count(), attempts, "{case}");
        assert_eq!(info(&response).attempts() as usize, attempts, "{case}");
        assert_eq!(counter.load(Ordering::SeqCst), clones, "{case}");
    }
}

#[derive(Default)]
struct Readiness {
    polls: AtomicUsize,
    calls: AtomicUsize,
}

/// A service that is not ready until its `poll_ready` has returned `Pending` once, and that panics when
/// called without a `Ready` in between; each call uses the readiness up. Clones start unready.
struct MustBeReady {
    ready: bool,
    stats: Arc<Readiness>,
}

impl Clone for MustBeReady {
    fn clone(&self) -> Self {
        Self {
            ready: false,
            stats: Arc::clone(&self.stats),
        }
    }
}

impl Service<Req> for MustBeReady {
    type Response = Res;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Res, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        let polls = self.stats.polls.fetch_add(1, Ordering::SeqCst) + 1;
        if polls % 2 == 1 {
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.ready = true;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Req) -> Self::Future {
        assert!(
            std::mem::take(&mut self.ready),
            "called without poll_ready returning Ready first"
        );
        let calls = self.stats.calls.fetch_add(1, Ordering::SeqCst) + 1;
        std::future::ready(Ok(status(if calls < 3 { 503 } else { 200 })))
    }
}

#[tokio::test(start_paused = true)]
async fn poll_ready_is_driven_to_ready_before_every_retry() {
    let stats = Arc::new(Readiness::default());
    let inner = MustBeReady {
        ready: false,
        stats: Arc::clone(&stats),
    };

    let response = send(exact(ms(10)).build().unwrap(), inner, get())
        .await
        .unwrap();

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(stats.calls.load(Ordering::SeqCst), 3);
    // A `Pending` then a `Ready` before each of the three calls.
    assert_eq!(stats.polls.load(Ordering::SeqCst), 6);
    assert_eq!(info(&response).attempts(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_concurrency_limit_inside_the_layer_holds_across_retries() {
    let hits = Hits::default();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most_in_flight = Arc::new(AtomicUsize::new(0));
    let slow = {
        let (hits, in_flight, most) = (
            hits.clone(),
            Arc::clone(&in_flight),
            Arc::clone(&most_in_flight),
        );
        service_fn(move |_: Req| {
            hits.hit();
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            let in_flight = Arc::clone(&in_flight);
            async move {
                tokio::time::sleep(ms(50)).await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Infallible>(status(503))
            }
        })
    };
    // `ConcurrencyLimit::call` panics unless `poll_ready` gave it a permit first.
    let service = ServiceBuilder::new()
        .layer(RetryLayer::new(
            exact(ms(10)).max_retries(2).build().unwrap(),
        ))
        .concurrency_limit(1)
        .service(slow);

    let (a, b) = tokio::join!(
        service.clone().oneshot(get()),
        service.clone().oneshot(get())
    );

    assert_eq!(hits.count(), 6);
    assert_eq!(most_in_flight.load(Ordering::SeqCst), 1);
    assert_eq!(info(&a.unwrap()).attempts(), 3);
    assert_eq!(info(&b.unwrap()).attempts(), 3);
}

/// Ready at once for the first call; after it, each `poll_ready` waits `lag` on the timer first.
struct LaggingReadiness {
    calls: Arc<Mutex<Vec<Instant>>>,
    lag: Duration,
    wait: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
    fail: bool,
}

impl LaggingReadiness {
    fn new(lag: Duration, fail: bool) -> (Self, Arc<Mutex<Vec<Instant>>>) {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let service = Self {
            calls: Arc::clone(&calls),
            lag,
            wait: None,
            fail,
        };
        (service, calls)
    }
}

impl Clone for LaggingReadiness {
    fn clone(&self) -> Self {
        Self {
            calls: Arc::clone(&self.calls),
            lag: self.lag,
            wait: None,
            fail: self.fail,
        }
    }
}

impl Service<Req> for LaggingReadiness {
    type Response = Res;
    type Error = io::Error;
    type Future = std::future::Ready<Result<Res, io::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), io::Error>> {
        if self.calls.lock().unwrap().is_empty() {
            return Poll::Ready(Ok(()));
        }
        if self.fail {
            return Poll::Ready(Err(io::Error::other("the service has shut down")));
        }
        let lag = self.lag;
        let wait = self
            .wait
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(lag)));
        std::task::ready!(wait.as_mut().poll(cx));
        self.wait = None;
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Req) -> Self::Future {
        self.calls.lock().unwrap().push(Instant::now());
        std::future::ready(Ok(status(503)))
    }
}

#[tokio::test(start_paused = true)]
async fn no_retry_reaches_the_service_after_the_deadline_however_slow_its_readiness() {
    // Readiness that lags past the deadline: the deadline ends the wait for it.
    let (slow, calls) = LaggingReadiness::new(Duration::from_secs(2), false);
    let policy = exact(ms(10))
        .max_elapsed(Duration::from_secs(1))
        .build()
        .unwrap();
    let start = Instant::now();

    let response = send(policy.clone(), slow, get()).await.unwrap();

    assert_eq!(start.elapsed(), Duration::from_secs(1));
    assert_eq!(calls.lock().unwrap().len(), 1);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(info(&response).attempts(), 1);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Deadline));

    // Readiness that comes exactly at the deadline: checked again before the call, and not sent.
    let (at_deadline, calls) = LaggingReadiness::new(ms(990), false);
    let response = send(policy, at_deadline, get()).await.unwrap();
    assert_eq!(calls.lock().unwrap().len(), 1);
    assert_eq!(info(&response).stop_reason(), Some(StopReason::Deadline));
}

#[tokio::test(start_paused = true)]
async fn a_readiness_error_before_a_retry_is_returned_with_what_the_retries_did() {
    let (failing, calls) = LaggingReadiness::new(Duration::ZERO, true);

    let error = send(exact(ms(10)).build().unwrap(), failing, get())
        .await
        .unwrap_err();

    assert_eq!(calls.lock().unwrap().len(), 1);
    assert_eq!(
        error.inner().unwrap().to_string(),
        "the service has shut down"
    );
    assert_eq!(error.info().attempts(), 1);
    assert_eq!(error.info().stop_reason(), Some(StopReason::NotReady));
}

/// A `Replay` that breaks its contract: it says every attempt may be replayed, copies the request for
/// the first attempt, and refuses every copy after that (or every copy, with `copies: 0`).
#[derive(Clone)]
struct BrokenReplay {
    copies: Arc<AtomicUsize>,
}

impl Replay<Req> for BrokenReplay {
    type Kept = ();

    fn clone_request(&self, request: &Req) -> Option<Req> {
        let allowed = self
            .copies
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        allowed.then(|| Request::new(request.body().clone()))
    }

    fn keep(&self, _: &Req) {}

    fn view<'a>(&self, _: Sent<'a, Req, ()>) -> Option<stagger::classify::RequestView<'a>> {
        None
    }
}

impl Judge<Req, Res, Infallible> for BrokenReplay {
    fn judge(
        &self,
        _: &RetryPolicy,
        _: Sent<'_, Req, ()>,
        result: &Result<Res, Infallible>,
    ) -> Attempt {
        let status = match result {
            Ok(response) => response.status(),
            Err(never) => match *never {},
        };
        Attempt::new(stagger::classify::DefaultClassifier::status(status)).replayable(true)
    }

    fn report(response: &mut Res, info: RetryInfo) {
        response.extensions_mut().insert(info);
    }
}

async fn send_broken(
    policy: RetryPolicy,
    copies: usize,
    hits: &Hits,
) -> Result<Res, stagger::Error<Infallible>> {
    let replay = BrokenReplay {
        copies: Arc::new(AtomicUsize::new(copies)),
    };
    stagger::tower::Retry::new(server(hits, always(503)), policy, replay)
        .oneshot(get())
        .await
}

#[tokio::test(start_paused = true)]
async fn a_replay_that_refuses_a_copy_ends_the_call_with_what_it_has_and_never_panics() {
    // It copied once, then refused the retry's copy: the 503 comes back, kept while its retry was
    // due.
    let hits = Hits::default();
    let response = send_broken(exact(ms(10)).build().unwrap(), 1, &hits)
        .await
        .unwrap();
    assert_eq!(hits.count(), 1);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        info(&response).stop_reason(),
        Some(StopReason::NotReplayable)
    );

    // Without a deadline too: what a call ends with does not depend on its time limits.
    let hits = Hits::default();
    let response = send_broken(exact(ms(10)).max_elapsed(None).build().unwrap(), 1, &hits)
        .await
        .unwrap();
    assert_eq!(hits.count(), 1);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        info(&response).stop_reason(),
        Some(StopReason::NotReplayable)
    );

    // It never copied, yet judged the attempt replayable: the adapter knows better, and sends once.
    let hits = Hits::default();
    let response = send_broken(exact(ms(10)).build().unwrap(), 0, &hits)
        .await
        .unwrap();
    assert_eq!(hits.count(), 1);
    assert_eq!(
        info(&response).stop_reason(),
        Some(StopReason::NotReplayable)
    );
}
