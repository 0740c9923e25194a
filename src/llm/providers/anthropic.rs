//! Anthropic Messages API, streaming (`POST /v1/messages`, `stream: true`).
//! <https://docs.anthropic.com/en/api/messages-streaming>
//!
//! Quirks handled here:
//! - `data:` payloads may be padded with spaces before the closing brace (length obfuscation),
//!   so everything goes through a real JSON parser.
//! - The first `input_json_delta` is always `""`; a tool without arguments sends only that.
//! - `message_delta.usage` is cumulative and repeats the input counts.
//! - `ping` may come anywhere; an `error` event may arrive mid-stream (`overloaded_error`).
//! - Tool results travel in a user message, and roles must alternate, so consecutive results
//!   and a steering message after them are merged into one user message.

use std::borrow::Cow;
use std::rc::Rc;

use serde::Serialize;
use serde_json::Value;

use crate::llm::assembler::Assembler;
use crate::llm::provider::{read_event, Decode, Endpoint, Flow, Framing, HttpProvider, WireApi};
use crate::llm::provider::{ProviderInfo, Reach};
use crate::llm::transport::join_url;
use crate::llm::{
    AnswerFormat, ContentBlock, FileData, FileKind, HttpRequest, HttpTransport, LlmError, LlmEvent,
    LlmRequest, Message, ModelRef, StopReason, Usage,
};

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
const API_VERSION: &str = "2023-06-01";

/// The Anthropic Messages API.
pub struct Anthropic;

impl Anthropic {
    /// `model` served by Anthropic (or a server of its API at `base_url`).
    pub fn provider(
        model: ModelRef,
        base_url: Option<&str>,
        api_key: Option<String>,
        transport: Rc<dyn HttpTransport>,
    ) -> HttpProvider {
        HttpProvider::new(&Anthropic, model, base_url, api_key, transport)
    }
}

/// Its row of the registry (`PROVIDERS`).
pub(crate) const INFO: ProviderInfo = ProviderInfo {
    name: "anthropic",
    key_var: Some("ANTHROPIC_API_KEY"),
    base_url_var: Some("ANTHROPIC_BASE_URL"),
    reach: Reach::Http(&Anthropic),
};

impl WireApi for Anthropic {
    fn default_base_url(&self) -> &'static str {
        DEFAULT_BASE_URL
    }

    /// `GET /v1/models`: reachable, and the key is accepted.
    fn health_request(&self, endpoint: &Endpoint) -> HttpRequest {
        let mut headers = vec![("anthropic-version", API_VERSION.to_string())];
        if let Some(key) = &endpoint.api_key {
            headers.push(("x-api-key", key.clone()));
        }
        HttpRequest {
            url: join_url(&endpoint.base_url, "v1/models"),
            headers,
            body: String::new(),
        }
    }

    /// The HTTP request for one streamed call.
    fn http_request(
        &self,
        endpoint: &Endpoint,
        request: &LlmRequest<'_>,
    ) -> Result<HttpRequest, LlmError> {
        let body = wire::Request {
            model: &endpoint.model.model,
            max_tokens: request.max_tokens,
            system: request.system,
            messages: encode_messages(request.messages),
            tools: request
                .tools
                .iter()
                .map(|t| wire::Tool {
                    name: &t.name,
                    description: &t.description,
                    input_schema: &t.input_schema,
                })
                .collect(),
            temperature: request.temperature,
            stream: true,
            // A typed answer: the one tool to call, alone; or Claude's structured output.
            tool_choice: match request.answer {
                Some(AnswerFormat::Tool { name }) => Some(serde_json::json!(
                    {"type": "tool", "name": name, "disable_parallel_tool_use": true}
                )),
                _ => None,
            },
            output_config: match request.answer {
                Some(AnswerFormat::Schema { schema, .. }) => Some(serde_json::json!(
                    {"format": {"type": "json_schema", "schema": output_schema(schema)}}
                )),
                _ => None,
            },
        };
        let body = serde_json::to_string(&body)
            .map_err(|e| LlmError::Config(format!("could not encode the request: {e}")))?;
        let mut headers = vec![
            ("content-type", "application/json".to_string()),
            ("accept", "text/event-stream".to_string()),
            ("anthropic-version", API_VERSION.to_string()),
        ];
        if let Some(key) = &endpoint.api_key {
            headers.push(("x-api-key", key.clone()));
        }
        Ok(HttpRequest {
            url: join_url(&endpoint.base_url, "v1/messages"),
            headers,
            body,
        })
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn decoder(&self, _: &LlmRequest<'_>) -> Box<dyn Decode> {
        Box::<Decoder>::default()
    }
}

