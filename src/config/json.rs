//! A JSON reader that reads as gRPC's C-core reads a service config: strict RFC 8259 (ECMA-404),
//! a duplicate key refused, at most 255 nested containers, a NUL byte ending the text, and numbers
//! kept as they are written, for each field to read as C-core does (an integer field refuses `2.0`,
//! and `tokenRatio` counts its decimal places).

/// A JSON value, its numbers as written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Json {
    Null,
    Bool(bool),
    /// A number, as written: `-01` and `1e+` among them, which C-core's reader lets through and its
    /// fields then refuse.
    Number(String),
    String(String),
    Array(Vec<Json>),
    /// Its members in order; no key twice.
    Object(Vec<(String, Json)>),
}

impl Json {
    /// The value of `key`, if this is an object that has it.
    pub(crate) fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

/// Why a text is not JSON as C-core reads it, and where (a byte offset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JsonError {
    pub(crate) offset: usize,
    pub(crate) reason: JsonProblem,
}

/// What is wrong with a text that is not JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JsonProblem {
    /// Not JSON's grammar.
    Syntax,
    /// A key twice in one object.
    DuplicateKey,
    /// More than 255 nested arrays and objects.
    TooDeep,
}

/// C-core's bound on nested containers.
const MAX_DEPTH: usize = 255;

/// Reads `text` as C-core does (see the module's docs).
pub(crate) fn parse(text: &str) -> Result<Json, JsonError> {
    // C-core stops reading at a NUL byte.
    let text = text.find('\0').map_or(text, |nul| &text[..nul]);
    let mut reader = Reader {
        bytes: text.as_bytes(),
        text,
        at: 0,
        depth: 0,
    };
    reader.skip_whitespace();
    let value = reader.value()?;
    reader.skip_whitespace();
    if reader.at != reader.bytes.len() {
        return Err(reader.error(JsonProblem::Syntax));
    }
    Ok(value)
}

struct Reader<'a> {
    bytes: &'a [u8],
    text: &'a str,
    at: usize,
    depth: usize,
}

