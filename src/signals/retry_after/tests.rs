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
}

proptest! {
    // A thousand cases: the values that tell a parser's range checks apart are a few in a hundred.
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn any_header_value_is_a_delay_exactly_when_the_grammar_reads_one(
        value in header_value(),
        now_seconds in EARLIEST_NOW..=LATEST_NOW,
        now_nanos in 0..1_000_000_000_u32,
    ) {
        let now = instant(now_seconds, now_nanos).expect("within what every platform holds");
        let header = HeaderValue::from_bytes(&value).expect("a header value by construction");
        let want = grammar(&value, now_seconds, now_nanos);
        prop_assert_eq!(
            parse_retry_after(&header, now),
            want,
            "{:?} at {}.{:09}",
            String::from_utf8_lossy(&value),
            now_seconds,
            now_nanos
        );
    }

    #[test]
    fn the_oracles_imf_fixdate_is_httpdates(second in 0..=253_402_300_799_i64) {
        prop_assert_eq!(
            spell(Form::Imf, second),
            httpdate::fmt_http_date(at(second as u64))
        );
    }
}

// What the proptest above checks against: the grammar of RFC 9110 §10.2.3 and §5.6.7 read another
// way. A value is delta-seconds if it is all digits; a date if it is one of the three forms of the
// second its fields name, spelled again from that second — a field out of range (31 April, hour 24)
// or a wrong day name spells a different date, and so is not one.

/// The `now` of the proptest: 1601 to 9999, which every platform's `SystemTime` holds (Windows'
/// starts in 1601).
const EARLIEST_NOW: i64 = -11_644_473_600;
const LATEST_NOW: i64 = 253_402_300_799;

/// 0000-01-01 and 9999-12-31 23:59:59: the seconds a four-digit year can name.
const FIRST_DATE: i64 = -62_167_219_200;
const LAST_DATE: i64 = 253_402_300_799;

const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const LONG_DAY_NAMES: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The three forms, asctime's day padded with a space or a zero.
#[derive(Debug, Clone, Copy)]
enum Form {
    Imf,
    Rfc850,
    Asctime,
    AsctimeZero,
}

/// A Unix second as a date and time of day, counted a year and a month at a time: slow, and not
/// the parser's arithmetic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Civil {
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    minute: i64,
    second: i64,
}

