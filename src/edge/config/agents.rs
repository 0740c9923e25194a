//! `AGENTS`: the agents a deployment declares, each a system prompt, a model and the tools it
//! may use. A conversation belongs to one agent, chosen when it is made and kept for its life.
//! Without `AGENTS` there is one agent, [`DEFAULT_AGENT`], made of the deployment's settings
//! (`DEFAULT_MODEL`, `FALLBACK_MODELS`, `MAX_LLM_CALLS`, every toolset), so a deployment that
//! declares none behaves as before agents existed.

use std::rc::Rc;

use crate::agent::output::OutputSpec;
use serde_json::Value;

use crate::agent::tools::{is_tool_name, MAX_TOOL_NAME};
use crate::llm::fields::{self, Fields};
use crate::llm::ModelRef;

/// The agent of a deployment without `AGENTS`, and the one a conversation that names none gets
/// when `AGENTS` declares it (else the first declared).
pub const DEFAULT_AGENT: &str = "default";

/// Most characters in an agent's name: a tool name's rule, since tools will be named after
/// agents (sub-agents, the MCP server).
pub const MAX_AGENT_NAME: usize = MAX_TOOL_NAME;

/// Most characters in a `system` prompt, an agent's or a conversation's.
pub const MAX_SYSTEM_CHARS: usize = 32 * 1024;
/// Most characters in an agent's `description`.
const MAX_DESCRIPTION_CHARS: usize = 1024;

/// One agent, with the deployment's settings filled in where it leaves them out.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSpec {
    pub name: String,
    pub description: String,
    /// Its instructions; a conversation's own `system` follows them.
    pub system: Option<String>,
    pub model: ModelRef,
    pub fallback_models: Vec<ModelRef>,
    /// The toolsets its turns may use (`None`: every configured one); a conversation may narrow
    /// them further.
    pub toolsets: Option<Vec<String>>,
    /// The only server tools it may call (`None`: every tool of its toolsets).
    pub tools: Option<Vec<String>>,
    pub max_llm_calls: u32,
    /// The typed answer every turn of it ends with, unless a message asks for its own.
    pub output: Option<Rc<OutputSpec>>,
    /// The agents it may call as tools (`{"type": "agent"}` entries of its `tools`).
    pub agent_tools: Vec<Rc<AgentToolSpec>>,
    /// The agents it may hand the conversation to (`{"type": "handoff"}` entries).
    pub handoffs: Vec<Rc<HandoffSpec>>,
    /// What it remembers of a user across conversations (`memory`; `None`: nothing).
    pub memory: Option<Rc<super::memory::MemorySpec>>,
}

/// A tool that hands the conversation to another agent (`{"type": "handoff", "agent":
/// "<name>"}` in an agent's `tools`): `transfer_to_<agent>`, whose call makes that agent the
/// conversation's from the next step on (its instructions, model and tools).
#[derive(Debug, Clone, PartialEq)]
pub struct HandoffSpec {
    /// `transfer_to_<agent>`.
    pub name: String,
    pub agent: String,
    /// What the model is told of it (default: the agent's `description`).
    pub description: Option<String>,
}

/// A tool that asks another agent (`{"type": "agent", "agent": "<name>"}` in an agent's
/// `tools`): its call runs a turn of that agent in a child conversation, whose answer (its text,
/// or its typed answer) is the call's result.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentToolSpec {
    /// The tool's name (default: the agent's).
    pub name: String,
    /// The agent it asks.
    pub agent: String,
    /// What the model is told of it (default: the agent's `description`).
    pub description: Option<String>,
    /// Its arguments (default: `{task: string}`).
    pub input_schema: Value,
    /// What the child sees of the parent's conversation.
    pub history: ChildHistory,
    /// Most LLM calls of the child's turn (within its agent's own `max_llm_calls`).
    pub max_llm_calls: Option<u32>,
    /// How long the call may take (within the parent's `TURN_DEADLINE_MS`).
    pub timeout_ms: Option<u32>,
}

/// What a child conversation starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildHistory {
    /// The task only.
    None,
    /// The task after an excerpt of the parent's latest exchanges.
    Summary,
}

/// The input of an agent tool that declares none: the task, in words.
pub const TASK_SCHEMA: &str = r#"{"type": "object", "properties": {"task": {"type": "string", "description": "What the agent is to do, with everything it needs to know: it sees nothing else."}}, "required": ["task"]}"#;

/// What an agent leaves out is taken from these.
pub struct Defaults<'a> {
    pub model: &'a ModelRef,
    pub fallback_models: &'a [ModelRef],
    pub max_llm_calls: u32,
}

