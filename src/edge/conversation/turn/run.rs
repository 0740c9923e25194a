//! Running a prepared turn: the agent loop wired to the budget resolver, compaction, the tools,
//! the hooks and the object's queues, its events streamed into the replay log.

use super::artifact_store::{D1Artifacts, SystemPrompt};
use super::budget_store::D1Budget;
use super::files::FileLoader;
use super::hooks::{D1Hooks, ObjectQueues, Persisted};
use super::partial::PartialAnswer;
use super::resolver::BudgetResolver;
use super::{remote_tools, subagent, FixedProvider, Prepared, TurnEnv, TurnResult};
use crate::agent::artifacts::ArtifactContext;
use crate::agent::trace::Attr;
use crate::agent::{
    artifacts, run_agent_turn, schedules, AgentEvent, AgentState, CancelToken, Compactor,
    ContextTransform, CurrentTime, ProviderResolver, ToolRegistry, TurnStats, UpdatePlan,
};
use crate::agent::{AgentMessage, TurnHooks, TurnOutcome};
use crate::edge::config::agents::{AgentSpec, ChildHistory};
use crate::edge::conversation::replay::ChunkLog;
use crate::edge::conversation::schedules::ObjectSchedules;
use crate::edge::conversation::ui_stream::UiStream;
use crate::edge::platform::clock::{now_ms, PollClock};
use crate::edge::platform::files::Files;
use crate::edge::platform::ids::new_id;
use crate::edge::platform::providers::{economy_provider, resilient_provider};
use crate::edge::platform::timers::WorkerSleeper;
use crate::edge::protocol::TurnConversation;
use crate::llm::Provider;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use worker::{console_error, console_warn, AbortSignal};

impl Prepared {
    /// The conversation the turn is of.
    pub fn conversation(&self) -> &TurnConversation {
        &self.conversation
    }