impl Reader<'_> {
    fn error(&self, reason: JsonProblem) -> JsonError {
        JsonError {
            offset: self.at,
            reason,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn literal(&mut self, word: &str, value: Json) -> Result<Json, JsonError> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(self.error(JsonProblem::Syntax))
        }
    }

    fn value(&mut self) -> Result<Json, JsonError> {
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => self.string().map(Json::String),
            Some(b't') => self.literal("true", Json::Bool(true)),
            Some(b'f') => self.literal("false", Json::Bool(false)),
            Some(b'n') => self.literal("null", Json::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.error(JsonProblem::Syntax)),
        }
    }

    fn enter(&mut self) -> Result<(), JsonError> {
        if self.depth == MAX_DEPTH {
            return Err(self.error(JsonProblem::TooDeep));
        }
        self.depth += 1;
        self.at += 1;
        self.skip_whitespace();
        Ok(())
    }

    fn object(&mut self) -> Result<Json, JsonError> {
        self.enter()?;
        let mut members: Vec<(String, Json)> = Vec::new();
        if self.peek() == Some(b'}') {
            self.at += 1;
            self.depth -= 1;
            return Ok(Json::Object(members));
        }
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.error(JsonProblem::Syntax));
            }
            let key_at = self.at;
            let key = self.string()?;
            if members.iter().any(|(known, _)| *known == key) {
                return Err(JsonError {
                    offset: key_at,
                    reason: JsonProblem::DuplicateKey,
                });
            }
            self.skip_whitespace();
            if self.peek() != Some(b':') {
                return Err(self.error(JsonProblem::Syntax));
            }
            self.at += 1;
            self.skip_whitespace();
            let value = self.value()?;
            members.push((key, value));
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.skip_whitespace();
                }
                Some(b'}') => {
                    self.at += 1;
                    self.depth -= 1;
                    return Ok(Json::Object(members));
                }
                _ => return Err(self.error(JsonProblem::Syntax)),
            }
        }
    }

    fn array(&mut self) -> Result<Json, JsonError> {
        self.enter()?;
        let mut items = Vec::new();
        if self.peek() == Some(b']') {
            self.at += 1;
            self.depth -= 1;
            return Ok(Json::Array(items));
        }
        loop {
            items.push(self.value()?);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.skip_whitespace();
                }
                Some(b']') => {
                    self.at += 1;
                    self.depth -= 1;
                    return Ok(Json::Array(items));
                }
                _ => return Err(self.error(JsonProblem::Syntax)),
            }
        }
    }

    /// A number as C-core's reader takes one: a `-` or a digit, then digits (a leading `0` only
    /// before a `.`), an optional fraction and an optional exponent, whose digits may be none.
    fn number(&mut self) -> Result<Json, JsonError> {
        let start = self.at;
        let digits = |r: &mut Self| {
            let from = r.at;
            while matches!(r.peek(), Some(b'0'..=b'9')) {
                r.at += 1;
            }
            r.at - from
        };
        if self.peek() == Some(b'0') {
            self.at += 1;
            if !matches!(self.peek(), Some(b'.') | None) && !self.ends_a_number() {
                return Err(self.error(JsonProblem::Syntax));
            }
        } else {
            self.at += 1; // `-` or a digit
            digits(self);
        }
        if self.peek() == Some(b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return Err(self.error(JsonProblem::Syntax));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.at += 1;
            match self.peek() {
                Some(b'+' | b'-' | b'0'..=b'9') => self.at += 1,
                _ => return Err(self.error(JsonProblem::Syntax)),
            }
            digits(self);
        }
        if self.peek().is_some() && !self.ends_a_number() {
            return Err(self.error(JsonProblem::Syntax));
        }
        Ok(Json::Number(self.text[start..self.at].to_owned()))
    }

    fn ends_a_number(&self) -> bool {
        matches!(
            self.peek(),
            Some(b' ' | b'\t' | b'\n' | b'\r' | b',' | b'}' | b']')
        )
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.at += 1; // the opening quote
        let mut out = String::new();
        loop {
            let Some(byte) = self.peek() else {
                return Err(self.error(JsonProblem::Syntax));
            };
            match byte {
                b'"' => {
                    self.at += 1;
                    return Ok(out);
                }
                b'\\' => {
                    self.at += 1;
                    self.escape(&mut out)?;
                }
                0..=0x1f => return Err(self.error(JsonProblem::Syntax)),
                _ => {
                    // A whole character: the text is UTF-8.
                    let rest = &self.text[self.at..];
                    let c = rest.chars().next().unwrap_or('\u{fffd}');
                    out.push(c);
                    self.at += c.len_utf8();
                }
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), JsonError> {
        let c = match self.peek() {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                self.at += 1;
                let unit = self.hex4()?;
                let c = match unit {
                    0xd800..=0xdbff => {
                        // A high surrogate: a low one must follow at once.
                        if !self.bytes[self.at..].starts_with(b"\\u") {
                            return Err(self.error(JsonProblem::Syntax));
                        }
                        self.at += 2;
                        let low = self.hex4()?;
                        if !(0xdc00..=0xdfff).contains(&low) {
                            return Err(self.error(JsonProblem::Syntax));
                        }
                        0x10000 + ((u32::from(unit) - 0xd800) << 10) + (u32::from(low) - 0xdc00)
                    }
                    0xdc00..=0xdfff => return Err(self.error(JsonProblem::Syntax)),
                    unit => u32::from(unit),
                };
                out.push(char::from_u32(c).ok_or_else(|| self.error(JsonProblem::Syntax))?);
                return Ok(());
            }
            _ => return Err(self.error(JsonProblem::Syntax)),
        };
        self.at += 1;
        out.push(c);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u16, JsonError> {
        let digits = self
            .text
            .get(self.at..self.at + 4)
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or_else(|| self.error(JsonProblem::Syntax))?;
        self.at += 4;
        u16::from_str_radix(digits, 16).map_err(|_| self.error(JsonProblem::Syntax))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> JsonProblem {
        parse(text).unwrap_err().reason
    }

    #[test]
    fn numbers_are_kept_as_written_with_c_core_s_grammar() {
        let number = |text: &str| match parse(text) {
            Ok(Json::Number(n)) => n,
            other => panic!("{text}: {other:?}"),
        };
        for text in ["0", "-0", "1.50", "1e+", "-01", "-", "2E-3", "0.1", "-.5"] {
            assert_eq!(number(text), text);
        }
        for text in ["01", "1.", ".5", "+1", "1x", "1e", "0x10", "0e5"] {
            assert_eq!(refused(text), JsonProblem::Syntax, "{text}");
        }
    }

    #[test]
    fn a_duplicate_key_deep_nesting_and_control_characters_are_refused() {
        assert_eq!(refused(r#"{"a":1,"a":2}"#), JsonProblem::DuplicateKey);
        assert_eq!(parse(r#"{"a":1,"a":2}"#).unwrap_err().offset, 7);
        let deep = "[".repeat(256) + &"]".repeat(256);
        assert_eq!(refused(&deep), JsonProblem::TooDeep);
        let deepest = "[".repeat(255) + &"]".repeat(255);
        assert!(parse(&deepest).is_ok());
        assert_eq!(refused("\"a\tb\""), JsonProblem::Syntax);
        assert_eq!(refused(r#"{"a":1,}"#), JsonProblem::Syntax);
        assert_eq!(refused("{}x"), JsonProblem::Syntax);
        assert_eq!(refused(""), JsonProblem::Syntax);
    }

    #[test]
    fn escapes_and_surrogates_read_as_c_core_reads_them() {
        assert_eq!(
            parse(r#""\u00e9\ud83d\ude00\n\/""#),
            Ok(Json::String("é😀\n/".to_owned()))
        );
        assert_eq!(refused(r#""\ud800\u0041""#), JsonProblem::Syntax);
        assert_eq!(refused(r#""\udc00""#), JsonProblem::Syntax);
        assert_eq!(parse(r#""\u0000""#), Ok(Json::String("\0".to_owned())));
        // A NUL byte ends the text, as in C-core.
        assert_eq!(parse("{}\0garbage"), Ok(Json::Object(Vec::new())));
    }
}
