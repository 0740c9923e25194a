//! Running one agent turn at the edge: the D1 hooks, the Durable Object inbox, the provider
//! for the conversation's model, and the SSE stream the browser reads.

use std::cell::Cell;
use std::rc::Rc;

use async_trait::async_trait;
use futures::channel::mpsc;
use worker::{console_error, console_warn, AbortController, AbortSignal, Context, Env, Response};

use super::ai::WorkersAiBinding;
use super::config::Config;
use super::coordinator::Coordinator;
use super::error::ApiError;
use super::fetch::FetchTransport;
use super::store::{Conversation, Store};
use super::ui_stream::{UiStream, HEADERS};
use super::{json_response, new_id, now_ms};
use crate::agent::{
    pending_calls, run_agent_turn, AgentMessage, AgentState, CancelToken, CurrentTime, HookError,
    Inbox, ProviderResolver, ToolAnswers, ToolRegistry, TurnEndInfo, TurnHooks, TurnOutcome,
    UpdatePlan, MOVED_ON,
};
use crate::llm::providers::{Anthropic, Gemini, Ollama, OpenAiChat, WorkersAi};
use crate::llm::{
    HttpTransport, LlmError, ModelRef, Provider, Resilient, RetryPolicy, Sleeper, ToolDef,
    ToolResult, Usage,
};

/// The provider serving `model`, configured from the environment.
pub fn provider_for(
    env: &Env,
    config: &Config,
    model: &ModelRef,
    signal: Option<&AbortSignal>,
) -> Result<Rc<dyn Provider>, LlmError> {
    let transport: Rc<dyn HttpTransport> = Rc::new(FetchTransport {
        signal: signal.cloned(),
    });
    match model.provider.as_str() {
        "anthropic" => Ok(Rc::new(Anthropic::new(
            model.clone(),
            config.anthropic_base_url.as_deref(),
            config.anthropic_api_key.clone(),
            transport,
        ))),
        "openai" => Ok(Rc::new(OpenAiChat::new(
            model.clone(),
            config.openai_base_url.as_deref(),
            config.openai_api_key.clone(),
            transport,
        ))),
        "gemini" => Ok(Rc::new(Gemini::new(
            model.clone(),
            config.gemini_base_url.as_deref(),
            config.gemini_api_key.clone(),
            transport,
        ))),
        "ollama" => Ok(Rc::new(Ollama::new(
            model.clone(),
            config.ollama_base_url.as_deref(),
            transport,
        ))),
        "workers-ai" => {
            let binding = WorkersAiBinding::from_env(env).map_err(LlmError::Config)?;
            Ok(Rc::new(WorkersAi::new(model.clone(), Rc::new(binding))))
        }
        other => Err(LlmError::Config(format!(
            "unknown provider `{other}` in model `{model}` (known: anthropic, openai, gemini, ollama, workers-ai)"
        ))),
    }
}

/// The conversation's model with the configured fallbacks behind it, retried as the policy says.
pub fn resilient_provider(
    env: &Env,
    config: &Config,
    model: &ModelRef,
    signal: Option<&AbortSignal>,
) -> Result<Rc<dyn Provider>, LlmError> {
    let mut chain = vec![provider_for(env, config, model, signal)?];
    for fallback in config.fallback_models.iter().filter(|m| *m != model) {
        chain.push(provider_for(env, config, fallback, signal)?);
    }
    let provider = Resilient::new(chain, RetryPolicy::default(), Rc::new(WorkerSleeper))
        .ok_or_else(|| LlmError::Config("no model to call".into()))?;
    Ok(Rc::new(provider))
}

/// Timers and randomness for retries, from the Workers runtime.
struct WorkerSleeper;

#[async_trait(?Send)]
impl Sleeper for WorkerSleeper {
    async fn sleep(&self, ms: u64) {
        worker::Delay::from(std::time::Duration::from_millis(ms)).await;
    }

