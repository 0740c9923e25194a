//! Ollama's native chat API, streaming (`POST {base}/api/chat`, NDJSON).
//! <https://github.com/ollama/ollama/blob/main/docs/api.md#generate-a-chat-completion>
//!
//! Quirks handled here:
//! - One JSON object per line; the last has `done: true`, `done_reason` and the token counts
//!   (`prompt_eval_count`, `eval_count`).
//! - Tool calls arrive whole (arguments as an object, sometimes missing), usually on the final
//!   line, without ids: ids are generated, unique within the conversation.
//! - `done_reason` stays `"stop"` when the model called tools.
//! - Failures come as a line `{"error": "..."}`, also mid-stream.
//! - Thinking models stream `message.thinking`.

use std::borrow::Cow;
use std::rc::Rc;

use serde::Serialize;
use serde_json::Value;

use crate::llm::assembler::Assembler;
use crate::llm::provider::{read_event, Decode, Endpoint, Flow, Framing, HttpProvider, WireApi};
use crate::llm::provider::{ProviderInfo, Reach};
use crate::llm::transport::join_url;
use crate::llm::{
    AnswerFormat, ContentBlock, HttpRequest, HttpTransport, LlmError, LlmEvent, LlmRequest,
    Message, ModelRef, StopReason, Usage,
};

pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:11434";

/// Ollama's chat API.
pub struct Ollama;

impl Ollama {
    /// `model` served at `base_url` (the provider's own when `None`).
    pub fn provider(
        model: ModelRef,
        base_url: Option<&str>,
        transport: Rc<dyn HttpTransport>,
    ) -> HttpProvider {
        HttpProvider::new(&Ollama, model, base_url, None, transport)
    }
}

/// Its row of the registry (`PROVIDERS`).
pub(crate) const INFO: ProviderInfo = ProviderInfo {
    name: "ollama",
    key_var: None,
    base_url_var: Some("OLLAMA_BASE_URL"),
    reach: Reach::Http(&Ollama),
};

impl WireApi for Ollama {
    fn default_base_url(&self) -> &'static str {
        DEFAULT_BASE_URL
    }

    /// `GET /api/tags`: the server answers.
    fn health_request(&self, endpoint: &Endpoint) -> HttpRequest {
        HttpRequest {
            url: join_url(&endpoint.base_url, "api/tags"),
            headers: vec![],
            body: String::new(),
        }
    }
    /// The HTTP request for one streamed call.
    fn http_request(
        &self,
        endpoint: &Endpoint,
        request: &LlmRequest<'_>,
    ) -> Result<HttpRequest, LlmError> {
        let format =
            match request.answer {
                // An offered answer tool is a tool like any.
                None | Some(AnswerFormat::Offered { .. }) => None,
                Some(AnswerFormat::Schema { schema, .. }) => Some(schema),
                // Ollama's chat API has no way to make a model call a given tool.
                Some(AnswerFormat::Tool { .. }) => return Err(LlmError::Config(
                    "Ollama cannot be made to call a given tool: ask for the typed answer as a \
                     schema"
                        .into(),
                )),
            };
        let body = wire::Request {
            model: &endpoint.model.model,
            messages: encode_messages(request.system, request.messages),
            tools: request
                .tools
                .iter()
                .map(|t| wire::Tool {
                    kind: "function",
                    function: wire::Function {
                        name: &t.name,
                        description: &t.description,
                        parameters: &t.input_schema,
                    },
                })
                .collect(),
            stream: true,
            options: wire::Options {
                num_predict: request.max_tokens,
                temperature: request.temperature,
            },
            format,
        };
        let body = serde_json::to_string(&body)
            .map_err(|e| LlmError::Config(format!("could not encode the request: {e}")))?;
        Ok(HttpRequest {
            url: join_url(&endpoint.base_url, "api/chat"),
            headers: vec![("content-type", "application/json".to_string())],
            body,
        })
    }

    fn framing(&self) -> Framing {
        Framing::Ndjson
    }

    fn decoder(&self, request: &LlmRequest<'_>) -> Box<dyn Decode> {
        Box::new(Decoder {
            id_prefix: request.call_ids.to_string(),
            ..Decoder::default()
        })
    }
}

