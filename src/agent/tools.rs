//! The tool registry: server tools (run here), client tools (run by the caller; the loop pauses),
//! and the built-in `current_time`; and the rule every tool's name keeps ([`is_tool_name`]).

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::AgentMessage;
use crate::llm::{ToolCall, ToolDef};

/// A person's decision on a tool call that needed approval.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub approved: bool,
    pub reason: Option<String>,
}

/// What separates a call's id from the id of a call made within it (a sub-agent's): `p1/c9` is
/// call `c9` of the child that call `p1` runs.
pub const NESTED: char = '/';

/// How a server tool's call ended.
pub enum Ran {
    /// Its result (`Err`: a message for the model, recorded as an error result).
    Done(Result<Value, String>),
    /// It waits for a person: `calls` (a sub-agent's, each under an id that starts with this
    /// call's and [`NESTED`]) need approval. The call keeps no result, the turn pauses, and the
    /// resumed turn runs the call again with the person's decisions.
    Waiting(Vec<ToolCall>),
    /// It hands the conversation to the agent `to` (its result is `output`): the turn's
    /// remaining calls are not run, and the application goes on as that agent.
    HandOff { output: Value, to: String },
}

/// The longest tool name every provider accepts.
pub const MAX_TOOL_NAME: usize = 64;

/// Whether `c` may be part of a tool name: an ASCII letter or digit, `_` or `-`, what every
/// provider accepts.
pub fn is_tool_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// A tool name every provider accepts: 1 to [`MAX_TOOL_NAME`] letters, digits, `_` or `-`. The
/// one rule for every name a tool is offered under: configured, an MCP server's, a client's.
pub fn is_tool_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_TOOL_NAME && name.chars().all(is_tool_name_char)
}

/// A tool that runs inside the Worker.
#[async_trait(?Send)]
pub trait ServerTool {
    fn definition(&self) -> &ToolDef;

    /// Runs the tool. `Err` is a message for the model, recorded as an error result.
    async fn call(&self, arguments: &Map<String, Value>) -> Result<Value, String>;

    /// Runs the tool for the model's call `call_id`; a tool whose API should recognise a
    /// repeated call (an HTTP tool's `Idempotency-Key`) uses the id, others just [`call`].
    ///
    /// [`call`]: ServerTool::call
    async fn call_as(
        &self,
        call_id: &str,
        arguments: &Map<String, Value>,
    ) -> Result<Value, String> {
        let _ = call_id;
        self.call(arguments).await
    }

    /// Whether calls to this tool may run at the same time as other such calls from the same
    /// answer (no side effects that depend on order). Results are recorded in call order
    /// either way.
    fn concurrent(&self) -> bool {
        false
    }

    /// Runs the call with the decisions a person made on calls it waited for (those of
    /// [`Ran::Waiting`], by their nested ids); most tools never wait, and just [`call_as`].
    ///
    /// [`call_as`]: ServerTool::call_as
    async fn run(
        &self,
        call_id: &str,
        arguments: &Map<String, Value>,
        decisions: Vec<(String, Approval)>,
    ) -> Ran {
        let _ = decisions;
        Ran::Done(self.call_as(call_id, arguments).await)
    }

    /// Whether the tool bounds its own time (a sub-agent, whose turn may run past
    /// `TOOL_TIMEOUT_MS` and must be stopped, not dropped); the loop then applies no timeout.
    fn bounds_own_time(&self) -> bool {
        false
    }

    /// Whether a call of it needs no reply of its own (`update_memory`): a step that said
    /// something and called only such tools ends the turn once they have run, rather than
    /// calling the model again to answer their results (which is how a memory update loops).
    fn quiet(&self) -> bool {
        false
    }
}

