//! The deployment's remote tools for a turn: `HTTP_TOOLS` and the tools of `MCP_SERVERS`, each
//! in its toolset, calling out with the turn's abort signal (a cancelled turn stops its tool
//! calls too). An MCP session belongs to one conversation (a server may keep per-session state,
//! which must never pass between users): clients are kept per conversation and server. The
//! servers' tool lists (for `MCP_TOOLS_TTL_MS`) and the circuit breakers live as long as the
//! isolate, so a turn does not list tools every time and a server that is down is given up on
//! across requests.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use futures::future::join_all;
use worker::{console_warn, AbortSignal};

use crate::agent::remote::mcp::{McpError, McpToolInfo};
use crate::agent::remote::{
    exposed_name, Breakers, HttpTool, HttpToolSpec, McpClient, McpServerSpec, McpTool,
};
use crate::agent::ToolRegistry;
use crate::edge::config::Config;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::fetch::FetchTransport;
use crate::edge::platform::timers::WorkerSleeper;
use crate::llm::{HttpTransport, Sleeper, ToolDef};

/// How long a server's tool list is used before it is listed again.
pub const MCP_TOOLS_TTL_MS: i64 = 5 * 60 * 1000;

/// Sessions kept at most: past it the isolate forgets them all (each is renewed on its next use).
const MAX_SESSIONS: usize = 256;

/// A server's tools as last listed: for which declaration, when, and what.
struct Listing {
    spec: McpServerSpec,
    at: i64,
    tools: Vec<McpToolInfo>,
}

thread_local! {
    static BREAKERS: Rc<Breakers> = Rc::default();
    /// Clients (with their sessions) by conversation and server name.
    static SESSIONS: RefCell<HashMap<(String, String), Rc<McpClient>>> = RefCell::default();
    /// Tool lists by server name.
    static LISTINGS: RefCell<HashMap<String, Listing>> = RefCell::default();
}

/// What each of `MCP_SERVERS` offers a turn (in the configuration's order): its client and
/// tools, or nothing when it cannot say. Listed by [`list`] while the turn's history loads.
pub struct Listed(Vec<Option<(Rc<McpClient>, Vec<McpToolInfo>)>>);

/// The tools of the MCP servers for a turn of `conversation`: the isolate's lists while fresh,
/// else listed now, all at once.
pub async fn list(config: &Config, conversation: &str, signal: &AbortSignal) -> Listed {
    if config.mcp_servers.is_empty() {
        return Listed(Vec::new());
    }
    let transport = transport(signal);
    let breakers = BREAKERS.with(Rc::clone);
    let secret = |name: &str| secret(config, name);
    Listed(
        join_all(config.mcp_servers.iter().map(|spec| {
            let session = (conversation, transport.as_ref(), signal);
            server_tools(spec, &secret, session, &breakers, config)
        }))
        .await,
    )
}

fn transport(signal: &AbortSignal) -> Rc<dyn HttpTransport> {
    Rc::new(FetchTransport {
        signal: Some(signal.clone()),
        idle_timeout_ms: None,
    })
}

fn secret(config: &Config, name: &str) -> Option<String> {
    config
        .tool_secrets
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
}

/// HTTP tool `spec` called outside a turn (`/mcp` with `MCP_EXPOSE_TOOLS`): no turn to cancel
/// it, and no call id, so no `Idempotency-Key` of ours.
pub fn http_tool(config: &Config, spec: &HttpToolSpec) -> Result<HttpTool, String> {
    HttpTool::new(
        spec.clone(),
        &|name: &str| secret(config, name),
        Rc::new(FetchTransport {
            signal: None,
            idle_timeout_ms: None,
        }),
        Rc::new(WorkerSleeper),
        BREAKERS.with(Rc::clone),
        now_ms,
        Rc::new(|| false),
        config.allow_private_tool_hosts,
    )
}

