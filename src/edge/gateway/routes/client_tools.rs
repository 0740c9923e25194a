//! Client tools as a request offers them (the message body and `useChat`'s alike): their names,
//! schemas and counts checked before they reach a model.

use crate::edge::error::ApiError;
use crate::llm::ToolDef;

pub(crate) fn yes() -> bool {
    true
}

/// Most client tools one request may offer, and the largest schema one may have.
const MAX_TOOLS: usize = 64;
const MAX_SCHEMA_BYTES: usize = 16 * 1024;

pub(crate) struct ClientTool {
    name: String,
    description: String,
    input_schema: serde_json::Value,
}

crate::json_struct!(#[deny_unknown_fields] ClientTool {
    "name" => name,
    "description" => description: default,
    "input_schema" | "parameters" | "inputSchema" => input_schema,
});

/// Tool names and call ids: what every provider accepts (the one tool-name rule).
pub(crate) fn valid_name(name: &str) -> bool {
    crate::agent::tools::is_tool_name(name)
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
                    "tool name `{}` must be 1-{} letters, digits, `_` or `-`",
                    t.name,
                    crate::agent::tools::MAX_TOOL_NAME
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