/// How a tool the model called is executed.
pub enum ToolKind<'a> {
    Server(&'a dyn ServerTool),
    /// A server tool that runs only once a person approves the call.
    NeedsApproval(&'a dyn ServerTool),
    Client(&'a ToolDef),
}

/// Picks, before each LLM call, which toolsets the model sees, from the history so far and the
/// toolset names there are (a few relevant tools work better than every tool).
pub type ToolsetSelector = Box<dyn Fn(&[AgentMessage], &[&str]) -> Vec<String>>;

#[derive(Default)]
pub struct ToolRegistry {
    /// Server tools with the toolset each belongs to (`None`: always offered).
    server: Vec<(Option<String>, Box<dyn ServerTool>)>,
    client: Vec<ToolDef>,
    selector: Option<ToolsetSelector>,
    /// Server tools that wait for a person's approval (`APPROVAL_REQUIRED_TOOLS`).
    approval_required: Vec<String>,
}

impl ToolRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// A server tool that is always offered.
    pub fn register_server_tool(&mut self, tool: Box<dyn ServerTool>) {
        self.register(None, tool);
    }

    /// A server tool offered only when the selector picks `toolset`.
    pub fn register_in_toolset(&mut self, toolset: &str, tool: Box<dyn ServerTool>) {
        self.register(Some(toolset.to_string()), tool);
    }

    /// Keeps only the server tools `keep` accepts (an agent's own list of tools).
    pub fn retain_server_tools(&mut self, keep: impl Fn(&str) -> bool) {
        self.server
            .retain(|(_, tool)| keep(&tool.definition().name));
    }

    /// Makes calls to the server tool `name` wait for a person's approval.
    pub fn require_approval(&mut self, name: &str) {
        self.approval_required.push(name.to_string());
    }

    /// Decides per LLM call which toolsets are offered. Without one, every tool is.
    pub fn set_toolset_selector(&mut self, selector: ToolsetSelector) {
        self.selector = Some(selector);
    }

    fn register(&mut self, toolset: Option<String>, tool: Box<dyn ServerTool>) {
        let name = tool.definition().name.clone();
        self.server.retain(|(_, t)| t.definition().name != name);
        self.server.push((toolset, tool));
    }

    /// Adds tools the caller executes (from the request). A server tool of the same name wins:
    /// a client cannot replace what the server runs.
    pub fn merge_client_tools(&mut self, tools: impl IntoIterator<Item = ToolDef>) {
        for tool in tools {
            if self.classify(&tool.name).is_none() {
                self.client.push(tool);
            }
        }
    }

    pub fn classify(&self, name: &str) -> Option<ToolKind<'_>> {
        if let Some((_, tool)) = self
            .server
            .iter()
            .find(|(_, t)| t.definition().name == name)
        {
            if self.approval_required.iter().any(|n| n == name) {
                return Some(ToolKind::NeedsApproval(tool.as_ref()));
            }
            return Some(ToolKind::Server(tool.as_ref()));
        }
        self.client
            .iter()
            .find(|t| t.name == name)
            .map(ToolKind::Client)
    }

    /// Whether `name` is a server tool whose calls need no reply ([`ServerTool::quiet`]).
    pub fn quiet(&self, name: &str) -> bool {
        matches!(self.classify(name), Some(ToolKind::Server(tool)) if tool.quiet())
    }

    /// Every tool the model may call.
    pub fn definitions(&self) -> Vec<ToolDef> {
        self.server
            .iter()
            .map(|(_, t)| t.definition().clone())
            .chain(self.client.iter().cloned())
            .collect()
    }

    /// The tools offered for the next LLM call: those in no toolset, those in the toolsets the
    /// selector picks for `history`, and the client's.
    pub fn offered(&self, history: &[AgentMessage]) -> Vec<ToolDef> {
        let Some(selector) = &self.selector else {
            return self.definitions();
        };
        let mut names: Vec<&str> = self
            .server
            .iter()
            .filter_map(|(set, _)| set.as_deref())
            .collect();
        names.sort_unstable();
        names.dedup();
        let chosen = selector(history, &names);
        self.server
            .iter()
            .filter(|(set, _)| set.as_ref().is_none_or(|s| chosen.contains(s)))
            .map(|(_, t)| t.definition().clone())
            .chain(self.client.iter().cloned())
            .collect()
    }

    pub fn has_tools(&self) -> bool {
        !self.server.is_empty() || !self.client.is_empty()
    }
}

/// A tool's definition with its schema given as JSON text (a `json!` literal would compile to
/// code per key, in the Worker too). A schema that is not valid JSON becomes an empty object
/// schema, which the tests of each tool would show.
pub fn definition(name: &str, description: &str, schema: &str) -> ToolDef {
    ToolDef {
        name: name.to_string(),
        description: description.to_string(),
        input_schema: crate::llm::json::from_str(schema)
            .unwrap_or_else(|_| json!({"type": "object", "properties": {}})),
    }
}

