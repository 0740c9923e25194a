//! Configuration from the Worker's environment (wrangler.toml vars, secrets, `.dev.vars`).
//! Parsing is separate from `Env` so it is tested natively; every error names its variable.

use crate::agent::built_in_tool_names;
use crate::agent::output::OutputSpec;
use crate::agent::remote::{parse_http_tools, parse_mcp_servers, HttpToolSpec, McpServerSpec};
use crate::llm::error::decimal;
use crate::llm::models::Registry;
use crate::llm::ModelRef;
use std::rc::Rc;

use crate::edge::error::ApiError;

pub mod access;
pub mod agents;
pub mod memory;
mod parse;
pub mod traces;
use access::{auth, AuthConfig, CorsOrigins};
use agents::{parse_agents, AgentSpec, Defaults};
use parse::{flag, number, ratio, url, Lookup};

pub const DEFAULT_MODEL: &str = "anthropic:claude-sonnet-4-5";

/// One provider's settings: its key and base URL (the provider's own when `None`).
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderSettings {
    pub name: &'static str,
    pub api_key: Option<String>,
    pub base_url: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub default_model: ModelRef,
    /// Tried in order when the model fails retryably (`FALLBACK_MODELS`, comma-separated).
    pub fallback_models: Vec<ModelRef>,
    /// Server tools that wait for a person's approval (`APPROVAL_REQUIRED_TOOLS`).
    pub approval_required_tools: Vec<String>,
    /// Each provider's key and base URL, from the variables its registry row names
    /// (`llm::providers::PROVIDERS`), in the registry's order.
    pub providers: Vec<ProviderSettings>,
    pub max_llm_calls: u32,
    pub max_tool_calls: u32,
    pub tool_timeout_ms: u32,
    pub turn_deadline_ms: u32,
    /// A provider silent this long has stalled (`PROVIDER_IDLE_TIMEOUT_MS`).
    pub provider_idle_timeout_ms: u32,
    pub max_tokens: u32,
    /// The largest file a message may carry, in bytes (`MAX_FILE_BYTES`).
    pub max_file_bytes: u32,
    /// Files one message may carry (`MAX_FILES_PER_MESSAGE`; 0 refuses every file).
    pub max_files_per_message: u32,
    /// The bytes of files one user may keep in all (`MAX_FILE_BYTES_PER_USER`): an upload past
    /// it is a 413.
    pub max_file_bytes_per_user: u64,
    /// Conversations not updated for this many days are deleted by the scheduled run
    /// (`RETENTION_DAYS`; `None`: kept for ever).
    pub retention_days: Option<u32>,
    /// The model registry with the deployment's own entries (`MODELS`).
    pub models: Registry,
    /// Compact the history sent to the model past this share of its context window
    /// (`COMPACT_THRESHOLD`).
    pub compact_threshold: f64,
    /// Who may call (`JWT_SECRET`, `API_KEYS`, `ALLOW_ANONYMOUS`).
    pub auth: AuthConfig,
    /// Browser origins allowed to call (`CORS_ORIGINS`).
    pub cors: CorsOrigins,
    /// Tools that call HTTP APIs (`HTTP_TOOLS`).
    pub http_tools: Vec<HttpToolSpec>,
    /// MCP servers whose tools the agent may call (`MCP_SERVERS`).
    pub mcp_servers: Vec<McpServerSpec>,
    /// The values of the secrets tool and MCP server headers name (`secret:NAME`), read when
    /// the configuration is.
    pub tool_secrets: Vec<(String, String)>,
    /// Lets tools call loopback and private addresses (`ALLOW_PRIVATE_TOOL_HOSTS`; local
    /// development and tests).
    pub allow_private_tool_hosts: bool,
    /// `/mcp` lists the deployment's `HTTP_TOOLS` beside its agents (`MCP_EXPOSE_TOOLS`), those
    /// that need no approval.
    pub mcp_expose_tools: bool,
    /// Where turns' traces go (`OTEL_*`); `None`: no turn is traced.
    pub traces: Option<traces::TraceSettings>,
    /// Every user's budget in US dollars per `budget_period` (`USER_BUDGET_USD`); `None`: no
    /// budgets are enforced.
    pub user_budget_usd: Option<f64>,
    /// `USER_BUDGET_PERIOD`: `day` or `month` (the default).
    pub budget_period: crate::edge::budget::Period,
    /// The cheaper model a turn moves to once the budget is spent (`BUDGET_MODEL`).
    pub budget_model: Option<ModelRef>,
    /// The model that writes compaction's summaries (`SUMMARY_MODEL`; default: the
    /// conversation's).
    pub summary_model: Option<ModelRef>,
    /// Message-sending requests per user and minute (`RATE_LIMIT_PER_MINUTE`; `0`: no limit).
    pub rate_limit_per_minute: u32,
    /// The models users may choose (`ALLOWED_MODELS`: ids or `provider:*`); `None`: any.
    pub allowed_models: Option<Vec<String>>,
    /// Conversations one user may keep (`MAX_CONVERSATIONS_PER_USER`).
    pub max_conversations_per_user: u32,
    /// How many agents deep one agent may ask others (`MAX_AGENT_DEPTH`).
    pub max_agent_depth: u32,
    /// `MEMORY_MAX_BYTES`, `MEMORY_RECALL_MS`, `MEMORY_MODEL`.
    pub memory: memory::MemorySettings,
    /// How many artifacts a conversation, and versions an artifact, may hold
    /// (`MAX_ARTIFACTS_PER_CONVERSATION`, `MAX_ARTIFACT_VERSIONS`).
    pub artifact_limits: ArtifactLimits,
    /// `MAX_SCHEDULES_PER_CONVERSATION`, `SCHEDULE_MIN_INTERVAL_SECONDS`,
    /// `MAX_SCHEDULES_PER_DAY`, `SCHEDULE_APPROVAL`.
    pub schedule_limits: crate::agent::schedules::Limits,
    /// The D1 bindings that hold the history, each owner's in one (`D1_SHARDS`; default `DB`).
    pub d1_shards: Vec<String>,
    /// The agents conversations may belong to (`AGENTS`; else one, `default`, of the settings
    /// above), in their declared order.
    pub agents: Vec<Rc<AgentSpec>>,
}

