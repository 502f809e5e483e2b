//! What a server says to slow down, besides `Retry-After`: millisecond retry headers and rate-limit
//! headers, read as one floor.
//!
//! Every header here is read without allocating: names are constants, values are scanned as bytes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::signals::retry_after::{parse_retry_after, trim_ows};
use crate::signals::sfv::{Item, integer, items};

const RETRY_AFTER_MS: HeaderName = HeaderName::from_static("retry-after-ms");
const X_MS_RETRY_AFTER_MS: HeaderName = HeaderName::from_static("x-ms-retry-after-ms");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("ratelimit-remaining");
const RATELIMIT_RESET: HeaderName = HeaderName::from_static("ratelimit-reset");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// An `X-RateLimit-Reset` at or above this is a Unix time in seconds, below it a number of seconds to
/// wait: 10⁹ seconds is 31.7 years, longer than any rate-limit window, and every Unix time since
/// 9 September 2001 is above it.
const EPOCH_SECONDS_FROM: u64 = 1_000_000_000;
/// An `X-RateLimit-Reset` at or above this is a Unix time in milliseconds: as seconds it would be a
/// date after the year 33 000.
const EPOCH_MILLIS_FROM: u64 = 1_000_000_000_000;

/// How long the server asked the client to wait before its next request, from the headers of a
/// response, measured from `now`; `None` if they ask for nothing usable.
///
/// The headers are read in this order, and the first that gives a usable value wins; the most explicit
/// comes first, so `Retry-After` beats everything else:
///
/// | header | value | as |
/// |---|---|---|
/// | `Retry-After` | delta-seconds or an HTTP-date (see [`parse_retry_after`](crate::parse_retry_after)) | RFC 9110 §10.2.3 |
/// | `retry-after-ms`, then `x-ms-retry-after-ms` | milliseconds | Azure's services and SDKs |
/// | `RateLimit` | `"name";r=0;t=30`: a policy with no quota remaining (`r=0`) asks for its `t` seconds; with several, the longest; without `t`, the window `w` of the `RateLimit-Policy` of the same name | IETF draft-ietf-httpapi-ratelimit-headers-10 |
/// | `RateLimit-Reset` | delta-seconds, unless `RateLimit-Remaining` says quota remains | the draft's earlier versions |
/// | `X-RateLimit-Reset` | delta-seconds, a Unix time in seconds, or one in milliseconds (below) unless `X-RateLimit-Remaining` says quota remains | GitHub, Twitter, many gateways |
///
/// `X-RateLimit-Reset` is written both ways in the field: GitHub and Twitter send the Unix time at which
/// the quota resets, others the seconds until then. A value of at least 10⁹ is a Unix time in seconds
/// (31.7 years is longer than any rate-limit window, and every Unix time since September 2001 is
/// larger), one of at least 10¹² a Unix time in milliseconds (as seconds, it would fall after the year
/// 33 000), anything smaller a number of seconds.
///
/// Every value is handled as `Retry-After` is: a time in the past is [`Duration::ZERO`] (the server allows
/// a request at once); a number too large saturates, so a policy's `max_retry_after` still applies to it;
/// anything malformed (a sign, a fraction, trailing text, a structured field that does not parse) is
/// skipped as if the header were absent, and the next header in the table is read. A reset header
/// beside a remaining count above zero is no floor: the server still has quota for this client.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use http::HeaderMap;
///
/// let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// let mut headers = HeaderMap::new();
/// headers.insert("ratelimit", r#""default";r=0;t=30"#.parse().unwrap());
/// assert_eq!(stagger::server_delay(&headers, now), Some(Duration::from_secs(30)));
///
/// // GitHub's form: the Unix time at which the quota resets.
/// let mut headers = HeaderMap::new();
/// headers.insert("x-ratelimit-remaining", "0".parse().unwrap());
/// headers.insert("x-ratelimit-reset", "1700000042".parse().unwrap());
/// assert_eq!(stagger::server_delay(&headers, now), Some(Duration::from_secs(42)));
///
/// // Retry-After comes first.
/// headers.insert("retry-after", "5".parse().unwrap());
/// assert_eq!(stagger::server_delay(&headers, now), Some(Duration::from_secs(5)));
/// ```
pub fn server_delay(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if headers.is_empty() {
        return None;
    }
    if let Some(delay) = headers
        .get(RETRY_AFTER)
        .and_then(|value| parse_retry_after(value, now))
    {
        return Some(delay);
    }
    for name in [RETRY_AFTER_MS, X_MS_RETRY_AFTER_MS] {
        if let Some(millis) = headers.get(name).and_then(digits) {
            return Some(Duration::from_millis(millis));
        }
    }
    rate_limited(headers, Quota::ExhaustedOrUnknown, &|| now)
}

