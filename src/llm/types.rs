//! The plain types every layer shares: content blocks, messages, tool definitions, usage.
//!
//! Their serde form is also the stored form (D1 keeps content blocks as this JSON), so renaming a
//! field here is a data migration.

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use super::json::{self, FromJson, Reader};
use super::{Attachment, FileData};

/// One piece of a message's content. Serialized with a `type` tag; read back through a flat
/// struct (see its `FromJson`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// Model reasoning. `signature` is the provider's proof of authenticity (Anthropic), needed
    /// to send the block back to the same provider.
    Thinking {
        thinking: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    ToolUse(ToolCall),
    /// Reasoning the provider encrypted (Anthropic `redacted_thinking`): nothing to show, but it
    /// must go back verbatim to the same provider.
    RedactedThinking {
        data: String,
    },
    /// A file the user attached: a reference, its contents filled in only for a call.
    File(Attachment),
}

impl ContentBlock {
    /// What the block gives a model that reads it as text: a text block's text, or a text file's
    /// framed contents once loaded.
    pub fn model_text(&self) -> Option<&str> {
        match self {
            ContentBlock::Text { text } => Some(text),
            ContentBlock::File(Attachment {
                data: Some(FileData::Text(text)),
                ..
            }) => Some(text),
            _ => None,
        }
    }

    /// A loaded image or PDF, with its base64 contents.
    pub fn inline_file(&self) -> Option<(&Attachment, &str)> {
        match self {
            ContentBlock::File(
                file @ Attachment {
                    data: Some(FileData::Base64(data)),
                    ..
                },
            ) => Some((file, data)),
            _ => None,
        }
    }
}

/// Read through one flat struct: the fields of every kind, then the kind picks its own.
impl<'a> FromJson<'a> for ContentBlock {
    fn read(r: &mut Reader<'a>) -> json::Result<Self> {
        struct Flat {
            kind: String,
            text: Option<String>,
            thinking: Option<String>,
            signature: Option<String>,
            id: Option<String>,
            name: Option<String>,
            input: Option<Value>,
            data: Option<String>,
            media_type: Option<String>,
            size: Option<u64>,
            width: Option<u32>,
            height: Option<u32>,
            pages: Option<u32>,
        }
        crate::json_struct!(Flat {
            "type" => kind, "text" => text, "thinking" => thinking, "signature" => signature,
            "id" => id, "name" => name, "input" => input, "data" => data,
            "media_type" => media_type, "size" => size, "width" => width, "height" => height,
            "pages" => pages,
        });
        let flat = Flat::read(r)?;
        let need = |value: Option<String>, field: &str| value.ok_or_else(|| r.missing(field));
        Ok(match flat.kind.as_str() {
            "text" => ContentBlock::Text {
                text: need(flat.text, "text")?,
            },
            "thinking" => ContentBlock::Thinking {
                thinking: need(flat.thinking, "thinking")?,
                signature: flat.signature,
            },
            "tool_use" => ContentBlock::ToolUse(ToolCall {
                id: need(flat.id, "id")?,
                name: need(flat.name, "name")?,
                input: flat.input.unwrap_or(Value::Null),
                signature: flat.signature,
            }),
            "redacted_thinking" => ContentBlock::RedactedThinking {
                data: need(flat.data, "data")?,
            },
            "file" => ContentBlock::File(Attachment {
                id: need(flat.id, "id")?,
                media_type: need(flat.media_type, "media_type")?,
                size: flat.size.ok_or_else(|| r.missing("size"))?,
                name: flat.name,
                width: flat.width,
                height: flat.height,
                pages: flat.pages,
                data: None,
            }),
            other => {
                return Err(r.unknown_name(
                    "variant",
                    other,
                    &["text", "thinking", "tool_use", "redacted_thinking", "file"],
                ))
            }
        })
    }
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The parsed arguments. When the model produced text that is not valid JSON, this is a
    /// JSON string holding that raw text, so nothing the model said is lost.
    pub input: Value,
    /// The provider's opaque signature for this call (Gemini's `thoughtSignature`), which must be
    /// sent back with it to the same provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

crate::json_struct!(ToolCall {
    "id" => id,
    "name" => name,
    "input" => input,
    "signature" => signature: default,
});

impl ToolCall {
    /// The arguments as a JSON object, or an explanation of why they are not one.
    pub fn arguments(&self) -> Result<&serde_json::Map<String, Value>, String> {
        match &self.input {
            Value::Object(map) => Ok(map),
            Value::String(raw) => Err(format!(
                "the arguments for `{}` were not valid JSON: {raw}",
                self.name
            )),
            other => Err(format!(
                "the arguments for `{}` must be a JSON object, got {other}",
                self.name
            )),
        }
    }
}

/// The result of one tool call, sent back to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolResult {
    pub tool_call_id: String,
    pub tool_name: String,
    pub content: String,
    pub is_error: bool,
}

