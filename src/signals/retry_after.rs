//! `Retry-After` (RFC 9110 §10.2.3): delta-seconds or an HTTP-date, as a duration from now.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderValue;

use crate::signals::http_date::parse_http_date;

/// Parses a `Retry-After` value into how long the server asked the client to wait, measured from `now`.
///
/// Accepted, per RFC 9110 §10.2.3, with optional surrounding spaces or tabs:
///
/// - **delta-seconds**: one or more ASCII digits (`"120"`). A value too large for a [`Duration`] saturates
///   to the largest one, so a policy's cap on `Retry-After` still applies to it.
/// - **HTTP-date** in any of its three forms (RFC 9110 §5.6.7), exactly as the grammar spells it, names in
///   its case: IMF-fixdate (`"Sun, 06 Nov 1994 08:49:37 GMT"`), the obsolete RFC 850 form
///   (`"Sunday, 06-Nov-94 08:49:37 GMT"`) and asctime (`"Sun Nov  6 08:49:37 1994"`, or `"Nov 16"` with a
///   two-digit day). The second may be 60, the leap second the grammar allows (`"23:59:60"`), which counts as
///   the next second. Four-digit years run from 0000 to 9999, so a date before 1970 is a past date like any
///   other. RFC 850's two-digit year is the latest year with those digits that puts the date at most 50
///   years after `now`, as §5.6.7 requires: a date that "appears to be more than 50 years in the future" is
///   in "the most recent year in the past that had the same last two digits".
///
/// A date at or before `now` is [`Duration::ZERO`]: the server allows a retry at once. A later one is how far
/// it is after `now`, to the nanosecond, for any `now` a [`SystemTime`] can hold.
///
/// Anything else returns `None`, which callers treat as if the header were absent (never as zero): an empty
/// value, a negative, signed (`"+5"`), fractional (`"1.5"`), exponent or hexadecimal number, trailing
/// garbage (`"5s"`), a comma-separated list, non-ASCII bytes, a malformed or impossible date (31 April,
/// 29 February outside a leap year, hour 24, a day name that is not the date's weekday, `UTC` for `GMT`).
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderValue;
/// use stagger::parse_retry_after;
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_770); // Sun, 06 Nov 1994 08:49:30 GMT
/// let parse = |v: &'static str| parse_retry_after(&HeaderValue::from_static(v), now);
/// assert_eq!(parse("120"), Some(Duration::from_secs(120)));
/// assert_eq!(parse("Sun, 06 Nov 1994 08:49:37 GMT"), Some(Duration::from_secs(7)));
/// assert_eq!(parse("Sun, 06 Nov 1994 08:00:00 GMT"), Some(Duration::ZERO));
/// assert_eq!(parse("Thu, 01 Jan 1959 00:00:00 GMT"), Some(Duration::ZERO));
/// assert_eq!(parse("Sun, 06 Nov 1994 08:49:60 GMT"), Some(Duration::from_secs(30)));
/// assert_eq!(parse("-1"), None);
/// assert_eq!(parse("1.5"), None);
/// ```
pub fn parse_retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let bytes = trim_ows(value.as_bytes());
    let first = *bytes.first()?;
    if first.is_ascii_digit() {
        return parse_delta_seconds(bytes);
    }
    // Every HTTP-date starts with a day name; anything else (a sign, a dot) is not one.
    if !first.is_ascii_alphabetic() {
        return None;
    }
    let date = parse_http_date(bytes, now)?;
    Some(until(date, now))
}

/// How long after `now` the Unix second `date` is, or zero if it is not after `now`.
///
/// In `Duration`s rather than `SystemTime`s, which cannot hold every date on every platform (Windows'
/// starts in 1601), and without overflow for any `now`.
fn until(date: i64, now: SystemTime) -> Duration {
    let date_from_epoch = Duration::from_secs(date.unsigned_abs());
    match (now.duration_since(UNIX_EPOCH), date >= 0) {
        (Ok(now_after_epoch), true) => date_from_epoch.saturating_sub(now_after_epoch),
        // A date before the epoch is before any `now` after it.
        (Ok(_), false) => Duration::ZERO,
        (Err(now_before_epoch), true) => {
            date_from_epoch.saturating_add(now_before_epoch.duration())
        }
        (Err(now_before_epoch), false) => {
            now_before_epoch.duration().saturating_sub(date_from_epoch)
        }
    }
}

/// `1*DIGIT`, saturating at the largest `Duration` rather than failing on overflow.
fn parse_delta_seconds(digits: &[u8]) -> Option<Duration> {
    let mut secs: u64 = 0;
    let mut overflowed = false;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        let digit = u64::from(b - b'0');
        match secs.checked_mul(10).and_then(|s| s.checked_add(digit)) {
            Some(s) => secs = s,
            None => overflowed = true,
        }
    }
    Some(if overflowed {
        Duration::MAX
    } else {
        Duration::from_secs(secs)
    })
}

/// Strips optional whitespace (SP / HTAB) around a field value, as RFC 9110 §5.5 allows.
pub(crate) fn trim_ows(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

#[cfg(test)]
mod tests;
