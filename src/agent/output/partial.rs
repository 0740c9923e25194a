//! A JSON document read as it streams in: each [`PartialJson::push`] reads only the bytes it is
//! given (the text so far is never read again), and [`PartialJson::value`] says what the text
//! so far means, for showing a typed answer as it forms.
//!
//! What `value` shows is always a prefix of the final document: open objects and arrays are
//! closed, an open string shows what it holds so far, and what cannot be known yet is left out
//! (a number or literal still being read, an object key whose value has not begun). The
//! document is an object (what a typed answer always asks for): text before its first `{` (a
//! code fence, a sentence) and after its end is skipped.
//!
//! `value` copies the tree, so it is for a reader's pace (a part re-sent every 50 ms at most),
//! not for every piece. Separators are read loosely (`[1 2]` passes): the answer that counts is
//! the strict parse of [`PartialJson::span`]'s bytes, validated.

use serde_json::{Map, Value};

/// Deepest nesting read: a document deeper than this is not one a schema asks for.
const MAX_DEPTH: usize = 128;

/// Marks a `\u` escape being read in a string's bytes: a byte UTF-8 never holds.
const MARK: u8 = 0xFF;

#[derive(Debug, Default)]
pub struct PartialJson {
    /// Open containers, outermost first.
    stack: Vec<Frame>,
    /// The document, once it has ended.
    done: Option<Value>,
    lex: Lex,
    /// Bytes of the string, number or literal being read.
    token: Vec<u8>,
    /// Bytes read, and where the document began and ended among them.
    read: usize,
    start: Option<usize>,
    end: Option<usize>,
    /// Why the text is not JSON; nothing more is read once it is set.
    error: Option<String>,
    /// Whether anything `value` shows changed since [`PartialJson::take_changed`].
    changed: bool,
}

#[derive(Debug)]
enum Frame {
    Array(Vec<Value>),
    Object {
        map: Map<String, Value>,
        /// The key whose value comes next, once read.
        key: Option<String>,
    },
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Lex {
    /// Between tokens.
    #[default]
    Between,
    /// In a string (a key when `key`); `escape`: after a backslash; `unicode`: hex digits of a
    /// `\u` escape still to come.
    Str {
        key: bool,
        escape: bool,
        unicode: u8,
    },
    /// In a number or a literal.
    Scalar,
}

impl PartialJson {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the next piece of the text.
    pub fn push(&mut self, piece: &[u8]) {
        for &b in piece {
            if self.error.is_some() || self.done.is_some() {
                return;
            }
            if let Err(e) = self.byte(b) {
                self.error = Some(e);
            }
            self.read += 1;
            if self.done.is_some() {
                self.end = Some(self.read);
            }
        }
    }

    /// Where the document lies in the bytes pushed: from its `{` to the end of its `}`, once
    /// it has ended.
    pub fn span(&self) -> Option<std::ops::Range<usize>> {
        Some(self.start?..self.end?)
    }

    /// Why the text is not JSON, if it is not.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The whole document, once it has ended.
    pub fn done(&self) -> Option<&Value> {
        self.done.as_ref()
    }

    /// How many bytes have been pushed.
    pub fn bytes_read(&self) -> usize {
        self.read
    }

    /// Whether what [`PartialJson::value`] shows changed since [`PartialJson::take_changed`].
    pub fn changed(&self) -> bool {
        self.changed
    }

    /// Whether what [`PartialJson::value`] shows changed since this was last asked.
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// What the text so far means (`None` before the document begins).
    pub fn value(&self) -> Option<Value> {
        if let Some(done) = &self.done {
            return Some(done.clone());
        }
        // The innermost open piece first, then each container around it, closed.
        let mut inner: Option<Value> = match self.lex {
            Lex::Str { key: false, .. } => Some(Value::String(valid_prefix(&self.token))),
            Lex::Scalar => literal(&self.token).filter(|v| !v.is_number()),
            _ => None,
        };
        for frame in self.stack.iter().rev() {
            inner = Some(match frame {
                Frame::Array(items) => {
                    let mut items = items.clone();
                    items.extend(inner);
                    Value::Array(items)
                }
                Frame::Object { map, key } => {
                    let mut map = map.clone();
                    if let (Some(key), Some(value)) = (key, inner) {
                        map.insert(key.clone(), value);
                    }
                    Value::Object(map)
                }
            });
        }
        inner
    }

