//! HTTP-date (RFC 9110 §5.6.7) in its three forms, from bytes to Unix seconds.

use std::time::{SystemTime, UNIX_EPOCH};

/// Parses an HTTP-date into Unix seconds, negative before 1970, or `None` if `value` is not one.
///
/// The three forms of RFC 9110 §5.6.7, each exactly as its grammar spells it:
///
/// - IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`;
/// - the obsolete RFC 850 form, `Sunday, 06-Nov-94 08:49:37 GMT`;
/// - asctime, `Sun Nov  6 08:49:37 1994`, the day a space and one digit or two digits (`Nov 16`, `Nov 06`).
///
/// As strict as the `httpdate` crate it replaces: single spaces where the grammar has them and no others around the
/// value, `GMT` in the first two forms, names in the RFC's case ("HTTP-date is case sensitive"), the short
/// day name in IMF-fixdate and asctime and the long one in RFC 850. The date must exist (30 April, 29
/// February only in leap years of the proleptic Gregorian calendar) and the day name must be its weekday;
/// the hour is at most 23, the minute at most 59 and the second at most 60, the leap second the grammar
/// allows ("00:00:00 - 23:59:60"), which Unix time cannot represent and so counts as the next second.
/// Four-digit years run from 0000 to 9999: unlike `httpdate`, dates before 1970 are dates.
///
/// `now` is read only for RFC 850's two-digit year, which is the latest year with those two digits that
/// puts the date at most 50 years after `now`: §5.6.7 reads a timestamp that "appears to be more than 50
/// years in the future" as "the most recent year in the past that had the same last two digits". The day
/// name is checked against the year this chooses. Only for a `now` within 50 years of the limits of
/// Unix time in `i64` seconds could the date overflow them; it is then `None`.
pub(crate) fn parse_http_date(value: &[u8], now: SystemTime) -> Option<i64> {
    // The three forms have different lengths (29, 24 and 30 to 33 bytes), so the length picks the one to try.
    match value.len() {
        29 => imf_fixdate(value),
        24 => asctime(value),
        _ => rfc850_date(value, now),
    }
}

/// `day-name "," SP day SP month SP year SP hour ":" minute ":" second SP "GMT"`.
fn imf_fixdate(value: &[u8]) -> Option<i64> {
    #[rustfmt::skip]
    let &[
        n0, n1, n2, b',', b' ',
        d0, d1, b' ', m0, m1, m2, b' ', y0, y1, y2, y3, b' ',
        h0, h1, b':', i0, i1, b':', s0, s1, b' ',
        b'G', b'M', b'T',
    ] = value else {
        return None;
    };
    Fields {
        weekday: short_day_name([n0, n1, n2])?,
        year: four_digits(y0, y1, y2, y3)?,
        month: month_name([m0, m1, m2])?,
        day: two_digits(d0, d1)?,
        hour: two_digits(h0, h1)?,
        minute: two_digits(i0, i1)?,
        second: two_digits(s0, s1)?,
    }
    .unix_seconds()
}

/// `day-name SP month SP ( 2DIGIT / ( SP DIGIT ) ) SP hour ":" minute ":" second SP year`.
fn asctime(value: &[u8]) -> Option<i64> {
    #[rustfmt::skip]
    let &[
        n0, n1, n2, b' ',
        m0, m1, m2, b' ', d0, d1, b' ',
        h0, h1, b':', i0, i1, b':', s0, s1, b' ',
        y0, y1, y2, y3,
    ] = value else {
        return None;
    };
    let day = match d0 {
        b' ' => digit(d1)?,
        _ => two_digits(d0, d1)?,
    };
    Fields {
        weekday: short_day_name([n0, n1, n2])?,
        year: four_digits(y0, y1, y2, y3)?,
        month: month_name([m0, m1, m2])?,
        day,
        hour: two_digits(h0, h1)?,
        minute: two_digits(i0, i1)?,
        second: two_digits(s0, s1)?,
    }
    .unix_seconds()
}

/// `day-name-l "," SP day "-" month "-" 2DIGIT SP hour ":" minute ":" second SP "GMT"`.
fn rfc850_date(value: &[u8], now: SystemTime) -> Option<i64> {
    // Everything after the long day name is 24 bytes.
    let (name, rest) = value.split_at(value.len().checked_sub(24)?);
    #[rustfmt::skip]
    let &[
        b',', b' ',
        d0, d1, b'-', m0, m1, m2, b'-', y0, y1, b' ',
        h0, h1, b':', i0, i1, b':', s0, s1, b' ',
        b'G', b'M', b'T',
    ] = rest else {
        return None;
    };
    let mut fields = Fields {
        weekday: long_day_name(name)?,
        year: 0,
        month: month_name([m0, m1, m2])?,
        day: two_digits(d0, d1)?,
        hour: two_digits(h0, h1)?,
        minute: two_digits(i0, i1)?,
        second: two_digits(s0, s1)?,
    };
    fields.year = fields.two_digit_year(two_digits(y0, y1)?, now);
    fields.unix_seconds()
}

