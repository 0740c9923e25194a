//! The client of one MCP server: JSON-RPC over the Streamable HTTP transport, its session kept
//! and renewed, the server's tools listed and called.

use std::cell::{Cell, RefCell};

use futures::StreamExt;
use serde_json::{json, Map, Value};
use thiserror::Error;

use super::result::{capped, tool_result};
use super::spec::McpServerSpec;
use crate::agent::remote::redirects::{self, SendError};
use crate::agent::remote::{failure, resolve_headers, DEFAULT_RESULT_BYTES};
use crate::llm::sse::SseDecoder;
use crate::llm::{ApiRequest, HttpTransport};

/// The revision offered in `initialize`, and the ones accepted back.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
const SUPPORTED_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// Most of a response read, in bytes.
const MAX_READ_BYTES: usize = 4 << 20;
/// Most `tools/list` pages read from one server.
const MAX_PAGES: usize = 20;

/// What went wrong talking to a server.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum McpError {
    #[error("the server could not be reached: {0}")]
    Network(String),
    #[error("the server answered HTTP {status}{detail}")]
    Http { status: u16, detail: String },
    #[error("the server broke the protocol: {0}")]
    Protocol(String),
    #[error("the server refused: {message} (JSON-RPC error {code})")]
    Rpc { code: i64, message: String },
}

impl McpError {
    /// Worth another attempt (and a failure of the service, for its circuit breaker).
    pub fn retryable(&self) -> bool {
        match self {
            McpError::Network(_) => true,
            McpError::Http { status, .. } => *status >= 500 || *status == 429,
            McpError::Protocol(_) | McpError::Rpc { .. } => false,
        }
    }
}

/// A tool a server offers.
#[derive(Debug, Clone, PartialEq)]
pub struct McpToolInfo {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

#[derive(Debug, Clone, PartialEq)]
struct Session {
    id: Option<String>,
    version: String,
}

/// One server's client; its session outlives a turn (kept per isolate by the application).
pub struct McpClient {
    pub spec: McpServerSpec,
    /// The headers with their secrets resolved.
    headers: Vec<(String, String)>,
    /// Their names: they go to the server's own origin only, never to where it redirects.
    configured_headers: Vec<String>,
    session: RefCell<Option<Session>>,
    next_id: Cell<u64>,
    allow_private_hosts: bool,
}

impl McpClient {
    /// `secret` resolves `secret:NAME` header values; a missing one is a configuration error.
    pub fn new(
        spec: McpServerSpec,
        secret: &dyn Fn(&str) -> Option<String>,
        allow_private_hosts: bool,
    ) -> Result<Self, String> {
        let headers = resolve_headers(&spec.name, &spec.headers, secret)?;
        let configured_headers = headers.iter().map(|(name, _)| name.clone()).collect();
        Ok(Self {
            spec,
            headers,
            configured_headers,
            session: RefCell::default(),
            next_id: Cell::new(1),
            allow_private_hosts,
        })
    }

