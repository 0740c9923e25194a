//! A turn as an `ask_<agent>` call's result: the turn's stream, folded as a sub-agent's is
//! ([`Progress`]), becomes the agent's answer as text (and as `structuredContent` when the
//! agent has a typed answer), the calls a paused turn waits to have approved, or why there is no
//! answer; each result names the conversation, to continue it. Pure code, tested natively.

use serde_json::{json, Value};

use super::tools::{structured, PREFIX};
use crate::edge::config::agents::AgentSpec;
use crate::edge::conversation::turn::subagent::progress::Progress;

/// The result of a turn whose stream ended (or was cut off).
pub fn of_turn(progress: &Progress, agent: &AgentSpec, conversation: &str) -> Value {
    if progress.finished() && progress.paused_for_approval() {
        return paused(progress, agent, conversation);
    }
    match progress.result(&agent.name) {
        Ok(answer) => answered(agent, &answer, conversation),
        // `{ok: false, status, message, retryable}`, as a parent agent's model reads it.
        Err(failure) => {
            let why: Value = crate::llm::json::from_str(&failure).unwrap_or(Value::Null);
            let message = why["message"].as_str().unwrap_or("the turn failed");
            failed(message, Some(conversation))
        }
    }
}

fn answered(agent: &AgentSpec, answer: &Value, conversation: &str) -> Value {
    let text = match answer {
        Value::String(text) if agent.output.is_none() => text.clone(),
        other => other.to_string(),
    };
    let mut result = json!({
        "content": [{"type": "text", "text": text}, continue_note(agent, conversation)],
        "isError": false,
        "_meta": {"conversation_id": conversation},
    });
    match agent.output.as_deref() {
        Some(spec) => match structured(spec, answer) {
            Some(object) => result["structuredContent"] = object,
            // A `json` answer that is no object is valid, and declares no schema to break.
            None if spec.kind == crate::agent::output::spec::Kind::Json => {}
            // Not what the agent declares (an agent handed to answered in its own way): an
            // error, never content that breaks the listed `outputSchema`.
            None => {
                return failed(
                    &format!(
                        "the turn's answer is not the object `{PREFIX}{}` declares: {text}",
                        agent.name
                    ),
                    Some(conversation),
                )
            }
        },
        None => {
            result["structuredContent"] = json!({"answer": text, "conversation_id": conversation})
        }
    }
    result
}

/// A result that is no answer yet and no failure: a status for untyped agents (and `isError`
/// for a typed one, whose client checks a result against its `outputSchema` unless it is one).
fn not_yet(agent: &AgentSpec, text: String, status: Value) -> Value {
    let mut result = json!({
        "content": [{"type": "text", "text": text}],
        "isError": agent.output.is_some(),
        "_meta": status.clone(),
    });
    if agent.output.is_none() {
        result["structuredContent"] = status;
    }
    result
}

/// The message was queued: a turn already runs in the conversation, which will answer it.
pub fn queued(agent: &AgentSpec, conversation: &str, position: &Value) -> Value {
    let text = format!(
        "A turn is already running in conversation `{conversation}`: the message was queued \
         (position {position}) and will be answered there, in its history. Do not send it again."
    );
    not_yet(
        agent,
        text,
        json!({"status": "queued", "conversation_id": conversation, "position": position}),
    )
}

/// The turn's stream was lost before its end and the turn is no longer the one running: it
/// ended, and its answer (or its pause) is in its conversation.
pub fn ended(agent: &AgentSpec, conversation: &str) -> Value {
    let text = format!(
        "The turn's stream was lost, and the turn has ended since: its answer, or the calls it \
         waits to have approved, are in conversation `{conversation}`'s history. Do not send \
         the message again."
    );
    not_yet(
        agent,
        text,
        json!({"status": "ended", "conversation_id": conversation}),
    )
}

/// The turn's stream was lost before its end, and following it again did not reach the end:
/// the turn goes on in its conversation.
pub fn running(agent: &AgentSpec, conversation: &str) -> Value {
    let text = format!(
        "The turn is still running in conversation `{conversation}`; its answer will be in its \
         history. Do not send the message again."
    );
    not_yet(
        agent,
        text,
        json!({"status": "running", "conversation_id": conversation}),
    )
}

