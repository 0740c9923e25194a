//! What the Worker and the conversation object exchange. The Worker authenticates and validates,
//! then hands the request over: the object checks the caller against the conversation it keeps
//! (or is given one the Worker read from D1), decides whether a turn starts, runs it, and answers
//! with the turn's stream (or 202, or a JSON error), which the Worker relays as it is. This
//! module imports neither side.

use crate::edge::d1::conversations::Remembered;
use std::rc::Rc;

use serde::Serialize;

use crate::agent::AgentMessage;
use crate::edge::config::agents::AgentSpec;
use crate::edge::config::Config;
use crate::edge::error::ApiError;
use crate::llm::json::{self, FromJson, Reader};
use crate::llm::ToolDef;

/// The binding of the conversation objects.
pub const BINDING: &str = "CONVERSATIONS";

/// The header naming a request; the Worker passes it on to the conversation's object.
pub const REQUEST_ID: &str = "x-request-id";

/// The conversation object's routes: what the Worker's client asks and the object's router
/// matches, written once.
pub mod route {
    pub const SEND: &str = "/send";
    pub const STREAM: &str = "/stream";
    pub const CANCEL: &str = "/cancel";
    pub const CLEAR: &str = "/clear";
    pub const FORGET: &str = "/forget";
    pub const STATUS: &str = "/status";
    pub const SCHEDULES: &str = "/schedules";
    /// `/schedules/{id}`: one schedule.
    pub const SCHEDULE: &str = "/schedules/";
}

/// When a message sent during a turn joins it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Before the next tool call (the remaining calls are skipped).
    Steering,
    /// When the turn would end.
    Followup,
}

crate::json_enum!(Delivery { "steering" => Steering, "followup" => Followup });

impl Delivery {
    pub fn as_str(self) -> &'static str {
        match self {
            Delivery::Steering => "steering",
            Delivery::Followup => "followup",
        }
    }
}

/// A client tool's result for a call a paused turn waits on.
#[derive(Debug, Clone, Serialize)]

pub struct ToolResultIn {
    pub tool_call_id: String,
    pub output: serde_json::Value,
    pub is_error: bool,
}

crate::json_struct!(#[deny_unknown_fields] ToolResultIn {
    "tool_call_id" => tool_call_id,
    "output" => output,
    "is_error" => is_error: default,
});

/// A person's decision on a call a paused turn waits to have approved.
#[derive(Debug, Clone, Serialize)]

pub struct ApprovalIn {
    pub tool_call_id: String,
    pub approved: bool,
    pub reason: Option<String>,
}

crate::json_struct!(#[deny_unknown_fields] ApprovalIn {
    "tool_call_id" => tool_call_id,
    "approved" => approved,
    "reason" => reason,
});

/// What a request asks of the conversation. Externally tagged (serde's default form).
// One per request, moved a few times: boxing the message would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnRequest {
    /// A user message: starts a turn, or waits for the running one.
    Message {
        /// Given when the message is accepted; D1 writes are idempotent on it.
        id: String,
        message: AgentMessage,
        delivery: Delivery,
        /// `id` comes from the client's idempotency key ([`keyed_id`]): a send with a key
        /// already accepted runs nothing again, and one with another body is refused.
        keyed: Option<Keyed>,
    },
    /// Answers for a paused turn.
    Resume {
        results: Vec<ToolResultIn>,
        approvals: Vec<ApprovalIn>,
        /// Answers for calls the turn does not wait on are dropped instead of refused (the
        /// `useChat` body repeats every earlier tool output).
        only_pending: bool,
    },
    /// Runs the last user message again.
    Retry,
}

impl<'a> FromJson<'a> for TurnRequest {
    fn read(r: &mut Reader<'a>) -> json::Result<Self> {
        const NAMES: &[&str] = &["message", "resume", "retry"];
        let request = match r.variant("enum TurnRequest")? {
            (name, false) if name == "retry" => return Ok(TurnRequest::Retry),
            (name, true) if name == "message" => crate::json_fields!(
                r,
                "struct variant TurnRequest::Message",
                TurnRequest::Message {
                    "id" => id,
                    "message" => message,
                    "delivery" => delivery,
                    "keyed" => keyed,
                }
            ),
            (name, true) if name == "resume" => crate::json_fields!(
                r,
                "struct variant TurnRequest::Resume",
                TurnRequest::Resume {
                    "results" => results,
                    "approvals" => approvals,
                    "only_pending" => only_pending,
                }
            ),
            (name, _) => return Err(r.unknown_name("variant", &name, NAMES)),
        };
        r.end_variant()?;
        Ok(request)
    }
}

