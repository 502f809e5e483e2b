use std::time::Duration;

use proptest::prelude::*;

use super::*;

/// Sun, 06 Nov 1994 08:49:37 GMT, the RFC's example date.
const RFC_DATE: i64 = 784_111_777;
/// Sun, 15 Mar 2026 12:00:00 GMT.
const NOON_15_MARCH_2026: i64 = 1_773_576_000;
/// Fri, 31 Dec 9999 23:59:59 GMT, the last second a four-digit year reaches.
const LAST_SECOND_OF_9999: i64 = 253_402_300_799;

const SHORT_DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const LONG_DAY_NAMES: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTH_NAMES: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

fn at(unix_seconds: i64) -> SystemTime {
    let offset = Duration::from_secs(unix_seconds.unsigned_abs());
    if unix_seconds >= 0 {
        UNIX_EPOCH + offset
    } else {
        UNIX_EPOCH - offset
    }
}

fn parse(value: &str, now: SystemTime) -> Option<i64> {
    parse_http_date(value.as_bytes(), now)
}

/// The same instant in RFC 850 and asctime form, from `httpdate`'s IMF-fixdate.
fn other_forms(imf: &str) -> (String, String) {
    let (name, day, month, year, time) = (
        &imf[0..3],
        &imf[5..7],
        &imf[8..11],
        &imf[12..16],
        &imf[17..25],
    );
    let long = LONG_DAY_NAMES[SHORT_DAY_NAMES.iter().position(|n| *n == name).unwrap()];
    let rfc850 = format!("{long}, {day}-{month}-{} {time} GMT", &year[2..]);
    let asctime_day = day
        .strip_prefix('0')
        .map_or(day.to_owned(), |d| format!(" {d}"));
    let asctime = format!("{name} {month} {asctime_day} {time} {year}");
    (rfc850, asctime)
}

/// How many of the seven day names make `Sun, DD Mon YYYY 00:00:00 GMT` (with that name) a date, and
/// the date if one does: a date that exists has exactly one weekday, one that does not has none.
fn midnight(day: u8, month: &str, year: i64) -> (usize, Option<i64>) {
    let parsed: Vec<i64> = SHORT_DAY_NAMES
        .iter()
        .filter_map(|name| {
            let value = format!("{name}, {day:02} {month} {year:04} 00:00:00 GMT");
            parse(&value, at(0))
        })
        .collect();
    (parsed.len(), parsed.first().copied())
}

#[test]
fn rfc_example_in_all_three_forms() {
    let now = at(RFC_DATE);
    for form in [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
        // date3 is `month SP ( 2DIGIT / ( SP DIGIT ) )`: a two-digit day may start with a zero.
        "Sun Nov 06 08:49:37 1994",
    ] {
        assert_eq!(parse(form, now), Some(RFC_DATE), "{form}");
    }
    assert_eq!(
        parse("Wed Nov 16 08:49:37 1994", now),
        Some(RFC_DATE + 10 * 86_400)
    );
}

#[test]
fn dates_before_1970_are_negative_unix_seconds() {
    let now = at(RFC_DATE);
    for (value, want) in [
        ("Wed, 31 Dec 1969 23:59:59 GMT", -1),
        ("Thu, 01 Jan 1959 00:00:00 GMT", -347_155_200),
        ("Mon, 01 Jan 1900 00:00:00 GMT", -2_208_988_800),
        ("Mon, 01 Jan 0001 00:00:00 GMT", -62_135_596_800),
        // Year 0000 is 1 BC of the proleptic Gregorian calendar, a leap year.
        ("Sat, 01 Jan 0000 00:00:00 GMT", -62_167_219_200),
        ("Thu Jan  1 00:00:00 1959", -347_155_200),
        ("Mon Jan  1 00:00:00 0001", -62_135_596_800),
    ] {
        assert_eq!(parse(value, now), Some(want), "{value}");
    }
}

#[test]
fn years_run_to_9999() {
    let now = at(RFC_DATE);
    assert_eq!(
        parse("Fri, 31 Dec 9999 23:59:59 GMT", now),
        Some(LAST_SECOND_OF_9999)
    );
    assert_eq!(
        parse("Fri Dec 31 23:59:59 9999", now),
        Some(LAST_SECOND_OF_9999)
    );
    assert_eq!(
        parse("Fri, 31 Dec 9999 23:59:60 GMT", now),
        Some(LAST_SECOND_OF_9999 + 1)
    );
}

