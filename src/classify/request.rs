//! What a classifier sees: the request ([`RequestView`]) and what its attempt produced
//! ([`AttemptResult`]).

use std::error::Error;
use std::fmt;

use http::{Extensions, HeaderMap, Method, StatusCode, Uri};

use crate::classify::grpc::{GrpcCodes, GrpcName, GrpcRules};

/// The parts of a request a classifier may look at: its method, where it goes, and its headers.
///
/// After the last attempt a request can have, the adapters no longer hold it (no copy is kept for an
/// attempt that can never be retried): the view then has the method and the target but no headers, and
/// the classification only decides what [`RetryInfo`](crate::RetryInfo) reports.
///
/// ```
/// use http::{HeaderMap, Method, Uri};
/// use stagger::classify::RequestView;
///
/// let uri = Uri::from_static("https://api.example.com/items?page=2");
/// let headers = HeaderMap::new();
/// let view = RequestView::new(&Method::GET, &uri, &headers);
/// assert_eq!(view.method(), Method::GET);
/// assert_eq!(view.host(), Some("api.example.com"));
/// assert_eq!(view.path(), Some("/items"));
/// assert!(view.is_idempotent());
/// assert_eq!(view.to_string(), "GET https://api.example.com/items?page=2");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    method: &'a Method,
    target: Target<'a>,
    headers: Option<&'a HeaderMap>,
    /// Where tonic names a call's method (`tonic::GrpcMethod`), when the adapter has the request.
    extensions: Option<&'a Extensions>,
    /// The gRPC rules of the policy judging the request, which the default classifier applies.
    grpc_rules: Option<&'a GrpcRules>,
}