/// A date and time of day as written, before it is checked.
#[derive(Clone, Copy, Debug)]
struct Fields {
    /// 0 for Monday to 6 for Sunday.
    weekday: u8,
    year: i64,
    /// 1 to 12.
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
    second: u8,
}

impl Fields {
    /// Checks the ranges and the day name, and counts a leap second as the next second.
    fn unix_seconds(self) -> Option<i64> {
        if self.day == 0
            || self.day > days_in_month(self.year, self.month)
            || self.hour > 23
            || self.minute > 59
            || self.second > 60
        {
            return None;
        }
        let days = days_from_civil(self.year, self.month, self.day);
        if weekday(days) != self.weekday {
            return None;
        }
        let time_of_day =
            i64::from(self.hour) * 3600 + i64::from(self.minute) * 60 + i64::from(self.second);
        days.checked_mul(86_400)?.checked_add(time_of_day)
    }

    /// The latest year ending in `two_digits` that puts this date at most 50 years after `now`.
    fn two_digit_year(&self, two_digits: u8, now: SystemTime) -> i64 {
        let now = Civil::from_unix(unix_seconds_floor(now));
        let latest = now.year + 50;
        let year = latest - (latest - i64::from(two_digits)).rem_euclid(100);
        // In the year `latest` itself, the date is more than 50 years ahead if it comes later in the year
        // than `now` does. Comparing the fields as written is exact: `now`'s second is rounded down, and a
        // leap second 60 sorts after 59 as the next second does.
        let written = (self.month, self.day, self.hour, self.minute, self.second);
        let limit = (now.month, now.day, now.hour, now.minute, now.second);
        if year == latest && written > limit {
            year - 100
        } else {
            year
        }
    }
}

/// A Unix second as a UTC date and time of day.
struct Civil {
    year: i64,
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
    second: u8,
}

impl Civil {
    fn from_unix(seconds: i64) -> Self {
        let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
        // The casts cannot truncate: the second of the day is below 86 400.
        let of_day = seconds.rem_euclid(86_400);
        Civil {
            year,
            month,
            day,
            hour: (of_day / 3600) as u8,
            minute: (of_day / 60 % 60) as u8,
            second: (of_day % 60) as u8,
        }
    }
}

/// `t` in whole Unix seconds, rounded down, saturating at the limits of `i64`.
fn unix_seconds_floor(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(after) => i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
        Err(before) => {
            let before = before.duration();
            let whole = i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
            (-whole).saturating_sub(i64::from(before.subsec_nanos() > 0))
        }
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
/// `days_from_civil`: years counted from 1 March, so that a leap day ends the year).
fn days_from_civil(year: i64, month: u8, day: u8) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year.rem_euclid(400);
    let month = i64::from(month);
    let month_from_march = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The inverse of [`days_from_civil`]: (year, month, day).
fn civil_from_days(days: i64) -> (i64, u8, u8) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    // The casts cannot truncate: the day is 1 to 31 and the month 1 to 12.
    let day = (day_of_year - (153 * month_from_march + 2) / 5 + 1) as u8;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    } as u8;
    (era * 400 + year_of_era + i64::from(month <= 2), month, day)
}

/// 0 for Monday to 6 for Sunday; 1970-01-01 was a Thursday.
fn weekday(days: i64) -> u8 {
    // The cast cannot truncate: the remainder is 0 to 6.
    (days + 3).rem_euclid(7) as u8
}

fn days_in_month(year: i64, month: u8) -> u8 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn short_day_name(name: [u8; 3]) -> Option<u8> {
    Some(match &name {
        b"Mon" => 0,
        b"Tue" => 1,
        b"Wed" => 2,
        b"Thu" => 3,
        b"Fri" => 4,
        b"Sat" => 5,
        b"Sun" => 6,
        _ => return None,
    })
}

fn long_day_name(name: &[u8]) -> Option<u8> {
    Some(match name {
        b"Monday" => 0,
        b"Tuesday" => 1,
        b"Wednesday" => 2,
        b"Thursday" => 3,
        b"Friday" => 4,
        b"Saturday" => 5,
        b"Sunday" => 6,
        _ => return None,
    })
}

fn month_name(name: [u8; 3]) -> Option<u8> {
    Some(match &name {
        b"Jan" => 1,
        b"Feb" => 2,
        b"Mar" => 3,
        b"Apr" => 4,
        b"May" => 5,
        b"Jun" => 6,
        b"Jul" => 7,
        b"Aug" => 8,
        b"Sep" => 9,
        b"Oct" => 10,
        b"Nov" => 11,
        b"Dec" => 12,
        _ => return None,
    })
}

fn digit(byte: u8) -> Option<u8> {
    byte.is_ascii_digit().then(|| byte - b'0')
}

fn two_digits(tens: u8, ones: u8) -> Option<u8> {
    Some(digit(tens)? * 10 + digit(ones)?)
}

fn four_digits(a: u8, b: u8, c: u8, d: u8) -> Option<i64> {
    Some(i64::from(two_digits(a, b)?) * 100 + i64::from(two_digits(c, d)?))
}

#[cfg(test)]
mod tests;
