//! Token estimates: what a text, a message, a tool definition or a file costs a model, before
//! any provider counted it. Pessimistic where text could be chosen to cost more than it looks:
//! ASCII letters and spaces about four characters a token, digits and marks two, and at least a
//! token wherever letters meet other characters (see `Characters`); a common CJK character,
//! or a letter of a two-byte script (accented Latin, Greek, Cyrillic, Hebrew, Arabic), one; any
//! other character (Thai, Devanagari, emoji, rare ideographs) a token per UTF-8 byte, the most
//! a byte-level tokenizer spends on it. Compaction measures the history with them, a budget
//! holds a call's worst case with them, and an answer whose provider reported no usage is
//! charged from them ([`charge_unreported`]).

use std::fmt::{self, Write as _};

use serde_json::Value;

use super::AgentMessage;
use crate::llm::{ContentBlock, StopReason};

/// Roughly how many tokens `text` is.
pub fn estimate_tokens(text: &str) -> u64 {
    let mut count = Characters::default();
    count.text(text);
    count.tokens()
}

/// The characters an estimate is made of, by class, and where ASCII text changes between
/// letters and the rest.
///
/// Letters and spaces make words, about four characters a token. Digits, punctuation and the
/// other white space (tabs, line ends, carriage returns) merge far less (Gemini's tokenizer
/// gives each digit a token, and tokenizers split before a line end), so they count at two a
/// token; other control characters a token each. A tokenizer
/// also starts a token wherever letters meet other characters, so text that alternates
/// (`a.b,c;`, `x1y2`) costs about a token a change: an ASCII text counts at the larger of its
/// classes' figure and its changes. Ordinary prose, code and JSON count at about what they
/// cost, and ASCII chosen to cost more than it looks at no less than about half.
///
/// Every LLM call estimates the whole history, so this runs over every character of it: ASCII
/// is classed eight bytes at a time (comparisons on every byte of a word at once), and only
/// other text is decoded character by character. A tool call's input is counted as the JSON
/// the model sees, without writing it.
struct Characters {
    /// ASCII letters and spaces, about four a token.
    letters: u64,
    /// ASCII digits, punctuation, tabs, line ends and carriage returns, about two a token.
    marks: u64,
    /// Other ASCII control characters, a token each.
    controls: u64,
    /// Where an ASCII character is a letter and the one before it not, or the other way
    /// round (other characters between them are passed over).
    changes: u64,
    /// Whether the last ASCII character was a letter, in its high bit (0x80), as a word's
    /// bytes have theirs.
    last_letter: u64,
    /// Tokens of the other characters, each counted on its own ([`wide_tokens`]).
    wide: u64,
}

impl Default for Characters {
    fn default() -> Self {
        Self {
            letters: 0,
            marks: 0,
            controls: 0,
            changes: 0,
            // Text starts as if after a letter: a word at the start is no change.
            last_letter: 0x80,
            wide: 0,
        }
    }
}

/// One in every byte of a word.
const ONES: u64 = 0x0101_0101_0101_0101;

/// The high bit of every byte: set in none of an ASCII word.
const HIGH_BITS: u64 = ONES * 0x80;

/// The high bit of each byte of the ASCII `word` that is at least `low` (at most 0x80): each
/// byte with its high bit set minus `low` borrows from none of its neighbours.
fn at_least(word: u64, low: u8) -> u64 {
    ((word | HIGH_BITS) - ONES * u64::from(low)) & HIGH_BITS
}

/// The high bit of each byte of the ASCII `word` within `low..=high` (`high` below 0x80).
fn within(word: u64, low: u8, high: u8) -> u64 {
    at_least(word, low) & !at_least(word, high + 1)
}

/// The high bits of the bytes of the ASCII `word` that are letters or spaces, and of those that
/// are control characters other than a tab, a line end or a carriage return.
fn classes(word: u64) -> (u64, u64) {
    let printable = at_least(word, b' ');
    let space = printable & !at_least(word, b' ' + 1);
    // Upper case folded to lower; no other byte lands among the letters.
    let alpha = within(word | (ONES * 0x20), b'a', b'z');
    let delete = at_least(word, 0x7f);
    // Most words of text hold no control character: two comparisons say so.
    if printable == HIGH_BITS && delete == 0 {
        return (alpha | space, 0);
    }
    let spacing = within(word, b'\t', b'\n') | within(word, b'\r', b'\r');
    let controls = (HIGH_BITS & !printable & !spacing) | delete;
    (alpha | space, controls)
}

