//! [`RetryMiddleware`] for `reqwest-middleware`.

use std::error::Error;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use crate::classify::AsError;
use crate::policy::{Decision, RetryPolicy};
use crate::replay::{Held, HttpReplay, Replay};

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

#[async_trait::async_trait]
impl Middleware for RetryMiddleware {
    async fn handle(
        &self,
        mut request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let replay = HttpReplay;
        let mut retry = self.policy.start();
        loop {
            let held =
                Held::prepare::<Response, reqwest_middleware::Error, _>(&retry, &replay, &request);
            let mut result = next.clone().run(request, extensions).await;
            let (sent, replayable) = held.sent();
            let attempt = replay.attempt(&self.policy, sent, &result, replayable);
            match retry.decide(attempt) {
                Decision::Retry(delay) => {
                    // Released before the sleep, not after it: a connection whose body was read to the end goes
                    // back to the pool now, and one whose body was not is closed now.
                    drop(result);
                    tokio::time::sleep(delay).await;
                    let Held::Copy(copy) = held else {
                        unreachable!("a retry is decided only for a request with a copy");
                    };
                    request = copy;
                }
                Decision::Stop(_) => {
                    crate::http::record(&mut result, retry.info());
                    return result;
                }
            }
        }
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
