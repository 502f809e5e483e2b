//! Reading a service config's fields as C-core reads them: which JSON types each takes, how it
//! parses numbers (absl's `SimpleAtoi` and `SimpleAtof`: spaces around, a sign, digits), durations
//! (proto3 JSON's `"1.5s"`, kept to the millisecond and rounded down) and status codes (upper-case
//! names only), and what it refuses. Each refusal names the field's path as C-core does.

use std::time::Duration;

use crate::classify::{GrpcCode, GrpcCodes};
use crate::config::json::Json;
use crate::error::{FieldProblem, ServiceConfigError};

pub(super) type Loaded<T> = Result<T, ServiceConfigError>;

/// A field's path as C-core writes it: `methodConfig[0].retryPolicy.maxAttempts`.
#[derive(Debug, Clone)]
pub(super) struct Path(String);

impl Path {
    pub(super) fn root() -> Self {
        Self(String::new())
    }

    pub(super) fn field(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Self(name.to_owned())
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    pub(super) fn index(&self, i: usize) -> Self {
        Self(format!("{}[{i}]", self.0))
    }

    pub(super) fn refuse<T>(&self, problem: FieldProblem) -> Loaded<T> {
        Err(ServiceConfigError::field(self.0.clone(), problem))
    }

    pub(super) fn as_str(&self) -> &str {
        &self.0
    }
}

/// The members of an object.
pub(super) fn object<'a>(json: &'a Json, path: &Path) -> Loaded<&'a [(String, Json)]> {
    match json {
        Json::Object(members) => Ok(members),
        _ => path.refuse(FieldProblem::NotAnObject),
    }
}

/// A field read as C-core's object loader reads one: absent and `null` are the same.
pub(super) fn member<'a>(json: &'a Json, key: &str) -> Option<&'a Json> {
    json.get(key).filter(|value| **value != Json::Null)
}

/// A field read as C-core's `LoadJsonObjectField` reads one: only absent is absent, a `null` is a
/// value of the wrong type.
pub(super) fn member_or_null<'a>(json: &'a Json, key: &str) -> Option<&'a Json> {
    json.get(key)
}

/// A required field: absent (or `null`, where `nullable`) is refused.
pub(super) fn required<'a>(value: Option<&'a Json>, path: &Path) -> Loaded<&'a Json> {
    value.map_or_else(|| path.refuse(FieldProblem::Missing), Ok)
}

pub(super) fn array<'a>(json: &'a Json, path: &Path) -> Loaded<&'a [Json]> {
    match json {
        Json::Array(items) => Ok(items),
        _ => path.refuse(FieldProblem::NotAnArray),
    }
}

pub(super) fn string<'a>(json: &'a Json, path: &Path) -> Loaded<&'a str> {
    match json {
        Json::String(text) => Ok(text),
        _ => path.refuse(FieldProblem::NotAString),
    }
}

pub(super) fn boolean(json: &Json, path: &Path) -> Loaded<bool> {
    match json {
        Json::Bool(value) => Ok(*value),
        _ => path.refuse(FieldProblem::NotABoolean),
    }
}

/// The text of a number field: a JSON number as written, or a string (proto3 JSON takes both).
pub(super) fn number_text<'a>(json: &'a Json, path: &Path) -> Loaded<&'a str> {
    match json {
        Json::Number(text) | Json::String(text) => Ok(text),
        _ => path.refuse(FieldProblem::NotANumber),
    }
}

/// An `int32` field, parsed as absl's `SimpleAtoi`.
pub(super) fn int32(json: &Json, path: &Path) -> Loaded<i32> {
    let text = number_text(json, path)?;
    match simple_atoi(text).and_then(|n| i32::try_from(n).ok()) {
        Some(n) => Ok(n),
        None => path.refuse(FieldProblem::NotAnInteger(text.to_owned())),
    }
}

/// A `uint32` field, parsed as absl's `SimpleAtoi` (no sign of minus, not even on a zero).
pub(super) fn uint32(json: &Json, path: &Path) -> Loaded<u32> {
    let text = number_text(json, path)?;
    let parsed = simple_atoi_unsigned(text).and_then(|n| u32::try_from(n).ok());
    match parsed {
        Some(n) => Ok(n),
        None => path.refuse(FieldProblem::NotANonNegativeInteger(text.to_owned())),
    }
}

/// A `float` field (32 bits), parsed as absl's `SimpleAtof`: an overflow is infinite, an
/// underflow zero; `inf`, `infinity`, `nan` and hexadecimal are read too.
pub(super) fn float32(json: &Json, path: &Path) -> Loaded<f32> {
    let text = number_text(json, path)?;
    match simple_atof(text) {
        Some(n) => Ok(n),
        None => path.refuse(FieldProblem::NotAFloat(text.to_owned())),
    }
}

