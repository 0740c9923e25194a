//! `AgentState`: what one turn works on, rebuilt from storage for every request, and the
//! `Queues` through which messages sent during the turn reach it.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use async_trait::async_trait;

use super::plan::{plan_from_history, Plan};
use super::tools::Approval;
use super::{AgentEvent, AgentMessage, Compactor, TurnHooks};
use crate::llm::{Sleeper, ToolCall, Usage};

/// Where messages sent while a turn runs wait for it.
#[async_trait(?Send)]
pub trait Queues {
    /// Steering messages, checked before each tool call. Taking them removes them.
    async fn drain_steering(&self) -> Vec<AgentMessage>;

    /// Called when the loop would end: steering and follow-up messages, in the order they were
    /// sent. An empty answer ends the turn, so an implementation that guards the turn (a lease)
    /// must release it in the same atomic step, or a message arriving in between is stranded.
    async fn drain_at_end(&self) -> Vec<AgentMessage>;
}

/// In-memory queues, for native use and tests.
#[derive(Default)]
pub struct LocalQueues {
    steering: RefCell<Vec<AgentMessage>>,
    followup: RefCell<Vec<AgentMessage>>,
}

impl LocalQueues {
    pub fn enqueue_steering(&self, message: AgentMessage) {
        self.steering.borrow_mut().push(message);
    }

    pub fn enqueue_followup(&self, message: AgentMessage) {
        self.followup.borrow_mut().push(message);
    }
}

#[async_trait(?Send)]
impl Queues for LocalQueues {
    async fn drain_steering(&self) -> Vec<AgentMessage> {
        std::mem::take(&mut *self.steering.borrow_mut())
    }

    async fn drain_at_end(&self) -> Vec<AgentMessage> {
        let mut out = std::mem::take(&mut *self.steering.borrow_mut());
        out.append(&mut self.followup.borrow_mut());
        out
    }
}

/// Cancels a running turn from outside it (the application flips it; the loop checks it before
/// each LLM call and each tool, and the application aborts the provider call itself).
#[derive(Debug, Clone, Default)]
pub struct CancelToken(Rc<Cell<bool>>);

impl CancelToken {
    pub fn cancel(&self) {
        self.0.set(true);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.get()
    }
}

/// What the caller brings back to a paused turn, by tool call id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolAnswers {
    /// Client tool results: (content, is_error).
    pub results: HashMap<String, (String, bool)>,
    pub approvals: HashMap<String, Approval>,
}

/// The state of one turn. Request-scoped: storage is the source of truth.
pub struct AgentState {
    pub system_prompt: Option<String>,
    pub messages: Vec<AgentMessage>,
    /// Most LLM calls in one turn (`MAX_LLM_CALLS`).
    pub max_llm_calls: u32,
    /// Most tool calls run in one turn (`MAX_TOOL_CALLS`); calls past it get error results.
    pub max_tool_calls: u32,
    /// How long one server tool may run (`TOOL_TIMEOUT_MS`); needs `timer`.
    pub tool_timeout_ms: Option<u64>,
    /// How long the whole turn may run (`TURN_DEADLINE_MS`), checked before each LLM call and
    /// each tool.
    pub turn_deadline_ms: Option<u64>,
    /// The platform's timer, for tool timeouts.
    pub timer: Option<Rc<dyn Sleeper>>,
    /// Tool calls run so far in this turn.
    pub tool_calls: u32,
    /// The todo list `update_plan` keeps, recited before every LLM call.
    pub plan: Plan,
    /// Compacts the history before an LLM call when it grows too long.
    pub compactor: Option<Rc<Compactor>>,
    /// Client results and approvals for the calls a paused turn waits on.
    pub answers: ToolAnswers,
    /// Set from outside to stop the turn.
    pub cancel: CancelToken,
    pub max_tokens: u32,
    pub temperature: Option<f32>,
    /// LLM calls made so far in this turn.
    pub llm_calls: u32,
    pub total_usage: Usage,
    pub queues: Rc<dyn Queues>,
    /// Random, and new for every run of a turn (the platform's CSPRNG): with the call's number it
    /// starts the ids of tool calls a provider sends without one, so no two calls of any user
    /// share an id. Empty natively, where ids are `call_<n>_<i>`.
    pub call_id_nonce: String,
    /// The typed answer the turn must end with (`output`), if any.
    pub output: Option<Rc<crate::agent::output::OutputSpec>>,
}

