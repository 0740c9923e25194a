//! Google Gemini, streaming (`POST {base}/v1beta/models/{model}:streamGenerateContent?alt=sse`).
//! <https://ai.google.dev/api/generate-content#method:-models.streamgeneratecontent>
//!
//! Quirks handled here:
//! - Events are `data: <json>\r\n\r\n`, with no `event:` lines and no end marker: the stream
//!   ends after the chunk carrying `finishReason`.
//! - `usageMetadata` is cumulative on every chunk; `promptTokenCount` can jump on the last one.
//! - Function calls arrive whole (args as an object) and without ids: ids are generated, unique
//!   within the conversation. Results go back as `functionResponse` matched by name.
//! - `thoughtSignature` rides on a function-call part (kept on the call, and required back by
//!   Gemini 3), on the first answer part, or alone on an empty final text part (kept as an empty
//!   thinking block). Parts with `thought: true` are reasoning.
//! - `finishReason` `SAFETY`/`RECITATION`/`BLOCKLIST`/`PROHIBITED_CONTENT`/`SPII` mean the
//!   answer was filtered; `MALFORMED_FUNCTION_CALL` means the model botched a call.
//! - Vertex's streamed arguments (`partialArgs`, `willContinue`) are not assembled yet: such a
//!   call arrives with empty arguments.

use std::borrow::Cow;
use std::rc::Rc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::llm::assembler::Assembler;
use crate::llm::provider::{read_event, Decode, Endpoint, Flow, Framing, HttpProvider, WireApi};
use crate::llm::provider::{ProviderInfo, Reach};
use crate::llm::transport::join_url;
use crate::llm::{
    AnswerFormat, ContentBlock, FileData, HttpRequest, HttpTransport, LlmError, LlmEvent,
    LlmRequest, Message, ModelRef, StopReason, Usage,
};

pub const DEFAULT_BASE_URL: &str = "https://generativelanguage.googleapis.com";

/// The Gemini API (`streamGenerateContent`).
pub struct Gemini;

impl Gemini {
    /// `model` served at `base_url` (the provider's own when `None`).
    pub fn provider(
        model: ModelRef,
        base_url: Option<&str>,
        api_key: Option<String>,
        transport: Rc<dyn HttpTransport>,
    ) -> HttpProvider {
        HttpProvider::new(&Gemini, model, base_url, api_key, transport)
    }
}

/// Its row of the registry (`PROVIDERS`).
pub(crate) const INFO: ProviderInfo = ProviderInfo {
    name: "gemini",
    key_var: Some("GEMINI_API_KEY"),
    base_url_var: Some("GEMINI_BASE_URL"),
    reach: Reach::Http(&Gemini),
};

