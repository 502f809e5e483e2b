//! [`ChaosMiddleware`]: fault injection in a reqwest-middleware chain (feature `reqwest-middleware`).

use std::future::Future;
use std::pin::Pin;

use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

use super::fault::Action;
use super::handle::Chaos;
use super::layer::{answer_reqwest, injected_io};
use crate::classify::RequestView;
use crate::time::{Sleeping, after};

/// Injects the faults of a [`Chaos`] into the requests that pass it in a reqwest-middleware chain.
///
/// Added after [`RetryMiddleware`](crate::RetryMiddleware) (`.with(retry).with(chaos)`), it is
/// beneath the retries: each attempt meets the rules. Added before, it is above them: the caller
/// meets the fault as the call's result.
///
/// An injected answer is a `reqwest::Response` whose `url()` is the request's; an injected error is
/// a `reqwest_middleware::Error::Middleware` holding an `io::Error` of the fault's kind, which the
/// default classifier reads as it reads the real fault's `reqwest::Error` (a refusal: a connect
/// error, safe to retry), with an [`InjectedFault`](crate::chaos::InjectedFault) inside it.
/// `reqwest::Error` has no public constructor: code of the caller's that asks
/// `reqwest::Error::is_connect()` sees a middleware error instead.
///
/// Off ([`Chaos::set_enabled`]), a request costs one atomic load and is handed to the rest of the
/// chain as it came, no allocation of its own.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use http::StatusCode;
/// use reqwest_middleware::ClientBuilder;
/// use stagger::chaos::{Chaos, ChaosMiddleware, Fault, Rule};
/// use stagger::{RetryMiddleware, RetryPolicy, RetryReport, StopReason};
///
/// let chaos = Chaos::new(Rule::always(Fault::status(StatusCode::SERVICE_UNAVAILABLE)));
/// let client = ClientBuilder::new(reqwest::Client::new())
///     .with(RetryMiddleware::new(RetryPolicy::builder().max_retries(2).build().unwrap()))
///     .with(ChaosMiddleware::new(chaos.clone())) // beneath the retries: no request leaves
///     .build();
/// let report = RetryReport::new();
/// let response = client
///     .get("http://upstream.invalid/prices")
///     .with_extension(report.clone())
///     .send()
///     .await
///     .unwrap();
/// assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
/// assert_eq!(report.get().unwrap().stop_reason(), Some(StopReason::MaxRetries));
/// assert_eq!(chaos.counts().answers(), 3);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ChaosMiddleware {
    chaos: Chaos,
}

impl ChaosMiddleware {
    /// A middleware injecting `chaos`'s faults (a clone of it: the same rules, switch and counts).
    pub const fn new(chaos: Chaos) -> Self {
        Self { chaos }
    }

    /// Its chaos.
    pub const fn chaos(&self) -> &Chaos {
        &self.chaos
    }
}

/// What a middleware's `handle` returns: its answer, to come.
type Answer<'f> = Pin<Box<dyn Future<Output = reqwest_middleware::Result<Response>> + Send + 'f>>;

/// Written out rather than with `#[async_trait]`, so that a request it lets through is handed on
/// without a future of its own; the switch is read in line, the rest is out of line.
impl Middleware for ChaosMiddleware {
    #[inline]
    fn handle<'s, 'e, 'n, 'f>(
        &'s self,
        request: Request,
        extensions: &'e mut Extensions,
        next: Next<'n>,
    ) -> Answer<'f>
    where
        's: 'f,
        'e: 'f,
        'n: 'f,
        Self: 'f,
    {
        if !self.chaos.is_enabled() {
            return next.run(request, extensions);
        }
        self.inject(request, extensions, next)
    }
}

impl ChaosMiddleware {
    /// A request while the chaos is on: the fault its rules pick, if any.
    #[inline(never)]
    fn inject<'f>(
        &'f self,
        request: Request,
        extensions: &'f mut Extensions,
        next: Next<'f>,
    ) -> Answer<'f> {
        let Some(fault) = self.chaos.pick(&RequestView::from_reqwest(&request)) else {
            return next.run(request, extensions);
        };
        Box::pin(async move {
            if !fault.delay().is_zero() {
                Sleeping::until(after(fault.delay()), None).await;
            }
            match fault.action {
                Action::Send => next.run(request, extensions).await,
                Action::Answer(answer) => Ok(answer_reqwest(request.url(), answer.response())),
                Action::Error(kind) => {
                    Err(reqwest_middleware::Error::middleware(injected_io(kind)))
                }
                Action::Hang => std::future::pending().await,
            }
        })
    }
}