#[derive(Debug, Clone, Copy)]
enum Target<'a> {
    Uri(&'a Uri),
    #[cfg(feature = "reqwest")]
    Url(&'a reqwest::Url),
}

impl<'a> RequestView<'a> {
    /// A view of an `http` request's method, URI and headers.
    ///
    /// ```
    /// use stagger::classify::RequestView;
    ///
    /// let request = http::Request::delete("http://example.com/items/7").body(()).unwrap();
    /// let view = RequestView::new(request.method(), request.uri(), request.headers());
    /// assert_eq!(view.path(), Some("/items/7"));
    /// ```
    pub const fn new(method: &'a Method, uri: &'a Uri, headers: &'a HeaderMap) -> Self {
        Self {
            method,
            target: Target::Uri(uri),
            headers: Some(headers),
            extensions: None,
            grpc_rules: None,
        }
    }

    /// A view of a `reqwest` request.
    ///
    /// ```
    /// use reqwest::{Method, Url};
    /// use stagger::classify::RequestView;
    ///
    /// let url = Url::parse("https://example.com/items/7").unwrap();
    /// let request = reqwest::Request::new(Method::PUT, url);
    /// let view = RequestView::from_reqwest(&request);
    /// assert_eq!((view.host(), view.path()), (Some("example.com"), Some("/items/7")));
    /// assert!(view.is_idempotent());
    /// ```
    #[cfg(feature = "reqwest")]
    pub fn from_reqwest(request: &'a reqwest::Request) -> Self {
        Self {
            method: request.method(),
            target: Target::Url(request.url()),
            headers: Some(request.headers()),
            extensions: None,
            grpc_rules: None,
        }
    }

    /// A view of a `reqwest` request sent without a copy: its method and target, kept for judging and
    /// logging, but not its headers (a reqwest URL always names its host).
    #[cfg(feature = "reqwest")]
    pub(crate) const fn reqwest_without_headers(method: &'a Method, url: &'a reqwest::Url) -> Self {
        Self {
            method,
            target: Target::Url(url),
            headers: None,
            extensions: None,
            grpc_rules: None,
        }
    }

    /// The same view, with the request's extensions: where a tonic client names the gRPC method it
    /// calls (`tonic::GrpcMethod`, which generated clients put there), read by
    /// [`grpc_method`](Self::grpc_method). The adapters give it for the requests they hold.
    ///
    /// ```
    /// use stagger::classify::RequestView;
    ///
    /// let request = http::Request::get("http://example.com/").body(()).unwrap();
    /// let view = RequestView::new(request.method(), request.uri(), request.headers())
    ///     .with_extensions(request.extensions());
    /// # let _ = view;
    /// ```
    pub const fn with_extensions(mut self, extensions: &'a Extensions) -> Self {
        self.extensions = Some(extensions);
        self
    }

    /// The same view, judged under a policy's gRPC rules.
    pub(crate) const fn with_grpc_rules(mut self, rules: &'a GrpcRules) -> Self {
        self.grpc_rules = Some(rules);
        self
    }

    /// The request's method.
    ///
    /// ```
    /// # use stagger::classify::RequestView;
    /// let request = http::Request::post("http://example.com/orders").body(()).unwrap();
    /// let view = RequestView::new(request.method(), request.uri(), request.headers());
    /// assert_eq!(view.method(), http::Method::POST);
    /// ```
    pub const fn method(&self) -> &'a Method {
        self.method
    }

    /// The path of the request's target, if known: without the query.
    ///
    /// ```
    /// # use stagger::classify::RequestView;
    /// let request = http::Request::get("http://example.com/search?q=stagger").body(()).unwrap();
    /// let view = RequestView::new(request.method(), request.uri(), request.headers());
    /// assert_eq!(view.path(), Some("/search"));
    /// ```
    pub fn path(&self) -> Option<&'a str> {
        match self.target {
            Target::Uri(uri) => Some(uri.path()),
            #[cfg(feature = "reqwest")]
            Target::Url(url) => Some(url.path()),
        }
    }

    /// The host of the request's target, if known: the URI's, or, for a request in origin form (a
    /// bare path, as hyper's connection API sends), its `Host` header's. `None` without either. As
    /// written: host names are compared without regard to case elsewhere in stagger (RFC 9110 §4.2.3).
    ///
    /// ```
    /// # use stagger::classify::RequestView;
    /// let absolute = http::Request::get("http://example.com:8080/items").body(()).unwrap();
    /// let view = RequestView::new(absolute.method(), absolute.uri(), absolute.headers());
    /// assert_eq!(view.host(), Some("example.com"));
    ///
    /// let origin_form = http::Request::get("/items").header("host", "api.example.com:8443").body(()).unwrap();
    /// let view = RequestView::new(origin_form.method(), origin_form.uri(), origin_form.headers());
    /// assert_eq!((view.host(), view.port()), (Some("api.example.com"), Some(8443)));
    ///
    /// let bare = http::Request::get("/items").body(()).unwrap();
    /// let view = RequestView::new(bare.method(), bare.uri(), bare.headers());
    /// assert_eq!(view.host(), None);
    /// ```
    pub fn host(&self) -> Option<&'a str> {
        match self.target {
            Target::Uri(uri) => uri
                .host()
                .or_else(|| self.host_header().map(|(host, _)| host)),
            #[cfg(feature = "reqwest")]
            Target::Url(url) => url.host_str(),
        }
    }

    /// Whatever names the request's target, as sent, cheap to read: the URI's authority (port and
    /// any user info included), else the `Host` header's bytes; the URL's host. Not a host name:
    /// for hashing what is known of a request's host without parsing it.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) fn target_bytes(&self) -> &'a [u8] {
        match self.target {
            Target::Uri(uri) => match uri.authority() {
                Some(authority) => authority.as_str().as_bytes(),
                None => self
                    .headers
                    .and_then(|headers| headers.get(http::header::HOST))
                    .map_or(&[], |value| value.as_bytes()),
            },
            #[cfg(feature = "reqwest")]
            Target::Url(url) => url.host_str().unwrap_or_default().as_bytes(),
        }
    }

    /// The target's authority as written (`host` or `host:port`), when the target is an absolute URI
    /// (or a reqwest `Url` with no user or password): a cheap first look before the host is parsed.
    pub(crate) fn authority(&self) -> Option<&'a str> {
        match self.target {
            Target::Uri(uri) => uri.authority().map(http::uri::Authority::as_str),
            #[cfg(feature = "reqwest")]
            Target::Url(url) => Some(url.authority()).filter(|a| !a.contains('@')),
        }
    }

    /// The `Host` header, split into its host and port, for a target without an authority.
    fn host_header(&self) -> Option<(&'a str, Option<u16>)> {
        let value = self.headers?.get(http::header::HOST)?.to_str().ok()?;
        let authority: http::uri::Authority = value.parse().ok()?;
        // The parsed authority borrows nothing from `value`: find its host in the header itself.
        let host = authority.host();
        let start = value.find(host)?;
        Some((&value[start..start + host.len()], authority.port_u16()))
    }

    /// The port of the request's target: the one it names, or its scheme's (80 for `http`, 443 for
    /// `https`), or, in origin form, the one its `Host` header names; `None` if none is known.
    ///
    /// ```
    /// # use stagger::classify::RequestView;
    /// let request = http::Request::get("https://example.com/items").body(()).unwrap();
    /// let view = RequestView::new(request.method(), request.uri(), request.headers());
    /// assert_eq!(view.port(), Some(443));
    ///
    /// let request = http::Request::get("http://example.com:8080/items").body(()).unwrap();
    /// let view = RequestView::new(request.method(), request.uri(), request.headers());
    /// assert_eq!(view.port(), Some(8080));
    /// ```
    pub fn port(&self) -> Option<u16> {
        match self.target {
            Target::Uri(uri) if uri.host().is_none() => self.host_header()?.1,
            Target::Uri(uri) => uri.port_u16().or_else(|| match uri.scheme_str() {
                Some("http") => Some(80),
                Some("https") => Some(443),
                _ => None,
            }),
            #[cfg(feature = "reqwest")]
            Target::Url(url) => url.port_or_known_default(),
        }
    }

    /// The request's headers, if known.
    ///
    /// ```
    /// # use stagger::classify::RequestView;
    /// let request = http::Request::get("http://example.com/")
    ///     .header("x-tenant", "acme")
    ///     .body(())
    ///     .unwrap();
    /// let view = RequestView::new(request.method(), request.uri(), request.headers());
    /// assert_eq!(view.headers().unwrap()["x-tenant"], "acme");
    /// ```
    pub const fn headers(&self) -> Option<&'a HeaderMap> {
        self.headers
    }

    /// Whether sending the request twice has the effect of sending it once: `GET`, `HEAD`, `OPTIONS`,
    /// `TRACE`, `PUT` and `DELETE` (RFC 9110 §9.2.2), or any request carrying an `Idempotency-Key` header.
    ///
    /// ```
    /// use stagger::classify::{IDEMPOTENCY_KEY, RequestView};
    ///
    /// let is_idempotent = |request: &http::Request<()>| {
    ///     RequestView::new(request.method(), request.uri(), request.headers()).is_idempotent()
    /// };
    /// let put = http::Request::put("http://example.com/items/7").body(()).unwrap();
    /// let post = http::Request::post("http://example.com/orders").body(()).unwrap();
    /// let keyed = http::Request::post("http://example.com/orders")
    ///     .header(IDEMPOTENCY_KEY, "order-7f3a")
    ///     .body(())
    ///     .unwrap();
    /// assert!(is_idempotent(&put));
    /// assert!(!is_idempotent(&post));
    /// assert!(is_idempotent(&keyed));
    /// ```
    pub fn is_idempotent(&self) -> bool {
        matches!(
            *self.method,
            Method::GET
                | Method::HEAD
                | Method::OPTIONS
                | Method::TRACE
                | Method::PUT
                | Method::DELETE
        ) || self
            .headers
            .is_some_and(|h| h.contains_key(IDEMPOTENCY_KEY))
    }
}

