//! OpenAI's rate-limit headers, read by a classifier of one's own.
//!
//! OpenAI answers a `429` with one pair of headers per limit it keeps (requests and tokens), each
//! saying what is left and when the limit resets, the latter as a Go duration:
//!
//! ```text
//! x-ratelimit-remaining-requests: 59
//! x-ratelimit-reset-requests: 12ms
//! x-ratelimit-remaining-tokens: 0
//! x-ratelimit-reset-tokens: 6m0s
//! ```
//!
//! A retry must wait for the longest reset among the limits that are spent: here 6 minutes, since the
//! token limit is the one that refused the request; the 12 ms of the request limit, which still has
//! 59 left, say nothing. stagger does not read these headers itself (their names and their format are
//! OpenAI's), so this classifier reads them and names the delay with `Outcome::RetryAfter`, which
//! stagger then treats exactly as a `Retry-After` of that many seconds.

use std::time::Duration;

use http::{HeaderMap, StatusCode};
use stagger::classify::{AttemptResult, ClassifyHttp, DefaultClassifier, RequestView};
use stagger::{Outcome, Reason};

/// The limits OpenAI reports, each a pair of `x-ratelimit-remaining-*` and `x-ratelimit-reset-*`.
const LIMITS: [(&str, &str); 2] = [
    (
        "x-ratelimit-remaining-requests",
        "x-ratelimit-reset-requests",
    ),
    ("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"),
];

/// The default rules, and on a `429` the longest reset among OpenAI's spent limits as the retry's
/// delay.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAiRateLimits;

impl ClassifyHttp for OpenAiRateLimits {
    fn classify(&self, request: &RequestView<'_>, result: &AttemptResult<'_>) -> Outcome {
        if let AttemptResult::Response {
            status: StatusCode::TOO_MANY_REQUESTS,
            headers,
            ..
        } = result
            && let Some(delay) = spent_limits_reset(headers)
        {
            return Outcome::RetryAfter(Reason::Status(StatusCode::TOO_MANY_REQUESTS), delay);
        }
        // Anything else, a `429` without these headers included, as stagger reads it: a
        // `Retry-After` there still floors the retry.
        DefaultClassifier.classify(request, result)
    }
}

/// The longest reset among the limits with nothing left; `None` when no limit says it is spent, or
/// a spent one's reset cannot be read.
pub fn spent_limits_reset(headers: &HeaderMap) -> Option<Duration> {
    let mut longest = None;
    for (remaining, reset) in LIMITS {
        let spent = headers
            .get(remaining)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.trim() == "0");
        if !spent {
            continue;
        }
        let reset = go_duration(headers.get(reset)?.to_str().ok()?)?;
        longest = longest.max(Some(reset));
    }
    longest
}

/// A duration written as Go's `time.Duration` prints it (`12ms`, `6m0s`, `1h2m3.5s`, `0s`): one or
/// more decimal numbers, each with a unit (`ns`, `us` or `µs`, `ms`, `s`, `m`, `h`). `None` for
/// anything else: a sign, a number without a unit, an unknown unit, an empty string. A value beyond
/// `Duration::MAX` saturates.
pub fn go_duration(text: &str) -> Option<Duration> {
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return None;
        }
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_end);
        let seconds_per_unit: f64 = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3_600.0,
            _ => return None,
        };
        let value: f64 = number.parse().ok()?;
        // A finite, non-negative number of seconds: too large for a `Duration` is the only failure.
        let part = Duration::try_from_secs_f64(value * seconds_per_unit).unwrap_or(Duration::MAX);
        total = total.saturating_add(part);
        rest = next;
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_as_openai_writes_them() {
        let ms = Duration::from_millis;
        assert_eq!(go_duration("12ms"), Some(ms(12)));
        assert_eq!(go_duration("6m0s"), Some(Duration::from_secs(360)));
        assert_eq!(go_duration("1h2m3.5s"), Some(ms(3_723_500)));
        assert_eq!(go_duration("20s"), Some(Duration::from_secs(20)));
        assert_eq!(go_duration("0.5s"), Some(ms(500)));
        assert_eq!(go_duration("1.2µs"), Some(Duration::from_nanos(1_200)));
        assert_eq!(go_duration("0s"), Some(Duration::ZERO));
        assert_eq!(go_duration("0"), Some(Duration::ZERO));
        assert_eq!(go_duration("9999999999999999h"), Some(Duration::MAX));
        for malformed in [
            "",
            "12",
            "-5s",
            "5 s",
            "1.2.3s",
            "s",
            ".s",
            "12parsecs",
            "1h 2m",
        ] {
            assert_eq!(go_duration(malformed), None, "{malformed:?}");
        }
    }

    #[test]
    fn the_longest_reset_of_the_spent_limits_is_the_delay() {
        let headers = |pairs: &[(&'static str, &str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, value.parse().unwrap());
            }
            headers
        };
        let tokens_spent = headers(&[
            ("x-ratelimit-remaining-requests", "59"),
            ("x-ratelimit-reset-requests", "12ms"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        assert_eq!(
            spent_limits_reset(&tokens_spent),
            Some(Duration::from_secs(360))
        );
        let both_spent = headers(&[
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "250ms"),
        ]);
        assert_eq!(
            spent_limits_reset(&both_spent),
            Some(Duration::from_secs(1))
        );
        let none_spent = headers(&[
            ("x-ratelimit-remaining-requests", "3"),
            ("x-ratelimit-reset-requests", "1s"),
        ]);
        assert_eq!(spent_limits_reset(&none_spent), None);
        let unreadable = headers(&[
            ("x-ratelimit-remaining-tokens", "0"),
            ("x-ratelimit-reset-tokens", "soon"),
        ]);
        assert_eq!(spent_limits_reset(&unreadable), None);
    }
}
