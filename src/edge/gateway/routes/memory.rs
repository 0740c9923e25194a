//! The user's memory, theirs to see and change: `GET /v1/me/memory` (their working memory with
//! each agent that keeps one), `PUT`/`PATCH`/`DELETE /v1/me/memory/{agent}`, and
//! `GET /v1/me/memory/search?q=` (what recall would find for `q`).

use serde_json::{json, Value};
use worker::{Env, Request, Response};

use crate::agent::memory::recall::search_terms;
use crate::agent::memory::{MemoryError, MemoryStore, Shape};
use crate::edge::config::memory::{MemorySpec, MAX_TOP_K};
use crate::edge::config::Config;
use crate::edge::conversation::turn::memory::D1Memory;
use crate::edge::d1::memory::MemoryRow;
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::gateway::body::json_body;
use crate::edge::json_response;

/// `GET /v1/me/memory`: each agent that keeps memory, with what it keeps of the caller (its
/// initial document, version 0, when nothing yet), and what is kept for agents the deployment
/// no longer declares.
pub async fn list(env: &Env, config: &Config, user: &str) -> Result<Response, ApiError> {
    let mut rows = Store::for_owner(env, user).await?.memories(user).await?;
    let mut entries = Vec::new();
    for agent in &config.agents {
        let Some(spec) = &agent.memory else { continue };
        let kept = rows
            .iter()
            .position(|r| r.agent == agent.name)
            .map(|at| rows.remove(at));
        entries.push(entry(&agent.name, Some(spec), kept));
    }
    entries.extend(
        rows.into_iter()
            .map(|r| entry(&r.agent.clone(), None, Some(r))),
    );
    json_response(200, &json!({"memory": entries}))
}

/// `PUT /v1/me/memory/{agent}` (`whole`): `{"memory": ...}` replaces the caller's memory with
/// the agent (a JSON object valid against its schema, or text). `PATCH`: a JSON Merge Patch on
/// a memory with a schema.
pub async fn change(
    req: Request,
    env: &Env,
    config: &Config,
    user: &str,
    (agent, whole): (&str, bool),
) -> Result<Response, ApiError> {
    let spec = keeping(config, agent)?;
    if !whole && matches!(&*spec.shape, Shape::Template(_)) {
        return Err(ApiError::BadRequest(format!(
            "the agent `{agent}` keeps its memory as text: replace it whole with PUT"
        )));
    }
    let body: Value = json_body(req).await?;
    let update = match (whole, body) {
        (false, patch) => patch,
        (true, Value::Object(mut fields)) if fields.contains_key("memory") => {
            fields.remove("memory").unwrap_or_default()
        }
        (true, _) => {
            return Err(ApiError::BadRequest(
                "the body must be `{\"memory\": ...}`: the whole new memory".into(),
            ))
        }
    };
    let max = config.memory.max_bytes;
    let shape = spec.shape.clone();
    let kept = write(env, user, agent, &spec, &|current| match whole {
        true => shape.replace(&update, max),
        false => shape.apply(current, &update, max),
    })
    .await?;
    json_response(200, &entry(agent, Some(&spec), kept))
}

/// `DELETE /v1/me/memory/{agent}`: the caller's memory with the agent is forgotten (also for
/// an agent the deployment no longer declares). 204 either way. An agent's that keeps memory
/// goes back to its initial document at a new version, rather than losing its row: a turn's
/// update made on what was forgotten then cannot land as if nothing had happened.
pub async fn delete(
    env: &Env,
    config: &Config,
    user: &str,
    agent: &str,
) -> Result<Response, ApiError> {
    let store = Store::for_owner(env, user).await?;
    match keeping(config, agent) {
        Ok(spec) => {
            store
                .clear_memory(user, agent, &spec.shape.initial())
                .await?
        }
        Err(_) => store.delete_memory(user, agent).await?,
    };
    Ok(Response::empty()?.with_status(204))
}

