//! Durations as people write them (`"250ms"`, `"30s"`, `"1m"`, `"none"` for no limit), gRPC's status
//! codes by name, and byte sizes as integers, in and out of a document.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::classify::{GrpcCode, GrpcCodes};

/// The units a duration may be written in, longest first (the one a duration is written back in is
/// the longest that keeps it exact).
const UNITS: [(&str, u128); 6] = [
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

/// Reads `text` as a duration: a number, whole or with a fraction, and a unit (`h`, `m`, `s`, `ms`,
/// `us` or `µs`, `ns`), exact to the nanosecond: `"1.5s"`, `"250ms"`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let unit = if unit == "µs" { "us" } else { unit };
    let Some(&(_, scale)) = UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(format!(
            "{text:?} is not a duration: a number and a unit, h, m, s, ms, us or ns (\"250ms\", \"30s\")"
        ));
    };
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_ok = |d: &str| d.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !digits_ok(whole) || !digits_ok(fraction) || number.ends_with('.') {
        return Err(format!(
            "{text:?} is not a duration: its number is not a number"
        ));
    }
    let too_long = || format!("{text:?} is longer than a duration can be");
    let whole: u128 = whole.parse().map_err(|_| too_long())?;
    let mut nanos = whole.checked_mul(scale).ok_or_else(too_long)?;
    let mut place = scale;
    for digit in fraction.bytes() {
        place /= 10;
        if place == 0 {
            return Err(format!("{text:?} is finer than a nanosecond"));
        }
        nanos += u128::from(digit - b'0') * place;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| too_long())?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// `duration` in the longest unit that keeps it exact: `"1m"`, `"250ms"`, `"1500ms"`.
pub(crate) fn format_duration(duration: Duration) -> String {
    let nanos = duration.as_nanos();
    if nanos == 0 {
        return "0s".to_owned();
    }
    let (unit, scale) = UNITS
        .iter()
        .find(|(_, scale)| nanos.is_multiple_of(*scale))
        .copied()
        .unwrap_or(("ns", 1));
    format!("{}{unit}", nanos / scale)
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as \"250ms\", \"30s\" or \"1m\"")
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        parse_duration(text).map_err(E::custom)
    }
}

/// A duration written as people write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Human(pub(crate) Duration);

impl Serialize for Human {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format_duration(self.0))
    }
}

impl<'de> Deserialize<'de> for Human {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_str(DurationVisitor).map(Human)
    }
}

/// A limit that may be off: a duration, or `"none"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limit(pub(crate) Option<Duration>);

impl Serialize for Limit {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Some(duration) => serializer.serialize_str(&format_duration(duration)),
            None => serializer.serialize_str("none"),
        }
    }
}

impl<'de> Deserialize<'de> for Limit {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LimitVisitor;
        impl Visitor<'_> for LimitVisitor {
            type Value = Limit;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"30s\", or \"none\"")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Limit, E> {
                if text == "none" {
                    return Ok(Limit(None));
                }
                parse_duration(text)
                    .map(|d| Limit(Some(d)))
                    .map_err(E::custom)
            }
        }
        deserializer.deserialize_str(LimitVisitor)
    }
}

/// gRPC status codes by their upper-case names (`"UNAVAILABLE"`), as a service config writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Codes(pub(crate) GrpcCodes);

fn every_code() -> impl Iterator<Item = GrpcCode> {
    (0..17).filter_map(GrpcCode::from_code)
}

