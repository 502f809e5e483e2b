//! What a gRPC server says of a retry, parsed, no policy: `grpc-retry-pushback-ms` (gRPC's retry design,
//! A6), `google.rpc.RetryInfo` in `grpc-status-details-bin`, and the `grpc-timeout` a client sends.
//!
//! `grpc-status-details-bin` is a `google.rpc.Status` message, base64-encoded. It is read here by hand,
//! without a protobuf library: the wire format of the three messages on the way to the delay (`Status`,
//! its `Any` details, `RetryInfo` and its `Duration`) is a few varints and length-delimited fields.

use std::time::Duration;

use http::HeaderMap;
#[cfg(any(feature = "tonic", test))]
use http::HeaderValue;

/// What `grpc-retry-pushback-ms` says: A6 defines it as a signed 32-bit integer of milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GrpcPushback {
    /// A non-negative integer: retry after this long.
    After(Duration),
    /// A negative or malformed value: do not retry (A6).
    Stop,
}

/// The response's `grpc-retry-pushback-ms`, if it has one.
pub(crate) fn pushback(headers: &HeaderMap) -> Option<GrpcPushback> {
    let value = headers.get("grpc-retry-pushback-ms")?;
    let millis = std::str::from_utf8(value.as_bytes())
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<i32>().ok());
    Some(match millis.and_then(|millis| u64::try_from(millis).ok()) {
        Some(millis) => GrpcPushback::After(Duration::from_millis(millis)),
        None => GrpcPushback::Stop,
    })
}

const RETRY_INFO: &[u8] = b"type.googleapis.com/google.rpc.RetryInfo";

/// The `retry_delay` of a `google.rpc.RetryInfo` among the details of the `google.rpc.Status` in the
/// response's `grpc-status-details-bin`, if there is one and it is well formed and not negative.
pub(crate) fn retry_info(headers: &HeaderMap) -> Option<Duration> {
    let status = base64_decode(headers.get("grpc-status-details-bin")?.as_bytes())?;
    // google.rpc.Status: 3 = repeated google.protobuf.Any details.
    fields(&status).find_map(|(number, value)| {
        let Field::Bytes(any) = value else {
            return None;
        };
        if number != 3 {
            return None;
        }
        // google.protobuf.Any: 1 = type_url, 2 = value.
        let mut type_url = None;
        let mut message = None;
        for (number, value) in fields(any) {
            match (number, value) {
                (1, Field::Bytes(url)) => type_url = Some(url),
                (2, Field::Bytes(bytes)) => message = Some(bytes),
                _ => {}
            }
        }
        if type_url? != RETRY_INFO {
            return None;
        }
        // google.rpc.RetryInfo: 1 = google.protobuf.Duration retry_delay.
        let delay = fields(message.unwrap_or_default()).find_map(|field| match field {
            (1, Field::Bytes(delay)) => Some(delay),
            _ => None,
        })?;
        // google.protobuf.Duration: 1 = int64 seconds, 2 = int32 nanos.
        let (mut seconds, mut nanos) = (0i64, 0i32);
        for field in fields(delay) {
            match field {
                // Two's complement on the wire: a negative value is read as such, and refused below.
                (1, Field::Varint(v)) => seconds = v as i64,
                (2, Field::Varint(v)) => nanos = v as i32,
                _ => {}
            }
        }
        let seconds = u64::try_from(seconds).ok()?;
        let nanos = u32::try_from(nanos).ok().filter(|n| *n < 1_000_000_000)?;
        Some(Duration::new(seconds, nanos))
    })
}

/// A field of a protobuf message, as far as reading the delay needs.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A fixed 32- or 64-bit value, skipped.
    Fixed,
}

/// The fields of a protobuf message, in order, until its end or the first malformed one.
fn fields(mut message: &[u8]) -> impl Iterator<Item = (u64, Field<'_>)> {
    std::iter::from_fn(move || {
        if message.is_empty() {
            return None;
        }
        let key = varint(&mut message)?;
        let field = match key & 7 {
            0 => Field::Varint(varint(&mut message)?),
            1 => {
                message = message.get(8..)?;
                Field::Fixed
            }
            2 => {
                let len = usize::try_from(varint(&mut message)?).ok()?;
                let bytes = message.get(..len)?;
                message = &message[len..];
                Field::Bytes(bytes)
            }
            5 => {
                message = message.get(4..)?;
                Field::Fixed
            }
            // Groups (3, 4) and unknown wire types: no message on the way to the delay has them.
            _ => {
                message = &[];
                return None;
            }
        };
        Some((key >> 3, field))
    })
}

/// A base-128 varint from the front of `bytes`, at most ten bytes long.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&byte, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Standard base64, with or without padding, as gRPC's binary headers are sent (PROTOCOL-HTTP2: a
/// receiver accepts either).
fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    let text = text.trim_ascii();
    let text = text
        .strip_suffix(b"==")
        .or_else(|| text.strip_suffix(b"="))
        .unwrap_or(text);
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut bits = 0u32;
    let mut held = 0;
    for &c in text {
        let sextet = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        bits = bits << 6 | u32::from(sextet);
        held += 6;
        if held >= 8 {
            held -= 8;
            out.push((bits >> held) as u8);
        }
    }
    Some(out)
}

