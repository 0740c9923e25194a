//! The answer being assembled while it streams. Every provider decoder drives one of these, so
//! block bookkeeping and tool-argument parsing are written once.

use serde_json::Value;

use super::types::{AssistantMessage, ContentBlock, StopReason, ToolCall, Usage};
use super::LlmEvent;

#[derive(Debug)]
enum Block {
    Text(String),
    Thinking {
        text: String,
        signature: Option<String>,
    },
    Tool {
        id: String,
        name: String,
        arguments: String,
        signature: Option<String>,
    },
    Redacted(String),
}

#[derive(Debug, Default)]
pub(crate) struct Assembler {
    blocks: Vec<(Block, bool)>, // (block, still open)
    pub usage: Usage,
    pub stop_reason: Option<StopReason>,
}

impl Assembler {
    pub fn start_text(&mut self, out: &mut Vec<LlmEvent>) -> usize {
        let index = self.open(Block::Text(String::new()));
        out.push(LlmEvent::TextStart { index });
        index
    }

    pub fn text_delta(&mut self, index: usize, delta: &str, out: &mut Vec<LlmEvent>) {
        if delta.is_empty() {
            return;
        }
        if let Some((Block::Text(text), true)) = self.blocks.get_mut(index) {
            text.push_str(delta);
            out.push(LlmEvent::TextDelta {
                index,
                delta: delta.to_string(),
            });
        }
    }

    /// Appends to the text block in `open`, starting one (and recording it there) if none is
    /// open. Returns the block's index.
    pub fn continue_text(
        &mut self,
        open: &mut Option<usize>,
        delta: &str,
        out: &mut Vec<LlmEvent>,
    ) -> usize {
        let index = match *open {
            Some(i) => i,
            None => *open.insert(self.start_text(out)),
        };
        self.text_delta(index, delta, out);
        index
    }

    /// Like [`continue_text`](Self::continue_text), for reasoning.
    pub fn continue_thinking(
        &mut self,
        open: &mut Option<usize>,
        delta: &str,
        out: &mut Vec<LlmEvent>,
    ) -> usize {
        let index = match *open {
            Some(i) => i,
            None => *open.insert(self.start_thinking(out)),
        };
        self.thinking_delta(index, delta, out);
        index
    }

    pub fn start_thinking(&mut self, out: &mut Vec<LlmEvent>) -> usize {
        let index = self.open(Block::Thinking {
            text: String::new(),
            signature: None,
        });
        out.push(LlmEvent::ThinkingStart { index });
        index
    }

    pub fn thinking_delta(&mut self, index: usize, delta: &str, out: &mut Vec<LlmEvent>) {
        if delta.is_empty() {
            return;
        }
        if let Some((Block::Thinking { text, .. }, true)) = self.blocks.get_mut(index) {
            text.push_str(delta);
            out.push(LlmEvent::ThinkingDelta {
                index,
                delta: delta.to_string(),
            });
        }
    }

    pub fn thinking_signature(&mut self, index: usize, part: &str) {
        if let Some((Block::Thinking { signature, .. }, _)) = self.blocks.get_mut(index) {
            signature.get_or_insert_with(String::new).push_str(part);
        }
    }

    pub fn start_tool_call(&mut self, id: &str, name: &str, out: &mut Vec<LlmEvent>) -> usize {
        let index = self.open(Block::Tool {
            id: id.to_string(),
            name: name.to_string(),
            arguments: String::new(),
            signature: None,
        });
        out.push(LlmEvent::ToolCallStart {
            index,
            id: id.to_string(),
            name: name.to_string(),
        });
        index
    }

    pub fn tool_call_delta(&mut self, index: usize, delta: &str, out: &mut Vec<LlmEvent>) {
        if delta.is_empty() {
            return;
        }
        if let Some((Block::Tool { arguments, .. }, true)) = self.blocks.get_mut(index) {
            arguments.push_str(delta);
            out.push(LlmEvent::ToolCallDelta {
                index,
                delta: delta.to_string(),
            });
        }
    }

    pub fn tool_call_signature(&mut self, index: usize, part: &str) {
        if let Some((Block::Tool { signature, .. }, _)) = self.blocks.get_mut(index) {
            signature.get_or_insert_with(String::new).push_str(part);
        }
    }

    /// A signature that arrived without thinking text (Gemini puts one on an empty text part):
    /// kept as a closed, empty thinking block so it can be sent back, with no events, since
    /// there is nothing to show.
    pub fn add_signature(&mut self, signature: &str) {
        self.blocks.push((
            Block::Thinking {
                text: String::new(),
                signature: Some(signature.to_string()),
            },
            false,
        ));
    }

    /// Encrypted reasoning, whole: stored, nothing streamed.
    pub fn add_redacted_thinking(&mut self, data: &str) {
        self.blocks.push((Block::Redacted(data.to_string()), false));
    }

    /// Closes a block (no-op if it is closed already or unknown).
    pub fn end(&mut self, index: usize, out: &mut Vec<LlmEvent>) {
        let Some((block, open)) = self.blocks.get_mut(index) else {
            return;
        };
        if !*open {
            return;
        }
        *open = false;
        out.push(match block {
            Block::Redacted(_) => return,
            Block::Text(_) => LlmEvent::TextEnd { index },
            Block::Thinking { .. } => LlmEvent::ThinkingEnd { index },
            Block::Tool {
                id,
                name,
                arguments,
                ..
            } => LlmEvent::ToolCallEnd {
                index,
                id: id.clone(),
                name: name.clone(),
                input: parse_arguments(arguments),
            },
        });
    }

    pub fn end_all(&mut self, out: &mut Vec<LlmEvent>) {
        for index in 0..self.blocks.len() {
            self.end(index, out);
        }
    }

    pub fn set_usage(&mut self, usage: Usage, out: &mut Vec<LlmEvent>) {
        if usage != self.usage {
            self.usage = usage;
            out.push(LlmEvent::Usage(usage));
        }
    }

    /// Content blocks so far.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    pub fn has_tool_calls(&self) -> bool {
        self.blocks
            .iter()
            .any(|(b, _)| matches!(b, Block::Tool { .. }))
    }

    pub fn into_message(
        self,
        provider: &str,
        model: &str,
        fallback: StopReason,
    ) -> AssistantMessage {
        let content = self
            .blocks
            .into_iter()
            .map(|(block, _)| match block {
                Block::Text(text) => ContentBlock::Text { text },
                Block::Thinking { text, signature } => ContentBlock::Thinking {
                    thinking: text,
                    signature,
                },
                Block::Redacted(data) => ContentBlock::RedactedThinking { data },
                Block::Tool {
                    id,
                    name,
                    arguments,
                    signature,
                } => ContentBlock::ToolUse(ToolCall {
                    input: parse_arguments(&arguments),
                    id,
                    name,
                    signature,
                }),
            })
            .collect();
        AssistantMessage {
            content,
            stop_reason: self.stop_reason.unwrap_or(fallback),
            model: model.to_string(),
            provider: provider.to_string(),
            usage: self.usage,
            output: None,
        }
    }

    fn open(&mut self, block: Block) -> usize {
        self.blocks.push((block, true));
        self.blocks.len() - 1
    }
}

/// Arguments as streamed: empty means no arguments (Anthropic sends only `""` for those);
/// slightly malformed JSON is repaired; text that still is not JSON is kept verbatim as a JSON
/// string, which the agent turns into an error result the model can correct.
fn parse_arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Default::default());
    }
    super::repair::parse_lenient(raw).unwrap_or_else(|| Value::String(raw.to_string()))
}
