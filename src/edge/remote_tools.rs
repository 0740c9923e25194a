//! The deployment's remote tools for a turn: `HTTP_TOOLS` and the tools of `MCP_SERVERS`, each
//! in its toolset, calling out with the turn's abort signal (a cancelled turn stops its tool
//! calls too). MCP clients (with their sessions), their tool lists (for `MCP_TOOLS_TTL_MS`) and
//! the circuit breakers live as long as the isolate, so a turn does not list tools every time
//! and a server that is down is given up on across requests.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use futures::future::join_all;
use worker::{console_warn, AbortSignal};

use super::config::Config;
use super::fetch::FetchTransport;
use super::now_ms;
use super::turn::WorkerSleeper;
use crate::agent::remote::mcp::{McpError, McpToolInfo};
use crate::agent::remote::{exposed_name, Breakers, HttpTool, McpClient, McpServerSpec, McpTool};
use crate::agent::ToolRegistry;
use crate::llm::{HttpTransport, Sleeper, ToolDef};

/// How long a server's tool list is used before it is listed again.
pub const MCP_TOOLS_TTL_MS: i64 = 5 * 60 * 1000;

/// One MCP server as this isolate knows it.
struct KnownServer {
    client: Rc<McpClient>,
    /// The tools it listed, and when.
    listed: Option<(i64, Vec<McpToolInfo>)>,
}

thread_local! {
    static BREAKERS: Rc<Breakers> = Rc::default();
    static SERVERS: RefCell<HashMap<String, KnownServer>> = RefCell::default();
}

/// What each of `MCP_SERVERS` offers a turn (in the configuration's order): its client and
/// tools, or nothing when it cannot say. Listed by [`list`] while the turn's history loads.
pub struct Listed(Vec<Option<(Rc<McpClient>, Vec<McpToolInfo>)>>);

/// The tools of the MCP servers: the isolate's lists while fresh, else listed now, all at once.
pub async fn list(config: &Config, signal: &AbortSignal) -> Listed {
    if config.mcp_servers.is_empty() {
        return Listed(Vec::new());
    }
    let transport = transport(signal);
    let breakers = BREAKERS.with(Rc::clone);
    let secret = |name: &str| secret(config, name);
    Listed(
        join_all(config.mcp_servers.iter().map(|spec| {
            server_tools(spec, &secret, transport.as_ref(), &breakers, config, signal)
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

/// Registers the deployment's HTTP tools and the MCP servers' tools `listed`.
pub fn register(tools: &mut ToolRegistry, config: &Config, signal: &AbortSignal, listed: Listed) {
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
            Ok(tool) => tools.register_in_toolset(&toolset, Box::new(tool)),
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

/// A server's client and tools: the isolate's list while it is fresh, else listed now. A server
/// that cannot list keeps its last list (its calls then fail fast through the breaker), or
/// offers nothing this turn.
async fn server_tools(
    spec: &McpServerSpec,
    secret: &dyn Fn(&str) -> Option<String>,
    transport: &dyn HttpTransport,
    breakers: &Breakers,
    config: &Config,
    signal: &AbortSignal,
) -> Option<(Rc<McpClient>, Vec<McpToolInfo>)> {
    let now = now_ms();
    let (client, stale) = SERVERS.with(|servers| {
        let mut servers = servers.borrow_mut();
        let known = servers.get(&spec.name).filter(|k| k.client.spec == *spec);
        let (client, listed) = match known {
            Some(k) => (k.client.clone(), k.listed.clone()),
            None => {
                let client =
                    match McpClient::new(spec.clone(), secret, config.allow_private_tool_hosts) {
                        Ok(c) => Rc::new(c),
                        Err(e) => {
                            console_warn!("MCP_SERVERS: {e}");
                            return (None, None);
                        }
                    };
                servers.insert(
                    spec.name.clone(),
                    KnownServer {
                        client: client.clone(),
                        listed: None,
                    },
                );
                (client, None)
            }
        };
        (Some(client), listed)
    });
    let client = client?;
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
            SERVERS.with(|servers| {
                if let Some(known) = servers.borrow_mut().get_mut(&spec.name) {
                    known.listed = Some((now_ms(), tools.clone()));
                }
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