impl<'a> RequestView<'a> {
    /// The gRPC method the request calls, if it is a gRPC request: a `POST` whose `content-type` is
    /// `application/grpc…`. Its name is the one tonic gives it (the `tonic::GrpcMethod` among the
    /// request's extensions, which generated clients set; feature `tonic`), or else the last two
    /// segments of the request's path, so that a call sent under a path prefix (`Grpc::with_origin`
    /// with `http://gateway/grpc`) names its method all the same. `None` for any other request, and
    /// for a request sent without a copy whose headers were not kept.
    ///
    /// ```
    /// use stagger::classify::{GrpcName, RequestView};
    ///
    /// let call = http::Request::post("http://gateway/grpc/helloworld.Greeter/SayHello")
    ///     .header("content-type", "application/grpc")
    ///     .body(())
    ///     .unwrap();
    /// let view = RequestView::new(call.method(), call.uri(), call.headers());
    /// assert_eq!(view.grpc_method(), GrpcName::parse("/helloworld.Greeter/SayHello"));
    /// ```
    pub fn grpc_method(&self) -> Option<GrpcName<'a>> {
        // A gRPC call is a `POST`: a look at the method spares the header lookup of every other one.
        if *self.method != Method::POST || !crate::classify::grpc::is_grpc(self.headers?) {
            return None;
        }
        #[cfg(feature = "tonic")]
        if let Some(named) = self
            .extensions
            .and_then(|extensions| extensions.get::<tonic::GrpcMethod<'static>>())
        {
            return GrpcName::of(named.service(), named.method());
        }
        GrpcName::from_path(self.path()?)
    }

    /// The gRPC status codes the policy judging this request retries for its method; the default
    /// codes for a view made by hand, which no policy's rules are attached to.
    pub(crate) fn grpc_codes(&self) -> GrpcCodes {
        match self.grpc_rules {
            Some(rules) => rules.codes_of(self.grpc_method()),
            None => GrpcCodes::DEFAULT,
        }
    }
}

impl fmt::Display for RequestView<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.target {
            Target::Uri(uri) => write!(f, "{} {uri}", self.method),
            #[cfg(feature = "reqwest")]
            Target::Url(url) => write!(f, "{} {url}", self.method),
        }
    }
}

