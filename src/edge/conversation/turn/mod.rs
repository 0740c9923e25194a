//! One agent turn, run by the conversation object: prepared from D1 and the object's queue, run
//! with the D1 hooks, the object's inbox, the provider for the conversation's model and
//! compaction, and streamed into the object's chunk log.

mod artifact_store;
mod remote_tools;
pub mod resolver;

use std::cell::{Cell, RefCell};
use std::collections::{HashSet, VecDeque};
use std::rc::Rc;

use async_trait::async_trait;
use worker::{console_error, console_warn, AbortSignal, Env};

use self::artifact_store::{D1Artifacts, SystemPrompt};
use self::resolver::{BudgetResolver, BudgetStore};
use crate::agent::artifacts::{self, ArtifactContext, ArtifactSummary};
use crate::agent::{
    pending_calls, run_agent_turn, AgentEvent, AgentMessage, AgentState, Approval, CallPlan,
    CancelToken, Compaction, Compactor, CurrentTime, HookError, Inbox, ProviderResolver, Resolved,
    ToolAnswers, ToolRegistry, TurnEndInfo, TurnHooks, TurnOutcome, TurnStats, UpdatePlan,
    MOVED_ON,
};
use crate::edge::budget::{Budget, Period};
use crate::edge::config::Config;
use crate::edge::conversation::replay::ChunkLog;
use crate::edge::conversation::rules::{self, Recovery};
use crate::edge::conversation::storage::{ObjectStorage, QueuedRow};
use crate::edge::conversation::ui_stream::UiStream;
use crate::edge::d1::{BudgetRead, Conversation, Store, TurnHistory, UsageRow};
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::clock::PollClock;
use crate::edge::platform::ids::new_id;
use crate::edge::platform::providers::resilient_provider;
use crate::edge::platform::timers::WorkerSleeper;
use crate::edge::protocol::{ApprovalIn, Delivery, ToolResultIn, TurnConversation};
use crate::edge::spend::client::SpendClient;
use crate::edge::spend::{Ask, Reply, Settle};
use crate::llm::{
    AssistantMessage, ContentBlock, LlmError, LlmEvent, ModelRef, Provider, StopReason, ToolDef,
    ToolResult, Usage,
};

/// The model a conversation uses.
pub fn model_of(conversation: &TurnConversation, config: &Config) -> Result<ModelRef, ApiError> {
    match &conversation.model {
        Some(model) => ModelRef::parse(model).map_err(|e| ApiError::BadRequest(e.to_string())),
        None => Ok(config.default_model.clone()),
    }
}

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

/// What a turn is run with; shared by the object and the turns it runs.
pub struct TurnEnv {
    pub env: Env,
    pub config: Config,
    pub store: Rc<Store>,
    pub storage: Rc<ObjectStorage>,
}

/// A turn ready to run.
pub struct Prepared {
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
}

/// What preparing found.
pub enum Ready {
    Run(Box<Prepared>),
    /// Nothing to run (an interrupted turn whose answer was stored whole, or given up).
    Nothing,
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
    /// No call in the history can wait for an answer: the conversation was not paused, and no
    /// turn just paused (a queued message's turn that follows a pause at once is not settled).
    /// New messages are then stored in the round trip that loads the history.
    pub settled: bool,
    /// The conversation's D1 row to create with the history's round trip unless it exists (each
    /// turn of a `/v1/chat` conversation the object names without reading D1).
    pub create: Option<Conversation>,
}

/// The model a turn of `conversation` calls and its provider; checked before anything is stored,
/// so a misconfigured model is refused at once.
pub fn choose_model(
    turn_env: &TurnEnv,
    conversation: &TurnConversation,
    signal: &AbortSignal,
) -> Result<(ModelRef, Rc<dyn Provider>), ApiError> {
    let model = model_of(conversation, &turn_env.config)?;
    // Checked again at every turn: `ALLOWED_MODELS` and prices may have changed since the
    // conversation chose its model.
    turn_env.config.check_model(&model)?;
    let provider = resilient_provider(&turn_env.env, &turn_env.config, &model, Some(signal))
        .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    Ok((model, provider))
}

