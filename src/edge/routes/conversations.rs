//! `POST /v1/conversations`, `GET /v1/conversations/{id}`.

use serde::Deserialize;
use serde_json::Value;
use worker::{Env, Request, Response};

use crate::edge::coordinator::Coordinator;
use crate::edge::error::ApiError;
use crate::edge::store::{Conversation, Store};
use crate::edge::{config, json_body, json_response, new_id, now_ms};
use crate::llm::ModelRef;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Create {
    system: Option<String>,
    model: Option<String>,
    title: Option<String>,
    metadata: Option<Value>,
}

pub async fn create(req: Request, env: &Env, user: &str) -> Result<Response, ApiError> {
    let body: Create = json_body(req).await?;
    if let Some(model) = &body.model {
        let model = ModelRef::parse(model).map_err(|e| ApiError::BadRequest(e.to_string()))?;
        // Fail now, not at the first message, on a provider we cannot serve.
        crate::edge::turn::provider_for(env, &config(env)?, &model)
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    }
    if matches!(&body.metadata, Some(m) if !m.is_object()) {
        return Err(ApiError::BadRequest(
            "`metadata` must be a JSON object".into(),
        ));
    }
    let now = now_ms();
    let conversation = Conversation {
        id: new_id()?,
        owner: user.to_string(),
        title: body.title,
        system: body.system,
        model: body.model,
        metadata: body.metadata,
        created_at: now,
        updated_at: now,
    };
    Store::new(env.d1("DB")?)
        .create_conversation(&conversation)
        .await?;
    json_response(201, &conversation)
}

pub async fn get(env: &Env, user: &str, id: &str) -> Result<Response, ApiError> {
    let conversation = Store::new(env.d1("DB")?)
        .conversation(user, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    let status = Coordinator::for_conversation(env, id, config(env)?.lease_ttl_ms)?
        .status()
        .await?;
    let mut body = serde_json::to_value(&conversation)?;
    if let Value::Object(map) = &mut body {
        let state = if status.running { "running" } else { "idle" };
        map.insert("status".into(), state.into());
        map.insert("queued".into(), status.queued.into());
    }
    json_response(200, &body)
}

pub fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("conversation `{id}` does not exist"))
}
