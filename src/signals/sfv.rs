//! Just enough of RFC 9651's structured field values to read the lists of the IETF rate-limit headers
//! (`RateLimit`, `RateLimit-Policy`): members, their names and their integer parameters, without
//! allocating. A field that does not parse is refused whole, as §4.2 requires.

use crate::signals::retry_after::trim_ows;

/// One member of a list, a `RateLimit` or `RateLimit-Policy` policy: its name (the bare item, as written) and
/// its parameters (from the first `;`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Item<'a> {
    pub(crate) name: &'a [u8],
    params: &'a [u8],
}

impl<'a> Item<'a> {
    /// The value of the parameter `key` as written (a boolean `?1` when it has none); `None` if absent.
    pub(crate) fn param(&self, key: &[u8]) -> Option<&'a [u8]> {
        let mut rest = self.params;
        while let [b';', tail @ ..] = rest {
            let tail = skip_sp(tail);
            let key_len = tail.iter().take_while(|&&b| is_key_char(b)).count();
            let (found, tail) = tail.split_at(key_len);
            let (value, tail) = match tail {
                [b'=', value @ ..] => bare_item(value)?,
                _ => (&b"?1"[..], tail),
            };
            if found == key {
                return Some(value);
            }
            rest = tail;
        }
        None
    }
}

/// The members of a structured-field list (RFC 9651 §3.1), or `None` if the field is empty or any
/// part of it does not parse: a field is taken whole or not at all.
pub(crate) fn items(field: &[u8]) -> Option<Members<'_>> {
    let field = trim_ows(field);
    let mut rest = field;
    while !rest.is_empty() {
        rest = member(rest)?.1;
    }
    (!field.is_empty()).then_some(Members(field))
}

/// The members of a list that [`items`] has checked.
pub(crate) struct Members<'a>(&'a [u8]);

impl<'a> Iterator for Members<'a> {
    type Item = Item<'a>;

    fn next(&mut self) -> Option<Item<'a>> {
        let (item, rest) = member(self.0)?;
        self.0 = rest;
        Some(item)
    }
}

/// One list member and what follows its separating comma; `None` if it does not parse.
fn member(input: &[u8]) -> Option<(Item<'_>, &[u8])> {
    let (name, rest) = bare_item(input)?;
    // Parameters run to the member's end: each is `;`, optional spaces, a key, an optional `=value`.
    let mut tail = rest;
    while let [b';', after @ ..] = tail {
        let after = skip_sp(after);
        let key_len = after.iter().take_while(|&&b| is_key_char(b)).count();
        if key_len == 0 || !after[0].is_ascii_lowercase() && after[0] != b'*' {
            return None;
        }
        tail = &after[key_len..];
        if let [b'=', value @ ..] = tail {
            tail = bare_item(value)?.1;
        }
    }
    let params = &rest[..rest.len() - tail.len()];
    let tail = trim_ows(tail);
    let rest = match tail {
        [] => tail,
        [b',', after @ ..] => {
            let after = trim_ows(after);
            // A trailing comma is an error (RFC 9651 §4.2.1).
            if after.is_empty() {
                return None;
            }
            after
        }
        _ => return None,
    };
    Some((Item { name, params }, rest))
}

/// A bare item (string, token, integer, decimal, boolean, byte sequence) and what follows it.
fn bare_item(input: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = match input.first()? {
        b'"' => {
            let mut i = 1;
            loop {
                match input.get(i)? {
                    b'\\' => match input.get(i + 1)? {
                        b'"' | b'\\' => i += 2,
                        _ => return None,
                    },
                    b'"' => break i + 1,
                    b' '..=b'~' => i += 1,
                    _ => return None,
                }
            }
        }
        b':' => {
            let body = input[1..]
                .iter()
                .take_while(|&&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
                .count();
            if input.get(1 + body) != Some(&b':') {
                return None;
            }
            body + 2
        }
        b'?' => match input.get(1)? {
            b'0' | b'1' => 2,
            _ => return None,
        },
        b'-' | b'0'..=b'9' => {
            let digits = input[1..]
                .iter()
                .take_while(|&&b| b.is_ascii_digit() || b == b'.')
                .count();
            1 + digits
        }
        b if b.is_ascii_alphabetic() || *b == b'*' => {
            1 + input[1..].iter().take_while(|&&b| is_token_char(b)).count()
        }
        _ => return None,
    };
    Some(input.split_at(len))
}

/// An sf-integer that is not negative.
pub(crate) fn integer(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 15 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    value
        .iter()
        .try_fold(0u64, |n, &b| Some(n * 10 + u64::from(b - b'0')))
}

fn skip_sp(mut bytes: &[u8]) -> &[u8] {
    while let [b' ', rest @ ..] = bytes {
        bytes = rest;
    }
    bytes
}

fn is_key_char(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'-' | b'.' | b'*')
}

fn is_token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&b)
}