/// Loads what the model will see (once), applies the kickoff and moves the queued messages and
/// the turn's own into D1. `signal` is the turn's: it stops the MCP servers' listing too.
pub async fn prepare(
    turn_env: &TurnEnv,
    conversation: &TurnConversation,
    start: Start,
    client_tools: Vec<ToolDef>,
    (model, provider): (ModelRef, Rc<dyn Provider>),
    signal: &AbortSignal,
) -> Result<Ready, ApiError> {
    let Start {
        kickoff,
        queued,
        own,
        narrowed,
        settled,
        create,
    } = start;
    let store = &turn_env.store;
    let id = conversation.id.as_str();
    if matches!(kickoff, Kickoff::Retry) {
        let retried = store.supersede_after_last_user(id).await?;
        if !retried && turn_env.storage.queue_len(None)? == 0 {
            return Err(ApiError::Conflict(format!(
                "conversation `{id}` has no user message to retry"
            )));
        }
    }
    // The queue moves into D1; each message leaves the queue only once it is stored.
    let mut incoming: Vec<_> = queued
        .into_iter()
        .filter_map(|row| {
            let message = turn_env.storage.read(&row)?;
            Some((row.id, message, Some(row.seq)))
        })
        .collect();
    incoming.extend(own);
    // New messages join the history in the round trip that loads it, unless calls may wait for
    // answers: those are answered (for the record) before a message follows them.
    let together = settled && matches!(kickoff, Kickoff::Queued) && !incoming.is_empty();
    let stored_first: Vec<(&str, &AgentMessage)> = if together {
        incoming.iter().map(|(i, m, _)| (i.as_str(), m)).collect()
    } else {
        Vec::new()
    };
    // With budgets on, the owner's is read in the same round trip as the history.
    let budget_read = turn_env.config.user_budget_usd.map(|limit| BudgetRead {
        owner: &conversation.owner,
        default: (limit, turn_env.config.budget_period),
    });
    // The MCP servers' tools are listed (when the isolate's lists are stale) while the history
    // loads, not after it.
    let (history, mcp) = futures::future::join(
        store.turn_history(id, create.as_ref(), &stored_first, budget_read, now_ms()),
        remote_tools::list(&turn_env.config, id, signal),
    )
    .await;
    let TurnHistory {
        mut seqs,
        messages: mut history,
        artifacts,
        budget,
    } = history?;
    drop(stored_first);
    if together {
        for (_, _, queue_seq) in incoming.drain(..) {
            if let Some(queue_seq) = queue_seq {
                turn_env.storage.dequeue(queue_seq)?;
            }
        }
    }
    let mut answers = ToolAnswers::default();
    let mut recovered = Vec::new();
    match kickoff {
        Kickoff::Queued | Kickoff::Retry => {}
        Kickoff::Resume {
            results,
            approvals,
            only_pending,
        } => {
            answers = resume_answers(&pending_ids(&history), results, approvals, only_pending)?;
        }
        Kickoff::Recover { partial } => match rules::recovery(&history, partial) {
            Recovery::Answered => return Ok(Ready::Nothing),
            Recovery::Continue(messages) => recovered = messages,
        },
        Kickoff::GiveUp { partial } => {
            let messages = match rules::recovery(&history, partial) {
                Recovery::Answered => vec![],
                Recovery::Continue(messages) => messages,
            };
            for m in messages.into_iter().chain([rules::given_up_note()]) {
                store.append_message(id, &new_id()?, &m, now_ms()).await?;
            }
            return Ok(Ready::Nothing);
        }
    }
    for message in recovered {
        seqs.push(Some(
            store
                .append_message(id, &new_id()?, &message, now_ms())
                .await?,
        ));
        history.push(message);
    }

    // A new user message instead of the answers a paused turn waits for: the open calls are
    // answered for the record, so every call keeps a result.
    if incoming
        .iter()
        .any(|(_, m, _)| matches!(m, AgentMessage::User { .. }))
    {
        for call in pending_calls(&history) {
            let result = AgentMessage::ToolResult(ToolResult {
                tool_call_id: call.id,
                tool_name: call.name,
                content: MOVED_ON.to_string(),
                is_error: true,
            });
            let seq = store
                .append_message(id, &new_id()?, &result, now_ms())
                .await?;
            history.push(result);
            seqs.push(Some(seq));
        }
    }
    for (message_id, message, queue_seq) in incoming {
        let seq = store
            .append_message(id, &message_id, &message, now_ms())
            .await?;
        if let Some(queue_seq) = queue_seq {
            turn_env.storage.dequeue(queue_seq)?;
        }
        history.push(message);
        seqs.push(Some(seq));
    }
    Ok(Ready::Run(Box::new(Prepared {
        conversation: conversation.clone(),
        model,
        provider,
        history,
        seqs,
        answers,
        client_tools,
        artifacts,
        budget,
        mcp,
        toolsets: narrowed.or_else(|| conversation.toolsets.clone()),
    })))
}

