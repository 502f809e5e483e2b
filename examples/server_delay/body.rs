//! A delay in a JSON error body, read once.
//!
//! Google's REST APIs put `google.rpc.RetryInfo` in the body of a `429` or `503`:
//!
//! ```json
//! {"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
//!            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "41.7s"}]}}
//! ```
//!
//! Where the body is, and where it is not: a classifier sees a response's status, headers and
//! extensions, never its body, which has not been read when the attempt is judged (and may never be,
//! if the caller does not read it). What can read it is a layer *below* the retry layer, which runs
//! once per attempt: here a reqwest-middleware `Middleware` placed after `RetryMiddleware` (with tower,
//! a layer between `RetryLayer` and the client, mapping the response's body the same way). It reads a
//! small JSON body of a failed response once, keeps the bytes, hands the response on with the same
//! body, so the caller still reads it, and leaves the delay it found in the response's extensions,
//! where the classifier reads it and names it with `Outcome::RetryAfter`. A layer *above* the retry
//! layer sees only the last response, too late. gRPC needs none of this: a status's `RetryInfo`
//! travels in `grpc-status-details-bin`, a header stagger reads itself.

use std::time::Duration;

use http::{Extensions, StatusCode};
use http_body_util::BodyExt;
use reqwest::ResponseBuilderExt;
use reqwest_middleware::{Middleware, Next};
use stagger::classify::{AttemptResult, ClassifyHttp, DefaultClassifier, RequestView};
use stagger::{Outcome, Reason};

/// What [`ReadRetryDelay`] found in a response's body: `google.rpc.RetryInfo`'s `retryDelay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyRetryDelay(pub Duration);

/// Reads the JSON body of a `429` or `503`, up to [`ReadRetryDelay::LIMIT`] bytes, and hands the
/// response on with the same body and, when the body names one, a [`BodyRetryDelay`] in its
/// extensions. Placed after `RetryMiddleware`, it runs on every attempt.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadRetryDelay;

impl ReadRetryDelay {
    /// Larger bodies, or bodies of unknown length, are passed on unread.
    pub const LIMIT: u64 = 64 * 1024;
}

#[async_trait::async_trait]
impl Middleware for ReadRetryDelay {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let response = next.run(request, extensions).await?;
        let refused = matches!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
        );
        let is_json = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|value| value.as_bytes().starts_with(b"application/json"));
        let small = response.content_length().is_some_and(|n| n <= Self::LIMIT);
        if !refused || !is_json || !small {
            return Ok(response);
        }
        // Take the response apart, read its body once, and put it back together with the same bytes.
        let url = response.url().clone();
        let (parts, body) = http::Response::<reqwest::Body>::from(response).into_parts();
        let body = body
            .collect()
            .await
            .map_err(reqwest_middleware::Error::middleware)?
            .to_bytes();
        let delay = retry_delay(&body);
        let mut rebuilt = http::Response::builder()
            .status(parts.status)
            .version(parts.version)
            .url(url);
        if let Some(headers) = rebuilt.headers_mut() {
            *headers = parts.headers;
        }
        if let Some(found) = rebuilt.extensions_mut() {
            *found = parts.extensions;
            if let Some(delay) = delay {
                found.insert(BodyRetryDelay(delay));
            }
        }
        let rebuilt = rebuilt
            .body(reqwest::Body::from(body))
            .map_err(reqwest_middleware::Error::middleware)?;
        Ok(reqwest::Response::from(rebuilt))
    }
}

/// `retryDelay` of the first `google.rpc.RetryInfo` in a Google-style JSON error body: a protobuf
/// `Duration` in JSON, decimal seconds followed by `s` (`"41.7s"`). `None` for a body that is not
/// JSON, has no `RetryInfo`, or a delay that is negative or not a number.
pub fn retry_delay(body: &[u8]) -> Option<Duration> {
    let json: serde_json::Value = serde_json::from_slice(body).ok()?;
    let details = json.pointer("/error/details")?.as_array()?;
    let info = details.iter().find(|detail| {
        detail["@type"].as_str() == Some("type.googleapis.com/google.rpc.RetryInfo")
    })?;
    let seconds: f64 = info["retryDelay"]
        .as_str()?
        .strip_suffix('s')?
        .parse()
        .ok()?;
    Duration::try_from_secs_f64(seconds).ok()
}

/// The default rules, and the delay [`ReadRetryDelay`] found in a body as the retry's delay.
#[derive(Debug, Clone, Copy, Default)]
pub struct BodyDelays;

impl ClassifyHttp for BodyDelays {
    fn classify(&self, request: &RequestView<'_>, result: &AttemptResult<'_>) -> Outcome {
        if let AttemptResult::Response {
            status, extensions, ..
        } = result
            && let Some(BodyRetryDelay(delay)) = extensions.get::<BodyRetryDelay>()
        {
            return Outcome::RetryAfter(Reason::Status(*status), *delay);
        }
        DefaultClassifier.classify(request, result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_info_s_delay_is_read_from_a_google_error_body() {
        let body = br#"{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "details": [
            {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED"},
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "41.7s"}]}}"#;
        assert_eq!(retry_delay(body), Some(Duration::from_millis(41_700)));
        for other in [
            &b"not json"[..],
            br#"{"error": {"code": 429}}"#,
            br#"{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "-1s"}]}}"#,
            br#"{"error": {"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "soon"}]}}"#,
        ] {
            assert_eq!(retry_delay(other), None, "{}", String::from_utf8_lossy(other));
        }
    }
}
