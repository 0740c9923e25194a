//! Incremental Server-Sent Events framing: bytes in, `(event, data)` frames out.
//!
//! Lines are split at the byte level before any UTF-8 decoding, so a chunk boundary inside a
//! multi-byte character or between `\r` and `\n` is harmless (neither byte can occur inside a
//! UTF-8 sequence). Frames are handed out as borrowed `&str`s: nothing is copied per frame
//! beyond the one line buffer. Hand-written rather than taken from a crate because the crates
//! on offer wrap a `Stream` and allocate three `String`s per event; this is the hot path of
//! every streamed token.

/// `bytes` as text, each invalid sequence replaced by U+FFFD. `String::from_utf8_lossy` walks
/// valid text byte by byte; `std::str::from_utf8` checks it a word at a time where it is ASCII,
/// as a provider's JSON mostly is (`benches/decode.rs`: an Anthropic stream decodes about 5%
/// faster), so the lossy walk is left for text that is not valid.
pub(crate) fn text(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// Splits an SSE byte stream into frames (WHATWG `text/event-stream` rules).
#[derive(Debug, Default)]
pub struct SseDecoder {
    /// The current incomplete line.
    line: Vec<u8>,
    /// The previous chunk ended in `\r`; a leading `\n` in the next one belongs to it.
    skip_lf: bool,
    event: String,
    data: String,
    has_data: bool,
}

impl SseDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes held for the frame still arriving (its incomplete line and its data so far).
    pub fn buffered(&self) -> usize {
        self.line.len() + self.data.len()
    }

    /// Feeds bytes; calls `on_frame(event, data)` for every complete frame. `event` is
    /// `"message"` when the frame named none. Stops early and returns the first error
    /// `on_frame` returns.
    pub fn push<E>(
        &mut self,
        mut bytes: &[u8],
        on_frame: &mut dyn FnMut(&str, &str) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.skip_lf && !bytes.is_empty() {
            self.skip_lf = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', bytes) {
            let terminator = bytes[i];
            if self.line.is_empty() {
                self.line_done(&bytes[..i], on_frame)?;
            } else {
                self.line.extend_from_slice(&bytes[..i]);
                let line = std::mem::take(&mut self.line);
                let result = self.line_done(&line, on_frame);
                // Keep the allocation for the next line.
                self.line = line;
                self.line.clear();
                result?;
            }
            bytes = &bytes[i + 1..];
            if terminator == b'\r' {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.skip_lf = true,
                }
            }
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// The stream ended. Some servers omit the blank line after the last frame; a complete
    /// `data:` line still pending is delivered rather than silently dropped.
    pub fn finish<E>(
        &mut self,
        on_frame: &mut dyn FnMut(&str, &str) -> Result<(), E>,
    ) -> Result<(), E> {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.line_done(&line, on_frame)?;
        }
        self.dispatch(on_frame)
    }

    fn line_done<E>(
        &mut self,
        line: &[u8],
        on_frame: &mut dyn FnMut(&str, &str) -> Result<(), E>,
    ) -> Result<(), E> {
        if line.is_empty() {
            return self.dispatch(on_frame);
        }
        if line[0] == b':' {
            return Ok(()); // comment / keep-alive
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = text(value);
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"event" => {
                self.event.clear();
                self.event.push_str(&value);
            }
            _ => {} // id, retry and unknown fields carry nothing we use
        }
        Ok(())
    }

    fn dispatch<E>(
        &mut self,
        on_frame: &mut dyn FnMut(&str, &str) -> Result<(), E>,
    ) -> Result<(), E> {
        if !self.has_data {
            self.event.clear();
            return Ok(());
        }
        let event = if self.event.is_empty() {
            "message"
        } else {
            &self.event
        };
        let result = on_frame(event, &self.data);
        self.event.clear();
        self.data.clear();
        self.has_data = false;
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(chunks: &[&[u8]]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut decoder = SseDecoder::new();
        let mut collect = |e: &str, d: &str| -> Result<(), ()> {
            out.push((e.to_string(), d.to_string()));
            Ok(())
        };
        for chunk in chunks {
            decoder.push(chunk, &mut collect).unwrap();
        }
        decoder.finish(&mut collect).unwrap();
        out
    }

    #[test]
    fn every_split_of_mixed_line_endings_gives_the_same_frames() {
        let body = "event: a\r\ndata: h\u{e9}llo \u{1F600}\r\n\r\n: keep-alive\n\ndata:x\rdata: y\r\revent:b\ndata: {\"k\": 1}\n\n".as_bytes();
        let want = vec![
            ("a".to_string(), "h\u{e9}llo \u{1F600}".to_string()),
            ("message".to_string(), "x\ny".to_string()),
            ("b".to_string(), "{\"k\": 1}".to_string()),
        ];
        assert_eq!(frames(&[body]), want);
        for i in 0..=body.len() {
            for j in i..=body.len() {
                assert_eq!(
                    frames(&[&body[..i], &body[i..j], &body[j..]]),
                    want,
                    "split at {i},{j}"
                );
            }
        }
    }

    #[test]
    fn a_last_frame_without_blank_line_is_delivered_at_finish() {
        assert_eq!(
            frames(&[b"data: [DONE]"]),
            vec![("message".to_string(), "[DONE]".to_string())]
        );
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters_and_the_rest_is_kept() {
        assert_eq!(
            frames(&[b"data: a\xffb\xe2\x82c\n\n"]),
            vec![("message".to_string(), "a\u{FFFD}b\u{FFFD}c".to_string())]
        );
    }

    #[test]
    fn event_without_data_is_not_a_frame() {
        assert_eq!(frames(&[b"event: ping\n\n"]), vec![]);
    }
}