/// A turn that waits for a person's decision on some of its calls: which, and how to answer.
/// Not an error for an untyped agent; a typed one has no answer to give yet, and MCP clients
/// check a result against the tool's `outputSchema` unless it is one.
fn paused(progress: &Progress, agent: &AgentSpec, conversation: &str) -> Value {
    let awaiting = progress.awaiting();
    let calls: Vec<String> = awaiting
        .iter()
        .map(|c| {
            // A sub-agent's call shows its id alone.
            if c["tool"].is_null() {
                return format!(
                    "a sub-agent's call (tool_call_id `{}`)",
                    c["tool_call_id"].as_str().unwrap_or("?")
                );
            }
            format!(
                "`{}` {} (tool_call_id `{}`)",
                c["tool"].as_str().unwrap_or("a sub-agent's call"),
                c["input"],
                c["tool_call_id"].as_str().unwrap_or("?")
            )
        })
        .collect();
    // Information for the person behind the client, who decides: the calls and how a decision
    // is sent, not an instruction to the model that reads it.
    let text = format!(
        "The agent `{name}` paused: a person must approve these calls before they run: {calls}. \
         A decision is sent by calling `{PREFIX}{name}` with `conversation_id` \"{conversation}\" \
         and `approvals`: [{{\"tool_call_id\": \"...\", \"approved\": true or false}}].",
        name = agent.name,
        calls = calls.join("; "),
    );
    let pending = json!({
        "status": "awaiting_approval",
        "conversation_id": conversation,
        "approvals": awaiting,
    });
    not_yet(agent, text, pending)
}

/// A call that ran no turn to its answer: why, and the conversation when there is one.
pub fn failed(message: &str, conversation: Option<&str>) -> Value {
    let mut result = json!({
        "content": [{"type": "text", "text": message}],
        "isError": true,
    });
    if let Some(conversation) = conversation {
        result["_meta"] = json!({"conversation_id": conversation});
    }
    result
}