/// The `Idempotency-Key` header (IETF draft `httpapi-idempotency-key-header`).
///
/// A `POST` that failed in a way the server may have acted on (a `502`, a timeout, a reset) is sent
/// again only when it carries this header, which lets the server recognise the repeat. Against a server
/// that answers `502` once, then `200`:
///
/// ```
/// # #[cfg(feature = "tower")]
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use stagger::classify::IDEMPOTENCY_KEY;
/// use stagger::{RetryInfo, StopReason};
/// # use tower::{Layer, ServiceExt};
/// # async fn send(request: http::Request<()>) -> RetryInfo {
/// #     let calls = std::sync::atomic::AtomicU32::new(0);
/// #     let server = tower::service_fn(|_: http::Request<()>| {
/// #         let first = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
/// #         let response = http::Response::builder().status(if first { 502 } else { 200 });
/// #         async move { Ok::<_, std::convert::Infallible>(response.body(()).unwrap()) }
/// #     });
/// #     let backoff = stagger::Backoff::fixed(std::time::Duration::from_millis(10));
/// #     let policy = stagger::RetryPolicy::builder().backoff(backoff).build().unwrap();
/// #     let response = stagger::RetryLayer::new(policy).layer(server).oneshot(request).await.unwrap();
/// #     response.extensions().get::<RetryInfo>().unwrap().clone()
/// # }
///
/// let post = http::Request::post("http://example.com/orders").body(()).unwrap();
/// let info = send(post).await; // through a `RetryLayer`
/// assert_eq!((info.attempts(), info.stop_reason()), (1, Some(StopReason::NotIdempotent)));
///
/// let keyed = http::Request::post("http://example.com/orders")
///     .header(IDEMPOTENCY_KEY, "order-7f3a")
///     .body(())
///     .unwrap();
/// let info = send(keyed).await;
/// assert_eq!((info.attempts(), info.stop_reason()), (2, Some(StopReason::Success)));
/// # }
/// # #[cfg(not(feature = "tower"))]
/// # fn main() {}
/// ```
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// What an attempt produced, as a classifier sees it: a response's status and headers, or an error.
///
/// Built by the adapters; building one yourself is how a classifier is tested:
///
/// ```
/// use http::{Extensions, HeaderMap, StatusCode};
/// use stagger::classify::{AttemptResult, ClassifyHttp, DefaultClassifier, RequestView};
/// use stagger::{Outcome, Reason};
///
/// let get = http::Request::get("http://example.com/").body(()).unwrap();
/// let request = RequestView::new(get.method(), get.uri(), get.headers());
///
/// let (headers, extensions) = (HeaderMap::new(), Extensions::new());
/// let busy = AttemptResult::Response {
///     status: StatusCode::TOO_MANY_REQUESTS,
///     headers: &headers,
///     extensions: &extensions,
/// };
/// let outcome = DefaultClassifier.classify(&request, &busy);
/// assert_eq!(outcome, Outcome::RetrySafe(Reason::Status(StatusCode::TOO_MANY_REQUESTS)));
///
/// let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
/// let outcome = DefaultClassifier.classify(&request, &AttemptResult::Error(&reset));
/// assert_eq!(outcome, Outcome::RetryIfIdempotent(Reason::ConnectionClosed));
/// ```
#[derive(Debug, Clone, Copy)]
pub enum AttemptResult<'a> {
    /// The server answered.
    Response {
        /// The response's status.
        status: StatusCode,
        /// The response's headers.
        headers: &'a HeaderMap,
        /// The response's extensions: where a layer below the retry layer can leave what it read
        /// in the body (see [`from_fn`](super::from_fn)'s example), since the classifier never reads the body itself.
        extensions: &'a Extensions,
    },
    /// The attempt failed without a response.
    Error(&'a (dyn Error + 'static)),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_by_method_and_key() {
        let uri = Uri::from_static("http://example.com/");
        let empty = HeaderMap::new();
        let mut keyed = HeaderMap::new();
        keyed.insert("Idempotency-Key", "8e03978e".parse().unwrap());
        for m in [
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::TRACE,
            Method::PUT,
            Method::DELETE,
        ] {
            assert!(RequestView::new(&m, &uri, &empty).is_idempotent(), "{m}");
        }
        for m in [Method::POST, Method::PATCH, Method::CONNECT] {
            assert!(!RequestView::new(&m, &uri, &empty).is_idempotent(), "{m}");
            assert!(RequestView::new(&m, &uri, &keyed).is_idempotent(), "{m}");
        }
    }
}