#[test]
fn leap_second_counts_as_the_next_second_in_all_three_forms() {
    // 2016-12-31T23:59:60Z, the last leap second so far, and 2015-06-30T23:59:60Z.
    let now = at(1_483_228_800);
    for form in [
        "Sat, 31 Dec 2016 23:59:60 GMT",
        "Saturday, 31-Dec-16 23:59:60 GMT",
        "Sat Dec 31 23:59:60 2016",
    ] {
        assert_eq!(parse(form, now), Some(1_483_228_800), "{form}");
    }
    for form in [
        "Tue, 30 Jun 2015 23:59:60 GMT",
        "Tuesday, 30-Jun-15 23:59:60 GMT",
        "Tue Jun 30 23:59:60 2015",
    ] {
        assert_eq!(parse(form, now), Some(1_435_708_800), "{form}");
    }
    // The day name is the written date's, not the next second's.
    assert_eq!(parse("Sun, 31 Dec 2016 23:59:60 GMT", now), None);
    for form in [
        "Sat, 31 Dec 2016 23:59:61 GMT",
        "Saturday, 31-Dec-16 23:59:61 GMT",
        "Sat Dec 31 23:59:61 2016",
        "Sat, 31 Dec 2016 23:59:99 GMT",
    ] {
        assert_eq!(parse(form, now), None, "{form}");
    }
}

#[test]
fn every_month_has_its_length_and_february_29_only_in_leap_years() {
    // 1900 is not a leap year (a century), 2000 is (divisible by 400), 2023 is not, 2024 is, 0000 is.
    for (year, leap) in [
        (1900, false),
        (2000, true),
        (2023, false),
        (2024, true),
        (0, true),
    ] {
        let lengths = [
            31,
            if leap { 29 } else { 28 },
            31,
            30,
            31,
            30,
            31,
            31,
            30,
            31,
            30,
            31,
        ];
        for (month, length) in lengths.into_iter().enumerate() {
            let name = MONTH_NAMES[month];
            let (weekdays, last) = midnight(length, name, year);
            assert_eq!(weekdays, 1, "{length} {name} {year} exists");
            assert_eq!(
                midnight(length + 1, name, year).0,
                0,
                "{} {name} {year}",
                length + 1
            );
            assert_eq!(midnight(0, name, year).0, 0, "00 {name} {year}");
            // The month is as long as the gap to the first of the next: no day skipped or repeated.
            let (next_month, next_year) = match month {
                11 => (MONTH_NAMES[0], year + 1),
                _ => (MONTH_NAMES[month + 1], year),
            };
            let first = midnight(1, name, year).1.unwrap();
            let next = midnight(1, next_month, next_year).1.unwrap();
            assert_eq!(last.unwrap(), next - 86_400, "{length} {name} {year}");
            assert_eq!(next - first, i64::from(length) * 86_400, "{name} {year}");
        }
    }
    assert_eq!(midnight(29, "Feb", 2000).1, Some(951_782_400));
    assert_eq!(midnight(29, "Feb", 2024).1, Some(1_709_164_800));
    assert_eq!(midnight(28, "Feb", 1900).1, Some(-2_203_977_600));
    assert_eq!(midnight(1, "Mar", 1900).1, Some(-2_203_891_200));
}

#[test]
fn a_day_name_that_is_not_the_weekday_is_rejected() {
    // `httpdate` rejects these (its round trip through `SystemTime` recomputes the weekday); so does this.
    let now = at(RFC_DATE);
    for value in [
        "Mon, 06 Nov 1994 08:49:37 GMT",
        "Monday, 06-Nov-94 08:49:37 GMT",
        "Mon Nov  6 08:49:37 1994",
        "Sat, 06 Nov 1994 08:49:37 GMT",
    ] {
        assert_eq!(parse(value, now), None, "{value}");
        assert!(httpdate::parse_http_date(value).is_err(), "{value}");
    }
}

