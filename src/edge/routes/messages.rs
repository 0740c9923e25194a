//! `POST /v1/conversations/{id}/messages` (run or queue a turn) and
//! `GET /v1/conversations/{id}/messages` (history).

use serde::Deserialize;
use worker::{Context, Env, Request, Response};

use super::conversations::not_found;
use crate::agent::AgentMessage;
use crate::agent::{pending_calls, Approval};
use crate::edge::config::Config;
use crate::edge::coordinator::{Delivery, Submitted};
use crate::edge::error::ApiError;
use crate::edge::store::Store;
use crate::edge::turn::Turn;
use crate::edge::{json_body, json_response};
use crate::llm::{ContentBlock, ToolDef};

/// Longest user message accepted, in bytes.
const MAX_MESSAGE_BYTES: usize = 100_000;

#[derive(Deserialize)]
struct Send {
    message: Option<UserContent>,
    /// Tools the client runs, offered to the model for this turn.
    #[serde(default)]
    tools: Vec<ClientTool>,
    /// Results for the client tool calls a paused turn waits on.
    #[serde(default)]
    tool_results: Vec<ToolResultIn>,
    /// Decisions on the calls a paused turn waits to have approved.
    #[serde(default)]
    approvals: Vec<ApprovalIn>,
    #[serde(default)]
    delivery: DeliveryRequest,
    /// `false` returns the whole turn as JSON instead of streaming it.
    #[serde(default = "yes")]
    stream: bool,
}

pub(crate) fn yes() -> bool {
    true
}

/// Most client tools one request may offer, and the largest schema one may have.
const MAX_TOOLS: usize = 64;
const MAX_SCHEMA_BYTES: usize = 16 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClientTool {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(alias = "parameters", alias = "inputSchema")]
    input_schema: serde_json::Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ToolResultIn {
    pub tool_call_id: String,
    pub output: serde_json::Value,
    #[serde(default)]
    pub is_error: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ApprovalIn {
    pub tool_call_id: String,
    pub approved: bool,
    pub reason: Option<String>,
}

/// Tool names and call ids: what every provider accepts.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

pub(crate) fn client_tools(tools: Vec<ClientTool>) -> Result<Vec<ToolDef>, ApiError> {
    if tools.len() > MAX_TOOLS {
        return Err(ApiError::BadRequest(format!(
            "{} tools were sent; at most {MAX_TOOLS} are accepted",
            tools.len()
        )));
    }
    tools
        .into_iter()
        .map(|t| {
            if !valid_name(&t.name) {
                return Err(ApiError::BadRequest(format!(
                    "tool name `{}` must be 1-64 letters, digits, `_` or `-`",
                    t.name
                )));
            }
            if !t.input_schema.is_object() {
                return Err(ApiError::BadRequest(format!(
                    "the input_schema of `{}` must be a JSON Schema object",
                    t.name
                )));
            }
            if t.input_schema.to_string().len() > MAX_SCHEMA_BYTES {
                return Err(ApiError::PayloadTooLarge(format!(
                    "the input_schema of `{}` is over {MAX_SCHEMA_BYTES} bytes",
                    t.name
                )));
            }
            Ok(ToolDef {
                name: t.name,
                description: t.description,
                input_schema: t.input_schema,
            })
        })
        .collect()
}

/// How a message joins a running turn: `auto` and `steer` before its next tool call,
/// `followup` when it would end. With no turn running, all three start one.
#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum DeliveryRequest {
    #[default]
    Auto,
    Steer,
    Followup,
}

