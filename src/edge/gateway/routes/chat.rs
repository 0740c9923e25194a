//! `POST /v1/chat`: the body the AI SDK's `useChat` sends by default (`{id, messages, trigger,
//! messageId}`), so `new DefaultChatTransport({api: "<origin>/v1/chat"})` works unmodified.
//! The conversation is `id` when that is one of the caller's conversations; any other `id` names
//! the caller's own conversation for it ([`scoped_id`]), created on first use, so one
//! user's ids never collide with, reveal or block another's. D1, not the client, holds the
//! history, so only what is new is taken from `messages`: the last user message, or the tool
//! outputs and approval responses in the last assistant message; `regenerate-message` retries.
//! The transport sends the whole chat each time; [`super::chat_body`] keeps only the messages
//! read here as the body arrives, so the body may grow past the usual 1 MiB limit.
//! Client tool definitions may come along as `tools` (the transport's `body` option).

use serde_json::Value;
use worker::{Env, Request, Response};

use super::chat_body::{ChatBody, MAX_CHAT_BODY_BYTES};
use super::client_tools::{client_tools, valid_name, yes, ClientTool};
use super::messages::{carries_files, checked_turn, probe_keyed};
use crate::edge::config::Config;
use crate::edge::conversation::client::ConversationClient;
use crate::edge::d1::{is_conversation_id, scoped_id};
use crate::edge::error::ApiError;
use crate::edge::gateway::attachments::{
    kept_if_taken, message_body_limit, user_message, FileIn, Piece, Source, Upload,
};
use crate::edge::gateway::body::read_body;
use crate::edge::platform::ids::new_id;
use crate::edge::protocol::{
    check_key, keyed_id, ApprovalIn, ChatStart, Delivery, Handover, Keyed, ToolResultIn,
    TurnConversation, TurnRequest, ELSEWHERE,
};

struct ChatRequest {
    id: String,
    messages: Vec<UiMessage>,
    trigger: Option<String>,
    tools: Vec<ClientTool>,
    stream: bool,
    /// The client's id for this send: one already accepted runs nothing again.
    message_id: Option<String>,
    /// The agent a chat started now belongs to.
    agent: Option<String>,
    /// A typed answer: refused until they are served.
    output: Option<Value>,
}

crate::json_struct!(ChatRequest {
    "id" => id,
    "messages" => messages: default,
    "trigger" => trigger: default,
    "tools" => tools: default,
    "stream" => stream: default_to(yes),
    "messageId" => message_id: default,
    "agent" => agent: default,
    "output" => output: default,
});

/// The part of a `UIMessage` we read.
struct UiMessage {
    role: String,
    parts: Vec<Value>,
}

crate::json_struct!(UiMessage {
    "role" => role,
    "parts" => parts: default,
});

