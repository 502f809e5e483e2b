//! [`RetryMiddleware`] for `reqwest-middleware`.

use std::error::Error;
use std::future::Future;
use std::ops::ControlFlow;
use std::pin::Pin;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use crate::classify::AsError;
use crate::pause::Pause;
use crate::policy::RetryPolicy;
use crate::replay::{HttpReplay, Sent, conclude};

/// Retries the requests of a `reqwest-middleware` client, as its [`RetryPolicy`] says.
///
/// ```no_run
/// use reqwest_middleware::ClientBuilder;
/// use stagger::{RetryInfo, RetryMiddleware, RetryPolicy};
///
/// # async fn run() -> Result<(), reqwest_middleware::Error> {
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(RetryPolicy::default()))
///     .build();
/// let response = client.get("http://localhost:8080/").send().await?;
/// let attempts = response.extensions().get::<RetryInfo>().map(RetryInfo::attempts);
/// # Ok(())
/// # }
/// ```
///
/// The decisions are those of the tower [`RetryLayer`](crate::RetryLayer): the same state machine. A
/// request whose body cannot be copied (a stream) is sent once and its result returned, rather than
/// refused. When the retries stop on a response, that response is returned (`Ok`) with
/// [`RetryInfo`](crate::RetryInfo) in its extensions; when they stop on an error, it is returned as it
/// came from the rest of the chain, so `reqwest::Error::is_connect()` and `is_timeout()` still answer.
/// One retry budget is shared by every request through the middleware, and by every clone of its policy.
#[derive(Debug, Clone)]
pub struct RetryMiddleware {
    policy: RetryPolicy,
}

impl RetryMiddleware {
    /// A middleware that retries under `policy`.
    pub const fn new(policy: RetryPolicy) -> Self {
        Self { policy }
    }

    /// The policy in use.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }
}

impl RetryMiddleware {
    /// The retry loop: send, judge, and sleep or return, as the policy's state machine says.
    async fn run(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let mut retry = self.policy.start();
        // While a retry may follow, a copy is sent and the request itself is kept for the next attempt:
        // the future (boxed for every request) then stores one request, not two. After each attempt the
        // result is judged and either dropped before the pause or returned (`conclude`).
        loop {
            let attempt = match retry.may_retry().then(|| request.try_clone()).flatten() {
                Some(copy) => next.clone().run(copy, extensions),
                None => break,
            };
            let result = attempt.await;
            match conclude(&HttpReplay, &mut retry, Sent::Copy(&request), result, true) {
                ControlFlow::Continue(delay) => Pause::new(delay).await,
                ControlFlow::Break(result) => return result,
            }
        }
        // The last allowed attempt, or a request that cannot be copied (a streaming body): sent as it is,
        // and its result returned as it is.
        let method = request.method().clone();
        let result = next.run(request, extensions).await;
        match conclude(
            &HttpReplay,
            &mut retry,
            Sent::<Request, _>::Kept(&method),
            result,
            false,
        ) {
            ControlFlow::Continue(_) => {
                unreachable!("a retry is decided only for a request with a copy")
            }
            ControlFlow::Break(result) => result,
        }
    }
}

/// Written out rather than with `#[async_trait]`, whose future would hold the arguments again beside the
/// retry loop's own future.
impl Middleware for RetryMiddleware {
    fn handle<'s, 'e, 'n, 'f>(
        &'s self,
        request: Request,
        extensions: &'e mut Extensions,
        next: Next<'n>,
    ) -> Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'f>>
    where
        's: 'f,
        'e: 'f,
        'n: 'f,
        Self: 'f,
    {
        Box::pin(self.run(request, extensions, next))
    }
}

impl AsError for reqwest_middleware::Error {
    fn as_error(&self) -> &(dyn Error + 'static) {
        match self {
            reqwest_middleware::Error::Reqwest(e) => e,
            reqwest_middleware::Error::Middleware(e) => {
                let e: &(dyn Error + Send + Sync + 'static) = e.as_ref();
                e
            }
        }
    }
}
#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    static FUTURE_SIZE: AtomicUsize = AtomicUsize::new(0);

    /// Runs the retry loop as `RetryMiddleware` does, noting the size of its future.
    struct Measure(RetryMiddleware);

    #[async_trait::async_trait]
    impl Middleware for Measure {
        async fn handle(
            &self,
            request: Request,
            extensions: &mut Extensions,
            next: Next<'_>,
        ) -> reqwest_middleware::Result<Response> {
            let future = self.0.run(request, extensions, next);
            FUTURE_SIZE.store(std::mem::size_of_val(&future), Ordering::SeqCst);
            future.await
        }
    }

    fn answer_200<'a>(
        _request: Request,
        _extensions: &'a mut Extensions,
        _next: Next<'a>,
    ) -> Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'a>> {
        Box::pin(async { Ok(Response::from(http::Response::new(""))) })
    }

    /// Every request boxes this future once, so its size is paid on every request. A guard against a
    /// regression: holding the request twice (the original and its copy) and the timer inline made it
    /// 1 176 bytes and cost 339 more instructions per request (callgrind); it is 952 bytes now.
    #[tokio::test]
    async fn the_retry_loop_future_stays_small() {
        let measure = Measure(RetryMiddleware::new(crate::RetryPolicy::default()));
        let chain: Vec<Arc<dyn Middleware>> = vec![Arc::new(measure), Arc::new(answer_200)];
        let client = reqwest_middleware::ClientWithMiddleware::new(reqwest::Client::new(), chain);
        let response = client.get("http://example.invalid/").send().await;
        assert_eq!(response.expect("answered").status(), http::StatusCode::OK);
        let size = FUTURE_SIZE.load(Ordering::SeqCst);
        assert!(size <= 1024, "the retry loop's future is {size} bytes");
    }
}
