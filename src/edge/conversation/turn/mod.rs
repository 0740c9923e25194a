//! One agent turn, run by the conversation object: prepared from D1 and the object's queue, run
//! with the D1 hooks, the object's queues, the provider for the conversation's model and
//! compaction, and streamed into the object's chunk log.
//!
//! - `mod.rs`: what a turn starts from and is run with; the model it calls
//! - `prepare`: loading the history and applying how the turn starts
//! - `run`: the agent loop wired to the object, the hooks and the stream
//! - `hooks`: every message stored as it is produced; the object's inbox as the loop's queues
//! - [`resolver`], `budget_store`: the budget before every call
//! - `partial`: the answer being streamed, kept for recovery; `summary`: the turn as JSON
//! - `artifact_store`, `remote_tools`: the artifact tools' D1 store, HTTP and MCP tools
//! - [`subagent`]: agent tools, each call a turn of another agent in a child conversation
//! - `handoff`: handoff tools, which hand the conversation to another agent mid-turn
//! - `files`: the users' files loaded from R2 for each call
//! - `memory`: the user's working memory and recall; `extract`: memory kept after the answer
//! - `env`: what a turn runs with; the resolver of a turn without budgets

mod artifact_store;
mod budget_store;
mod env;
pub mod extract;
pub(crate) mod files;
mod handoff;
mod hooks;
pub mod memory;
mod partial;
mod prepare;
pub(crate) mod remote_tools;
pub mod resolver;
mod result;
mod run;
pub mod subagent;
pub(crate) mod trace;

pub use env::{FixedProvider, TurnEnv};
pub use prepare::prepare;

use std::collections::{HashSet, VecDeque};
use std::rc::Rc;

use worker::AbortSignal;

use crate::agent::artifacts::ArtifactSummary;
use crate::agent::output::OutputSpec;
use crate::agent::{AgentMessage, ToolAnswers, TurnOutcome, TurnStats};
use crate::edge::budget::Budget;
use crate::edge::config::agents::AgentSpec;
use crate::edge::conversation::storage::QueuedRow;
use crate::edge::d1::Conversation;
use crate::edge::error::ApiError;
use crate::edge::platform::providers::resilient_provider;
use crate::edge::protocol::{ApprovalIn, ToolResultIn, TurnConversation};
use crate::llm::{AssistantMessage, ModelRef, Provider, ToolDef, Usage};

/// How a turn starts.
pub enum Kickoff {
    /// The queued messages (the one just sent among them) start it.
    Queued,
    /// Answers for the calls a paused turn waits on.
    Resume {
        results: Vec<ToolResultIn>,
        approvals: Vec<ApprovalIn>,
        only_pending: bool,
    },
    /// The last user message, again.
    Retry,
    /// An interrupted turn, finished from D1: `partial` is what it had streamed of an answer.
    Recover { partial: Option<AssistantMessage> },
    /// An interrupted turn given up: its partial answer and open calls are recorded with why.
    GiveUp { partial: Option<AssistantMessage> },
}

/// A turn ready to run.
pub struct Prepared {
    /// The turn's new messages, being written alongside its start.
    pending: Option<hooks::PendingWrite>,
    /// Their queue rows, which the loop must not take again.
    taken: HashSet<i64>,
    conversation: TurnConversation,
    model: ModelRef,
    provider: Rc<dyn Provider>,
    history: Vec<AgentMessage>,
    seqs: Vec<Option<i64>>,
    answers: ToolAnswers,
    client_tools: Vec<ToolDef>,
    /// The conversation's artifacts when the turn began, for the system prompt's index.
    artifacts: Vec<ArtifactSummary>,
    /// The owner's budget, read with the history (`None` when budgets are off).
    budget: Option<Option<Budget>>,
    /// The MCP servers' tools, listed with the history.
    mcp: remote_tools::Listed,
    /// The toolsets the turn may use (`None`: all).
    toolsets: Option<Vec<String>>,
    /// Those the message or the conversation chose, before its agent's cut (`None`: all).
    chosen_toolsets: Option<Vec<String>>,
    /// The agent the turn runs as.
    agent: Rc<AgentSpec>,
    /// The typed answer the turn ends with.
    output: Option<Rc<OutputSpec>>,
    /// Its message's `output`, as the request gave it (kept with a pause).
    output_raw: Option<serde_json::Value>,
    /// Told how the first reservation goes; refused, the request's own message is taken back
    /// (`own_id`, and the chat's row when the message made it: `new_chat`).
    first_call: Option<Rc<resolver::FirstCall>>,
    own_id: Option<String>,
    new_chat: bool,
    /// The user's memory with the agent (none when it keeps none, or the conversation may not).
    memory: Option<memory::TurnMemory>,
}

/// What preparing found.
pub enum Ready {
    Run(Box<Prepared>),
    /// Nothing to run: an interrupted turn whose answer was stored whole.
    Nothing,
    /// Nothing to run: an interrupted turn given up, its note stored.
    GivenUp,
}