/// A typed answer's schema as Claude's structured outputs take it: every object closed
/// (`additionalProperties: false`), and the bounds it does not enforce (numbers' and lengths')
/// left out; the answer is still checked against the schema as written.
fn output_schema(schema: &Value) -> Value {
    const DROPPED: &[&str] = &[
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "maxItems",
    ];
    let Value::Object(map) = schema else {
        return schema.clone();
    };
    let mut out = serde_json::Map::new();
    for (k, v) in map {
        let unenforced =
            DROPPED.contains(&k.as_str()) || (k == "minItems" && v.as_u64().is_some_and(|n| n > 1));
        if unenforced {
            continue;
        }
        // Only what holds schemas is rewritten: names of properties, `enum` values and the
        // like are kept as written.
        let v = match (k.as_str(), v) {
            ("properties" | "$defs" | "definitions", Value::Object(schemas)) => Value::Object(
                schemas
                    .iter()
                    .map(|(name, s)| (name.clone(), output_schema(s)))
                    .collect(),
            ),
            ("items" | "additionalProperties" | "not", s) => output_schema(s),
            ("anyOf" | "allOf" | "oneOf" | "prefixItems", Value::Array(list)) => {
                Value::Array(list.iter().map(output_schema).collect())
            }
            (_, v) => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    let object = map.get("type").is_some_and(|t| match t {
        Value::Array(ts) => ts.iter().any(|t| t == "object"),
        t => t == "object",
    }) || map.contains_key("properties");
    if object && !map.contains_key("additionalProperties") {
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    Value::Object(out)
}

fn encode_messages(messages: &[Message]) -> Vec<wire::Message<'_>> {
    let mut out: Vec<wire::Message<'_>> = Vec::with_capacity(messages.len());
    for message in messages {
        let (role, blocks): (&str, Vec<wire::Block<'_>>) = match message {
            Message::User { content } => {
                ("user", content.iter().filter_map(encode_block).collect())
            }
            Message::Assistant(a) => (
                "assistant",
                a.content.iter().filter_map(encode_block).collect(),
            ),
            Message::ToolResult(r) => (
                "user",
                vec![wire::Block::ToolResult {
                    tool_use_id: &r.tool_call_id,
                    content: &r.content,
                    is_error: r.is_error,
                }],
            ),
        };
        if blocks.is_empty() {
            continue; // Anthropic rejects empty content (e.g. an answer that failed at once)
        }
        match out.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => out.push(wire::Message {
                role,
                content: blocks,
            }),
        }
    }
    out
}

fn encode_block(block: &ContentBlock) -> Option<wire::Block<'_>> {
    match block {
        ContentBlock::Text { text } if text.is_empty() => None,
        ContentBlock::Text { text } => Some(wire::Block::Text { text }),
        // Anthropic accepts thinking back only with its signature.
        ContentBlock::Thinking {
            thinking,
            signature: Some(signature),
        } => Some(wire::Block::Thinking {
            thinking,
            signature,
        }),
        ContentBlock::Thinking { .. } => None,
        ContentBlock::RedactedThinking { data } => Some(wire::Block::RedactedThinking { data }),
        ContentBlock::ToolUse(call) => Some(wire::Block::ToolUse {
            id: &call.id,
            name: &call.name,
            input: &call.input,
        }),
        ContentBlock::File(file) => match (&file.data, file.kind()) {
            (Some(FileData::Text(text)), _) => Some(wire::Block::Text { text }),
            (Some(FileData::Base64(data)), kind) => {
                let source = wire::Source {
                    kind: "base64",
                    media_type: &file.media_type,
                    data,
                };
                Some(match kind {
                    FileKind::Pdf => wire::Block::Document {
                        source,
                        title: file.name.as_deref(),
                    },
                    _ => wire::Block::Image { source },
                })
            }
            // Its contents were not loaded: the application turns such a file into a note.
            (None, _) => None,
        },
    }
}