impl AgentState {
    /// The text of the last answer, if any.
    pub fn final_text(&self) -> String {
        self.messages
            .iter()
            .rev()
            .find_map(|m| match m {
                AgentMessage::Assistant(a) => Some(a.text()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// A state for `messages`; the plan is taken from them.
    pub fn new(system_prompt: Option<String>, messages: Vec<AgentMessage>) -> Self {
        let plan = Rc::new(RefCell::new(plan_from_history(&messages)));
        Self {
            system_prompt,
            messages,
            max_llm_calls: 10,
            max_tool_calls: 50,
            tool_timeout_ms: None,
            turn_deadline_ms: None,
            timer: None,
            tool_calls: 0,
            plan,
            compactor: None,
            answers: ToolAnswers::default(),
            cancel: CancelToken::default(),
            max_tokens: 4096,
            temperature: None,
            llm_calls: 0,
            total_usage: Usage::default(),
            queues: Rc::new(LocalQueues::default()),
            call_id_nonce: String::new(),
            output: None,
        }
    }
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnOutcome {
    /// The model finished and nothing was waiting in the queues.
    Completed,
    /// `on_step_end` asked to stop.
    Stopped,
    /// The model called client tools; the turn waits for their results.
    AwaitingToolResults(Vec<ToolCall>),
    /// The model called tools that need a person's approval; the turn waits for decisions.
    AwaitingApproval(Vec<ToolCall>),
    /// A limit ended the turn (`MAX_LLM_CALLS`, `TURN_DEADLINE_MS`); says which.
    LimitReached(String),
    /// The LLM, the provider resolver or `on_step_end` failed.
    Failed { message: String, is_retryable: bool },
    /// The turn was cancelled; what the model had said is kept, marked aborted.
    Cancelled,
    /// A tool handed the conversation to another agent ([`Ran::HandOff`]): the application
    /// goes on with the turn as that agent.
    ///
    /// [`Ran::HandOff`]: crate::agent::tools::Ran::HandOff
    HandedOff(String),
}

impl TurnOutcome {
    /// How the turn ended, in one word (its log line's `outcome`, its trace's).
    pub fn name(&self) -> &'static str {
        match self {
            TurnOutcome::Completed => "completed",
            TurnOutcome::Stopped => "stopped",
            TurnOutcome::AwaitingToolResults(_) => "awaiting_tool_results",
            TurnOutcome::AwaitingApproval(_) => "awaiting_approval",
            TurnOutcome::LimitReached(_) => "limit_reached",
            TurnOutcome::Failed { .. } => "failed",
            TurnOutcome::Cancelled => "cancelled",
            // The turn goes on as the other agent: never a turn's end.
            TurnOutcome::HandedOff(_) => "handed_off",
        }
    }
}

/// The deadline message, if `TURN_DEADLINE_MS` has passed.
pub(crate) fn deadline_passed(state: &AgentState, started: web_time::Instant) -> Option<String> {
    let deadline = state.turn_deadline_ms?;
    let elapsed = started.elapsed().as_millis() as u64;
    (elapsed >= deadline).then(|| {
        format!("the turn ran {elapsed} ms, past its deadline of {deadline} ms (TURN_DEADLINE_MS)")
    })
}

/// Stores `message` (`on_message`; a failure is logged and the turn goes on) and adds it to
/// the history.
pub(crate) async fn add_message(
    state: &mut AgentState,
    hooks: &dyn TurnHooks,
    message: AgentMessage,
) {
    if let Err(e) = hooks.on_message(&message).await {
        hooks.warn(&format!(
            "on_message failed for a {} message; the turn goes on: {e}",
            message.kind()
        ));
    }
    state.messages.push(message);
}

/// Messages sent during the turn, injected into its history (`skipped`: the calls they cut
/// short).
pub(crate) async fn inject(
    state: &mut AgentState,
    hooks: &dyn TurnHooks,
    emit: &mut dyn FnMut(AgentEvent<'_>),
    skipped: &[ToolCall],
    messages: Vec<AgentMessage>,
) {
    emit(AgentEvent::Steering {
        skipped,
        messages: &messages,
    });
    for message in messages {
        add_message(state, hooks, message).await;
    }
}