/// What a send made repeatable by an idempotency key carries of it.
#[derive(Debug, Clone, Serialize)]
pub struct Keyed {
    /// The key as the client sent it, for the errors that name it.
    pub key: String,
    /// A digest of what the request carried ([`body_digest`]): the key sent again with
    /// another body is refused (422), not taken for a repeat.
    pub body: String,
}

crate::json_struct!(Keyed {
    "key" => key,
    "body" => body,
});

/// A digest of a request's body, kept with its idempotency key.
pub fn body_digest(body: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(body)[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The message id a client's idempotency key stands for: the same key sent again by the same
/// caller to the same conversation names the same message, and nothing else does.
pub fn keyed_id(caller: &str, conversation: &str, key: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(caller.as_bytes())
        .chain_update([0])
        .chain_update(conversation.as_bytes())
        .chain_update([0])
        .chain_update(key.as_bytes())
        .finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// An idempotency key as a client may send it: 1 to 255 visible ASCII characters.
pub fn check_key(key: &str, name: &str) -> Result<(), crate::edge::error::ApiError> {
    if key.is_empty() || key.len() > 255 || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(crate::edge::error::ApiError::BadRequest(format!(
            "`{name}` must be 1 to 255 visible ASCII characters"
        )));
    }
    Ok(())
}

/// What a turn needs of the conversation's row (checked against the caller by the Worker).
#[derive(Debug, Clone, Serialize)]
pub struct TurnConversation {
    pub id: String,
    pub owner: String,
    pub system: Option<String>,
    pub model: Option<String>,
    /// The toolsets its turns may use; `None`: every configured one.
    pub toolsets: Option<Vec<String>>,
    /// The agent it belongs to; `None`: the deployment's default agent.
    pub agent: Option<String>,
    /// A child conversation's: most LLM calls of a turn, within its agent's (the agent tool's
    /// `max_llm_calls`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_llm_calls: Option<u32>,
    /// A child conversation's: the conversation whose agent tool asks it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// Whether it is remembered: `Off` (made with `memory: false`), its turns neither read nor
    /// write memory; `Indexed`, its messages are indexed for recall (and given vectors).
    #[serde(
        serialize_with = "crate::edge::d1::conversations::memory_column_write",
        skip_serializing_if = "Remembered::is_default"
    )]
    pub memory: Remembered,
}

crate::json_struct!(TurnConversation {
    "id" => id,
    "owner" => owner,
    "system" => system,
    "model" => model,
    "toolsets" => toolsets: default,
    "agent" => agent: default,
    "max_llm_calls" => max_llm_calls: default,
    "parent" => parent: default,
    "memory" => memory: default_with(crate::edge::d1::conversations::memory_column_read),
});

impl TurnConversation {
    /// The model its turns call: its own, else its agent's.
    pub fn model(&self, config: &Config) -> Result<crate::llm::ModelRef, ApiError> {
        match &self.model {
            Some(model) => {
                crate::llm::ModelRef::parse(model).map_err(|e| ApiError::BadRequest(e.to_string()))
            }
            None => Ok(self.agent(config)?.model.clone()),
        }
    }

    /// The agent its turns run as. One the deployment no longer declares is a 409 naming it.
    pub fn agent<'c>(&self, config: &'c Config) -> Result<&'c Rc<AgentSpec>, ApiError> {
        config.agent(self.agent.as_deref()).map_err(|_| {
            ApiError::Conflict(format!(
                "conversation `{}` belongs to the agent `{}`, which this deployment no longer \
                 declares (AGENTS)",
                self.id,
                self.agent.as_deref().unwrap_or_default()
            ))
        })
    }
}

impl From<&crate::edge::d1::Conversation> for TurnConversation {
    fn from(c: &crate::edge::d1::Conversation) -> Self {
        Self {
            id: c.id.clone(),
            owner: c.owner.clone(),
            system: c.system.clone(),
            model: c.model.clone(),
            toolsets: c.toolsets.clone(),
            agent: c.agent.clone(),
            max_llm_calls: None,
            parent: c.parent.clone(),
            memory: c.memory,
        }
    }
}