fn encode_messages<'a>(system: Option<&'a str>, messages: &'a [Message]) -> Vec<wire::Message<'a>> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    if let Some(system) = system {
        out.push(wire::Message::plain("system", Cow::Borrowed(system)));
    }
    for message in messages {
        match message {
            Message::User { content } => out.push(wire::Message {
                images: content
                    .iter()
                    .filter_map(|b| Some(b.inline_file()?.1))
                    .collect(),
                ..wire::Message::plain("user", text_of(content))
            }),
            Message::Assistant(a) => {
                let tool_calls: Vec<_> = a
                    .tool_calls()
                    .map(|c| wire::ToolCallOut {
                        function: wire::FunctionCallOut {
                            name: &c.name,
                            arguments: &c.input,
                        },
                    })
                    .collect();
                let content = text_of(&a.content);
                if content.is_empty() && tool_calls.is_empty() {
                    continue;
                }
                out.push(wire::Message {
                    role: "assistant",
                    content,
                    tool_calls,
                    tool_name: None,
                    images: vec![],
                });
            }
            Message::ToolResult(r) => out.push(wire::Message {
                role: "tool",
                content: Cow::Borrowed(&r.content),
                tool_calls: vec![],
                tool_name: Some(&r.tool_name),
                images: vec![],
            }),
        }
    }
    out
}

fn text_of(content: &[ContentBlock]) -> Cow<'_, str> {
    let texts: Vec<&str> = content
        .iter()
        // A text file is text for every model.
        .filter_map(ContentBlock::model_text)
        .collect();
    match texts.as_slice() {
        [] => Cow::Borrowed(""),
        [one] => Cow::Borrowed(one),
        many => Cow::Owned(many.join("\n\n")),
    }
}

fn map_done_reason(reason: &str, called_tools: bool) -> StopReason {
    match reason {
        "stop" if called_tools => StopReason::ToolUse,
        "stop" => StopReason::EndTurn,
        "length" => StopReason::MaxTokens,
        other => StopReason::Other(other.to_string()),
    }
}

#[derive(Default)]
struct Decoder {
    /// The request's `call_ids`: generated tool ids are `<id_prefix><n>`, unique because the
    /// prefix is unique to the call.
    id_prefix: String,
    text: Option<usize>,
    thinking: Option<usize>,
    calls: usize,
}

impl Decode for Decoder {
    fn frame(
        &mut self,
        _event: &str,
        line: &str,
        message: &mut Assembler,
        out: &mut Vec<LlmEvent>,
    ) -> Result<Flow, LlmError> {
        let chunk: wire::Chunk<'_> = read_event("ollama", line)?;
        if let Some(error) = chunk.error {
            return Err(LlmError::from_stream("ollama", "", error));
        }
        if let Some(m) = chunk.message {
            if let Some(thinking) = m.thinking.filter(|t| !t.is_empty()) {
                message.continue_thinking(&mut self.thinking, &thinking, out);
            }
            if let Some(content) = m.content.filter(|c| !c.is_empty()) {
                if let Some(i) = self.thinking.take() {
                    message.end(i, out);
                }
                message.continue_text(&mut self.text, &content, out);
            }
            for call in m.tool_calls.into_iter().flatten() {
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
                let i = message.start_tool_call(&id, &call.function.name, out);
                let arguments = call
                    .function
                    .arguments
                    .unwrap_or(Value::Object(Default::default()));
                message.tool_call_delta(i, &arguments.to_string(), out);
                message.end(i, out);
            }
        }
        if chunk.done {
            let usage = Usage {
                input_tokens: chunk.prompt_eval_count.unwrap_or(0),
                output_tokens: chunk.eval_count.unwrap_or(0),
                ..Default::default()
            };
            message.set_usage(usage, out);
            let reason = chunk.done_reason.as_deref().unwrap_or("stop");
            message.stop_reason = Some(map_done_reason(reason, self.calls > 0));
            return Ok(Flow::Done);
        }
        Ok(Flow::More)
    }
}

/// Serde shapes of the wire format; private to this file.
mod wire {
    use super::*;