impl AgentSpec {
    /// The agent of a deployment that declares none.
    pub fn deployment(defaults: &Defaults) -> Self {
        Self {
            name: DEFAULT_AGENT.into(),
            description: "The deployment's agent.".into(),
            system: None,
            model: defaults.model.clone(),
            fallback_models: defaults.fallback_models.to_vec(),
            toolsets: None,
            tools: None,
            max_llm_calls: defaults.max_llm_calls,
            output: None,
            agent_tools: Vec::new(),
            handoffs: Vec::new(),
            memory: None,
        }
    }

    /// Whether its calls offer tools: the built-in ones are always there, unless it names none.
    pub fn offers_tools(&self) -> bool {
        self.tools.as_ref().is_none_or(|t| !t.is_empty())
            || !self.agent_tools.is_empty()
            || !self.handoffs.is_empty()
    }

    /// Refuses toolsets outside its own, naming them.
    pub fn check_toolsets(&self, names: &[String]) -> Result<(), crate::edge::error::ApiError> {
        let Some(own) = &self.toolsets else {
            return Ok(());
        };
        match names.iter().find(|n| !own.contains(n)) {
            Some(other) => Err(crate::edge::error::ApiError::BadRequest(format!(
                "the agent `{}` may use only the toolsets {}; not `{other}`",
                self.name,
                own.join(", ")
            ))),
            None => Ok(()),
        }
    }

    /// The toolsets a turn may use: those `chosen` (a conversation's, a message's) that are the
    /// agent's too, else the agent's own. A conversation chosen before its agent was narrowed
    /// gets no more than the agent has now.
    pub fn toolsets_within(&self, chosen: Option<Vec<String>>) -> Option<Vec<String>> {
        match (chosen, &self.toolsets) {
            (Some(chosen), Some(own)) => {
                Some(chosen.into_iter().filter(|t| own.contains(t)).collect())
            }
            (chosen, own) => chosen.or_else(|| own.clone()),
        }
    }

    /// Whether its turns may use `toolset`.
    pub fn has_toolset(&self, toolset: &str) -> bool {
        self.toolsets
            .as_ref()
            .is_none_or(|own| own.iter().any(|t| t == toolset))
    }

    /// Its instructions followed by a conversation's own.
    pub fn system_with(&self, own: Option<&str>) -> Option<String> {
        match (self.system.as_deref(), own) {
            (Some(agent), Some(own)) => Some(format!("{agent}\n\n{own}")),
            (agent, own) => agent.or(own).map(str::to_string),
        }
    }
}

/// An agent tool's or a handoff's own `description`, within [`MAX_DESCRIPTION_CHARS`].
fn tool_description(f: &mut Fields) -> Result<Option<String>, String> {
    let description = f.optional("description", fields::STRING)?;
    if description
        .as_ref()
        .is_some_and(|d| d.chars().count() > MAX_DESCRIPTION_CHARS)
    {
        return Err(format!(
            "`description` is longer than {MAX_DESCRIPTION_CHARS} characters"
        ));
    }
    Ok(description)
}

/// `max_llm_calls`, an agent's or an agent tool's: from 1 to 100.
fn max_llm_calls(f: &mut Fields) -> Result<Option<u32>, String> {
    let max = f.optional("max_llm_calls", fields::U32)?;
    if max.is_some_and(|n| !(1..=100).contains(&n)) {
        return Err("`max_llm_calls` must be from 1 to 100".into());
    }
    Ok(max)
}

/// Whether `name` may name an agent: 1 to [`MAX_AGENT_NAME`] letters, digits, `_` or `-`.
pub fn is_agent_name(name: &str) -> bool {
    is_tool_name(name)
}

/// Reads `AGENTS`: a JSON object of name → agent. Errors name the agent and the field.
pub fn parse_agents(json: &str, defaults: &Defaults) -> Result<Vec<AgentSpec>, String> {
    let value: Value =
        crate::llm::json::from_str(json).map_err(|e| format!("not a JSON object: {e}"))?;
    let Value::Object(map) = value else {
        return Err("must be a JSON object of agent name → agent".into());
    };
    if map.is_empty() {
        return Err("declares no agent".into());
    }
    let known = [
        "description",
        "system",
        "model",
        "fallback_models",
        "toolsets",
        "tools",
        "output",
        "max_llm_calls",
        "memory",
    ];
    map.into_iter()
        .map(|(name, value)| {
            let at = |message: String| format!("agent `{name}`: {message}");
            if !is_agent_name(&name) {
                return Err(at(format!(
                    "a name must be 1 to {MAX_AGENT_NAME} letters, digits, `_` or `-`"
                )));
            }
            let mut f = Fields::of(value, &known).map_err(at)?;
            read_agent(name.clone(), &mut f, defaults).map_err(at)
        })
        .collect()
}

