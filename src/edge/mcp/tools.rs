//! What `tools/list` shows and what a `tools/call` asks: one `ask_<agent>` tool per agent of the
//! deployment (`AGENTS`), whose arguments are a message for it, the caller's conversation to
//! continue, and decisions on the calls a paused turn waits on. Pure code, tested natively.

use serde_json::{json, Map, Value};

use super::rpc::RpcError;
use crate::agent::output::spec::Kind;
use crate::agent::output::OutputSpec;
use crate::agent::remote::HttpToolSpec;
use crate::edge::config::agents::AgentSpec;
use crate::edge::config::Config;
use crate::edge::protocol::ApprovalIn;

/// An agent's tool is its name after this.
pub const PREFIX: &str = "ask_";

/// The longest message taken, in characters (as a conversation's title is cut from it).
pub const MAX_MESSAGE_CHARS: usize = 100_000;

/// Every tool `tools/list` shows: the agents', then with `MCP_EXPOSE_TOOLS` the HTTP tools.
pub fn listed(config: &Config) -> Vec<Value> {
    let agents = config.agents.iter().map(|agent| definition(agent));
    let http = exposed(config).map(|spec| {
        json!({
            "name": spec.name,
            "description": spec.description,
            "inputSchema": spec.input_schema,
        })
    });
    agents.chain(http).collect()
}

/// The HTTP tools `/mcp` offers (with `MCP_EXPOSE_TOOLS`): not one that waits for a person's
/// approval, which a call from outside any turn has no one to ask.
pub fn exposed(config: &Config) -> impl Iterator<Item = &HttpToolSpec> {
    config
        .http_tools
        .iter()
        .filter(|_| config.mcp_expose_tools)
        .filter(|spec| !config.approval_required_tools.contains(&spec.name))
}

/// An exposed HTTP tool's result: its value as text (a string as is), and as
/// `structuredContent` when it is an object; a failure, with `isError`.
pub fn http_result(result: Result<Value, String>) -> Value {
    match result {
        Ok(value) => {
            let text = match &value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            let mut result = json!({"content": [{"type": "text", "text": text}], "isError": false});
            if value.is_object() {
                result["structuredContent"] = value;
            }
            result
        }
        Err(message) => json!({"content": [{"type": "text", "text": message}], "isError": true}),
    }
}

fn definition(agent: &AgentSpec) -> Value {
    let mut tool = json!({
        "name": format!("{PREFIX}{}", agent.name),
        "title": format!("Ask {}", agent.name),
        "description": format!(
            "{} (Runs a turn of the agent `{}` in a conversation of yours and returns its \
             answer; pass the `conversation_id` it gives back to continue that conversation.)",
            agent.description.trim_end(),
            agent.name
        ),
        "inputSchema": input_schema(),
    });
    if let Some(schema) = agent.output.as_deref().and_then(output_schema) {
        tool["outputSchema"] = schema;
    }
    tool
}

fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "message": {
                "type": "string",
                "description": "What to ask the agent. Required unless `approvals` answers a paused turn.",
            },
            "conversation_id": {
                "type": "string",
                "description": "A conversation of yours to continue (an earlier call's); a new one when absent.",
            },
            "approvals": {
                "type": "array",
                "description": "Decisions on the tool calls a paused turn waits on (with that turn's `conversation_id`).",
                "items": {
                    "type": "object",
                    "properties": {
                        "tool_call_id": {"type": "string"},
                        "approved": {"type": "boolean"},
                        "reason": {"type": "string"},
                    },
                    "required": ["tool_call_id", "approved"],
                    "additionalProperties": false,
                },
            },
        },
        "additionalProperties": false,
    })
}

/// The schema of a typed answer's `structuredContent`, which MCP wants an object: an object
/// answer's own schema, an array's or a choice's wrapped as the model is asked for it
/// (`{elements}`, `{result}`). A `json` answer may be anything, so it declares none.
fn output_schema(spec: &OutputSpec) -> Option<Value> {
    (spec.kind != Kind::Json).then(|| spec.schema.clone())
}

