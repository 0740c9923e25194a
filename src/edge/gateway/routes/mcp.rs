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
use worker::{
    console_error, console_log, console_warn, wasm_bindgen_futures, Env, Headers, Request, Response,
};

use super::messages::{checked_turn, hand_over};
use super::owned;
use crate::agent::remote::HttpToolSpec;
use crate::agent::{AgentMessage, ServerTool};
use crate::edge::config::agents::AgentSpec;
use crate::edge::config::Config;
use crate::edge::conversation::client::ConversationClient;
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
use crate::edge::platform::timers::WorkerSleeper;
use crate::edge::protocol::{Delivery, TurnConversation, TurnRequest};
use crate::llm::sse::SseDecoder;
use crate::llm::Sleeper;

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
    let traceparent = super::traceparent(&req);
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
        "tools/call" => match Call::read(config, &params) {
            Ok(Call::Http(spec, arguments)) => {
                Ok(http_call(env, config, (user, request_id), spec, &arguments).await)
            }
            // Arguments an agent cannot take: told as a tool's error, for the model to fix.
            Ok(Call::Unfit(why)) => Ok(answer::failed(&why, None)),
            Ok(Call::Ask(mut ask)) if streams => {
                ask.traceparent = traceparent;
                let token = progress_token(&params);
                return streamed(env, ask, (user, request_id), id, token);
            }
            Ok(Call::Ask(mut ask)) => {
                ask.traceparent = traceparent;
                Ok(ask.run(env, config, (user, request_id), &mut |_| {}).await)
            }
            Err(e) => Err(e),
        },
        other => Err(RpcError::MethodNotFound(format!(
            "`{other}` is not a method this server has"
        ))),
    };
    match answer {
        Ok(result) => message(200, &rpc::result(&id, result)),
        Err(e) => message(200, &rpc::error(&id, &e)),
    }
}

/// The longest `progressToken` taken, in bytes: each notification repeats it.
const MAX_TOKEN_BYTES: usize = 256;
/// Most notifications one call sends: past them, the turn's progress goes untold.
const MAX_NOTES: u64 = 200;