/// A server tool made of one async function, for tools that need no state of their own:
///
/// ```ignore
/// tools.register_server_tool(tool_fn(
///     "roll_die",
///     "Rolls a die with `sides` sides.",
///     r#"{"type": "object", "properties": {"sides": {"type": "integer", "minimum": 2}}, "required": ["sides"]}"#,
///     |args| async move {
///         let sides = args["sides"].as_u64().ok_or("`sides` must be a whole number")?;
///         Ok(json!({"rolled": 1 + (js_random() * sides as f64) as u64}))
///     },
/// ));
/// ```
///
/// The arguments arrive checked against the schema; `Err` is an error result the model reads.
/// A schema that is not valid JSON is replaced by an empty object schema (and shows in tests).
pub fn tool_fn<F, Fut>(name: &str, description: &str, schema: &str, run: F) -> Box<dyn ServerTool>
where
    F: Fn(Map<String, Value>) -> Fut + 'static,
    Fut: std::future::Future<Output = Result<Value, String>> + 'static,
{
    Box::new(FnTool {
        definition: definition(name, description, schema),
        run,
    })
}

struct FnTool<F> {
    definition: ToolDef,
    run: F,
}

#[async_trait(?Send)]
impl<F, Fut> ServerTool for FnTool<F>
where
    F: Fn(Map<String, Value>) -> Fut + 'static,
    Fut: std::future::Future<Output = Result<Value, String>> + 'static,
{
    fn definition(&self) -> &ToolDef {
        &self.definition
    }

    async fn call(&self, arguments: &Map<String, Value>) -> Result<Value, String> {
        (self.run)(arguments.clone()).await
    }
}

/// The name of [`CurrentTime`].
pub const CURRENT_TIME: &str = "current_time";

/// Built-in server tool: the current date and time in UTC.
pub struct CurrentTime {
    definition: ToolDef,
}

impl Default for CurrentTime {
    fn default() -> Self {
        Self {
            definition: ToolDef {
                name: CURRENT_TIME.to_string(),
                description: "Returns the current date and time (UTC, ISO 8601).".to_string(),
                input_schema: json!({"type": "object", "properties": {}}),
            },
        }
    }
}

#[async_trait(?Send)]
impl ServerTool for CurrentTime {
    fn definition(&self) -> &ToolDef {
        &self.definition
    }

    fn concurrent(&self) -> bool {
        true
    }

    async fn call(&self, _arguments: &Map<String, Value>) -> Result<Value, String> {
        let unix_ms = web_time::SystemTime::now()
            .duration_since(web_time::UNIX_EPOCH)
            .map_err(|e| format!("the clock is before 1970: {e}"))?
            .as_millis() as i64;
        Ok(json!({"utc": super::calendar::iso8601(unix_ms), "unix_ms": unix_ms}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_time_reports_now() {
        let out = futures::executor::block_on(CurrentTime::default().call(&Map::new())).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        let reported = out["unix_ms"].as_i64().unwrap();
        assert!((now - reported).abs() < 5_000);
        assert_eq!(out["utc"], crate::agent::calendar::iso8601(reported));
    }

    #[test]
    fn tool_names_are_what_every_provider_accepts() {
        assert!(is_tool_name("get_weather-2"));
        assert!(is_tool_name(&"x".repeat(MAX_TOOL_NAME)));
        assert!(!is_tool_name(&"x".repeat(MAX_TOOL_NAME + 1)));
        assert!(!is_tool_name(""));
        assert!(!is_tool_name("get.page"));
        assert!(!is_tool_name("café"));
    }

    #[test]
    fn server_tools_win_over_client_tools_of_the_same_name() {
        let mut registry = ToolRegistry::new();
        registry.register_server_tool(Box::new(CurrentTime::default()));
        registry.merge_client_tools([
            ToolDef {
                name: "current_time".into(),
                description: "spoof".into(),
                input_schema: json!({}),
            },
            ToolDef {
                name: "show_map".into(),
                description: "client".into(),
                input_schema: json!({}),
            },
        ]);
        assert!(matches!(
            registry.classify("current_time"),
            Some(ToolKind::Server(_))
        ));
        assert!(matches!(
            registry.classify("show_map"),
            Some(ToolKind::Client(_))
        ));
        assert!(registry.classify("nope").is_none());
        assert_eq!(registry.definitions().len(), 2);
    }
}
