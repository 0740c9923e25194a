//! OpenAI Chat Completions, streaming (`POST {base}/chat/completions`, `stream: true`), and every
//! server that speaks it (llama.cpp, vLLM, Groq, DeepSeek, OpenRouter...).
//! <https://platform.openai.com/docs/api-reference/chat-streaming>
//!
//! Quirks handled here:
//! - Tool-call deltas are merged by `index`. Some servers (llama.cpp) repeat `id` and
//!   `function.name` on every chunk: the first one wins, nothing is concatenated but arguments.
//! - Usage comes in a last chunk with `choices: []` (`stream_options.include_usage`), or, for
//!   DeepSeek, on the chunk that carries `finish_reason`.
//! - Reasoning arrives as `delta.reasoning_content` (DeepSeek, llama.cpp, vLLM); refusals as
//!   `delta.refusal`.
//! - The end marker is `data: [DONE]`; a server that closes after `finish_reason` without it
//!   is accepted.
//! - An error may arrive as a chunk `{"error": {...}}` mid-stream.

use std::borrow::Cow;
use std::rc::Rc;

use serde::Serialize;
use serde_json::{json, Value};

use crate::llm::assembler::Assembler;
use crate::llm::provider::{read_event, Decode, Endpoint, Flow, Framing, HttpProvider, WireApi};
use crate::llm::provider::{ProviderInfo, Reach};
use crate::llm::transport::join_url;
use crate::llm::{
    AnswerFormat, ContentBlock, FileKind, HttpRequest, HttpTransport, LlmError, LlmEvent,
    LlmRequest, Message, ModelRef, StopReason, ToolDef, Usage,
};

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// The OpenAI Chat Completions API, spoken by OpenAI and every compatible server.
pub struct OpenAiChat;

impl OpenAiChat {
    /// `model` served at `base_url` (the provider's own when `None`).
    pub fn provider(
        model: ModelRef,
        base_url: Option<&str>,
        api_key: Option<String>,
        transport: Rc<dyn HttpTransport>,
    ) -> HttpProvider {
        HttpProvider::new(&OpenAiChat, model, base_url, api_key, transport)
    }
}

/// Its row of the registry (`PROVIDERS`).
pub(crate) const INFO: ProviderInfo = ProviderInfo {
    name: "openai",
    key_var: Some("OPENAI_API_KEY"),
    base_url_var: Some("OPENAI_BASE_URL"),
    reach: Reach::Http(&OpenAiChat),
};

impl WireApi for OpenAiChat {
    fn default_base_url(&self) -> &'static str {
        DEFAULT_BASE_URL
    }

    /// `GET {base}/models`: reachable, and the key is accepted.
    fn health_request(&self, endpoint: &Endpoint) -> HttpRequest {
        let mut headers = vec![];
        if let Some(key) = &endpoint.api_key {
            headers.push(("authorization", format!("Bearer {key}")));
        }
        HttpRequest {
            url: join_url(&endpoint.base_url, "models"),
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
        let (response_format, tool_choice) = answer_fields(request.answer);
        let body = wire::Request {
            model: &endpoint.model.model,
            messages: encode_messages(request.system, request.messages),
            tools: encode_tools(request.tools),
            max_tokens: request.max_tokens,
            temperature: request.temperature,
            stream: true,
            stream_options: wire::StreamOptions {
                include_usage: true,
            },
            response_format,
            tool_choice,
        };
        let body = serde_json::to_string(&body)
            .map_err(|e| LlmError::Config(format!("could not encode the request: {e}")))?;
        let mut headers = vec![
            ("content-type", "application/json".to_string()),
            ("accept", "text/event-stream".to_string()),
        ];
        if let Some(key) = &endpoint.api_key {
            headers.push(("authorization", format!("Bearer {key}")));
        }
        Ok(HttpRequest {
            url: join_url(&endpoint.base_url, "chat/completions"),
            headers,
            body,
        })
    }

    fn framing(&self) -> Framing {
        Framing::Sse
    }

    fn decoder(&self, request: &LlmRequest<'_>) -> Box<dyn Decode> {
        Box::new(Decoder::with_ids(request.call_ids))
    }
}