/// `GET /v1/me/memory/search?q=&limit=`: the messages of the caller's conversations recall
/// would find for `q`, best first.
pub async fn search(
    req: &Request,
    env: &Env,
    config: &Config,
    user: &str,
) -> Result<Response, ApiError> {
    let mut q = None;
    let mut limit = 5;
    for (key, value) in super::query_pairs(req) {
        match key.as_str() {
            "q" => q = Some(value),
            "limit" => {
                limit = value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_TOP_K).contains(n))
                    .ok_or_else(|| {
                        ApiError::BadRequest(format!("`limit` must be from 1 to {MAX_TOP_K}"))
                    })?;
            }
            _ => {}
        }
    }
    let Some(q) = q.filter(|q| !q.trim().is_empty()) else {
        return Err(ApiError::BadRequest(
            "`q` is required: what to look for".into(),
        ));
    };
    // Where no agent keeps memory nothing is indexed, and the index is not made for a search
    // (its virtual table would stop `wrangler d1 export`).
    let remembering = config.agents.iter().any(|a| a.memory.is_some());
    let found = match search_terms(&q).filter(|_| remembering) {
        Some(terms) => {
            let store = Store::for_owner(env, user).await?;
            store.ensure_recall().await?;
            store.recall(user, &terms, None, limit).await?
        }
        None => Vec::new(),
    };
    let results: Vec<Value> = found
        .into_iter()
        .map(|r| {
            json!({
                "conversation_id": r.conversation_id,
                "title": r.title,
                "message_id": r.message_id,
                "role": r.role,
                "created_at": r.created_at,
                "text": r.text,
            })
        })
        .collect();
    json_response(200, &json!({"results": results}))
}

/// The memory spec of `agent`, or a 404 naming why there is none.
fn keeping(config: &Config, agent: &str) -> Result<std::rc::Rc<MemorySpec>, ApiError> {
    let spec = config.agents.iter().find(|a| a.name == agent);
    match spec.map(|a| a.memory.clone()) {
        Some(Some(spec)) => Ok(spec),
        Some(None) => Err(ApiError::NotFound(format!(
            "the agent `{agent}` keeps no memory"
        ))),
        None => Err(ApiError::NotFound(format!("there is no agent `{agent}`"))),
    }
}

/// Changes the caller's memory with `agent` as a turn's `update_memory` does (against other
/// writers); what is kept after (none: the change left the initial document, never written).
async fn write(
    env: &Env,
    user: &str,
    agent: &str,
    spec: &MemorySpec,
    change: &dyn for<'a> Fn(&'a str) -> Result<String, String>,
) -> Result<Option<MemoryRow>, ApiError> {
    let store = std::rc::Rc::new(Store::for_owner(env, user).await?);
    let memory = D1Memory {
        store: store.clone(),
        owner: user.to_string(),
        agent: agent.to_string(),
        initial: spec.shape.initial(),
        from: None,
    };
    memory.update(change).await.map_err(|e| match e {
        MemoryError::Refused(why) => ApiError::BadRequest(why),
        MemoryError::Busy(why) => ApiError::Conflict(why),
        MemoryError::Failed(why) => ApiError::Internal(why),
    })?;
    store.memory(user, agent).await
}

/// One agent's memory as the API shows it: a schema's document as JSON, text as a string.
fn entry(agent: &str, spec: Option<&std::rc::Rc<MemorySpec>>, kept: Option<MemoryRow>) -> Value {
    let (body, version, updated_at) = match kept {
        Some(row) => (row.body, row.version, Some(row.updated_at)),
        None => (spec.map(|s| s.shape.initial()).unwrap_or_default(), 0, None),
    };
    let schema = spec.is_some_and(|s| matches!(&*s.shape, Shape::Schema(_)));
    let memory = if schema {
        crate::llm::json::from_str::<Value>(&body).unwrap_or(Value::String(body))
    } else {
        Value::String(body)
    };
    json!({
        "agent": agent,
        "memory": memory,
        "kind": if schema { "schema" } else { "text" },
        "managed_by": spec.map(|s| if s.background { "background" } else { "tool" }),
        "version": version,
        "updated_at": updated_at,
    })
}
