//! The handoff matrix: a history produced by each provider (decoded from its recorded streams)
//! replayed to each other provider, and the encoded request checked against the target's rules.

use std::rc::Rc;

use serde_json::Value;

use super::testing::{fixture, run, ScriptedTransport};
use super::{Anthropic, Gemini, Ollama, OpenAiChat};
use crate::llm::transform::prepare_for;
use crate::llm::{
    AssistantMessage, HttpTransport, LlmRequest, Message, ModelRef, Provider, StopReason,
    ToolResult,
};

fn decode(
    make: &dyn Fn(Rc<dyn HttpTransport>) -> Box<dyn Provider>,
    path: &str,
) -> AssistantMessage {
    let (_, c) = run(make, vec![fixture(path)]);
    assert_eq!(c.error, None, "{path}");
    c.message
}

fn anthropic(t: Rc<dyn HttpTransport>) -> Box<dyn Provider> {
    Box::new(Anthropic::provider(
        ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap(),
        None,
        None,
        t,
    ))
}
fn openai(t: Rc<dyn HttpTransport>) -> Box<dyn Provider> {
    Box::new(OpenAiChat::provider(
        ModelRef::parse("openai:deepseek-v4-flash").unwrap(),
        None,
        None,
        t,
    ))
}
fn gemini(t: Rc<dyn HttpTransport>) -> Box<dyn Provider> {
    Box::new(Gemini::provider(
        ModelRef::parse("gemini:gemini-3-pro-preview").unwrap(),
        None,
        None,
        t,
    ))
}
fn ollama(t: Rc<dyn HttpTransport>) -> Box<dyn Provider> {
    Box::new(Ollama::provider(
        ModelRef::parse("ollama:llama3.2").unwrap(),
        None,
        t,
    ))
}

/// A conversation in which `answers` (one provider's real output) took part: each answer's
/// tool calls get results except the last call of the last answer (an orphan), a failed answer
/// sits in the middle, and the user speaks between answers.
fn history(answers: Vec<AssistantMessage>) -> Vec<Message> {
    let mut out = vec![Message::user_text("Start.")];
    let last = answers.len() - 1;
    for (i, answer) in answers.into_iter().enumerate() {
        let calls: Vec<_> = answer.tool_calls().cloned().collect();
        out.push(Message::Assistant(answer));
        for (j, call) in calls.iter().enumerate() {
            if i == last && j == calls.len() - 1 && j > 0 {
                continue;
            }
            out.push(Message::ToolResult(ToolResult {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                content: "{\"ok\": true}".into(),
                is_error: false,
            }));
        }
        out.push(Message::user_text(format!("Next {i}.")));
        if i == 0 {
            let mut failed = AssistantMessage {
                content: vec![],
                stop_reason: StopReason::Error,
                model: "m".into(),
                provider: "anthropic".into(),
                usage: Default::default(),
                output: None,
            };
            failed.content.push(crate::llm::ContentBlock::Text {
                text: "broken".into(),
            });
            out.push(Message::Assistant(failed));
        }
    }
    out
}

fn sources() -> Vec<(&'static str, Vec<Message>)> {
    vec![
        (
            "anthropic",
            history(vec![
                decode(&anthropic, "anthropic/thinking-signature-delta.chunks.txt"),
                decode(&anthropic, "anthropic/redacted-thinking-padded.sse"),
                decode(&anthropic, "anthropic/tool-use-input-json-delta.chunks.txt"),
                decode(
                    &anthropic,
                    "anthropic/text-then-tool-use-no-args.chunks.txt",
                ),
            ]),
        ),
        (
            "openai",
            history(vec![
                decode(
                    &openai,
                    "openai-chat/deepseek-reasoning-content-then-tool-call.chunks.txt",
                ),
                decode(&openai, "openai-chat/parallel-tool-calls-include-usage.sse"),
            ]),
        ),
        (
            "gemini",
            history(vec![
                decode(&gemini, "gemini/thought-parts-then-text-signature-crlf.sse"),
                decode(&gemini, "gemini/function-call-thought-signature-crlf.sse"),
                decode(
                    &gemini,
                    "gemini/text-thought-signature-on-empty-final-part.chunks.txt",
                ),
                decode(&gemini, "gemini/function-call-thought-signature.chunks.txt"),
            ]),
        ),
        (
            "ollama",
            history(vec![
                decode(&ollama, "ollama/chat-text-stream-tail-excerpt.ndjson"),
                decode(
                    &ollama,
                    "ollama/chat-multiple-tool-calls-final-line.edited.ndjson",
                ),
            ]),
        ),
    ]
}

