//! Shared support for the agent-loop tests: a scripted provider, a recording hook set, and
//! helpers to run a turn and describe its events.
#![allow(dead_code)] // each test file uses a different part

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use async_trait::async_trait;
use edge_agent::agent::{
    run_agent_turn, AgentEvent, AgentMessage, AgentState, CallSize, CurrentTime, HookError,
    LocalQueues, ProviderResolver, Resolved, ServerTool, StepEndInfo, ToolRegistry, TurnHooks,
    TurnOutcome,
};
use edge_agent::llm::{
    AnswerFormat, AssistantMessage, Completion, ContentBlock, LlmError, LlmEvent, LlmRequest,
    Message, ModelRef, Provider, StopReason, ToolCall, ToolDef, Usage,
};
use serde_json::{json, Map, Value};

/// One scripted answer: text, then tool calls.
pub struct Answer {
    pub text: &'static str,
    pub calls: Vec<(&'static str, &'static str, Value)>,
    /// Fail after the text, as a provider that errors mid-stream.
    pub error: Option<LlmError>,
    /// Cut off at the output token limit.
    pub cut_off: bool,
}

pub fn text(text: &'static str) -> Answer {
    Answer {
        text,
        calls: vec![],
        error: None,
        cut_off: false,
    }
}

pub fn calls(calls: Vec<(&'static str, &'static str, Value)>) -> Answer {
    Answer {
        text: "",
        calls,
        error: None,
        cut_off: false,
    }
}

/// Plays answers in order and records what each call was sent.
pub struct Scripted {
    pub model: ModelRef,
    pub answers: RefCell<VecDeque<Answer>>,
    pub seen: RefCell<Vec<Vec<Message>>>,
    /// The tool names offered on each call.
    pub offered: RefCell<Vec<Vec<String>>>,
    /// The system prompt of each call.
    pub systems: RefCell<Vec<Option<String>>>,
    /// The `max_tokens` of each call.
    pub limits: RefCell<Vec<u32>>,
    /// The `call_ids` prefix of each call.
    pub call_ids: RefCell<Vec<String>>,
    /// How each call asked for a typed answer: `schema`, `strict schema`, `tool <name>` or
    /// `free`.
    pub formats: RefCell<Vec<String>>,
}

impl Scripted {
    pub fn new(answers: Vec<Answer>) -> Rc<Self> {
        Rc::new(Self {
            model: ModelRef::parse("scripted:model-1").unwrap(),
            answers: RefCell::new(answers.into()),
            seen: RefCell::new(vec![]),
            offered: RefCell::new(vec![]),
            systems: RefCell::new(vec![]),
            limits: RefCell::new(vec![]),
            call_ids: RefCell::new(vec![]),
            formats: RefCell::new(vec![]),
        })
    }

    /// A provider of another model (`provider:model`).
    pub fn of(model: &str, answers: Vec<Answer>) -> Rc<Self> {
        let mut scripted = Rc::into_inner(Self::new(answers)).unwrap();
        scripted.model = ModelRef::parse(model).unwrap();
        Rc::new(scripted)
    }
}

#[async_trait(?Send)]
impl Provider for Scripted {
    fn model(&self) -> &ModelRef {
        &self.model
    }

    async fn health_check(&self) -> Result<(), LlmError> {
        Ok(())
    }

    async fn stream(
        &self,
        request: &LlmRequest<'_>,
        on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
    ) -> Completion {
        self.seen.borrow_mut().push(request.messages.to_vec());
        self.limits.borrow_mut().push(request.max_tokens);
        self.call_ids
            .borrow_mut()
            .push(request.call_ids.to_string());
        self.systems
            .borrow_mut()
            .push(request.system.map(str::to_string));
        self.offered
            .borrow_mut()
            .push(request.tools.iter().map(|t| t.name.clone()).collect());
        self.formats.borrow_mut().push(match request.answer {
            Some(AnswerFormat::Schema { strict: true, .. }) => "strict schema".into(),
            Some(AnswerFormat::Schema { .. }) => "schema".into(),
            Some(AnswerFormat::Tool { name }) => format!("tool {name}"),
            Some(AnswerFormat::Offered { name }) => format!("offered {name}"),
            None => "free".into(),
        });
        let answer = self
            .answers
            .borrow_mut()
            .pop_front()
            .expect("script ran out of answers");
        let mut content = vec![];
        if !answer.text.is_empty() {
            let index = content.len();
            on_event(&LlmEvent::TextStart { index });
            on_event(&LlmEvent::TextDelta {
                index,
                delta: answer.text.to_string(),
            });
            on_event(&LlmEvent::TextEnd { index });
            content.push(ContentBlock::Text {
                text: answer.text.to_string(),
            });
        }
        for (id, name, input) in &answer.calls {
            let index = content.len();
            on_event(&LlmEvent::ToolCallStart {
                index,
                id: id.to_string(),
                name: name.to_string(),
            });
            on_event(&LlmEvent::ToolCallEnd {
                index,
                id: id.to_string(),
                name: name.to_string(),
                input: input.clone(),
            });
            content.push(ContentBlock::ToolUse(ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                input: input.clone(),
                signature: None,
            }));
        }
        let usage = Usage {
            input_tokens: 10,
            output_tokens: 5,
            ..Default::default()
        };
        on_event(&LlmEvent::Usage(usage));
        Completion {
            message: AssistantMessage {
                stop_reason: if answer.error.is_some() {
                    StopReason::Error
                } else if answer.cut_off {
                    StopReason::MaxTokens
                } else if answer.calls.is_empty() {
                    StopReason::EndTurn
                } else {
                    StopReason::ToolUse
                },
                content,
                model: self.model.model.clone(),
                provider: self.model.provider.clone(),
                usage,
                output: None,
            },
            error: answer.error,
            given_up: Vec::new(),
        }
    }
}