fn pending_ids(history: &[AgentMessage]) -> Vec<String> {
    pending_calls(history).into_iter().map(|c| c.id).collect()
}

/// Answers for the calls in `pending`. Answers to other calls are a 409, or dropped when the
/// client repeats earlier outputs by design (`only_pending`); nothing left is a 400.
fn resume_answers(
    pending: &[String],
    results: Vec<ToolResultIn>,
    approvals: Vec<ApprovalIn>,
    only_pending: bool,
) -> Result<ToolAnswers, ApiError> {
    let mut answers = ToolAnswers::default();
    let waits = |id: &String| -> Result<bool, ApiError> {
        match (pending.contains(id), only_pending) {
            (true, _) => Ok(true),
            (false, true) => Ok(false),
            (false, false) => Err(ApiError::Conflict(format!(
                "tool call `{id}` is not waiting for an answer (unknown, or already answered)"
            ))),
        }
    };
    for r in results {
        if waits(&r.tool_call_id)? {
            let content = match r.output {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            answers
                .results
                .insert(r.tool_call_id, (content, r.is_error));
        }
    }
    for a in approvals {
        if waits(&a.tool_call_id)? {
            let approval = Approval {
                approved: a.approved,
                reason: a.reason,
            };
            answers.approvals.insert(a.tool_call_id, approval);
        }
    }
    if answers == ToolAnswers::default() {
        return Err(ApiError::BadRequest(
            "nothing new: no answer is for a call the conversation waits on".into(),
        ));
    }
    Ok(answers)
}

/// What a turn produced, for `stream: false` and the object's end step.
pub struct TurnSummary {
    pub messages: Vec<AgentMessage>,
    pub usage: Usage,
    pub outcome: TurnOutcome,
    /// The client tools the turn offered (a pause remembers them).
    pub client_tools: Vec<ToolDef>,
    /// What it did, for its log line.
    pub stats: TurnStats,
}

impl Prepared {
    /// The conversation the turn is of.
    pub fn conversation(&self) -> &TurnConversation {
        &self.conversation
    }

    /// Runs the turn, streaming it into `log`; `cancel` stops it.
    pub async fn run(
        self,
        turn_env: &TurnEnv,
        cancel: CancelToken,
        signal: AbortSignal,
        log: Rc<ChunkLog>,
        reference: &str,
    ) -> TurnSummary {
        let Prepared {
            conversation,
            model,
            provider,
            history,
            seqs,
            answers,
            client_tools,
            artifacts: listed,
            budget,
            mcp,
            toolsets,
        } = self;
        let config = &turn_env.config;
        let info = config.models.info(&model);
        let history_len = history.len();
        let mut state = AgentState::new(conversation.system.clone(), history);
        state.max_llm_calls = config.max_llm_calls;
        state.max_tool_calls = config.max_tool_calls;
        state.tool_timeout_ms = Some(config.tool_timeout_ms.into());
        state.turn_deadline_ms = Some(config.turn_deadline_ms.into());
        state.timer = Some(Rc::new(WorkerSleeper));
        state.max_tokens = config.max_tokens.min(info.max_output_tokens);
        state.answers = answers;
        state.cancel = cancel;
        // Within a budget, or moved to the economy model once it is spent (`USER_BUDGET_USD`):
        // the turn's calls and compaction's summary calls alike.
        let budget_switches = Rc::new(Cell::new(0u32));
        let economy = config
            .user_budget_usd
            .and(config.budget_model.as_ref())
            .and_then(|m| {
                resilient_provider(&turn_env.env, config, m, Some(&signal))
                    .inspect_err(|e| console_error!("BUDGET_MODEL {m}: {e}"))
                    .ok()
            });
        let resolve_with = |answers: Rc<dyn Provider>| -> Rc<dyn ProviderResolver> {
            match config.user_budget_usd {
                Some(limit) => Rc::new(BudgetResolver {
                    store: Rc::new(D1Budget {
                        store: turn_env.store.clone(),
                        env: turn_env.env.clone(),
                        owner: conversation.owner.clone(),
                        conversation_id: conversation.id.clone(),
                        default: (limit, config.budget_period),
                    }),
                    model: answers,
                    economy: economy.clone(),
                    models: config.models.clone(),
                    switches: budget_switches.clone(),
                    read: RefCell::new(budget.clone()),
                    open: RefCell::default(),
                }),
                None => Rc::new(FixedProvider(answers)),
            }
        };
        // Summaries are written by `SUMMARY_MODEL` when set, else by the conversation's model.
        let summaries = config
            .summary_model
            .as_ref()
            .filter(|m| **m != model)
            .and_then(|m| {
                resilient_provider(&turn_env.env, config, m, Some(&signal))
                    .inspect_err(|e| console_error!("SUMMARY_MODEL {m}: {e}"))
                    .ok()
            })
            .unwrap_or_else(|| provider.clone());
        state.compactor = Some(Rc::new(Compactor {
            summariser: resolve_with(summaries),
            context_window: info.context_window.into(),
            threshold_ratio: config.compact_threshold,
            max_output_tokens: info.max_output_tokens.into(),
        }));
        let persisted = Rc::new(Persisted {
            seqs: RefCell::new(seqs),
            handed_over: RefCell::default(),
            taken: RefCell::default(),
        });
        state.inbox = Rc::new(ObjectInbox {
            storage: turn_env.storage.clone(),
            persisted: persisted.clone(),
        });
        let mut tools = ToolRegistry::new();
        tools.register_server_tool(Box::new(CurrentTime::default()));
        tools.register_server_tool(Box::new(UpdatePlan::new(state.plan.clone())));
        let artifact_context = Rc::new(ArtifactContext {
            store: Rc::new(D1Artifacts {
                store: turn_env.store.clone(),
                conversation_id: conversation.id.clone(),
                limits: config.artifact_limits,
            }),
            now: Box::new(now_ms),
            new_id: Box::new(|| new_id().unwrap_or_else(|_| format!("a{}", now_ms()))),
            changed: Default::default(),
            exists: Default::default(),
        });
        artifacts::register(&mut tools, artifact_context.clone());
        remote_tools::register(&mut tools, config, &signal, mcp);
        if let Some(allowed) = toolsets {
            // Inclusive once there is an artifact: `artifacts` joins whatever was chosen.
            let has_artifacts = artifact_context.clone();
            let had = !listed.is_empty();
            tools.set_toolset_selector(Box::new(move |_, names| {
                let with_artifacts = had || has_artifacts.exists.get();
                names
                    .iter()
                    .filter(|n| {
                        allowed.iter().any(|a| a == *n)
                            || (with_artifacts && **n == artifacts::TOOLSET)
                    })
                    .map(|n| n.to_string())
                    .collect()
            }));
        }
        for name in &config.approval_required_tools {
            tools.require_approval(name);
        }
        tools.merge_client_tools(client_tools.clone());
        let hooks = D1Hooks {
            prompt: SystemPrompt::new(
                conversation.system.as_deref(),
                &conversation.owner,
                &model.to_string(),
                artifact_context,
                &listed,
            ),
            store: turn_env.store.clone(),
            conversation_id: conversation.id.clone(),
            owner: conversation.owner.clone(),
            config: config.clone(),
            storage: turn_env.storage.clone(),
            persisted,
            ledger_failure: RefCell::default(),
        };

        let mut out = String::new();
        let mut ui = UiStream::for_request(reference);
        let mut stats = TurnStats::new(now_ms() as u64);
        let mut partial = PartialAnswer::default();
        let storage = turn_env.storage.clone();
        let send = |out: &mut String, partial: &mut PartialAnswer, now: i64| {
            if log.push(out, now) {
                partial.save(&storage);
            }
            out.clear();
        };
        let resolver = resolve_with(provider);
        // The time of each event, for the turn's figures and the chunk log's batching: read
        // once per poll of the turn, which handles every event of a read's worth of tokens.
        let clock = PollClock::default();
        let outcome = clock
            .ticking(run_agent_turn(
                resolver.as_ref(),
                &mut state,
                &tools,
                None,
                &hooks,
                &mut |event| {
                    let now = clock.now();
                    stats.record(&event, now as u64);
                    if let AgentEvent::Error { message, .. } = &event {
                        // The detail the stream leaves out, findable by the request id it shows.
                        let line = serde_json::json!({
                            "event": "turn_error",
                            "level": "error",
                            "request_id": reference,
                            "conversation_id": conversation.id,
                            "detail": message,
                        });
                        console_error!("{line}");
                    }
                    partial.track(&event, &storage);
                    ui.event(&event, &mut out);
                    send(&mut out, &mut partial, now);
                },
            ))
            .await;
        stats.budget_switches = budget_switches.get();
        ui.finish(&outcome, &mut out);
        send(&mut out, &mut partial, now_ms());
        TurnSummary {
            messages: state
                .messages
                .split_off(history_len.min(state.messages.len())),
            usage: state.total_usage,
            outcome,
            client_tools,
            stats,
        }
    }
}

/// A user's budget in D1, for the [`BudgetResolver`].
struct D1Budget {
    store: Rc<Store>,
    /// For the owner's spend object.
    env: Env,
    owner: String,
    conversation_id: String,
    default: (f64, Period),
}

#[async_trait(?Send)]
impl BudgetStore for D1Budget {
    async fn budget(&self) -> Result<Option<Budget>, ApiError> {
        self.store
            .budget(&self.owner, Some(self.default), now_ms())
            .await
    }

    async fn reserve(&self, ask: &Ask) -> Result<Reply, ApiError> {
        SpendClient::for_user(&self.env, &self.owner)?
            .reserve(ask)
            .await
    }

    async fn settle(&self, settle: &Settle) {
        let settled = match SpendClient::for_user(&self.env, &self.owner) {
            Ok(client) => client.settle(settle).await,
            Err(e) => Err(e),
        };
        // The reservation expires; the ledger has the cost for the next period's seed.
        if let Err(e) = settled {
            console_error!("settling a call's cost: {e}");
        }
    }

    async fn note(&self, message: AgentMessage) {
        let stored = match new_id() {
            Ok(id) => {
                self.store
                    .append_message(&self.conversation_id, &id, &message, now_ms())
                    .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = stored {
            console_error!("storing a budget note: {e}");
        }
    }

    async fn mark_warned(&self, period: Period) {
        let (start, _) = period.bounds(now_ms());
        if let Err(e) = self.store.mark_warned(&self.owner, start, now_ms()).await {
            console_error!("recording the budget warning: {e}");
        }
    }
}

/// The answer being streamed, saved with each batch of the chunk log so a turn interrupted
/// mid-answer keeps what it had said.
#[derive(Default)]
struct PartialAnswer {
    answer: Option<AssistantMessage>,
    saved: bool,
}

impl PartialAnswer {
    fn track(&mut self, event: &AgentEvent<'_>, storage: &ObjectStorage) {
        match event {
            AgentEvent::TurnStart { model, .. } => {
                self.answer = Some(AssistantMessage {
                    content: vec![],
                    stop_reason: StopReason::Interrupted,
                    model: model.model.clone(),
                    provider: model.provider.clone(),
                    usage: Usage::default(),
                });
            }
            AgentEvent::Llm(LlmEvent::TextDelta { delta, .. }) => self.append(delta, false),
            AgentEvent::Llm(LlmEvent::ThinkingDelta { delta, .. }) => self.append(delta, true),
            // The answer is stored: nothing partial is left.
            AgentEvent::TurnEnd { .. } => {
                self.answer = None;
                if self.saved {
                    self.saved = false;
                    if let Err(e) = storage.set_partial(None) {
                        console_error!("clearing the partial answer: {e}");
                    }
                }
            }
            _ => {}
        }
    }

    fn append(&mut self, delta: &str, thinking: bool) {
        let Some(answer) = &mut self.answer else {
            return;
        };
        match (answer.content.last_mut(), thinking) {
            (Some(ContentBlock::Text { text }), false) => text.push_str(delta),
            (Some(ContentBlock::Thinking { thinking, .. }), true) => thinking.push_str(delta),
            (_, false) => answer
                .content
                .push(ContentBlock::Text { text: delta.into() }),
            (_, true) => answer.content.push(ContentBlock::Thinking {
                thinking: delta.into(),
                signature: None,
            }),
        }
    }

    fn save(&mut self, storage: &ObjectStorage) {
        let Some(answer) = self.answer.as_ref().filter(|a| !a.content.is_empty()) else {
            return;
        };
        match serde_json::to_string(answer) {
            Ok(json) => match storage.set_partial(Some(&json)) {
                Ok(()) => self.saved = true,
                Err(e) => console_error!("saving the partial answer: {e}"),
            },
            Err(e) => console_error!("encoding the partial answer: {e}"),
        }
    }
}

pub struct FixedProvider(pub Rc<dyn Provider>);

#[async_trait(?Send)]
impl ProviderResolver for FixedProvider {
    async fn resolve(&self, call: CallPlan<'_>) -> Result<Resolved, LlmError> {
        Ok(Resolved {
            provider: self.0.clone(),
            max_tokens: call.max_tokens,
        })
    }
}

/// What the hooks and the inbox share: the D1 sequence number of each message of the turn's
/// history (in the agent's order, for compaction), and the queued messages the inbox handed to
/// the loop, which the loop passes to `on_message` next, in its own order (after the results of
/// calls a steering message skipped).
struct Persisted {
    seqs: RefCell<Vec<Option<i64>>>,
    /// (message, the id it was accepted under, its queue row).
    handed_over: RefCell<VecDeque<(AgentMessage, String, i64)>>,
    /// Queue rows handed over in this turn: never handed over twice, even if storing one failed.
    taken: RefCell<HashSet<i64>>,
}

/// Persists every message the loop adds, as it is added (an answer with its usage and cost in
/// the owner's ledger, in one batch), and compactions.
struct D1Hooks {
    store: Rc<Store>,
    conversation_id: String,
    owner: String,
    config: Config,
    storage: Rc<ObjectStorage>,
    persisted: Rc<Persisted>,
    /// Why the last answer's ledger row could not be written; `on_turn_end` stops the turn.
    ledger_failure: RefCell<Option<String>>,
    prompt: SystemPrompt,
}

#[async_trait(?Send)]
impl TurnHooks for D1Hooks {
    /// The billing step: a ledger that cannot be written stops the turn (seed rule). The row was
    /// written with the answer, in the same D1 batch.
    async fn on_turn_end(&self, _info: TurnEndInfo<'_>) -> Result<bool, HookError> {
        match self.ledger_failure.borrow_mut().take() {
            Some(e) => Err(HookError(format!("usage ledger: {e}"))),
            None => Ok(true),
        }
    }

    async fn system_prompt(&self, _base: Option<&str>) -> Option<String> {
        self.prompt.build().await
    }

    async fn on_message(&self, message: &AgentMessage) -> Result<(), HookError> {
        let handed_over = {
            let mut queue = self.persisted.handed_over.borrow_mut();
            match queue.front() {
                Some((m, _, _)) if m == message => queue.pop_front(),
                _ => None,
            }
        };
        // A queued message is stored under the id it was accepted with (a repeat is harmless)
        // and leaves the queue only once it is in D1.
        let (id, queue_seq) = match handed_over {
            Some((_, id, queue_seq)) => (id, Some(queue_seq)),
            None => (new_id().map_err(|e| HookError(e.to_string()))?, None),
        };
        let stored = match message {
            // Every answer, a cancelled or failed one too, cost tokens: its ledger row goes in the
            // same batch.
            AgentMessage::Assistant(answer) => {
                let model = answer.model_ref();
                let row = UsageRow {
                    owner: &self.owner,
                    model: &answer.model,
                    provider: &answer.provider,
                    usage: &answer.usage,
                    cost_usd: self.config.models.info(&model).cost(&answer.usage),
                };
                let stored = self
                    .store
                    .append_answer(&self.conversation_id, &id, message, &row, now_ms())
                    .await;
                if let Err(e) = &stored {
                    *self.ledger_failure.borrow_mut() = Some(e.to_string());
                }
                stored
            }
            _ => {
                self.store
                    .append_message(&self.conversation_id, &id, message, now_ms())
                    .await
            }
        };
        if let (Ok(_), Some(queue_seq)) = (&stored, queue_seq) {
            if let Err(e) = self.storage.dequeue(queue_seq) {
                console_error!("dequeuing {id}: {e}");
            }
        }
        self.persisted
            .seqs
            .borrow_mut()
            .push(stored.as_ref().ok().copied());
        stored.map(|_| ()).map_err(|e| HookError(e.to_string()))
    }

    /// A summary call is charged like an answer, in a ledger row of its own.
    async fn on_summary_call(&self, model: &ModelRef, usage: &Usage) -> Result<(), HookError> {
        let cost = self.config.models.info(model).cost(usage);
        let row = UsageRow {
            owner: &self.owner,
            model: &model.model,
            provider: &model.provider,
            usage,
            cost_usd: cost,
        };
        let recorded = self
            .store
            .record_usage(&self.conversation_id, &row, now_ms())
            .await;
        if let Err(e) = &recorded {
            *self.ledger_failure.borrow_mut() = Some(e.to_string());
        }
        recorded.map_err(|e| HookError(e.to_string()))
    }

    /// D1 mirrors the compaction: the summary is stored and the rows it replaces are marked,
    /// in one batch; they stay readable and are never loaded for a turn again.
    async fn on_compaction(&self, compaction: &Compaction) -> Result<(), HookError> {
        let replaced: Vec<i64> = {
            let seqs = self.persisted.seqs.borrow();
            seqs.get(compaction.replaces.clone())
                .unwrap_or_default()
                .iter()
                .flatten()
                .copied()
                .collect()
        };
        let summary_id = new_id().map_err(|e| HookError(e.to_string()))?;
        let summary = compaction
            .summary
            .as_ref()
            .map(|s| (summary_id.as_str(), s));
        let seq = self
            .store
            .compact(&self.conversation_id, &replaced, summary, now_ms())
            .await
            .map_err(|e| HookError(e.to_string()))?;
        let mut seqs = self.persisted.seqs.borrow_mut();
        if compaction.replaces.end <= seqs.len() {
            seqs.splice(compaction.replaces.clone(), summary.map(|_| Some(seq)));
        }
        Ok(())
    }

    fn warn(&self, message: &str) {
        console_warn!("{message}");
    }
}

/// The object's queue, seen from the running turn. Taking a message hands it to the loop; it
/// stays queued until `on_message` has stored it.
struct ObjectInbox {
    storage: Rc<ObjectStorage>,
    persisted: Rc<Persisted>,
}

impl ObjectInbox {
    fn take(&self, only: Option<Delivery>) -> Vec<AgentMessage> {
        let rows = match self.storage.queued(only) {
            Ok(rows) => rows,
            Err(e) => {
                console_error!("reading the queue: {e}");
                return vec![];
            }
        };
        let mut taken = Vec::with_capacity(rows.len());
        for row in rows {
            if !self.persisted.taken.borrow_mut().insert(row.seq) {
                continue;
            }
            let Some(message) = self.storage.read(&row) else {
                continue;
            };
            self.persisted
                .handed_over
                .borrow_mut()
                .push_back((message.clone(), row.id, row.seq));
            taken.push(message);
        }
        taken
    }
}

#[async_trait(?Send)]
impl Inbox for ObjectInbox {
    async fn drain_steering(&self) -> Vec<AgentMessage> {
        self.take(Some(Delivery::Steering))
    }

    async fn drain_at_end(&self) -> Vec<AgentMessage> {
        self.take(None)
    }
}

impl TurnSummary {
    /// `{messages, events, usage, cost_usd, finish_reason, error}` for `stream: false`;
    /// `events` are the chunks the stream carried, so both modes say the same thing.
    pub fn into_json(self, stream: &str, config: &Config) -> serde_json::Value {
        let events: Vec<serde_json::Value> = stream
            .split("\n\n")
            .filter_map(|frame| frame.strip_prefix("data: "))
            .filter_map(|data| crate::llm::json::from_str(data).ok())
            .collect();
        let finish_reason = events
            .iter()
            .rev()
            .find(|e| e["type"] == "finish")
            .map(|e| e["finishReason"].clone())
            .unwrap_or(serde_json::Value::Null);
        // The cost of every answer whose model has a known price.
        let costs: Vec<f64> = self
            .messages
            .iter()
            .filter_map(|m| match m {
                AgentMessage::Assistant(a) => config.models.info(&a.model_ref()).cost(&a.usage),
                _ => None,
            })
            .collect();
        // What the stream told the user, not the detail (which went to the log).
        let error = events
            .iter()
            .find(|e| e["type"] == "error")
            .map(|e| e["errorText"].clone())
            .unwrap_or(serde_json::Value::Null);
        serde_json::json!({
            "messages": self.messages,
            "events": events,
            "usage": self.usage,
            "cost_usd": (!costs.is_empty()).then(|| costs.iter().sum::<f64>()),
            "finish_reason": finish_reason,
            "error": error,
        })
    }
}