fn encode(target: &str, messages: &[Message]) -> Value {
    let t: Rc<dyn HttpTransport> = ScriptedTransport::new(vec![]);
    let model = |id| ModelRef::parse(id).unwrap();
    let prepared_for = |id| {
        prepare_for(
            messages.to_vec(),
            &model(id),
            &crate::llm::models::lookup(&model(id)).capabilities,
        )
    };
    let body = match target {
        "anthropic" => {
            let m = prepared_for("anthropic:claude-sonnet-4-5");
            Anthropic::provider(model("anthropic:claude-sonnet-4-5"), None, None, t)
                .http_request(&request(&m))
                .unwrap()
                .body
        }
        "openai" => {
            let m = prepared_for("openai:gpt-4o");
            OpenAiChat::provider(model("openai:gpt-4o"), None, None, t)
                .http_request(&request(&m))
                .unwrap()
                .body
        }
        "gemini" => {
            let m = prepared_for("gemini:gemini-2.5-flash");
            Gemini::provider(model("gemini:gemini-2.5-flash"), None, None, t)
                .http_request(&request(&m))
                .unwrap()
                .body
        }
        _ => {
            let m = prepared_for("ollama:qwen3");
            Ollama::provider(model("ollama:qwen3"), None, t)
                .http_request(&request(&m))
                .unwrap()
                .body
        }
    };
    crate::llm::json::from_str(&body).unwrap()
}

fn request(messages: &[Message]) -> LlmRequest<'_> {
    LlmRequest {
        system: Some("sys"),
        messages,
        tools: &[],
        max_tokens: 100,
        temperature: None,
        call_ids: "call_1_",
        billing: None,
        answer: None,
    }
}

/// Anthropic: user first, strict alternation, no empty content, ids match
/// `^[a-zA-Z0-9_-]{1,64}$`, every tool_use answered by a tool_result in the next message and
/// no result without its call, thinking only with a signature.
fn check_anthropic(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().ok_or("no messages")?;
    if messages.first().map(|m| &m["role"]) != Some(&Value::from("user")) {
        return Err("does not start with user".into());
    }
    for (i, m) in messages.iter().enumerate() {
        let content = m["content"].as_array().ok_or("content is not an array")?;
        if content.is_empty() {
            return Err(format!("message {i} is empty"));
        }
        if i > 0 && messages[i - 1]["role"] == m["role"] {
            return Err(format!("messages {} and {i} have the same role", i - 1));
        }
        let results: Vec<&str> = content
            .iter()
            .filter(|b| b["type"] == "tool_result")
            .map(|b| b["tool_use_id"].as_str().unwrap_or(""))
            .collect();
        let calls: Vec<&str> = if i > 0 {
            ids_of(&messages[i - 1], "tool_use", "id")
        } else {
            vec![]
        };
        for id in &results {
            if !calls.contains(id) {
                return Err(format!("tool_result {id} has no tool_use before it"));
            }
        }
        for b in content {
            match b["type"].as_str() {
                Some("tool_use") => {
                    let id = b["id"].as_str().unwrap_or("");
                    let ok = !id.is_empty()
                        && id.len() <= 64
                        && id
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                    if !ok {
                        return Err(format!("tool_use id {id:?} is not allowed"));
                    }
                    let next = messages
                        .get(i + 1)
                        .ok_or(format!("tool_use {id} is never answered"))?;
                    if !ids_of(next, "tool_result", "tool_use_id").contains(&id) {
                        return Err(format!("tool_use {id} is not answered in the next message"));
                    }
                }
                Some("thinking") if b["signature"].as_str().unwrap_or("").is_empty() => {
                    return Err("thinking without signature".into())
                }
                _ => {}
            }
        }
    }
    Ok(())
}

fn ids_of<'a>(message: &'a Value, kind: &str, field: &str) -> Vec<&'a str> {
    message["content"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter(|b| b["type"] == kind)
                .filter_map(|b| b[field].as_str())
                .collect()
        })
        .unwrap_or_default()
}