fn is_letter(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b' '
}

fn is_control(c: u8) -> bool {
    c.is_ascii_control() && !matches!(c, b'\t' | b'\n' | b'\r')
}

impl Characters {
    fn tokens(&self) -> u64 {
        let by_class = self.letters.div_ceil(4) + self.marks.div_ceil(2);
        self.wide + self.controls + by_class.max(self.changes)
    }

    fn text(&mut self, text: &str) {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if let Some(Ok(word)) = bytes.get(i..i + 8).map(<[u8; 8]>::try_from) {
                let word = u64::from_le_bytes(word);
                if word & HIGH_BITS == 0 {
                    let (letters, controls) = classes(word);
                    let controls = u64::from(controls.count_ones());
                    let count = u64::from(letters.count_ones());
                    self.letters += count;
                    self.controls += controls;
                    self.marks += 8 - count - controls;
                    // Each byte's class beside the one before it (the first byte's, the last
                    // character's).
                    let before = (letters << 8) | self.last_letter;
                    self.changes += u64::from(((letters ^ before) & HIGH_BITS).count_ones());
                    self.last_letter = (letters >> 56) & 0x80;
                    i += 8;
                    continue;
                }
            }
            // `i` is always where a character starts: it moves by whole ASCII words or
            // characters.
            let Some(c) = text.get(i..).and_then(|rest| rest.chars().next()) else {
                break;
            };
            match u8::try_from(c) {
                Ok(b) if b.is_ascii() => self.ascii(b),
                _ => self.wide += wide_tokens(c),
            }
            i += c.len_utf8();
        }
    }

    /// One ASCII character.
    fn ascii(&mut self, b: u8) {
        let letter = is_letter(b);
        if letter {
            self.letters += 1;
        } else if is_control(b) {
            self.controls += 1;
        } else {
            self.marks += 1;
        }
        let letter = if letter { 0x80 } else { 0 };
        self.changes += u64::from(letter != self.last_letter);
        self.last_letter = letter;
    }

    /// `value` as compact JSON (escapes counted as the character they stand for), character
    /// by character as the model sees it.
    fn json(&mut self, value: &Value) {
        match value {
            Value::Null => self.text("null"),
            Value::Bool(true) => self.text("true"),
            Value::Bool(false) => self.text("false"),
            Value::Number(n) => {
                let _ = write!(self, "{n}");
            }
            Value::String(s) => {
                self.ascii(b'"');
                self.text(s);
                self.ascii(b'"');
            }
            Value::Array(items) => {
                self.ascii(b'[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.ascii(b',');
                    }
                    self.json(item);
                }
                self.ascii(b']');
            }
            Value::Object(fields) => {
                self.ascii(b'{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        self.ascii(b',');
                    }
                    self.ascii(b'"');
                    self.text(key);
                    self.text("\":");
                    self.json(value);
                }
                self.ascii(b'}');
            }
        }
    }
}

/// Numbers are counted as they are written.
impl fmt::Write for Characters {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.text(s);
        Ok(())
    }
}

/// The tokens one non-ASCII character may cost. Byte-level tokenizers (Anthropic's, OpenAI's;
/// Gemini's falls back to bytes) have a token for each common CJK character and each letter of
/// the two-byte scripts, but may spend one on every byte of anything else: Thai, Devanagari and
/// emoji cost one to four tokens a character, and text chosen for it costs the most. The rare
/// ideographs of the CJK extensions are among these.
fn wide_tokens(c: char) -> u64 {
    match c.len_utf8() {
        _ if is_cjk(c) => 1,
        2 => 1,
        bytes => bytes as u64,
    }
}

/// The common CJK characters: about a token each.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // Hiragana, Katakana
        | 0x4E00..=0x9FFF    // CJK Unified Ideographs
        | 0xAC00..=0xD7AF    // Hangul syllables
        | 0xF900..=0xFAFF    // CJK Compatibility Ideographs
        | 0xFF00..=0xFFEF) // full-width forms
}

/// Estimated tokens of one tool definition as a provider sends it to the model.
pub fn tool_tokens(tool: &crate::llm::ToolDef) -> u64 {
    let mut count = Characters::default();
    count.text(&tool.name);
    count.text(&tool.description);
    count.json(&tool.input_schema);
    count.tokens()
}