    fn byte(&mut self, b: u8) -> Result<(), String> {
        match self.lex {
            Lex::Str {
                key,
                escape,
                unicode,
            } => self.string_byte(b, key, escape, unicode),
            Lex::Scalar if is_scalar_byte(b) => {
                self.token.push(b);
                // A literal is whole once its last letter is read; a number only at its end.
                if matches!(self.token.as_slice(), b"true" | b"false" | b"null") {
                    self.changed = true;
                }
                Ok(())
            }
            Lex::Scalar => {
                self.end_scalar()?;
                self.byte(b)
            }
            Lex::Between => self.between(b),
        }
    }

    fn between(&mut self, b: u8) -> Result<(), String> {
        if self.start.is_none() {
            // Whatever comes before the document (a fence, a sentence) is not part of it.
            if b == b'{' {
                self.start = Some(self.read);
            } else {
                return Ok(());
            }
        }
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => Ok(()),
            b'{' | b'[' => {
                self.expect_value()?;
                if self.stack.len() >= MAX_DEPTH {
                    return Err(format!("nested deeper than {MAX_DEPTH}"));
                }
                self.stack.push(if b == b'{' {
                    Frame::Object {
                        map: Map::new(),
                        key: None,
                    }
                } else {
                    Frame::Array(Vec::new())
                });
                self.changed = true;
                Ok(())
            }
            b'}' | b']' => {
                let closed = match (self.stack.pop(), b) {
                    (Some(Frame::Object { map, key: None }), b'}') => Value::Object(map),
                    (Some(Frame::Array(items)), b']') => Value::Array(items),
                    _ => return Err(format!("unexpected `{}`", b as char)),
                };
                self.place(closed);
                Ok(())
            }
            b'"' => {
                let key = matches!(self.stack.last(), Some(Frame::Object { key: None, .. }));
                if !key {
                    self.expect_value()?;
                    // It shows at once, empty.
                    self.changed = true;
                }
                self.lex = Lex::Str {
                    key,
                    escape: false,
                    unicode: 0,
                };
                self.token.clear();
                Ok(())
            }
            // Separators are checked loosely: the parse that counts is the whole text's,
            // validated at the end.
            b',' | b':' => Ok(()),
            b if is_scalar_byte(b) => {
                self.expect_value()?;
                self.lex = Lex::Scalar;
                self.token.clear();
                self.token.push(b);
                Ok(())
            }
            b if b.is_ascii_graphic() => Err(format!("unexpected `{}`", char::from(b))),
            b => Err(format!("unexpected byte {b}")),
        }
    }

    /// A value may start here: inside an array, or after an object's key.
    fn expect_value(&self) -> Result<(), String> {
        match self.stack.last() {
            None | Some(Frame::Array(_)) | Some(Frame::Object { key: Some(_), .. }) => Ok(()),
            Some(Frame::Object { key: None, .. }) => Err("a value where a key belongs".into()),
        }
    }

    fn string_byte(&mut self, b: u8, key: bool, escape: bool, unicode: u8) -> Result<(), String> {
        let mut next = Lex::Str {
            key,
            escape: false,
            unicode: unicode.saturating_sub(1),
        };
        if unicode > 0 {
            if !b.is_ascii_hexdigit() {
                return Err("a bad `\\u` escape".into());
            }
            self.token.push(b);
            if unicode == 1 {
                self.decode_unicode()?;
            }
        } else if escape {
            let c = match b {
                b'"' => b'"',
                b'\\' => b'\\',
                b'/' => b'/',
                b'b' => 8,
                b'f' => 12,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'u' => {
                    // The four digits follow; they are kept after a marker until decoded.
                    self.token.push(MARK);
                    self.lex = Lex::Str {
                        key,
                        escape: false,
                        unicode: 4,
                    };
                    return Ok(());
                }
                other => return Err(format!("a bad escape `\\{}`", other as char)),
            };
            self.token.push(c);
        } else if b == b'\\' {
            next = Lex::Str {
                key,
                escape: true,
                unicode: 0,
            };
        } else if b == b'"' {
            let text = String::from_utf8(std::mem::take(&mut self.token))
                .map_err(|_| "a string that is not UTF-8".to_string())?;
            self.lex = Lex::Between;
            if key {
                if let Some(Frame::Object { key, map }) = self.stack.last_mut() {
                    // A second value for a key would take back what was shown of the first.
                    if map.contains_key(&text) {
                        return Err(format!(
                            "the key `{}` twice",
                            crate::agent::text::shorten(&text, 40)
                        ));
                    }
                    *key = Some(text);
                }
            } else {
                self.place(Value::String(text));
            }
            return Ok(());
        } else {
            self.token.push(b);
        }
        if !key {
            self.changed = true;
        }
        self.lex = next;
        Ok(())
    }

