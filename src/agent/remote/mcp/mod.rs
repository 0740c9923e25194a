//! MCP servers as tools (`MCP_SERVERS`): a client for the Streamable HTTP transport, written
//! over [`HttpTransport`](crate::llm::HttpTransport) so it runs on `fetch` at the edge and on
//! scripted bytes in tests.
//!
//! Protocol revisions 2025-11-25 and 2025-06-18 (and 2025-03-26, which they extend): the
//! `initialize` handshake, then `notifications/initialized`; `Mcp-Session-Id` and
//! `MCP-Protocol-Version` on every later request; a 404 to a request that carried a session
//! starts a new session. Responses come as JSON or as an SSE stream holding the answer.
//! `tools/list` is read page by page; `tools/call` results become tool results the model reads.
//!
//! - `spec.rs`: a server as `MCP_SERVERS` declares it, parsed and checked
//! - `client.rs`: the JSON-RPC client of one server: its session, `tools/list`, `tools/call`
//! - `result.rs`: a `tools/call` result as the model reads it, held to its size
//! - `name.rs`: the name a server's tool is offered to the model under
//! - `tool.rs`: a server's tool as the agent calls it, retried behind a circuit breaker

mod client;
mod name;
mod result;
mod spec;
#[cfg(test)]
mod testing;
mod tool;

pub use client::{McpClient, McpError, McpToolInfo, PROTOCOL_VERSION};
pub use name::exposed_name;
pub use result::tool_result;
pub use spec::{parse_mcp_servers, McpServerSpec};
pub use tool::McpTool;