    /// Every tool the server offers (all pages), filtered by the `tools` allow-list.
    pub async fn list_tools(
        &self,
        transport: &dyn HttpTransport,
    ) -> Result<Vec<McpToolInfo>, McpError> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request(transport, "tools/list", params).await?;
            let listed = page
                .get("tools")
                .and_then(Value::as_array)
                .ok_or_else(|| McpError::Protocol("tools/list answered without `tools`".into()))?;
            for tool in listed {
                let Some(name) = tool.get("name").and_then(Value::as_str) else {
                    continue;
                };
                if self
                    .spec
                    .tools
                    .as_ref()
                    .is_some_and(|allowed| !allowed.iter().any(|a| a == name))
                {
                    continue;
                }
                tools.push(McpToolInfo {
                    name: name.to_string(),
                    description: tool
                        .get("description")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    input_schema: tool
                        .get("inputSchema")
                        .filter(|s| s.is_object())
                        .cloned()
                        .unwrap_or_else(|| json!({"type": "object"})),
                });
            }
            cursor = page
                .get("nextCursor")
                .and_then(Value::as_str)
                .map(str::to_string);
            if cursor.is_none() {
                break;
            }
        }
        Ok(tools)
    }

    /// Calls a tool; the answer is the tool result the model reads.
    pub async fn call_tool(
        &self,
        transport: &dyn HttpTransport,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Result<Value, String>, McpError> {
        let result = self
            .request(
                transport,
                "tools/call",
                json!({"name": name, "arguments": arguments}),
            )
            .await;
        let max = self.spec.max_bytes.unwrap_or(DEFAULT_RESULT_BYTES);
        match result {
            Ok(result) => Ok(capped(tool_result(&result), max)),
            // The server ran and said no: the model reads why.
            Err(McpError::Rpc { code, message }) => Ok(Err(failure(format!(
                "the server refused the call: {message} (JSON-RPC error {code})"
            )))),
            Err(e) => Err(e),
        }
    }

    /// A request in the current session (initialising one first if there is none); a session
    /// the server no longer knows (404) is replaced once.
    async fn request(
        &self,
        transport: &dyn HttpTransport,
        method: &str,
        params: Value,
    ) -> Result<Value, McpError> {
        for fresh in [false, true] {
            let session = self.session(transport).await?;
            match self
                .exchange(transport, method, &params, Some(&session))
                .await
            {
                Err(McpError::Http { status: 404, .. }) if session.id.is_some() && !fresh => {
                    *self.session.borrow_mut() = None;
                }
                other => return other,
            }
        }
        Err(McpError::Protocol(
            "the session could not be renewed".into(),
        ))
    }

    async fn session(&self, transport: &dyn HttpTransport) -> Result<Session, McpError> {
        if let Some(session) = self.session.borrow().clone() {
            return Ok(session);
        }
        let mut response = self
            .post(
                transport,
                self.message(
                    "initialize",
                    json!({
                        "protocolVersion": PROTOCOL_VERSION,
                        "capabilities": {},
                        "clientInfo": {"name": "edge-agent", "version": env!("CARGO_PKG_VERSION")}
                    }),
                ),
                None,
            )
            .await?;
        let id = response.session_id.take();
        let result = response.answer()?;
        let version = result
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(McpError::Protocol(format!(
                "it speaks protocol revision `{version}`; this client speaks {}",
                SUPPORTED_VERSIONS.join(", ")
            )));
        }
        let session = Session {
            id,
            version: version.to_string(),
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.post(transport, initialized, Some(&session)).await?;
        *self.session.borrow_mut() = Some(session.clone());
        Ok(session)
    }

    async fn exchange(
        &self,
        transport: &dyn HttpTransport,
        method: &str,
        params: &Value,
        session: Option<&Session>,
    ) -> Result<Value, McpError> {
        self.post(transport, self.message(method, params.clone()), session)
            .await?
            .answer()
    }

    fn message(&self, method: &str, params: Value) -> Value {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
    }

    /// Posts one JSON-RPC message; for a request, finds its answer in the JSON or SSE body.
    async fn post(
        &self,
        transport: &dyn HttpTransport,
        message: Value,
        session: Option<&Session>,
    ) -> Result<Posted, McpError> {
        let mut headers = self.headers.clone();
        headers.push(("content-type".into(), "application/json".into()));
        headers.push((
            "accept".into(),
            "application/json, text/event-stream".into(),
        ));
        if let Some(session) = session {
            if let Some(id) = &session.id {
                headers.push(("mcp-session-id".into(), id.clone()));
            }
            headers.push(("mcp-protocol-version".into(), session.version.clone()));
        }
        let request = ApiRequest {
            method: "POST",
            url: self.spec.url.clone(),
            headers,
            body: Some(message.to_string()),
        };
        let configured = &self.configured_headers;
        let response = redirects::send(transport, request, self.allow_private_hosts, configured)
            .await
            .map_err(|e| match e {
                SendError::Network(e) => McpError::Network(e),
                SendError::Refused(e) => McpError::Protocol(e),
            })?;
        let status = response.status;
        let session_id = response.header("mcp-session-id").map(str::to_string);
        let is_sse = response
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/event-stream"));
        let body = read(response.body).await?;
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned();
            let detail = if text.trim().is_empty() {
                String::new()
            } else {
                format!(": {}", text.trim())
            };
            return Err(McpError::Http { status, detail });
        }
        let Some(id) = message.get("id").cloned() else {
            return Ok(Posted {
                session_id,
                reply: None,
            }); // a notification: 202, nothing to read
        };
        let reply = if is_sse {
            let mut found = None;
            let mut decoder = SseDecoder::new();
            let mut on_frame = |_: &str, data: &str| -> Result<(), ()> {
                if let Ok(value) = crate::llm::json::from_str::<Value>(data) {
                    if value.get("id") == Some(&id) && found.is_none() {
                        found = Some(value);
                    }
                }
                Ok(())
            };
            let _ = decoder.push(&body, &mut on_frame);
            let _ = decoder.finish(&mut on_frame);
            found
        } else {
            std::str::from_utf8(&body)
                .ok()
                .and_then(|text| crate::llm::json::from_str::<Value>(text).ok())
                .filter(|reply| reply.get("id") == Some(&id))
        };
        let reply = reply.ok_or_else(|| {
            McpError::Protocol(format!("no answer to request {id} in the response"))
        })?;
        Ok(Posted {
            session_id,
            reply: Some(reply),
        })
    }
}

