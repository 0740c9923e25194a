//! Incremental newline-delimited JSON framing (Ollama's `/api/chat`): bytes in, lines out.
//! Split at the byte level like [`super::sse`], so chunk boundaries may fall anywhere.

#[derive(Debug, Default)]
pub struct NdjsonDecoder {
    line: Vec<u8>,
}

impl NdjsonDecoder {
    /// Bytes held for the line still arriving.
    pub fn buffered(&self) -> usize {
        self.line.len()
    }

    /// Feeds bytes; calls `on_line` for every complete, non-blank line (without its `\r\n`).
    pub fn push<E>(
        &mut self,
        mut bytes: &[u8],
        on_line: &mut dyn FnMut(&str) -> Result<(), E>,
    ) -> Result<(), E> {
        while let Some(i) = memchr::memchr(b'\n', bytes) {
            if self.line.is_empty() {
                emit(&bytes[..i], on_line)?;
            } else {
                self.line.extend_from_slice(&bytes[..i]);
                let line = std::mem::take(&mut self.line);
                let result = emit(&line, on_line);
                self.line = line;
                self.line.clear();
                result?;
            }
            bytes = &bytes[i + 1..];
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// The stream ended: a last line without a newline is still a line.
    pub fn finish<E>(&mut self, on_line: &mut dyn FnMut(&str) -> Result<(), E>) -> Result<(), E> {
        let line = std::mem::take(&mut self.line);
        emit(&line, on_line)
    }
}

fn emit<E>(line: &[u8], on_line: &mut dyn FnMut(&str) -> Result<(), E>) -> Result<(), E> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    on_line(&super::sse::text(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_split_gives_the_same_lines() {
        let body = "{\"a\":\"h\u{e9}\"}\r\n\n{\"b\":2}\n{\"c\":\"\u{1F600}\"}".as_bytes();
        let lines = |chunks: &[&[u8]]| {
            let mut out = Vec::new();
            let mut d = NdjsonDecoder::default();
            let mut f = |l: &str| -> Result<(), ()> {
                out.push(l.to_string());
                Ok(())
            };
            for c in chunks {
                d.push(c, &mut f).unwrap();
            }
            d.finish(&mut f).unwrap();
            out
        };
        let want = vec!["{\"a\":\"h\u{e9}\"}", "{\"b\":2}", "{\"c\":\"\u{1F600}\"}"];
        for i in 0..=body.len() {
            assert_eq!(lines(&[&body[..i], &body[i..]]), want, "split at {i}");
        }
    }
}