    /// Runs the turn, streaming it into `log`; `cancel` stops it. `turn_id` is the random id
    /// this run of the turn was claimed with, `message_id` the id its stream's message has.
    pub async fn run(
        self,
        turn_env: &TurnEnv,
        cancel: CancelToken,
        signal: AbortSignal,
        log: Rc<ChunkLog>,
        (reference, turn_id, message_id): (&str, &str, Option<&str>),
        traceparent: Option<&str>,
    ) -> TurnResult {
        let Prepared {
            pending,
            taken,
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
            chosen_toolsets,
            agent,
            output,
            output_raw,
            first_call,
            own_id,
            new_chat,
            memory,
        } = self;
        let config = &turn_env.config;
        let history_len = history.len();
        let mut state = AgentState::new(None, history);
        state.max_tool_calls = config.max_tool_calls;
        state.tool_timeout_ms = Some(config.tool_timeout_ms.into());
        state.turn_deadline_ms = Some(config.turn_deadline_ms.into());
        state.timer = Some(Rc::new(WorkerSleeper));
        state.answers = answers;
        state.cancel = cancel.clone();
        let answer_tool = output.as_ref().map(|o| o.name.clone());
        let typed = output.is_some();
        state.output = output;
        // 48 of the claim's random bits (no id of its own to make): calls of one run are told
        // apart by their number.
        state.call_id_nonce = turn_id.get(..12).unwrap_or(turn_id).to_string();
        // Within a budget, or moved to the economy model once it is spent (`USER_BUDGET_USD`):
        // the turn's calls and compaction's summary calls alike.
        let budget_switches = Rc::new(Cell::new(0u32));
        let economy = config
            .user_budget_usd
            .and(config.budget_model.as_ref())
            .and_then(|m| {
                // Without fallbacks: it answers past the budget, holding nothing, so a pricier
                // model behind it would spend without limit.
                economy_provider(&turn_env.env, config, m, Some(&signal))
                    .inspect_err(|e| console_error!("BUDGET_MODEL {m}: {e}"))
                    .ok()
            });
        let persisted = Rc::new(Persisted::new(seqs, pending, taken));
        state.queues = Rc::new(ObjectQueues {
            storage: turn_env.storage.clone(),
            persisted: persisted.clone(),
        });
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
        let deadline_at = now_ms() + i64::from(config.turn_deadline_ms);
        // What recall found, told to the client as the turn begins (transient: not kept).
        if let Some(part) = memory.as_ref().and_then(|m| m.recalled_part()) {
            log.push(&part, now_ms());
        }
        let recalled = memory.as_ref().and_then(|m| m.recall_block());

        let mut out = String::new();
        let mut ui = UiStream::for_request(reference);
        if let Some(tool) = &answer_tool {
            ui = ui.typed(format!("output:{}", message_id.unwrap_or(turn_id)), tool);
        }
        let mut stats = TurnStats::new(now_ms() as u64);
        // Its trace, when it is traced (`OTEL_*`); recall, before the loop, is its first span.
        let asked = || state.messages.last().and_then(AgentMessage::user_said);
        let names = (agent.name.as_str(), conversation.id.as_str());
        let recorder = RefCell::new(super::trace::recorder(
            config,
            (traceparent, conversation.parent.is_some()),
            names,
            asked,
        ));
        if let Some(recorder) = recorder.borrow_mut().as_mut() {
            let recall = memory.as_ref().and_then(|m| m.report["recall_ms"].as_i64());
            if let Some(ms) = recall {
                let now = now_ms();
                let attributes = vec![("gen_ai.operation.name", Attr::Str("recall".into()))];
                recorder.add("recall", (now - ms, now), attributes);
            }
            // Every request made for the turn (provider, HTTP tool, MCP) carries its context.
            crate::edge::platform::fetch::trace_outbound(&signal, &recorder.traceparent());
        }
        let trace_id = recorder.borrow().as_ref().map(|r| r.trace_id().to_string());
        let mut partial = PartialAnswer::default();
        let storage = turn_env.storage.clone();
        let send = |out: &mut String, partial: &mut PartialAnswer, now: i64| {
            if log.push(out, now) {
                if let Some(json) = partial.snapshot() {
                    if let Err(e) = storage.set_partial(Some(&json)) {
                        console_error!("saving the partial answer: {e}");
                    }
                }
            }
            out.clear();
        };
        // History keeps references to the users' files; each call gets their contents.
        let files = Files::from_env(&turn_env.env).map(FileLoader::new);
        // The time of each event, for the turn's figures and the chunk log's batching: read
        // once per poll of the turn, which handles every event of a read's worth of tokens.
        let clock = PollClock::default();
        let conversation_id = conversation.id.clone();
        let mut emit = |event: AgentEvent<'_>| {
            let now = clock.now();
            stats.record(&event, now as u64);
            if let Some(recorder) = recorder.borrow_mut().as_mut() {
                recorder.record(&event, now);
            }
            if let AgentEvent::Error { message, .. } = &event {
                // The detail the stream leaves out, findable by the request id it shows.
                let line = serde_json::json!({
                    "event": "turn_error",
                    "level": "error",
                    "request_id": reference,
                    "conversation_id": conversation_id,
                    "detail": message,
                });
                console_error!("{line}");
            }
            if persisted.charged.take() {
                // Charged already: nothing of it is saved again.
                partial = PartialAnswer::default();
            }
            if partial.track(&event) {
                if let Err(e) = storage.set_partial(None) {
                    console_error!("clearing the partial answer: {e}");
                }
            }
            ui.event(&event, &mut out);
            send(&mut out, &mut partial, now);
        };

