//! The JSON reader: a cursor over the text that the crate's types read themselves from, one
//! token at a time.
//!
//! None of it is generic, so one copy of the parsing serves every type; a type's own reading is
//! a loop over its keys (see [`json_struct!`](crate::json_struct)). Errors say what was wrong
//! and where, in `serde_json`'s words and with its line and column (the column of the first
//! byte not yet read, counted in bytes from 1).

use std::borrow::Cow;
use std::fmt;

/// How deep arrays and objects may nest (`serde_json`'s limit).
const MAX_DEPTH: u16 = 128;

/// What could not be read, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: Box<str>,
    line: usize,
    column: usize,
}

impl Error {
    /// The 1-based line of the text where reading stopped.
    pub fn line(&self) -> usize {
        self.line
    }

    /// The column there, in bytes.
    pub fn column(&self) -> usize {
        self.column
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} at line {} column {}",
            self.message, self.line, self.column
        )
    }
}

impl std::error::Error for Error {}

/// For the callers that report errors as `serde_json`'s: the same text, the position in it.
impl From<Error> for serde_json::Error {
    fn from(error: Error) -> Self {
        serde::de::Error::custom(error)
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// A number as JSON wrote it, before it is given a type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Unsigned(u64),
    Negative(i64),
    Float(f64),
}

impl fmt::Display for Number {
    /// As serde names an unexpected value: "integer `3`", "floating point `1.5`".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Number::Unsigned(n) => write!(f, "integer `{n}`"),
            Number::Negative(n) => write!(f, "integer `{n}`"),
            Number::Float(n) if n.fract() == 0.0 && n.is_finite() => {
                write!(f, "floating point `{n:.1}`")
            }
            Number::Float(n) => write!(f, "floating point `{n}`"),
        }
    }
}

/// Whether any of eight bytes ends a string's plain run: a quote, a backslash or a control
/// character (the bit tricks for "has a zero byte", on the bytes compared).
fn has_special(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let quote = zero(word ^ (ONES * u64::from(b'"')));
    let backslash = zero(word ^ (ONES * u64::from(b'\\')));
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    quote | backslash | control != 0
}

/// A cursor over one JSON text.
pub struct Reader<'a> {
    text: &'a str,
    pos: usize,
    depth: u16,
    /// Where the last key read ended (before its `:`), where an unknown field is reported.
    key_end: usize,
}

