//! The deployment as an MCP server (`POST /mcp`, in `gateway::routes::mcp`): every agent a tool,
//! `ask_<agent>`, that runs a turn of it for the caller. The protocol's pure parts, tested
//! natively; the MCP servers our agents call as tools are `agent::remote::mcp`'s.
//!
//! - [`rpc`]: JSON-RPC messages, the protocol revisions spoken, SSE framing
//! - [`tools`]: the tools listed and a call's arguments
//! - [`answer`]: a turn's stream as a call's result

pub mod answer;
pub mod rpc;
pub mod tools;
