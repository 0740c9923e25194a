//! Compaction: when the history grows past a share of the model's context window, older whole
//! exchanges are summarised into one `summary` message (sent to the LLM as a user message).
//!
//! - Tokens are estimated, and pessimistically where text could be chosen to cost more than it
//!   looks: ASCII letters and spaces about four characters a token, digits and marks two, and
//!   at least a token wherever letters meet other characters (see [`Characters`]); a common CJK
//!   character, or a letter of a two-byte script (accented Latin, Greek, Cyrillic, Hebrew,
//!   Arabic), one; any other character (Thai, Devanagari, emoji, rare ideographs) a token per
//!   UTF-8 byte, the most a byte-level tokenizer spends on it.
//! - Cuts fall only where an exchange starts (a user or summary message), so a tool call is
//!   never separated from its result, and the latest user message always stays verbatim.
//! - The summary comes from a resolved (usually cheaper) provider. If it fails, the oldest whole
//!   exchanges are dropped instead, so the turn can still go on.
//! - The [`Compaction`] says which messages the summary replaces, so the application can persist
//!   the same change.

use std::fmt::{self, Write as _};
use std::ops::Range;
use std::rc::Rc;

use serde_json::Value;

use super::{convert_to_llm, AgentMessage, CallSize, ProviderResolver, Resolved};
use crate::llm::{ContentBlock, LlmRequest, Message, ModelRef, Usage};

/// Roughly how many tokens `text` is.
pub fn estimate_tokens(text: &str) -> u64 {
    let mut count = Characters::default();
    count.text(text);
    count.tokens()
}

/// The characters an estimate is made of, by class, and where ASCII text changes between
/// letters and the rest.
///
/// Letters, spaces and line ends make words, about four characters a token. Digits,
/// punctuation, tabs and carriage returns merge far less (Gemini's tokenizer gives each digit a
/// token), so they count at two a token; other control characters a token each. A tokenizer
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
    /// ASCII letters, spaces and line ends, about four a token.
    letters: u64,
    /// ASCII digits, punctuation, tabs and carriage returns, about two a token.
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

/// The high bits of the bytes of the ASCII `word` that are letters, spaces or line ends, and
/// of those that are control characters other than a tab, a line end or a carriage return.
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
    let line_end = within(word, b'\n', b'\n');
    let spacing = within(word, b'\t', b'\n') | within(word, b'\r', b'\r');
    let controls = (HIGH_BITS & !printable & !spacing) | delete;
    (alpha | space | line_end, controls)
}

fn is_letter(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b' ' || c == b'\n'
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

/// A change to the history: `replaces` is taken out and `summary` put in its place (what the
/// application marks as compacted: only what the summary covers), and `hidden`, the old
/// exchanges after it that the summary does not cover, are left out of this call's view only.
/// When summarising fails there is no summary, nothing is replaced, and every old exchange is
/// hidden from this call: nothing is lost for good because a summary call failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    pub replaces: Range<usize>,
    /// `None` when summarising failed.
    pub summary: Option<AgentMessage>,
    /// Left out of this call's view, kept in the history (indices before `apply`).
    pub hidden: Range<usize>,
    /// The summary request's calls, when one was made (whether or not it succeeded): the model
    /// that answered and what it used (estimated when the provider never said), then each
    /// attempt given up on before it that was billed, for the ledger.
    pub calls: Vec<(ModelRef, Usage)>,
}

impl Compaction {
    /// Puts the summary in place of what it covers (nothing without a summary).
    pub fn apply(&self, messages: &mut Vec<AgentMessage>) {
        if self.summary.is_some() {
            messages.splice(self.replaces.clone(), self.summary.clone());
        }
    }

    /// Where the hidden exchanges are once [`Compaction::apply`] has run.
    pub fn hidden_after_apply(&self) -> Range<usize> {
        let start = if self.summary.is_some() {
            self.hidden.start + 1 - self.replaces.len()
        } else {
            self.hidden.start
        };
        start..start + self.hidden.len()
    }
}

pub struct Compactor {
    /// Who writes the summary.
    pub summariser: Rc<dyn ProviderResolver>,
    pub context_window: u64,
    /// Compact when the estimate passes this share of the window (e.g. 0.8).
    pub threshold_ratio: f64,
    /// The most the summariser's model may write in one answer.
    pub max_output_tokens: u64,
    /// The provider of the model whose window this is: files are counted by its rule of thumb.
    pub provider: Option<String>,
}