fn leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn month_days(year: i64, month: i64) -> i64 {
    match month {
        2 if leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn civil(unix: i64) -> (Civil, usize) {
    let mut days = unix.div_euclid(86_400);
    // 1970-01-01 was a Thursday.
    let weekday = (days + 3).rem_euclid(7) as usize;
    let mut year = 1970;
    while days < 0 {
        year -= 1;
        days += if leap(year) { 366 } else { 365 };
    }
    while days >= if leap(year) { 366 } else { 365 } {
        days -= if leap(year) { 366 } else { 365 };
        year += 1;
    }
    let mut month = 1;
    while days >= month_days(year, month) {
        days -= month_days(year, month);
        month += 1;
    }
    let of_day = unix.rem_euclid(86_400);
    let civil = Civil {
        year,
        month,
        day: days + 1,
        hour: of_day / 3600,
        minute: of_day / 60 % 60,
        second: of_day % 60,
    };
    (civil, weekday)
}

/// The Unix second of a date whose fields are in range.
fn unix(c: Civil) -> i64 {
    let mut days: i64 = 0;
    let mut year = 1970;
    while year > c.year {
        year -= 1;
        days -= if leap(year) { 366 } else { 365 };
    }
    while year < c.year {
        days += if leap(year) { 366 } else { 365 };
        year += 1;
    }
    days += (1..c.month).map(|m| month_days(c.year, m)).sum::<i64>() + c.day - 1;
    days * 86_400 + c.hour * 3600 + c.minute * 60 + c.second
}

/// `second` spelled in `form`.
fn spell(form: Form, second: i64) -> String {
    let (c, weekday) = civil(second);
    spell_fields(form, c, weekday)
}

/// A date spelled in `form` with these fields, as they are, and this day name (0 for Monday).
fn spell_fields(form: Form, c: Civil, weekday: usize) -> String {
    let (name, month) = (DAY_NAMES[weekday], MONTHS[(c.month - 1) as usize]);
    let time = format!("{:02}:{:02}:{:02}", c.hour, c.minute, c.second);
    match form {
        Form::Imf => format!("{name}, {:02} {month} {:04} {time} GMT", c.day, c.year),
        Form::Rfc850 => format!(
            "{}, {:02}-{month}-{:02} {time} GMT",
            LONG_DAY_NAMES[weekday],
            c.day,
            c.year.rem_euclid(100)
        ),
        Form::Asctime => format!("{name} {month} {:>2} {time} {:04}", c.day, c.year),
        Form::AsctimeZero => format!("{name} {month} {:02} {time} {:04}", c.day, c.year),
    }
}

/// What the grammar makes of `value` at `now`: a delay, or `None`.
fn grammar(value: &[u8], now_seconds: i64, now_nanos: u32) -> Option<Duration> {
    let ows = |b: &u8| matches!(b, b' ' | b'\t');
    let start = value.iter().position(|b| !ows(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !ows(b))
        .map_or(start, |at| at + 1);
    let text = std::str::from_utf8(&value[start..end]).ok()?;
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Some(text.parse().map_or(Duration::MAX, Duration::from_secs));
    }
    let date = date(text, now_seconds)?;
    let wait = i128::from(date) * 1_000_000_000
        - (i128::from(now_seconds) * 1_000_000_000 + i128::from(now_nanos));
    Some(if wait <= 0 {
        Duration::ZERO
    } else {
        Duration::new(
            u64::try_from(wait / 1_000_000_000).unwrap(),
            (wait % 1_000_000_000) as u32,
        )
    })
}

/// The second `text` spells in one of the three forms, if it does: its fields read where the
/// form puts them, and the date they name spelled again in that form, which must give `text`.
fn date(text: &str, now_seconds: i64) -> Option<i64> {
    let number = |from: usize, to: usize| -> Option<i64> {
        let digits = text.get(from..to)?.trim_start_matches(' ');
        (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.parse().ok())?
    };
    let month = |from: usize| -> Option<i64> {
        let name = text.get(from..from + 3)?;
        Some(MONTHS.iter().position(|m| *m == name)? as i64 + 1)
    };
    let len = text.len();
    let (form, mut fields) = match len {
        29 => (
            Form::Imf,
            Civil {
                year: number(12, 16)?,
                month: month(8)?,
                day: number(5, 7)?,
                hour: number(17, 19)?,
                minute: number(20, 22)?,
                second: number(23, 25)?,
            },
        ),
        24 => (
            if text.as_bytes()[8] == b' ' {
                Form::Asctime
            } else {
                Form::AsctimeZero
            },
            Civil {
                year: number(20, 24)?,
                month: month(4)?,
                day: number(8, 10)?,
                hour: number(11, 13)?,
                minute: number(14, 16)?,
                second: number(17, 19)?,
            },
        ),
        _ => {
            let at = len.checked_sub(24)?;
            let fields = Civil {
                year: number(at + 9, at + 11)?,
                month: month(at + 5)?,
                day: number(at + 2, at + 4)?,
                hour: number(at + 12, at + 14)?,
                minute: number(at + 15, at + 17)?,
                second: number(at + 18, at + 20)?,
            };
            (Form::Rfc850, fields)
        }
    };
    if fields.day == 0
        || fields.day > month_days(fields.year, fields.month)
        || fields.hour > 23
        || fields.minute > 59
        || fields.second > 60
    {
        return None;
    }
    if let Form::Rfc850 = form {
        // The latest year with these two digits that puts the date at most 50 years after `now`
        // (RFC 9110 §5.6.7): its fields compared with `now`'s, fifty years on.
        let (now, _) = civil(now_seconds);
        let limit = Civil {
            year: now.year + 50,
            ..now
        };
        let century = limit.year - limit.year.rem_euclid(100);
        fields.year = [century + 100, century, century - 100]
            .into_iter()
            .map(|century| Civil {
                year: century + fields.year,
                ..fields
            })
            .find(|candidate| *candidate <= limit)?
            .year;
        // A day that exists in no year with these digits: 29 February of a year that is not leap.
        if fields.day > month_days(fields.year, fields.month) {
            return None;
        }
    }
    // A leap second is spelled :60 and counts as the second after :59.
    let leap_second = fields.second == 60;
    if leap_second {
        fields.second = 59;
    }
    let second = unix(fields);
    let mut spelled = spell(form, second);
    if leap_second {
        // The seconds come before " GMT", or before asctime's year.
        let end = spelled.len()
            - if let Form::Imf | Form::Rfc850 = form {
                4
            } else {
                5
            };
        spelled.replace_range(end - 2..end, "60");
    }
    (spelled == text).then_some(second + i64::from(leap_second))
}

/// Header values, each valid by construction: any bytes a header value may hold, the bytes a date
/// is written with, delta-seconds, dates in each form, from year 0000 to 9999, with up to three
/// bytes changed, dropped, added or swapped, and dates whose fields run past their ranges; with
/// spaces or tabs around some.
fn header_value() -> impl Strategy<Value = Vec<u8>> {
    // Visible ASCII, space, tab and obs-text: what `HeaderValue::from_bytes` takes.
    let any_byte = prop_oneof![Just(b'\t'), 0x20_u8..=0x7e, 0x80_u8..=0xff];
    let date_bytes = b"0123456789 ,:-GMTADFJMNOSTWabcdeghilnoprstuvy";
    let date_byte = prop_oneof![
        4 => proptest::sample::select(&date_bytes[..]),
        1 => any_byte.clone(),
    ];
    let form = prop_oneof![
        Just(Form::Imf),
        Just(Form::Rfc850),
        Just(Form::Asctime),
        Just(Form::AsctimeZero),
    ];
    let edit = (any::<usize>(), 0..4_u8, date_byte.clone());
    let date = (
        form.clone(),
        FIRST_DATE..=LAST_DATE,
        proptest::collection::vec(edit, 0..=3),
    )
        .prop_map(|(form, second, edits)| {
            let mut value = spell(form, second).into_bytes();
            for (at, kind, byte) in edits {
                let at = at % (value.len() + 1);
                match kind {
                    0 if at < value.len() => value[at] = byte,
                    1 if at < value.len() => {
                        value.remove(at);
                    }
                    2 => value.insert(at, byte),
                    _ if at + 1 < value.len() => value.swap(at, at + 1),
                    _ => {}
                }
            }
            value
        });
    // Each field in its range or just past it, half of the time at its edges (a month's last days,
    // February's most of all, hour 23 and 24, second 59 to 61), and the day name of the day the
    // fields count to (29 February 2023 counts to 1 March) half of the time.
    let day = prop_oneof![1..=31_i64, 28..=32_i64, Just(0)];
    let month = prop_oneof![1..=12_i64, Just(2)];
    let fields = (
        form.clone(),
        (0..=9999_i64, month, day),
        (
            prop_oneof![0..=23_i64, 23..=24_i64],
            prop_oneof![0..=59_i64, 59..=60_i64],
            prop_oneof![0..=59_i64, 59..=61_i64],
        ),
        any::<bool>(),
        0..7_usize,
    )
        .prop_map(
            |(form, (year, month, day), (hour, minute, second), counted, name)| {
                let c = Civil {
                    year,
                    month,
                    day,
                    hour,
                    minute,
                    second,
                };
                let first = unix(Civil {
                    day: 1,
                    hour: 0,
                    minute: 0,
                    second: 0,
                    ..c
                });
                let weekday = if counted {
                    civil(first + (day - 1) * 86_400).1
                } else {
                    name
                };
                spell_fields(form, c, weekday).into_bytes()
            },
        );
    let digits = proptest::collection::vec(proptest::sample::select(&b"0123456789"[..]), 1..25);
    let ows = proptest::collection::vec(prop_oneof![Just(b' '), Just(b'\t')], 0..3);
    let value = prop_oneof![
        1 => proptest::collection::vec(any_byte, 0..40),
        1 => proptest::collection::vec(date_byte, 0..35),
        1 => digits,
        3 => date,
        2 => fields,
    ];
    (ows.clone(), value, ows).prop_map(|(before, value, after)| [before, value, after].concat())
}