pub async fn post(
    req: Request,
    env: &Env,
    config: &Config,
    user: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    let traceparent = super::traceparent(&req);
    let mut reader = ChatBody::within(message_body_limit(config));
    read_body(req, MAX_CHAT_BODY_BYTES, &mut |chunk| reader.push(chunk)).await?;
    let kept = reader.finish()?;
    let mut body: ChatRequest = kept.parse()?;
    super::messages::check_output(body.output.as_ref())?;
    // What an idempotency key is kept with; then the text goes, the parsed body holding what
    // the turn needs (a second copy of the message's files otherwise).
    let digest = body.message_id.as_ref().map(|_| kept.digest());
    drop(kept);
    if !valid_name(&body.id) {
        return Err(ApiError::BadRequest(
            "`id` must be 1-64 letters, digits, `_` or `-`".into(),
        ));
    }
    let tools = client_tools(body.tools)?;
    // Resolved now, so a chat made by this message keeps today's default; one made already
    // keeps its own.
    let agent = config.agent(body.agent.as_deref())?.name.clone();
    if let Some(key) = &body.message_id {
        check_key(key, "messageId")?;
    }
    // The object the id most likely names: the caller's conversation when the id has the shape
    // of one (made by `POST /v1/conversations`), else the caller's scoped one (a client's id).
    // That object keeps its conversation after the first message, so the Worker reads no D1;
    // when it keeps none it creates the scoped one (an id of another shape names no other) or
    // resolves the id in D1 itself, and a wrong guess costs one more hop.
    let guess = if is_conversation_id(&body.id) {
        body.id.clone()
    } else {
        scoped_id(user, &body.id)
    };
    let mut files = Vec::new();
    let title = first_user_text(&body.messages).map(|t| t.chars().take(80).collect());
    let request = if body.trigger.as_deref() == Some("regenerate-message") {
        TurnRequest::Retry
    } else {
        let Some(last) = body.messages.pop() else {
            return Err(ApiError::BadRequest("`messages` is empty".into()));
        };
        match last.role.as_str() {
            "user" => {
                let pieces = pieces(last.parts)?;
                let keyed = body.message_id.as_ref().map(|key| Keyed {
                    key: key.clone(),
                    body: digest.clone().unwrap_or_default(),
                });
                let id = match &keyed {
                    Some(keyed) => keyed_id(user, &body.id, &keyed.key),
                    None => new_id()?,
                };
                if let Some(keyed) = keyed.as_ref().filter(|_| carries_files(&pieces)) {
                    let object =
                        ConversationClient::for_conversation(env, &guess)?.for_request(request_id);
                    if let Some(repeat) = probe_keyed(&object, user, id.clone(), keyed).await? {
                        return Ok(repeat);
                    }
                }
                let upload = Upload {
                    owner: user,
                    conversation: &guess,
                };
                let (message, stored) = user_message(env, config, upload, pieces).await?;
                files = stored;
                TurnRequest::Message {
                    id,
                    keyed,
                    message,
                    delivery: Delivery::Steering,
                }
            }
            // Only answers to the calls the turn waits on are new; the object keeps those.
            "assistant" => {
                let (results, approvals) = answers(&last.parts);
                if results.is_empty() && approvals.is_empty() {
                    return Err(ApiError::BadRequest(
                        "nothing new: the last message answers no tool call".into(),
                    ));
                }
                TurnRequest::Resume {
                    results,
                    approvals,
                    only_pending: true,
                }
            }
            other => {
                return Err(ApiError::BadRequest(format!(
                    "the last message has role `{other}`; expected user or assistant"
                )))
            }
        }
    };
    let send = Handover {
        conversation: None,
        caller: user.to_string(),
        request,
        client_tools: tools,
        stream: body.stream,
        toolsets: None,
        chat: Some(ChatStart {
            title,
            raw_id: body.id,
            target: guess.clone(),
            agent: Some(agent),
        }),
        output: body.output,
        probe: false,
        from_parent: false,
        traceparent,
    };
    let answer = deliver(env, config, &guess, send, request_id).await;
    kept_if_taken(env, user, &files, answer).await
}

/// Hands the send to the object `guess` names, or to the conversation it resolves the chat to.
async fn deliver(
    env: &Env,
    config: &Config,
    guess: &str,
    mut send: Handover,
    request_id: &str,
) -> Result<Response, ApiError> {
    let mut answer = ConversationClient::for_conversation(env, guess)?
        .for_request(request_id)
        .send(&send)
        .await?;
    if answer.status_code() != ELSEWHERE {
        return Ok(answer);
    }
    let resolved: TurnConversation = crate::llm::json::from_str(&answer.text().await?)?;
    send.chat = None;
    let id = resolved.id.clone();
    send.conversation = Some(checked_turn(env, resolved, config)?);
    ConversationClient::for_conversation(env, &id)?
        .for_request(request_id)
        .send(&send)
        .await
}