impl Serialize for Codes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let names: Vec<&str> = every_code()
            .filter(|code| self.0.contains(*code))
            .map(GrpcCode::as_str)
            .collect();
        names.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Codes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let names = Vec::<String>::deserialize(deserializer)?;
        let mut codes = Vec::new();
        for name in names {
            let code = every_code().find(|code| code.as_str() == name).ok_or_else(|| {
                de::Error::custom(format!(
                    "{name:?} is not a gRPC status code's name (\"UNAVAILABLE\", \"ABORTED\", ...)"
                ))
            })?;
            codes.push(code);
        }
        Ok(Codes(GrpcCodes::new(&codes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_people_write_them_and_write_back_exactly() {
        for (text, duration) in [
            ("250ms", Duration::from_millis(250)),
            ("30s", Duration::from_secs(30)),
            ("1m", Duration::from_secs(60)),
            ("1.5s", Duration::from_millis(1500)),
            ("2h", Duration::from_secs(7200)),
            ("100us", Duration::from_micros(100)),
            ("100µs", Duration::from_micros(100)),
            ("7ns", Duration::from_nanos(7)),
            ("0s", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text), Ok(duration), "{text}");
            assert_eq!(parse_duration(&format_duration(duration)), Ok(duration));
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
        for refused in [
            "30",
            "1.5",
            "ms",
            "1.s",
            ".5s",
            "-1s",
            "1d",
            "1.0000000001s",
            "1 5s",
        ] {
            assert!(parse_duration(refused).is_err(), "{refused}");
        }
    }
}

/// `#[serde(with = "duration")]`: a [`Duration`] as people write it.
pub(crate) mod duration {
    use super::{Deserialize, Deserializer, Duration, Human, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        Human(*d).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Human::deserialize(d).map(|h| h.0)
    }
}

/// `#[serde(with = "limit")]`: an `Option<Duration>`, `"none"` for `None`.
pub(crate) mod limit {
    use super::{Deserialize, Deserializer, Duration, Limit, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        Limit(*d).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Limit::deserialize(d).map(|l| l.0)
    }
}

/// `#[serde(with = "codes")]`: [`GrpcCodes`] by name.
pub(crate) mod codes {
    use super::{Codes, Deserialize, Deserializer, GrpcCodes, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(c: &GrpcCodes, s: S) -> Result<S::Ok, S::Error> {
        Codes(*c).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<GrpcCodes, D::Error> {
        Codes::deserialize(d).map(|c| c.0)
    }
}

/// `#[serde(with = "some_codes")]`: an `Option<GrpcCodes>`, absent for `None`.
pub(crate) mod some_codes {
    use super::{Codes, Deserialize, Deserializer, GrpcCodes, Serialize, Serializer};

    pub(crate) fn serialize<S: Serializer>(c: &Option<GrpcCodes>, s: S) -> Result<S::Ok, S::Error> {
        c.map(Codes).serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<GrpcCodes>, D::Error> {
        Codes::deserialize(d).map(|c| Some(c.0))
    }
}

/// `#[serde(with = "jitter")]`: a [`Jitter`](crate::Jitter) by its name in lower case.
pub(crate) mod jitter {
    use super::{Deserialize, Deserializer, Serialize, Serializer, de};
    use crate::engine::backoff::Jitter;

    const NAMES: [(&str, Jitter); 4] = [
        ("none", Jitter::None),
        ("full", Jitter::Full),
        ("equal", Jitter::Equal),
        ("decorrelated", Jitter::Decorrelated),
    ];

    pub(crate) fn serialize<S: Serializer>(j: &Jitter, s: S) -> Result<S::Ok, S::Error> {
        let name = NAMES
            .iter()
            .find(|(_, known)| known == j)
            .map_or("full", |n| n.0);
        name.serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Jitter, D::Error> {
        let name = String::deserialize(d)?;
        NAMES
            .iter()
            .find(|(known, _)| *known == name)
            .map(|n| n.1)
            .ok_or_else(|| {
                de::Error::custom(format!(
                    "{name:?} is not a jitter: \"full\", \"equal\", \"decorrelated\" or \"none\""
                ))
            })
    }
}

/// `#[serde(with = "retry_after")]`: a [`RetryAfterMode`](crate::RetryAfterMode) by its name.
pub(crate) mod retry_after {
    use super::{Deserialize, Deserializer, Serialize, Serializer, de};
    use crate::engine::policy::RetryAfterMode;

    const NAMES: [(&str, RetryAfterMode); 3] = [
        ("spread", RetryAfterMode::Spread),
        ("strict", RetryAfterMode::Strict),
        ("ignore", RetryAfterMode::Ignore),
    ];

    pub(crate) fn serialize<S: Serializer>(m: &RetryAfterMode, s: S) -> Result<S::Ok, S::Error> {
        let name = NAMES
            .iter()
            .find(|(_, known)| known == m)
            .map_or("spread", |n| n.0);
        name.serialize(s)
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<RetryAfterMode, D::Error> {
        let name = String::deserialize(d)?;
        NAMES
            .iter()
            .find(|(known, _)| *known == name)
            .map(|n| n.1)
            .ok_or_else(|| {
                de::Error::custom(format!(
                    "{name:?} is not a retry_after mode: \"spread\", \"strict\" or \"ignore\""
                ))
            })
    }
}