/// A duration as C-core reads `google.protobuf.Duration`'s JSON: a string ending in `s`, spaces
/// allowed before it, seconds and up to nine decimal places, kept in whole milliseconds rounded
/// down (C-core's clock): `"0.0009s"` is zero.
pub(super) fn duration(json: &Json, path: &Path) -> Loaded<Duration> {
    let text = string(json, path)?;
    let Some(body) = text.strip_suffix('s') else {
        return path.refuse(FieldProblem::Duration("no s suffix"));
    };
    let body = body.trim_matches(is_ascii_space);
    let (seconds, nanos) = match body.split_once('.') {
        Some((seconds, fraction)) => {
            let Some(digits) = simple_atoi(fraction).and_then(|n| i32::try_from(n).ok()) else {
                return path.refuse(FieldProblem::Duration("not a number of nanoseconds"));
            };
            if fraction.len() > 9 {
                return path.refuse(FieldProblem::Duration("too many digits after decimal"));
            }
            let scale = 10_i64.pow(9 - fraction.len() as u32);
            (seconds, i64::from(digits) * scale)
        }
        None => (body, 0),
    };
    let Some(seconds) = simple_atoi(seconds).and_then(|n| i64::try_from(n).ok()) else {
        return path.refuse(FieldProblem::Duration("not a number of seconds"));
    };
    if !(0..=315_576_000_000).contains(&seconds) {
        return path.refuse(FieldProblem::SecondsOutOfRange);
    }
    // Whole milliseconds, the nanoseconds rounded down (towards minus infinity, as C-core's
    // `NanosecondsRoundDown`: `"1.-5s"` is 950 ms).
    let millis = seconds * 1000 + nanos.div_euclid(1_000_000);
    Ok(Duration::from_millis(u64::try_from(millis).unwrap_or(0)))
}

/// A status code, by its upper-case name only, as C-core reads one.
pub(super) fn status_code(json: &Json, path: &Path) -> Loaded<GrpcCode> {
    let name = string(json, path)?;
    (0..17)
        .filter_map(GrpcCode::from_code)
        .find(|code| code.as_str() == name)
        .map_or_else(
            || path.refuse(FieldProblem::StatusCode(name.to_owned())),
            Ok,
        )
}

/// A list of status codes (`retryableStatusCodes`), read as C-core's `LoadJsonObjectField` reads
/// it: absent is none, `null` is refused.
pub(super) fn status_codes(parent: &Json, key: &str, path: &Path) -> Loaded<GrpcCodes> {
    let path = path.field(key);
    let Some(list) = member_or_null(parent, key) else {
        return Ok(GrpcCodes::NONE);
    };
    let mut codes = Vec::new();
    for (i, item) in array(list, &path)?.iter().enumerate() {
        codes.push(status_code(item, &path.index(i))?);
    }
    Ok(GrpcCodes::new(&codes))
}

fn is_ascii_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// absl's `SimpleAtoi` in base 10: ASCII spaces around, an optional `+` or `-`, then at least one
/// digit and nothing else; `None` past what an `i128` holds.
pub(super) fn simple_atoi(text: &str) -> Option<i128> {
    let text = text.trim_matches(is_ascii_space);
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 38 {
        return None;
    }
    let value: i128 = digits.parse().ok()?;
    Some(if negative { -value } else { value })
}

/// [`simple_atoi`] for an unsigned type: a minus sign is refused, even on a zero.
pub(super) fn simple_atoi_unsigned(text: &str) -> Option<u128> {
    if text.trim_matches(is_ascii_space).starts_with('-') {
        return None;
    }
    simple_atoi(text).and_then(|n| u128::try_from(n).ok())
}

/// absl's `SimpleAtof`: ASCII spaces around, an optional `+` (not before a `-`), then a decimal or
/// hexadecimal number, `inf`, `infinity` or `nan`, in any case; an overflow is infinite.
fn simple_atof(text: &str) -> Option<f32> {
    let text = text.trim_matches(is_ascii_space);
    let text = match text.strip_prefix('+') {
        Some(rest) if rest.starts_with('-') => return None,
        Some(rest) => rest,
        None => text,
    };
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let lower = unsigned.to_ascii_lowercase();
    let value = if let Some(hex) = lower.strip_prefix("0x") {
        hex_float(hex)?
    } else {
        // Rust's grammar, less what absl's refuses: a leading `+` after the sign, a bare `.`.
        if unsigned.starts_with('+') || unsigned.is_empty() {
            return None;
        }
        unsigned.parse::<f32>().ok()?
    };
    Some(if negative { -value } else { value })
}