/// OpenAI: each assistant's tool calls answered by `tool` messages right after it, ids at most
/// 40 characters, arguments valid JSON, no stray tool messages.
fn check_openai(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().ok_or("no messages")?;
    let mut open: Vec<String> = vec![];
    for m in messages {
        match m["role"].as_str() {
            Some("tool") => {
                let id = m["tool_call_id"].as_str().unwrap_or("");
                let at = open
                    .iter()
                    .position(|o| o == id)
                    .ok_or(format!("tool message {id} answers no open call"))?;
                open.remove(at);
            }
            Some(role) => {
                if !open.is_empty() {
                    return Err(format!("calls {open:?} unanswered before a {role} message"));
                }
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    let id = call["id"].as_str().unwrap_or("");
                    if id.is_empty() || id.len() > 40 {
                        return Err(format!("tool call id {id:?} is not allowed"));
                    }
                    crate::llm::json::from_str::<Value>(
                        call["function"]["arguments"].as_str().unwrap_or(""),
                    )
                    .map_err(|e| format!("arguments of {id}: {e}"))?;
                    open.push(id.to_string());
                }
            }
            None => return Err("message without role".into()),
        }
    }
    if open.is_empty() {
        Ok(())
    } else {
        Err(format!("calls {open:?} never answered"))
    }
}

/// Gemini: user first, user/model alternate, no empty parts, each model turn's function calls
/// answered by responses of the same names in the next user turn.
fn check_gemini(body: &Value) -> Result<(), String> {
    let contents = body["contents"].as_array().ok_or("no contents")?;
    if contents.first().map(|c| &c["role"]) != Some(&Value::from("user")) {
        return Err("does not start with user".into());
    }
    for (i, c) in contents.iter().enumerate() {
        let parts = c["parts"].as_array().ok_or("no parts")?;
        if parts.is_empty() {
            return Err(format!("content {i} is empty"));
        }
        if i > 0 && contents[i - 1]["role"] == c["role"] {
            return Err(format!("contents {} and {i} have the same role", i - 1));
        }
        let mut calls: Vec<&str> = parts
            .iter()
            .filter_map(|p| p["functionCall"]["name"].as_str())
            .collect();
        if !calls.is_empty() {
            let next = contents.get(i + 1).ok_or("function calls never answered")?;
            let mut responses: Vec<&str> = next["parts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["functionResponse"]["name"].as_str())
                .collect();
            calls.sort_unstable();
            responses.sort_unstable();
            if calls != responses {
                return Err(format!("calls {calls:?} answered by {responses:?}"));
            }
        }
    }
    Ok(())
}

/// Ollama: an assistant with n tool calls is followed by n tool messages.
fn check_ollama(body: &Value) -> Result<(), String> {
    let messages = body["messages"].as_array().ok_or("no messages")?;
    for (i, m) in messages.iter().enumerate() {
        let n = m["tool_calls"].as_array().map_or(0, Vec::len);
        let answered = messages[i + 1..]
            .iter()
            .take_while(|m| m["role"] == "tool")
            .count();
        if n > 0 && answered != n {
            return Err(format!("message {i} made {n} calls, {answered} answered"));
        }
    }
    Ok(())
}

#[test]
fn every_providers_history_replays_to_every_provider() {
    let mut failures = vec![];
    for (source, messages) in sources() {
        for target in ["anthropic", "openai", "gemini", "ollama"] {
            let body = encode(target, &messages);
            let verdict = match target {
                "anthropic" => check_anthropic(&body),
                "openai" => check_openai(&body),
                "gemini" => check_gemini(&body),
                _ => check_ollama(&body),
            };
            if let Err(e) = verdict {
                failures.push(format!("{source} -> {target}: {e}"));
            }
            let text = body.to_string();
            if target != source {
                assert!(
                    !text.contains("EvQBCkYICxgCKkAx") && !text.contains("Et8ECtwE"),
                    "{source} -> {target}: a foreign signature leaked"
                );
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn the_checks_catch_broken_requests() {
    // Without the transform, raw histories break the targets' rules: the checks are not vacuous.
    let (_, messages) = sources().remove(3); // ollama: ids like call_0_0, an orphan call
    let t: Rc<dyn HttpTransport> = ScriptedTransport::new(vec![]);
    let raw = Anthropic::provider(ModelRef::parse("anthropic:x").unwrap(), None, None, t)
        .http_request(&request(&messages))
        .unwrap();
    assert!(check_anthropic(&crate::llm::json::from_str(&raw.body).unwrap()).is_err());
}