/// A `grpc-timeout` value for `timeout`: rounded up to the millisecond, and to no less than one,
/// then written in at most eight digits of the finest unit that holds it, rounded up again
/// (PROTOCOL-HTTP2).
///
/// Rounded up as grpc-go and gRPC's C-core round it (grpc-java rounds down): the client ends the
/// call at its deadline itself, and a tonic `Channel` below the layer enforces the header too; a
/// value rounded up lets the client's own timer fire first, whose answer is `DEADLINE_EXCEEDED`,
/// where the channel's would be tonic's `CANCELLED "Timeout expired"`. Never zero, which is not a
/// valid value.
#[cfg(any(feature = "tonic", test))]
pub(crate) fn encode_timeout(timeout: Duration) -> HeaderValue {
    const MAX: u128 = 99_999_999;
    const MILLI: u128 = 1_000_000;
    let nanos = timeout.as_nanos().div_ceil(MILLI).max(1) * MILLI;
    let units: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (MILLI, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    let (value, unit) = units
        .iter()
        .map(|&(per, unit)| (nanos.div_ceil(per), unit))
        .find(|&(value, _)| value <= MAX)
        .unwrap_or((MAX, 'H'));
    HeaderValue::from_str(&format!("{value}{unit}")).unwrap_or(HeaderValue::from_static("1m"))
}

/// A `grpc-timeout` value, if well formed: one to eight digits and a unit.
#[cfg(any(feature = "tonic", test))]
pub(crate) fn parse_timeout(value: &HeaderValue) -> Option<Duration> {
    let bytes = value.as_bytes();
    let (&unit, digits) = bytes.split_last()?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b'H' => Duration::from_secs(value * 3600),
        b'M' => Duration::from_secs(value * 60),
        b'S' => Duration::from_secs(value),
        b'm' => Duration::from_millis(value),
        b'u' => Duration::from_micros(value),
        b'n' => Duration::from_nanos(value),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: &'static str, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, value.parse().unwrap());
        headers
    }

    #[test]
    fn pushback_is_a_non_negative_integer_or_a_refusal() {
        let read = |v| pushback(&headers("grpc-retry-pushback-ms", v));
        assert_eq!(
            read("300"),
            Some(GrpcPushback::After(Duration::from_millis(300)))
        );
        assert_eq!(read("0"), Some(GrpcPushback::After(Duration::ZERO)));
        let most = Duration::from_millis(i32::MAX as u64);
        assert_eq!(read("2147483647"), Some(GrpcPushback::After(most)));
        for refused in ["-1", "1.5", "", "soon", "+3", "2147483648"] {
            assert_eq!(read(refused), Some(GrpcPushback::Stop), "{refused:?}");
        }
        assert_eq!(pushback(&HeaderMap::new()), None);
    }

    fn base64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n =
                chunk.iter().fold(0u32, |n, &b| n << 8 | u32::from(b)) << (8 * (3 - chunk.len()));
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    fn length_delimited(number: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![number << 3 | 2, u8::try_from(bytes.len()).unwrap()];
        out.extend_from_slice(bytes);
        out
    }

    /// A `google.rpc.Status` with code 8 and a `RetryInfo` of `seconds` and `nanos` (small values).
    fn status_with_retry_info(seconds: u8, nanos: u8) -> Vec<u8> {
        let duration = [0x08, seconds, 0x10, nanos];
        let retry_info = length_delimited(1, &duration);
        let mut any = length_delimited(1, RETRY_INFO);
        any.extend(length_delimited(2, &retry_info));
        let mut status = vec![0x08, 8];
        status.extend(length_delimited(2, b"slow down"));
        status.extend(length_delimited(3, &any));
        status
    }

    #[test]
    fn retry_info_is_read_from_the_status_details() {
        let status = status_with_retry_info(1, 2);
        let header = headers("grpc-status-details-bin", &base64(&status));
        assert_eq!(retry_info(&header), Some(Duration::new(1, 2)));
        let unpadded = base64(&status);
        let padded = format!("{unpadded}{}", "=".repeat((4 - unpadded.len() % 4) % 4));
        let header = headers("grpc-status-details-bin", &padded);
        assert_eq!(retry_info(&header), Some(Duration::new(1, 2)));
    }

    #[test]
    fn other_details_or_garbage_give_no_delay() {
        let mut any = length_delimited(1, b"type.googleapis.com/google.rpc.ErrorInfo");
        any.extend(length_delimited(2, b"\x0a\x01x"));
        let status = length_delimited(3, &any);
        let header = headers("grpc-status-details-bin", &base64(&status));
        assert_eq!(retry_info(&header), None);
        assert_eq!(retry_info(&headers("grpc-status-details-bin", "!!")), None);
        let truncated = &status_with_retry_info(1, 2)[..20];
        let header = headers("grpc-status-details-bin", &base64(truncated));
        assert_eq!(retry_info(&header), None);
    }

    #[test]
    fn timeouts_round_trip_in_the_finest_unit_that_fits() {
        let encode = |d| encode_timeout(d).to_str().unwrap().to_owned();
        assert_eq!(encode(Duration::from_millis(1500)), "1500000u");
        assert_eq!(encode(Duration::from_secs(30)), "30000000u");
        assert_eq!(encode(Duration::from_secs(300)), "300000m");
        assert_eq!(encode(Duration::from_secs(1_000_000)), "1000000S");
        assert_eq!(encode(Duration::from_secs(1_000_000_000)), "16666667M");
        // Up to the millisecond, and never zero.
        assert_eq!(encode(Duration::from_nanos(7)), "1000000n");
        assert_eq!(encode(Duration::ZERO), "1000000n");
        assert_eq!(encode(Duration::from_micros(499_001)), "500000u");
        assert_eq!(encode(Duration::from_micros(1_499_001)), "1500000u");
        assert_eq!(encode(Duration::MAX), "99999999H");
        for d in [Duration::from_millis(1500), Duration::from_secs(30)] {
            assert_eq!(parse_timeout(&encode_timeout(d)), Some(d));
        }
        assert_eq!(parse_timeout(&HeaderValue::from_static("123456789m")), None);
        assert_eq!(parse_timeout(&HeaderValue::from_static("5x")), None);
    }
}