impl WireApi for Gemini {
    fn default_base_url(&self) -> &'static str {
        DEFAULT_BASE_URL
    }

    /// `GET /v1beta/models/{model}`: reachable, the key is accepted, and the model exists.
    fn health_request(&self, endpoint: &Endpoint) -> HttpRequest {
        let mut headers = vec![];
        if let Some(key) = &endpoint.api_key {
            headers.push(("x-goog-api-key", key.clone()));
        }
        let path = format!("v1beta/models/{}", endpoint.model.model);
        HttpRequest {
            url: join_url(&endpoint.base_url, &path),
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
        let declarations: Vec<_> = request
            .tools
            .iter()
            .map(|t| {
                let answer =
                    matches!(request.answer, Some(AnswerFormat::Tool { name } | AnswerFormat::Offered { name }) if name == t.name);
                wire::FunctionDeclaration {
                    name: &t.name,
                    description: &t.description,
                    parameters: (!answer).then(|| gemini_schema(&t.input_schema)),
                    parameters_json_schema: answer.then_some(&t.input_schema),
                }
            })
            .collect();
        let schema = match request.answer {
            Some(AnswerFormat::Schema { .. }) if !request.tools.is_empty() => {
                return Err(LlmError::Config(
                    "Gemini does not answer in JSON of a schema while it is offered tools: ask \
                     for the typed answer as a tool"
                        .into(),
                ));
            }
            Some(AnswerFormat::Schema { schema, .. }) => Some(schema),
            _ => None,
        };
        let body = wire::Request {
            contents: encode_contents(request.messages),
            system_instruction: request.system.map(|text| wire::Content {
                role: None,
                parts: vec![wire::PartOut::text(text)],
            }),
            tools: if declarations.is_empty() {
                vec![]
            } else {
                vec![wire::Tools {
                    function_declarations: declarations,
                }]
            },
            // A typed answer: JSON of a schema (Gemini refuses it beside function calling:
            // a call with tools asks for the tool form); or the one function to call.
            tool_config: match request.answer {
                Some(AnswerFormat::Tool { name }) => Some(serde_json::json!(
                    {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [name]}}
                )),
                _ => None,
            },
            generation_config: wire::GenerationConfig {
                max_output_tokens: request.max_tokens,
                temperature: request.temperature,
                response_mime_type: schema.map(|_| "application/json"),
                response_json_schema: schema.cloned(),
            },
        };
        let body = serde_json::to_string(&body)
            .map_err(|e| LlmError::Config(format!("could not encode the request: {e}")))?;
        let mut headers = vec![("content-type", "application/json".to_string())];
        if let Some(key) = &endpoint.api_key {
            headers.push(("x-goog-api-key", key.clone()));
        }
        Ok(HttpRequest {
            url: join_url(
                &endpoint.base_url,
                &format!(
                    "v1beta/models/{}:streamGenerateContent?alt=sse",
                    endpoint.model.model
                ),
            ),
            headers,
            body,
        })
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn decoder(&self, request: &LlmRequest<'_>) -> Box<dyn Decode> {
        Box::new(Decoder {
            id_prefix: request.call_ids.to_string(),
            ..Decoder::default()
        })
    }
}

/// Gemini takes an OpenAPI subset of JSON Schema; drop the keywords it rejects.
fn gemini_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "$schema" | "additionalProperties" | "$id"))
                .map(|(k, v)| (k.clone(), gemini_schema(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(gemini_schema).collect()),
        other => other.clone(),
    }
}

fn encode_contents(messages: &[Message]) -> Vec<wire::Content<'_>> {
    let mut out: Vec<wire::Content<'_>> = Vec::with_capacity(messages.len());
    for message in messages {
        let (role, parts): (&str, Vec<wire::PartOut<'_>>) = match message {
            Message::User { content } => {
                ("user", content.iter().filter_map(encode_block).collect())
            }
            Message::Assistant(a) => ("model", a.content.iter().filter_map(encode_block).collect()),
            Message::ToolResult(r) => {
                let key = if r.is_error { "error" } else { "result" };
                let mut response = Map::new();
                // A JSON result goes back as JSON; anything else as text.
                let value = crate::llm::json::from_str(&r.content)
                    .unwrap_or_else(|_| Value::String(r.content.clone()));
                response.insert(key.to_string(), value);
                (
                    "user",
                    vec![wire::PartOut {
                        function_response: Some(wire::FunctionResponse {
                            name: &r.tool_name,
                            response: Value::Object(response),
                        }),
                        ..Default::default()
                    }],
                )
            }
        };
        if parts.is_empty() {
            continue;
        }
        // Gemini wants user and model turns to alternate.
        match out.last_mut() {
            Some(last) if last.role == Some(role) => last.parts.extend(parts),
            _ => out.push(wire::Content {
                role: Some(role),
                parts,
            }),
        }
    }
    out
}

fn encode_block(block: &ContentBlock) -> Option<wire::PartOut<'_>> {
    match block {
        ContentBlock::Text { text } if text.is_empty() => None,
        ContentBlock::Text { text } => Some(wire::PartOut::text(text)),
        ContentBlock::Thinking {
            thinking,
            signature: Some(signature),
        } => Some(wire::PartOut {
            text: Some(thinking),
            thought: (!thinking.is_empty()).then_some(true),
            thought_signature: Some(signature),
            ..Default::default()
        }),
        // Another provider's encrypted reasoning means nothing to Gemini.
        ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => None,
        ContentBlock::ToolUse(call) => Some(wire::PartOut {
            function_call: Some(wire::FunctionCallOut {
                name: &call.name,
                args: &call.input,
            }),
            thought_signature: call.signature.as_deref(),
            ..Default::default()
        }),
        ContentBlock::File(file) => match &file.data {
            Some(FileData::Text(text)) => Some(wire::PartOut::text(text)),
            Some(FileData::Base64(data)) => Some(wire::PartOut {
                inline_data: Some(wire::InlineData {
                    mime_type: &file.media_type,
                    data,
                }),
                ..Default::default()
            }),
            // Its contents were not loaded: the application turns such a file into a note.
            None => None,
        },
    }
}

