//! `POST /mcp`: the deployment as an MCP server (Streamable HTTP, stateless: no session, so no
//! object of its own), and `GET /.well-known/oauth-protected-resource[/mcp]`, the metadata
//! (RFC 9728) an OAuth-speaking client reads after a 401. The protocol's pure parts are in
//! `edge::mcp`; here a call becomes a turn of the caller's, handed to the conversation's object
//! as any message is (budgets, rate limit and ownership apply), and its stream is read back
//! into the call's result, with progress notifications on an SSE response when the client asks
//! for them.

use futures::channel::mpsc;
use futures::StreamExt;
use serde_json::{json, Value};
use worker::{console_error, wasm_bindgen_futures, Env, Headers, Request, Response};

use super::messages::hand_over;
use super::owned;
use crate::agent::remote::HttpToolSpec;
use crate::agent::{AgentMessage, ServerTool};
use crate::edge::config::agents::AgentSpec;
use crate::edge::config::Config;
use crate::edge::conversation::turn::remote_tools::http_tool;
use crate::edge::conversation::turn::subagent::progress::Progress;
use crate::edge::d1::conversations::Remembered;
use crate::edge::d1::{Conversation, Store};
use crate::edge::error::ApiError;
use crate::edge::gateway::body::body_text;
use crate::edge::mcp::rpc::{self, Incoming, RpcError};
use crate::edge::mcp::{answer, tools};
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::ids::new_id;
use crate::edge::protocol::{Delivery, TurnRequest};
use crate::llm::sse::SseDecoder;

/// The longest title a conversation an MCP call starts takes from its message, in characters.
const TITLE_CHARS: usize = 80;

pub async fn post(
    req: Request,
    env: &Env,
    config: &Config,
    user: &str,
    request_id: &str,
) -> Result<Response, ApiError> {
    let headers = req.headers();
    // A browser page may call only from an origin the deployment lists: a page another site
    // serves (or one that rebinds a name to this host) is refused before anything runs.
    if let Some(origin) = headers.get("origin")? {
        let url = req.inner().url();
        if !config.cors.admits(&origin) && !own_loopback(&origin, &url) {
            return Err(ApiError::Forbidden(format!(
                "origin `{origin}` is not allowed to call /mcp: list it in CORS_ORIGINS"
            )));
        }
    }
    let version = headers.get("mcp-protocol-version")?;
    if !rpc::version_ok(version.as_deref()) {
        return Err(ApiError::BadRequest(format!(
            "MCP-Protocol-Version `{}` is not one this server speaks ({})",
            version.unwrap_or_default(),
            rpc::VERSIONS.join(", ")
        )));
    }
    let streams = headers
        .get("accept")?
        .is_some_and(|a| a.contains("text/event-stream"));
    let body = body_text(req, rpc::MAX_MESSAGE_BYTES).await?;
    let (id, method, params) = match rpc::read(&body) {
        Ok(Incoming::Request { id, method, params }) => (id, method, params),
        Ok(Incoming::Accepted) => return Ok(Response::empty()?.with_status(202)),
        Err((id, e)) => return message(400, &rpc::error(&id, &e)),
    };
    let answer = match method.as_str() {
        "initialize" => Ok(initialize(&params)),
        "ping" | "logging/setLevel" => Ok(json!({})),
        "tools/list" => Ok(json!({"tools": tools::listed(config)})),
        "tools/call" => {
            let name = params["name"].as_str().unwrap_or_default();
            let http = tools::exposed(config).find(|spec| spec.name == name);
            if let (Some(spec), None) = (http, tools::agent_of(config, name)) {
                let result = match &params["arguments"] {
                    Value::Object(arguments) => {
                        Ok(http_call(env, config, user, spec, arguments).await)
                    }
                    Value::Null => {
                        Ok(http_call(env, config, user, spec, &Default::default()).await)
                    }
                    _ => Err(RpcError::InvalidParams(
                        "`arguments` must be an object".into(),
                    )),
                };
                return match result {
                    Ok(result) => message(200, &rpc::result(&id, result)),
                    Err(e) => message(200, &rpc::error(&id, &e)),
                };
            }
            let call = match Call::read(config, &params) {
                Ok(call) => call,
                Err(e) => return message(200, &rpc::error(&id, &e)),
            };
            let token = params["_meta"]["progressToken"].clone();
            let wants_progress = matches!(token, Value::String(_) | Value::Number(_));
            if wants_progress && streams {
                return streamed(env, call, (user, request_id), id, token);
            }
            Ok(call.run(env, config, (user, request_id), &mut |_| {}).await)
        }
        other => Err(RpcError::MethodNotFound(format!(
            "`{other}` is not a method this server has"
        ))),
    };
    match answer {
        Ok(result) => message(200, &rpc::result(&id, result)),
        Err(e) => message(200, &rpc::error(&id, &e)),
    }
}

