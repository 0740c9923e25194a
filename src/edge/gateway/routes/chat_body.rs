//! The body `useChat` posts to `/v1/chat`, read as it streams in and kept only in part.
//!
//! `DefaultChatTransport` sends the whole conversation's UI messages with every new one, so the
//! body grows with the chat and never stops growing, while a turn takes only the last message
//! (and a new chat's title from its first user message): the history is the conversation's
//! own, in D1. Read whole, a long chat's body would pass any fixed limit and every message after
//! that would be refused; parsed whole, each message would cost more than the last. So the body
//! is scanned as its chunks arrive: every top-level member but `messages` is kept as it came,
//! and of `messages` only the first user message and the last one. Memory is bounded by the
//! largest of those, not by the chat. The kept parts are parsed as usual afterwards; the rest is
//! checked for balanced brackets and closed strings, not read. Where the kept parts came from
//! in the body is noted as they are kept, so an error in them names its place in the body the
//! client sent, not in the shorter document parsed.

use std::borrow::Cow;
use std::mem;

use crate::llm::json::FromJson;
use memchr::memchr2;

use crate::edge::error::ApiError;
use crate::edge::gateway::body::{body_too_large, not_json, utf8};

/// Largest body accepted: each message costs only a scan, but the scan is CPU.
pub const MAX_CHAT_BODY_BYTES: usize = 32 << 20;
/// Largest kept part: the members other than `messages`, and the first user message (kept
/// for the chat's title only; a larger one gives no title).
pub const MAX_KEPT_BYTES: usize = crate::edge::gateway::body::MAX_BODY_BYTES;
/// Largest message read: the last one may carry files, as `data:` URLs.
pub const MAX_MESSAGE_BYTES: usize = crate::edge::gateway::attachments::MAX_MESSAGE_BODY_BYTES;

/// Where the byte being read goes.
#[derive(Clone, Copy, PartialEq, Default)]
enum Mode {
    /// Kept as it came.
    #[default]
    Copy,
    /// Inside `messages`, between its elements (commas and whitespace): dropped.
    Between,
    /// Inside one of `messages`' elements: kept until the next one ends.
    Element,
}

/// A `/v1/chat` body being read: [`ChatBody::push`] each chunk, then [`ChatBody::finish`] for
/// the kept document.
#[derive(Default)]
pub struct ChatBody {
    /// The largest message kept (`None`: [`MAX_MESSAGE_BYTES`]): what its files may need.
    message_limit: Option<usize>,
    kept: Vec<u8>,
    total: usize,
    /// Bytes kept other than the messages.
    members: usize,
    /// The brackets open at this point, innermost last.
    open: Vec<u8>,
    in_string: bool,
    escaped: bool,
    /// In the top-level object: whether the next string is a member's name, whether one is
    /// being read, and the name.
    expect_key: bool,
    reading_key: bool,
    key: Vec<u8>,
    /// The value about to start is `messages`.
    messages_next: bool,
    mode: Mode,
    /// The message being read, and whether it is a string, number or literal rather than an
    /// object or array (it then ends at the next `,` or `]`).
    element: Vec<u8>,
    element_scalar: bool,
    element_over: bool,
    first_user: Option<Vec<u8>>,
    /// A user message has been read (the first is kept only when it is small).
    seen_user: bool,
    /// The last message read (empty before the first: a message is never empty).
    last: Vec<u8>,
    last_over: bool,
    last_is_first_user: bool,
    /// The top-level value has closed: only whitespace may follow.
    ended: bool,
    /// Where in the body each run of kept bytes began: (offset in `kept`, offset in the body).
    spans: Vec<(usize, usize)>,
    /// Where in the body the message being read, the last one and the first user one began.
    element_at: usize,
    last_at: usize,
    first_user_at: usize,
}

/// The kept parts of a `/v1/chat` body, as one JSON document.
pub struct KeptBody {
    text: String,
    spans: Vec<(usize, usize)>,
}