/// Estimated tokens of one message as the LLM would see it (plus a little framing); files by
/// `provider`'s rule of thumb (`None`: the most any provider counts).
pub fn message_tokens(message: &AgentMessage, provider: Option<&str>) -> u64 {
    const FRAMING: u64 = 4;
    let blocks = |content: &[ContentBlock]| -> u64 {
        content.iter().map(|b| block_tokens(b, provider)).sum()
    };
    let text: u64 = match message {
        AgentMessage::User { content } => blocks(content),
        AgentMessage::Assistant(a) => blocks(&a.content),
        AgentMessage::ToolResult(r) => estimate_tokens(&r.content),
        AgentMessage::Summary { text }
        | AgentMessage::SystemEvent {
            text,
            schedule: Some(_),
        } => estimate_tokens(text),
        // Never sent to the LLM.
        AgentMessage::ContextNote { .. }
        | AgentMessage::SystemEvent { .. }
        | AgentMessage::ToolLog { .. } => return 0,
    };
    text + FRAMING
}

/// Estimated tokens of one content block (a file's by `provider`'s rule of thumb).
pub(crate) fn block_tokens(block: &ContentBlock, provider: Option<&str>) -> u64 {
    match block {
        ContentBlock::Text { text } => estimate_tokens(text),
        ContentBlock::Thinking { thinking, .. } => estimate_tokens(thinking),
        ContentBlock::ToolUse(call) => {
            let mut input = Characters::default();
            input.json(&call.input);
            estimate_tokens(&call.name) + input.tokens()
        }
        ContentBlock::RedactedThinking { data } => estimate_tokens(data) / 2,
        ContentBlock::File(file) => file.tokens(provider),
    }
}