    /// Replaces a `\u` escape's marker and four digits with the character (a surrogate pair's
    /// high half waits, as its marker and digits, for the low half).
    fn decode_unicode(&mut self) -> Result<(), String> {
        let at = self.token.len() - 5;
        let unit = hex4(&self.token[at + 1..]).ok_or("a `\\u` escape needs four hex digits")?;
        self.token.truncate(at);
        let high = self
            .token
            .len()
            .checked_sub(5)
            .filter(|&h| self.token[h] == MARK)
            .and_then(|h| Some((h, hex4(&self.token[h + 1..h + 5])?)))
            .filter(|(_, u)| (0xD800..0xDC00).contains(u));
        let c = match (high, unit) {
            (Some((h, high)), 0xDC00..=0xDFFF) => {
                self.token.truncate(h);
                let code =
                    0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(unit) - 0xDC00);
                char::from_u32(code)
            }
            (_, 0xD800..=0xDBFF) => {
                // A high surrogate: kept as written until its low half comes.
                self.token.push(MARK);
                self.token
                    .extend_from_slice(format!("{unit:04x}").as_bytes());
                return Ok(());
            }
            (_, unit) => char::from_u32(u32::from(unit)),
        };
        let c = c.ok_or("a lone surrogate in a `\\u` escape")?;
        let mut buf = [0; 4];
        self.token
            .extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        Ok(())
    }

    fn end_scalar(&mut self) -> Result<(), String> {
        self.lex = Lex::Between;
        let value = literal(&self.token).ok_or_else(|| {
            format!(
                "`{}` is not JSON",
                crate::agent::text::shorten(&String::from_utf8_lossy(&self.token), 40)
            )
        })?;
        self.place(value);
        Ok(())
    }

    /// Puts a finished value where it belongs: in its container, or as the document.
    fn place(&mut self, value: Value) {
        self.changed = true;
        match self.stack.last_mut() {
            None => self.done = Some(value),
            Some(Frame::Array(items)) => items.push(value),
            Some(Frame::Object { map, key }) => {
                if let Some(key) = key.take() {
                    map.insert(key, value);
                }
            }
        }
    }
}

fn is_scalar_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.')
}

/// A finished number or literal.
fn literal(token: &[u8]) -> Option<Value> {
    match token {
        b"true" => Some(Value::Bool(true)),
        b"false" => Some(Value::Bool(false)),
        b"null" => Some(Value::Null),
        // JSON's own grammar (no `+1`, `01`, `.5`), read as the whole document's parse would.
        number => {
            let text = std::str::from_utf8(number).ok()?;
            match crate::llm::json::from_str::<Value>(text).ok()? {
                n @ Value::Number(_) => Some(n),
                _ => None,
            }
        }
    }
}

/// The longest valid UTF-8 prefix of a string being read, a pending `\u` escape left out.
fn valid_prefix(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == MARK).unwrap_or(bytes.len());
    let bytes = &bytes[..end];
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(e) => String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned(),
    }
}

