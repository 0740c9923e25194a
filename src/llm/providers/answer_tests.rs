//! A typed answer in each provider's request: a JSON schema in the form each wire API documents
//! for structured output, or the one tool the model must call; and a clear error where a
//! provider cannot take the form asked for.

use std::rc::Rc;

use async_trait::async_trait;
use serde_json::{json, Value};

use super::testing::{request, ScriptedTransport};
use super::workers_ai::{AiBinding, WorkersAi};
use super::{Anthropic, Gemini, Ollama, OpenAiChat};
use crate::llm::{
    AnswerFormat, ByteStream, HttpTransport, LlmError, LlmRequest, Message, ModelRef, Provider,
    ToolDef,
};

fn schema() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
}

/// The typed answer as a JSON schema (not OpenAI's strict form unless `strict`).
fn as_schema(schema: &Value, strict: bool) -> AnswerFormat<'_> {
    AnswerFormat::Schema {
        name: "place",
        schema,
        strict,
    }
}

fn tools() -> Vec<ToolDef> {
    ["current_time", "answer"]
        .map(|name| ToolDef {
            name: name.into(),
            description: format!("the {name} tool"),
            input_schema: json!({"type": "object"}),
        })
        .to_vec()
}

/// The body `make`'s provider sends for a call asking for `answer`, offering `tools`; or why it
/// would not send one.
fn sent(
    make: impl Fn(Rc<dyn HttpTransport>) -> Box<dyn Provider>,
    answer: AnswerFormat<'_>,
    tools: &[ToolDef],
) -> Result<Value, String> {
    let transport = ScriptedTransport::new(vec![]);
    let provider = make(transport.clone());
    let messages = vec![Message::user_text("Where is the Eiffel tower?")];
    let request = LlmRequest {
        messages: &messages,
        tools,
        answer: Some(answer),
        ..request()
    };
    let completion = futures::executor::block_on(provider.stream(&request, &mut |_| {}));
    if let Some(LlmError::Config(e)) = &completion.error {
        return Err(e.clone());
    }
    let sent = transport.last_request.borrow().clone().unwrap();
    Ok(serde_json::from_str(&sent.body).unwrap())
}

fn model(id: &str) -> ModelRef {
    ModelRef::parse(id).unwrap()
}

#[test]
fn openai_gets_a_response_format_or_a_tool_choice() {
    let make = |t| Box::new(OpenAiChat::provider(model("openai:gpt-4o"), None, None, t)) as _;
    let schema = schema();
    let format = as_schema(&schema, true);
    let body = sent(make, format, &[]).unwrap();
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "place", "schema": schema, "strict": true}})
    );
    assert!(body.get("tool_choice").is_none());
    let body = sent(make, AnswerFormat::Tool { name: "answer" }, &tools()).unwrap();
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "answer"}})
    );
    assert!(
        body.get("parallel_tool_calls").is_none(),
        "o-series models refuse it"
    );
    // A tool the call does not offer: refused before any request.
    let e = sent(make, AnswerFormat::Tool { name: "answer" }, &[]).unwrap_err();
    assert!(e.contains("not among"), "{e}");
    assert!(body.get("response_format").is_none());
}

#[test]
fn anthropic_gets_an_output_format_or_a_forced_tool() {
    let make = |t| {
        Box::new(Anthropic::provider(
            model("anthropic:claude-sonnet-4-5"),
            None,
            None,
            t,
        )) as _
    };
    // Every object closed, bounds Claude does not enforce left out.
    let bounded = json!({"type": "object", "properties": {"city": {"type": "string", "maxLength": 80},
        "n": {"type": "integer", "minimum": 1}, "tags": {"type": "array", "items": {"type": "object"}, "minItems": 2},
        "minimum": {"enum": [{"type": "x", "maxLength": 1}]}}});
    let body = sent(make, as_schema(&bounded, false), &[]).unwrap();
    assert_eq!(
        body["output_config"],
        json!({"format": {"type": "json_schema", "schema": {"type": "object", "properties": {
            "city": {"type": "string"}, "n": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "object", "additionalProperties": false}},
            // A property's name and an `enum`'s values are not schemas: kept as written.
            "minimum": {"enum": [{"type": "x", "maxLength": 1}]}},
            "additionalProperties": false}}})
    );
    let body = sent(make, AnswerFormat::Tool { name: "answer" }, &tools()).unwrap();
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "answer", "disable_parallel_tool_use": true})
    );
    assert!(body.get("output_config").is_none());
}

#[test]
fn gemini_gets_a_json_mime_type_and_schema_or_one_allowed_function() {
    let make = |t| {
        Box::new(Gemini::provider(
            model("gemini:gemini-2.5-flash"),
            None,
            None,
            t,
        )) as _
    };
    let schema = schema();
    let format = as_schema(&schema, false);
    let body = sent(make, format, &[]).unwrap();
    let config = &body["generationConfig"];
    assert_eq!(config["responseMimeType"], json!("application/json"));
    assert_eq!(config["responseJsonSchema"], schema);
    let body = sent(make, AnswerFormat::Tool { name: "answer" }, &tools()).unwrap();
    assert_eq!(
        body["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["answer"]}})
    );
    assert!(body["generationConfig"].get("responseMimeType").is_none());
    // The answer's schema goes as JSON Schema, the other tools' as Gemini's OpenAPI subset.
    let declared = &body["tools"][0]["functionDeclarations"];
    assert_eq!(declared[1]["name"], json!("answer"));
    assert_eq!(
        declared[1]["parametersJsonSchema"],
        json!({"type": "object"})
    );
    assert!(declared[1].get("parameters").is_none());
    assert!(
        declared[0].get("parameters").is_some()
            && declared[0].get("parametersJsonSchema").is_none()
    );
    // Gemini refuses a JSON mime type beside function calling: said before any request.
    let e = sent(make, format, &tools()).unwrap_err();
    assert!(e.contains("as a tool"), "{e}");
}

#[test]
fn ollama_gets_a_format_and_cannot_be_made_to_call_a_tool() {
    let make = |t| Box::new(Ollama::provider(model("ollama:qwen3:8b"), None, t)) as _;
    let schema = schema();
    let format = as_schema(&schema, false);
    assert_eq!(sent(make, format, &tools()).unwrap()["format"], schema);
    let e = sent(make, AnswerFormat::Tool { name: "answer" }, &tools()).unwrap_err();
    assert!(e.contains("as a schema"), "{e}");
}

struct NoBinding;

#[async_trait(?Send)]
impl AiBinding for NoBinding {
    async fn run_stream(&self, _: &str, _: &str) -> Result<ByteStream, String> {
        Err("not called".into())
    }
}

#[test]
fn workers_ai_is_never_sent_a_schema_while_streaming_and_gets_the_tool_alone() {
    let ai = WorkersAi::new(
        model("workers-ai:@cf/meta/llama-3.3-70b"),
        Rc::new(NoBinding),
    );
    let messages = vec![Message::user_text("Where is the Eiffel tower?")];
    let tools = tools();
    let schema = schema();
    let mut request = LlmRequest {
        messages: &messages,
        tools: &tools,
        answer: Some(AnswerFormat::Tool { name: "answer" }),
        ..request()
    };
    let input: Value = serde_json::from_str(&ai.input(&request).unwrap()).unwrap();
    let offered: Vec<_> = input["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].clone())
        .collect();
    assert_eq!(offered, [json!("answer")]);
    assert!(input.get("response_format").is_none());
    request.answer = Some(as_schema(&schema, false));
    let e = ai.input(&request).unwrap_err().to_string();
    assert!(e.contains("as a tool"), "{e}");
}
