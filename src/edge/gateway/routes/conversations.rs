//! `POST /v1/conversations`, `GET /v1/conversations/{id}`.

use serde_json::Value;
use worker::{Env, Request, Response};

use super::owned;
use crate::edge::config::agents::MAX_SYSTEM_CHARS;
use crate::edge::config::Config;
use crate::edge::conversation::client::ConversationClient;
use crate::edge::conversation::deletion::delete_whole;
use crate::edge::d1::conversations::Remembered;
use crate::edge::d1::{is_conversation_id, Conversation, Listing, Store};
use crate::edge::error::ApiError;
use crate::edge::gateway::body::json_body;
use crate::edge::json_response;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::ids::new_id;
use crate::llm::ModelRef;

struct Create {
    system: Option<String>,
    model: Option<String>,
    title: Option<String>,
    metadata: Option<Value>,
    /// The toolsets its turns may use (default: its agent's).
    toolsets: Option<Vec<String>>,
    /// The agent it belongs to (default: the deployment's default agent).
    agent: Option<String>,
    /// `false`: it is neither remembered nor given memory.
    memory: Option<bool>,
}

crate::json_struct!(#[deny_unknown_fields] Create {
    "system" => system,
    "model" => model,
    "title" => title,
    "metadata" => metadata,
    "toolsets" => toolsets,
    "agent" => agent,
    "memory" => memory,
});

pub async fn create(
    req: Request,
    env: &Env,
    config: &Config,
    user: &str,
) -> Result<Response, ApiError> {
    let body: Create = json_body(req).await?;
    let agent = config.agent(body.agent.as_deref())?;
    if let Some(model) = &body.model {
        let model = ModelRef::parse(model).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        config.check_model_for(&model, agent)?;
        // Fail now, not at the first message, on a provider we cannot serve.
        crate::edge::platform::providers::provider_for(env, config, &model, None)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    }
    if matches!(&body.metadata, Some(m) if !m.is_object()) {
        return Err(ApiError::BadRequest(
            "`metadata` must be a JSON object".into(),
        ));
    }
    check_sizes(&body)?;
    if let Some(toolsets) = &body.toolsets {
        config.check_toolsets(toolsets)?;
        agent.check_toolsets(toolsets)?;
    }
    let now = now_ms();
    let conversation = Conversation {
        id: new_id()?,
        owner: user.to_string(),
        title: body.title,
        system: body.system,
        model: body.model,
        metadata: body.metadata,
        toolsets: body.toolsets,
        // The name, resolved now: a conversation that named none keeps today's default.
        agent: Some(agent.name.clone()),
        created_at: now,
        updated_at: now,
        parent: None,
        tool_call_id: None,
        // Indexed for recall only when its agent keeps memory.
        memory: Remembered::new(agent, body.memory == Some(false)),
    };
    Store::for_owner(env, user)
        .await?
        .create_conversation(&conversation, config.max_conversations_per_user)
        .await?;
    json_response(201, &conversation)
}

/// The longest `title`, in characters.
pub const MAX_TITLE_CHARS: usize = 200;
/// The most `metadata` may take as JSON, in bytes.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;

/// A conversation's row is shared D1 space: its free-form fields are held to sizes a user
/// needs, and one past them is a 413 naming the field and its limit.
fn check_sizes(body: &Create) -> Result<(), ApiError> {
    let too_large = |field: &str, size: String, limit: String| {
        Err(ApiError::PayloadTooLarge(format!(
            "`{field}` is {size}; the limit is {limit}"
        )))
    };
    if let Some(system) = &body.system {
        let chars = system.chars().count();
        if chars > MAX_SYSTEM_CHARS {
            return too_large(
                "system",
                format!("{chars} characters"),
                format!("{MAX_SYSTEM_CHARS} characters"),
            );
        }
    }
    if let Some(title) = &body.title {
        let chars = title.chars().count();
        if chars > MAX_TITLE_CHARS {
            return too_large(
                "title",
                format!("{chars} characters"),
                format!("{MAX_TITLE_CHARS} characters"),
            );
        }
    }
    if let Some(metadata) = &body.metadata {
        let size = serde_json::to_string(metadata).map_or(usize::MAX, |s| s.len());
        if size > MAX_METADATA_BYTES {
            return too_large(
                "metadata",
                format!("{size} bytes as JSON"),
                format!("{MAX_METADATA_BYTES} bytes"),
            );
        }
    }
    Ok(())
}