const INSTRUCTION: &str = "Summarise the conversation above for your own later use. Keep every \
    fact, decision, name, number, open question and unfinished task; drop pleasantries. Write it \
    as notes, not as a reply to the user.";

impl Compactor {
    /// The compaction `messages` need, if they are over the threshold.
    pub async fn compact(&self, messages: &[AgentMessage]) -> Option<Compaction> {
        let provider = self.provider.as_deref();
        let tokens: Vec<u64> = messages
            .iter()
            .map(|m| message_tokens(m, provider))
            .collect();
        let threshold = (self.context_window as f64 * self.threshold_ratio) as u64;
        if tokens.iter().sum::<u64>() <= threshold {
            return None;
        }
        let cut = cut(messages, &tokens, threshold / 2)?;
        let (summary, calls) = self.summarise(&messages[..cut], &tokens[..cut]).await;
        Some(match summary {
            Some((text, covered)) => Compaction {
                replaces: 0..covered,
                summary: Some(AgentMessage::Summary { text }),
                hidden: covered..cut,
                calls,
            },
            None => Compaction {
                replaces: 0..0,
                summary: None,
                hidden: 0..cut,
                calls,
            },
        })
    }

    /// A summary of the oldest of `old` that fit one summary request, and how many messages
    /// it covers. Oldest first, so an earlier summary (always first) is folded into the new
    /// one and each compaction moves forward from where the last stopped.
    /// `tokens` holds each message's estimate (made once, by [`Compactor::compact`]).
    async fn summarise(
        &self,
        old: &[AgentMessage],
        tokens: &[u64],
    ) -> (Option<(String, usize)>, Vec<(ModelRef, Usage)>) {
        // The summary request must fit the window too: it gets a quarter of it to answer in
        // (at most 1,024 tokens) and the oldest exchanges that fit in the rest, less room for
        // the instruction and the system prompt.
        let max_tokens = (self.context_window / 4)
            .clamp(64, 1024)
            .min(self.max_output_tokens.max(1));
        let budget = self.context_window.saturating_sub(max_tokens + 96);
        let covered = fitting_head(old, tokens, budget);
        if covered == 0 {
            return (None, Vec::new());
        }
        let input = || tokens[..covered].iter().sum::<u64>() + estimate_tokens(INSTRUCTION);
        let size = CallSize {
            max_tokens: max_tokens as u32,
            input_tokens: &input,
        };
        let Ok(Resolved {
            provider,
            max_tokens,
        }) = self.summariser.resolve(size).await
        else {
            return (None, Vec::new());
        };
        let old = &old[..covered];
        let mut history = crate::llm::transform::prepare_for(
            convert_to_llm(old),
            provider.model(),
            &provider.capabilities(),
        );
        history.push(Message::user_text(INSTRUCTION));
        // Its attempts go to the ledger with its answer, from `calls`.
        let billed = super::turn::Billed {
            resolver: self.summariser.as_ref(),
            hooks: None,
        };
        let request = LlmRequest {
            system: Some("You compress conversations into faithful notes."),
            messages: &history,
            tools: &[],
            max_tokens,
            temperature: None,
            // No tools are offered: a summary has no calls to name.
            call_ids: "call_summary_",
            billing: Some(&billed),
        };
        let mut completion = provider.complete(&request).await;
        // Whatever the provider did not report is estimated (see `charge_unreported`).
        super::turn::charge_unreported(&mut completion.message, input);
        self.summariser.settle(&completion.message).await;
        // The model that answered (a fallback's, after a switch) is the one that is paid, and
        // each attempt given up on (charged as it was given up on), its own.
        let mut calls = vec![(completion.message.model_ref(), completion.message.usage)];
        for attempt in &completion.given_up {
            calls.push((attempt.model_ref(), attempt.usage));
        }
        let text = completion.message.text();
        let summary =
            (completion.error.is_none() && !text.trim().is_empty()).then_some((text, covered));
        (summary, calls)
    }
}