/// How much artifact history a conversation may keep in the shared D1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArtifactLimits {
    pub artifacts: u32,
    pub versions: u32,
}

impl Config {
    /// The settings of the provider model ids name `name`, if the registry has it.
    pub fn provider(&self, name: &str) -> Option<&ProviderSettings> {
        self.providers.iter().find(|p| p.name == name)
    }
}

impl Config {
    /// Builds the configuration from a variable lookup (empty values count as unset).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, ApiError> {
        let get = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        // One lookup function, not one copy of every helper per caller's closure.
        let get: Lookup = &get;
        let default_model = match get("DEFAULT_MODEL") {
            Some(id) => ModelRef::parse(&id).map_err(|e| ApiError::config("DEFAULT_MODEL", e))?,
            None => {
                ModelRef::parse(DEFAULT_MODEL).map_err(|e| ApiError::config("DEFAULT_MODEL", e))?
            }
        };
        let fallback_models = get("FALLBACK_MODELS")
            .map(|list| {
                list.split(',')
                    .map(str::trim)
                    .filter(|id| !id.is_empty())
                    .map(|id| {
                        ModelRef::parse(id).map_err(|e| ApiError::config("FALLBACK_MODELS", e))
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?
            .unwrap_or_default();
        let (http_tools, mcp_servers, tool_secrets) = remote_tools(get)?;
        let max_llm_calls = number(get, "MAX_LLM_CALLS", 10, 1..=100)?;
        let defaults = Defaults {
            model: &default_model,
            fallback_models: &fallback_models,
            max_llm_calls,
        };
        let agents = match get("AGENTS") {
            Some(json) => {
                parse_agents(&json, &defaults).map_err(|e| ApiError::config("AGENTS", e))?
            }
            None => vec![AgentSpec::deployment(&defaults)],
        };
        let agents = agents.into_iter().map(Rc::new).collect();
        let config = Self {
            default_model,
            fallback_models,
            approval_required_tools: get("APPROVAL_REQUIRED_TOOLS")
                .map(|list| {
                    list.split(',')
                        .map(str::trim)
                        .filter(|n| !n.is_empty())
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
            providers: crate::llm::providers::PROVIDERS
                .iter()
                .map(|p| {
                    Ok(ProviderSettings {
                        name: p.name,
                        api_key: p.key_var.and_then(get),
                        base_url: match p.base_url_var {
                            Some(var) => url(get, var)?,
                            None => None,
                        },
                    })
                })
                .collect::<Result<_, ApiError>>()?,
            max_llm_calls,
            max_tool_calls: number(get, "MAX_TOOL_CALLS", 50, 1..=1_000)?,
            max_file_bytes: number(get, "MAX_FILE_BYTES", 10 << 20, 1..=MAX_FILE_BYTES)?,
            max_files_per_message: number(get, "MAX_FILES_PER_MESSAGE", 5, 0..=20)?,
            max_file_bytes_per_user: number(get, "MAX_FILE_BYTES_PER_USER", 1 << 30, 1..=1 << 40)?,
            retention_days: Some(number(get, "RETENTION_DAYS", 0, 0..=36_500)?).filter(|d| *d > 0),
            tool_timeout_ms: number(get, "TOOL_TIMEOUT_MS", 30_000, 100..=900_000)?,
            turn_deadline_ms: number(get, "TURN_DEADLINE_MS", 300_000, 1_000..=3_600_000)?,
            provider_idle_timeout_ms: number(
                get,
                "PROVIDER_IDLE_TIMEOUT_MS",
                60_000,
                100..=3_600_000,
            )?,
            max_tokens: number(get, "MAX_OUTPUT_TOKENS", 4096, 1..=200_000)?,
            models: get("MODELS")
                .map(|json| Registry::parse(&json).map_err(|e| ApiError::config("MODELS", e)))
                .transpose()?
                .unwrap_or_default(),
            compact_threshold: ratio(get, "COMPACT_THRESHOLD", 0.8)?,
            auth: auth(get)?,
            cors: get("CORS_ORIGINS")
                .map(|v| CorsOrigins::parse(&v))
                .unwrap_or_default(),
            allow_private_tool_hosts: flag(get, "ALLOW_PRIVATE_TOOL_HOSTS")?,
            mcp_expose_tools: flag(get, "MCP_EXPOSE_TOOLS")?,
            traces: traces::traces(get)?,
            rate_limit_per_minute: number(get, "RATE_LIMIT_PER_MINUTE", 30, 0..=1_000_000)?,
            user_budget_usd: get("USER_BUDGET_USD")
                .map(|v| match decimal(&v) {
                    Some(usd) => Ok(usd),
                    _ => Err(ApiError::config(
                        "USER_BUDGET_USD",
                        "must be a number of US dollars, 0 or more",
                    )),
                })
                .transpose()?,
            budget_period: match get("USER_BUDGET_PERIOD") {
                None => crate::edge::budget::Period::Month,
                Some(p) => crate::edge::budget::Period::parse(p.trim()).ok_or_else(|| {
                    ApiError::config("USER_BUDGET_PERIOD", "must be `day` or `month`")
                })?,
            },
            budget_model: get("BUDGET_MODEL")
                .map(|id| ModelRef::parse(&id).map_err(|e| ApiError::config("BUDGET_MODEL", e)))
                .transpose()?,
            summary_model: get("SUMMARY_MODEL")
                .map(|id| ModelRef::parse(&id).map_err(|e| ApiError::config("SUMMARY_MODEL", e)))
                .transpose()?,
            http_tools,
            mcp_servers,
            tool_secrets,
            d1_shards: d1_shards(get)?,
            allowed_models: get("ALLOWED_MODELS")
                .map(|list| allowed_models(&list))
                .transpose()?,
            max_conversations_per_user: number(
                get,
                "MAX_CONVERSATIONS_PER_USER",
                1_000,
                1..=1_000_000,
            )?,
            max_agent_depth: number(get, "MAX_AGENT_DEPTH", 3, 1..=10)?,
            memory: memory::MemorySettings {
                max_bytes: number(get, "MEMORY_MAX_BYTES", 16 * 1024, 256..=256 * 1024)?,
                recall_ms: number(get, "MEMORY_RECALL_MS", 150, 1..=10_000)?,
                model: get("MEMORY_MODEL")
                    .map(|id| ModelRef::parse(&id).map_err(|e| ApiError::config("MEMORY_MODEL", e)))
                    .transpose()?,
                embedding_model: get("MEMORY_EMBEDDING_MODEL")
                    .unwrap_or_else(|| memory::EMBEDDING_MODEL.into()),
            },
            artifact_limits: ArtifactLimits {
                artifacts: number(get, "MAX_ARTIFACTS_PER_CONVERSATION", 50, 1..=10_000)?,
                versions: number(get, "MAX_ARTIFACT_VERSIONS", 100, 1..=10_000)?,
            },
            schedule_limits: crate::agent::schedules::Limits {
                per_conversation: number(get, "MAX_SCHEDULES_PER_CONVERSATION", 20, 1..=1_000)?,
                min_interval_s: number(get, "SCHEDULE_MIN_INTERVAL_SECONDS", 60, 1..=86_400)?,
                per_day: number(get, "MAX_SCHEDULES_PER_DAY", 50, 1..=1_000)?,
                approval: flag(get, "SCHEDULE_APPROVAL")?,
            },
            agents,
        };
        config.check_prices()?;
        config.check_agents()?;
        // Each file counts at least its floor against the quota.
        let largest = u64::from(config.max_file_bytes).max(FILE_FLOOR_BYTES);
        if config.max_file_bytes_per_user < largest {
            return Err(ApiError::config(
                "MAX_FILE_BYTES_PER_USER",
                format!("is less than {largest} bytes (MAX_FILE_BYTES, and at least 64 KiB): every file would be refused"),
            ));
        }
        Ok(config)
    }
}

/// `D1_SHARDS`: comma-separated D1 binding names, each declared in `wrangler.toml`.
fn d1_shards(get: Lookup) -> Result<Vec<String>, ApiError> {
    let Some(list) = get("D1_SHARDS") else {
        return Ok(vec![D1_BINDING.to_string()]);
    };
    let names: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    let valid = |n: &String| {
        n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !n.starts_with(|c: char| c.is_ascii_digit())
    };
    if names.is_empty() || !names.iter().all(valid) {
        return Err(ApiError::config(
            "D1_SHARDS",
            "must list D1 binding names (letters, digits, `_`), separated by commas",
        ));
    }
    if (1..names.len()).any(|i| names[..i].contains(&names[i])) {
        return Err(ApiError::config("D1_SHARDS", "names a binding twice"));
    }
    Ok(names)
}

/// `ALLOWED_MODELS`: comma-separated model ids or `provider:*`.
fn allowed_models(list: &str) -> Result<Vec<String>, ApiError> {
    list.split(',')
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .map(|id| {
            let checked = match id.strip_suffix(":*") {
                Some(provider) => ModelRef::parse(&format!("{provider}:x")).map(|_| ()),
                None => ModelRef::parse(id).map(|_| ()),
            };
            checked
                .map(|()| id.to_string())
                .map_err(|e| ApiError::config("ALLOWED_MODELS", e))
        })
        .collect()
}

impl Config {
    /// Budgets are enforced (`USER_BUDGET_USD` is set).
    pub fn budgets_on(&self) -> bool {
        self.user_budget_usd.is_some()
    }

    /// With budgets on, the models the deployment itself names must each have a price: an
    /// unpriced answer costs nothing in the ledger, so it would be free to every user.
    fn check_prices(&self) -> Result<(), ApiError> {
        if !self.budgets_on() {
            return Ok(());
        }
        // (variable, the agent naming it in `AGENTS`, model)
        let agents = self.agents.iter().flat_map(|a| {
            let models = std::iter::once(&a.model).chain(&a.fallback_models);
            models.map(move |m| ("AGENTS", Some(a.name.as_str()), m))
        });
        let named = std::iter::once(("DEFAULT_MODEL", None, &self.default_model))
            .chain(
                self.fallback_models
                    .iter()
                    .map(|m| ("FALLBACK_MODELS", None, m)),
            )
            .chain(self.budget_model.iter().map(|m| ("BUDGET_MODEL", None, m)))
            .chain(
                self.summary_model
                    .iter()
                    .map(|m| ("SUMMARY_MODEL", None, m)),
            )
            .chain(self.memory.model.iter().map(|m| ("MEMORY_MODEL", None, m)))
            .chain(agents);
        for (variable, agent, model) in named {
            if self.models.info(model).price.is_none() {
                let whose = agent.map(|a| format!("agent `{a}`: ")).unwrap_or_default();
                return Err(ApiError::config(
                    variable,
                    format!(
                        "{whose}`{model}` has no price, and USER_BUDGET_USD needs one for every \
                         model: give it one in MODELS"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether `ALLOWED_MODELS` lets users choose `model` (the default agent's always is: a
    /// conversation that names none gets it).
    pub fn allows(&self, model: &str) -> bool {
        let Some(allowed) = &self.allowed_models else {
            return true;
        };
        self.agent(None).is_ok_and(|a| a.model.to_string() == model)
            || allowed.iter().any(|a| match a.strip_suffix('*') {
                Some(provider) => model.starts_with(provider),
                None => a == model,
            })
    }

    /// [`Config::check_model`] for a conversation of `agent`, whose own model it may always
    /// call (the deployment chose it, and priced it when budgets are on).
    pub fn check_model_for(&self, model: &ModelRef, agent: &AgentSpec) -> Result<(), ApiError> {
        if *model == agent.model {
            return Ok(());
        }
        self.check_model(model)
    }

    /// Refuses a model a user chose that this deployment does not serve them: one outside
    /// `ALLOWED_MODELS`, or, with budgets on, one with no price (it would be free).
    pub fn check_model(&self, model: &ModelRef) -> Result<(), ApiError> {
        let id = model.to_string();
        if !self.allows(&id) {
            return Err(ApiError::BadRequest(format!(
                "model `{id}` is not allowed here; allowed: {}",
                self.allowed_models
                    .as_deref()
                    .unwrap_or_default()
                    .join(", ")
            )));
        }
        if self.budgets_on() && self.models.info(model).price.is_none() {
            return Err(ApiError::BadRequest(format!(
                "model `{id}` has no price, and this deployment enforces budgets: choose a \
                 priced model (GET /v1/models lists them)"
            )));
        }
        Ok(())
    }

    /// Every toolset a conversation may choose: `artifacts`, `schedules`, and those of the HTTP tools and
    /// MCP servers.
    pub fn toolsets(&self) -> Vec<String> {
        let mut sets = vec![
            crate::agent::artifacts::TOOLSET.to_string(),
            crate::agent::schedules::TOOLSET.to_string(),
            crate::agent::memory::TOOLSET.to_string(),
        ];
        let http = self
            .http_tools
            .iter()
            .map(|t| t.toolset.clone().unwrap_or_else(|| "http".into()));
        let mcp = self
            .mcp_servers
            .iter()
            .map(|s| s.toolset.clone().unwrap_or_else(|| s.name.clone()));
        for set in http.chain(mcp) {
            if !sets.contains(&set) {
                sets.push(set);
            }
        }
        sets
    }

    /// The agent `name` names, or without a name the deployment's default agent (`default`
    /// if declared, else the first); a name no agent has is a 400 naming the ones there are.
    pub fn agent(&self, name: Option<&str>) -> Result<&Rc<AgentSpec>, ApiError> {
        let wanted = name.unwrap_or(agents::DEFAULT_AGENT);
        let found = self.agents.iter().find(|a| a.name == wanted);
        match (found, name) {
            (Some(agent), _) => Ok(agent),
            (None, None) => self
                .agents
                .first()
                .ok_or_else(|| ApiError::Internal("no agent is configured".into())),
            (None, Some(name)) => Err(ApiError::BadRequest(format!(
                "there is no agent `{name}`; this deployment has {}",
                self.agents
                    .iter()
                    .map(|a| format!("`{}`", a.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// Each agent's toolsets are the deployment's, and each of its tools one it could have (its
    /// models' prices are [`Config::check_prices`]').
    fn check_agents(&self) -> Result<(), ApiError> {
        agents::check_agent_graph(&self.agents, self.max_agent_depth)
            .map_err(|e| ApiError::config("AGENTS", e))?;
        let toolsets = self.toolsets();
        for agent in &self.agents {
            let at = |message: String| {
                ApiError::config("AGENTS", format!("agent `{}`: {message}", agent.name))
            };
            if let Some(unknown) = agent
                .toolsets
                .iter()
                .flatten()
                .find(|t| !toolsets.contains(t))
            {
                return Err(at(format!(
                    "there is no toolset `{unknown}`; this deployment has {}",
                    toolsets.join(", ")
                )));
            }
            // An MCP server's tools are known only once it is reached: with one configured, a
            // name no other tool has may be one of its.
            let known = |t: &String| {
                crate::agent::built_in_tool_names().any(|n| n == t)
                    || self.http_tools.iter().any(|h| &h.name == t)
                    || !self.mcp_servers.is_empty()
            };
            if let Some(unknown) = agent.tools.iter().flatten().find(|t| !known(t)) {
                return Err(at(format!(
                    "`tools` names `{unknown}`, which is no tool here"
                )));
            }
            // An agent tool's name is its own: no built-in or HTTP tool has it.
            let taken = |t: &str| {
                crate::agent::built_in_tool_names().any(|n| n == t)
                    || self.http_tools.iter().any(|h| h.name == t)
            };
            // Its child's calls are what a person approves (`APPROVAL_REQUIRED_TOOLS` names
            // those tools, and they ask on the parent's stream); the call itself is not.
            if let Some(gated) = agent
                .agent_tools
                .iter()
                .find(|t| self.approval_required_tools.contains(&t.name))
            {
                return Err(at(format!(
                    "the agent tool `{}` is in APPROVAL_REQUIRED_TOOLS: list the tools of its \
                     agent that need approval instead (they are asked on the parent's stream)",
                    gated.name
                )));
            }
            if let Some(clash) = agent.agent_tools.iter().find(|t| taken(&t.name)) {
                return Err(at(format!(
                    "the agent tool `{}` has the name of another tool; give it a `name`",
                    clash.name
                )));
            }
            if let Some(output) = &agent.output {
                self.check_output(output, &agent.model, agent.offers_tools())
                    .map_err(at)?;
            }
            if agent.memory.as_ref().is_some_and(|m| m.by_tool())
                && !agent.has_toolset(crate::agent::memory::TOOLSET)
            {
                return Err(at(
                    "its `memory` is kept by the model (`update_memory`), but its `toolsets` \
                     leave out `memory`: add it, or set `managed_by: \"background\"`"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// Whether `model`'s provider can give typed answer `output` in the form it asks for, on
    /// calls that offer tools or not; says why not.
    pub fn check_output(
        &self,
        output: &OutputSpec,
        model: &ModelRef,
        offers_tools: bool,
    ) -> Result<(), String> {
        let native = self.models.info(model).capabilities.structured_output;
        crate::agent::output::form::form(output, &model.provider, offers_tools, native)
            .map(|_| ())
            .map_err(|why| format!("`output`: {why} (model `{model}`)"))
    }

    /// Refuses toolset names this deployment does not have, naming the ones it has.
    pub fn check_toolsets(&self, names: &[String]) -> Result<(), ApiError> {
        let known = self.toolsets();
        match names.iter().find(|n| !known.contains(n)) {
            Some(unknown) => Err(ApiError::BadRequest(format!(
                "there is no toolset `{unknown}`; this deployment has {}",
                known.join(", ")
            ))),
            None => Ok(()),
        }
    }
}

/// `HTTP_TOOLS` and `MCP_SERVERS`, and the secrets their headers name.
type RemoteTools = (Vec<HttpToolSpec>, Vec<McpServerSpec>, Vec<(String, String)>);

fn remote_tools(get: Lookup) -> Result<RemoteTools, ApiError> {
    let http = get("HTTP_TOOLS")
        .map(|json| parse_http_tools(&json).map_err(|e| ApiError::config("HTTP_TOOLS", e)))
        .transpose()?
        .unwrap_or_default();
    let mcp = get("MCP_SERVERS")
        .map(|json| parse_mcp_servers(&json).map_err(|e| ApiError::config("MCP_SERVERS", e)))
        .transpose()?
        .unwrap_or_default();
    for spec in &http {
        if built_in_tool_names().any(|name| name == spec.name) {
            return Err(ApiError::config(
                "HTTP_TOOLS",
                format!("`{}` is the name of a built-in tool", spec.name),
            ));
        }
    }
    let mut secrets: Vec<(String, String)> = Vec::new();
    let headers = http
        .iter()
        .map(|s| ("HTTP_TOOLS", &s.name, &s.headers))
        .chain(mcp.iter().map(|s| ("MCP_SERVERS", &s.name, &s.headers)));
    for (variable, owner, headers) in headers {
        for (header, value) in headers {
            let Some(name) = value.strip_prefix("secret:") else {
                continue;
            };
            if secrets.iter().any(|(n, _)| n == name) {
                continue;
            }
            let value = get(name).ok_or_else(|| {
                ApiError::config(
                    variable,
                    format!(
                        "`{owner}`: header `{header}` names the secret `{name}`, which is not set"
                    ),
                )
            })?;
            secrets.push((name.to_string(), value));
        }
    }
    Ok((http, mcp, secrets))
}

/// The most `MAX_FILE_BYTES` may allow: a message's body (where a file comes base64) is read
/// whole, and the object holds a turn's files in memory while it calls the model.
pub const MAX_FILE_BYTES: u32 = 20 << 20;

/// The least a stored file counts against its owner's `MAX_FILE_BYTES_PER_USER`: a quota of
/// tiny files would otherwise be a great many rows, each read by every upload's check (about
/// 16,000 per GiB).
pub const FILE_FLOOR_BYTES: u64 = 64 << 10;

/// The D1 binding that holds everything when `D1_SHARDS` is not set.
pub const D1_BINDING: &str = "DB";

#[cfg(test)]
mod tests;

thread_local! {
    /// The configuration, parsed once per isolate: an isolate's variables and secrets never
    /// change while it lives (new ones come with a new deployment, in a new isolate). Parsing
    /// reads every variable across the wasm boundary, a hundred crossings per request.
    static CONFIG: std::cell::RefCell<Option<std::rc::Rc<Config>>> = const { std::cell::RefCell::new(None) };
}

impl Config {
    /// The configuration of `env`, parsed on the isolate's first request and shared after.
    pub fn cached(env: &worker::Env) -> Result<std::rc::Rc<Config>, ApiError> {
        if let Some(config) = CONFIG.with(|c| c.borrow().clone()) {
            return Ok(config);
        }
        let config = std::rc::Rc::new(Config::from_lookup(|name| {
            env.var(name).ok().map(|v| v.to_string())
        })?);
        CONFIG.with(|c| *c.borrow_mut() = Some(config.clone()));
        Ok(config)
    }
}