/// A schedule to create, with the conversation (read from D1 by the Worker) whose turns it runs.
#[derive(Serialize)]
pub struct ScheduleHandover {
    pub conversation: TurnConversation,
    pub request: crate::agent::schedules::ScheduleRequest,
}

crate::json_struct!(ScheduleHandover {
    "conversation" => conversation,
    "request" => request,
});

/// The object's answer to a [`Handover`] without a conversation when it keeps none: the Worker
/// reads the conversation from D1 and sends again.
pub const UNKNOWN_CONVERSATION: u16 = 428;

/// The object's answer to a [`ChatStart`] that D1 resolved to another conversation: the body is
/// that conversation (a [`TurnConversation`]), whose object the Worker sends to instead.
pub const ELSEWHERE: u16 = 421;

/// A `/v1/chat` message sent to the object the Worker guessed for its id. An object that keeps
/// its conversation (every message after the first) needs no D1 read; one that keeps none
/// resolves the id in D1 (the caller's conversation `raw_id`, else the
/// caller's own scoped one, created on first use) and runs the turn when that is itself.
#[derive(Serialize)]
pub struct ChatStart {
    pub raw_id: String,
    /// The name the Worker addressed this object by.
    pub target: String,
    /// The title a conversation created now gets.
    pub title: Option<String>,
    /// The agent a conversation created now belongs to (the default agent's when `None`).
    pub agent: Option<String>,
}

crate::json_struct!(ChatStart {
    "raw_id" => raw_id,
    "target" => target,
    "title" => title,
    "agent" => agent: default,
});

#[derive(Serialize)]
/// A request handed over to the conversation's object.
pub struct Handover {
    /// The conversation as D1 has it (the object keeps it); `None` asks the object to use the
    /// one it keeps, which spares the Worker a D1 round trip before the first byte.
    pub conversation: Option<TurnConversation>,
    /// Who asks: the kept conversation's owner, or the object answers 404.
    pub caller: String,
    pub request: TurnRequest,
    /// Client tools offered for this turn (a paused turn remembers what it offered).
    pub client_tools: Vec<ToolDef>,
    /// `false`: answer with the whole turn as JSON once it ends.
    pub stream: bool,
    /// Toolsets this message narrows its turn to (within the conversation's).
    pub toolsets: Option<Vec<String>>,
    /// Set by `/v1/chat` (with `conversation: None`).
    pub chat: Option<ChatStart>,
    /// The typed answer the message's turn ends with (`output`, as the request gave it; checked
    /// by the Worker, read again by the object).
    pub output: Option<serde_json::Value>,
    /// Only asks whether the keyed message was taken before (the Worker asks before it stores
    /// the message's files, so a repeat stores none): its answer to a repeat, a 422 for the key
    /// with another body, else 204 and nothing is kept.
    pub probe: bool,
    /// Sent by the agent tool of the conversation's parent: a child conversation takes
    /// messages, answers and retries from its parent only (the Worker never sets it).
    pub from_parent: bool,
    /// The W3C `traceparent` of the request (or of the parent's tool call): a traced turn's
    /// spans are that span's children.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

crate::json_struct!(Handover {
    "conversation" => conversation,
    "caller" => caller,
    "request" => request,
    "client_tools" => client_tools,
    "stream" => stream,
    "toolsets" => toolsets: default,
    "chat" => chat: default,
    "output" => output: default,
    "probe" => probe: default,
    "from_parent" => from_parent: default,
    "traceparent" => traceparent: default,
});

#[derive(Serialize)]
pub struct Status {
    pub running: bool,
    pub steering: i64,
    pub followup: i64,
    /// `tool_results` or `approval` when the last turn paused.
    pub paused: Option<String>,
    /// The calls the paused turn waits to have approved, those made within its calls (a
    /// sub-agent's, `p1/c9`) among them.
    pub waiting: Vec<crate::llm::ToolCall>,
}

crate::json_struct!(Status {
    "running" => running,
    "steering" => steering,
    "followup" => followup,
    "paused" => paused,
    "waiting" => waiting: default,
});
