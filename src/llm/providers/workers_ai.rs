//! Cloudflare Workers AI through the Worker's `AI` binding (no key: the binding is the
//! credential, which makes it the keyless default when deployed).
//! <https://developers.cloudflare.com/workers-ai/configuration/bindings/>
//!
//! The binding is behind [`AiBinding`], so the mapping is tested natively and only the edge
//! touches the platform. Workers AI takes OpenAI-style messages and tools. A streamed answer is
//! SSE in one of two shapes, depending on the model: the native `{"response": "...",
//! "tool_calls": [...], "usage": {...}}` chunks, or OpenAI-compatible `choices` chunks; both end
//! with `data: [DONE]`.

use std::rc::Rc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use super::openai;
use crate::llm::assembler::Assembler;
use crate::llm::provider::{decode_body, failed, read_event, Decode, Flow, Framing};
use crate::llm::provider::{ProviderInfo, Reach};
use crate::llm::{
    AnswerFormat, ByteStream, Completion, LlmError, LlmEvent, LlmRequest, ModelRef, Provider, Usage,
};

/// The `AI` binding: run a model on a JSON input, streaming.
#[async_trait(?Send)]
pub trait AiBinding {
    /// Runs `model` with `input` (which asks for `stream: true`); the answer's SSE bytes.
    async fn run_stream(&self, model: &str, input: &str) -> Result<ByteStream, String>;
}

/// Its row of the registry (`PROVIDERS`): the `AI` binding, no key or URL.
pub(crate) const INFO: ProviderInfo = ProviderInfo {
    name: "workers-ai",
    key_var: None,
    base_url_var: None,
    reach: Reach::Binding,
};

pub struct WorkersAi {
    model: ModelRef,
    binding: Rc<dyn AiBinding>,
}

impl WorkersAi {
    pub fn new(model: ModelRef, binding: Rc<dyn AiBinding>) -> Self {
        Self { model, binding }
    }

    /// The binding's input for one streamed call.
    pub fn input(&self, request: &LlmRequest<'_>) -> Result<String, LlmError> {
        request.check_answer()?;
        let tools = match request.answer {
            None | Some(AnswerFormat::Offered { .. }) => openai::encode_tools(request.tools),
            // Workers AI refuses `response_format` on a streamed call (AiError 5023).
            Some(AnswerFormat::Schema { .. }) => {
                return Err(LlmError::Config(
                    "Workers AI does not take a JSON schema on a streamed call: ask for the \
                     typed answer as a tool"
                        .into(),
                ))
            }
            // It has no `tool_choice`: the tool is offered alone.
            Some(AnswerFormat::Tool { name }) => {
                let only: Vec<_> = openai::encode_tools(request.tools)
                    .into_iter()
                    .filter(|t| t.function.name == name)
                    .collect();
                only
            }
        };
        let input = Input {
            messages: openai::encode_messages(request.system, request.messages),
            tools,
            max_tokens: request.max_tokens,
            temperature: request.temperature,
            stream: true,
        };
        serde_json::to_string(&input)
            .map_err(|e| LlmError::Config(format!("could not encode the request: {e}")))
    }
}

#[derive(Serialize)]
struct Input<'a> {
    messages: Vec<openai::wire::Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<openai::wire::Tool<'a>>,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    stream: bool,
}

#[async_trait(?Send)]
impl Provider for WorkersAi {
    fn model(&self) -> &ModelRef {
        &self.model
    }

    /// The binding is part of the Worker: there is nothing to reach without running a model,
    /// which would cost neurons, so this only says the binding is configured.
    async fn health_check(&self) -> Result<(), LlmError> {
        Ok(())
    }