/// A hexadecimal number without exponent (`10`, `1.8`), as `SimpleAtof` reads one after `0x`.
fn hex_float(hex: &str) -> Option<f32> {
    let (whole, fraction) = hex.split_once('.').unwrap_or((hex, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let mut value = 0.0_f64;
    for digit in whole.chars() {
        value = value * 16.0 + f64::from(digit.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for digit in fraction.chars() {
        value += f64::from(digit.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    Some(value as f32)
}

/// `tokenRatio`, as C-core reads it: a number or a string, its whole part and at most three decimal
/// places (more are dropped), each parsed as `SimpleAtoi`. C-core then refuses a ratio whose
/// thousandths, counted in 32 bits as it counts them, come to zero. The value is A6's, in
/// thousandths: `1` is one token (C-core reads a ratio written without a decimal point as that many
/// thousandths: `1` as `0.001`).
pub(super) fn token_ratio(json: &Json, path: &Path) -> Loaded<u64> {
    let text = number_text(json, path)?;
    let unparsed = || path.refuse(FieldProblem::NotAFloat(text.to_owned()));
    let (whole, decimals, c_core_scale) = match text.split_once('.') {
        Some((whole, after)) => {
            let after = after.get(..3).unwrap_or(after);
            let Some(digits) = simple_atoi_unsigned(after).and_then(|n| u32::try_from(n).ok())
            else {
                return unparsed();
            };
            let digits = digits * 10_u32.pow(3 - after.len() as u32);
            (whole, digits, 1000_u32)
        }
        None => (text, 0, 1),
    };
    let Some(whole) = simple_atoi_unsigned(whole).and_then(|n| u32::try_from(n).ok()) else {
        return unparsed();
    };
    let c_core_milli = whole.wrapping_mul(c_core_scale).wrapping_add(decimals);
    if c_core_milli == 0 {
        return path.refuse(FieldProblem::NotPositive);
    }
    Ok(u64::from(whole) * 1000 + u64::from(decimals))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Json {
        Json::String(s.to_owned())
    }

    #[test]
    fn integers_read_as_simple_atoi() {
        let path = Path::root();
        assert_eq!(int32(&text(" +3 "), &path), Ok(3));
        assert_eq!(int32(&Json::Number("-1".into()), &path), Ok(-1));
        for refused in ["2.0", "1e1", "", "3x", "2147483648"] {
            assert!(int32(&text(refused), &path).is_err(), "{refused}");
        }
        assert_eq!(uint32(&text("4294967295"), &path), Ok(u32::MAX));
        assert!(uint32(&text("-0"), &path).is_err());
        assert!(uint32(&text("4294967296"), &path).is_err());
    }

    #[test]
    fn floats_read_as_simple_atof() {
        for (written, value) in [
            ("2", 2.0),
            (" 2", 2.0),
            ("0x10", 16.0),
            ("1e400", f32::INFINITY),
        ] {
            assert_eq!(simple_atof(written), Some(value), "{written}");
        }
        assert_eq!(simple_atof("1e-300"), Some(0.0));
        assert!(simple_atof("nan").is_some_and(f32::is_nan));
        assert_eq!(simple_atof("Infinity"), Some(f32::INFINITY));
        assert_eq!(simple_atof("+-1"), None);
        assert_eq!(simple_atof("2x"), None);
    }

    #[test]
    fn durations_read_as_c_core_reads_them() {
        let path = Path::root();
        let read = |s: &str| duration(&text(s), &path);
        assert_eq!(read("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(read(" 1 s"), Ok(Duration::from_secs(1)));
        assert_eq!(read("+1s"), Ok(Duration::from_secs(1)));
        assert_eq!(read("-0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(read("1.-5s"), Ok(Duration::from_millis(950)));
        assert_eq!(read("0.0015s"), Ok(Duration::from_millis(1)));
        assert_eq!(read("0.0009s"), Ok(Duration::ZERO));
        assert_eq!(read("1.000000001s"), Ok(Duration::from_secs(1)));
        for refused in [
            "1",
            ".5s",
            "1.s",
            "1e1s",
            "1ms",
            "-1s",
            "1.0000000001s",
            "315576000001s",
        ] {
            assert!(read(refused).is_err(), "{refused}");
        }
        assert!(duration(&Json::Number("1".into()), &path).is_err());
    }

    #[test]
    fn token_ratios_read_their_three_decimal_places_as_c_core_and_mean_what_a6_says() {
        let path = Path::root();
        let read = |json: Json| token_ratio(&json, &path);
        assert_eq!(read(Json::Number("0.1".into())), Ok(100));
        assert_eq!(read(Json::Number("0.0019".into())), Ok(1));
        assert_eq!(read(Json::Number("1".into())), Ok(1000));
        assert_eq!(read(text("3000000.5")), Ok(3_000_000_500));
        for refused in [
            "0.0001",
            "0",
            "0.0",
            "1e-3",
            "-0.5",
            "1.",
            ".5",
            "abc",
            "4294967.296",
        ] {
            assert!(read(text(refused)).is_err(), "{refused}");
        }
    }
}
