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
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Sun, 06 Nov 1994 08:49:37 GMT, the RFC's example date.
    const RFC_DATE: u64 = 784_111_777;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn parse(value: &[u8], now: SystemTime) -> Option<Duration> {
        parse_retry_after(&HeaderValue::from_bytes(value).unwrap(), now)
    }

    /// `seconds` and `nanos` after the epoch, `seconds` negative before it; `None` if this platform's
    /// `SystemTime` cannot hold it.
    fn instant(seconds: i64, nanos: u32) -> Option<SystemTime> {
        let whole = Duration::from_secs(seconds.unsigned_abs());
        let whole = if seconds >= 0 {
            UNIX_EPOCH.checked_add(whole)
        } else {
            UNIX_EPOCH.checked_sub(whole)
        };
        whole?.checked_add(Duration::from_nanos(u64::from(nanos)))
    }

    #[test]
    fn delta_seconds() {
        let now = at(RFC_DATE);
        for (input, want) in [
            (&b"0"[..], 0),
            (b"1", 1),
            (b"120", 120),
            (b"007", 7),
            (b" 30\t", 30),
            (b"86400", 86_400),
        ] {
            assert_eq!(
                parse(input, now),
                Some(Duration::from_secs(want)),
                "{input:?}"
            );
        }
    }

    #[test]
    fn huge_delta_saturates() {
        let now = at(RFC_DATE);
        assert_eq!(
            parse(b"18446744073709551615", now),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(parse(b"18446744073709551616", now), Some(Duration::MAX));
        assert_eq!(parse(&[b'9'; 400], now), Some(Duration::MAX));
    }

    #[test]
    fn all_three_date_forms() {
        let now = at(RFC_DATE - 10);
        for form in [
            &b"Sun, 06 Nov 1994 08:49:37 GMT"[..],
            b"Sunday, 06-Nov-94 08:49:37 GMT",
            b"Sun Nov  6 08:49:37 1994",
        ] {
            assert_eq!(parse(form, now), Some(Duration::from_secs(10)), "{form:?}");
        }
    }

    #[test]
    fn past_and_present_dates_are_zero() {
        let date = b"Sun, 06 Nov 1994 08:49:37 GMT";
        assert_eq!(parse(date, at(RFC_DATE)), Some(Duration::ZERO));
        assert_eq!(parse(date, at(RFC_DATE + 3600)), Some(Duration::ZERO));
    }

    #[test]
    fn malformed_values_are_absent_not_zero() {
        let now = at(RFC_DATE - 10);
        let malformed: &[&[u8]] = &[
            b"",
            b" ",
            b"\t",
            b"-1",
            b"-0",
            b"+5",
            b"1.5",
            b"1.0",
            b".5",
            b"1e3",
            b"0x10",
            b"5s",
            b"5 s",
            b"10, 20",
            b"1 2",
            b"seconds",
            b"NaN",
            b"inf",
            b"\xc2\xb2",
            b"\xd9\xa3",
            b"Sun, 06 Nov 1994 08:49:37",
            b"Sun, 06 Nov 1994 25:49:37 GMT",
            b"Sun, 32 Nov 1994 08:49:37 GMT",
            b"Mon, 06 Nov 1994 08:49:37 GMT junk",
            b"06 Nov 1994 08:49:37 GMT",
            b"Sun, 06 Nov 1994 08:49:37 UTC",
            b"1994-11-06T08:49:37Z",
        ];
        assert!(malformed.len() >= 20);
        for value in malformed {
            assert_eq!(
                parse(value, now),
                None,
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
    }

    #[test]
    fn dates_before_1970_are_past_not_absent() {
        for value in [
            &b"Thu, 01 Jan 1959 00:00:00 GMT"[..],
            b"Thu Jan  1 00:00:00 1959",
            b"Mon, 01 Jan 1900 00:00:00 GMT",
            b"Mon, 01 Jan 0001 00:00:00 GMT",
            b"Sat, 01 Jan 0000 00:00:00 GMT",
            b"Wed, 31 Dec 1969 23:59:59 GMT",
        ] {
            for now in [at(RFC_DATE), at(0)] {
                assert_eq!(
                    parse(value, now),
                    Some(Duration::ZERO),
                    "{}",
                    String::from_utf8_lossy(value)
                );
            }
        }
        // Before a `now` that is itself before the epoch, a pre-1970 date is as far off as it looks.
        let ten_seconds_before = instant(-347_155_200 - 10, 0).unwrap();
        assert_eq!(
            parse(b"Thu, 01 Jan 1959 00:00:00 GMT", ten_seconds_before),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            parse(
                b"Sun, 06 Nov 1994 08:49:37 GMT",
                instant(-1, 500_000_000).unwrap()
            ),
            Some(Duration::new(RFC_DATE, 500_000_000))
        );
    }

    #[test]
    fn leap_second_in_all_three_forms() {
        // 2016-12-31T23:59:60Z is 2017-01-01T00:00:00Z in Unix time: ten seconds after this `now`.
        let now = at(1_483_228_790);
        for form in [
            &b"Sat, 31 Dec 2016 23:59:60 GMT"[..],
            b"Saturday, 31-Dec-16 23:59:60 GMT",
            b"Sat Dec 31 23:59:60 2016",
        ] {
            assert_eq!(parse(form, now), Some(Duration::from_secs(10)), "{form:?}");
        }
        assert_eq!(parse(b"Sat, 31 Dec 2016 23:59:61 GMT", now), None);
    }

    #[test]
    fn rfc850_two_digit_year_is_at_most_50_years_ahead() {
        // Sun, 15 Mar 2026 12:00:00 GMT.
        let now = at(1_773_576_000);
        let fifty_years = Duration::from_secs(3_351_499_200 - 1_773_576_000);
        assert_eq!(
            parse(b"Sunday, 15-Mar-76 12:00:00 GMT", now),
            Some(fifty_years)
        );
        // A second further is 1976, long past.
        assert_eq!(
            parse(b"Monday, 15-Mar-76 12:00:01 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse(b"Sunday, 15-Mar-76 12:00:01 GMT", now), None);
    }

    #[test]
    fn a_future_date_is_exact_to_the_nanosecond() {
        let now = at(RFC_DATE - 10) + Duration::from_millis(250);
        assert_eq!(
            parse(b"Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(Duration::from_millis(9_750))
        );
    }

    /// A date to parse and its Unix second: any instant `httpdate` formats, or one before 1970.
    fn dated() -> impl Strategy<Value = (String, i64)> {
        prop_oneof![
            (0..=253_402_300_799_i64)
                .prop_map(|second| (httpdate::fmt_http_date(at(second as u64)), second)),
            Just(("Thu, 01 Jan 1959 00:00:00 GMT".to_owned(), -347_155_200)),
            Just(("Sat, 01 Jan 0000 00:00:00 GMT".to_owned(), -62_167_219_200)),
        ]
    }

    proptest! {
        #[test]
        fn any_now_gives_the_exact_wait_or_zero(
            (value, date) in dated(),
            now_seconds in any::<i64>(),
            now_nanos in 0..1_000_000_000_u32,
        ) {
            let now = instant(now_seconds, now_nanos);
            prop_assume!(now.is_some());
            let wait = i128::from(date) * 1_000_000_000
                - (i128::from(now_seconds) * 1_000_000_000 + i128::from(now_nanos));
            let want = if wait <= 0 {
                Duration::ZERO
            } else {
                let seconds = u64::try_from(wait / 1_000_000_000).unwrap();
                Duration::new(seconds, (wait % 1_000_000_000) as u32)
            };
            prop_assert_eq!(parse(value.as_bytes(), now.unwrap()), Some(want), "{}", value);
        }

        #[test]
        fn arbitrary_header_values_never_panic(
            value in proptest::collection::vec(any::<u8>(), 0..40),
            now_seconds in any::<i64>(),
        ) {
            if let (Ok(value), Some(now)) = (HeaderValue::from_bytes(&value), instant(now_seconds, 0)) {
                let _ = parse_retry_after(&value, now);
            }
        }
    }
}