    async fn stream(
        &self,
        request: &LlmRequest<'_>,
        on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
    ) -> Completion {
        let input = match self.input(request) {
            Ok(input) => input,
            Err(e) => return failed(&self.model, e),
        };
        let started = self.binding.run_stream(&self.model.model, &input).await;
        // The binding has its own copy: ours (the history, files inlined) is not held while
        // the answer streams.
        drop(input);
        match started {
            Ok(body) => {
                let mut decoder = Decoder {
                    id_prefix: request.call_ids.to_string(),
                    ..Decoder::default()
                };
                decode_body(body, &self.model, Framing::Sse, &mut decoder, on_event).await
            }
            // The binding throws for bad input, unknown models and capacity alike; its words
            // are all we have.
            Err(message) => failed(
                &self.model,
                LlmError::from_stream("workers-ai", "", message),
            ),
        }
    }
}

#[derive(Default)]
struct Decoder {
    id_prefix: String,
    text: Option<usize>,
    calls: usize,
    /// Set once a chunk in the OpenAI-compatible shape arrives.
    openai: Option<openai::Decoder>,
}

struct NativeChunk {
    response: Option<String>,
    tool_calls: Option<Vec<NativeCall>>,
    usage: Option<NativeUsage>,
}

crate::json_struct!(NativeChunk {
    "response" => response,
    "tool_calls" => tool_calls,
    "usage" => usage,
});

struct NativeCall {
    id: Option<String>,
    name: Option<String>,
    arguments: Option<Value>,
    function: Option<NativeFunction>,
}

crate::json_struct!(NativeCall {
    "id" => id,
    "name" => name,
    "arguments" => arguments,
    "function" => function,
});

struct NativeFunction {
    name: String,
    arguments: Option<Value>,
}

crate::json_struct!(NativeFunction {
    "name" => name,
    "arguments" => arguments,
});

struct NativeUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
}

crate::json_struct!(NativeUsage {
    "prompt_tokens" => prompt_tokens: default,
    "completion_tokens" => completion_tokens: default,
});