pub struct Resolver(pub Rc<Scripted>);

#[async_trait(?Send)]
impl ProviderResolver for Resolver {
    async fn resolve(&self, call: CallSize<'_>) -> Result<Resolved, LlmError> {
        Ok(Resolved {
            provider: self.0.clone(),
            max_tokens: call.max_tokens,
        })
    }
}

/// Records every hook call; `fail_on_message` makes persistence fail.
#[derive(Default)]
pub struct Recorder {
    pub stored: RefCell<Vec<String>>,
    pub warnings: RefCell<Vec<String>>,
    pub fail_on_message: bool,
    /// Output tokens of each paid call no message stores.
    pub unstored: RefCell<Vec<u64>>,
}

#[async_trait(?Send)]
impl TurnHooks for Recorder {
    async fn on_step_end(&self, _info: StepEndInfo<'_>) -> Result<bool, HookError> {
        Ok(true)
    }

    async fn on_message(&self, message: &AgentMessage) -> Result<(), HookError> {
        if self.fail_on_message {
            return Err(HookError("D1 is down".into()));
        }
        self.stored.borrow_mut().push(message.kind().to_string());
        Ok(())
    }

    fn warn(&self, message: &str) {
        self.warnings.borrow_mut().push(message.to_string());
    }

    async fn on_unstored_call(&self, _model: &ModelRef, usage: &Usage) -> Result<(), HookError> {
        self.unstored.borrow_mut().push(usage.output_tokens);
        Ok(())
    }
}

pub fn tool_def(name: &str) -> ToolDef {
    ToolDef {
        name: name.into(),
        description: name.into(),
        input_schema: json!({"type": "object"}),
    }
}

/// Runs a turn and returns (outcome, event names, state).
/// Runs one turn on `state` and returns its outcome, its events (see [`describe`]) and the
/// state after it.
pub fn run_turn(
    resolver: &dyn ProviderResolver,
    tools: &ToolRegistry,
    hooks: &dyn TurnHooks,
    mut state: AgentState,
) -> (TurnOutcome, Vec<String>, AgentState) {
    let mut events = Vec::new();
    let outcome = futures::executor::block_on(run_agent_turn(
        resolver,
        &mut state,
        tools,
        None,
        hooks,
        &mut |e| events.push(describe(&e)),
    ));
    (outcome, events, state)
}

/// A state whose history is one user message.
pub fn asking(text: &str) -> AgentState {
    AgentState::new(None, vec![AgentMessage::user_text(text)])
}

/// A tool that, while it runs, lets a steering message arrive.
pub struct SteersWhileRunning {
    pub def: ToolDef,
    pub queues: Rc<LocalQueues>,
    pub message: &'static str,
    pub output: &'static str,
}

#[async_trait(?Send)]
impl ServerTool for SteersWhileRunning {
    fn definition(&self) -> &ToolDef {
        &self.def
    }

    async fn call(&self, _: &Map<String, Value>) -> Result<Value, String> {
        self.queues
            .enqueue_steering(AgentMessage::user_text(self.message));
        Ok(json!(self.output))
    }
}

pub fn describe(e: &AgentEvent<'_>) -> String {
    match e {
        AgentEvent::StepStart { step, .. } => format!("step-start {step}"),
        AgentEvent::Llm(LlmEvent::TextDelta { delta, .. }) => format!("text {delta}"),
        AgentEvent::Llm(LlmEvent::ToolCallEnd { name, .. }) => format!("call {name}"),
        AgentEvent::Llm(_) => "llm".into(),
        AgentEvent::StepEnd { step, .. } => format!("step-end {step}"),
        AgentEvent::ToolExecution { call, is_error, .. } => {
            format!("tool {} error={is_error}", call.name)
        }
        AgentEvent::ClientToolRequest { calls } => format!("client-tools {}", calls.len()),
        AgentEvent::ApprovalRequest { calls } => format!(
            "approval {}",
            calls
                .iter()
                .map(|c| c.id.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ),
        AgentEvent::ToolDenied { call, reason } => format!("denied {} {reason:?}", call.id),
        AgentEvent::Steering { skipped, messages } => format!(
            "steering skipped=[{}] messages={}",
            skipped
                .iter()
                .map(|c| c.name.as_str())
                .collect::<Vec<_>>()
                .join(","),
            messages.len()
        ),
        AgentEvent::ProviderSwitch { from, to } => format!("switch {from}->{to}"),
        AgentEvent::Compacted { .. } => "compacted".into(),
        AgentEvent::Done {
            final_text,
            total_steps,
            total_usage,
        } => {
            format!(
                "done {final_text:?} turns={total_steps} in={}",
                total_usage.input_tokens
            )
        }
        AgentEvent::Error { message, .. } => format!("error {message}"),
        AgentEvent::Output(state) => format!("output {state}"),
        AgentEvent::OutputElement { index, value } => format!("element {index} {value}"),
    }
}

pub fn kinds(state: &AgentState) -> Vec<&'static str> {
    state.messages.iter().map(|m| m.kind()).collect()
}

pub fn current_time_registry() -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools.register_server_tool(Box::new(CurrentTime::default()));
    tools
}