/// A typed answer's `response_format` (a JSON schema), or its `tool_choice` (the one tool to
/// call; named, it is called once, so `parallel_tool_calls`, which o-series models refuse, is
/// not sent).
fn answer_fields(answer: Option<AnswerFormat<'_>>) -> (Option<Value>, Option<Value>) {
    match answer {
        // An offered answer tool is a tool like any.
        None | Some(AnswerFormat::Offered { .. }) => (None, None),
        Some(AnswerFormat::Schema {
            name,
            schema,
            strict,
        }) => {
            let format = json!({
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema, "strict": strict},
            });
            (Some(format), None)
        }
        Some(AnswerFormat::Tool { name }) => {
            let choice = json!({"type": "function", "function": {"name": name}});
            (None, Some(choice))
        }
    }
}

pub(crate) fn encode_tools(tools: &[ToolDef]) -> Vec<wire::Tool<'_>> {
    tools
        .iter()
        .map(|t| wire::Tool {
            kind: "function",
            function: wire::Function {
                name: &t.name,
                description: &t.description,
                parameters: &t.input_schema,
            },
        })
        .collect()
}

pub(crate) fn encode_messages<'a>(
    system: Option<&'a str>,
    messages: &'a [Message],
) -> Vec<wire::Message<'a>> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    if let Some(system) = system {
        out.push(wire::Message::System { content: system });
    }
    for message in messages {
        match message {
            Message::User { content } => out.push(wire::Message::User {
                content: user_content(content),
            }),
            Message::Assistant(a) => {
                let tool_calls: Vec<_> = a
                    .tool_calls()
                    .map(|c| wire::ToolCallOut {
                        id: &c.id,
                        kind: "function",
                        function: wire::FunctionCallOut {
                            name: &c.name,
                            // The wire wants the arguments as JSON text.
                            arguments: match &c.input {
                                Value::String(raw) => raw.clone(),
                                other => other.to_string(),
                            },
                        },
                    })
                    .collect();
                let text = joined_text(&a.content);
                if text.is_empty() && tool_calls.is_empty() {
                    continue; // an answer that failed before saying anything
                }
                out.push(wire::Message::Assistant {
                    content: (!text.is_empty()).then_some(text),
                    tool_calls,
                });
            }
            Message::ToolResult(r) => out.push(wire::Message::Tool {
                tool_call_id: &r.tool_call_id,
                content: &r.content,
            }),
        }
    }
    out
}

/// A user message's content: its text, or a list of parts when it carries an image or a PDF.
fn user_content(content: &[ContentBlock]) -> wire::UserContent<'_> {
    if !content.iter().any(|b| b.inline_file().is_some()) {
        return wire::UserContent::Text(joined_text(content));
    }
    let parts = content
        .iter()
        .filter_map(|block| {
            if let Some(text) = block.model_text() {
                return (!text.is_empty()).then_some(wire::Part::Text { text });
            }
            let (file, data) = block.inline_file()?;
            let url = wire::DataUrl {
                media_type: &file.media_type,
                data,
            };
            Some(match file.kind() {
                FileKind::Pdf => wire::Part::File {
                    file: wire::FileOut {
                        filename: file.name.as_deref(),
                        file_data: url,
                    },
                },
                _ => wire::Part::ImageUrl {
                    image_url: wire::ImageUrl { url },
                },
            })
        })
        .collect();
    wire::UserContent::Parts(parts)
}

fn joined_text(content: &[ContentBlock]) -> Cow<'_, str> {
    // A text file is text for every model.
    let mut texts = content.iter().filter_map(ContentBlock::model_text);
    match (texts.next(), texts.next()) {
        (None, _) => Cow::Borrowed(""),
        (Some(only), None) => Cow::Borrowed(only),
        (Some(first), Some(second)) => {
            let mut all = format!("{first}\n\n{second}");
            for t in texts {
                all.push_str("\n\n");
                all.push_str(t);
            }
            Cow::Owned(all)
        }
    }
}

pub(crate) fn map_finish_reason(reason: &str) -> StopReason {
    match reason {
        "stop" => StopReason::EndTurn,
        "length" => StopReason::MaxTokens,
        "tool_calls" | "function_call" => StopReason::ToolUse,
        "content_filter" => StopReason::ContentFilter,
        other => StopReason::Other(other.to_string()),
    }
}