crate::json_struct!(ToolResult {
    "tool_call_id" => tool_call_id,
    "tool_name" => tool_name,
    "content" => content,
    "is_error" => is_error: default,
});

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    StopSequence,
    ToolUse,
    PauseTurn,
    Refusal,
    ContentFilter,
    /// The stream failed; the message holds what arrived before the failure.
    Error,
    /// The turn was cancelled; the message holds what arrived before.
    Aborted,
    /// The runtime stopped mid-answer (the object was evicted or restarted); the message holds
    /// what was streamed before. Like `Aborted`, never replayed to a model.
    Interrupted,
    /// A stop reason this crate does not know yet, kept verbatim.
    Other(String),
}

impl StopReason {
    /// The reason a stored name stands for (serde's snake_case of each unit variant).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "end_turn" => StopReason::EndTurn,
            "max_tokens" => StopReason::MaxTokens,
            "stop_sequence" => StopReason::StopSequence,
            "tool_use" => StopReason::ToolUse,
            "pause_turn" => StopReason::PauseTurn,
            "refusal" => StopReason::Refusal,
            "content_filter" => StopReason::ContentFilter,
            "error" => StopReason::Error,
            "aborted" => StopReason::Aborted,
            "interrupted" => StopReason::Interrupted,
            _ => return None,
        })
    }
}

/// A known reason is a string; `Other` is `{"other": "…"}`, as serde writes it.
impl<'a> FromJson<'a> for StopReason {
    fn read(r: &mut Reader<'a>) -> json::Result<Self> {
        const NAMES: &[&str] = &[
            "end_turn",
            "max_tokens",
            "stop_sequence",
            "tool_use",
            "pause_turn",
            "refusal",
            "content_filter",
            "error",
            "aborted",
            "interrupted",
            "other",
        ];
        if r.peek_kind()? == b'{' {
            struct Other {
                other: String,
            }
            crate::json_struct!(#[deny_unknown_fields] Other { "other" => other });
            return Other::read(r).map(|o| StopReason::Other(o.other));
        }
        let name = r.string()?;
        StopReason::from_name(&name).ok_or_else(|| r.unknown_name("variant", &name, NAMES))
    }
}

/// Token counts for one LLM call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// The provider never said (an answer cancelled or failed before its usage came): the
    /// counts are estimated from what was sent and what streamed, so the ledger still charges.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub estimated: bool,
}

crate::json_struct!(Usage {
    "input_tokens" => input_tokens,
    "output_tokens" => output_tokens,
    "cache_read_tokens" => cache_read_tokens: default,
    "cache_write_tokens" => cache_write_tokens: default,
    "estimated" => estimated: default,
});

impl Usage {
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.estimated |= other.estimated;
    }
}

/// What the model answered, with where it came from (needed to replay history to another
/// provider).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AssistantMessage {
    pub content: Vec<ContentBlock>,
    pub stop_reason: StopReason,
    pub model: String,
    pub provider: String,
    pub usage: Usage,
    /// A typed answer's end (`agent::output`): `{status: "complete", object}` or `{status:
    /// "error", error: {type, message}, raw}`, on the turn's last answer; the content keeps the
    /// JSON as the model wrote it, which is what the model sees of it later.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
}

crate::json_struct!(AssistantMessage {
    "content" => content,
    "stop_reason" => stop_reason,
    "model" => model,
    "provider" => provider,
    "usage" => usage,
    "output" => output: default,
});

impl AssistantMessage {
    /// The model that wrote the answer (after a fallback, the one that answered).
    pub fn model_ref(&self) -> crate::llm::ModelRef {
        crate::llm::ModelRef {
            provider: self.provider.clone(),
            model: self.model.clone(),
        }
    }

    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCall> {
        self.content.iter().filter_map(|b| match b {
            ContentBlock::ToolUse(call) => Some(call),
            _ => None,
        })
    }