impl ChatBody {
    /// A reader whose last message may be at most `message_limit` bytes.
    pub fn within(message_limit: usize) -> Self {
        Self {
            message_limit: Some(message_limit.min(MAX_MESSAGE_BYTES)),
            ..Self::default()
        }
    }

    fn message_limit(&self) -> usize {
        self.message_limit.unwrap_or(MAX_MESSAGE_BYTES)
    }

    /// Reads the next chunk of the body.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), ApiError> {
        self.total += chunk.len();
        if self.total > MAX_CHAT_BODY_BYTES {
            return Err(body_too_large(
                format!("over {MAX_CHAT_BODY_BYTES} bytes"),
                MAX_CHAT_BODY_BYTES,
            ));
        }
        // Where this chunk begins in the body.
        let base = self.total - chunk.len();
        // `start`: where the bytes not yet sent to the current mode's place begin.
        let mut start = 0;
        let mut i = 0;
        while i < chunk.len() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    i += 1;
                    continue;
                }
                let Some(found) = memchr2(b'"', b'\\', &chunk[i..]) else {
                    if self.reading_key {
                        self.key.extend_from_slice(&chunk[i..]);
                    }
                    break;
                };
                let at = i + found;
                if self.reading_key {
                    self.key.extend_from_slice(&chunk[i..=at]);
                }
                i = at + 1;
                if chunk[at] == b'\\' {
                    self.escaped = true;
                    continue;
                }
                self.in_string = false;
                self.reading_key = false;
                if self.mode == Mode::Element && self.element_scalar && self.open.len() == 2 {
                    self.flush(&chunk[start..i], base + start)?;
                    start = i;
                    self.end_element();
                }
                continue;
            }
            let byte = chunk[i];
            if byte.is_ascii_whitespace() {
                i += 1;
                continue;
            }
            if self.ended {
                return Err(not_json("something follows the object"));
            }
            // A string, number or literal in `messages` ends where the array's next comma
            // or its end is.
            if matches!(byte, b',' | b']' | b'}')
                && self.mode == Mode::Element
                && self.element_scalar
                && self.open.len() == 2
            {
                self.flush(&chunk[start..i], base + start)?;
                start = i;
                self.end_element();
            }
            match byte {
                b'"' => {
                    self.in_string = true;
                    self.begin_element(&mut start, i, base, true);
                    if self.open.len() == 1 {
                        self.messages_next = false;
                        if self.expect_key {
                            self.reading_key = true;
                            self.key.clear();
                        }
                    }
                }
                b'{' | b'[' => {
                    self.begin_element(&mut start, i, base, false);
                    self.open.push(byte);
                    if self.open.len() == 1 {
                        self.expect_key = byte == b'{';
                    } else if self.messages_next && self.open.len() == 2 && byte == b'[' {
                        self.flush(&chunk[start..=i], base + start)?;
                        start = i + 1;
                        self.mode = Mode::Between;
                    }
                    self.messages_next = false;
                }
                b'}' | b']' => {
                    let opener = if byte == b'}' { b'{' } else { b'[' };
                    if self.open.pop() != Some(opener) {
                        return Err(not_json("its brackets do not match"));
                    }
                    match (self.mode, self.open.len()) {
                        // The end of `messages`: the kept messages, then this bracket.
                        (Mode::Between, 1) => {
                            self.keep_messages()?;
                            start = i;
                            self.mode = Mode::Copy;
                        }
                        (Mode::Element, 2) => {
                            self.flush(&chunk[start..=i], base + start)?;
                            start = i + 1;
                            self.end_element();
                        }
                        (_, 0) => self.ended = true,
                        _ => {}
                    }
                }
                b',' => self.expect_key = self.open.len() == 1,
                b':' => {
                    if self.open.len() == 1 {
                        self.expect_key = false;
                        // The name as read, its closing quote included.
                        self.messages_next = self.key == b"messages\"";
                    }
                }
                _ => {
                    self.begin_element(&mut start, i, base, true);
                    if self.open.len() == 1 {
                        self.messages_next = false;
                    }
                }
            }
            i += 1;
        }
        self.flush(&chunk[start..], base + start)
    }

    /// The body as a document of the kept parts: what the request's reader parses.
    pub fn finish(self) -> Result<KeptBody, ApiError> {
        if !self.ended && self.open.is_empty() && self.kept.iter().all(u8::is_ascii_whitespace) {
            return Ok(KeptBody {
                text: "{}".into(),
                spans: Vec::new(),
            });
        }
        if self.in_string || !self.open.is_empty() {
            return Err(not_json("it ends before its last string or bracket closes"));
        }
        Ok(KeptBody {
            text: utf8(self.kept)?,
            spans: self.spans,
        })
    }

    /// A value starting at `i`: when it is one of `messages`' elements, it is kept from here.
    fn begin_element(&mut self, start: &mut usize, i: usize, base: usize, scalar: bool) {
        if self.mode == Mode::Between && self.open.len() == 2 {
            *start = i;
            self.mode = Mode::Element;
            self.element_scalar = scalar;
            self.element_at = base + i;
        }
    }

    /// Keeps `bytes`, which began at `at` in the body, where the current mode keeps them.
    fn flush(&mut self, bytes: &[u8], at: usize) -> Result<(), ApiError> {
        match self.mode {
            Mode::Copy => {
                self.members += bytes.len();
                if self.members > MAX_KEPT_BYTES {
                    return Err(ApiError::PayloadTooLarge(format!(
                        "the body's members other than `messages` are over {MAX_KEPT_BYTES} bytes"
                    )));
                }
                self.keep(bytes, at);
            }
            Mode::Between => {}
            Mode::Element if self.element_over => {}
            Mode::Element => {
                if self.element.len() + bytes.len() > self.message_limit() {
                    self.element_over = true;
                    self.element.clear();
                } else {
                    self.element.extend_from_slice(bytes);
                }
            }
        }
        Ok(())
    }

    /// One of `messages`' elements has been read: it is the last so far, and the first user
    /// message when there has been none.
    fn end_element(&mut self) {
        self.mode = Mode::Between;
        self.last_over = mem::take(&mut self.element_over);
        self.last_is_first_user = false;
        self.last_at = self.element_at;
        if !self.last_over && !self.seen_user && is_user(&self.element) {
            self.seen_user = true;
            if self.element.len() <= MAX_KEPT_BYTES {
                self.first_user = Some(self.element.clone());
                self.first_user_at = self.element_at;
                self.last_is_first_user = true;
            }
        }
        // The buffers trade places, so reading many messages allocates for few of them.
        mem::swap(&mut self.last, &mut self.element);
        self.element.clear();
    }

    fn keep_messages(&mut self) -> Result<(), ApiError> {
        if self.last_over {
            return Err(ApiError::PayloadTooLarge(format!(
                "the last message is over {} bytes, the most its files may need \
                 (MAX_FILES_PER_MESSAGE × MAX_FILE_BYTES, base64, and its text)",
                self.message_limit()
            )));
        }
        // Taken out to be kept, and put back: `keep` borrows the reader.
        let (first, last) = (self.first_user.take(), mem::take(&mut self.last));
        if let Some(first) = first.as_ref().filter(|_| !self.last_is_first_user) {
            self.keep(first, self.first_user_at);
            // The comma is not the body's: an error there is the last message's.
            self.keep(b",", self.last_at);
        }
        self.keep(&last, self.last_at);
        (self.first_user, self.last) = (first, last);
        Ok(())
    }

    /// Appends to the kept document bytes that began at `at` in the body, noting where.
    fn keep(&mut self, bytes: &[u8], at: usize) {
        let continues = self
            .spans
            .last()
            .is_some_and(|&(kept, body)| body + (self.kept.len() - kept) == at);
        if !continues {
            self.spans.push((self.kept.len(), at));
        }
        self.kept.extend_from_slice(bytes);
    }
}