/// Four hex digits' value (`\u` escapes).
fn hex4(digits: &[u8]) -> Option<u16> {
    digits.iter().try_fold(0u16, |n, &d| {
        let v = char::from(d).to_digit(16)?;
        Some(n << 4 | v as u16)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `partial` could become `full`: what it shows is there, strings as prefixes.
    fn consistent(partial: &Value, full: &Value, last: bool) -> bool {
        match (partial, full) {
            (Value::String(p), Value::String(f)) => {
                if last {
                    f.starts_with(p.as_str())
                } else {
                    p == f
                }
            }
            (Value::Array(p), Value::Array(f)) => {
                p.len() <= f.len()
                    && p.iter()
                        .enumerate()
                        .all(|(i, v)| consistent(v, &f[i], last && i + 1 == p.len()))
            }
            (Value::Object(p), Value::Object(f)) => p.iter().all(|(k, v)| {
                f.get(k)
                    .is_some_and(|fv| consistent(v, fv, last && Some(k) == p.keys().next_back()))
            }),
            (p, f) => p == f,
        }
    }

    const DOCUMENTS: &[&str] = &[
        r#"{"name": "Ada", "age": 36, "langs": ["en", "fr"], "ok": true, "none": null}"#,
        r#"{"list": [{"a": -1.5e3, "b": [1, 2, [3, {"c": false}]]}, 0, "x\"y\\z\/", {}], "big": 18446744073709551615, "neg": -0}"#,
        r#"{"text": "caf\u00e9 \ud83d\ude00 é 😀 \n\t end", "n": 12345678901234}"#,
        r#"  {"nested": {"deeper": {"deepest": ["one", "two", "three"]}}, "empty": []}  "#,
    ];

    /// Reads `text` in the pieces `split` cuts, checking every partial value on the way.
    fn read(text: &str, split: impl Fn(usize) -> usize) -> Value {
        let full: Value = serde_json::from_str(text.trim()).unwrap();
        let mut parser = PartialJson::new();
        let bytes = text.as_bytes();
        let mut at = 0;
        let mut last_shown: Option<Value> = None;
        while at < bytes.len() {
            let end = (at + split(at)).min(bytes.len());
            parser.push(&bytes[at..end]);
            at = end;
            assert_eq!(parser.error(), None, "{text} at {at}");
            let changed = parser.take_changed();
            let shown = parser.value();
            if let Some(shown) = &shown {
                assert!(
                    consistent(shown, &full, true),
                    "{shown} is not a prefix of {full}"
                );
            }
            if !changed {
                assert_eq!(shown, last_shown, "unchanged, yet it shows something else");
            }
            last_shown = shown;
        }
        assert_eq!(parser.done(), Some(&full));
        parser.value().unwrap()
    }

    #[test]
    fn every_prefix_shows_part_of_the_document_and_the_end_shows_all_of_it_at_any_split() {
        for text in DOCUMENTS {
            let full: Value = serde_json::from_str(text.trim()).unwrap();
            for size in [1, 2, 3, 5, 7, 64] {
                assert_eq!(read(text, |_| size), full);
            }
            // A split at every single place, one byte then the rest.
            for cut in 1..text.len() {
                assert_eq!(
                    read(text, |at| if at == 0 { cut } else { text.len() }),
                    full
                );
            }
        }
    }

    #[test]
    fn a_string_grows_a_number_waits_for_its_end_and_a_key_for_its_value() {
        let mut p = PartialJson::new();
        p.push(br#"{"title": "Hel"#);
        assert_eq!(p.value(), Some(serde_json::json!({"title": "Hel"})));
        p.push(br#"lo", "count": 4"#);
        assert_eq!(
            p.value(),
            Some(serde_json::json!({"title": "Hello"})),
            "4 may be 42"
        );
        p.push(br#"2, "items": [tr"#);
        assert_eq!(
            p.value(),
            Some(serde_json::json!({"title": "Hello", "count": 42, "items": []}))
        );
        p.push(br#"ue, "a\u00"#);
        assert_eq!(
            p.value(),
            Some(serde_json::json!({"title": "Hello", "count": 42, "items": [true, "a"]}))
        );
        p.push(b"e9\"]}");
        assert_eq!(
            p.done(),
            Some(&serde_json::json!({"title": "Hello", "count": 42, "items": [true, "aé"]}))
        );
    }

    #[test]
    fn text_around_the_document_is_skipped_and_what_is_not_json_is_told() {
        let mut p = PartialJson::new();
        let text = b"Step [1] of it:\n```json\n{\"a\": 1}\n```\nDone.";
        p.push(text);
        assert_eq!(p.done(), Some(&serde_json::json!({"a": 1})));
        assert_eq!(&text[p.span().unwrap()], b"{\"a\": 1}");
        for bad in [
            &b"{\"a\": +1}"[..],
            b"{\"a\": 01}",
            b"{\"a\": .5}",
            b"{\"a\": 1, \"a\": 2}",
        ] {
            let mut p = PartialJson::new();
            p.push(bad);
            assert!(p.error().is_some(), "{}", String::from_utf8_lossy(bad));
        }
        let mut bad = PartialJson::new();
        bad.push(b"{\"a\": tru}");
        assert!(
            bad.error().is_some_and(|e| e.contains("tru")),
            "{:?}",
            bad.error()
        );
        let mut deep = PartialJson::new();
        deep.push(b"{\"a\":");
        deep.push(&[b'['; MAX_DEPTH]);
        assert!(deep.error().is_some());
        assert!(PartialJson::new().value().is_none());
    }
}