/// What a POST brought back.
struct Posted {
    session_id: Option<String>,
    reply: Option<Value>,
}

impl Posted {
    /// The JSON-RPC result, or its error.
    fn answer(self) -> Result<Value, McpError> {
        let mut reply = self
            .reply
            .ok_or_else(|| McpError::Protocol("no reply".into()))?;
        if let Some(error) = reply.get("error") {
            return Err(McpError::Rpc {
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message")
                    .to_string(),
            });
        }
        reply
            .get_mut("result")
            .map(Value::take)
            .ok_or_else(|| McpError::Protocol("a reply with neither result nor error".into()))
    }
}

async fn read(mut body: crate::llm::ByteStream) -> Result<Vec<u8>, McpError> {
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(McpError::Network)?;
        if out.len() + chunk.len() > MAX_READ_BYTES {
            return Err(McpError::Protocol(format!(
                "a response over {MAX_READ_BYTES} bytes"
            )));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::remote::mcp::testing::{client, run, Server};

    #[test]
    fn handshake_then_tools_listed_page_by_page_over_json_and_sse() {
        let server = Server::default();
        server.handshake("s-1");
        // Page 1 as an SSE stream: a progress notification first, then the answer.
        server.answer(
            200,
            "text/event-stream",
            None,
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n\
             event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":ID,\"result\":{\"tools\":[{\"name\":\"search\",\"description\":\"Search the docs\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}},{\"name\":\"secret_admin\",\"inputSchema\":{\"type\":\"object\"}}],\"nextCursor\":\"p2\"}}\n\n",
        );
        server.json(json!({"tools": [{"name": "fetch_page", "description": "A page"}]}));
        let c = client(Some(vec!["search", "fetch_page"]));
        let tools = run(c.list_tools(&server)).unwrap();
        assert_eq!(
            tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            vec!["search", "fetch_page"],
            "the allow-list leaves secret_admin out"
        );
        assert_eq!(tools[0].input_schema["properties"]["q"]["type"], "string");
        assert_eq!(tools[1].input_schema, json!({"type": "object"}));
        // initialize: no session yet, the offered revision, the secret header.
        assert_eq!(server.body(0)["method"], "initialize");
        assert_eq!(
            server.body(0)["params"]["protocolVersion"],
            PROTOCOL_VERSION
        );
        assert_eq!(server.header(0, "mcp-session-id"), None);
        assert_eq!(
            server.header(0, "authorization").as_deref(),
            Some("Bearer t0k")
        );
        assert_eq!(
            server.header(0, "accept").as_deref(),
            Some("application/json, text/event-stream")
        );
        // Then the notification and both pages in the session, at the negotiated revision.
        assert_eq!(server.body(1)["method"], "notifications/initialized");
        assert!(server.body(1).get("id").is_none());
        for i in 1..4 {
            assert_eq!(server.header(i, "mcp-session-id").as_deref(), Some("s-1"));
            assert_eq!(
                server.header(i, "mcp-protocol-version").as_deref(),
                Some("2025-06-18")
            );
        }
        assert_eq!(server.body(2)["params"], json!({}));
        assert_eq!(server.body(3)["params"]["cursor"], "p2");
    }

    #[test]
    fn calls_map_content_and_errors_and_an_expired_session_is_renewed() {
        let server = Server::default();
        let c = client(None);
        server.handshake("s-1");
        server.json(json!({
            "content": [
                {"type": "text", "text": "Found 2 pages."},
                {"type": "image", "mimeType": "image/png", "data": "AAAA"},
                {"type": "resource", "resource": {"uri": "docs://a", "text": "Page A"}},
                {"type": "resource_link", "uri": "docs://b", "name": "Page B"}
            ],
            "structuredContent": {"count": 2}
        }));
        let out = run(c.call_tool(&server, "search", json!({"q": "x"}).as_object().unwrap()))
            .unwrap()
            .unwrap();
        assert_eq!(out["status"], "ok");
        assert_eq!(
            out["result"],
            "Found 2 pages.\n[image image/png, 3 bytes, not shown]\n[resource docs://a]\nPage A\n[link Page B docs://b]"
        );
        assert_eq!(out["structured"], json!({"count": 2}));
        assert_eq!(
            server.body(2)["params"],
            json!({"name": "search", "arguments": {"q": "x"}})
        );

        // The server forgot the session: 404, a new handshake, the call again.
        server.answer(404, "text/plain", None, "session not found");
        server.handshake("s-2");
        server.json(json!({"content": [{"type": "text", "text": "boom"}], "isError": true}));
        let failed = run(c.call_tool(&server, "search", &Map::new()))
            .unwrap()
            .unwrap_err();
        assert_eq!(
            crate::llm::json::from_str::<Value>(&failed).unwrap(),
            json!({"status": "error", "message": "boom"})
        );
        let n = server.seen.borrow().len();
        assert_eq!(server.body(n - 3)["method"], "initialize");
        assert_eq!(server.header(n - 3, "mcp-session-id"), None);
        assert_eq!(
            server.header(n - 1, "mcp-session-id").as_deref(),
            Some("s-2")
        );

        // A JSON-RPC error is an error result the model reads.
        server.answer(
            200,
            "application/json",
            None,
            r#"{"jsonrpc":"2.0","id":ID,"error":{"code":-32602,"message":"Unknown tool: nope"}}"#,
        );
        let refused = run(c.call_tool(&server, "nope", &Map::new()))
            .unwrap()
            .unwrap_err();
        assert!(
            refused.contains("Unknown tool: nope (JSON-RPC error -32602)"),
            "{refused}"
        );
        // Structured content repeated as text is given once.
        server.json(json!({"content": [{"type": "text", "text": "{\"n\": 1}"}], "structuredContent": {"n": 1}}));
        assert_eq!(
            run(c.call_tool(&server, "count", &Map::new()))
                .unwrap()
                .unwrap(),
            json!({"status": "ok", "structured": {"n": 1}})
        );
        // Nothing at all: no_result.
        server.json(json!({"content": []}));
        assert_eq!(
            run(c.call_tool(&server, "search", &Map::new()))
                .unwrap()
                .unwrap()["status"],
            "no_result"
        );
    }

    #[test]
    fn an_unknown_revision_and_http_errors_are_reported() {
        let server = Server::default();
        server.answer(
            200,
            "application/json",
            Some("s"),
            r#"{"jsonrpc":"2.0","id":ID,"result":{"protocolVersion":"2099-01-01"}}"#,
        );
        let e = run(client(None).list_tools(&server)).unwrap_err();
        assert!(
            matches!(&e, McpError::Protocol(m) if m.contains("2099-01-01")),
            "{e}"
        );
        let server = Server::default();
        server.answer(503, "text/plain", None, "overloaded");
        let e = run(client(None).list_tools(&server)).unwrap_err();
        assert_eq!(
            e,
            McpError::Http {
                status: 503,
                detail: ": overloaded".into()
            }
        );
        assert!(e.retryable());
        assert!(!McpError::Http {
            status: 401,
            detail: String::new()
        }
        .retryable());
    }
}