impl KeptBody {
    /// A digest of what was kept (the members but `messages`, the first user message and the
    /// last): what an idempotency key is kept with, the rest of the chat being history.
    pub fn digest(&self) -> String {
        crate::edge::protocol::body_digest(self.text.as_bytes())
    }

    /// The kept document read as `T`. An error names where it is in the body as sent.
    pub fn parse<'a, T: FromJson<'a>>(&'a self) -> Result<T, ApiError> {
        crate::llm::json::read(&self.text).map_err(|e| {
            let why = e.to_string();
            let suffix = format!(" at line {} column {}", e.line(), e.column());
            match (
                why.strip_suffix(&suffix),
                self.body_offset(e.line(), e.column()),
            ) {
                (Some(what), Some(at)) => not_json(format!("{what} at byte {at} of the body")),
                _ => not_json(why),
            }
        })
    }

    /// The 1-based place in the body of what serde_json reports at `line` and `column` (both
    /// 1-based, the column counted in bytes) of the kept document.
    fn body_offset(&self, line: usize, column: usize) -> Option<usize> {
        let line_start = match line {
            0 => return None,
            1 => 0,
            n => memchr::memchr_iter(b'\n', self.text.as_bytes()).nth(n - 2)? + 1,
        };
        // The byte the error points at (the one before it at a line's start).
        let kept = (line_start + column).saturating_sub(1);
        let index = self.spans.partition_point(|&(k, _)| k <= kept);
        let &(k, body) = self.spans.get(index.checked_sub(1)?)?;
        Some(body + (kept - k) + 1)
    }
}