#[test]
fn malformed_dates_are_rejected_as_httpdate_rejects_them() {
    let now = at(RFC_DATE);
    let malformed = [
        // Names in the wrong case: HTTP-date is case sensitive (RFC 9110 §5.6.7).
        "sun, 06 Nov 1994 08:49:37 GMT",
        "SUN, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 nov 1994 08:49:37 GMT",
        "Sun, 06 NOV 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 gmt",
        "Sun, 06 Nov 1994 08:49:37 Gmt",
        "sunday, 06-Nov-94 08:49:37 GMT",
        "Sun nov  6 08:49:37 1994",
        // The day name of the other form.
        "Sunday, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06-Nov-94 08:49:37 GMT",
        "Sunday Nov  6 08:49:37 1994",
        "Sund, 06-Nov-94 08:49:37 GMT",
        "Sundays, 06-Nov-94 08:49:37 GMT",
        // Spaces and separators.
        "Sun,  06 Nov 1994 08:49:37 GMT",
        "Sun,06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994  08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37  GMT",
        "Sun, 06 Nov 1994 08:49:37GMT",
        "Sun, 06-Nov-1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08.49.37 GMT",
        "Sun,\t06 Nov 1994 08:49:37 GMT",
        "Sunday, 06 Nov 94 08:49:37 GMT",
        "Sunday,  06-Nov-94 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 UTC",
        "Sun Nov 6 08:49:37 1994",
        "Sun Nov  6  08:49:37 1994",
        "Sun  Nov  6 08:49:37 1994",
        "Sun Nov 6  08:49:37 1994",
        "Sun Nov  6 08:49:37 94",
        "Sun Nov  6 08:49:37 1994 GMT",
        // Digits: too few, too many, not digits.
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 994 08:49:37 GMT",
        "Sun, 06 Nov 19945 08:49:37 GMT",
        "Sun, 06 Nov 1994 8:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:3 GMT",
        "Sun, 06 Nov 1994 08:49:3x GMT",
        "Sun, 0x Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 199x 08:49:37 GMT",
        "Sun, +6 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-9x 08:49:37 GMT",
        "Sunday, 06-Nov-994 08:49:37 GMT",
        "Sun Nov 6  08:49:37 1994",
        "Sun Nov x6 08:49:37 1994",
        "Sun Nov  x 08:49:37 1994",
        // Ranges.
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "Sun, 06 Nov 1994 08:60:37 GMT",
        "Sun, 00 Nov 1994 08:49:37 GMT",
        "Wed, 31 Nov 1994 08:49:37 GMT",
        "Thu, 32 Dec 1994 08:49:37 GMT",
        "Sun Nov  0 08:49:37 1994",
        "Tue, 29 Feb 2023 00:00:00 GMT",
        "Sunday, 06-Xyz-94 08:49:37 GMT",
        "Sun, 06 Nvo 1994 08:49:37 GMT",
        // Not a date at all, or one with a byte outside ASCII.
        "Sun, 06 Nov 1994 08:49:37 GM\u{00d4}",
        "Sun, \u{0660}6 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 +0000",
        "Sun, 06 Nov 1994 08:49:37 Z",
        "1994-11-06T08:49:37Z",
        "",
    ];
    for value in malformed {
        assert_eq!(parse(value, now), None, "{value:?}");
        assert!(httpdate::parse_http_date(value).is_err(), "{value:?}");
    }
    // `httpdate` trims whitespace itself; here the caller does (`parse_retry_after` strips the optional
    // whitespace around a field value), so a `Retry-After` with spaces around its date is still one.
    for value in [
        " Sun, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 GMT\t",
    ] {
        assert_eq!(parse(value, now), None, "{value:?}");
    }
}

#[test]
fn rfc850_year_is_at_most_50_years_ahead_of_now() {
    let now = at(NOON_15_MARCH_2026);
    for (value, want) in [
        // Exactly 50 years ahead is not more than 50: 2076.
        ("Sunday, 15-Mar-76 12:00:00 GMT", 3_351_499_200),
        ("Saturday, 14-Mar-76 00:00:00 GMT", 3_351_369_600),
        // One second more is: 1976, a Monday.
        ("Monday, 15-Mar-76 12:00:01 GMT", 195_739_201),
        ("Tuesday, 16-Mar-76 00:00:00 GMT", 195_782_400),
        ("Thursday, 01-Jan-26 00:00:00 GMT", 1_767_225_600),
        ("Saturday, 01-Jan-77 00:00:00 GMT", 220_924_800),
        ("Saturday, 01-Jan-00 00:00:00 GMT", 946_684_800),
        ("Sunday, 01-Jan-45 00:00:00 GMT", 2_366_841_600),
        ("Tuesday, 01-Jan-69 00:00:00 GMT", 3_124_224_000),
    ] {
        assert_eq!(parse(value, now), Some(want), "{value}");
    }
    // The day name is checked against the year the rule chose.
    assert_eq!(parse("Sunday, 15-Mar-76 12:00:01 GMT", now), None);
    assert_eq!(parse("Monday, 15-Mar-76 12:00:00 GMT", now), None);

    // Half a second later, the same date is still less than 50 years ahead; a second earlier, it is more.
    let half_a_second_later = now + Duration::from_millis(500);
    assert_eq!(
        parse("Sunday, 15-Mar-76 12:00:00 GMT", half_a_second_later),
        Some(3_351_499_200)
    );
    let a_second_earlier = at(NOON_15_MARCH_2026 - 1);
    assert_eq!(
        parse("Monday, 15-Mar-76 12:00:00 GMT", a_second_earlier),
        Some(195_739_200)
    );
    assert_eq!(
        parse("Sunday, 15-Mar-76 12:00:00 GMT", a_second_earlier),
        None
    );

    // A leap second 50 years ahead is the next second, more than 50 years ahead.
    let end_of_2026 = at(1_798_761_599);
    assert_eq!(
        parse("Thursday, 31-Dec-76 23:59:59 GMT", end_of_2026),
        Some(3_376_684_799)
    );
    assert_eq!(
        parse("Friday, 31-Dec-76 23:59:60 GMT", end_of_2026),
        Some(220_924_800)
    );
    assert_eq!(parse("Thursday, 31-Dec-76 23:59:60 GMT", end_of_2026), None);
}

