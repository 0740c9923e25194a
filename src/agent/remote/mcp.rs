//! MCP servers as tools (`MCP_SERVERS`): a client for the Streamable HTTP transport, written
//! over [`HttpTransport`] so it runs on `fetch` at the edge and on scripted bytes in tests.
//!
//! Protocol revisions 2025-11-25 and 2025-06-18 (and 2025-03-26, which they extend): the
//! `initialize` handshake, then `notifications/initialized`; `Mcp-Session-Id` and
//! `MCP-Protocol-Version` on every later request; a 404 to a request that carried a session
//! starts a new session. Responses come as JSON or as an SSE stream holding the answer.
//! `tools/list` is read page by page; `tools/call` results become tool results the model reads.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use async_trait::async_trait;
use futures::StreamExt;
use serde_json::{json, Map, Value};
use thiserror::Error;

use super::redirects::{self, SendError};
use super::{
    answer, call_service, check_name, failure, host_of, resolve_headers, Attempt, Breakers,
    DEFAULT_RESULT_BYTES, MAX_RESULT_BYTES,
};
use crate::agent::tools::ServerTool;
use crate::llm::fields::{self, Fields};
use crate::llm::sse::SseDecoder;
use crate::llm::{ApiRequest, HttpTransport, Sleeper, ToolDef};

/// The revision offered in `initialize`, and the ones accepted back.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
const SUPPORTED_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// Most of a response read, in bytes.
const MAX_READ_BYTES: usize = 4 << 20;
/// Most `tools/list` pages read from one server.
const MAX_PAGES: usize = 20;
/// The longest tool name every provider accepts.
const MAX_TOOL_NAME: usize = 64;

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
    /// The most a result gives the model, in bytes (default [`DEFAULT_RESULT_BYTES`]); past it
    /// the result is cut and marked `degraded`.
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

/// A `tools/call` result as the model reads it: text joined, structured content kept as JSON,
/// images, audio and resources described rather than dropped; `isError` an error result.
pub fn tool_result(result: &Value) -> Result<Value, String> {
    let mut parts: Vec<String> = Vec::new();
    for item in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let field = |name: &str| item.get(name).and_then(Value::as_str).unwrap_or_default();
        let size = |data: &str| data.len() / 4 * 3;
        parts.push(match field("type") {
            "text" => field("text").to_string(),
            "image" | "audio" => format!(
                "[{} {}, {} bytes, not shown]",
                field("type"),
                field("mimeType"),
                size(field("data"))
            ),
            "resource" => {
                let resource = &item["resource"];
                let uri = resource["uri"].as_str().unwrap_or_default();
                match resource["text"].as_str() {
                    Some(text) => format!("[resource {uri}]\n{text}"),
                    None => format!(
                        "[resource {uri}, {}, {} bytes, not shown]",
                        resource["mimeType"].as_str().unwrap_or("binary"),
                        size(resource["blob"].as_str().unwrap_or_default())
                    ),
                }
            }
            "resource_link" => format!("[link {} {}]", field("name"), field("uri")),
            other => format!("[{other} content, not shown]"),
        });
    }
    let text = parts.join("\n");
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(failure(if text.is_empty() {
            "the tool failed".to_string()
        } else {
            text
        }));
    }
    let structured = result.get("structuredContent").filter(|v| !v.is_null());
    // Servers repeat structured content as serialized JSON text for older clients: once is
    // enough for the model.
    let text = match structured {
        Some(s) if crate::llm::json::from_str::<Value>(&text).is_ok_and(|t| t == *s) => {
            String::new()
        }
        _ => text,
    };
    if text.is_empty() && structured.is_none() {
        return Ok(answer("no_result", None, None));
    }
    let mut out = answer(
        "ok",
        (!text.is_empty()).then_some(Value::String(text)),
        None,
    );
    if let Some(structured) = structured {
        out["structured"] = structured.clone();
    }
    Ok(out)
}

/// A result held to `max` bytes as the model reads it: a longer answer is cut (its text and
/// structured content, rendered) and marked `degraded`; a longer error is cut.
fn capped(result: Result<Value, String>, max: usize) -> Result<Value, String> {
    match result {
        Ok(value) => {
            let size = |v: Option<&Value>| match v {
                Some(Value::String(s)) => s.len(),
                Some(other) => other.to_string().len(),
                None => 0,
            };
            if size(value.get("result")) + size(value.get("structured")) <= max {
                return Ok(value);
            }
            let mut rendered = match value.get("result") {
                Some(Value::String(s)) => s.clone(),
                _ => String::new(),
            };
            if let Some(structured) = value.get("structured") {
                if !rendered.is_empty() {
                    rendered.push('\n');
                }
                rendered.push_str(&structured.to_string());
            }
            Ok(super::cut(&rendered, max))
        }
        Err(message) if message.len() > max => {
            let kept = super::clip(&message, max);
            Err(format!(
                "{kept}… (the error was cut to {} bytes)",
                kept.len()
            ))
        }
        Err(message) => Err(message),
    }
}