impl<'a> Reader<'a> {
    pub fn new(text: &'a str) -> Self {
        Reader {
            text,
            pos: 0,
            depth: 0,
            key_end: 0,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte that is not whitespace, not consumed.
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        let bytes = self.bytes();
        while let Some(&b) = bytes.get(self.pos) {
            match b {
                b' ' | b'\n' | b'\t' | b'\r' => self.pos += 1,
                _ => return Some(b),
            }
        }
        None
    }

    /// An error about what was just read (a value of the wrong type, a field missing): placed
    /// where reading stopped, as `serde_json` places such errors.
    #[cold]
    #[inline(never)]
    pub fn error(&self, message: impl fmt::Display) -> Error {
        self.error_at(self.pos, message)
    }

    /// An error in the text's syntax: placed at the byte that is wrong, as `serde_json` does.
    #[cold]
    #[inline(never)]
    fn syntax(&self, message: impl fmt::Display) -> Error {
        self.error_at((self.pos + 1).min(self.text.len()), message)
    }

    fn error_at(&self, end: usize, message: impl fmt::Display) -> Error {
        let before = &self.bytes()[..end];
        let line_start = before
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        Error {
            message: message.to_string().into(),
            line: 1 + before.iter().filter(|&&b| b == b'\n').count(),
            column: end - line_start,
        }
    }

    /// "invalid type: …, expected …", naming what the next value is.
    #[cold]
    #[inline(never)]
    pub fn invalid_type(&mut self, expected: &str) -> Error {
        let found: Cow<str> = match self.peek() {
            None => return self.syntax("EOF while parsing a value"),
            Some(b'{') => "map".into(),
            Some(b'[') => "sequence".into(),
            Some(b'"') => match self.string() {
                Ok(s) => format!("string {s:?}").into(),
                Err(e) => return e,
            },
            Some(b't' | b'f') => match self.bool() {
                Ok(b) => format!("boolean `{b}`").into(),
                Err(e) => return e,
            },
            Some(b'n') => match self.literal("null") {
                Ok(()) => "null".into(),
                Err(e) => return e,
            },
            Some(_) => match self.number() {
                Ok(n) => n.to_string().into(),
                Err(e) => return e,
            },
        };
        self.error(format_args!("invalid type: {found}, expected {expected}"))
    }

    /// The first byte of the next value, not consumed.
    pub fn peek_kind(&mut self) -> Result<u8> {
        self.peek()
            .ok_or_else(|| self.syntax("EOF while parsing a value"))
    }

    /// Whether the next value is a number.
    pub fn peek_number(&mut self) -> bool {
        matches!(self.peek(), Some(b'-' | b'0'..=b'9'))
    }

    /// Fails unless only whitespace is left.
    pub fn end(&mut self) -> Result<()> {
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.syntax("trailing characters")),
        }
    }

    fn literal(&mut self, word: &str) -> Result<()> {
        if self.bytes()[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            // Past the bytes that match, as serde_json reports it.
            let matched = self.bytes()[self.pos..]
                .iter()
                .zip(word.as_bytes())
                .take_while(|(a, b)| a == b)
                .count();
            self.pos += matched;
            Err(if self.pos >= self.text.len() {
                self.syntax("EOF while parsing a value")
            } else {
                self.syntax("expected ident")
            })
        }
    }

    /// `null`, consumed; false (nothing consumed) for anything else.
    pub fn null(&mut self) -> Result<bool> {
        if self.peek() == Some(b'n') {
            self.literal("null")?;
            return Ok(true);
        }
        Ok(false)
    }

    pub fn bool(&mut self) -> Result<bool> {
        match self.peek() {
            Some(b't') => self.literal("true").map(|()| true),
            Some(b'f') => self.literal("false").map(|()| false),
            _ => Err(self.invalid_type("a boolean")),
        }
    }

    /// A number of any kind.
    pub fn number(&mut self) -> Result<Number> {
        let bytes = self.bytes();
        let start = match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.pos,
            None => return Err(self.syntax("EOF while parsing a value")),
            Some(_) => return Err(self.syntax("expected value")),
        };
        let digits = |pos: &mut usize| {
            let from = *pos;
            while bytes.get(*pos).is_some_and(u8::is_ascii_digit) {
                *pos += 1;
            }
            *pos - from
        };
        let mut pos = start;
        let negative = bytes[pos] == b'-';
        pos += usize::from(negative);
        let int_start = pos;
        let int_digits = digits(&mut pos);
        if int_digits == 0 {
            self.pos = pos;
            return Err(if pos >= bytes.len() {
                self.syntax("EOF while parsing a value")
            } else {
                self.syntax("invalid number")
            });
        }
        if int_digits > 1 && bytes[int_start] == b'0' {
            self.pos = int_start + 1;
            return Err(self.syntax("invalid number"));
        }
        let mut float = false;
        if bytes.get(pos) == Some(&b'.') {
            pos += 1;
            float = true;
            if digits(&mut pos) == 0 {
                self.pos = pos;
                return Err(self.syntax("invalid number"));
            }
        }
        if matches!(bytes.get(pos), Some(b'e' | b'E')) {
            pos += 1;
            float = true;
            if matches!(bytes.get(pos), Some(b'+' | b'-')) {
                pos += 1;
            }
            if digits(&mut pos) == 0 {
                self.pos = pos;
                return Err(self.syntax("invalid number"));
            }
        }
        let text = &self.text[start..pos];
        self.pos = pos;
        if !float {
            if negative {
                // serde_json reads `-0` as the float.
                match text.parse::<i64>() {
                    Ok(0) => return Ok(Number::Float(-0.0)),
                    Ok(n) => return Ok(Number::Negative(n)),
                    Err(_) => {}
                }
            } else if let Ok(n) = text.parse::<u64>() {
                return Ok(Number::Unsigned(n));
            }
        }
        match text.parse::<f64>() {
            Ok(n) if n.is_finite() => Ok(Number::Float(n)),
            _ => Err(self.syntax("number out of range")),
        }
    }

    /// A string, borrowed from the text when it has no escapes.
    pub fn string(&mut self) -> Result<Cow<'a, str>> {
        if self.peek() != Some(b'"') {
            return Err(self.invalid_type("a string"));
        }
        self.pos += 1;
        let bytes = self.bytes();
        let mut owned: Option<String> = None;
        loop {
            // The run up to the next quote or backslash (a control character is an error).
            let run_start = self.pos;
            let mut end = run_start;
            // Eight bytes at a time while none of them is special; then byte by byte.
            while let Some(word) = bytes.get(end..end + 8) {
                let word = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
                if has_special(word) {
                    break;
                }
                end += 8;
            }
            while let Some(&b) = bytes.get(end) {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                end += 1;
            }
            self.pos = end;
            let run = &self.text[run_start..end];
            match bytes.get(end) {
                None => return Err(self.syntax("EOF while parsing a string")),
                Some(&b) if b < 0x20 => {
                    return Err(self.syntax(
                        "control character (\\u0000-\\u001F) found while parsing a string",
                    ))
                }
                Some(_) => {}
            }
            self.pos = end + 1;
            if bytes[end] == b'"' {
                return Ok(match owned {
                    None => Cow::Borrowed(run),
                    Some(mut s) => {
                        s.push_str(run);
                        Cow::Owned(s)
                    }
                });
            }
            let s = owned.get_or_insert_with(String::new);
            s.push_str(run);
            self.escape(s)?;
        }
    }

    /// One escape, after its backslash, onto `out`.
    fn escape(&mut self, out: &mut String) -> Result<()> {
        let Some(&b) = self.bytes().get(self.pos) else {
            return Err(self.syntax("EOF while parsing a string"));
        };
        self.pos += 1;
        let c = match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let first = self.hex4()?;
                match first {
                    0xD800..=0xDBFF => {
                        if !self.bytes()[self.pos..].starts_with(b"\\u") {
                            return Err(self.syntax("lone leading surrogate in hex escape"));
                        }
                        self.pos += 2;
                        let second = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return Err(self.syntax("lone leading surrogate in hex escape"));
                        }
                        let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                        char::from_u32(code)
                            .ok_or_else(|| self.syntax("invalid unicode code point"))?
                    }
                    0xDC00..=0xDFFF => {
                        return Err(self.syntax("lone leading surrogate in hex escape"))
                    }
                    _ => char::from_u32(first)
                        .ok_or_else(|| self.syntax("invalid unicode code point"))?,
                }
            }
            _ => {
                self.pos -= 1;
                return Err(self.syntax("invalid escape"));
            }
        };
        out.push(c);
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32> {
        let Some(digits) = self.bytes().get(self.pos..self.pos + 4) else {
            self.pos = self.text.len();
            return Err(self.syntax("EOF while parsing a string"));
        };
        // All four are read before any is judged, as serde_json does.
        self.pos += 4;
        let mut n = 0;
        for &b in digits {
            let digit = (b as char)
                .to_digit(16)
                .ok_or_else(|| self.error("invalid escape"))?;
            n = n * 16 + digit;
        }
        Ok(n)
    }

    /// Enters an object (`expected` names what was wanted, for the error).
    pub fn begin_object(&mut self, expected: &str) -> Result<()> {
        match self.peek() {
            Some(b'{') => self.enter(),
            _ => Err(self.invalid_type(expected)),
        }
    }

    /// Enters an array (`expected` names what was wanted, for the error).
    pub fn begin_array(&mut self, expected: &str) -> Result<()> {
        match self.peek() {
            Some(b'[') => self.enter(),
            _ => Err(self.invalid_type(expected)),
        }
    }

    fn enter(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.syntax("recursion limit exceeded"));
        }
        self.pos += 1;
        Ok(())
    }

    /// Reads an object whose keys `fields` lists, each with the number `field` knows it by;
    /// `field` reads the value of each. Other keys are skipped, or with `strict` given are an
    /// error naming the known ones. One loop for every type, so that a type's own code is only
    /// its fields.
    pub fn object(
        &mut self,
        expected: &str,
        fields: &[(&str, u8)],
        strict: Option<&[&str]>,
        field: &mut dyn FnMut(&mut Reader<'a>, u8) -> Result<()>,
    ) -> Result<()> {
        self.begin_object(expected)?;
        while let Some(key) = self.next_key()? {
            match fields.iter().find(|(name, _)| *name == key) {
                Some(&(_, n)) => field(self, n)?,
                None => self.unknown(&key, strict)?,
            }
        }
        Ok(())
    }

    /// The next key of the object entered, its `:` consumed; `None` past its `}`.
    pub fn next_key(&mut self) -> Result<Option<Cow<'a, str>>> {
        // Right after the `{` (no value ends with one, so this is the object's first key).
        let first = self.bytes().get(self.pos.wrapping_sub(1)) == Some(&b'{');
        match self.peek() {
            Some(b'}') => {
                self.pos += 1;
                self.depth -= 1;
                return Ok(None);
            }
            Some(b',') if !first => {
                self.pos += 1;
                match self.peek() {
                    Some(b'"') => {}
                    Some(b'}') => return Err(self.syntax("trailing comma")),
                    None => return Err(self.syntax("EOF while parsing a value")),
                    Some(_) => return Err(self.syntax("key must be a string")),
                }
            }
            Some(b'"') if first => {}
            None => return Err(self.syntax("EOF while parsing an object")),
            Some(_) if first => return Err(self.syntax("key must be a string")),
            Some(_) => return Err(self.syntax("expected `,` or `}`")),
        }
        let key = self.string()?;
        self.key_end = self.pos;
        match self.peek() {
            Some(b':') => self.pos += 1,
            None => return Err(self.syntax("EOF while parsing an object")),
            Some(_) => return Err(self.syntax("expected `:`")),
        }
        Ok(Some(key))
    }

    /// Whether the array entered has another element (its `,` consumed); false past its `]`.
    pub fn next_element(&mut self) -> Result<bool> {
        // Right after the `[` (no value ends with one).
        let first = self.bytes().get(self.pos.wrapping_sub(1)) == Some(&b'[');
        match self.peek() {
            Some(b']') => {
                self.pos += 1;
                self.depth -= 1;
                Ok(false)
            }
            Some(b',') if !first => {
                self.pos += 1;
                match self.peek() {
                    Some(b']') => Err(self.syntax("trailing comma")),
                    None => Err(self.syntax("EOF while parsing a value")),
                    Some(_) => Ok(true),
                }
            }
            None => Err(self.syntax("EOF while parsing a list")),
            Some(_) if first => Ok(true),
            Some(_) => Err(self.syntax("expected `,` or `]`")),
        }
    }

    /// Reads past the next value, whatever it is.
    pub fn skip(&mut self) -> Result<()> {
        match self.peek() {
            Some(b'{') => {
                self.enter()?;
                while self.next_key()?.is_some() {
                    self.skip()?;
                }
                Ok(())
            }
            Some(b'[') => {
                self.enter()?;
                while self.next_element()? {
                    self.skip()?;
                }
                Ok(())
            }
            Some(b'"') => self.string().map(drop),
            Some(b't' | b'f') => self.bool().map(drop),
            Some(b'n') => self.literal("null"),
            None => Err(self.syntax("EOF while parsing a value")),
            Some(_) => self.number().map(drop),
        }
    }

    /// An externally tagged enum's variant (serde's default form): `"name"` for a unit variant,
    /// with `false`; or `{"name": value}`, its key read and `true`, the value to be read next and
    /// then [`end_variant`](Self::end_variant).
    pub fn variant(&mut self, expected: &str) -> Result<(Cow<'a, str>, bool)> {
        if self.peek() == Some(b'"') {
            return Ok((self.string()?, false));
        }
        self.begin_object(expected)?;
        match self.next_key()? {
            Some(name) => Ok((name, true)),
            None => Err(self.syntax("expected value")),
        }
    }

    /// The `}` after a variant's value.
    pub fn end_variant(&mut self) -> Result<()> {
        match self.peek() {
            Some(b'}') => {
                self.pos += 1;
                self.depth -= 1;
                Ok(())
            }
            None => Err(self.syntax("EOF while parsing an object")),
            Some(_) => Err(self.syntax("expected `}`")),
        }
    }

    /// "missing field `name`".
    #[cold]
    #[inline(never)]
    pub fn missing(&self, field: &str) -> Error {
        // Before the object's `}`, where serde_json reports it.
        let at = match self.bytes().get(self.pos.wrapping_sub(1)) {
            Some(b'}') => self.pos - 1,
            _ => self.pos,
        };
        self.error_at(at, format_args!("missing field `{field}`"))
    }

    /// For a key no field reads: skipped, or with `fields` given (a type that denies unknown
    /// fields) an error naming the ones it knows.
    pub fn unknown(&mut self, key: &str, fields: Option<&[&str]>) -> Result<()> {
        match fields {
            None => self.skip(),
            // At the key's closing quote, where serde_json reports it.
            Some(fields) => Err(self.unknown_at(self.key_end - 1, "field", key, fields)),
        }
    }

    /// serde's "unknown variant `x`, expected one of `a`, `b`" (or field).
    #[cold]
    #[inline(never)]
    pub fn unknown_name(&self, what: &str, name: &str, known: &[&str]) -> Error {
        self.unknown_at(self.pos, what, name, known)
    }

    #[cold]
    #[inline(never)]
    fn unknown_at(&self, at: usize, what: &str, name: &str, known: &[&str]) -> Error {
        let expected = match known {
            [] => format!("there are no {what}s"),
            [one] => format!("expected `{one}`"),
            [a, b] => format!("expected `{a}` or `{b}`"),
            _ => {
                let list: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
                format!("expected one of {}", list.join(", "))
            }
        };
        self.error_at(at, format_args!("unknown {what} `{name}`, {expected}"))
    }
}