#[derive(Default)]
pub(crate) struct Decoder {
    /// The request's `call_ids`, for calls a server sends without an id.
    id_prefix: String,
    text: Option<usize>,
    thinking: Option<usize>,
    /// (wire tool-call index, our content index)
    tools: Vec<(u32, usize)>,
    finished: bool,
    /// The completion's id was told (every chunk repeats it).
    id_told: bool,
}

impl Decoder {
    /// A decoder naming id-less calls `<id_prefix><n>` (see `LlmRequest::call_ids`).
    pub(crate) fn with_ids(id_prefix: &str) -> Self {
        Self {
            id_prefix: id_prefix.to_string(),
            ..Self::default()
        }
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
        if data.trim() == "[DONE]" {
            return Ok(Flow::Done);
        }
        let chunk: wire::Chunk<'_> = read_event("openai", data)?;
        // Azure's and TGI's first chunk has an empty id.
        if let (false, Some(id)) = (self.id_told, chunk.id.as_ref().filter(|id| !id.is_empty())) {
            self.id_told = true;
            out.push(LlmEvent::ResponseId(id.to_string()));
        }
        if let Some(error) = chunk.error {
            let kind = error
                .kind
                .or(error.code.and_then(|c| c.as_str().map(str::to_string)))
                .unwrap_or_default();
            return Err(LlmError::from_stream(
                "openai",
                &kind,
                error.message.unwrap_or_default(),
            ));
        }
        // Only the first choice is used (we never ask for n > 1).
        if let Some(choice) = chunk.choices.into_iter().find(|c| c.index == 0) {
            let delta = choice.delta;
            if let Some(reasoning) = delta.reasoning_content.filter(|r| !r.is_empty()) {
                message.continue_thinking(&mut self.thinking, &reasoning, out);
            }
            for text in [delta.content, delta.refusal].into_iter().flatten() {
                if text.is_empty() {
                    continue;
                }
                if let Some(i) = self.thinking.take() {
                    message.end(i, out);
                }
                message.continue_text(&mut self.text, &text, out);
            }
            for call in delta.tool_calls.into_iter().flatten() {
                let wire_index = call.index.unwrap_or(0);
                let ours = match self.tools.iter().find(|(w, _)| *w == wire_index) {
                    Some((_, ours)) => *ours,
                    None => {
                        for open in [self.text.take(), self.thinking.take()]
                            .into_iter()
                            .flatten()
                        {
                            message.end(open, out);
                        }
                        let id = call
                            .id
                            .as_deref()
                            .filter(|id| !id.is_empty())
                            .map(str::to_string)
                            .unwrap_or_else(|| format!("{}{}", self.id_prefix, self.tools.len()));
                        let name = call
                            .function
                            .as_ref()
                            .and_then(|f| f.name.as_deref())
                            .unwrap_or_default();
                        let ours = message.start_tool_call(&id, name, out);
                        self.tools.push((wire_index, ours));
                        ours
                    }
                };
                if let Some(arguments) = call.function.and_then(|f| f.arguments) {
                    message.tool_call_delta(ours, &arguments, out);
                }
            }
            if let Some(reason) = choice.finish_reason {
                message.stop_reason = Some(map_finish_reason(&reason));
                message.end_all(out);
                self.finished = true;
            }
        }
        if let Some(usage) = chunk.usage {
            message.set_usage(usage.into(), out);
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

/// Serde shapes of the wire format; shared only with `workers_ai.rs`, which speaks it too.
pub(crate) mod wire {
    use super::*;

    #[derive(Serialize)]
    pub struct Request<'a> {
        pub model: &'a str,
        pub messages: Vec<Message<'a>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub tools: Vec<Tool<'a>>,
        pub max_tokens: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub temperature: Option<f32>,
        pub stream: bool,
        pub stream_options: StreamOptions,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub response_format: Option<serde_json::Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub tool_choice: Option<serde_json::Value>,
    }

    #[derive(Serialize)]
    pub struct StreamOptions {
        pub include_usage: bool,
    }

    /// A user message's content: text, or parts when it carries an image or a PDF.
    #[derive(Serialize)]
    #[serde(untagged)]
    pub enum UserContent<'a> {
        Text(Cow<'a, str>),
        Parts(Vec<Part<'a>>),
    }

    #[derive(Serialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Part<'a> {
        Text { text: &'a str },
        ImageUrl { image_url: ImageUrl<'a> },
        File { file: FileOut<'a> },
    }

    #[derive(Serialize)]
    pub struct ImageUrl<'a> {
        pub url: DataUrl<'a>,
    }

    #[derive(Serialize)]
    pub struct FileOut<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        pub filename: Option<&'a str>,
        pub file_data: DataUrl<'a>,
    }

    /// `data:{media_type};base64,{data}`, written straight into the request (the file's base64
    /// is not copied to make it).
    pub struct DataUrl<'a> {
        pub media_type: &'a str,
        pub data: &'a str,
    }

    impl Serialize for DataUrl<'_> {
        fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serializer.collect_str(&format_args!(
                "data:{};base64,{}",
                self.media_type, self.data
            ))
        }
    }