/// The stored names are Anthropic's; the reasons only the runtime gives (an error, a cancel, …)
/// are not Anthropic's to give, and stay as it sent them.
pub(crate) fn map_stop_reason(reason: &str) -> StopReason {
    match StopReason::from_name(reason) {
        Some(
            known @ (StopReason::EndTurn
            | StopReason::MaxTokens
            | StopReason::StopSequence
            | StopReason::ToolUse
            | StopReason::PauseTurn
            | StopReason::Refusal),
        ) => known,
        _ => StopReason::Other(reason.to_string()),
    }
}

/// Wire block index → our content index.
#[derive(Default)]
struct Decoder {
    blocks: Vec<Option<usize>>,
}

impl Decoder {
    fn ours(&self, wire_index: usize) -> Option<usize> {
        self.blocks.get(wire_index).copied().flatten()
    }

    /// Records where wire block `wire_index` goes; an index past what any answer has is the
    /// provider misbehaving (it would make us allocate for it), not a block.
    fn map(&mut self, wire_index: usize, ours: usize) -> Result<(), LlmError> {
        if wire_index >= crate::llm::provider::MAX_CONTENT_BLOCKS {
            return Err(decode_error(format!(
                "content block index {wire_index} is out of range"
            )));
        }
        if self.blocks.len() <= wire_index {
            self.blocks.resize(wire_index + 1, None);
        }
        self.blocks[wire_index] = Some(ours);
        Ok(())
    }
}

impl Decode for Decoder {
    fn frame(
        &mut self,
        _event: &str,
        data: &str,
        message: &mut Assembler,
        out: &mut Vec<LlmEvent>,
    ) -> Result<Flow, LlmError> {
        let event: wire::Event<'_> = read_event("anthropic", data)?;
        match &*event.kind {
            "message_start" => {
                let mut usage = Usage::default();
                if let Some(start) = event.message {
                    start.usage.apply(&mut usage);
                    if let Some(id) = start.id.filter(|id| !id.is_empty()) {
                        out.push(LlmEvent::ResponseId(id));
                    }
                }
                message.set_usage(usage, out);
            }
            "content_block_start" => {
                let (index, block) = (
                    required(event.index, "index")?,
                    required(event.content_block, "content_block")?,
                );
                let ours = match &*block.kind {
                    "text" => {
                        let i = message.start_text(out);
                        message.text_delta(i, block.text.as_deref().unwrap_or_default(), out);
                        Some(i)
                    }
                    "thinking" => {
                        let i = message.start_thinking(out);
                        message.thinking_delta(
                            i,
                            block.thinking.as_deref().unwrap_or_default(),
                            out,
                        );
                        Some(i)
                    }
                    "tool_use" => Some(message.start_tool_call(
                        &required(block.id, "id")?,
                        &required(block.name, "name")?,
                        out,
                    )),
                    "redacted_thinking" => {
                        message.add_redacted_thinking(&required(block.data, "data")?);
                        None
                    }
                    _ => None,
                };
                if let Some(ours) = ours {
                    self.map(index, ours)?;
                }
            }
            "content_block_delta" => {
                let (index, delta) = (
                    required(event.index, "index")?,
                    required(event.delta, "delta")?,
                );
                if let Some(i) = self.ours(index) {
                    match &*delta.kind {
                        "text_delta" => message.text_delta(i, &required(delta.text, "text")?, out),
                        "input_json_delta" => message.tool_call_delta(
                            i,
                            &required(delta.partial_json, "partial_json")?,
                            out,
                        ),
                        "thinking_delta" => {
                            message.thinking_delta(i, &required(delta.thinking, "thinking")?, out)
                        }
                        "signature_delta" => {
                            message.thinking_signature(i, &required(delta.signature, "signature")?)
                        }
                        _ => {}
                    }
                }
            }
            "content_block_stop" => {
                if let Some(i) = self.ours(required(event.index, "index")?) {
                    message.end(i, out);
                }
            }
            "message_delta" => {
                if let Some(reason) = event.delta.and_then(|d| d.stop_reason) {
                    message.stop_reason = Some(map_stop_reason(&reason));
                }
                if let Some(delta_usage) = event.usage {
                    let mut total = message.usage;
                    delta_usage.apply(&mut total);
                    message.set_usage(total, out);
                }
            }
            "message_stop" => return Ok(Flow::Done),
            "error" => {
                let error = required(event.error, "error")?;
                return Err(LlmError::from_stream(
                    "anthropic",
                    &error.kind,
                    error.message.into_owned(),
                ));
            }
            _ => {}
        }
        Ok(Flow::More)
    }
}