pub async fn get(env: &Env, user: &str, id: &str) -> Result<Response, ApiError> {
    let conversation = owned(env, user, id).await?;
    let status = ConversationClient::for_conversation(env, &conversation.id)?
        .status()
        .await?;
    let state = match (status.running, status.paused.as_deref()) {
        (true, _) => "running",
        (false, Some("approval")) => "awaiting_approval",
        (false, Some(_)) => "awaiting_tool_results",
        (false, None) => "idle",
    };
    let mut body = serde_json::to_value(&conversation)?;
    if let Value::Object(map) = &mut body {
        map.insert("status".into(), state.into());
        map.insert(
            "queued".into(),
            serde_json::json!({"steering": status.steering, "followup": status.followup}),
        );
        // The calls its paused turn waits to have approved: a sub-agent's are in no history.
        if !status.waiting.is_empty() {
            let waiting: Vec<Value> = status
                .waiting
                .iter()
                .map(|c| serde_json::json!({"tool_call_id": c.id, "tool_name": c.name, "input": c.input}))
                .collect();
            map.insert("waiting_approval".into(), waiting.into());
        }
    }
    json_response(200, &body)
}

/// `GET /v1/conversations/{id}/stream` and `GET /v1/chat/{id}/stream`: the running turn's
/// stream from its start, then live (200), or 204 when no turn runs.
pub async fn stream(env: &Env, user: &str, id: &str) -> Result<Response, ApiError> {
    // The conversation `id` names for the caller (a `/v1/chat` id resolves to theirs).
    let owned = owned(env, user, id).await?;
    let id = owned.id.as_str();
    ConversationClient::for_conversation(env, id)?
        .stream()
        .await
}

/// `GET /v1/conversations?limit=&cursor=&parent=`: the caller's conversations, newest first;
/// those the caller started, or with `parent` the children that conversation's agent tools
/// started.
pub async fn list(req: &Request, env: &Env, user: &str) -> Result<Response, ApiError> {
    let mut limit = 20i64;
    let mut cursor: Option<(i64, String)> = None;
    let mut parent: Option<String> = None;
    for (key, value) in super::query_pairs(req) {
        match key.as_str() {
            "limit" => limit = super::query_int("limit", &value, 1, 100)?,
            "parent" if is_conversation_id(&value) => parent = Some(value),
            "parent" => {
                return Err(ApiError::BadRequest(
                    "`parent` must be a conversation id (32 lowercase hex digits)".into(),
                ))
            }
            "cursor" => {
                // `{updated_at}.{id}`, as `next_cursor` gives it out.
                let parsed = value
                    .split_once('.')
                    .filter(|(t, id)| {
                        (1..=16).contains(&t.len())
                            && t.bytes().all(|b| b.is_ascii_digit())
                            && is_conversation_id(id)
                    })
                    .and_then(|(t, id)| Some((t.parse::<i64>().ok()?, id.to_string())));
                cursor = Some(parsed.ok_or_else(|| {
                    ApiError::BadRequest("`cursor` is not one this API gave out".into())
                })?);
            }
            _ => {}
        }
    }
    let store = Store::for_owner(env, user).await?;
    let before = cursor.as_ref().map(|(t, id)| (*t, id.as_str()));
    let listing = match &parent {
        Some(parent) => Listing::ChildrenOf(parent),
        None => Listing::TopLevel,
    };
    let (conversations, next) = store
        .conversations_page(user, listing, before, limit)
        .await?;
    json_response(
        200,
        &serde_json::json!({
            "conversations": conversations,
            "next_cursor": next.map(|(t, id)| format!("{t}.{id}")),
        }),
    )
}

/// `POST /v1/conversations/{id}/cancel`: stops the running turn at once (202), or 409 if none
/// runs. Queued messages then start the next turn.
pub async fn cancel(env: &Env, user: &str, id: &str) -> Result<Response, ApiError> {
    // The conversation `id` names for the caller (a `/v1/chat` id resolves to theirs).
    let owned = owned(env, user, id).await?;
    let id = owned.id.as_str();
    if ConversationClient::for_conversation(env, id)?
        .cancel()
        .await?
    {
        json_response(202, &serde_json::json!({"cancelling": true}))
    } else {
        Err(ApiError::Conflict(format!(
            "no turn is running in conversation `{id}`"
        )))
    }
}

/// `DELETE /v1/conversations/{id}`: a running turn is cancelled and ends, then the object's
/// state and the history go.
pub async fn delete(env: &Env, user: &str, id: &str) -> Result<Response, ApiError> {
    // The conversation `id` names for the caller (a `/v1/chat` id resolves to theirs).
    let owned = owned(env, user, id).await?;
    let id = owned.id.as_str();
    let store = Store::for_owner(env, user).await?;
    if delete_whole(env, &store, id, &owned.owner).await?.is_none() {
        return Err(ApiError::conversation_not_found(id));
    }
    Ok(Response::empty()?.with_status(204))
}