    #[derive(Serialize)]
    #[serde(tag = "role", rename_all = "lowercase")]
    pub enum Message<'a> {
        System {
            content: &'a str,
        },
        User {
            content: UserContent<'a>,
        },
        Assistant {
            content: Option<Cow<'a, str>>,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            tool_calls: Vec<ToolCallOut<'a>>,
        },
        Tool {
            tool_call_id: &'a str,
            content: &'a str,
        },
    }

    #[derive(Serialize)]
    pub struct ToolCallOut<'a> {
        pub id: &'a str,
        #[serde(rename = "type")]
        pub kind: &'a str,
        pub function: FunctionCallOut<'a>,
    }

    #[derive(Serialize)]
    pub struct FunctionCallOut<'a> {
        pub name: &'a str,
        pub arguments: String,
    }

    #[derive(Serialize)]
    pub struct Tool<'a> {
        #[serde(rename = "type")]
        pub kind: &'a str,
        pub function: Function<'a>,
    }

    #[derive(Serialize)]
    pub struct Function<'a> {
        pub name: &'a str,
        pub description: &'a str,
        pub parameters: &'a Value,
    }

    pub struct Chunk<'a> {
        pub id: Option<Cow<'a, str>>,
        pub choices: Vec<Choice<'a>>,
        pub usage: Option<WireUsage>,
        pub error: Option<ErrorBody>,
    }

    crate::json_struct!(Chunk<'a> {
        "id" => id: default_with(crate::llm::json::string_or_skip),
        "choices" => choices: default,
        "usage" => usage,
        "error" => error,
    });

    pub struct Choice<'a> {
        pub index: u32,
        pub delta: Delta<'a>,
        pub finish_reason: Option<String>,
    }

    crate::json_struct!(Choice<'a> {
        "index" => index: default,
        "delta" => delta: default,
        "finish_reason" => finish_reason,
    });

    #[derive(Default)]
    pub struct Delta<'a> {
        pub content: Option<Cow<'a, str>>,
        pub reasoning_content: Option<Cow<'a, str>>,
        pub refusal: Option<Cow<'a, str>>,
        pub tool_calls: Option<Vec<ToolCallDelta<'a>>>,
    }

    crate::json_struct!(Delta<'a> {
        "content" => content,
        "reasoning_content" => reasoning_content,
        "refusal" => refusal,
        "tool_calls" => tool_calls,
    });

    pub struct ToolCallDelta<'a> {
        pub index: Option<u32>,
        pub id: Option<String>,
        pub function: Option<FunctionDelta<'a>>,
    }

    crate::json_struct!(ToolCallDelta<'a> {
        "index" => index,
        "id" => id,
        "function" => function,
    });

    pub struct FunctionDelta<'a> {
        pub name: Option<String>,
        pub arguments: Option<Cow<'a, str>>,
    }

    crate::json_struct!(FunctionDelta<'a> {
        "name" => name,
        "arguments" => arguments,
    });

    pub struct WireUsage {
        pub prompt_tokens: u64,
        pub completion_tokens: u64,
        pub prompt_tokens_details: Option<PromptDetails>,
    }

    crate::json_struct!(WireUsage {
        "prompt_tokens" => prompt_tokens: default,
        "completion_tokens" => completion_tokens: default,
        "prompt_tokens_details" => prompt_tokens_details,
    });

    pub struct PromptDetails {
        pub cached_tokens: Option<u64>,
    }

    crate::json_struct!(PromptDetails {
        "cached_tokens" => cached_tokens,
    });

    impl From<WireUsage> for Usage {
        fn from(u: WireUsage) -> Self {
            let cached = u
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .unwrap_or(0);
            Usage {
                // OpenAI counts cached tokens inside prompt_tokens; we keep them apart.
                input_tokens: u.prompt_tokens.saturating_sub(cached),
                output_tokens: u.completion_tokens,
                cache_read_tokens: cached,
                cache_write_tokens: 0,
                estimated: false,
            }
        }
    }

    pub struct ErrorBody {
        pub message: Option<String>,
        pub kind: Option<String>,
        pub code: Option<Value>,
    }

    crate::json_struct!(ErrorBody {
        "message" => message,
        "type" => kind,
        "code" => code,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::providers::testing::{fixture, response_ids, run, run_at_every_split};
    use crate::llm::Provider;
    use crate::llm::{AssistantMessage, ToolCall, ToolResult};
    use serde_json::json;

    fn make(t: Rc<dyn HttpTransport>) -> Box<dyn Provider> {
        Box::new(OpenAiChat::provider(
            ModelRef::parse("openai:gpt-4o").unwrap(),
            Some("http://127.0.0.1:1/v1"),
            Some("sk-test".into()),
            t,
        ))
    }

    #[test]
    fn text_stream_with_usage_chunk_and_done() {
        let (events, c) =
            run_at_every_split(&make, &fixture("openai-chat/text-include-usage-done.sse"));
        // Every chunk repeats the completion's id: told once, first.
        assert_eq!(
            response_ids(&events),
            ["chatcmpl-ABfw031mOJeYCSHe4yI2ZjOA6kMJL"]
        );
        assert_eq!(c.error, None);
        assert!(!c.message.text().is_empty());
        assert_eq!(c.message.stop_reason, StopReason::EndTurn);
        assert!(c.message.usage.input_tokens > 0 && c.message.usage.output_tokens > 0);
    }

    #[test]
    fn single_tool_call_arguments_are_merged_by_index() {
        let (events, c) = run_at_every_split(
            &make,
            &fixture("openai-chat/single-tool-call-include-usage.sse"),
        );
        assert_eq!(c.error, None);
        assert_eq!(c.message.stop_reason, StopReason::ToolUse);
        let calls: Vec<_> = c.message.tool_calls().collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id, "call_c91SqDXlYFuETYv8mUHzz6pp");
        assert_eq!(
            calls[0].input,
            json!({"city": "Edinburgh", "country": "UK", "units": "c"})
        );
        assert_eq!(
            c.message.usage,
            Usage {
                input_tokens: 76,
                output_tokens: 24,
                ..Default::default()
            }
        );
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, LlmEvent::ToolCallDelta { .. }))
                .count(),
            14,
            "one delta event per argument fragment"
        );
    }

    #[test]
    fn parallel_tool_calls_stay_apart() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("openai-chat/parallel-tool-calls-include-usage.sse"),
        );
        let calls: Vec<_> = c.message.tool_calls().collect();
        assert_eq!(calls.len(), 2);
        assert_ne!(calls[0].id, calls[1].id);
        assert!(calls.iter().all(|c| c.input.is_object()), "{calls:?}");
        assert_eq!(calls[0].name, "GetWeatherArgs");
        assert_eq!(
            calls[0].input,
            json!({"city": "Edinburgh", "country": "GB", "units": "c"})
        );
        assert_eq!(calls[1].name, "get_stock_price");
        assert_eq!(
            calls[1].input,
            json!({"ticker": "AAPL", "exchange": "NASDAQ"})
        );
    }

    #[test]
    fn refusal_is_text() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("openai-chat/refusal-delta-include-usage.sse"),
        );
        assert!(c.message.text().contains("sorry"), "{}", c.message.text());
    }

    #[test]
    fn deepseek_reasoning_then_tool_call_with_usage_on_the_finish_chunk() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("openai-chat/deepseek-reasoning-content-then-tool-call.chunks.txt"),
        );
        assert_eq!(c.error, None);
        assert!(
            matches!(&c.message.content[0], ContentBlock::Thinking { thinking, .. } if thinking.starts_with("The user asks"))
        );
        let call = c.message.tool_calls().next().unwrap();
        assert!(call.id.starts_with("call_00_"));
        assert!(call.input.is_object());
        assert_eq!(c.message.stop_reason, StopReason::ToolUse);
        assert!(c.message.usage.output_tokens > 0);
    }

    #[test]
    fn a_mid_stream_error_keeps_the_partial_text() {
        let (_, c) = run_at_every_split(&make, &fixture("openai-chat/server-error-mid-stream.sse"));
        assert_eq!(c.message.text(), "Hello");
        assert_eq!(c.message.stop_reason, StopReason::Error);
        let error = c.error.unwrap();
        assert!(
            matches!(&error, LlmError::Server { status: None, message, .. } if message.starts_with("The server had an error"))
        );
        assert!(error.is_retryable());
    }

    #[test]
    fn repeated_ids_and_names_are_not_concatenated() {
        // llama.cpp repeats id and name on every tool-call chunk and may close without [DONE].
        let chunk = |args: &str, finish: &str| {
            format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":null,\"tool_calls\":[{{\"index\":0,\"id\":\"abc\",\"type\":\"function\",\"function\":{{\"name\":\"current_time\",\"arguments\":\"{args}\"}}}}]}},\"finish_reason\":{finish}}}]}}\n\n")
        };
        let body = format!(
            "{}{}{}",
            chunk("{\\\"tz\\\":", "null"),
            chunk("\\\"UTC\\\"}", "null"),
            chunk("", "\"tool_calls\"")
        );
        let (_, c) = run(&make, vec![body.into_bytes()]);
        assert_eq!(c.error, None);
        let calls: Vec<_> = c.message.tool_calls().collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str()),
            ("abc", "current_time")
        );
        assert_eq!(calls[0].input, json!({"tz": "UTC"}));
    }

    #[test]
    fn an_odd_or_empty_id_is_no_id_and_never_fails_the_answer() {
        // Azure's first chunk has an empty id; a server may send a number. The id is for traces.
        let body = "data: {\"id\":\"\",\"choices\":[]}\n\n\
                    data: {\"id\":7,\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n\
                    data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                    data: [DONE]\n\n";
        let (events, c) = run(&make, vec![body.as_bytes().to_vec()]);
        assert_eq!(c.error, None);
        assert_eq!(c.message.text(), "Hi");
        assert_eq!(response_ids(&events), ["chatcmpl-1"]);
    }

    #[test]
    fn fenced_arguments_with_a_trailing_comma_are_repaired() {
        let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"```json\\n{\\\"a\\\": 1,}\\n```\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
        let (_, c) = run(&make, vec![body.as_bytes().to_vec()]);
        assert_eq!(
            c.message.tool_calls().next().unwrap().input,
            json!({"a": 1})
        );
    }

    #[test]
    fn request_shape() {
        let provider = OpenAiChat::provider(
            ModelRef::parse("openai:gpt-4o").unwrap(),
            Some("http://127.0.0.1:1/v1/"),
            Some("sk-test".into()),
            crate::llm::providers::testing::ScriptedTransport::new(vec![]),
        );
        let messages = vec![
            Message::user_text("what time is it?"),
            Message::Assistant(AssistantMessage {
                content: vec![ContentBlock::ToolUse(ToolCall {
                    id: "c1".into(),
                    name: "current_time".into(),
                    input: json!({}),
                    signature: None,
                })],
                stop_reason: StopReason::ToolUse,
                model: "gpt-4o".into(),
                provider: "openai".into(),
                usage: Usage::default(),
                output: None,
            }),
            Message::ToolResult(ToolResult {
                tool_call_id: "c1".into(),
                tool_name: "current_time".into(),
                content: "noon".into(),
                is_error: false,
            }),
        ];
        let request = LlmRequest {
            system: Some("sys"),
            messages: &messages,
            tools: &[],
            max_tokens: 50,
            temperature: Some(0.5),
            call_ids: "call_1_",
            billing: None,
            answer: None,
        };
        let http = provider.http_request(&request).unwrap();
        assert_eq!(http.url, "http://127.0.0.1:1/v1/chat/completions");
        assert!(http
            .headers
            .contains(&("authorization", "Bearer sk-test".to_string())));
        let body: serde_json::Value = crate::llm::json::from_str(&http.body).unwrap();
        assert_eq!(
            body,
            json!({
                "model": "gpt-4o",
                "max_tokens": 50,
                "temperature": 0.5,
                "stream": true,
                "stream_options": {"include_usage": true},
                "messages": [
                    {"role": "system", "content": "sys"},
                    {"role": "user", "content": "what time is it?"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "current_time", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "noon"}
                ]
            })
        );
    }
}