    fn random(&self) -> f64 {
        worker::js_sys::Math::random()
    }
}

/// Everything one turn needs.
pub struct Turn {
    pub id: String,
    pub conversation: Conversation,
    pub config: Config,
    pub store: Rc<Store>,
    pub coordinator: Rc<Coordinator>,
    pub provider: Rc<dyn Provider>,
    /// Aborts the provider calls of this turn (their transport carries its signal).
    pub abort: std::cell::RefCell<Option<AbortController>>,
    /// Tools the client runs, offered to the model for this turn.
    pub client_tools: Vec<ToolDef>,
    /// Client results and approvals for the calls a paused turn waits on.
    pub answers: ToolAnswers,
}

impl Turn {
    /// Everything a turn in conversation `id` needs, for `user`. The provider is resolved
    /// before the lease is taken: a turn that takes the lease also takes any messages a dead
    /// turn left queued, and nothing after that may fail on configuration.
    pub async fn prepare(
        env: &Env,
        config: &Config,
        user: &str,
        id: &str,
    ) -> Result<Self, ApiError> {
        let store = Rc::new(Store::new(env.d1("DB")?));
        let conversation = store
            .conversation(user, id)
            .await?
            .ok_or_else(|| super::routes::conversations::not_found(id))?;
        let model = match &conversation.model {
            Some(model) => {
                ModelRef::parse(model).map_err(|e| ApiError::BadRequest(e.to_string()))?
            }
            None => config.default_model.clone(),
        };
        let abort = AbortController::default();
        let signal = abort.signal();
        let provider = resilient_provider(env, config, &model, Some(&signal))
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
        let coordinator = Rc::new(Coordinator::for_conversation(env, id, config.lease_ttl_ms)?);
        Ok(Self {
            id: new_id()?,
            conversation,
            config: config.clone(),
            store,
            coordinator,
            provider,
            abort: std::cell::RefCell::new(Some(abort)),
            client_tools: Vec::new(),
            answers: ToolAnswers::default(),
        })
    }

    /// Stores the user's message (and any a dead turn left queued), then runs the turn in the
    /// background and returns the stream the client reads. The turn goes on if the client
    /// disconnects (`wait_until`), so queued messages are always answered.
    pub async fn start(
        self,
        ctx: &Context,
        incoming: Vec<AgentMessage>,
        stream: bool,
    ) -> Result<Response, ApiError> {
        let stored = async {
            let mut history = self.store.history(&self.conversation.id).await?;
            // A new user message instead of the results a paused turn waits for: the pending
            // calls are answered for the record, so every call keeps a result.
            if incoming
                .iter()
                .any(|m| matches!(m, AgentMessage::User { .. }))
            {
                for call in pending_calls(&history) {
                    let moved_on = AgentMessage::ToolResult(ToolResult {
                        tool_call_id: call.id,
                        tool_name: call.name,
                        content: MOVED_ON.to_string(),
                        is_error: true,
                    });
                    self.store
                        .append_message(&self.conversation.id, &new_id()?, &moved_on, now_ms())
                        .await?;
                    history.push(moved_on);
                }
            }
            for message in incoming {
                self.store
                    .append_message(&self.conversation.id, &new_id()?, &message, now_ms())
                    .await?;
                history.push(message);
            }
            Ok::<_, ApiError>(history)
        }
        .await;
        let history = match stored {
            Ok(h) => h,
            Err(e) => {
                self.release().await;
                return Err(e);
            }
        };

        // A resumed turn continues the client's paused message; anything else is a new one.
        let message_id = if self.answers == ToolAnswers::default() {
            Some(new_id()?)
        } else {
            None
        };
        if !stream {
            let mut body = String::new();
            let summary = self
                .run(history, message_id, |chunk| body.push_str(&chunk))
                .await;
            return json_response(200, &summary.into_json(&body));
        }
        let (tx, rx) = mpsc::unbounded::<Vec<u8>>();
        // A closed channel means the client went away; the turn runs on regardless.
        let deliver = move |chunk: String| {
            let _ = tx.unbounded_send(chunk.into_bytes());
        };
        ctx.wait_until(async move {
            self.run(history, message_id, deliver).await;
        });
        let headers = worker::Headers::new();
        for (name, value) in HEADERS {
            headers.set(name, value)?;
        }
        Ok(
            Response::from_stream(futures::StreamExt::map(rx, Ok::<Vec<u8>, worker::Error>))?
                .with_headers(headers),
        )
    }

