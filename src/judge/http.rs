//! What an HTTP answer says besides its outcome.

use ::http::StatusCode;

use crate::attempt::{Attempt, HostSignal};
use crate::classify::AttemptResult;
use crate::engine::policy::RetryPolicy;
use crate::signals::server_delay::{quota_exhausted, quota_pace, says_throttled, server_delay};
use crate::time::system_now;

/// What an HTTP answer says besides its outcome: a server's delay, throttling, and what it tells the
/// host's cooldown.
pub(super) fn http_signals(
    policy: &RetryPolicy,
    seen: &AttemptResult<'_>,
    attempt: Attempt,
) -> Attempt {
    let retryable = attempt.outcome().is_retryable();
    // A delay the classifier named (`Outcome::RetryAfter`): a server's delay like the headers'.
    let named = attempt.retry_after;
    let cooldown = policy.host_cooldown();
    // A success or a fatal answer reads no header, unless the policy keeps the pauses hosts ask for.
    if !retryable && !cooldown {
        return attempt;
    }
    let AttemptResult::Response {
        status, headers, ..
    } = *seen
    else {
        return match named {
            Some(asked) if cooldown => attempt.signal(HostSignal::Refused { asked, pace: None }),
            _ => attempt,
        };
    };
    // A server's delay means something on a 429 (RFC 6585), a 503 and a 413 (RFC 9110 §10.2.3,
    // §15.5.14), and on a 403 that says a rate limit is spent; on a 502 or a 500 it is read as
    // nothing, and the backoff decides.
    let rate_limit =
        status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::FORBIDDEN && retryable;
    let refusal = rate_limit || status == StatusCode::SERVICE_UNAVAILABLE;
    let read = if refusal || status == StatusCode::PAYLOAD_TOO_LARGE && retryable {
        server_delay(headers, system_now())
    } else {
        None
    };
    let delay = read.max(named);
    let throttled =
        rate_limit || status == StatusCode::SERVICE_UNAVAILABLE && says_throttled(headers);
    let signal = if !cooldown {
        HostSignal::Nothing
    } else if rate_limit || (refusal || named.is_some()) && delay.is_some() {
        // A refusal: a 429 (or a rate-limited 403) whatever it says, a 503 that asks for a delay,
        // any answer whose delay the classifier named.
        HostSignal::Refused {
            asked: delay.unwrap_or_default(),
            pace: quota_pace(headers),
        }
    } else if refusal {
        // A 503 with nothing to say of a rate: a failure, which tells the pacer nothing.
        HostSignal::Nothing
    } else {
        // Any other answer was admitted; it can still say the next one would not be.
        match quota_exhausted(headers, &system_now) {
            Some(spent) => HostSignal::Accepted {
                spent: Some(spent),
                pace: quota_pace(headers),
            },
            None => HostSignal::Accepted {
                spent: None,
                pace: None,
            },
        }
    };
    attempt
        .retry_after(delay.filter(|_| retryable))
        .throttled(retryable && throttled)
        .signal(signal)
}