        // The turn runs as its conversation's agent, and goes on as another when a handoff
        // tool hands the conversation over (`TurnOutcome::HandedOff`).
        let mut conversation = conversation;
        let (mut agent, mut model, mut provider) = (agent, model, provider);
        let (mut mcp, mut toolsets) = (Some(mcp), toolsets);
        let mut handoffs = 0;
        let ledger_failure = Rc::new(RefCell::default());
        let outcome = loop {
            let info = config.models.info(&model);
            state.max_tokens = config.max_tokens.min(info.max_output_tokens);
            let system = agent.system_with(conversation.system.as_deref());
            state.system_prompt = system.clone();
            // Each agent has its own step limit from where it takes over; the turn's deadline
            // is the turn's, whoever answers.
            state.max_llm_calls = state.llm_calls.saturating_add(
                agent
                    .max_llm_calls
                    .min(conversation.max_llm_calls.unwrap_or(u32::MAX)),
            );
            state.turn_deadline_ms = Some((deadline_at - now_ms()).max(0) as u64);
            let resolve_with = |answers: Rc<dyn Provider>| -> Rc<dyn ProviderResolver> {
                match config.user_budget_usd {
                    Some(limit) => Rc::new(BudgetResolver {
                        store: Rc::new(D1Budget::new(
                            turn_env,
                            (&conversation.owner, &conversation.id),
                            limit,
                        )),
                        model: answers,
                        economy: economy.clone(),
                        fallbacks: agent.fallback_models.clone(),
                        models: config.models.clone(),
                        switches: budget_switches.clone(),
                        read: RefCell::new(budget.clone()),
                        open: RefCell::default(),
                        uncharged: Default::default(),
                        // The first reservation of either kind (a summary's comes first) decides.
                        first: first_call.clone(),
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
                    // The agent's fallbacks, which the budget's reservations are priced over.
                    let chain = (m, agent.fallback_models.as_slice());
                    resilient_provider(&turn_env.env, config, chain, Some(&signal))
                        .inspect_err(|e| console_error!("SUMMARY_MODEL {m}: {e}"))
                        .ok()
                })
                .unwrap_or_else(|| provider.clone());
            state.compactor = Some(Rc::new(Compactor {
                summariser: resolve_with(summaries),
                context_window: info.context_window.into(),
                threshold_ratio: config.compact_threshold,
                max_output_tokens: info.max_output_tokens.into(),
                provider: Some(model.provider.clone()),
            }));
            // The MCP servers' tools were listed with the history; an agent handed to lists
            // them again (the isolate keeps the lists).
            let listed_mcp = match mcp.take() {
                Some(listed) => listed,
                None => remote_tools::list(config, &conversation.id, &signal).await,
            };
            let kit = Kit {
                turn_env,
                conversation: &conversation,
                signal: &signal,
                log: &log,
                cancel: &cancel,
                reference,
                deadline_at,
                trace: trace_id.as_deref(),
                // Not in a sub-agent's conversation (its parent chose the agent it asks), nor
                // in a typed answer's turn (checked against the agent it began with), nor past
                // MAX_HANDOFFS in one turn.
                handoffs: conversation.parent.is_none()
                    && state.output.is_none()
                    && handoffs < MAX_HANDOFFS,
                // The user's memory with this agent (an agent handed to has none this turn).
                memory: memory.as_ref().filter(|m| m.agent == agent.name),
            };
            let tools = kit.tools(
                &agent,
                &state,
                (&artifact_context, !listed.is_empty()),
                listed_mcp,
                toolsets.clone(),
                &client_tools,
            );
            let hooks = D1Hooks {
                prompt: SystemPrompt::new(
                    system.as_deref(),
                    &conversation.owner,
                    &model.to_string(),
                    artifact_context.clone(),
                    &listed,
                )
                .remembering(
                    kit.memory.map(|m| (m.shown.clone(), m.spec.by_tool())),
                    kit.memory.and(recalled.clone()),
                ),
                store: turn_env.store.clone(),
                conversation_id: conversation.id.clone(),
                owner: conversation.owner.clone(),
                config: config.clone(),
                storage: turn_env.storage.clone(),
                persisted: persisted.clone(),
                ledger_failure: ledger_failure.clone(),
            };
            let resolver = resolve_with(provider.clone());
            let outcome = clock
                .ticking(log.delivering(run_agent_turn(
                    resolver.as_ref(),
                    &mut state,
                    &tools,
                    files.as_ref().map(|f| f as &dyn ContextTransform),
                    &hooks,
                    &mut emit,
                )))
                .await;
            let TurnOutcome::HandedOff(to) = outcome else {
                break outcome;
            };
            if cancel.is_cancelled() {
                break TurnOutcome::Cancelled;
            }
            handoffs += 1;
            match super::handoff::next_agent(turn_env, &mut conversation, &to, &signal) {
                Ok((next, chosen)) => {
                    // Said on the stream and in the history, for people: the model reads the
                    // handoff tool's call and result.
                    let note = AgentMessage::ContextNote {
                        text: format!(
                            "the conversation was handed from the agent `{}` to `{to}`",
                            agent.name
                        ),
                    };
                    if let Err(e) = hooks.on_message(&note).await {
                        console_error!("storing the handoff's note: {e}");
                    }
                    state.messages.push(note);
                    let switch = serde_json::json!({
                        "type": "data-agent-switch",
                        "data": {"from": agent.name, "to": to},
                    });
                    log.push(&format!("data: {switch}\n\n"), now_ms());
                    // The toolsets the turn was narrowed to (a message's, the conversation's),
                    // within the agent's own.
                    toolsets = next.toolsets_within(chosen_toolsets.clone());
                    agent = next;
                    (model, provider) = chosen;
                }
                Err(e) => {
                    let message = format!("the conversation could not be handed to `{to}`: {e}");
                    emit(AgentEvent::Error {
                        message: message.clone(),
                        public: message.clone(),
                        is_retryable: false,
                    });
                    break TurnOutcome::Failed {
                        message,
                        is_retryable: false,
                    };
                }
            }
        };
        // A turn that stored nothing still waits for its new messages to land (or fail), so
        // the queue the object looks at next no longer holds them.
        let unstored = persisted.settle().await.err().map(|e| e.to_string());
        // Refused at its first call, the message was answered 402: it is taken back, as if it
        // had never been sent (a chat's row too when the message made it).
        if let (true, Some(id)) = (first_call.is_some_and(|f| f.refused()), &own_id) {
            // The chat's row goes too only when nothing else waits for it (a message queued to
            // it meanwhile keeps it), and the object forgets it first: a crash in between
            // leaves a row the next message finds, never an object that names a gone row.
            let whole_chat = new_chat && turn_env.storage.queue_len(None).is_ok_and(|n| n == 0);
            if whole_chat {
                if let Err(e) = turn_env.storage.forget_conversation() {
                    console_error!("forgetting a refused chat: {e}");
                }
            }
            let taken = turn_env
                .store
                .take_back(&conversation.id, &conversation.owner, id, whole_chat)
                .await;
            if let Err(e) = taken {
                console_error!("taking back a message refused for its budget: {e}");
            }
            // Its key may be sent again, as a new message.
            if let Err(e) = turn_env.storage.clear_mark(&format!("key:{id}")) {
                console_error!("forgetting a refused message's key: {e}");
            }
        }
        stats.budget_switches = budget_switches.get();
        let memory_report = memory.as_ref().map(|m| m.report.clone());
        let answer_id = persisted.last_answer.take();
        let answer = memory
            .as_ref()
            .map(|_| state.final_text())
            .unwrap_or_default();
        // The exchange's vectors, for semantic recall (when its index is bound).
        let embed = match (&outcome, &memory, &answer_id) {
            (TurnOutcome::Completed, Some(memory), Some(answer_id))
                if memory.spec.top_k > 0
                    && conversation.memory
                        == crate::edge::d1::conversations::Remembered::Indexed =>
            {
                memory
                    .asked
                    .clone()
                    .map(|(asked_id, asked)| super::memory::Embed {
                        owner: conversation.owner.clone(),
                        messages: vec![(asked_id, asked), (answer_id.clone(), answer.clone())],
                    })
            }
            _ => None,
        };
        // An answer's memory kept in the background, by the agent that answered.
        let extract = match (&outcome, memory) {
            (TurnOutcome::Completed, Some(memory))
                if memory.spec.background && memory.agent == agent.name =>
            {
                memory
                    .asked
                    .clone()
                    .map(|(_, asked)| super::extract::Pending {
                        memory,
                        agent: agent.clone(),
                        owner: conversation.owner.clone(),
                        conversation_id: conversation.id.clone(),
                        exchange: (asked, answer),
                    })
            }
            _ => None,
        };
        ui.finish(&outcome, &mut out);
        send(&mut out, &mut partial, now_ms());
        let trace = match (recorder.into_inner(), &config.traces) {
            (Some(recorder), Some(settings)) => {
                let id = recorder.trace_id().to_string();
                let spans = recorder.finish(outcome.name(), now_ms());
                Some(super::trace::Export::new(settings, &id, spans))
            }
            _ => None,
        };
        TurnResult {
            messages: state
                .messages
                .split_off(history_len.min(state.messages.len())),
            usage: state.total_usage,
            outcome,
            client_tools,
            stats,
            unstored,
            answer_id,
            output: output_raw,
            typed,
            memory: memory_report,
            extract,
            embed,
            trace,
        }
    }
}

/// What building a turn's tools for an agent needs of the turn.
struct Kit<'a> {
    turn_env: &'a TurnEnv,
    conversation: &'a TurnConversation,
    signal: &'a AbortSignal,
    log: &'a Rc<ChunkLog>,
    cancel: &'a CancelToken,
    reference: &'a str,
    deadline_at: i64,
    /// The turn's trace id, when it is traced: a sub-agent's turn joins the trace.
    trace: Option<&'a str>,
    /// Whether the agent's handoff tools are offered.
    handoffs: bool,
    memory: Option<&'a super::memory::TurnMemory>,
}