    /// Runs the turn, handing each piece of the UI message stream to `deliver` as it is made.
    async fn run(
        mut self,
        history: Vec<AgentMessage>,
        message_id: Option<String>,
        mut deliver: impl FnMut(String),
    ) -> TurnSummary {
        let history_len = history.len();
        let mut state = AgentState::new(self.conversation.system.clone(), history);
        state.max_llm_calls = self.config.max_llm_calls;
        state.max_tool_calls = self.config.max_tool_calls;
        state.tool_timeout_ms = Some(self.config.tool_timeout_ms.into());
        state.turn_deadline_ms = Some(self.config.turn_deadline_ms.into());
        state.timer = Some(Rc::new(WorkerSleeper));
        state.max_tokens = self.config.max_tokens;
        state.answers = std::mem::take(&mut self.answers);
        state.inbox = Rc::new(CoordinatorInbox {
            coordinator: self.coordinator.clone(),
            turn_id: self.id.clone(),
        });
        let mut tools = ToolRegistry::new();
        tools.register_server_tool(Box::new(CurrentTime::default()));
        tools.register_server_tool(Box::new(UpdatePlan::new(state.plan.clone())));
        for name in &self.config.approval_required_tools {
            tools.require_approval(name);
        }
        tools.merge_client_tools(std::mem::take(&mut self.client_tools));
        let hooks = D1Hooks {
            store: self.store.clone(),
            conversation_id: self.conversation.id.clone(),
            owner: self.conversation.owner.clone(),
        };

        let mut out = String::new();
        let mut ui = UiStream::start(message_id.as_deref(), &mut out);
        let finished = Rc::new(Cell::new(false));
        self.watch(state.cancel.clone(), finished.clone());
        let mut send = |out: &mut String| {
            if !out.is_empty() {
                deliver(std::mem::take(out));
            }
        };
        send(&mut out);
        let outcome = run_agent_turn(
            &FixedProvider(self.provider.clone()),
            &mut state,
            &tools,
            None,
            &hooks,
            &mut |event| {
                ui.event(&event, &mut out);
                send(&mut out);
            },
        )
        .await;
        finished.set(true);
        ui.finish(&outcome, &mut out);
        send(&mut out);
        // A completed turn released the lease in its last drain; any other end releases here.
        if outcome != TurnOutcome::Completed {
            self.release().await;
        }
        TurnSummary {
            messages: state.messages.split_off(history_len),
            usage: state.total_usage,
            outcome,
        }
    }