fn continue_note(agent: &AgentSpec, conversation: &str) -> Value {
    json!({"type": "text", "text": format!(
        "(conversation_id: {conversation}; pass it to `{PREFIX}{}` to continue this conversation)",
        agent.name
    )})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::conversation::turn::subagent::progress::tests::fold;
    use crate::edge::mcp::tools::tests::config;

    #[test]
    fn an_answer_is_text_with_the_conversation_to_continue() {
        let config = config();
        let helper = config.agent(Some("helper")).unwrap();
        let p = fold(&[
            json!({"type": "start-step"}),
            json!({"type": "text-delta", "id": "t", "delta": "Paris."}),
            json!({"type": "finish", "finishReason": "stop"}),
        ]);
        let result = of_turn(&p, helper, "c1");
        assert_eq!(result["isError"], false);
        assert_eq!(
            result["content"][0],
            json!({"type": "text", "text": "Paris."})
        );
        assert!(result["content"][1]["text"]
            .as_str()
            .unwrap()
            .contains("conversation_id: c1"));
        assert_eq!(
            result["structuredContent"],
            json!({"answer": "Paris.", "conversation_id": "c1"})
        );
    }

    #[test]
    fn a_typed_answer_is_structured_content_and_its_json_as_text() {
        let config = config();
        let triage = config.agent(Some("triage")).unwrap();
        let p = fold(&[
            json!({"type": "data-output", "id": "output:m", "data": {"status": "complete", "object": {"queue": "billing"}}}),
            json!({"type": "finish", "finishReason": "stop"}),
        ]);
        let result = of_turn(&p, triage, "c2");
        assert_eq!(result["structuredContent"], json!({"queue": "billing"}));
        assert_eq!(result["content"][0]["text"], r#"{"queue":"billing"}"#);
        // No valid object: an error, never content that breaks the declared schema.
        let p = fold(&[
            json!({"type": "data-output", "id": "output:m", "data": {"status": "error", "error": {"message": "at /queue: expected string"}}}),
            json!({"type": "finish", "finishReason": "stop"}),
        ]);
        let result = of_turn(&p, triage, "c2");
        assert_eq!(result["isError"], true);
        assert!(result.get("structuredContent").is_none());
        assert!(result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("expected string"));
    }

    #[test]
    fn a_pause_names_its_calls_and_how_to_decide() {
        let config = config();
        let pause = [
            json!({"type": "tool-input-available", "toolCallId": "c9", "toolName": "refund", "input": {"usd": 5}}),
            json!({"type": "tool-approval-request", "approvalId": "a9", "toolCallId": "c9"}),
            json!({"type": "finish", "finishReason": "tool-calls"}),
        ];
        let result = of_turn(&fold(&pause), config.agent(Some("helper")).unwrap(), "c3");
        assert_eq!(result["isError"], false);
        assert_eq!(result["structuredContent"]["status"], "awaiting_approval");
        assert_eq!(
            result["structuredContent"]["approvals"][0]["tool_call_id"],
            "c9"
        );
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(
            text.contains("`refund`") && text.contains("\"c3\"") && text.contains("ask_helper"),
            "{text}"
        );
        // A typed agent has no answer to give yet: an error for its schema's sake.
        let typed = of_turn(&fold(&pause), config.agent(Some("triage")).unwrap(), "c3");
        assert_eq!(typed["isError"], true);
        assert_eq!(typed["_meta"]["approvals"][0]["tool"], "refund");
    }

    #[test]
    fn a_queued_message_and_a_lost_stream_are_no_failure_and_no_answer_yet() {
        let config = config();
        let helper = config.agent(Some("helper")).unwrap();
        let queued = queued(helper, "c5", &json!(2));
        assert_eq!(queued["isError"], false);
        assert_eq!(
            queued["structuredContent"],
            json!({"status": "queued", "conversation_id": "c5", "position": 2})
        );
        assert!(queued["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Do not send it again"));
        let running = running(config.agent(Some("triage")).unwrap(), "c5");
        // A typed agent's client would check a status against its answer's schema.
        assert_eq!(running["isError"], true);
        assert!(running.get("structuredContent").is_none());
        assert_eq!(running["_meta"]["status"], "running");
        // An answer that is not the declared object (an agent handed to answered in text).
        let p = fold(&[
            json!({"type": "text-delta", "id": "t", "delta": "billing"}),
            json!({"type": "finish", "finishReason": "stop"}),
        ]);
        let result = of_turn(&p, config.agent(Some("triage")).unwrap(), "c5");
        assert_eq!(result["isError"], true);
        assert!(result.get("structuredContent").is_none());
        // A `json` answer need be no object: an answer, with nothing structured.
        let p = fold(&[
            json!({"type": "data-output", "id": "output:m", "data": {"status": "complete", "object": [1, 2]}}),
            json!({"type": "finish", "finishReason": "stop"}),
        ]);
        let result = of_turn(&p, config.agent(Some("free")).unwrap(), "c5");
        assert_eq!(result["isError"], false);
        assert_eq!(result["content"][0]["text"], "[1,2]");
        assert!(result.get("structuredContent").is_none());
        let ended = ended(helper, "c5");
        assert_eq!(
            (
                ended["isError"].clone(),
                ended["structuredContent"]["status"].clone()
            ),
            (json!(false), json!("ended"))
        );
    }

    #[test]
    fn a_turn_without_an_answer_is_an_error_saying_why() {
        let config = config();
        let helper = config.agent(Some("helper")).unwrap();
        let failed = fold(&[
            json!({"type": "error", "errorText": "the provider is down (request r1)"}),
            json!({"type": "finish", "finishReason": "error"}),
        ]);
        let result = of_turn(&failed, helper, "c4");
        assert_eq!(result["isError"], true);
        assert!(result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("the provider is down"));
        assert_eq!(result["_meta"]["conversation_id"], "c4");
        let cut = of_turn(&fold(&[json!({"type": "start-step"})]), helper, "c4");
        assert!(cut["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("cut off"));
    }
}