/// Most handoffs in one turn: past them the handoff tools are not offered.
const MAX_HANDOFFS: u32 = 3;

impl Kit<'_> {
    /// The tools a turn of `agent` offers: the built-in ones, the artifact and schedule tools,
    /// the deployment's HTTP and MCP tools, its agent tools and handoffs, narrowed to its
    /// `tools` and the turn's `toolsets`, and the client's.
    fn tools(
        &self,
        agent: &Rc<AgentSpec>,
        state: &AgentState,
        (artifact_context, had_artifacts): (&Rc<ArtifactContext>, bool),
        mcp: remote_tools::Listed,
        toolsets: Option<Vec<String>>,
        client_tools: &[crate::llm::ToolDef],
    ) -> ToolRegistry {
        let (turn_env, conversation) = (self.turn_env, self.conversation);
        let config = &turn_env.config;
        let mut tools = ToolRegistry::new();
        tools.register_server_tool(Box::new(CurrentTime::default()));
        tools.register_server_tool(Box::new(UpdatePlan::new(state.plan.clone())));
        artifacts::register(&mut tools, artifact_context.clone());
        // Not a sub-agent's: its turns run its parent's tasks only.
        if conversation.parent.is_none() {
            schedules::register(
                &mut tools,
                Rc::new(ObjectSchedules {
                    storage: turn_env.storage.clone(),
                    limits: config.schedule_limits,
                }),
            );
        }
        remote_tools::register(&mut tools, config, &conversation.id, self.signal, mcp);
        if let Some(only) = &agent.tools {
            tools.retain_server_tools(|name| only.iter().any(|t| t == name));
            // A name no tool has (a typo, or an MCP server's tool it did not list this time)
            // leaves the agent without it: said, since nothing else would.
            for missing in only.iter().filter(|t| tools.classify(t).is_none()) {
                console_warn!("agent `{}`: no tool `{missing}` this turn", agent.name);
            }
        }
        // Whatever its `tools`: its `memory` asks for it.
        if let Some(memory) = self.memory.filter(|m| m.spec.by_tool()) {
            crate::agent::memory::register(
                &mut tools,
                memory.spec.shape.clone(),
                memory.store(turn_env, (&conversation.owner, &conversation.id)),
                config.memory.max_bytes,
                memory.shown.clone(),
            );
        }
        let described = |name: &str| {
            config
                .agents
                .iter()
                .find(|a| a.name == name)
                .map_or(String::new(), |a| a.description.clone())
        };
        if !agent.agent_tools.is_empty() {
            // The parent's latest exchanges, for children that are given them.
            let excerpt = agent
                .agent_tools
                .iter()
                .any(|t| t.history == ChildHistory::Summary)
                .then(|| subagent::excerpt(&state.messages));
            let parent = Rc::new(subagent::Parent {
                env: turn_env.env.clone(),
                store: turn_env.store.clone(),
                conversation: conversation.id.clone(),
                owner: conversation.owner.clone(),
                toolsets: toolsets.clone(),
                excerpt,
                log: self.log.clone(),
                cancel: self.cancel.clone(),
                deadline_at: self.deadline_at,
                request_id: self.reference.to_string(),
                trace: self.trace.map(str::to_string),
            });
            for spec in &agent.agent_tools {
                let tool =
                    subagent::AgentTool::new(spec.clone(), &described(&spec.agent), parent.clone());
                tools.register_server_tool(Box::new(tool));
            }
        }
        if self.handoffs && !agent.handoffs.is_empty() {
            let handing = Rc::new(super::handoff::Handing {
                store: turn_env.store.clone(),
                storage: turn_env.storage.clone(),
                conversation: conversation.clone(),
            });
            for spec in &agent.handoffs {
                let description = described(&spec.agent);
                let tool = super::handoff::TransferTool::new(spec, &description, handing.clone());
                tools.register_server_tool(Box::new(tool));
            }
        }
        if let Some(allowed) = toolsets {
            // Inclusive once there is an artifact: `artifacts` joins whatever was chosen.
            let has_artifacts = artifact_context.clone();
            // Not for an agent without the toolset, whatever made an artifact (a user's PUT).
            let may = agent.has_toolset(artifacts::TOOLSET);
            tools.set_toolset_selector(Box::new(move |_, names| {
                let with_artifacts = had_artifacts || has_artifacts.exists.get();
                names
                    .iter()
                    .filter(|n| {
                        allowed.iter().any(|a| a == *n)
                            || (may && with_artifacts && **n == artifacts::TOOLSET)
                    })
                    .map(|n| n.to_string())
                    .collect()
            }));
        }
        for name in &config.approval_required_tools {
            tools.require_approval(name);
        }
        tools.merge_client_tools(client_tools.iter().cloned());
        tools
    }
}
