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
use crate::edge::conversation::storage::ObjectStorage;
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::protocol::TurnConversation;
use crate::llm::{ModelRef, Provider, ToolDef};

/// The input a handoff takes: why, for the record.
const SCHEMA: &str = r#"{"type": "object", "properties": {"reason": {"type": "string", "description": "Why the conversation goes to that agent, in a few words."}}}"#;

pub struct TransferTool {
    definition: ToolDef,
    to: String,
    conversation: Rc<Handing>,
}

/// What a handoff changes: the conversation's D1 row and the object's copy.
pub struct Handing {
    pub store: Rc<Store>,
    pub storage: Rc<ObjectStorage>,
    pub conversation: TurnConversation,
}

impl TransferTool {
    /// `description`: the receiving agent's, when the handoff gives none.
    pub fn new(spec: &HandoffSpec, description: &str, conversation: Rc<Handing>) -> Self {
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
            conversation,
        }
    }
}

#[async_trait(?Send)]
impl ServerTool for TransferTool {
    fn definition(&self) -> &ToolDef {
        &self.definition
    }

    /// Never called by the loop, which runs calls with [`ServerTool::run`].
    async fn call(&self, _arguments: &Map<String, Value>) -> Result<Value, String> {
        Err("a handoff is run by the turn".into())
    }

    /// Hands the conversation over before the call's result is stored: the object's copy
    /// first (a turn recovered after a crash runs as the agent it names), then the D1 row (the
    /// conversation's for every later request); a failure is the call's error result, and
    /// nothing changes.
    async fn run(
        &self,
        _call_id: &str,
        _arguments: &Map<String, Value>,
        _decisions: Vec<(String, Approval)>,
    ) -> Ran {
        let Handing {
            store,
            storage,
            conversation,
        } = self.conversation.as_ref();
        let to = self.to.as_str();
        let mut handed = conversation.clone();
        handed.agent = Some(to.to_string());
        handed.model = None;
        let failed = |e: &dyn std::fmt::Display| {
            Ran::Done(Err(format!(
                "the conversation could not be handed to `{to}`: {e}"
            )))
        };
        if let Err(e) = storage.set_conversation(&handed) {
            return failed(&e);
        }
        if let Err(e) = store
            .hand_over(&conversation.id, &conversation.owner, to)
            .await
        {
            if let Err(e) = storage.set_conversation(conversation) {
                worker::console_error!("taking back a handoff's object copy: {e}");
            }
            return failed(&e);
        }
        Ran::HandOff {
            output: json!({"handed_to": to}),
            to: to.to_string(),
        }
    }
}

/// A model and the provider that serves it.
type Chosen = (ModelRef, Rc<dyn Provider>);

/// The agent a turn goes on as once a handoff has made `to` the conversation's (`conversation`
/// follows), with that agent's model and provider.
pub fn next_agent(
    turn_env: &TurnEnv,
    conversation: &mut TurnConversation,
    to: &str,
    signal: &AbortSignal,
) -> Result<(Rc<AgentSpec>, Chosen), ApiError> {
    let next = turn_env.config.agent(Some(to))?.clone();
    conversation.agent = Some(to.to_string());
    conversation.model = None;
    let chosen = super::choose_model(turn_env, conversation, signal)?;
    Ok((next, chosen))
}