    #[derive(Serialize)]
    pub struct Request<'a> {
        pub model: &'a str,
        pub messages: Vec<Message<'a>>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub tools: Vec<Tool<'a>>,
        pub stream: bool,
        pub options: Options,
        /// A typed answer's JSON schema.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub format: Option<&'a serde_json::Value>,
    }

    #[derive(Serialize)]
    pub struct Options {
        pub num_predict: u32,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub temperature: Option<f32>,
    }

    #[derive(Serialize)]
    pub struct Message<'a> {
        pub role: &'a str,
        pub content: Cow<'a, str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub tool_calls: Vec<ToolCallOut<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub tool_name: Option<&'a str>,
        /// A user message's images, base64.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        pub images: Vec<&'a str>,
    }

    impl<'a> Message<'a> {
        pub fn plain(role: &'a str, content: Cow<'a, str>) -> Self {
            Self {
                role,
                content,
                tool_calls: vec![],
                tool_name: None,
                images: vec![],
            }
        }
    }

    #[derive(Serialize)]
    pub struct ToolCallOut<'a> {
        pub function: FunctionCallOut<'a>,
    }

    #[derive(Serialize)]
    pub struct FunctionCallOut<'a> {
        pub name: &'a str,
        pub arguments: &'a Value,
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
        pub message: Option<ChunkMessage<'a>>,
        pub done: bool,
        pub done_reason: Option<String>,
        pub prompt_eval_count: Option<u64>,
        pub eval_count: Option<u64>,
        pub error: Option<String>,
    }

    crate::json_struct!(Chunk<'a> {
        "message" => message,
        "done" => done: default,
        "done_reason" => done_reason,
        "prompt_eval_count" => prompt_eval_count,
        "eval_count" => eval_count,
        "error" => error,
    });

    pub struct ChunkMessage<'a> {
        pub content: Option<Cow<'a, str>>,
        pub thinking: Option<Cow<'a, str>>,
        pub tool_calls: Option<Vec<ToolCallIn>>,
    }

    crate::json_struct!(ChunkMessage<'a> {
        "content" => content,
        "thinking" => thinking,
        "tool_calls" => tool_calls,
    });

    pub struct ToolCallIn {
        pub id: Option<String>,
        pub function: FunctionCallIn,
    }

    crate::json_struct!(ToolCallIn {
        "id" => id,
        "function" => function,
    });

    pub struct FunctionCallIn {
        pub name: String,
        pub arguments: Option<Value>,
    }

    crate::json_struct!(FunctionCallIn {
        "name" => name,
        "arguments" => arguments,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::providers::testing::{fixture, run, run_at_every_split};
    use crate::llm::Provider;
    use serde_json::json;

    fn make(t: Rc<dyn HttpTransport>) -> Box<dyn Provider> {
        Box::new(Ollama::provider(
            ModelRef::parse("ollama:llama3.2").unwrap(),
            None,
            t,
        ))
    }

    #[test]
    fn text_stream_with_counts_on_the_final_line() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("ollama/chat-text-stream-tail-excerpt.ndjson"),
        );
        assert_eq!(c.error, None);
        assert!(
            c.message.text().starts_with(" these"),
            "{:?}",
            c.message.text()
        );
        assert!(c.message.text().ends_with(" times of day."));
        assert_eq!(c.message.stop_reason, StopReason::EndTurn);
        assert_eq!(
            c.message.usage,
            Usage {
                input_tokens: 10,
                output_tokens: 239,
                ..Default::default()
            }
        );
    }

    #[test]
    fn a_whole_tool_call_without_id_gets_one_and_stop_means_tool_use() {
        let (events, c) = run_at_every_split(
            &make,
            &fixture("ollama/chat-tool-call-single-final-line.edited.ndjson"),
        );
        let calls: Vec<_> = c.message.tool_calls().collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].id, "call_0_0");
        assert_eq!(calls[0].name, "TestPlugin-TestFunction");
        assert!(calls[0].input.is_object());
        assert_eq!(c.message.stop_reason, StopReason::ToolUse);
        assert!(events
            .iter()
            .any(|e| matches!(e, LlmEvent::ToolCallEnd { id, .. } if id == "call_0_0")));
    }

    #[test]
    fn several_calls_one_without_arguments() {
        let (_, c) = run_at_every_split(
            &make,
            &fixture("ollama/chat-multiple-tool-calls-final-line.edited.ndjson"),
        );
        let calls: Vec<_> = c.message.tool_calls().collect();
        assert_eq!(calls.len(), 5);
        assert_eq!(
            calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
            ["call_0_0", "call_0_1", "call_0_2", "call_0_3", "call_0_4"]
        );
        assert_eq!(calls[0].input, json!({"location": "Boston, MA"}));
        assert_eq!(calls[3].name, "MyPlugin_InvalidArguments");
        assert_eq!(calls[3].input, json!({}));
        assert_eq!(c.message.usage.input_tokens, 152);
    }

    #[test]
    fn an_error_line_mid_stream_keeps_the_partial_text() {
        let (_, c) = run_at_every_split(&make, &fixture("ollama/error-line-mid-stream.ndjson"));
        assert_eq!(c.message.text(), "Hal");
        assert_eq!(c.message.stop_reason, StopReason::Error);
        assert!(c.error.unwrap().to_string().contains("unexpected EOF"));
    }

    #[test]
    fn a_stream_without_the_done_line_is_truncated() {
        let (_, c) = run(
            &make,
            vec![br#"{"message":{"role":"assistant","content":"Hi"},"done":false}"#.to_vec()],
        );
        assert_eq!(
            c.error,
            Some(LlmError::Truncated {
                provider: "ollama".into()
            })
        );
    }
}