/// A turn's start: how, what waited in the queue when it claimed the conversation (messages
/// that arrive later join at the turn's next drain), and the message that started it.
pub struct Start {
    pub kickoff: Kickoff,
    pub queued: Vec<QueuedRow>,
    /// With its place in the object's inbox, where it is kept until it is in D1.
    pub own: Option<(String, AgentMessage, Option<i64>)>,
    /// The toolsets the message that started the turn narrowed it to.
    pub narrowed: Option<Vec<String>>,
    /// The typed answer (`output`, as the request gave it) the message that started the turn
    /// asked for, checked already; without it, its agent's.
    pub output: Option<serde_json::Value>,
    /// No call in the history can wait for an answer: the conversation was not paused, and no
    /// turn just paused (a queued message's turn that follows a pause at once is not settled).
    /// New messages are then stored in the round trip that loads the history.
    pub settled: bool,
    /// The conversation's D1 row to create with the history's round trip unless it exists (each
    /// turn of a `/v1/chat` conversation the object names without reading D1).
    pub create: Option<Conversation>,
    /// `Some(max)`: the row is created only while its owner keeps fewer than `max` (a chat's
    /// first message to this object); otherwise the turn is refused with nothing stored.
    pub create_within: Option<u32>,
    /// Told how the turn's first reservation goes, when its request waits for that.
    pub first_call: Option<Rc<resolver::FirstCall>>,
}

/// The model a turn of `conversation` calls and its provider; checked before anything is stored,
/// so a misconfigured model is refused at once.
pub fn choose_model(
    turn_env: &TurnEnv,
    conversation: &TurnConversation,
    signal: &AbortSignal,
) -> Result<(ModelRef, Rc<dyn Provider>), ApiError> {
    let agent = conversation.agent(&turn_env.config)?;
    let model = conversation.model(&turn_env.config)?;
    // Checked again at every turn: `ALLOWED_MODELS` and prices may have changed since the
    // conversation chose its model.
    turn_env.config.check_model_for(&model, agent)?;
    let chain = (&model, agent.fallback_models.as_slice());
    let provider = resilient_provider(&turn_env.env, &turn_env.config, chain, Some(signal))
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok((model, provider))
}

/// A request's typed answer, to check before its turn starts.
pub struct TypedAnswer<'a> {
    /// The message's `output`, as the request gave it (or as a paused turn kept it).
    pub raw: Option<&'a serde_json::Value>,
    pub model: &'a ModelRef,
    pub client_tools: &'a [ToolDef],
}

/// Checks the typed answer a request's turn starts with (the message's own, else its agent's)
/// against the conversation's model and the turn's tools: a bad one is a 400 (409 for a name a
/// tool has), and nothing is kept then.
pub fn check_output(
    turn_env: &TurnEnv,
    conversation: &TurnConversation,
    typed: TypedAnswer<'_>,
) -> Result<(), ApiError> {
    let agent = conversation.agent(&turn_env.config)?;
    let own = match typed.raw {
        Some(raw) => Some(Rc::new(
            OutputSpec::parse(raw).map_err(|e| ApiError::BadRequest(e.to_string()))?,
        )),
        None => None,
    };
    let Some(spec) = own.as_ref().or(agent.output.as_ref()) else {
        return Ok(());
    };
    let config = &turn_env.config;
    let offers_tools = agent.offers_tools() || !typed.client_tools.is_empty();
    config
        .check_output(spec, typed.model, offers_tools)
        .map_err(ApiError::BadRequest)?;
    // A call of the answer's name is read as the answer: no tool the turn offers may have it.
    let taken = typed.client_tools.iter().any(|t| t.name == spec.name)
        || crate::agent::built_in_tool_names().any(|n| n == spec.name)
        || config.http_tools.iter().any(|t| t.name == spec.name);
    if taken {
        return Err(ApiError::Conflict(format!(
            "a tool is named `{}` like the typed answer: give `output.name` another name",
            spec.name
        )));
    }
    Ok(())
}

/// What a turn produced, for `stream: false` and the object's end step.
pub struct TurnResult {
    pub messages: Vec<AgentMessage>,
    pub usage: Usage,
    pub outcome: TurnOutcome,
    /// The client tools the turn offered (a pause remembers them).
    pub client_tools: Vec<ToolDef>,
    /// What it did, for its log line.
    pub stats: TurnStats,
    /// Why the messages that started it could not be stored: they wait in the inbox, and the
    /// turn counts as one that failed to start.
    pub unstored: Option<String>,
    /// The id its typed answer was stored under.
    pub answer_id: Option<String>,
    /// Its message's `output`, as the request gave it (kept with a pause).
    pub output: Option<serde_json::Value>,
    /// It was asked for a typed answer.
    pub typed: bool,
    /// How memory went, for the log line (`None`: the turn had none).
    pub memory: Option<serde_json::Value>,
    /// Memory to keep once the stream has ended (`managed_by: "background"`).
    pub extract: Option<extract::Pending>,
    /// Messages to embed once the stream has ended, for semantic recall.
    pub embed: Option<memory::Embed>,
    /// The turn's spans, to export once the stream has ended (`None`: not traced).
    pub trace: Option<trace::Export>,
}