fn read_agent(name: String, f: &mut Fields, defaults: &Defaults) -> Result<AgentSpec, String> {
    let model = |id: String| ModelRef::parse(&id).map_err(|e| e.to_string());
    let output = match f.value("output") {
        Some(output) => Some(Rc::new(
            OutputSpec::parse(&output).map_err(|e| e.to_string())?,
        )),
        None => None,
    };
    let description = f.required("description", fields::STRING)?;
    let system = f.optional("system", fields::STRING)?;
    let too_long = |field: &str, text: &str, max: usize| {
        (text.chars().count() > max).then(|| format!("`{field}` is longer than {max} characters"))
    };
    if let Some(e) = too_long("description", &description, MAX_DESCRIPTION_CHARS)
        .or_else(|| too_long("system", system.as_deref().unwrap_or(""), MAX_SYSTEM_CHARS))
    {
        return Err(e);
    }
    let Tools {
        names: tools,
        agents: agent_tools,
        handoffs,
    } = match f.value("tools") {
        Some(Value::Array(entries)) => read_tools(entries)?,
        Some(_) => {
            return Err("`tools` must be an array of tool names and agent tools".into());
        }
        None => Tools::default(),
    };
    let max_llm_calls = max_llm_calls(f)?;
    let memory = f.value("memory").map(super::memory::read).transpose()?;
    Ok(AgentSpec {
        name,
        description,
        system,
        model: match f.optional("model", fields::STRING)? {
            Some(id) => model(id).map_err(|e| format!("`model`: {e}"))?,
            None => defaults.model.clone(),
        },
        fallback_models: match f.optional("fallback_models", fields::STRINGS)? {
            Some(ids) => ids
                .into_iter()
                .map(model)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("`fallback_models`: {e}"))?,
            None => defaults.fallback_models.to_vec(),
        },
        toolsets: f.optional("toolsets", fields::STRINGS)?,
        tools,
        max_llm_calls: max_llm_calls.unwrap_or(defaults.max_llm_calls),
        output,
        agent_tools,
        handoffs,
        memory: memory.map(Rc::new),
    })
}

/// An agent's `tools`: names of the tools it may call, the agents it may ask
/// (`{"type": "agent", ...}`) and those it may hand the conversation to (`{"type": "handoff"}`).
#[derive(Default)]
struct Tools {
    names: Option<Vec<String>>,
    agents: Vec<Rc<AgentToolSpec>>,
    handoffs: Vec<Rc<HandoffSpec>>,
}

fn read_tools(entries: Vec<Value>) -> Result<Tools, String> {
    let mut names = Vec::new();
    let mut agents = Vec::new();
    let mut handoffs = Vec::new();
    for (i, entry) in entries.into_iter().enumerate() {
        let at = |message: String| format!("`tools[{i}]`: {message}");
        let name = match entry {
            Value::String(name) if is_tool_name(&name) => name,
            Value::String(name) => return Err(format!("`tools`: `{name}` is not a tool name")),
            Value::Object(_) if entry["type"] == "handoff" => {
                let spec = read_handoff(entry).map_err(at)?;
                let name = spec.name.clone();
                handoffs.push(Rc::new(spec));
                name
            }
            Value::Object(_) => {
                let spec = read_agent_tool(entry).map_err(at)?;
                let name = spec.name.clone();
                agents.push(Rc::new(spec));
                name
            }
            _ => return Err(at("must be a tool name or an agent tool object".into())),
        };
        if names.contains(&name) {
            return Err(at(format!("the name `{name}` is taken twice")));
        }
        names.push(name);
    }
    // Agent tools alone leave the agent no other server tool: the list names every tool.
    let others =
        |n: &String| !agents.iter().any(|a| &a.name == n) && !handoffs.iter().any(|h| &h.name == n);
    let names = names.into_iter().filter(others).collect();
    Ok(Tools {
        names: Some(names),
        agents,
        handoffs,
    })
}

fn read_handoff(entry: Value) -> Result<HandoffSpec, String> {
    let mut f = Fields::of(entry, &["type", "agent", "description"])?;
    let agent = f.required("agent", fields::STRING)?;
    let name = format!("transfer_to_{agent}");
    if !is_tool_name(&name) {
        return Err(format!(
            "the handoff's tool `{name}` is not a tool name (at most {MAX_TOOL_NAME} characters): \
             give the agent a shorter name"
        ));
    }
    let description = tool_description(&mut f)?;
    Ok(HandoffSpec {
        name,
        agent,
        description,
    })
}