/// How long until the quota the server reports is back, when a response says it is spent: a
/// `RateLimit` policy with `r=0`, or a `RateLimit-Remaining` or `X-RateLimit-Remaining` of 0 beside a
/// usable reset. This is pushback on any response, a success included: the next request would be
/// refused. The clock is read only for a reset written as a Unix time.
pub(crate) fn quota_exhausted(
    headers: &HeaderMap,
    now: &dyn Fn() -> SystemTime,
) -> Option<Duration> {
    if headers.is_empty() {
        return None;
    }
    rate_limited(headers, Quota::Exhausted, now)
}

/// The interval between requests the server's stated rate allows: `w / q` of its `RateLimit-Policy`
/// (`"name";q=<requests>;w=<seconds>`), for the policy a `RateLimit` field says is spent (`r=0`), or
/// the only policy there is. `None` when it states none, or several without saying which is spent,
/// or a quota of zero.
pub(crate) fn quota_pace(headers: &HeaderMap) -> Option<Duration> {
    if headers.is_empty() || !headers.contains_key(RATELIMIT_POLICY) {
        return None;
    }
    let spent = headers
        .get_all(RATELIMIT)
        .iter()
        .filter_map(|value| items(value.as_bytes()))
        .flatten()
        .find(|item| item.param(b"r").and_then(integer) == Some(0))
        .map(|item| item.name);
    let mut policies = headers
        .get_all(RATELIMIT_POLICY)
        .iter()
        .filter_map(|value| items(value.as_bytes()))
        .flatten();
    let policy = match spent {
        Some(name) => policies.find(|policy| policy.name == name)?,
        None => {
            let only = policies.next()?;
            if policies.next().is_some() {
                return None;
            }
            only
        }
    };
    let quota = policy.param(b"q").and_then(integer).filter(|&q| q > 0)?;
    let window = policy.param(b"w").and_then(integer)?;
    Some(Duration::from_secs(window) / u32::try_from(quota).unwrap_or(u32::MAX))
}

/// The wait the rate-limit headers ask for, in [`server_delay`]'s order — `RateLimit`, then
/// `RateLimit-Reset`, then `X-RateLimit-Reset` — when their quota is spent as `quota` reads it.
fn rate_limited(
    headers: &HeaderMap,
    quota: Quota,
    now: &dyn Fn() -> SystemTime,
) -> Option<Duration> {
    ratelimit(headers, quota)
        .or_else(|| {
            reset(
                headers,
                &RATELIMIT_REMAINING,
                &RATELIMIT_RESET,
                quota,
                now,
                false,
            )
        })
        .or_else(|| {
            reset(
                headers,
                &X_RATELIMIT_REMAINING,
                &X_RATELIMIT_RESET,
                quota,
                now,
                true,
            )
        })
}