fn map_finish_reason(reason: &str, called_tools: bool) -> StopReason {
    match reason {
        "STOP" if called_tools => StopReason::ToolUse,
        "STOP" => StopReason::EndTurn,
        "MAX_TOKENS" => StopReason::MaxTokens,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            StopReason::ContentFilter
        }
        other => StopReason::Other(other.to_ascii_lowercase()),
    }
}

#[derive(Default)]
struct Decoder {
    /// See `ollama.rs`: generated ids are `<LlmRequest::call_ids><n>`.
    id_prefix: String,
    text: Option<usize>,
    thinking: Option<usize>,
    calls: usize,
    finished: bool,
    /// The response's id was told (every chunk repeats it).
    id_told: bool,
}

impl Decode for Decoder {
    fn frame(
        &mut self,
        _event: &str,
        data: &str,
        message: &mut Assembler,
        out: &mut Vec<LlmEvent>,
    ) -> Result<Flow, LlmError> {
        let chunk: wire::Chunk<'_> = read_event("gemini", data)?;
        let id = chunk.response_id.as_ref().filter(|id| !id.is_empty());
        if let (false, Some(id)) = (self.id_told, id) {
            self.id_told = true;
            out.push(LlmEvent::ResponseId(id.to_string()));
        }
        if let Some(error) = chunk.error {
            return Err(LlmError::from_stream(
                "gemini",
                &error.status.unwrap_or_default(),
                error.message.unwrap_or_default(),
            ));
        }
        let mut finish = None;
        if let Some(candidate) = chunk.candidates.into_iter().next() {
            for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
                self.part(part, message, out);
            }
            finish = candidate.finish_reason;
        }
        if let Some(u) = chunk.usage_metadata {
            let cached = u.cached_content_token_count.unwrap_or(0);
            let usage = Usage {
                input_tokens: u.prompt_token_count.unwrap_or(0).saturating_sub(cached),
                output_tokens: u.candidates_token_count.unwrap_or(0)
                    + u.thoughts_token_count.unwrap_or(0),
                cache_read_tokens: cached,
                cache_write_tokens: 0,
                estimated: false,
            };
            message.set_usage(usage, out);
        }
        if let Some(reason) = finish {
            message.stop_reason = Some(map_finish_reason(&reason, self.calls > 0));
            message.end_all(out);
            self.finished = true;
        }
        Ok(Flow::More)
    }

    fn at_eof(&self) -> Flow {
        if self.finished {
            Flow::Done
        } else {
            Flow::More
        }
    }
}

impl Decoder {
    fn part(&mut self, part: wire::PartIn<'_>, message: &mut Assembler, out: &mut Vec<LlmEvent>) {
        if let Some(call) = part.function_call {
            // Vertex ends streamed arguments with an empty `functionCall: {}`.
            let Some(name) = call.name else { return };
            for open in [self.text.take(), self.thinking.take()]
                .into_iter()
                .flatten()
            {
                message.end(open, out);
            }
            let id = match call.id.filter(|id| !id.is_empty()) {
                Some(id) => id,
                None => format!("{}{}", self.id_prefix, self.calls),
            };
            self.calls += 1;
            let i = message.start_tool_call(&id, &name, out);
            if let Some(signature) = &part.thought_signature {
                message.tool_call_signature(i, signature);
            }
            let args = call.args.unwrap_or(Value::Object(Default::default()));
            message.tool_call_delta(i, &args.to_string(), out);
            message.end(i, out);
            return;
        }
        let text = part.text.unwrap_or_default();
        if part.thought == Some(true) {
            let i = message.continue_thinking(&mut self.thinking, &text, out);
            if let Some(signature) = &part.thought_signature {
                message.thinking_signature(i, signature);
            }
            return;
        }
        if !text.is_empty() {
            if let Some(i) = self.thinking.take() {
                message.end(i, out);
            }
            message.continue_text(&mut self.text, &text, out);
        }
        if let Some(signature) = &part.thought_signature {
            message.add_signature(signature);
        }
    }
}