#[test]
fn rfc850_year_crosses_centuries_and_the_epoch() {
    // In mid-2099, "00" is 2100, not 2000.
    let june_2099 = at(4_083_955_200);
    assert_eq!(
        parse("Friday, 01-Jan-00 00:00:00 GMT", june_2099),
        Some(4_102_444_800)
    );
    // With `now` in 1950, before the epoch: "01" is 1901 and "99" 1999.
    let new_year_1950 = at(-631_152_000);
    assert_eq!(
        parse("Tuesday, 01-Jan-01 00:00:00 GMT", new_year_1950),
        Some(-2_177_452_800)
    );
    assert_eq!(
        parse("Friday, 01-Jan-99 00:00:00 GMT", new_year_1950),
        Some(915_148_800)
    );
    // `httpdate` read "45" to "69" as 2045 to 2069 whatever the date; in 1994 they are 1945 to 1969.
    assert_eq!(
        parse("Monday, 01-Jan-45 00:00:00 GMT", at(RFC_DATE)),
        Some(-788_918_400)
    );
    assert_eq!(
        parse("Wednesday, 01-Jan-69 00:00:00 GMT", at(RFC_DATE)),
        Some(-31_536_000)
    );
}

#[test]
fn rfc850_dates_beyond_i64_unix_seconds_are_none_not_a_panic() {
    // Within 50 years of the limits of `SystemTime` (as on Linux, `i64` seconds either side of the
    // epoch), the two-digit year can name a date whose Unix second does not fit. Whichever day name
    // the date needs, every one is rejected; a date that fits still parses, with exactly one.
    let weekdays = |date: &str, now: SystemTime| {
        LONG_DAY_NAMES
            .iter()
            .filter_map(|name| parse(&format!("{name}, {date} GMT"), now))
            .collect::<Vec<_>>()
    };
    let last = at(i64::MAX);
    assert_eq!(weekdays("31-Dec-99 23:59:60", last), [0i64; 0]);
    let [fits] = weekdays("06-Nov-94 08:49:37", last)[..] else {
        panic!("one weekday");
    };
    assert!(fits <= i64::MAX - 86_400);
    let first = at(i64::MIN);
    assert_eq!(weekdays("01-Jan-00 00:00:00", first), [0i64; 0]);
    assert_eq!(weekdays("01-Jan-50 00:00:00", first).len(), 1);
}

proptest! {
    #[test]
    fn every_form_of_a_formatted_instant_parses_to_its_second(
        second in 0..=LAST_SECOND_OF_9999,
    ) {
        let instant = at(second);
        let imf = httpdate::fmt_http_date(instant);
        prop_assert_eq!(parse(&imf, instant), Some(second), "{}", imf);
        let (rfc850, asctime) = other_forms(&imf);
        prop_assert_eq!(parse(&asctime, instant), Some(second), "{}", asctime);
        // With `now` at the instant itself, the two-digit year is the instant's.
        prop_assert_eq!(parse(&rfc850, instant), Some(second), "{}", rfc850);
    }

    #[test]
    fn rfc850_year_follows_now_within_50_years(
        second in 0..=LAST_SECOND_OF_9999,
        // 49 years of 366 days and 51 years of 365 days fall short of, and go past, any 50 years.
        within in 0..=49 * 366 * 86_400_i64,
        beyond in 51 * 366 * 86_400..=99 * 365 * 86_400_i64,
    ) {
        let (rfc850, _) = other_forms(&httpdate::fmt_http_date(at(second)));
        // Up to 49 years later or earlier, the date keeps its year.
        prop_assert_eq!(parse(&rfc850, at(second - within)), Some(second), "{}", rfc850);
        prop_assert_eq!(parse(&rfc850, at(second + within)), Some(second), "{}", rfc850);
        // More than 50 years before the date, its year is a century earlier, when the same day of the
        // year fell on another weekday (a century is 36 524 or 36 525 days, never a whole number of
        // weeks), so the day name no longer matches.
        prop_assert_eq!(parse(&rfc850, at(second - beyond)), None, "{}", rfc850);
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        value in proptest::collection::vec(any::<u8>(), 0..40),
        now in any::<i64>(),
    ) {
        let _ = parse_http_date(&value, at(now));
    }

    #[test]
    fn date_shaped_text_never_panics(
        value in "[A-Za-z]{3,9},? [0-9 ]{2}[- ][A-Za-z]{3}[- ][0-9]{2,4} [0-9]{2}:[0-9]{2}:[0-9]{2}( GMT| [0-9]{4})?",
        now in any::<i64>(),
    ) {
        let _ = parse_http_date(value.as_bytes(), at(now));
    }
}
