//! `GET /v1/agents`: the agents a conversation may belong to (`AGENTS`), without their
//! instructions: a name, what it is for, its model, the tools it may use, the agents it asks
//! and those it may hand a conversation to.

use worker::Response;

use crate::edge::config::Config;
use crate::edge::error::ApiError;
use crate::edge::json_response;

pub fn list(config: &Config) -> Result<Response, ApiError> {
    let default = config.agent(None)?.name.as_str();
    let agents: Vec<_> = config
        .agents
        .iter()
        .map(|a| {
            serde_json::json!({
                "name": a.name,
                "description": a.description,
                "model": a.model.to_string(),
                "toolsets": a.toolsets,
                "tools": a.tools,
                "agents": a.agent_tools.iter().map(|t| &t.agent).collect::<Vec<_>>(),
                "handoffs": a.handoffs.iter().map(|h| &h.agent).collect::<Vec<_>>(),
                "output": a.output.is_some(),
            })
        })
        .collect();
    json_response(
        200,
        &serde_json::json!({"default": default, "agents": agents}),
    )
}