/// Whether a response's headers say the server is limiting the client's rate, usable or not: a `503`
/// that says so is the server throttling, not failing. A header only a rate limiter sends counts —
/// `retry-after-ms`, `x-ms-retry-after-ms`, a `RateLimit` field, a `(X-)RateLimit-Remaining` or
/// `-Reset` — unless it says quota remains: a `RateLimit` whose every policy has `r` above 0, or a
/// remaining count above 0 (GitHub sends `X-RateLimit-Remaining: 4999` on every response, a `503`
/// included). A header that does not parse counts: it is there, and only a rate limiter sends it.
/// `Retry-After` alone does not count: servers send it when overloaded or down for maintenance too.
pub(crate) fn says_throttled(headers: &HeaderMap) -> bool {
    if headers.is_empty() {
        return false;
    }
    if headers.contains_key(RETRY_AFTER_MS) || headers.contains_key(X_MS_RETRY_AFTER_MS) {
        return true;
    }
    for value in headers.get_all(RATELIMIT) {
        let Some(mut policies) = items(value.as_bytes()) else {
            return true;
        };
        let quota_left = |policy: Item<'_>| {
            policy
                .param(b"r")
                .and_then(integer)
                .is_some_and(|remaining| remaining > 0)
        };
        if !policies.all(quota_left) {
            return true;
        }
    }
    [
        (&RATELIMIT_REMAINING, &RATELIMIT_RESET),
        (&X_RATELIMIT_REMAINING, &X_RATELIMIT_RESET),
    ]
    .into_iter()
    .any(|(remaining, reset)| match headers.get(remaining) {
        Some(remaining) => digits(remaining).is_none_or(|remaining| remaining == 0),
        None => headers.contains_key(reset),
    })
}

/// Which rate-limit headers ask for a wait: a `RateLimit` policy, or a reset beside its remaining count.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Quota {
    /// Only one that says the quota is spent: `r=0`, a remaining count of 0.
    Exhausted,
    /// Also one that says nothing to the contrary, without `r` or a remaining count (the response is a
    /// refusal anyway).
    ExhaustedOrUnknown,
}

/// The longest `t` (or, without it, the window of the policy of the same name) among the `RateLimit`
/// policies whose quota is spent. A policy whose `r` or `t` is not a non-negative integer is skipped.
fn ratelimit(headers: &HeaderMap, quota: Quota) -> Option<Duration> {
    let mut longest: Option<u64> = None;
    for value in headers.get_all(RATELIMIT) {
        // A field that does not parse is ignored whole (RFC 9651 §4.2).
        let Some(items) = items(value.as_bytes()) else {
            continue;
        };
        for item in items {
            let spent = match item.param(b"r").map(integer) {
                Some(Some(remaining)) => remaining == 0,
                Some(None) => continue,
                None => quota == Quota::ExhaustedOrUnknown,
            };
            if !spent {
                continue;
            }
            let wait = match item.param(b"t") {
                Some(t) => integer(t),
                None => policy_window(headers, item.name),
            };
            if let Some(wait) = wait {
                longest = Some(longest.map_or(wait, |longest| longest.max(wait)));
            }
        }
    }
    longest.map(Duration::from_secs)
}

/// The window (`w`) of the `RateLimit-Policy` named `name`.
fn policy_window(headers: &HeaderMap, name: &[u8]) -> Option<u64> {
    headers
        .get_all(RATELIMIT_POLICY)
        .iter()
        .filter_map(|value| items(value.as_bytes()))
        .flatten()
        .find(|policy| policy.name == name)
        .and_then(|policy| policy.param(b"w"))
        .and_then(integer)
}

/// A reset header, when the remaining header beside it says the quota is spent as `quota` reads it:
/// exactly 0, or, for `ExhaustedOrUnknown`, anything but a count above 0.
fn reset(
    headers: &HeaderMap,
    remaining: &HeaderName,
    reset: &HeaderName,
    quota: Quota,
    now: &dyn Fn() -> SystemTime,
    may_be_a_date: bool,
) -> Option<Duration> {
    let remaining = headers.get(remaining).and_then(digits);
    let spent = match quota {
        Quota::Exhausted => remaining == Some(0),
        Quota::ExhaustedOrUnknown => remaining.is_none_or(|remaining| remaining == 0),
    };
    if !spent {
        return None;
    }
    reset_value(headers.get(reset)?, now, may_be_a_date)
}