fn initialize(params: &Value) -> Value {
    json!({
        "protocolVersion": rpc::negotiate(params["protocolVersion"].as_str()),
        "capabilities": {"tools": {"listChanged": false}, "logging": {}},
        "serverInfo": {"name": "edge-agent", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Each tool asks one agent of this deployment: it runs a turn of that \
            agent in a conversation of yours and returns the answer, with the conversation's id \
            to continue it.",
    })
}

/// A call of an HTTP tool the deployment exposes (`MCP_EXPOSE_TOOLS`): made from here, as a
/// turn would make it, counted against the caller's rate limit as a message is.
async fn http_call(
    env: &Env,
    config: &Config,
    user: &str,
    spec: &HttpToolSpec,
    arguments: &serde_json::Map<String, Value>,
) -> Value {
    if let Err(e) = crate::edge::platform::rate_limit::check(env, config, user).await {
        return answer::failed(&e.to_string(), None);
    }
    let result = match http_tool(config, spec) {
        Ok(tool) => tool.call(arguments).await,
        Err(e) => Err(e),
    };
    tools::http_result(result)
}

/// One JSON-RPC message as the response.
fn message(status: u16, message: &Value) -> Result<Response, ApiError> {
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    Ok(Response::ok(message.to_string())?
        .with_status(status)
        .with_headers(headers))
}

/// A call that streams: progress notifications as the turn goes, then its result, as SSE. The
/// turn runs in its conversation's object whatever becomes of this response.
fn streamed(
    env: &Env,
    call: Call,
    (user, request_id): (&str, &str),
    id: Value,
    token: Value,
) -> Result<Response, ApiError> {
    let config = Config::cached(env)?;
    let (tx, rx) = mpsc::unbounded::<Result<Vec<u8>, worker::Error>>();
    let env = env.clone();
    let (user, request_id) = (user.to_string(), request_id.to_string());
    wasm_bindgen_futures::spawn_local(async move {
        let mut sent = 0u64;
        let mut notify = |doing: &str| {
            sent += 1;
            let note = rpc::progress(&token, sent, doing);
            let _ = tx.unbounded_send(Ok(rpc::sse_event(&note).into_bytes()));
        };
        let result = call
            .run(&env, &config, (&user, &request_id), &mut notify)
            .await;
        let _ = tx.unbounded_send(Ok(rpc::sse_event(&rpc::result(&id, result)).into_bytes()));
    });
    let headers = Headers::new();
    headers.set("content-type", "text/event-stream")?;
    headers.set("cache-control", "no-cache")?;
    Ok(Response::from_stream(rx)?.with_headers(headers))
}

/// A `tools/call` of `ask_<agent>`, its arguments read.
struct Call {
    agent: std::rc::Rc<AgentSpec>,
    ask: tools::Ask,
}

impl Call {
    fn read(config: &Config, params: &Value) -> Result<Call, RpcError> {
        let Some(name) = params["name"].as_str() else {
            return Err(RpcError::InvalidParams(
                "`name` (a string) is required".into(),
            ));
        };
        let Some(agent) = tools::agent_of(config, name) else {
            return Err(RpcError::InvalidParams(format!(
                "`{name}` is not a tool of this server: `tools/list` names them"
            )));
        };
        Ok(Call {
            agent: agent.clone(),
            ask: tools::read_ask(&params["arguments"])?,
        })
    }

    /// Runs the call's turn to its end and gives its result; `progress` hears what the turn
    /// does as it goes. A refusal (a budget, the rate limit, someone else's conversation) is
    /// a result with `isError`, as MCP has tool failures reported.
    async fn run(
        self,
        env: &Env,
        config: &Config,
        (user, request_id): (&str, &str),
        progress: &mut dyn FnMut(&str),
    ) -> Value {
        let mut conversation_id = self.ask.conversation_id.clone();
        let turn = self
            .start(env, config, (user, request_id), &mut conversation_id)
            .await;
        let response = match turn {
            Ok(response) => response,
            Err(e) => {
                if e.status() >= 500 {
                    console_error!("{}", e.log_line(request_id, "POST", "/mcp"));
                }
                return answer::failed(&e.public_message(request_id), conversation_id.as_deref());
            }
        };
        let conversation = conversation_id.unwrap_or_default();
        read_turn(response, &self.agent, &conversation, progress).await
    }

    /// Starts (or resumes) the turn in the caller's conversation, made for this call when it
    /// names none; `conversation` is set to the one used.
    async fn start(
        &self,
        env: &Env,
        config: &Config,
        (user, request_id): (&str, &str),
        conversation: &mut Option<String>,
    ) -> Result<Response, ApiError> {
        crate::edge::platform::rate_limit::check(env, config, user).await?;
        crate::edge::gateway::budget_check(env, config, user).await?;
        let row = match conversation.as_deref() {
            Some(id) => {
                let row = owned(env, user, id).await?;
                let its = config.agent(row.agent.as_deref())?;
                if its.name != self.agent.name {
                    return Err(ApiError::Conflict(format!(
                        "conversation `{id}` belongs to the agent `{}`: ask it with `{}{}`",
                        its.name,
                        tools::PREFIX,
                        its.name
                    )));
                }
                row
            }
            None => self.create(env, config, user).await?,
        };
        *conversation = Some(row.id.clone());
        let request = match &self.ask.message {
            Some(text) => TurnRequest::Message {
                id: new_id()?,
                keyed: None,
                message: AgentMessage::user_text(text.clone()),
                delivery: Delivery::Followup,
            },
            None => TurnRequest::Resume {
                results: Vec::new(),
                approvals: self.ask.approvals.clone(),
                only_pending: false,
            },
        };
        hand_over(
            env,
            &row,
            request,
            (Vec::new(), None, None),
            true,
            (config, request_id),
        )
        .await
    }

    async fn create(
        &self,
        env: &Env,
        config: &Config,
        user: &str,
    ) -> Result<Conversation, ApiError> {
        let now = now_ms();
        let title = self
            .ask
            .message
            .as_deref()
            .map(|m| m.chars().take(TITLE_CHARS).collect());
        let conversation = Conversation {
            id: new_id()?,
            owner: user.to_string(),
            title,
            system: None,
            model: None,
            metadata: Some(json!({"source": "mcp"})),
            toolsets: None,
            agent: Some(self.agent.name.clone()),
            created_at: now,
            updated_at: now,
            parent: None,
            tool_call_id: None,
            memory: Remembered::new(&self.agent, false),
        };
        Store::for_owner(env, user)
            .await?
            .create_conversation(&conversation, config.max_conversations_per_user)
            .await?;
        Ok(conversation)
    }
}

/// The conversation's answer to the call's message, read to its end: the turn's stream (a
/// `200`), a queued message (`202`: a turn already runs there), or a refusal.
async fn read_turn(
    mut response: Response,
    agent: &AgentSpec,
    conversation: &str,
    notify: &mut dyn FnMut(&str),
) -> Value {
    let status = response.status_code();
    if status != 200 {
        let body = response.text().await.unwrap_or_default();
        let said: Value = crate::llm::json::from_str(&body).unwrap_or(Value::Null);
        let message = if status == 202 {
            format!(
                "a turn is already running in conversation `{conversation}`: your message was \
                 queued as a follow-up (position {}) and will be answered there, in its history",
                said["position"]
            )
        } else {
            said["error"]["message"]
                .as_str()
                .unwrap_or("the conversation refused the message")
                .to_string()
        };
        return answer::failed(&message, Some(conversation));
    }
    let mut progress = Progress::default();
    let mut decoder = SseDecoder::new();
    if let Ok(mut body) = response.stream() {
        while let Some(Ok(bytes)) = body.next().await {
            let _ = decoder.push(&bytes, &mut |_, data| {
                if let Ok(chunk) = crate::llm::json::from_str::<Value>(data) {
                    progress.apply(&chunk);
                }
                Ok::<(), ()>(())
            });
            if progress.take_changed() {
                notify(&progress.doing());
            }
            if progress.finished() {
                break;
            }
        }
    }
    answer::of_turn(&progress, agent, conversation)
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`: where a token for this server comes from
/// (RFC 9728), for an MCP client that speaks OAuth. The resource is the URL the document's path
/// names: the origin, or its `/mcp`.
pub fn protected_resource(req: &Request, config: Option<&Config>) -> Result<Response, ApiError> {
    let url = req.inner().url();
    let (origin, path) = origin_and_path(&url);
    let resource = match path.strip_prefix("/.well-known/oauth-protected-resource") {
        Some(rest) if !rest.trim_matches('/').is_empty() => format!("{origin}{rest}"),
        _ => origin.to_string(),
    };
    let mut document = json!({
        "resource": resource,
        "bearer_methods_supported": ["header"],
        "resource_name": "edge-agent",
    });
    if let Some(issuer) = config.and_then(|c| c.auth.jwt_issuer.as_deref()) {
        document["authorization_servers"] = json!([issuer]);
    }
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    headers.set("cache-control", "public, max-age=3600")?;
    Ok(Response::ok(document.to_string())?.with_headers(headers))
}

/// A request's raw URL as its origin and its path (without query or fragment), split by hand:
/// `Request::url` would ship the `url` crate for this alone.
pub fn origin_and_path(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    let path_at = url[after_scheme..]
        .find('/')
        .map_or(url.len(), |at| after_scheme + at);
    let (origin, path) = url.split_at(path_at);
    (origin, path.split(['?', '#']).next().unwrap_or_default())
}

/// Whether `origin` is the request's own and a loopback one (`wrangler dev`'s pages): a name an
/// attacker rebinds to this machine is not a loopback name, so the request's URL (its `Host`)
/// is not one either.
fn own_loopback(origin: &str, url: &str) -> bool {
    let (own, _) = origin_and_path(url);
    let host = own.split_once("://").map_or(own, |(_, rest)| rest);
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    };
    origin == own && matches!(name, "localhost" | "127.0.0.1" | "::1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_loopback_server_s_own_origin_is_admitted_unlisted() {
        assert!(own_loopback(
            "http://127.0.0.1:8787",
            "http://127.0.0.1:8787/mcp"
        ));
        assert!(own_loopback("http://[::1]:9", "http://[::1]:9/mcp"));
        assert!(own_loopback("http://localhost:9", "http://localhost:9/mcp"));
        assert!(!own_loopback(
            "http://evil.example:8787",
            "http://evil.example:8787/mcp"
        ));
        assert!(!own_loopback(
            "http://localhost:9",
            "http://127.0.0.1:9/mcp"
        ));
        assert!(!own_loopback(
            "https://agent.example",
            "https://agent.example/mcp"
        ));
    }

    #[test]
    fn a_url_splits_into_its_origin_and_path() {
        assert_eq!(
            origin_and_path("http://localhost:8787/.well-known/oauth-protected-resource/mcp?x=1"),
            (
                "http://localhost:8787",
                "/.well-known/oauth-protected-resource/mcp"
            )
        );
        assert_eq!(
            origin_and_path("https://a.example"),
            ("https://a.example", "")
        );
    }
}
