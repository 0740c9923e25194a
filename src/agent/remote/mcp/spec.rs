//! A server as `MCP_SERVERS` declares it, read and checked when the configuration is, so a
//! wrong entry is a configuration error naming it rather than a tool failing in a turn.

use std::collections::BTreeMap;

use crate::agent::remote::{check_name, host_of, MAX_RESULT_BYTES};
use crate::llm::fields::{self, Fields};

/// One entry of `MCP_SERVERS`.
#[derive(Debug, Clone, PartialEq)]
pub struct McpServerSpec {
    pub name: String,
    pub url: String,
    /// Header name → value, or `secret:NAME`.
    pub headers: BTreeMap<String, String>,
    /// Only these of the server's tools are offered (default: all).
    pub tools: Option<Vec<String>>,
    /// Tools whose calls wait for a person's approval.
    pub approval: Vec<String>,
    /// The toolset the server's tools join (default: the server's name).
    pub toolset: Option<String>,
    /// The most a result gives the model, in bytes (default
    /// [`DEFAULT_RESULT_BYTES`](crate::agent::remote::DEFAULT_RESULT_BYTES)); past it the result
    /// is cut and marked `degraded`.
    pub max_bytes: Option<usize>,
}

/// Parses and checks `MCP_SERVERS`. Errors name the entry, the server and the field.
pub fn parse_mcp_servers(json: &str) -> Result<Vec<McpServerSpec>, String> {
    let known = [
        "name",
        "url",
        "headers",
        "tools",
        "approval",
        "toolset",
        "max_bytes",
    ];
    fields::entries(json, &known, "name", read_spec, check_spec)
}

fn read_spec(f: &mut Fields) -> Result<McpServerSpec, String> {
    Ok(McpServerSpec {
        name: f.required("name", fields::STRING)?,
        url: f.required("url", fields::STRING)?,
        headers: f
            .optional("headers", fields::STRING_MAP)?
            .unwrap_or_default(),
        tools: f.optional("tools", fields::STRINGS)?,
        approval: f.optional("approval", fields::STRINGS)?.unwrap_or_default(),
        toolset: f.optional("toolset", fields::STRING)?,
        max_bytes: f.optional("max_bytes", fields::USIZE)?,
    })
}

fn check_spec(spec: &McpServerSpec) -> Result<(), String> {
    // Shorter than a tool's name: it and `__` begin the name each of the server's tools is
    // offered under (`name.rs`), which must leave that tool's own name room.
    check_name(&spec.name, 32)?;
    if host_of(&spec.url).is_none() {
        return Err("`url` must start with http:// or https://".into());
    }
    if spec
        .max_bytes
        .is_some_and(|max| max == 0 || max > MAX_RESULT_BYTES)
    {
        return Err(format!("`max_bytes` must be from 1 to {MAX_RESULT_BYTES}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_are_checked() {
        assert!(
            parse_mcp_servers(r#"[{"name": "docs", "url": "https://mcp.example/mcp"}]"#).is_ok()
        );
        let e = parse_mcp_servers(r#"[{"name": "do cs", "url": "https://x"}]"#).unwrap_err();
        assert!(e.contains("entry 0 (`do cs`)"), "{e}");
        let e = parse_mcp_servers(r#"[{"name": "d", "url": "x"}]"#).unwrap_err();
        assert!(e.contains("`url`"), "{e}");
        let e =
            parse_mcp_servers(r#"[{"name": "d", "url": "https://x", "tool": []}]"#).unwrap_err();
        assert!(e.contains("unknown field `tool`"), "{e}");
        // A server's own limit, and a limit past what a history row holds refused.
        let servers = parse_mcp_servers(
            r#"[{"name": "d", "url": "https://mcp.example/", "max_bytes": 100}]"#,
        )
        .unwrap();
        assert_eq!(servers[0].max_bytes, Some(100));
        let e = parse_mcp_servers(
            r#"[{"name": "d", "url": "https://mcp.example/", "max_bytes": 100000000}]"#,
        )
        .unwrap_err();
        assert!(e.contains("`max_bytes` must be from 1 to"), "{e}");
    }
}