    /// All text blocks joined.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// One message of the conversation as the LLM sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    User { content: Vec<ContentBlock> },
    Assistant(AssistantMessage),
    ToolResult(ToolResult),
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Self {
        Message::User {
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDef {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
}

crate::json_struct!(ToolDef {
    "name" => name,
    "description" => description,
    "input_schema" => input_schema,
});

/// Hears of an attempt a retry or a fallback ([`super::retry`]) gave up on that reported
/// usage (billed all the same), as it happens.
#[async_trait(?Send)]
pub trait Billing {
    /// `attempt` was given up on (no content, its model's usage). `Err` ends the call with
    /// that error instead of another attempt (a budget that no longer covers one). Asked for
    /// the last attempt of a call too, whose answer is then ignored.
    async fn given_up(&self, attempt: &AssistantMessage) -> Result<(), super::LlmError>;
}

impl std::fmt::Debug for dyn Billing + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Billing")
    }
}

impl LlmRequest<'_> {
    /// A typed answer asked of a tool the call does not offer is refused before any request.
    pub fn check_answer(&self) -> Result<(), super::LlmError> {
        match self.answer {
            Some(AnswerFormat::Tool { name } | AnswerFormat::Offered { name })
                if !self.tools.iter().any(|t| t.name == name) =>
            {
                Err(super::LlmError::Config(format!(
                    "the typed answer's tool `{name}` is not among the call's tools"
                )))
            }
            _ => Ok(()),
        }
    }
}

/// Why `provider` cannot take a typed answer's schema ([`AnswerFormat::Schema`]) on a call that
/// offers tools or not (`structured_output`: the model's registry entry has it), if it cannot.
pub fn schema_refused(
    provider: &str,
    offers_tools: bool,
    structured_output: bool,
) -> Option<&'static str> {
    match provider {
        "workers-ai" => Some("Workers AI does not take a JSON schema on a streamed call"),
        "gemini" if offers_tools => {
            Some("Gemini does not answer in JSON of a schema while it is offered tools")
        }
        "anthropic" if !structured_output => Some("this Claude model has no structured output"),
        _ => None,
    }
}

/// The tool whose input is a typed answer, named `name`, its input `schema` (`description`:
/// the answer's own, if it has one).
pub fn answer_tool_def(name: &str, description: Option<&str>, schema: &Value) -> ToolDef {
    ToolDef {
        name: name.to_string(),
        description: description
            .unwrap_or("Give the final answer: call this once, with the whole answer as its input.")
            .to_string(),
        input_schema: schema.clone(),
    }
}

/// What a call's prompt tells a model offered the answer tool `name` beside other tools (it is
/// not forced to call it).
pub fn answer_tool_instruction(name: &str) -> String {
    format!(
        "When you have the final answer, give it by calling the `{name}` tool once, with the \
         whole answer as its input, and say nothing else."
    )
}

/// `system` with `added` after it.
pub fn system_with(system: Option<&str>, added: &str) -> String {
    match system {
        Some(system) => format!("{system}\n\n{added}"),
        None => added.to_string(),
    }
}

/// Why `provider` cannot be made to call a given tool ([`AnswerFormat::Tool`]), if it cannot.
pub fn tool_refused(provider: &str) -> Option<&'static str> {
    (provider == "ollama").then_some("Ollama cannot be made to call a given tool")
}

/// How a call asks for a typed answer (a JSON value of a given shape).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AnswerFormat<'a> {
    /// The provider's own structured output: the answer's text is JSON that matches `schema`
    /// (an object schema). `strict`: the schema is in the strict form the provider checks
    /// (OpenAI's).
    Schema {
        name: &'a str,
        schema: &'a Value,
        strict: bool,
    },
    /// The model must call the tool `name` (one of the call's tools), once: its input is the
    /// answer.
    Tool { name: &'a str },
    /// The tool `name` (one of the call's tools) is the answer's, offered beside the others:
    /// the model may call them first and answers by calling it (not forced).
    Offered { name: &'a str },
}

/// One LLM call. Borrows the history so nothing is copied per call.
#[derive(Debug, Clone, Copy)]
pub struct LlmRequest<'a> {
    pub system: Option<&'a str>,
    pub messages: &'a [Message],
    pub tools: &'a [ToolDef],
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    /// The start of the ids given to tool calls the provider sends without one (Gemini, Ollama,
    /// Workers AI, id-less OpenAI-compatible servers): `<call_ids><n>`. Unique per call, so no
    /// two calls anywhere share an id (an HTTP tool's `Idempotency-Key` is derived from it).
    pub call_ids: &'a str,
    /// Told of every attempt a retry or a fallback gives up on that was billed, before the call
    /// goes on (see [`Billing`]); `None` goes on regardless.
    pub billing: Option<&'a dyn Billing>,
    /// A typed answer's format; `None`: the model answers as it likes.
    pub answer: Option<AnswerFormat<'a>>,
}