/// Serde shapes of the wire format; private to this file.
mod wire {
    use super::*;

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Request<'a> {
        pub contents: Vec<Content<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub system_instruction: Option<Content<'a>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub tools: Vec<Tools<'a>>,
        pub generation_config: GenerationConfig,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub tool_config: Option<serde_json::Value>,
    }

    #[derive(Serialize)]
    pub struct Content<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        pub role: Option<&'a str>,
        pub parts: Vec<PartOut<'a>>,
    }

    #[derive(Serialize, Default)]
    #[serde(rename_all = "camelCase")]
    pub struct PartOut<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        pub text: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub thought: Option<bool>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub thought_signature: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub function_call: Option<FunctionCallOut<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub function_response: Option<FunctionResponse<'a>>,
        /// An image or a PDF, inline.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub inline_data: Option<InlineData<'a>>,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct InlineData<'a> {
        pub mime_type: &'a str,
        pub data: &'a str,
    }

    impl<'a> PartOut<'a> {
        pub fn text(text: &'a str) -> Self {
            Self {
                text: Some(text),
                ..Default::default()
            }
        }
    }

    #[derive(Serialize)]
    pub struct FunctionCallOut<'a> {
        pub name: &'a str,
        pub args: &'a Value,
    }

    #[derive(Serialize)]
    pub struct FunctionResponse<'a> {
        pub name: &'a str,
        pub response: Value,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct Tools<'a> {
        pub function_declarations: Vec<FunctionDeclaration<'a>>,
    }

    #[derive(Serialize)]
    pub struct FunctionDeclaration<'a> {
        pub name: &'a str,
        pub description: &'a str,
        /// The OpenAPI subset Gemini reads a tool's input with...
        #[serde(skip_serializing_if = "Option::is_none")]
        pub parameters: Option<Value>,
        /// ...or JSON Schema as written (a typed answer's: `$defs`, `oneOf` and the like).
        #[serde(
            rename = "parametersJsonSchema",
            skip_serializing_if = "Option::is_none"
        )]
        pub parameters_json_schema: Option<&'a Value>,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub struct GenerationConfig {
        pub max_output_tokens: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub temperature: Option<f32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub response_mime_type: Option<&'static str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub response_json_schema: Option<serde_json::Value>,
    }

    pub struct Chunk<'a> {
        pub response_id: Option<Cow<'a, str>>,
        pub candidates: Vec<Candidate<'a>>,
        pub usage_metadata: Option<UsageMetadata>,
        pub error: Option<ErrorBody>,
    }

    crate::json_struct!(Chunk<'a> {
        "responseId" => response_id: default_with(crate::llm::json::string_or_skip),
        "candidates" => candidates: default,
        "usageMetadata" => usage_metadata,
        "error" => error,
    });

    pub struct Candidate<'a> {
        pub content: Option<ContentIn<'a>>,
        pub finish_reason: Option<String>,
    }

    crate::json_struct!(Candidate<'a> {
        "content" => content,
        "finishReason" => finish_reason,
    });

    pub struct ContentIn<'a> {
        pub parts: Vec<PartIn<'a>>,
    }

    crate::json_struct!(ContentIn<'a> {
        "parts" => parts: default,
    });

    pub struct PartIn<'a> {
        pub text: Option<Cow<'a, str>>,
        pub thought: Option<bool>,
        pub thought_signature: Option<String>,
        pub function_call: Option<FunctionCallIn>,
    }

    crate::json_struct!(PartIn<'a> {
        "text" => text,
        "thought" => thought,
        "thoughtSignature" => thought_signature,
        "functionCall" => function_call,
    });

    pub struct FunctionCallIn {
        pub id: Option<String>,
        pub name: Option<String>,
        pub args: Option<Value>,
    }

    crate::json_struct!(FunctionCallIn {
        "id" => id,
        "name" => name,
        "args" => args,
    });

    pub struct UsageMetadata {
        pub prompt_token_count: Option<u64>,
        pub candidates_token_count: Option<u64>,
        pub thoughts_token_count: Option<u64>,
        pub cached_content_token_count: Option<u64>,
    }

    crate::json_struct!(UsageMetadata {
        "promptTokenCount" => prompt_token_count,
        "candidatesTokenCount" => candidates_token_count,
        "thoughtsTokenCount" => thoughts_token_count,
        "cachedContentTokenCount" => cached_content_token_count,
    });

    pub struct ErrorBody {
        pub message: Option<String>,
        pub status: Option<String>,
    }

    crate::json_struct!(ErrorBody {
        "message" => message,
        "status" => status,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::providers::testing::{
        fixture, response_ids, run_at_every_split, ScriptedTransport,
    };
    use crate::llm::Provider;
    use crate::llm::{AssistantMessage, ToolCall, ToolDef, ToolResult};
    use serde_json::json;

    fn make(t: Rc<dyn HttpTransport>) -> Box<dyn Provider> {
        Box::new(Gemini::provider(
            ModelRef::parse("gemini:gemini-2.5-flash").unwrap(),
            Some("http://127.0.0.1:1"),
            Some("g-key".into()),
            t,
        ))
    }

    #[test]
    fn one_chunk_text_with_crlf_framing() {
        let (_, c) = run_at_every_split(&make, &fixture("gemini/text-single-chunk-crlf.sse"));
        assert_eq!(c.error, None);
        assert!(!c.message.text().is_empty());
        assert_eq!(c.message.stop_reason, StopReason::EndTurn);
        assert!(c.message.usage.input_tokens > 0 && c.message.usage.output_tokens > 0);
    }

    #[test]
    fn the_response_id_is_told_once_though_every_chunk_repeats_it() {
        let (events, _) = run_at_every_split(
            &make,
            &fixture("gemini/function-call-thought-signature.chunks.txt"),
        );
        assert_eq!(response_ids(&events), ["QHiLaa6LBrb8vdIPoNztsAg"]);
    }

    #[test]
    fn thought_parts_are_reasoning_and_the_signature_is_kept() {
        let (events, c) = run_at_every_split(
            &make,
            &fixture("gemini/thought-parts-then-text-signature-crlf.sse"),
        );
        assert_eq!(c.error, None);
        let ContentBlock::Thinking { thinking, .. } = &c.message.content[0] else {
            panic!("{:?}", c.message.content)
        };
        assert!(thinking.starts_with("**Defining the Goal**"));
        assert!(events
            .iter()
            .any(|e| matches!(e, LlmEvent::ThinkingDelta { .. })));
        assert!(c.message.text().len() > 100);
        let signatures = c
            .message
            .content
            .iter()
            .filter(|b| {
                matches!(
                    b,
                    ContentBlock::Thinking {
                        signature: Some(_),
                        ..
                    }
                )
            })
            .count();
        assert_eq!(signatures, 1);
    }

    #[test]
    fn a_function_call_keeps_its_signature_and_gets_an_id() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("gemini/function-call-thought-signature-crlf.sse"),
        );
        assert_eq!(c.error, None);
        let call = c.message.tool_calls().next().unwrap();
        assert_eq!(
            (call.id.as_str(), call.name.as_str()),
            ("call_0_0", "get_country")
        );
        assert_eq!(call.input, json!({}));
        assert!(call.signature.as_deref().unwrap().starts_with("Et8ECtwE"));
        assert_eq!(c.message.stop_reason, StopReason::ToolUse);
    }

    #[test]
    fn gemini3_signature_on_an_empty_final_text_part() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("gemini/text-thought-signature-on-empty-final-part.chunks.txt"),
        );
        assert_eq!(c.error, None);
        assert!(!c.message.text().is_empty());
        assert!(
            matches!(c.message.content.last(), Some(ContentBlock::Thinking { thinking, signature: Some(_) }) if thinking.is_empty())
        );
    }

    #[test]
    fn function_call_with_a_large_signature_and_args() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("gemini/function-call-thought-signature.chunks.txt"),
        );
        let call = c.message.tool_calls().next().unwrap();
        assert_eq!(call.name, "weather");
        assert_eq!(call.input, json!({"location": "San Francisco"}));
        assert!(call.signature.as_deref().unwrap().len() > 5000);
    }

    #[test]
    fn the_prompt_count_jump_on_the_last_chunk_is_taken() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("gemini/text-after-function-response-crlf.sse"),
        );
        assert_eq!(c.message.usage.input_tokens, 165);
    }

    #[test]
    fn safety_is_content_filter_and_errors_are_typed() {
        let body = b"data: {\"candidates\": [{\"content\": {\"parts\": [{\"text\": \"I can\"}],\"role\": \"model\"},\"finishReason\": \"SAFETY\"}]}\r\n\r\n".to_vec();
        let (_, c) = crate::llm::providers::testing::run(&make, vec![body]);
        assert_eq!(c.message.stop_reason, StopReason::ContentFilter);
        let body = b"data: {\"candidates\": [{\"content\": {\"parts\": [],\"role\": \"model\"},\"finishReason\": \"MALFORMED_FUNCTION_CALL\"}]}\r\n\r\n".to_vec();
        let (_, c) = crate::llm::providers::testing::run(&make, vec![body]);
        assert_eq!(
            (c.error, c.message.stop_reason),
            (None, StopReason::Other("malformed_function_call".into()))
        );
        let body = b"data: {\"error\": {\"code\": 429, \"message\": \"Resource exhausted\", \"status\": \"RESOURCE_EXHAUSTED\"}}\r\n\r\n".to_vec();
        let (_, c) = crate::llm::providers::testing::run(&make, vec![body]);
        assert!(
            matches!(c.error, Some(LlmError::RateLimited { .. })),
            "{:?}",
            c.error
        );
    }

    #[test]
    fn request_shape_sends_results_by_name_and_signatures_back() {
        let provider = Gemini::provider(
            ModelRef::parse("gemini:gemini-3-pro").unwrap(),
            Some("http://127.0.0.1:1/"),
            Some("g-key".into()),
            ScriptedTransport::new(vec![]),
        );
        let messages = vec![
            Message::user_text("weather?"),
            Message::Assistant(AssistantMessage {
                content: vec![ContentBlock::ToolUse(ToolCall {
                    id: "call_1_0".into(),
                    name: "weather".into(),
                    input: json!({"city": "Oslo"}),
                    signature: Some("sig".into()),
                })],
                stop_reason: StopReason::ToolUse,
                model: "gemini-3-pro".into(),
                provider: "gemini".into(),
                usage: Usage::default(),
                output: None,
            }),
            Message::ToolResult(ToolResult {
                tool_call_id: "call_1_0".into(),
                tool_name: "weather".into(),
                content: "{\"temp\":3}".into(),
                is_error: false,
            }),
            Message::user_text("and tomorrow?"),
        ];
        let tools = vec![ToolDef {
            name: "weather".into(),
            description: "w".into(),
            input_schema: json!({"type": "object", "additionalProperties": false, "properties": {"city": {"type": "string"}}}),
        }];
        let request = LlmRequest {
            system: Some("sys"),
            messages: &messages,
            tools: &tools,
            max_tokens: 64,
            temperature: None,
            call_ids: "call_1_",
            billing: None,
            answer: None,
        };
        let http = provider.http_request(&request).unwrap();
        assert_eq!(
            http.url,
            "http://127.0.0.1:1/v1beta/models/gemini-3-pro:streamGenerateContent?alt=sse"
        );
        assert!(http
            .headers
            .contains(&("x-goog-api-key", "g-key".to_string())));
        let body: Value = crate::llm::json::from_str(&http.body).unwrap();
        assert_eq!(
            body,
            json!({
                "contents": [
                    {"role": "user", "parts": [{"text": "weather?"}]},
                    {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Oslo"}}, "thoughtSignature": "sig"}]},
                    {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"result": {"temp": 3}}}}, {"text": "and tomorrow?"}]}
                ],
                "systemInstruction": {"parts": [{"text": "sys"}]},
                "tools": [{"functionDeclarations": [{"name": "weather", "description": "w", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]}],
                "generationConfig": {"maxOutputTokens": 64}
            })
        );
    }
}