/// Registers the deployment's HTTP tools and the MCP servers' tools `listed`, for a turn of
/// `conversation` (part of every HTTP call's `Idempotency-Key`).
pub fn register(
    tools: &mut ToolRegistry,
    config: &Config,
    conversation: &str,
    signal: &AbortSignal,
    listed: Listed,
) {
    let transport = transport(signal);
    let aborted = signal.clone();
    let cancelled: Rc<dyn Fn() -> bool> = Rc::new(move || aborted.aborted());
    let breakers = BREAKERS.with(Rc::clone);
    let secret = |name: &str| secret(config, name);
    for spec in &config.http_tools {
        let toolset = spec.toolset.clone().unwrap_or_else(|| "http".into());
        match HttpTool::new(
            spec.clone(),
            &secret,
            transport.clone(),
            Rc::new(WorkerSleeper),
            breakers.clone(),
            now_ms,
            cancelled.clone(),
            config.allow_private_tool_hosts,
        ) {
            Ok(tool) => tools.register_in_toolset(&toolset, Box::new(tool.scoped(conversation))),
            // The configuration checked every secret already.
            Err(e) => console_warn!("HTTP_TOOLS: {e}"),
        }
    }
    for (spec, listed) in config.mcp_servers.iter().zip(listed.0) {
        let Some((client, infos)) = listed else {
            continue;
        };
        let toolset = spec.toolset.clone().unwrap_or_else(|| spec.name.clone());
        for info in infos {
            let name = exposed_name(&spec.name, &info.name);
            if spec.approval.contains(&info.name) {
                tools.require_approval(&name);
            }
            tools.register_in_toolset(
                &toolset,
                Box::new(McpTool {
                    definition: ToolDef {
                        name,
                        description: info.description,
                        input_schema: info.input_schema,
                    },
                    tool: info.name,
                    client: client.clone(),
                    transport: transport.clone(),
                    sleeper: Rc::new(WorkerSleeper),
                    breakers: breakers.clone(),
                    now_ms,
                    cancelled: cancelled.clone(),
                }),
            );
        }
    }
}

/// A server's client (the conversation's session) and tools: the isolate's list while it is
/// fresh, else listed now. A server that cannot list keeps its last list (its calls then fail
/// fast through the breaker), or offers nothing this turn.
async fn server_tools(
    spec: &McpServerSpec,
    secret: &dyn Fn(&str) -> Option<String>,
    (conversation, transport, signal): (&str, &dyn HttpTransport, &AbortSignal),
    breakers: &Breakers,
    config: &Config,
) -> Option<(Rc<McpClient>, Vec<McpToolInfo>)> {
    let now = now_ms();
    let key = (conversation.to_string(), spec.name.clone());
    let known = SESSIONS.with(|s| s.borrow().get(&key).filter(|c| c.spec == *spec).cloned());
    let client = match known {
        Some(client) => client,
        None => {
            let client = match McpClient::new(spec.clone(), secret, config.allow_private_tool_hosts)
            {
                Ok(c) => Rc::new(c),
                Err(e) => {
                    console_warn!("MCP_SERVERS: {e}");
                    return None;
                }
            };
            SESSIONS.with(|s| {
                let mut sessions = s.borrow_mut();
                if sessions.len() >= MAX_SESSIONS {
                    sessions.clear();
                }
                sessions.insert(key, client.clone());
            });
            client
        }
    };
    let stale = LISTINGS.with(|l| {
        l.borrow()
            .get(&spec.name)
            .filter(|l| l.spec == *spec)
            .map(|l| (l.at, l.tools.clone()))
    });
    if let Some((at, tools)) = &stale {
        if now - at < MCP_TOOLS_TTL_MS {
            return Some((client, tools.clone()));
        }
    }
    let Ok(admitted) = breakers.admit(&spec.name, now) else {
        return stale.map(|(_, tools)| (client, tools));
    };
    // A server that accepts and never answers holds up the turn's start for TOOL_TIMEOUT_MS at
    // most, and counts as a failure.
    let listed = {
        let listing = std::pin::pin!(client.list_tools(transport));
        let limit = std::pin::pin!(WorkerSleeper.sleep(config.tool_timeout_ms.into()));
        match futures::future::select(listing, limit).await {
            futures::future::Either::Left((listed, _)) => listed,
            futures::future::Either::Right(_) => Err(McpError::Network(format!(
                "no answer within {} ms (TOOL_TIMEOUT_MS)",
                config.tool_timeout_ms
            ))),
        }
    };
    match listed {
        Ok(tools) => {
            admitted.record(true, now_ms());
            LISTINGS.with(|l| {
                l.borrow_mut().insert(
                    spec.name.clone(),
                    Listing {
                        spec: spec.clone(),
                        at: now_ms(),
                        tools: tools.clone(),
                    },
                )
            });
            Some((client, tools))
        }
        // The turn was cancelled while it listed: that says nothing of the server.
        Err(_) if signal.aborted() => None,
        Err(e) => {
            admitted.record(!e.retryable(), now_ms());
            console_warn!("MCP server {}: listing its tools failed: {e}", spec.name);
            stale.map(|(_, tools)| (client, tools))
        }
    }
}