fn decode_error(message: String) -> LlmError {
    LlmError::Decode {
        provider: "anthropic".to_string(),
        message,
    }
}

/// A field the event's type requires.
fn required<T>(value: Option<T>, field: &str) -> Result<T, LlmError> {
    value.ok_or_else(|| decode_error(format!("the event has no `{field}`")))
}

/// Serde shapes of the wire format; private to this file.
mod wire {
    use super::*;

    #[derive(Serialize)]
    pub struct Request<'a> {
        pub model: &'a str,
        pub max_tokens: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub system: Option<&'a str>,
        pub messages: Vec<Message<'a>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub tools: Vec<Tool<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub temperature: Option<f32>,
        pub stream: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub tool_choice: Option<serde_json::Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub output_config: Option<serde_json::Value>,
    }

    #[derive(Serialize)]
    pub struct Message<'a> {
        pub role: &'a str,
        pub content: Vec<Block<'a>>,
    }

    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Block<'a> {
        Text {
            text: &'a str,
        },
        Thinking {
            thinking: &'a str,
            signature: &'a str,
        },
        RedactedThinking {
            data: &'a str,
        },
        ToolUse {
            id: &'a str,
            name: &'a str,
            input: &'a Value,
        },
        ToolResult {
            tool_use_id: &'a str,
            content: &'a str,
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            is_error: bool,
        },
        Image {
            source: Source<'a>,
        },
        Document {
            source: Source<'a>,
            #[serde(skip_serializing_if = "Option::is_none")]
            title: Option<&'a str>,
        },
    }

    /// An image's or a document's bytes, inline.
    #[derive(Serialize)]
    pub struct Source<'a> {
        #[serde(rename = "type")]
        pub kind: &'static str,
        pub media_type: &'a str,
        pub data: &'a str,
    }

    #[derive(Serialize)]
    pub struct Tool<'a> {
        pub name: &'a str,
        pub description: &'a str,
        pub input_schema: &'a Value,
    }

    /// One stream event, by its `type`: a flat struct with the fields of every type, which the
    /// decoder reads by `kind`.
    pub struct Event<'a> {
        pub kind: Cow<'a, str>,
        pub index: Option<usize>,
        /// `message_start`.
        pub message: Option<MessageStart>,
        /// `content_block_start`.
        pub content_block: Option<Part<'a>>,
        /// `content_block_delta` (a block's delta) and `message_delta` (the stop reason).
        pub delta: Option<Part<'a>>,
        /// `message_delta`.
        pub usage: Option<WireUsage>,
        pub error: Option<ErrorBody<'a>>,
    }

    crate::json_struct!(Event<'a> {
        "type" => kind,
        "index" => index,
        "message" => message,
        "content_block" => content_block,
        "delta" => delta,
        "usage" => usage,
        "error" => error,
    });

    pub struct MessageStart {
        pub id: Option<String>,
        pub usage: WireUsage,
    }

    crate::json_struct!(MessageStart {
        "id" => id: default_with(crate::llm::json::string_or_skip),
        "usage" => usage: default,
    });

    /// A content block's start or a delta: the fields of every `type` there is.
    pub struct Part<'a> {
        pub kind: Cow<'a, str>,
        pub text: Option<Cow<'a, str>>,
        pub thinking: Option<Cow<'a, str>>,
        pub signature: Option<Cow<'a, str>>,
        pub partial_json: Option<Cow<'a, str>>,
        pub id: Option<Cow<'a, str>>,
        pub name: Option<Cow<'a, str>>,
        pub data: Option<Cow<'a, str>>,
        pub stop_reason: Option<String>,
    }

    crate::json_struct!(Part<'a> {
        "type" => kind: default,
        "text" => text,
        "thinking" => thinking,
        "signature" => signature,
        "partial_json" => partial_json,
        "id" => id,
        "name" => name,
        "data" => data,
        "stop_reason" => stop_reason,
    });

    /// Counts as sent; absent fields leave the running total alone (`message_delta` repeats
    /// some and omits others).
    #[derive(Default)]
    pub struct WireUsage {
        pub input_tokens: Option<u64>,
        pub output_tokens: Option<u64>,
        pub cache_read_input_tokens: Option<u64>,
        pub cache_creation_input_tokens: Option<u64>,
    }

    crate::json_struct!(WireUsage {
        "input_tokens" => input_tokens,
        "output_tokens" => output_tokens,
        "cache_read_input_tokens" => cache_read_input_tokens,
        "cache_creation_input_tokens" => cache_creation_input_tokens,
    });

    impl WireUsage {
        pub fn apply(&self, usage: &mut Usage) {
            if let Some(n) = self.input_tokens {
                usage.input_tokens = n;
            }
            if let Some(n) = self.output_tokens {
                usage.output_tokens = n;
            }
            if let Some(n) = self.cache_read_input_tokens {
                usage.cache_read_tokens = n;
            }
            if let Some(n) = self.cache_creation_input_tokens {
                usage.cache_write_tokens = n;
            }
        }
    }

    pub struct ErrorBody<'a> {
        pub kind: Cow<'a, str>,
        pub message: Cow<'a, str>,
    }

    crate::json_struct!(ErrorBody<'a> { "type" => kind, "message" => message });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::providers::testing::{fixture, merged, run_at_every_split, ScriptedTransport};
    use crate::llm::Provider;
    use crate::llm::{ToolCall, ToolDef, ToolResult};
    use serde_json::json;

    fn make(t: Rc<dyn HttpTransport>) -> Box<dyn Provider> {
        Box::new(Anthropic::provider(
            ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap(),
            Some("http://127.0.0.1:1/"),
            Some("sk-test".into()),
            t,
        ))
    }

    #[test]
    fn text_stream_at_every_split() {
        let (events, c) = run_at_every_split(&make, &fixture("anthropic/text-hello.chunks.txt"));
        assert_eq!(c.error, None);
        assert_eq!(
            c.message.text(),
            "Hello! I'm doing well, thank you for asking. How are you doing today? Is there anything I can help you with?"
        );
        assert_eq!(c.message.stop_reason, StopReason::EndTurn);
        assert_eq!(c.message.usage.input_tokens, 12);
        assert_eq!(c.message.usage.output_tokens, 30);
        let merged = merged(&events);
        // The message's id first, for traces.
        assert_eq!(
            merged[0],
            LlmEvent::ResponseId("msg_01QC4g3HwBThD4BaNtBckFDJ".into())
        );
        assert_eq!(
            merged[1],
            LlmEvent::Usage(Usage {
                input_tokens: 12,
                output_tokens: 1,
                ..Default::default()
            })
        );
        assert_eq!(merged[2], LlmEvent::TextStart { index: 0 });
        assert!(matches!(merged[3], LlmEvent::TextDelta { index: 0, .. }));
        assert_eq!(merged[4], LlmEvent::TextEnd { index: 0 });
        assert_eq!(
            merged[5],
            LlmEvent::Usage(Usage {
                input_tokens: 12,
                output_tokens: 30,
                ..Default::default()
            })
        );
        assert_eq!(merged.len(), 6);
    }

    #[test]
    fn tool_arguments_split_across_deltas_are_joined_and_parsed() {
        let (events, c) = run_at_every_split(
            &make,
            &fixture("anthropic/tool-use-input-json-delta.chunks.txt"),
        );
        assert_eq!(c.error, None);
        assert_eq!(c.message.stop_reason, StopReason::ToolUse);
        let call = c.message.tool_calls().next().unwrap();
        assert_eq!(call.id, "toolu_01KFbKqPYSuAKujiL6mTfzYA");
        assert_eq!(call.name, "json");
        assert_eq!(
            call.input,
            json!({"elements": [{"location": "San Francisco", "temperature": 58, "condition": "sunny"}]})
        );
        assert!(events
            .iter()
            .any(|e| matches!(e, LlmEvent::ToolCallEnd { input, .. } if *input == call.input)));
    }

    #[test]
    fn a_tool_without_arguments_gets_an_empty_object() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("anthropic/text-then-tool-use-no-args.chunks.txt"),
        );
        assert_eq!(c.message.text(), "I'll update the issue list for you.");
        let call = c.message.tool_calls().next().unwrap();
        assert_eq!(call.name, "updateIssueList");
        assert_eq!(call.input, json!({}));
        assert_eq!(c.message.content.len(), 2);
    }

    #[test]
    fn thinking_keeps_its_signature_and_non_ascii_text() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("anthropic/thinking-signature-delta.chunks.txt"),
        );
        let ContentBlock::Thinking {
            thinking,
            signature,
        } = &c.message.content[0]
        else {
            panic!("first block is not thinking: {:?}", c.message.content[0]);
        };
        assert!(thinking.starts_with("The previous result was 925."));
        assert!(thinking.ends_with("925 ÷ 5 = 185"));
        assert!(signature
            .as_deref()
            .unwrap()
            .starts_with("EvQBCkYICxgCKkAx"));
        assert_eq!(c.message.text(), "925 ÷ 5 = 185");
    }

    #[test]
    fn every_stop_reason_maps_and_unknown_ones_are_kept() {
        for (wire, ours) in [
            ("end_turn", StopReason::EndTurn),
            ("max_tokens", StopReason::MaxTokens),
            ("stop_sequence", StopReason::StopSequence),
            ("tool_use", StopReason::ToolUse),
            ("pause_turn", StopReason::PauseTurn),
            ("refusal", StopReason::Refusal),
            (
                "model_context_window_exceeded",
                StopReason::Other("model_context_window_exceeded".into()),
            ),
            // A name only the runtime gives is not taken from the provider.
            ("aborted", StopReason::Other("aborted".into())),
        ] {
            assert_eq!(map_stop_reason(wire), ours);
        }
    }

    #[test]
    fn redacted_thinking_is_kept_whole_and_sent_back() {
        let (events, c) =
            run_at_every_split(&make, &fixture("anthropic/redacted-thinking-padded.sse"));
        assert_eq!(c.error, None);
        let redacted: Vec<&str> = c
            .message
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::RedactedThinking { data } => Some(data.as_str()),
                _ => None,
            })
            .collect();
        assert!(!redacted.is_empty() && redacted.iter().all(|d| d.len() > 20));
        assert!(!c.message.text().is_empty());
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, LlmEvent::ThinkingStart { .. })),
            "nothing to show for redacted blocks"
        );
        let provider = Anthropic::provider(
            ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap(),
            None,
            None,
            ScriptedTransport::new(vec![]),
        );
        let messages = vec![
            Message::user_text("q"),
            Message::Assistant(c.message.clone()),
        ];
        let request = LlmRequest {
            system: None,
            messages: &messages,
            tools: &[],
            max_tokens: 10,
            temperature: None,
            call_ids: "call_1_",
            billing: None,
            answer: None,
        };
        let body: serde_json::Value =
            crate::llm::json::from_str(&provider.http_request(&request).unwrap().body).unwrap();
        assert_eq!(
            body["messages"][1]["content"][0],
            json!({"type": "redacted_thinking", "data": redacted[0]})
        );
    }

    #[test]
    fn padded_thinking_stream_decodes() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("anthropic/thinking-signature-delta-padded.sse"),
        );
        assert_eq!(c.error, None);
        assert!(
            matches!(&c.message.content[0], ContentBlock::Thinking { signature: Some(s), .. } if !s.is_empty())
        );
        assert!(c.message.text().len() > 200);
    }

    #[test]
    fn a_mid_stream_error_keeps_the_partial_text() {
        let (events, c) =
            run_at_every_split(&make, &fixture("anthropic/overloaded-error-mid-stream.sse"));
        assert_eq!(c.message.text(), "Partial answér");
        assert_eq!(c.message.stop_reason, StopReason::Error);
        let error = c.error.unwrap();
        assert_eq!(
            error,
            LlmError::Overloaded {
                provider: "anthropic".into(),
                message: "Overloaded".into(),
                retry_after_ms: None
            }
        );
        assert!(error.is_retryable());
        // Open blocks are closed so a consumer never sees a start without an end.
        assert_eq!(events.last(), Some(&LlmEvent::TextEnd { index: 0 }));
    }

    #[test]
    fn a_stream_cut_before_message_stop_is_truncated() {
        let body = fixture("anthropic/text-hello.chunks.txt");
        let cut = String::from_utf8(body).unwrap();
        let cut = &cut[..cut.find("event: message_delta").unwrap()];
        let (_, c) = crate::llm::providers::testing::run(&make, vec![cut.as_bytes().to_vec()]);
        assert_eq!(
            c.error,
            Some(LlmError::Truncated {
                provider: "anthropic".into()
            })
        );
        assert!(c.message.text().starts_with("Hello! I'm doing well"));
    }

    #[test]
    fn http_errors_carry_the_providers_message_and_retry_after() {
        let transport = Rc::new(ScriptedTransport {
            status: 429,
            headers: vec![("retry-after".into(), "7".into())],
            chunks: vec![br#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}"#.to_vec()],
            last_request: Default::default(),
        });
        let provider = make(transport);
        let c = futures::executor::block_on(
            provider.stream(&crate::llm::providers::testing::request(), &mut |_| {}),
        );
        let error = c.error.unwrap();
        assert_eq!(
            error,
            LlmError::RateLimited {
                provider: "anthropic".into(),
                message: "Number of requests has exceeded your rate limit".into(),
                retry_after_ms: Some(7000)
            }
        );
        assert!(error.is_retryable());
    }

    #[test]
    fn request_merges_tool_results_and_a_following_user_message_into_one_turn() {
        let transport = ScriptedTransport::new(vec![]);
        let provider = Anthropic::provider(
            ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap(),
            Some("http://127.0.0.1:1/"),
            Some("sk-test".into()),
            transport,
        );
        let assistant = crate::llm::AssistantMessage {
            content: vec![
                ContentBlock::Text {
                    text: "Checking.".into(),
                },
                ContentBlock::ToolUse(ToolCall {
                    id: "t1".into(),
                    name: "a".into(),
                    input: json!({}),
                    signature: None,
                }),
                ContentBlock::ToolUse(ToolCall {
                    id: "t2".into(),
                    name: "b".into(),
                    input: json!({"x": 1}),
                    signature: None,
                }),
            ],
            stop_reason: StopReason::ToolUse,
            model: "m".into(),
            provider: "anthropic".into(),
            usage: Usage::default(),
            output: None,
        };
        let messages = vec![
            Message::user_text("hi"),
            Message::Assistant(assistant),
            Message::ToolResult(ToolResult {
                tool_call_id: "t1".into(),
                tool_name: "a".into(),
                content: "1".into(),
                is_error: false,
            }),
            Message::ToolResult(ToolResult {
                tool_call_id: "t2".into(),
                tool_name: "b".into(),
                content: "skipped".into(),
                is_error: true,
            }),
            Message::user_text("actually, stop"),
        ];
        let tools = vec![ToolDef {
            name: "a".into(),
            description: "A".into(),
            input_schema: json!({"type": "object"}),
        }];
        let request = LlmRequest {
            system: Some("be brief"),
            messages: &messages,
            tools: &tools,
            max_tokens: 100,
            temperature: None,
            call_ids: "call_1_",
            billing: None,
            answer: None,
        };
        let http = provider.http_request(&request).unwrap();
        assert_eq!(http.url, "http://127.0.0.1:1/v1/messages");
        assert!(http.headers.contains(&("x-api-key", "sk-test".to_string())));
        assert!(http
            .headers
            .contains(&("anthropic-version", "2023-06-01".to_string())));
        let body: serde_json::Value = crate::llm::json::from_str(&http.body).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 100,
                "system": "be brief",
                "stream": true,
                "tools": [{"name": "a", "description": "A", "input_schema": {"type": "object"}}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "t1", "name": "a", "input": {}},
                        {"type": "tool_use", "id": "t2", "name": "b", "input": {"x": 1}}
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "1"},
                        {"type": "tool_result", "tool_use_id": "t2", "content": "skipped", "is_error": true},
                        {"type": "text", "text": "actually, stop"}
                    ]}
                ]
            })
        );
    }
}