    /// While the turn runs: renews its lease (so a long generation never loses it) and, when
    /// the conversation's coordinator says the turn was cancelled, stops it: the token tells the
    /// loop, the abort signal ends the provider call at once.
    fn watch(&self, cancel: CancelToken, finished: Rc<Cell<bool>>) {
        let coordinator = self.coordinator.clone();
        let turn_id = self.id.clone();
        let mut abort = self.abort.take();
        let every = (coordinator.lease_ttl_ms / 3).clamp(100, 1_000) as u64;
        worker::wasm_bindgen_futures::spawn_local(async move {
            loop {
                worker::Delay::from(std::time::Duration::from_millis(every)).await;
                if finished.get() {
                    break;
                }
                match coordinator.renew(&turn_id).await {
                    Ok(renewed) if renewed.cancelled => {
                        cancel.cancel();
                        if let Some(controller) = abort.take() {
                            controller.abort();
                        }
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => console_warn!("lease renewal failed: {e}"),
                }
            }
        });
    }

    pub async fn release(&self) {
        if let Err(e) = self.coordinator.release(&self.id).await {
            console_error!("could not release the lease of turn {}: {e}", self.id);
        }
    }
}

/// What a turn produced, for `stream: false`.
struct TurnSummary {
    messages: Vec<AgentMessage>,
    usage: Usage,
    outcome: TurnOutcome,
}

impl TurnSummary {
    /// `{messages, events, usage, cost_usd, finish_reason}`; `events` are the chunks the stream
    /// would have carried, so both modes say the same thing.
    fn into_json(self, stream: &str) -> serde_json::Value {
        let events: Vec<serde_json::Value> = stream
            .split("\n\n")
            .filter_map(|frame| frame.strip_prefix("data: "))
            .filter_map(|data| serde_json::from_str(data).ok())
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
                AgentMessage::Assistant(a) => ModelRef {
                    provider: a.provider.clone(),
                    model: a.model.clone(),
                }
                .info()
                .cost(&a.usage),
                _ => None,
            })
            .collect();
        let error = match &self.outcome {
            TurnOutcome::Failed { message, .. } | TurnOutcome::LimitReached(message) => {
                serde_json::Value::String(message.clone())
            }
            _ => serde_json::Value::Null,
        };
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

struct FixedProvider(Rc<dyn Provider>);

#[async_trait(?Send)]
impl ProviderResolver for FixedProvider {
    async fn resolve(&self) -> Result<Rc<dyn Provider>, LlmError> {
        Ok(self.0.clone())
    }
}

/// Persists every message the loop adds, as it is added, and each LLM call's usage and cost in
/// the owner's ledger.
struct D1Hooks {
    store: Rc<Store>,
    conversation_id: String,
    owner: String,
}

#[async_trait(?Send)]
impl TurnHooks for D1Hooks {
    /// The billing step: a ledger that cannot be written stops the turn (seed rule).
    async fn on_turn_end(&self, info: TurnEndInfo<'_>) -> Result<bool, HookError> {
        let model = ModelRef {
            provider: info.provider.to_string(),
            model: info.model.to_string(),
        };
        let cost = model.info().cost(info.usage);
        self.store
            .record_usage(
                &self.owner,
                &self.conversation_id,
                info.model,
                info.provider,
                info.usage,
                cost,
                now_ms(),
            )
            .await
            .map_err(|e| HookError(format!("usage ledger: {e}")))?;
        Ok(true)
    }

    async fn on_message(&self, message: &AgentMessage) -> Result<(), HookError> {
        let id = new_id().map_err(|e| HookError(e.to_string()))?;
        self.store
            .append_message(&self.conversation_id, &id, message, now_ms())
            .await
            .map(|_| ())
            .map_err(|e| HookError(e.to_string()))
    }

    fn warn(&self, message: &str) {
        console_warn!("{message}");
    }
}

/// The conversation's Durable Object queue, seen from the running turn.
struct CoordinatorInbox {
    coordinator: Rc<Coordinator>,
    turn_id: String,
}

#[async_trait(?Send)]
impl Inbox for CoordinatorInbox {
    async fn drain_steering(&self) -> Vec<AgentMessage> {
        self.coordinator
            .drain(&self.turn_id, false)
            .await
            .unwrap_or_else(|e| {
                console_error!("steering drain failed: {e}");
                Vec::new()
            })
    }

    async fn drain_at_end(&self) -> Vec<AgentMessage> {
        self.coordinator
            .drain(&self.turn_id, true)
            .await
            .unwrap_or_else(|e| {
                console_error!("final drain failed (the lease will expire): {e}");
                Vec::new()
            })
    }
}
