//! `GET /v1/models`: the model registry (the models users may choose, when `ALLOWED_MODELS`
//! limits them), and which model a new conversation gets (its default agent's).

use worker::Response;

use crate::edge::config::Config;
use crate::edge::error::ApiError;
use crate::edge::json_response;

pub fn list(config: &Config) -> Result<Response, ApiError> {
    let agent = config.agent(None)?;
    json_response(
        200,
        &serde_json::json!({
            "default": agent.model.to_string(),
            "fallbacks": agent.fallback_models.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "models": config
                .models
                .entries()
                .into_iter()
                .filter(|m| m["id"].as_str().is_some_and(|id| config.allows(id)))
                .collect::<Vec<_>>(),
        }),
    )
}