/// A user message's text and file parts, in order. A file part is `{type: "file", mediaType,
/// url, filename}`, its `url` a `data:` URL or an https one.
/// The last message's parts as pieces, their strings moved (a file's `data:` URL is most of the
/// body: it is not copied).
fn pieces(parts: Vec<Value>) -> Result<Vec<Piece>, ApiError> {
    let mut pieces = Vec::new();
    for (n, part) in parts.into_iter().enumerate() {
        let Value::Object(mut part) = part else {
            continue;
        };
        let mut take = |name: &str| match part.remove(name) {
            Some(Value::String(s)) => Some(s),
            _ => None,
        };
        match take("type").as_deref() {
            Some("text") => {
                if let Some(text) = take("text") {
                    pieces.push(Piece::Text(text));
                }
            }
            Some("file") => {
                let Some(url) = take("url") else {
                    return Err(ApiError::BadRequest(format!(
                        "part {} of the last message is a file without a `url`",
                        n + 1
                    )));
                };
                pieces.push(Piece::File(FileIn {
                    name: take("filename"),
                    declared: take("mediaType"),
                    source: Source::Url(url),
                }));
            }
            _ => {}
        }
    }
    Ok(pieces)
}

fn texts(parts: &[Value]) -> String {
    parts
        .iter()
        .filter(|p| p["type"] == "text")
        .filter_map(|p| p["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

fn first_user_text(messages: &[UiMessage]) -> Option<String> {
    messages
        .iter()
        .find(|m| m.role == "user")
        .map(|m| texts(&m.parts))
        .filter(|t| !t.is_empty())
}

/// Tool outputs (`output-available` / `output-error`) and approval responses
/// (`approval-responded`) in a UI message's tool parts. Earlier calls' outputs come along too;
/// the conversation's object keeps only those its paused turn waits on.
fn answers(parts: &[Value]) -> (Vec<ToolResultIn>, Vec<ApprovalIn>) {
    let mut results = Vec::new();
    let mut approvals = Vec::new();
    for part in parts {
        let kind = part["type"].as_str().unwrap_or_default();
        if !(kind.starts_with("tool-") || kind == "dynamic-tool") {
            continue;
        }
        let Some(id) = part["toolCallId"].as_str() else {
            continue;
        };
        match part["state"].as_str() {
            Some("output-available") => results.push(ToolResultIn {
                tool_call_id: id.to_string(),
                output: part["output"].clone(),
                is_error: false,
            }),
            Some("output-error") => results.push(ToolResultIn {
                tool_call_id: id.to_string(),
                output: part["errorText"].clone(),
                is_error: true,
            }),
            Some("approval-responded") => approvals.push(ApprovalIn {
                tool_call_id: id.to_string(),
                approved: part["approval"]["approved"] == true,
                reason: part["approval"]["reason"].as_str().map(str::to_string),
            }),
            _ => {}
        }
    }
    (results, approvals)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_outputs_and_approval_responses_are_read_from_the_parts() {
        let parts = vec![
            json!({"type": "step-start"}),
            json!({"type": "text", "text": "Let me check."}),
            json!({"type": "tool-pick_color", "toolCallId": "a", "state": "output-available", "input": {}, "output": {"color": "amber"}}),
            json!({"type": "tool-current_time", "toolCallId": "old", "state": "output-available", "input": {}, "output": "noon"}),
            json!({"type": "tool-current_time", "toolCallId": "streaming", "state": "input-available", "input": {}}),
            json!({"type": "tool-update_plan", "toolCallId": "b", "state": "approval-responded", "input": {}, "approval": {"id": "b", "approved": false, "reason": "no"}}),
            json!({"type": "dynamic-tool", "toolName": "x", "toolCallId": "c", "state": "output-error", "input": {}, "errorText": "boom"}),
        ];
        let (results, approvals) = answers(&parts);
        let r: Vec<(&str, &Value, bool)> = results
            .iter()
            .map(|r| (r.tool_call_id.as_str(), &r.output, r.is_error))
            .collect();
        assert_eq!(
            r,
            [
                ("a", &json!({"color": "amber"}), false),
                ("old", &json!("noon"), false),
                ("c", &json!("boom"), true)
            ]
        );
        assert_eq!(approvals.len(), 1);
        assert_eq!(
            (
                approvals[0].tool_call_id.as_str(),
                approvals[0].approved,
                approvals[0].reason.as_deref()
            ),
            ("b", false, Some("no"))
        );
    }
}