/// A reset value: delta-seconds, or, where `may_be_a_date`, a Unix time in seconds or milliseconds.
fn reset_value(
    value: &HeaderValue,
    now: &dyn Fn() -> SystemTime,
    may_be_a_date: bool,
) -> Option<Duration> {
    let n = digits(value)?;
    if !may_be_a_date || n < EPOCH_SECONDS_FROM {
        return Some(Duration::from_secs(n));
    }
    let at = if n < EPOCH_MILLIS_FROM {
        Duration::from_secs(n)
    } else {
        Duration::from_millis(n)
    };
    let since_epoch = now().duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    Some(at.saturating_sub(since_epoch))
}

/// `1*DIGIT` with optional whitespace around it, saturating at `u64::MAX`.
fn digits(value: &HeaderValue) -> Option<u64> {
    let bytes = trim_ows(value.as_bytes());
    if bytes.is_empty() {
        return None;
    }
    let mut n: u64 = 0;
    for &b in bytes {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n.saturating_mul(10).saturating_add(u64::from(b - b'0'));
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// 14 November 2023, 22:13:20 UTC.
    const NOW: u64 = 1_700_000_000;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW)
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for &(name, value) in pairs {
            map.append(name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn delay(pairs: &[(&'static str, &str)]) -> Option<Duration> {
        server_delay(&headers(pairs), now())
    }

    fn secs(n: u64) -> Option<Duration> {
        Some(Duration::from_secs(n))
    }

    #[test]
    fn each_header_alone() {
        assert_eq!(delay(&[("retry-after", "7")]), secs(7));
        assert_eq!(
            delay(&[("retry-after-ms", "300")]),
            Some(Duration::from_millis(300))
        );
        assert_eq!(
            delay(&[("x-ms-retry-after-ms", "1500")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(delay(&[("ratelimit", r#""default";r=0;t=30"#)]), secs(30));
        assert_eq!(
            delay(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "20")]),
            secs(20)
        );
        assert_eq!(
            delay(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "45")]),
            secs(45)
        );
        assert_eq!(delay(&[]), None);
        assert_eq!(delay(&[("content-type", "text/plain")]), None);
    }

    #[test]
    fn the_most_explicit_header_wins() {
        let all = [
            ("x-ratelimit-reset", "50"),
            ("ratelimit-reset", "40"),
            ("ratelimit", r#""a";r=0;t=30"#),
            ("x-ms-retry-after-ms", "20000"),
            ("retry-after-ms", "10000"),
            ("retry-after", "5"),
        ];
        let expected = [5, 10, 20, 30, 40, 50];
        for n in 0..all.len() {
            // Drop the most explicit headers one by one: the next one answers.
            assert_eq!(delay(&all[..all.len() - n]), secs(expected[n]), "{n}");
        }
    }

    #[test]
    fn a_malformed_header_gives_way_to_the_next() {
        for bad in ["-1", "1.5", "5s", "", " ", "+5", "0x10", "½"] {
            assert_eq!(
                delay(&[("retry-after", bad), ("retry-after-ms", "250")]),
                Some(Duration::from_millis(250)),
                "{bad:?}"
            );
            assert_eq!(
                delay(&[("retry-after-ms", bad), ("ratelimit", "a;r=0;t=2")]),
                secs(2),
                "{bad:?}"
            );
            assert_eq!(
                delay(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", bad)]),
                None,
                "{bad:?}"
            );
        }
        assert_eq!(
            delay(&[("retry-after-ms", " 250\t")]),
            Some(Duration::from_millis(250))
        );
    }

    #[test]
    fn ratelimit_field_rules() {
        // Quota remains: no floor, whatever `t` says.
        assert_eq!(delay(&[("ratelimit", r#""default";r=50;t=30"#)]), None);
        // Several policies: the longest wait among the spent ones.
        let field = r#""burst";r=0;t=1, "day";r=0;t=3600, "hour";r=10;t=60"#;
        assert_eq!(delay(&[("ratelimit", field)]), secs(3600));
        // Two field lines are one list.
        assert_eq!(
            delay(&[("ratelimit", "a;r=0;t=4"), ("ratelimit", "b;r=0;t=9")]),
            secs(9)
        );
        // Without `t`, the window of the policy of the same name.
        let policy = r#""default";q=100;w=60, "other";q=5;w=1"#;
        assert_eq!(
            delay(&[
                ("ratelimit", r#""default";r=0"#),
                ("ratelimit-policy", policy)
            ]),
            secs(60)
        );
        assert_eq!(delay(&[("ratelimit", r#""default";r=0"#)]), None);
        // Without `r`, on a refusal: the quota is taken as spent.
        assert_eq!(delay(&[("ratelimit", "default;t=12")]), secs(12));
        // Unknown parameters, a partition key, spaces after `;` and around `,`.
        assert_eq!(
            delay(&[("ratelimit", r#""d";pk=:cHJvamVjdC0xMjM=:; r=0;t=8 , x;r=1"#)]),
            secs(8)
        );
        // Escapes inside the name.
        assert_eq!(delay(&[("ratelimit", r#""a\"b\\c";r=0;t=3"#)]), secs(3));
    }

    #[test]
    fn a_ratelimit_field_that_does_not_parse_is_ignored_whole() {
        for bad in [
            r#""default";r=0;t=30,"#,
            r#""unterminated;r=0;t=30"#,
            r#"r=0;t=30"#,
            r#""a";R=0;t=30"#,
            r#""a";r=0;t=30 junk"#,
            r#""a";;r=0"#,
            r#""a";r=0 ;t=30"#,
            "",
            ",",
        ] {
            assert_eq!(delay(&[("ratelimit", bad)]), None, "{bad:?}");
        }
        // A spent policy whose `r` or `t` is not a non-negative integer is skipped; the others count.
        for bad in [
            "r=-1;t=5",
            "r=0;t=-5",
            "r=0;t=1.5",
            "r=0;t=\"5\"",
            "r=0;t=1234567890123456",
        ] {
            let field = format!("a;{bad}, b;r=0;t=2");
            assert_eq!(delay(&[("ratelimit", &field)]), secs(2), "{bad:?}");
        }
    }

    #[test]
    fn a_reset_beside_remaining_quota_is_no_floor() {
        assert_eq!(
            delay(&[("ratelimit-remaining", "3"), ("ratelimit-reset", "20")]),
            None
        );
        assert_eq!(
            delay(&[("x-ratelimit-remaining", "1"), ("x-ratelimit-reset", "20")]),
            None
        );
        // A reset alone on a refusal is the floor; a malformed remaining count says nothing.
        assert_eq!(delay(&[("x-ratelimit-reset", "20")]), secs(20));
        assert_eq!(
            delay(&[("x-ratelimit-remaining", "-1"), ("x-ratelimit-reset", "20")]),
            secs(20)
        );
    }

    #[test]
    fn x_ratelimit_reset_as_delta_as_unix_seconds_and_as_unix_milliseconds() {
        let reset = |value: &str| delay(&[("x-ratelimit-reset", value)]);
        assert_eq!(reset("60"), secs(60));
        assert_eq!(reset("999999999"), secs(999_999_999));
        assert_eq!(reset(&(NOW + 42).to_string()), secs(42));
        assert_eq!(reset(&(NOW - 42).to_string()), secs(0));
        assert_eq!(reset("1000000000"), secs(0));
        assert_eq!(
            reset(&(NOW * 1000 + 1500).to_string()),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(reset(&(NOW * 1000 - 1).to_string()), secs(0));
        // Beyond u64: saturates to a date so far ahead that any max_retry_after stops the retries.
        assert!(reset("99999999999999999999999").unwrap() > Duration::from_secs(1 << 40));
        // `RateLimit-Reset` is always delta-seconds.
        assert_eq!(
            delay(&[("ratelimit-reset", &(NOW + 42).to_string())]),
            secs(NOW + 42)
        );
    }

    #[test]
    fn huge_values_saturate() {
        assert_eq!(
            delay(&[("retry-after-ms", "99999999999999999999999")]),
            Some(Duration::from_millis(u64::MAX))
        );
        assert_eq!(
            delay(&[("ratelimit-reset", "99999999999999999999999")]),
            Some(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn an_exhausted_quota_on_any_response() {
        let exhausted = |pairs: &[(&'static str, &str)]| quota_exhausted(&headers(pairs), &now);
        assert_eq!(exhausted(&[("ratelimit", "a;r=0;t=5")]), secs(5));
        assert_eq!(exhausted(&[("ratelimit", "a;r=1;t=5")]), None);
        // Without `r` a success says nothing about the quota.
        assert_eq!(exhausted(&[("ratelimit", "a;t=5")]), None);
        assert_eq!(
            exhausted(&[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &(NOW + 9).to_string())
            ]),
            secs(9)
        );
        assert_eq!(
            exhausted(&[("ratelimit-remaining", "0"), ("ratelimit-reset", "3")]),
            secs(3)
        );
        assert_eq!(exhausted(&[("x-ratelimit-reset", "9")]), None);
        assert_eq!(exhausted(&[("retry-after", "9")]), None);
    }

    #[test]
    fn a_rate_limit_header_says_throttled_unless_it_says_quota_remains() {
        let says = |pairs: &[(&'static str, &str)]| says_throttled(&headers(pairs));
        assert!(says(&[("x-ratelimit-remaining", "0")]));
        assert!(says(&[("x-ratelimit-reset", "30")]));
        assert!(says(&[("retry-after-ms", "x")]));
        assert!(says(&[("RateLimit", "a;r=0;t=1")]));
        assert!(says(&[("RateLimit", "a;t=1")]));
        assert!(says(&[("RateLimit", "garbage,")]));
        assert!(says(&[("x-ratelimit-remaining", "soon")]));
        // Quota remains: GitHub's headers on every response, a 503 included.
        assert!(!says(&[
            ("x-ratelimit-remaining", "4999"),
            ("x-ratelimit-reset", "1700000000")
        ]));
        assert!(!says(&[("RateLimit", "a;r=5;t=1, b;r=1")]));
        assert!(!says(&[
            ("ratelimit-remaining", "3"),
            ("ratelimit-reset", "9")
        ]));
        // Not a rate limiter's alone.
        assert!(!says(&[("retry-after", "5")]));
        assert!(!says(&[("ratelimit-policy", "a;q=1;w=1")]));
        assert!(!says(&[]));
    }

    const NAMES: [&str; 9] = [
        "retry-after",
        "retry-after-ms",
        "x-ms-retry-after-ms",
        "ratelimit",
        "ratelimit-policy",
        "ratelimit-remaining",
        "ratelimit-reset",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ];

    /// Bytes a header value may hold, biased towards what the parsers look for.
    fn value() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            4 => prop::sample::select(b"0123456789;=,\" :?-.*rtwq\\abc".to_vec()),
            1 => any::<u8>(),
        ];
        proptest::collection::vec(byte, 0..48)
    }

    /// 4 096 cases in the suite; `STAGGER_FUZZ_CASES=1000000` for a long run.
    fn cases() -> u32 {
        std::env::var("STAGGER_FUZZ_CASES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(4096)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(cases()))]

        #[test]
        fn no_header_value_makes_a_parser_panic(
            values in proptest::collection::vec((0..NAMES.len(), value()), 0..6),
            now_secs in any::<u64>(),
        ) {
            let mut map = HeaderMap::new();
            for (name, value) in values {
                if let Ok(value) = HeaderValue::from_bytes(&value) {
                    map.append(NAMES[name], value);
                }
            }
            let now = UNIX_EPOCH.checked_add(Duration::from_secs(now_secs)).unwrap_or(UNIX_EPOCH);
            let _ = server_delay(&map, now);
            let _ = quota_exhausted(&map, &|| now);
            let _ = says_throttled(&map);
        }

        #[test]
        fn a_spent_ratelimit_policy_asks_for_its_t(name in "[a-z][a-z0-9_]{0,8}", t in 0u64..1_000_000_000) {
            let field = format!("\"{name}\";r=0;t={t}");
            prop_assert_eq!(delay(&[("ratelimit", &field)]), secs(t));
        }

        #[test]
        fn unix_times_ahead_are_waits(ahead in 0u64..1_000_000) {
            let at = (NOW + ahead).to_string();
            prop_assert_eq!(delay(&[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", &at)]), secs(ahead));
        }
    }
}
