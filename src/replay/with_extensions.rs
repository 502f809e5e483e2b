//! [`WithExtensions`]: a `reqwest::Request` with the extensions reqwest has no room for beside it,
//! copied and judged as the request itself is.

use http::{Extensions, Method};

use crate::attempt::{Attempt, RetryInfo};
use crate::classify::{AsError, RequestView};
use crate::engine::overrides::Overrides;
use crate::engine::policy::RetryPolicy;
use crate::judge::{judge, record};
use crate::replay::http_replay::{rebuild_reqwest, reqwest_view};
use crate::replay::{HttpReplay, Judge, NextAttempt, Recorded, Replay, Sent};

/// A `reqwest::Request` with extensions of its own beside it, for [`RetryLayer`] over
/// `reqwest::Client`: where the layer reads the request's own settings ([`Overrides`]) and tells
/// the layers beneath which resend an attempt is ([`ResendCount`]).
///
/// reqwest keeps a `reqwest::Request`'s extensions to itself (a layer can read them only by turning
/// the request into an `http::Request` and back, a URL parsed each way), so the tower layer cannot
/// read what a request carries there, as it reads an `http::Request`'s. Send a `WithExtensions`
/// instead: `reqwest::Client` takes it as it takes the request (the extensions stay behind), and so
/// does any stack of generic layers over the client. A plain `reqwest::Request` still goes as ever,
/// and pays nothing for this.
///
/// ```no_run
/// use stagger::tower::WithExtensions;
/// use stagger::{Overrides, RetryLayer, RetryPolicy};
/// use tower::{ServiceBuilder, ServiceExt};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let client = ServiceBuilder::new()
///     .layer(RetryLayer::new(RetryPolicy::default()))
///     .service(reqwest::Client::new());
///
/// // A health check: one attempt, whatever the policy says.
/// let request = reqwest::Request::new(reqwest::Method::GET, "http://localhost:8080/health".parse()?);
/// let check = WithExtensions::new(request).with_extension(Overrides::no_retries());
/// let response = client.oneshot(check).await?;
/// # Ok(())
/// # }
/// ```
///
/// A layer beneath the retry layer (tracing, say) sees each attempt's `WithExtensions`, and in its
/// extensions the [`ResendCount`] of every attempt after the first.
///
/// [`RetryLayer`]: crate::RetryLayer
/// [`ResendCount`]: crate::ResendCount
#[derive(Debug)]
pub struct WithExtensions {
    request: reqwest::Request,
    extensions: Extensions,
}

impl From<reqwest::Request> for WithExtensions {
    fn from(request: reqwest::Request) -> Self {
        Self::new(request)
    }
}

impl WithExtensions {
    /// `request`, with no extensions yet.
    pub fn new(request: reqwest::Request) -> Self {
        Self::from_parts(request, Extensions::new())
    }

    /// `request`, with `extensions`.
    pub fn from_parts(request: reqwest::Request, extensions: Extensions) -> Self {
        Self {
            request,
            extensions,
        }
    }

    /// The request, with `value` put in its extensions (in place of any of its type).
    ///
    /// ```
    /// use std::time::Duration;
    /// use stagger::Overrides;
    /// use stagger::tower::WithExtensions;
    ///
    /// let request = reqwest::Request::new(reqwest::Method::GET, "http://api.test/".parse().unwrap());
    /// let quick = Overrides::builder().deadline(Duration::from_secs(2)).build().unwrap();
    /// let request = WithExtensions::new(request).with_extension(quick);
    /// assert_eq!(request.extensions().get::<Overrides>(), Some(&quick));
    /// ```
    #[must_use]
    pub fn with_extension<T: Clone + Send + Sync + 'static>(mut self, value: T) -> Self {
        self.extensions.insert(value);
        self
    }

    /// The request.
    pub fn request(&self) -> &reqwest::Request {
        &self.request
    }

    /// The request, to change.
    pub fn request_mut(&mut self) -> &mut reqwest::Request {
        &mut self.request
    }

    /// Its extensions.
    pub fn extensions(&self) -> &Extensions {
        &self.extensions
    }

    /// Its extensions, to change.
    pub fn extensions_mut(&mut self) -> &mut Extensions {
        &mut self.extensions
    }

    /// The request and its extensions.
    pub fn into_parts(self) -> (reqwest::Request, Extensions) {
        (self.request, self.extensions)
    }
}

/// As `reqwest::Request` itself, the extensions copied with it, read for the request's
/// [`Overrides`], and given each resend's [`ResendCount`](crate::ResendCount).
impl Replay<WithExtensions> for HttpReplay {
    type Kept = (Method, reqwest::Url);

    fn clone_request(&self, request: &WithExtensions) -> Option<WithExtensions> {
        Some(WithExtensions {
            request: self.clone_request(&request.request)?,
            extensions: request.extensions.clone(),
        })
    }

    fn keep(&self, request: &WithExtensions) -> (Method, reqwest::Url) {
        self.keep(&request.request)
    }

    fn view<'a>(
        &self,
        request: Sent<'a, WithExtensions, (Method, reqwest::Url)>,
    ) -> Option<RequestView<'a>> {
        Some(view_of(request))
    }

    fn start_recording(
        &self,
        request: &mut WithExtensions,
        limit: usize,
    ) -> Option<Recorded<WithExtensions>> {
        let recorded = self.start_recording(&mut request.request, limit)?;
        Some(Recorded {
            template: WithExtensions {
                request: recorded.template,
                extensions: request.extensions.clone(),
            },
            recorder: recorded.recorder,
            unread: recorded.unread,
            #[cfg(feature = "tonic")]
            tonic_unread: recorded.tonic_unread,
        })
    }

    fn rebuild(&self, recorded: &Recorded<WithExtensions>) -> Option<WithExtensions> {
        let template = &recorded.template;
        Some(WithExtensions {
            request: rebuild_reqwest(&template.request, &recorded.recorder, &recorded.unread)?,
            extensions: template.extensions.clone(),
        })
    }

    fn before_send(&self, request: &mut WithExtensions, attempt: NextAttempt<'_>) {
        if let Some(count) = attempt.resend_count() {
            request.extensions.insert(count);
        }
    }

    fn overrides(&self, request: &WithExtensions) -> Option<Overrides> {
        request.extensions.get().copied()
    }
}

impl<E: AsError> Judge<WithExtensions, reqwest::Response, E> for HttpReplay {
    fn judge(
        &self,
        policy: &RetryPolicy,
        request: Sent<'_, WithExtensions, (Method, reqwest::Url)>,
        result: &Result<reqwest::Response, E>,
    ) -> Attempt {
        judge(policy, &view_of(request), result)
    }

    fn report(response: &mut reqwest::Response, info: RetryInfo) {
        record(response, info);
    }

    fn status(&self, response: &reqwest::Response) -> Option<http::StatusCode> {
        Some(response.status())
    }
}

/// The view of the request a `WithExtensions` carries.
fn view_of(request: Sent<'_, WithExtensions, (Method, reqwest::Url)>) -> RequestView<'_> {
    reqwest_view(match request {
        Sent::Copy(copy) => Sent::Copy(&copy.request),
        Sent::Kept(kept) => Sent::Kept(kept),
    })
}