/// Where the kept tail starts: the earliest exchange start from which the tail fits `target`,
/// but never past the latest user message. `None` if nothing can be cut. `tokens` holds each
/// message's estimate, so each tail is a sum of numbers, not another pass over its text.
fn cut(messages: &[AgentMessage], tokens: &[u64], target: u64) -> Option<usize> {
    let latest_user = messages
        .iter()
        .rposition(|m| matches!(m, AgentMessage::User { .. }))?;
    let mut tail: u64 = tokens.iter().skip(1).sum();
    let mut chosen = None;
    let exchanges = messages.iter().zip(tokens).enumerate();
    for (start, (message, &own)) in exchanges.take(latest_user + 1).skip(1) {
        if matches!(
            message,
            AgentMessage::User { .. } | AgentMessage::Summary { .. }
        ) {
            chosen = Some(start);
            if tail <= target {
                break;
            }
        }
        tail = tail.saturating_sub(own);
    }
    chosen
}

/// How many of `messages` (whole exchanges, from the first; `tokens` their estimates) fit
/// `budget` tokens: the end of the longest head that stops where an exchange starts, or all of
/// them when they all fit.
fn fitting_head(messages: &[AgentMessage], tokens: &[u64], budget: u64) -> usize {
    let mut used = 0;
    let mut end = 0;
    for (i, (message, &own)) in messages.iter().zip(tokens).enumerate() {
        if i > 0
            && matches!(
                message,
                AgentMessage::User { .. } | AgentMessage::Summary { .. }
            )
        {
            end = i;
        }
        used += own;
        if used > budget {
            return end;
        }
    }
    messages.len()
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
            let letter = |c: &char| c.is_ascii_alphabetic() || *c == ' ' || *c == '\n';
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

    #[test]
    fn the_kept_tail_is_the_longest_that_fits_from_an_exchange_start() {
        let words = |n: usize| AgentMessage::user_text("word ".repeat(n));
        let answer = |n: usize| {
            AgentMessage::Assistant(crate::llm::AssistantMessage {
                content: vec![ContentBlock::Text {
                    text: "word ".repeat(n),
                }],
                stop_reason: crate::llm::StopReason::EndTurn,
                model: "m".into(),
                provider: "p".into(),
                usage: Default::default(),
            })
        };
        let messages = vec![
            words(400),
            answer(400),
            words(40),
            answer(400),
            words(40),
            answer(40),
            words(4),
            answer(4),
        ];
        let tokens: Vec<u64> = messages.iter().map(|m| message_tokens(m, None)).collect();
        // The tail from each start, summed the slow way, says which start is right.
        let tail = |start: usize| tokens[start..].iter().sum::<u64>();
        assert_eq!(cut(&messages, &tokens, tail(2)), Some(2));
        assert_eq!(cut(&messages, &tokens, tail(2) - 1), Some(4));
        assert_eq!(cut(&messages, &tokens, tail(4)), Some(4));
        assert_eq!(cut(&messages, &tokens, tail(6)), Some(6));
        // Nothing fits: the latest user message starts the tail, kept verbatim.
        assert_eq!(cut(&messages, &tokens, 1), Some(6));
        // A history without a user message past the first cannot be cut.
        assert_eq!(cut(&messages[..2], &tokens[..2], 1), None);
    }

    #[test]
    fn the_summarised_head_ends_where_an_exchange_starts_and_fits() {
        let long = "word ".repeat(400); // about 500 tokens
        let messages = vec![
            AgentMessage::user_text(long.clone()),
            AgentMessage::user_text(long.clone()),
            AgentMessage::ToolResult(crate::llm::ToolResult {
                tool_call_id: "c".into(),
                tool_name: "t".into(),
                content: "ok".into(),
                is_error: false,
            }),
            AgentMessage::user_text("short"),
        ];
        let tokens: Vec<u64> = messages.iter().map(|m| message_tokens(m, None)).collect();
        let fitting_head = |budget| fitting_head(&messages, &tokens, budget);
        assert_eq!(fitting_head(10_000), 4);
        // 504 + 504 + 5 fit 1,015; the short question (6 more) does not, and starts the rest.
        assert_eq!(fitting_head(1_015), 3);
        assert_eq!(fitting_head(700), 1);
        assert_eq!(fitting_head(50), 0);
    }
}