/// A typed answer (as the turn's stream gives it, unwrapped) as `structuredContent`: wrapped as
/// `output_schema` says; a `json` answer only when it is an object.
pub fn structured(spec: &OutputSpec, answer: &Value) -> Option<Value> {
    match spec.kind {
        Kind::Object => answer.is_object().then(|| answer.clone()),
        Kind::Array => Some(json!({"elements": answer})),
        Kind::Choice => Some(json!({"result": answer})),
        Kind::Json => answer.is_object().then(|| answer.clone()),
    }
}

/// The agent a tool's name asks; `None` for a name this server does not list.
pub fn agent_of<'c>(config: &'c Config, tool: &str) -> Option<&'c std::rc::Rc<AgentSpec>> {
    let name = tool.strip_prefix(PREFIX)?;
    config.agents.iter().find(|a| a.name == name)
}

/// A call's arguments.
#[derive(Debug)]
pub struct Ask {
    pub message: Option<String>,
    pub conversation_id: Option<String>,
    pub approvals: Vec<ApprovalIn>,
}

/// Reads a call's `arguments`: a `message`, or `approvals` for the paused turn of
/// `conversation_id`, not both (answers end a pause, a message starts a turn).
pub fn read_ask(arguments: &Value) -> Result<Ask, RpcError> {
    let bad = |why: String| Err(RpcError::InvalidParams(why));
    let empty = Map::new();
    let fields = match arguments {
        Value::Object(fields) => fields,
        Value::Null => &empty,
        _ => return bad("`arguments` must be an object".into()),
    };
    if let Some(other) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "message" | "conversation_id" | "approvals"))
    {
        return bad(format!(
            "`{other}` is not an argument: expected `message`, `conversation_id`, `approvals`"
        ));
    }
    let text = |field: &str| match fields.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RpcError::InvalidParams(format!(
            "`{field}` must be a string"
        ))),
    };
    let message = text("message")?;
    let conversation_id = text("conversation_id")?;
    let approvals = match fields.get("approvals") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(n, item)| approval(item).map_err(|why| format!("`approvals[{n}]`: {why}")))
            .collect::<Result<_, _>>()
            .map_err(RpcError::InvalidParams)?,
        Some(_) => return bad("`approvals` must be an array".into()),
    };
    match (&message, approvals.is_empty(), &conversation_id) {
        (Some(m), true, _) if m.trim().is_empty() => return bad("`message` is empty".into()),
        (Some(m), true, _) if m.chars().count() > MAX_MESSAGE_CHARS => {
            return bad(format!(
                "`message` is longer than {MAX_MESSAGE_CHARS} characters"
            ))
        }
        (Some(_), false, _) => {
            return bad(
                "send `approvals` and a new `message` in separate calls: the answers first, \
                 then the message"
                    .into(),
            )
        }
        (None, false, None) => {
            return bad("`approvals` answer a paused turn: name its `conversation_id`".into())
        }
        (None, true, _) => {
            return bad("`message` is required (or `approvals` for a paused turn)".into())
        }
        _ => {}
    }
    Ok(Ask {
        message,
        conversation_id,
        approvals,
    })
}