/// Whether a message is the user's. One that does not read is not: if it is the last, the
/// request's reader says what is wrong with it.
fn is_user(message: &[u8]) -> bool {
    struct Role<'a> {
        role: Option<Cow<'a, str>>,
    }

    crate::json_struct!(Role<'a> {
        "role" => role: default,
    });
    std::str::from_utf8(message)
        .ok()
        .and_then(|text| crate::llm::json::from_str::<Role>(text).ok())
        .is_some_and(|m| m.role.as_deref() == Some("user"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn kept(chunks: &[&[u8]]) -> Result<KeptBody, ApiError> {
        let mut body = ChatBody::default();
        for chunk in chunks {
            body.push(chunk)?;
        }
        body.finish()
    }

    fn read(chunks: &[&[u8]]) -> Result<String, ApiError> {
        kept(chunks).map(|kept| kept.text)
    }

    /// The body read in chunks of `size` bytes, parsed.
    fn read_in(text: &str, size: usize) -> Value {
        let chunks: Vec<&[u8]> = text.as_bytes().chunks(size).collect();
        let kept = read(&chunks).unwrap_or_else(|e| panic!("{size}-byte chunks: {e}"));
        serde_json::from_str(&kept).unwrap_or_else(|e| panic!("{size}-byte chunks: {e}: {kept}"))
    }

    /// What the reader should keep, worked out on the whole document.
    fn expected(body: &Value) -> Value {
        let mut body = body.clone();
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let first_user = messages.iter().position(|m| m["role"] == "user");
        let last = messages.len().checked_sub(1);
        let kept: Vec<Value> = [first_user, last]
            .into_iter()
            .flatten()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|i| messages[i].clone())
            .collect();
        body["messages"] = Value::Array(kept);
        body
    }

    fn chat() -> Value {
        json!({
            "id": "chat-1",
            "tools": [{"name": "look", "messages": [1, 2], "schema": {"type": "object"}}],
            "messages": [
                {"id": "a0", "role": "assistant", "parts": [{"type": "text", "text": "welcome"}]},
                {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "first \"quoted\" \\ {[ question ]}"}]},
                {"id": "a2", "role": "assistant", "parts": [{"type": "step-start"}, {"type": "text", "text": "an answer with \"messages\": [\"not a key\"] in it, é and 日本"}]},
                {"id": "u3", "role": "user", "parts": [{"type": "text", "text": "second"}]},
                {"id": "a4", "role": "assistant", "parts": [{"type": "tool-look", "toolCallId": "c1", "state": "output-available", "input": {}, "output": {"n": [1, 2.5e3, true, null]}}]},
                {"id": "u5", "role": "user", "parts": [{"type": "text", "text": "the last one"}]}
            ],
            "trigger": "submit-message",
            "stream": true
        })
    }

    #[test]
    fn keeps_the_members_the_first_user_message_and_the_last_in_chunks_of_any_size() {
        let body = chat();
        let want = expected(&body);
        assert_eq!(want["messages"].as_array().map(Vec::len), Some(2));
        for text in [
            body.to_string(),
            serde_json::to_string_pretty(&body).unwrap(),
        ] {
            for size in [1, 2, 3, 5, 7, 16, 64, text.len()] {
                assert_eq!(read_in(&text, size), want, "{size}-byte chunks");
            }
        }
    }

    #[test]
    fn a_lone_message_is_kept_once_and_a_chat_without_a_user_message_keeps_its_last() {
        let one = json!({"id": "x", "messages": [{"role": "user", "parts": []}]});
        assert_eq!(read_in(&one.to_string(), 3), one);
        let none = json!({"id": "x", "messages": [{"role": "assistant", "n": 1}, {"role": "assistant", "n": 2}]});
        assert_eq!(read_in(&none.to_string(), 3), expected(&none));
        let empty = json!({"id": "x", "messages": []});
        assert_eq!(read_in(&empty.to_string(), 3), empty);
        let scalars = json!({"id": "x", "messages": [1, "two", {"role": "user"}, null, "last"]});
        assert_eq!(read_in(&scalars.to_string(), 2), expected(&scalars));
    }

    #[test]
    fn messages_only_at_the_top_level_and_only_an_array_of_them() {
        let other = json!({"messages": null, "tools": [{"a": 1}, {"b": 2}], "id": "x"});
        assert_eq!(read_in(&other.to_string(), 4), other);
        let nested = json!({"id": "x", "meta": {"messages": [1, 2, 3]}});
        assert_eq!(read_in(&nested.to_string(), 4), nested);
    }

    #[test]
    fn an_empty_body_reads_as_an_empty_object() {
        assert_eq!(read(&[]).ok().as_deref(), Some("{}"));
        assert_eq!(read(&[b"  \n", b" "]).ok().as_deref(), Some("{}"));
    }

    #[test]
    fn broken_json_is_refused() {
        for broken in [
            r#"{"id": "x", "messages": [{"role": "user"}"#,
            r#"{"id": "x", "messages": [{"role": "user"]}"#,
            r#"{"id": "x", "messages": [{"role": "user}]}"#,
            r#"{"id": "x"} {"#,
            r#"{"id": "x"}}"#,
        ] {
            assert!(
                matches!(read(&[broken.as_bytes()]), Err(ApiError::BadRequest(_))),
                "{broken}"
            );
        }
    }

    /// The error a body's kept document gives when read as `T`, in chunks of `size` bytes.
    fn parse_error<T: crate::llm::json::FromJsonOwned>(text: &str, size: usize) -> String {
        let chunks: Vec<&[u8]> = text.as_bytes().chunks(size).collect();
        let kept = kept(&chunks).unwrap_or_else(|e| panic!("{e}"));
        match kept.parse::<T>() {
            Err(ApiError::BadRequest(why)) => why,
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("{text} read"),
        }
    }

    #[test]
    fn an_error_names_its_place_in_the_body_as_sent() {
        #[allow(dead_code)]
        struct Chat {
            id: String,
            messages: Vec<Value>,
            trigger: String,
        }

        crate::json_struct!(Chat {
            "id" => id,
            "messages" => messages,
            "trigger" => trigger,
        });
        // Three messages before the last are not kept; the errors come after them.
        let earlier = r#"{"role": "assistant", "parts": [{"type": "text", "text": "earlier"}]}"#;
        let head = format!(r#"{{"id": "x", "messages": [{earlier}, {earlier}, {earlier}, "#);
        let cases = [
            // A literal that is not one, in the last message.
            (
                format!(r#"{head}{{"role": "user", "parts": nope}}], "trigger": "s"}}"#),
                "nope",
                "expected ident",
            ),
            // A member after `messages` of the wrong type.
            (
                format!(r#"{head}{{"role": "user"}}], "trigger": 7}}"#),
                "7}",
                "invalid type: integer `7`",
            ),
        ];
        for (text, culprit, what) in &cases {
            let at = text.find(culprit).map(|i| i + 1);
            for size in [3, 64, text.len()] {
                let why = parse_error::<Chat>(text, size);
                assert!(why.contains(what), "{why}");
                let named: Option<usize> = why
                    .rsplit_once(" at byte ")
                    .and_then(|(_, rest)| rest.split(' ').next()?.parse().ok());
                // serde_json points at a literal's end or a value's first byte.
                let near = named
                    .zip(at)
                    .is_some_and(|(n, at)| n >= at && n <= at + culprit.len());
                assert!(near, "{why}: `{culprit}` is at byte {at:?} of {text}");
            }
        }
        // Pretty-printed, so the kept document has lines: still the body's place.
        let pretty = serde_json::to_string_pretty(&json!({
            "id": "x",
            "messages": [{"role": "user", "parts": []}, {"role": "assistant"}, {"role": "user"}],
            "trigger": 7
        }))
        .unwrap_or_default();
        let why = parse_error::<Chat>(&pretty, 5);
        let at = pretty.find(": 7").map(|i| i + 3);
        assert!(
            why.ends_with(&format!(" at byte {} of the body", at.unwrap_or(0))),
            "{why}"
        );
    }

    #[test]
    fn only_what_is_kept_counts_toward_the_kept_limit() {
        let big = "x".repeat(MAX_KEPT_BYTES);
        let earlier = json!({"id": "x", "messages": [
            {"role": "user", "parts": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "parts": [{"type": "text", "text": big}]},
            {"role": "assistant", "parts": [{"type": "text", "text": big}]},
            {"role": "user", "parts": [{"type": "text", "text": "and now?"}]}
        ]});
        assert_eq!(read_in(&earlier.to_string(), 4096), expected(&earlier));
        // The last message may be large (its files come in it); a large first user message is
        // not kept for the title when it is not the last.
        let last = json!({"id": "x", "messages": [{"role": "user", "parts": [{"type": "text", "text": big}]}]});
        assert_eq!(read_in(&last.to_string(), 1 << 16), last);
        let first = json!({"id": "x", "messages": [
            {"role": "user", "parts": [{"type": "file", "url": big}]},
            {"role": "assistant", "parts": []},
            {"role": "user", "parts": [{"type": "text", "text": "second"}]}
        ]});
        assert_eq!(
            read_in(&first.to_string(), 1 << 16)["messages"],
            json!([{"role": "user", "parts": [{"type": "text", "text": "second"}]}])
        );
        let member = json!({"id": "x", "tools": [big], "messages": []});
        assert!(matches!(
            read(&[member.to_string().as_bytes()]),
            Err(ApiError::PayloadTooLarge(m)) if m.contains("other than `messages`")
        ));
    }

    #[test]
    fn the_whole_body_has_a_limit() {
        let mut body = ChatBody::default();
        let spaces = vec![b' '; 1 << 20];
        let refused = (0..=MAX_CHAT_BODY_BYTES >> 20).find_map(|_| body.push(&spaces).err());
        assert!(matches!(refused, Some(ApiError::PayloadTooLarge(_))));
    }
}