/// `<server>__<tool>`, in the characters and length every provider accepts; a name clipped to
/// fit keeps a short hash of the whole so two long names stay apart.
pub fn exposed_name(server: &str, tool: &str) -> String {
    let full = format!("{server}__{tool}");
    let clean: String = full
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_TOOL_NAME && clean == full {
        return clean;
    }
    // FNV-1a of the original name.
    let hash = full.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let keep = MAX_TOOL_NAME - 9;
    format!("{}_{:08x}", &clean[..clean.len().min(keep)], hash as u32)
}

/// One of a server's tools, as the agent calls it.
pub struct McpTool {
    pub definition: ToolDef,
    /// The name the server knows it by.
    pub tool: String,
    pub client: Rc<McpClient>,
    pub transport: Rc<dyn HttpTransport>,
    pub sleeper: Rc<dyn Sleeper>,
    pub breakers: Rc<Breakers>,
    pub now_ms: fn() -> i64,
    /// Whether the turn was cancelled (a failed attempt then is no failure of the server).
    pub cancelled: Rc<dyn Fn() -> bool>,
}

#[async_trait(?Send)]
impl ServerTool for McpTool {
    fn definition(&self) -> &ToolDef {
        &self.definition
    }

    async fn call(&self, arguments: &Map<String, Value>) -> Result<Value, String> {
        let server = &self.client.spec.name;
        let who = format!("the MCP server `{server}`");
        let attempt = || async {
            match self
                .client
                .call_tool(self.transport.as_ref(), &self.tool, arguments)
                .await
            {
                Ok(result) => Attempt::Done(result),
                Err(e) if e.retryable() => Attempt::Failed(e.to_string()),
                Err(e) => Attempt::Done(Err(failure(e.to_string()))),
            }
        };
        call_service(
            server,
            &who,
            &self.breakers,
            self.sleeper.as_ref(),
            self.now_ms,
            self.cancelled.as_ref(),
            attempt,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::llm::{HttpRequest, HttpResponse};

    /// A recorded answer: status, content type, session id, body.
    type Recorded = (u16, &'static str, Option<&'static str>, String);

    /// A server playing recorded answers.
    #[derive(Default)]
    struct Server {
        answers: RefCell<VecDeque<Recorded>>,
        seen: RefCell<Vec<ApiRequest>>,
    }

    impl Server {
        fn answer(
            &self,
            status: u16,
            kind: &'static str,
            session: Option<&'static str>,
            body: &str,
        ) {
            self.answers
                .borrow_mut()
                .push_back((status, kind, session, body.to_string()));
        }
        /// A JSON answer to whatever request comes next.
        fn json(&self, result: Value) {
            let body = json!({"jsonrpc": "2.0", "id": "ID", "result": result}).to_string();
            self.answer(200, "application/json", None, &body.replace("\"ID\"", "ID"));
        }
        fn handshake(&self, session: &'static str) {
            self.answer(
                200,
                "application/json",
                Some(session),
                r#"{"jsonrpc":"2.0","id":ID,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"t","version":"1"}}}"#,
            );
            self.answer(202, "", None, "");
        }
        fn header(&self, i: usize, name: &str) -> Option<String> {
            self.seen.borrow()[i]
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        }
        fn body(&self, i: usize) -> Value {
            crate::llm::json::from_str(self.seen.borrow()[i].body.as_deref().unwrap()).unwrap()
        }
    }

    #[async_trait(?Send)]
    impl HttpTransport for Server {
        async fn post(&self, _: HttpRequest) -> Result<HttpResponse, String> {
            unreachable!()
        }
        async fn get(&self, _: HttpRequest) -> Result<HttpResponse, String> {
            unreachable!()
        }
        async fn send(&self, request: ApiRequest) -> Result<HttpResponse, String> {
            let id = crate::llm::json::from_str::<Value>(request.body.as_deref().unwrap_or("{}"))
                .ok()
                .and_then(|m| m.get("id").cloned())
                .map(|id| id.to_string())
                .unwrap_or_default();
            self.seen.borrow_mut().push(request);
            let (status, kind, session, body) = self
                .answers
                .borrow_mut()
                .pop_front()
                .ok_or("connection refused")?;
            // Recorded bodies name the request id as ID; answers arrive in awkward pieces.
            let body = body.replace("ID", &id).into_bytes();
            let pieces: Vec<Result<Vec<u8>, String>> =
                body.chunks(7).map(|c| Ok(c.to_vec())).collect();
            let mut headers = vec![("content-type".to_string(), kind.to_string())];
            if let Some(s) = session {
                headers.push(("mcp-session-id".into(), s.into()));
            }
            Ok(HttpResponse {
                status,
                headers,
                body: Box::pin(futures::stream::iter(pieces)),
            })
        }
    }

    fn client(tools: Option<Vec<&str>>) -> McpClient {
        let spec = McpServerSpec {
            name: "docs".into(),
            url: "http://127.0.0.1:9/mcp".into(),
            headers: BTreeMap::from([("Authorization".into(), "secret:DOCS_TOKEN".into())]),
            tools: tools.map(|t| t.into_iter().map(String::from).collect()),
            approval: vec![],
            toolset: None,
            max_bytes: None,
        };
        McpClient::new(spec, &|_| Some("Bearer t0k".into()), true).unwrap()
    }

    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        futures::executor::block_on(f)
    }

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
    fn results_are_capped_like_http_tools_and_marked_degraded() {
        let server = Server::default();
        let c = client(None);
        server.handshake("s-1");
        // A 3 MB answer (under the 4 MB read limit) reaches the model as 16 KB.
        let big = "é".repeat(1_500_000);
        server.json(json!({"content": [{"type": "text", "text": big}]}));
        let out = run(c.call_tool(&server, "dump", &Map::new()))
            .unwrap()
            .unwrap();
        assert_eq!(out["status"], "degraded");
        let kept = out["result"].as_str().unwrap();
        assert!(kept.len() <= DEFAULT_RESULT_BYTES && kept.len() > DEFAULT_RESULT_BYTES - 2);
        assert!(out["note"].as_str().unwrap().contains("cut to"));
        // Structured content counts too; an error is cut as well.
        server.json(json!({"content": [], "structuredContent": {"rows": vec![1; 10_000]}}));
        let out = run(c.call_tool(&server, "rows", &Map::new()))
            .unwrap()
            .unwrap();
        assert_eq!(out["status"], "degraded");
        server.json(
            json!({"content": [{"type": "text", "text": "x".repeat(40_000)}], "isError": true}),
        );
        let failed = run(c.call_tool(&server, "rows", &Map::new()))
            .unwrap()
            .unwrap_err();
        assert!(failed.len() < DEFAULT_RESULT_BYTES + 100 && failed.contains("cut to"));
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

    #[derive(Default)]
    struct NoWait;

    #[async_trait(?Send)]
    impl Sleeper for NoWait {
        async fn sleep(&self, _: u64) {}
        fn random(&self) -> f64 {
            0.0
        }
    }

    #[test]
    fn a_server_that_is_down_opens_its_circuit() {
        let server = Rc::new(Server::default());
        let tool = McpTool {
            definition: ToolDef {
                name: exposed_name("docs", "search"),
                description: String::new(),
                input_schema: json!({"type": "object"}),
            },
            tool: "search".into(),
            client: Rc::new(client(None)),
            transport: server.clone(),
            sleeper: Rc::new(NoWait),
            breakers: Rc::default(),
            now_ms: || 0,
            cancelled: Rc::new(|| false),
        };
        // Nothing scripted: every request is refused (a network error).
        for _ in 0..3 {
            let e = run(tool.call(&Map::new())).unwrap_err();
            assert!(
                e.contains("could not be reached") && e.contains("after 3 attempts"),
                "{e}"
            );
        }
        let sent = server.seen.borrow().len();
        assert_eq!(sent, 9);
        let e = run(tool.call(&Map::new())).unwrap_err();
        assert!(e.contains("unavailable: the MCP server `docs`"), "{e}");
        assert_eq!(server.seen.borrow().len(), sent);
    }

    #[test]
    fn names_fit_every_provider_and_declarations_are_checked() {
        assert_eq!(exposed_name("docs", "search"), "docs__search");
        let odd = exposed_name("docs", "get.page/v2");
        assert!(
            odd.starts_with("docs__get_page_v2_") && odd.len() <= MAX_TOOL_NAME,
            "{odd}"
        );
        let long = "x".repeat(80);
        let (a, b) = (
            exposed_name("docs", &long),
            exposed_name("docs", &format!("{long}y")),
        );
        assert!(a.len() <= MAX_TOOL_NAME && a != b);
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
    }
}