fn approval(item: &Value) -> Result<ApprovalIn, String> {
    let Value::Object(fields) = item else {
        return Err("must be an object".into());
    };
    if let Some(other) = fields
        .keys()
        .find(|k| !matches!(k.as_str(), "tool_call_id" | "approved" | "reason"))
    {
        return Err(format!("`{other}` is not a field"));
    }
    let Some(Value::String(id)) = fields.get("tool_call_id") else {
        return Err("`tool_call_id` (a string) is required".into());
    };
    let Some(Value::Bool(approved)) = fields.get("approved") else {
        return Err("`approved` (true or false) is required".into());
    };
    let reason = match fields.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(r)) => Some(r.clone()),
        Some(_) => return Err("`reason` must be a string".into()),
    };
    Ok(ApprovalIn {
        tool_call_id: id.clone(),
        approved: *approved,
        reason,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Three agents: untyped, typed with an object, typed with a choice.
    pub(crate) fn config() -> Config {
        let agents = r#"{
            "helper": {"description": "Answers questions."},
            "triage": {"description": "Sorts tickets.", "output": {"type": "object",
                "schema": {"type": "object", "properties": {"queue": {"type": "string"}},
                           "required": ["queue"], "additionalProperties": false}}},
            "pick": {"description": "Picks one.", "output": {"type": "choice", "options": ["a", "b"]}},
            "free": {"description": "Answers any JSON.", "output": {"type": "json"}}
        }"#;
        Config::from_lookup(|name| (name == "AGENTS").then(|| agents.to_string()))
            .expect("the agents")
    }

    #[test]
    fn every_agent_is_a_tool_and_a_typed_one_declares_its_answer() {
        let config = config();
        let tools = listed(&config);
        let named = |name: &str| {
            tools
                .iter()
                .find(|t| t["name"] == name)
                .unwrap_or_else(|| panic!("{name} in {tools:?}"))
        };
        let helper = named("ask_helper");
        assert!(helper["description"]
            .as_str()
            .unwrap()
            .starts_with("Answers questions. (Runs a turn"));
        assert_eq!(helper["inputSchema"]["type"], "object");
        assert!(helper.get("outputSchema").is_none());
        assert_eq!(
            named("ask_triage")["outputSchema"]["required"],
            json!(["queue"])
        );
        // A choice is an object for MCP: `{result}`.
        let pick = named("ask_pick");
        assert_eq!(pick["outputSchema"]["type"], "object");
        let spec = config.agent(Some("pick")).unwrap().output.clone().unwrap();
        assert_eq!(structured(&spec, &json!("a")), Some(json!({"result": "a"})));
        assert_eq!(agent_of(&config, "ask_pick").unwrap().name, "pick");
        // A `json` answer may be anything: no schema to declare.
        assert!(named("ask_free").get("outputSchema").is_none());
        assert!(agent_of(&config, "pick").is_none());
        assert!(agent_of(&config, "ask_nobody").is_none());
    }

    #[test]
    fn a_call_asks_a_message_or_answers_a_pause_never_both() {
        let ask = read_ask(&json!({"message": "hi", "conversation_id": "c1"})).unwrap();
        assert_eq!(ask.message.as_deref(), Some("hi"));
        assert_eq!(ask.conversation_id.as_deref(), Some("c1"));
        let resume = read_ask(&json!({"conversation_id": "c1",
            "approvals": [{"tool_call_id": "t1", "approved": false, "reason": "no"}]}))
        .unwrap();
        assert_eq!(resume.approvals[0].tool_call_id, "t1");
        assert!(!resume.approvals[0].approved);
        for (arguments, says) in [
            (json!({}), "`message` is required"),
            (json!({"message": "  "}), "is empty"),
            (json!({"message": 3}), "must be a string"),
            (
                json!({"message": "x", "model": "y"}),
                "`model` is not an argument",
            ),
            (
                json!({"approvals": [{"tool_call_id": "t", "approved": true}]}),
                "name its `conversation_id`",
            ),
            (
                json!({"message": "x", "conversation_id": "c", "approvals": [{"tool_call_id": "t", "approved": true}]}),
                "separate calls",
            ),
            (
                json!({"conversation_id": "c", "approvals": [{"tool_call_id": "t"}]}),
                "`approvals[0]`: `approved`",
            ),
            (json!("text"), "must be an object"),
        ] {
            let e = read_ask(&arguments).unwrap_err();
            assert_eq!(e.code(), -32602);
            assert!(e.to_string().contains(says), "{arguments}: {e}");
        }
    }
}
