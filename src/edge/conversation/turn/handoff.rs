//! Handoff tools: `{"type": "handoff", "agent": "<name>"}` in an agent's `tools` offers the
//! model `transfer_to_<name>`, whose call hands the conversation to that agent. The turn goes on
//! as that agent from its next step (`turn::run`: its instructions, model and tools), and so do
//! the conversation's later turns (its D1 row and the object's copy name the agent).

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use std::rc::Rc;

use worker::AbortSignal;

use super::TurnEnv;
use crate::agent::tools::Ran;
use crate::agent::{Approval, ServerTool};
use crate::edge::config::agents::{AgentSpec, HandoffSpec};
use crate::edge::error::ApiError;
use crate::edge::protocol::TurnConversation;
use crate::llm::{ModelRef, Provider, ToolDef};

/// The input a handoff takes: why, for the record.
const SCHEMA: &str = r#"{"type": "object", "properties": {"reason": {"type": "string", "description": "Why the conversation goes to that agent, in a few words."}}}"#;

pub struct TransferTool {
    definition: ToolDef,
    to: String,
}

impl TransferTool {
    /// `description`: the receiving agent's, when the handoff gives none.
    pub fn new(spec: &HandoffSpec, description: &str) -> Self {
        let told = spec.description.clone().unwrap_or_else(|| {
            format!(
                "Hand this conversation to the agent `{}` ({description}): it answers from the \
                 next step on, with its own instructions and tools. Use it when the user's \
                 request is that agent's to handle.",
                spec.agent
            )
        });
        Self {
            definition: crate::agent::tools::definition(&spec.name, &told, SCHEMA),
            to: spec.agent.clone(),
        }
    }
}

#[async_trait(?Send)]
impl ServerTool for TransferTool {
    fn definition(&self) -> &ToolDef {
        &self.definition
    }

    async fn call(&self, _arguments: &Map<String, Value>) -> Result<Value, String> {
        Ok(json!({"handed_to": self.to}))
    }

    async fn run(
        &self,
        _call_id: &str,
        _arguments: &Map<String, Value>,
        _decisions: Vec<(String, Approval)>,
    ) -> Ran {
        Ran::HandOff {
            output: json!({"handed_to": self.to}),
            to: self.to.clone(),
        }
    }
}

/// Hands `conversation` to the agent `to`: its D1 row and the object's copy name that agent,
/// with no model of its own (the agent's answers), and the turn goes on with that agent's model
/// and provider, which are returned with it.
pub async fn hand_over(
    turn_env: &TurnEnv,
    conversation: &mut TurnConversation,
    to: &str,
    signal: &AbortSignal,
) -> Result<(Rc<AgentSpec>, (ModelRef, Rc<dyn Provider>)), ApiError> {
    let next = turn_env.config.agent(Some(to))?.clone();
    conversation.agent = Some(to.to_string());
    conversation.model = None;
    let chosen = super::choose_model(turn_env, conversation, signal)?;
    turn_env
        .store
        .hand_over(&conversation.id, &conversation.owner, to)
        .await?;
    turn_env.storage.set_conversation(conversation)?;
    Ok((next, chosen))
}