fn read_agent_tool(entry: Value) -> Result<AgentToolSpec, String> {
    let known = [
        "type",
        "agent",
        "name",
        "description",
        "input_schema",
        "history",
        "max_llm_calls",
        "timeout_ms",
    ];
    let mut f = Fields::of(entry, &known)?;
    match f.required("type", fields::STRING)?.as_str() {
        "agent" => {}
        other => {
            return Err(format!(
                "`type` must be `agent` or `handoff`, not `{other}`"
            ))
        }
    }
    let agent = f.required("agent", fields::STRING)?;
    let name = f
        .optional("name", fields::STRING)?
        .unwrap_or_else(|| agent.clone());
    if !is_tool_name(&name) {
        return Err(format!(
            "`{name}` is not a tool name (1 to {MAX_TOOL_NAME} letters, digits, `_` or `-`)"
        ));
    }
    let description = tool_description(&mut f)?;
    let input_schema = match f.value("input_schema") {
        Some(schema @ Value::Object(_)) if schema["type"] == "object" => schema,
        Some(_) => return Err("`input_schema` must be a JSON Schema of `type: object`".into()),
        None => crate::llm::json::from_str(TASK_SCHEMA).map_err(|e| e.to_string())?,
    };
    let history = match f.optional("history", fields::STRING)?.as_deref() {
        None | Some("none") => ChildHistory::None,
        Some("summary") => ChildHistory::Summary,
        Some(other) => {
            return Err(format!(
                "`history` must be `none` or `summary`, not `{other}`"
            ))
        }
    };
    let max_llm_calls = max_llm_calls(&mut f)?;
    let timeout_ms = f.optional("timeout_ms", fields::U32)?;
    if timeout_ms.is_some_and(|n| !(1_000..=3_600_000).contains(&n)) {
        return Err("`timeout_ms` must be from 1000 to 3600000".into());
    }
    Ok(AgentToolSpec {
        name,
        agent,
        description,
        input_schema,
        history,
        max_llm_calls,
        timeout_ms,
    })
}

/// Checks the agents' calls of each other: each names an agent there is, none calls itself
/// through others (the cycle is named), and no chain is deeper than `max_depth` agents below
/// the first.
pub fn check_agent_graph(agents: &[Rc<AgentSpec>], max_depth: u32) -> Result<(), String> {
    for agent in agents {
        for handoff in &agent.handoffs {
            if handoff.agent == agent.name || !agents.iter().any(|a| a.name == handoff.agent) {
                return Err(format!(
                    "agent `{}`: `{}` hands to `{}`, which is not another declared agent",
                    agent.name, handoff.name, handoff.agent
                ));
            }
        }
        for tool in &agent.agent_tools {
            if !agents.iter().any(|a| a.name == tool.agent) {
                let names: Vec<String> = agents.iter().map(|a| format!("`{}`", a.name)).collect();
                return Err(format!(
                    "agent `{}`: tool `{}` asks the agent `{}`, which is not declared; there are {}",
                    agent.name,
                    tool.name,
                    tool.agent,
                    names.join(", ")
                ));
            }
        }
    }
    // Depth-first from every agent, the path so far kept to name a cycle, each agent's longest
    // chain kept once found (agents asking the same others would be walked once per path).
    fn deepest<'a>(
        agents: &'a [Rc<AgentSpec>],
        name: &'a str,
        path: &mut Vec<&'a str>,
        known: &mut Vec<(&'a str, Vec<&'a str>)>,
    ) -> Result<Vec<&'a str>, String> {
        if let Some(at) = path.iter().position(|n| *n == name) {
            let mut cycle: Vec<&str> = path[at..].to_vec();
            cycle.push(name);
            return Err(format!(
                "agents call each other in a cycle: {}",
                cycle.join(" → ")
            ));
        }
        if let Some((_, chain)) = known.iter().find(|(n, _)| *n == name) {
            return Ok(chain.clone());
        }
        path.push(name);
        let mut longest = vec![name];
        if let Some(agent) = agents.iter().find(|a| a.name == name) {
            for tool in &agent.agent_tools {
                let below = deepest(agents, &tool.agent, path, known)?;
                if below.len() + 1 > longest.len() {
                    longest = std::iter::once(name).chain(below).collect();
                }
            }
        }
        path.pop();
        known.push((name, longest.clone()));
        Ok(longest)
    }
    let mut known = Vec::new();
    for agent in agents {
        let chain = deepest(agents, &agent.name, &mut Vec::new(), &mut known)?;
        let depth = chain.len() as u32 - 1;
        if depth > max_depth {
            return Err(format!(
                "agent `{}`: the chain {} is {depth} agents deep, past MAX_AGENT_DEPTH ({max_depth})",
                agent.name,
                chain.join(" → ")
            ));
        }
    }
    Ok(())
}
