//! Plan recitation: the model keeps a todo list with the built-in `update_plan` tool,
//! and before every LLM call the current plan is recited at the end of the context, where the
//! model attends to it most. The recitation is never stored; the plan itself lives in the state
//! and is rebuilt from the history (the last successful `update_plan` call), so it survives
//! between requests without storage of its own.

use std::cell::RefCell;
use std::rc::Rc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::{AgentMessage, ServerTool};
use crate::llm::fields::{self, Fields};
use crate::llm::{ContentBlock, Message, ToolDef};

pub const UPDATE_PLAN: &str = "update_plan";

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanItem {
    pub title: String,
    /// `false` when left out.
    pub done: bool,
}

/// The todo list, shared between the state and the `update_plan` tool.
pub type Plan = Rc<RefCell<Vec<PlanItem>>>;

/// The plan as of the last successful `update_plan` call in `messages`.
pub fn plan_from_history(messages: &[AgentMessage]) -> Vec<PlanItem> {
    let failed: Vec<&str> = messages
        .iter()
        .filter_map(|m| match m {
            AgentMessage::ToolResult(r) if r.is_error => Some(r.tool_call_id.as_str()),
            _ => None,
        })
        .collect();
    messages
        .iter()
        .rev()
        .filter_map(|m| match m {
            AgentMessage::Assistant(a) => Some(a),
            _ => None,
        })
        .flat_map(|a| a.tool_calls().collect::<Vec<_>>().into_iter().rev())
        .filter(|c| c.name == UPDATE_PLAN && !failed.contains(&c.id.as_str()))
        .find_map(|c| parse_items(&c.input).ok())
        .unwrap_or_default()
}

/// The recitation appended to the LLM's view, or `None` for an empty plan.
pub fn recitation(plan: &[PlanItem]) -> Option<Message> {
    if plan.is_empty() {
        return None;
    }
    let mut text = String::from("## Current Plan (TODO List)\n");
    for (i, item) in plan.iter().enumerate() {
        let mark = if item.done { "✅" } else { "⬜" };
        text.push_str(&format!("{mark} {}. {}\n", i + 1, item.title));
    }
    Some(Message::User {
        content: vec![ContentBlock::Text { text }],
    })
}

fn parse_items(input: &Value) -> Result<Vec<PlanItem>, String> {
    let items = input
        .get("items")
        .ok_or("`items` is required: the whole plan, in order")?;
    let read = |item: Value| {
        let mut f = Fields::any(item)?;
        Ok(PlanItem {
            title: f.required("title", fields::STRING)?,
            done: f.optional("done", fields::BOOL)?.unwrap_or(false),
        })
    };
    fields::list(items.clone(), "it", read)
        .map_err(|e| format!("`items` is not a list of {{title, done}}: {e}"))
}

/// The built-in tool: replaces the plan with the list it is given.
pub struct UpdatePlan {
    definition: ToolDef,
    plan: Plan,
}

impl UpdatePlan {
    pub fn new(plan: Plan) -> Self {
        Self {
            definition: ToolDef {
                name: UPDATE_PLAN.to_string(),
                description:
                    "Keep a plan for multi-step work: send the whole todo list each time, \
                              marking finished items done. The current plan is shown to you before \
                              every step."
                        .to_string(),
                input_schema: json!({
                    "type": "object",
                    "properties": {
                        "items": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "title": {"type": "string", "minLength": 1},
                                    "done": {"type": "boolean"}
                                },
                                "required": ["title", "done"]
                            }
                        }
                    },
                    "required": ["items"]
                }),
            },
            plan,
        }
    }
}

#[async_trait(?Send)]
impl ServerTool for UpdatePlan {
    fn definition(&self) -> &ToolDef {
        &self.definition
    }

    async fn call(&self, arguments: &Map<String, Value>) -> Result<Value, String> {
        let items = parse_items(&Value::Object(arguments.clone()))?;
        let done = items.iter().filter(|i| i.done).count();
        let total = items.len();
        *self.plan.borrow_mut() = items;
        Ok(Value::String(format!(
            "Plan updated: {done} of {total} done."
        )))
    }
}