/// `"text"` or `[{"type": "text", "text": "..."}]`.
#[derive(Deserialize)]
#[serde(untagged)]
enum UserContent {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Part {
    Text { text: String },
}

impl UserContent {
    fn into_message(self) -> Result<AgentMessage, ApiError> {
        let content: Vec<ContentBlock> = match self {
            UserContent::Text(text) => vec![ContentBlock::Text { text }],
            UserContent::Parts(parts) => parts
                .into_iter()
                .map(|Part::Text { text }| ContentBlock::Text { text })
                .collect(),
        };
        let size: usize = content
            .iter()
            .map(|b| match b {
                ContentBlock::Text { text } => text.len(),
                _ => 0,
            })
            .sum();
        if size == 0 {
            return Err(ApiError::BadRequest("`message` is empty".into()));
        }
        if size > MAX_MESSAGE_BYTES {
            return Err(ApiError::PayloadTooLarge(format!(
                "`message` is {size} bytes; the limit is {MAX_MESSAGE_BYTES}"
            )));
        }
        Ok(AgentMessage::User { content })
    }
}

pub async fn send(
    req: Request,
    env: &Env,
    ctx: &Context,
    config: &Config,
    user: &str,
    id: &str,
) -> Result<Response, ApiError> {
    let body: Send = json_body(req).await?;
    let resuming = !body.tool_results.is_empty() || !body.approvals.is_empty();
    let message = match body.message {
        Some(content) => Some(content.into_message()?),
        None if resuming => None,
        None => {
            return Err(ApiError::BadRequest(
                "`message` is required (or `tool_results` / `approvals` for a paused turn)".into(),
            ))
        }
    };
    let mut turn = Turn::prepare(env, config, user, id).await?;
    turn.client_tools = client_tools(body.tools)?;
    if resuming {
        return resume(
            turn,
            ctx,
            message,
            body.tool_results,
            body.approvals,
            body.stream,
        )
        .await;
    }
    let Some(message) = message else {
        return Err(ApiError::BadRequest("`message` is required".into()));
    };
    let delivery = match body.delivery {
        DeliveryRequest::Auto | DeliveryRequest::Steer => Delivery::Steering,
        DeliveryRequest::Followup => Delivery::Followup,
    };
    run_or_queue(turn, ctx, message, delivery, body.stream).await
}

/// Runs a turn for `message`, or queues it for the turn already running.
pub(crate) async fn run_or_queue(
    turn: Turn,
    ctx: &Context,
    message: AgentMessage,
    delivery: Delivery,
    stream: bool,
) -> Result<Response, ApiError> {
    match turn
        .coordinator
        .submit(&turn.id, &message, delivery)
        .await?
    {
        Submitted::Queued { delivery, position } => json_response(
            202,
            &serde_json::json!({"queued": delivery.as_str(), "position": position}),
        ),
        Submitted::Acquired { stranded } => {
            let mut incoming = readable(&stranded);
            incoming.push(message);
            turn.start(ctx, incoming, stream).await
        }
        Submitted::Busy => Err(ApiError::Internal(
            "the coordinator refused a message".into(),
        )),
    }
}

/// Answers the calls a paused turn waits on and runs it on. Every id must be one the turn
/// waits for; results for unknown or already answered calls are a 409.
pub(crate) async fn resume(
    mut turn: Turn,
    ctx: &Context,
    message: Option<AgentMessage>,
    results: Vec<ToolResultIn>,
    approvals: Vec<ApprovalIn>,
    stream: bool,
) -> Result<Response, ApiError> {
    let history = turn.store.history(&turn.conversation.id).await?;
    let pending: Vec<String> = pending_calls(&history).into_iter().map(|c| c.id).collect();
    let given = results
        .iter()
        .map(|r| &r.tool_call_id)
        .chain(approvals.iter().map(|a| &a.tool_call_id));
    for id in given {
        if !pending.contains(id) {
            return Err(ApiError::Conflict(format!(
                "tool call `{id}` is not waiting for an answer (unknown, or already answered)"
            )));
        }
    }
    for r in results {
        let content = match r.output {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        turn.answers
            .results
            .insert(r.tool_call_id, (content, r.is_error));
    }
    for a in approvals {
        let approval = Approval {
            approved: a.approved,
            reason: a.reason,
        };
        turn.answers.approvals.insert(a.tool_call_id, approval);
    }
    match turn.coordinator.acquire(&turn.id).await? {
        Submitted::Acquired { stranded } => {
            let mut incoming = readable(&stranded);
            incoming.extend(message);
            turn.start(ctx, incoming, stream).await
        }
        Submitted::Busy | Submitted::Queued { .. } => Err(ApiError::Conflict(format!(
            "a turn is running in conversation `{}`",
            turn.conversation.id
        ))),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Retry {
    #[serde(default = "yes")]
    stream: bool,
}

/// `POST /v1/conversations/{id}/retry`: runs the last user message again. What followed it stays
/// in the history, marked superseded, and is never sent to a model again.
pub async fn retry(
    req: Request,
    env: &Env,
    ctx: &Context,
    config: &Config,
    user: &str,
    id: &str,
) -> Result<Response, ApiError> {
    let body: Retry = json_body(req).await?;
    let turn = Turn::prepare(env, config, user, id).await?;
    retry_turn(turn, ctx, body.stream).await
}

/// Runs the conversation's last user message again (see `retry`).
pub(crate) async fn retry_turn(
    turn: Turn,
    ctx: &Context,
    stream: bool,
) -> Result<Response, ApiError> {
    let id = turn.conversation.id.clone();
    match turn.coordinator.acquire(&turn.id).await? {
        Submitted::Acquired { stranded } => {
            let retried = match turn.store.supersede_after_last_user(&id).await {
                Ok(found) => found,
                Err(e) => {
                    turn.release().await;
                    return Err(e);
                }
            };
            if !retried && stranded.is_empty() {
                turn.release().await;
                return Err(ApiError::BadRequest(format!(
                    "conversation `{id}` has no user message to retry"
                )));
            }
            turn.start(ctx, readable(&stranded), stream).await
        }
        Submitted::Busy | Submitted::Queued { .. } => Err(ApiError::Conflict(format!(
            "a turn is running in conversation `{id}`; cancel it or wait before retrying"
        ))),
    }
}

/// Messages a dead turn left queued, in the order they were sent.
fn readable(stranded: &[String]) -> Vec<AgentMessage> {
    stranded
        .iter()
        .filter_map(|m| match serde_json::from_str(m) {
            Ok(message) => Some(message),
            Err(e) => {
                worker::console_error!("dropping an unreadable queued message: {e}: {m}");
                None
            }
        })
        .collect()
}

pub async fn list(req: &Request, env: &Env, user: &str, id: &str) -> Result<Response, ApiError> {
    let store = Store::new(env.d1("DB")?);
    store
        .conversation(user, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    let url = req.url()?;
    let mut after = 0i64;
    let mut limit = 100i64;
    for (key, value) in url.query_pairs() {
        let parsed = value.parse::<i64>().map_err(|_| {
            ApiError::BadRequest(format!("`{key}` must be a whole number, got `{value}`"))
        });
        match key.as_ref() {
            "after" => after = parsed?.max(0),
            "limit" => limit = parsed?.clamp(1, 500),
            _ => {}
        }
    }
    let (messages, next) = store.history_page(id, after, limit).await?;
    json_response(
        200,
        &serde_json::json!({"messages": messages, "next_cursor": next.map(|n| n.to_string())}),
    )
}