impl Decode for Decoder {
    fn frame(
        &mut self,
        event: &str,
        data: &str,
        message: &mut Assembler,
        out: &mut Vec<LlmEvent>,
    ) -> Result<Flow, LlmError> {
        if data.trim() == "[DONE]" {
            return Ok(Flow::Done);
        }
        if self.openai.is_some() || data.contains("\"choices\"") {
            return self
                .openai
                .get_or_insert_with(|| openai::Decoder::with_ids(&self.id_prefix))
                .frame(event, data, message, out);
        }
        let chunk: NativeChunk = read_event("workers-ai", data)?;
        if let Some(text) = chunk.response.filter(|t| !t.is_empty()) {
            message.continue_text(&mut self.text, &text, out);
        }
        for call in chunk.tool_calls.into_iter().flatten() {
            if let Some(i) = self.text.take() {
                message.end(i, out);
            }
            let (name, arguments) = match call.function {
                Some(f) => (f.name, f.arguments),
                None => (call.name.unwrap_or_default(), call.arguments),
            };
            let id = call
                .id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| format!("{}{}", self.id_prefix, self.calls));
            self.calls += 1;
            let i = message.start_tool_call(&id, &name, out);
            // Arguments come as an object or as JSON text, depending on the model.
            let text = match arguments {
                Some(Value::String(s)) => s,
                Some(other) => other.to_string(),
                None => String::new(),
            };
            message.tool_call_delta(i, &text, out);
            message.end(i, out);
        }
        if let Some(usage) = chunk.usage {
            let usage = Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
                ..Default::default()
            };
            message.set_usage(usage, out);
        }
        Ok(Flow::More)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Message, StopReason, ToolDef};
    use serde_json::json;
    use std::cell::RefCell;

    /// Plays `body` for every run and records what it was asked.
    struct FakeBinding {
        body: Result<Vec<u8>, String>,
        seen: RefCell<Vec<(String, Value)>>,
    }

    #[async_trait(?Send)]
    impl AiBinding for FakeBinding {
        async fn run_stream(&self, model: &str, input: &str) -> Result<ByteStream, String> {
            self.seen.borrow_mut().push((
                model.to_string(),
                crate::llm::json::from_str(input).unwrap(),
            ));
            let body = self.body.clone()?;
            // One byte per read: every chunk boundary at once.
            let chunks: Vec<Result<Vec<u8>, String>> = body.iter().map(|b| Ok(vec![*b])).collect();
            Ok(Box::pin(futures::stream::iter(chunks)))
        }
    }

    fn run(body: Result<&str, &str>) -> (Completion, Value) {
        let binding = Rc::new(FakeBinding {
            body: body.map(|b| b.as_bytes().to_vec()).map_err(str::to_string),
            seen: RefCell::new(vec![]),
        });
        let provider = WorkersAi::new(
            ModelRef::parse("workers-ai:@cf/meta/llama-3.3-70b-instruct-fp8-fast").unwrap(),
            binding.clone(),
        );
        let messages = vec![Message::user_text("hi")];
        let tools = vec![ToolDef {
            name: "current_time".into(),
            description: "now".into(),
            input_schema: json!({"type": "object"}),
        }];
        let request = LlmRequest {
            system: Some("sys"),
            messages: &messages,
            tools: &tools,
            max_tokens: 256,
            temperature: None,
            call_ids: "call_1_",
            billing: None,
            answer: None,
        };
        let c = futures::executor::block_on(provider.stream(&request, &mut |_| {}));
        let (model, input) = binding.seen.borrow()[0].clone();
        assert_eq!(model, "@cf/meta/llama-3.3-70b-instruct-fp8-fast");
        (c, input)
    }

    #[test]
    fn native_text_stream_with_usage() {
        let body = "data: {\"response\":\"Hel\",\"p\":\"abc\"}\n\ndata: {\"response\":\"lo \u{e9}\"}\n\ndata: {\"response\":\"\",\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15}}\n\ndata: [DONE]\n\n";
        let (c, input) = run(Ok(body));
        assert_eq!(c.error, None);
        assert_eq!(c.message.text(), "Hello \u{e9}");
        assert_eq!(
            c.message.usage,
            Usage {
                input_tokens: 12,
                output_tokens: 3,
                ..Default::default()
            }
        );
        assert_eq!(
            input,
            json!({
                "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
                "tools": [{"type": "function", "function": {"name": "current_time", "description": "now", "parameters": {"type": "object"}}}],
                "max_tokens": 256,
                "stream": true
            })
        );
    }

    #[test]
    fn native_tool_calls_with_object_arguments_get_ids() {
        let body = "data: {\"response\":\"\",\"tool_calls\":[{\"name\":\"current_time\",\"arguments\":{\"tz\":\"UTC\"}}]}\n\ndata: [DONE]\n\n";
        let (c, _) = run(Ok(body));
        let call = c.message.tool_calls().next().unwrap();
        assert_eq!(
            (call.id.as_str(), call.name.as_str()),
            ("call_1_0", "current_time")
        );
        assert_eq!(call.input, json!({"tz": "UTC"}));
        assert_eq!(c.message.stop_reason, StopReason::ToolUse);
    }

    #[test]
    fn openai_compatible_chunks_are_understood() {
        let body = "data: {\"id\":\"x\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\ndata: {\"id\":\"x\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n";
        let (c, _) = run(Ok(body));
        assert_eq!(c.error, None);
        assert_eq!(c.message.text(), "Hi");
        assert_eq!(c.message.stop_reason, StopReason::EndTurn);
        assert_eq!(c.message.usage.input_tokens, 5);
    }

    #[test]
    fn a_binding_failure_is_an_error_completion() {
        let (c, _) = run(Err(
            "AiError: 3040: Capacity temporarily exceeded, please try again.",
        ));
        assert_eq!(c.message.stop_reason, StopReason::Error);
        assert!(c
            .error
            .unwrap()
            .to_string()
            .contains("Capacity temporarily exceeded"));
    }
}