/// An answer whose provider did not report all of its usage is charged from estimates of what
/// was sent (`input`, computed only when needed) and of what streamed, marked estimated:
/// - cut short (failed, cancelled or interrupted: OpenAI sends usage last, Anthropic its output
///   tokens at the end), a count the provider did report stays where it is at least the
///   estimate, and an answer that streamed nothing is left as it is;
/// - finished, only what the provider left at zero is estimated (some servers never report
///   usage, and a finished answer is not free): its input, even with nothing streamed, and its
///   output.
pub fn charge_unreported(answer: &mut crate::llm::AssistantMessage, input: impl FnOnce() -> u64) {
    let cut_short = matches!(
        answer.stop_reason,
        StopReason::Error | StopReason::Aborted | StopReason::Interrupted
    );
    // Nothing streamed: the provider refused or failed before it worked (a 429, a 5xx), and
    // providers do not bill for that.
    if cut_short && answer.content.is_empty() {
        return;
    }
    if cut_short || answer.usage.output_tokens == 0 {
        let streamed: u64 = answer.content.iter().map(|b| block_tokens(b, None)).sum();
        if streamed > answer.usage.output_tokens {
            answer.usage.output_tokens = streamed;
            answer.usage.estimated = true;
        }
    }
    let usage = &mut answer.usage;
    if usage.input_tokens == 0 && usage.cache_read_tokens == 0 {
        usage.input_tokens = input();
        usage.estimated |= usage.input_tokens > 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cjk_text_counts_about_a_token_a_character() {
        assert_eq!(estimate_tokens("你好世界"), 4);
        assert_eq!(estimate_tokens("hello world!"), 3 + 1);
        assert_eq!(estimate_tokens("こんにちは world"), 5 + 2);
        assert_eq!(estimate_tokens(""), 0);
    }

    #[test]
    fn every_byte_is_classed_alike_at_every_place_in_a_word() {
        for byte in 0u8..128 {
            for place in 0..8 {
                // The byte among letters, and among marks.
                for fill in [b'a', b'.'] {
                    let mut bytes = [fill; 8];
                    bytes[place] = byte;
                    let word = u64::from_le_bytes(bytes);
                    let count =
                        |class: fn(u8) -> bool| bytes.iter().filter(|&&b| class(b)).count() as u32;
                    let (letters, controls) = classes(word);
                    assert_eq!(letters.count_ones(), count(is_letter), "{byte:#x}");
                    assert_eq!(controls.count_ones(), count(is_control), "{byte:#x}");
                }
            }
        }
    }

    #[test]
    fn text_that_alternates_counts_a_token_a_change() {
        // Issue 56: letters and marks in turn cost about a token each.
        assert_eq!(estimate_tokens("a.b,c;d:"), 7);
        assert_eq!(estimate_tokens("x1y2z3w4"), 7);
        // Line ends too: tokenizers split before them.
        assert_eq!(estimate_tokens(&"x\n".repeat(8)), 15);
        // Control characters cost a token each, whatever their neighbours.
        // (and the run of them is a change from the letters text starts as).
        assert_eq!(estimate_tokens("\u{1}\u{2}\u{3}\u{4}"), 4 + 1);
    }

    #[test]
    fn digits_and_marks_count_at_two_a_token() {
        // Issue 56: they were counted as letters, four a token, and a prompt of digits or
        // marks cost four times what was held for it.
        assert_eq!(estimate_tokens("31415926"), 4);
        assert_eq!(estimate_tokens("!@#$%^&*()"), 5);
        assert_eq!(estimate_tokens("x = 12;"), 1 + 2);
        // Words are as they were.
        assert_eq!(estimate_tokens("The quick brown fox"), 5);
    }

    #[test]
    fn text_that_costs_more_than_a_token_a_character_is_counted_so() {
        // Issue 56: Thai, Devanagari and emoji were counted at four characters a token.
        assert_eq!(estimate_tokens("สวัสดี"), 6 * 3);
        assert_eq!(estimate_tokens("नमस्ते"), 6 * 3);
        assert_eq!(estimate_tokens("🙂🙂"), 2 * 4);
        // Rare ideographs (an extension block) are not the common CJK.
        assert_eq!(estimate_tokens("𠀀"), 4);
        // Letters of two-byte scripts are a token each, like CJK.
        assert_eq!(estimate_tokens("Привет"), 6);
        assert_eq!(estimate_tokens("café"), 1 + 1);
    }

    #[test]
    fn the_word_at_a_time_count_is_the_character_by_character_one() {
        // The rules, a character at a time.
        let by_character = |text: &str| {
            let ascii: Vec<char> = text.chars().filter(char::is_ascii).collect();
            let letter = |c: &char| c.is_ascii_alphabetic() || *c == ' ';
            let control = |c: &char| c.is_ascii_control() && !matches!(c, '\t' | '\n' | '\r');
            let letters = ascii.iter().filter(|c| letter(c)).count() as u64;
            let controls = ascii.iter().filter(|c| control(c)).count() as u64;
            let marks = ascii.len() as u64 - letters - controls;
            let mut last = true;
            let mut changes = 0;
            for c in &ascii {
                changes += u64::from(letter(c) != last);
                last = letter(c);
            }
            let wide: u64 = text
                .chars()
                .filter(|c| !c.is_ascii())
                .map(wide_tokens)
                .sum();
            wide + controls + (letters.div_ceil(4) + marks.div_ceil(2)).max(changes)
        };
        // ASCII runs of every length around a word, between CJK, accented letters and emoji
        // (four bytes), so that words start at every offset; the runs hold every ASCII class
        // and the bytes at the edges of each ('@' and '[' beside the letters, '/' and ':'
        // beside the digits, the control characters around the white space).
        let pieces = ["你", "é", "🙂", "한", "𠀀", "ｈ"];
        let every: String = (0u8..128).map(char::from).collect();
        for run in 0..20 {
            for piece in pieces {
                let ascii = "aZ@[`{09/: \t\n\r\x0b\x0c\x08\x0e\x1f\x7f"[..run].to_string();
                let text = format!("{piece}{}{piece}", &every[run..]);
                assert_eq!(estimate_tokens(&text), by_character(&text), "{text:?}");
                for text in [
                    format!("{ascii}{piece}{ascii}"),
                    format!("{piece}{ascii}{piece}{piece}{ascii}x"),
                    format!("{ascii}{}", piece.repeat(run)),
                ] {
                    assert_eq!(estimate_tokens(&text), by_character(&text), "{text:?}");
                }
            }
        }
    }

    #[test]
    fn a_tool_input_counts_as_its_json_without_writing_it() {
        let inputs = [
            serde_json::json!({}),
            serde_json::json!([]),
            serde_json::json!({"path": "src/main.rs", "content": "fn main() {}", "lines": [1, 20, -3, 2.5e10], "force": false, "mode": null, "deep": {"a": [true, {}, []], "名前": "値です"}}),
            serde_json::json!(["x", 1, [2, [3]], {"k": "v"}]),
            serde_json::json!(1234567),
        ];
        for input in inputs {
            let mut count = Characters::default();
            count.json(&input);
            assert_eq!(
                count.tokens(),
                estimate_tokens(&input.to_string()),
                "{input}"
            );
        }
    }
}