/// The call's `progressToken`, when it asked for progress with one of a sane size.
fn progress_token(params: &Value) -> Option<Value> {
    match &params["_meta"]["progressToken"] {
        Value::String(s) if s.len() <= MAX_TOKEN_BYTES => Some(Value::String(s.clone())),
        Value::Number(n) => Some(Value::Number(n.clone())),
        _ => None,
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

/// A call of an HTTP tool the deployment exposes (`MCP_EXPOSE_TOOLS`), made from here as a
/// turn makes one: its arguments checked against its schema, within `TOOL_TIMEOUT_MS`, counted
/// against the caller's rate limit as a message is, and logged (the deployment's credentials
/// call out for someone).
async fn http_call(
    env: &Env,
    config: &Config,
    (user, request_id): (&str, &str),
    spec: &HttpToolSpec,
    arguments: &serde_json::Map<String, Value>,
) -> Value {
    if let Err(e) = crate::edge::platform::rate_limit::check(env, config, user).await {
        return refused(&e, request_id, None);
    }
    let problems =
        crate::agent::schema::validate(&spec.input_schema, &Value::Object(arguments.clone()));
    if !problems.is_empty() {
        return answer::failed(
            &format!(
                "invalid arguments for `{}`: {}",
                spec.name,
                problems.join("; ")
            ),
            None,
        );
    }
    let started = now_ms();
    let result = match http_tool(config, spec) {
        Ok(tool) => {
            let call = std::pin::pin!(tool.call(arguments));
            let limit = std::pin::pin!(WorkerSleeper.sleep(config.tool_timeout_ms.into()));
            match futures::future::select(call, limit).await {
                futures::future::Either::Left((result, _)) => result,
                futures::future::Either::Right(_) => Err(format!(
                    "`{}` did not finish within {} ms (TOOL_TIMEOUT_MS)",
                    spec.name, config.tool_timeout_ms
                )),
            }
        }
        Err(e) => Err(e),
    };
    let line = json!({
        "event": "mcp_tool_call",
        "request_id": request_id,
        "user": user,
        "tool": spec.name,
        "ok": result.is_ok(),
        "ms": now_ms() - started,
    });
    console_log!("{line}");
    tools::http_result(result)
}

/// A refusal as a call's result, logged as the API logs one: a warning, an error for a 5xx
/// (whose detail stays in the log).
fn refused(e: &ApiError, request_id: &str, conversation: Option<&str>) -> Value {
    let line = e.log_line(request_id, "POST", "/mcp");
    if e.status() >= 500 {
        console_error!("{line}");
    } else {
        console_warn!("{line}");
    }
    answer::failed(&e.public_message(request_id), conversation)
}

/// One JSON-RPC message as the response.
fn message(status: u16, message: &Value) -> Result<Response, ApiError> {
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    Ok(Response::ok(message.to_string())?
        .with_status(status)
        .with_headers(headers))
}

/// A call that streams: a logging notification naming the conversation as soon as there is
/// one, progress notifications as the turn goes (with a `progressToken`), then its result, as
/// SSE. The turn runs in its conversation's object whatever becomes of this response.
fn streamed(
    env: &Env,
    ask: Ask,
    (user, request_id): (&str, &str),
    id: Value,
    token: Option<Value>,
) -> Result<Response, ApiError> {
    let config = Config::cached(env)?;
    // Bounded by what is sent into it: at most MAX_NOTES notes of a bounded size, and the result.
    let (tx, rx) = mpsc::unbounded::<Result<Vec<u8>, worker::Error>>();
    let env = env.clone();
    let (user, request_id) = (user.to_string(), request_id.to_string());
    wasm_bindgen_futures::spawn_local(async move {
        let mut sent = 0u64;
        let mut notify = |note: Note<'_>| {
            let message = match (note, &token) {
                (Note::Conversation(id), _) => rpc::log("info", json!({"conversation_id": id})),
                (Note::Doing(doing), Some(token)) if sent < MAX_NOTES => {
                    sent += 1;
                    rpc::progress(token, sent, doing)
                }
                _ => return,
            };
            let _ = tx.unbounded_send(Ok(rpc::sse_event(&message).into_bytes()));
        };
        let result = ask
            .run(&env, &config, (&user, &request_id), &mut notify)
            .await;
        let _ = tx.unbounded_send(Ok(rpc::sse_event(&rpc::result(&id, result)).into_bytes()));
    });
    let headers = Headers::new();
    headers.set("content-type", "text/event-stream")?;
    headers.set("cache-control", "no-cache")?;
    Ok(Response::from_stream(rx)?.with_headers(headers))
}

/// What a running call tells its client.
#[derive(Clone, Copy)]
enum Note<'a> {
    /// The conversation the turn runs in, once known.
    Conversation(&'a str),
    /// What the turn does now.
    Doing(&'a str),
}

/// A `tools/call`, read.
enum Call<'c> {
    /// An agent asked.
    Ask(Ask),
    /// One of the deployment's HTTP tools (`MCP_EXPOSE_TOOLS`), with its arguments.
    Http(&'c HttpToolSpec, serde_json::Map<String, Value>),
    /// An agent's tool with arguments it cannot take, and why.
    Unfit(String),
}

impl<'c> Call<'c> {
    /// A call's tool and arguments; a name this server does not list, or arguments that are
    /// not an object, are JSON-RPC errors.
    fn read(config: &'c Config, params: &Value) -> Result<Call<'c>, RpcError> {
        let Some(name) = params["name"].as_str() else {
            return Err(RpcError::InvalidParams(
                "`name` (a string) is required".into(),
            ));
        };
        let arguments = match &params["arguments"] {
            Value::Object(arguments) => arguments.clone(),
            Value::Null => Default::default(),
            _ => {
                return Err(RpcError::InvalidParams(
                    "`arguments` must be an object".into(),
                ))
            }
        };
        if let Some(agent) = tools::agent_of(config, name) {
            return Ok(match tools::read_ask(&Value::Object(arguments)) {
                Ok(ask) => Call::Ask(Ask {
                    agent: agent.clone(),
                    ask,
                    traceparent: None,
                }),
                Err(why) => Call::Unfit(why.to_string()),
            });
        }
        match tools::exposed(config).find(|spec| spec.name == name) {
            Some(spec) => Ok(Call::Http(spec, arguments)),
            None => Err(RpcError::InvalidParams(format!(
                "`{name}` is not a tool of this server: `tools/list` names them"
            ))),
        }
    }
}

/// A call of `ask_<agent>`, its arguments read.
struct Ask {
    agent: std::rc::Rc<AgentSpec>,
    ask: tools::Ask,
    /// The request's trace context, for the turn's spans.
    traceparent: Option<String>,
}

impl Ask {
    /// Runs the call's turn to its end and gives its result; `notify` hears the conversation
    /// and what the turn does as it goes. A refusal (a budget, the rate limit, someone else's
    /// conversation) is a result with `isError`, as MCP has tool failures reported.
    async fn run(
        self,
        env: &Env,
        config: &Config,
        (user, request_id): (&str, &str),
        notify: &mut dyn FnMut(Note<'_>),
    ) -> Value {
        let mut conversation_id = self.ask.conversation_id.clone();
        let mut made = false;
        let turn = self
            .start(
                env,
                config,
                (user, request_id),
                (&mut conversation_id, &mut made),
            )
            .await;
        let response = match turn {
            Ok(response) => response,
            Err(e) => {
                // A conversation made for a message whose hand-over failed: gone again, as a
                // refused chat's is (only while it has no messages).
                if let (true, Some(id)) = (made, &conversation_id) {
                    if let Ok(store) = Store::for_owner(env, user).await {
                        if let Err(e) = store.take_back(id, user, "", true).await {
                            console_error!(
                                "taking back the conversation made for an MCP call: {e}"
                            );
                        }
                    }
                }
                let shown = if made {
                    None
                } else {
                    conversation_id.as_deref()
                };
                return refused(&e, request_id, shown);
            }
        };
        // Once the object answered, the conversation is the object's: it may have taken the
        // message (a turn refused at its first call for the budget is one), so it stays, and
        // is named.
        let conversation = conversation_id.unwrap_or_default();
        notify(Note::Conversation(&conversation));
        read_turn(env, response, &self.agent, &conversation, notify).await
    }

    /// Starts (or resumes) the turn in the caller's conversation, made for this call when it
    /// names none; the conversation used is set, and whether it was made.
    async fn start(
        &self,
        env: &Env,
        config: &Config,
        (user, request_id): (&str, &str),
        (conversation, made): (&mut Option<String>, &mut bool),
    ) -> Result<Response, ApiError> {
        crate::edge::platform::rate_limit::check(env, config, user).await?;
        crate::edge::gateway::budget_gate::budget_check(env, config, user).await?;
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
            None => {
                let row = self.new_conversation(user)?;
                // Refused before it is made when no provider serves its model.
                checked_turn(env, TurnConversation::from(&row), config)?;
                Store::for_owner(env, user)
                    .await?
                    .create_conversation(&row, config.max_conversations_per_user)
                    .await?;
                *made = true;
                row
            }
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
            (config, request_id, self.traceparent.clone()),
        )
        .await
    }

    fn new_conversation(&self, user: &str) -> Result<Conversation, ApiError> {
        let now = now_ms();
        let title = self
            .ask
            .message
            .as_deref()
            .map(|m| m.chars().take(TITLE_CHARS).collect());
        Ok(Conversation {
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
        })
    }
}

/// The conversation's answer to the call's message, read to its end: the turn's stream (a
/// `200`), a queued message (`202`: a turn already runs there), or a refusal. A stream cut
/// before its end is followed again once, from the object: the turn goes on there.
async fn read_turn(
    env: &Env,
    mut response: Response,
    agent: &AgentSpec,
    conversation: &str,
    notify: &mut dyn FnMut(Note<'_>),
) -> Value {
    let status = response.status_code();
    if status != 200 {
        let body = response.text().await.unwrap_or_default();
        let said: Value = crate::llm::json::from_str(&body).unwrap_or(Value::Null);
        if status == 202 {
            return answer::queued(agent, conversation, &said["position"]);
        }
        let message = said["error"]["message"]
            .as_str()
            .unwrap_or("the conversation refused the message");
        return answer::failed(message, Some(conversation));
    }
    let (mut progress, message) = fold(response, notify).await;
    if !progress.finished() {
        let attached = match ConversationClient::for_conversation(env, conversation) {
            Ok(object) => object.stream().await.ok(),
            Err(_) => None,
        };
        // Only the turn this call started, known by its message's id: once it has ended,
        // another (a queued message's) may be the one running. No turn running (204): it
        // ended. Anything else (a failure, too many readers, a turn it cannot tell from its
        // own): it is still taken to run.
        match attached.as_ref().map(Response::status_code) {
            Some(204) => return answer::ended(agent, conversation),
            Some(200) => {}
            _ => return answer::running(agent, conversation),
        }
        if let Some(again) = attached {
            let (followed, again_message) = fold(again, notify).await;
            match (&message, &again_message) {
                (Some(ours), Some(now)) if ours == now => progress = followed,
                (Some(_), Some(_)) => return answer::ended(agent, conversation),
                _ => return answer::running(agent, conversation),
            }
        }
        if !progress.finished() {
            return answer::running(agent, conversation);
        }
    }
    answer::of_turn(&progress, agent, conversation)
}

/// A turn's stream folded to its end (or to where it was cut), telling `notify` what changes;
/// with the id its `start` chunk gave its message.
async fn fold(
    mut response: Response,
    notify: &mut dyn FnMut(Note<'_>),
) -> (Progress, Option<String>) {
    let mut progress = Progress::default();
    let mut message = None;
    let mut decoder = SseDecoder::new();
    if let Ok(mut body) = response.stream() {
        while let Some(Ok(bytes)) = body.next().await {
            let _ = decoder.push(&bytes, &mut |_, data| {
                if let Ok(chunk) = crate::llm::json::from_str::<Value>(data) {
                    if chunk["type"] == "start" && message.is_none() {
                        message = chunk["messageId"].as_str().map(str::to_string);
                    }
                    progress.apply(&chunk);
                }
                Ok::<(), ()>(())
            });
            if progress.take_changed() {
                notify(Note::Doing(&progress.doing()));
            }
            if progress.finished() {
                break;
            }
        }
    }
    (progress, message)
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
