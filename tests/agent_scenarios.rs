//! Timing-sensitive loop scenarios: concurrent tools, messages arriving at awkward moments, and
//! a provider switch mid-turn.

mod support;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use edge_agent::agent::{
    run_agent_turn, AgentMessage, AgentState, CallSize, HookError, LocalQueues, ProviderResolver,
    Resolved, ServerTool, ToolRegistry, TurnHooks, TurnOutcome,
};
use edge_agent::llm::{
    AssistantMessage, Completion, LlmError, LlmEvent, LlmRequest, Message, ModelRef, Provider,
    StopReason, ToolDef,
};
use serde_json::{json, Map, Value};
use support::*;

/// Pending once, then ready: lets a single-threaded executor switch between futures.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Logs when it starts and ends, yielding in between.
struct Lookup {
    def: ToolDef,
    log: Rc<RefCell<Vec<String>>>,
    concurrent: bool,
}

#[async_trait(?Send)]
impl ServerTool for Lookup {
    fn definition(&self) -> &ToolDef {
        &self.def
    }
    fn concurrent(&self) -> bool {
        self.concurrent
    }
    async fn call(&self, arguments: &Map<String, Value>) -> Result<Value, String> {
        let key = arguments
            .get("key")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        self.log.borrow_mut().push(format!("start {key}"));
        YieldOnce(false).await;
        self.log.borrow_mut().push(format!("end {key}"));
        Ok(json!(key))
    }
}

fn lookups(concurrent: bool) -> (ToolRegistry, Rc<RefCell<Vec<String>>>) {
    let log = Rc::new(RefCell::new(vec![]));
    let mut tools = ToolRegistry::new();
    tools.register_server_tool(Box::new(Lookup {
        def: tool_def("lookup"),
        log: log.clone(),
        concurrent,
    }));
    (tools, log)
}

fn three_lookups() -> Rc<Scripted> {
    Scripted::new(vec![
        calls(vec![
            ("a", "lookup", json!({"key": "a"})),
            ("b", "lookup", json!({"key": "b"})),
            ("c", "lookup", json!({"key": "c"})),
        ]),
        text("done"),
    ])
}

fn run(
    provider: &Rc<Scripted>,
    tools: &ToolRegistry,
    queues: Rc<LocalQueues>,
) -> (TurnOutcome, Vec<String>, AgentState) {
    let mut state = asking("go");
    state.queues = queues;
    run_turn(
        &Resolver(provider.clone()),
        tools,
        &Recorder::default(),
        state,
    )
}

fn result_ids(state: &AgentState) -> Vec<String> {
    state
        .messages
        .iter()
        .filter_map(|m| match m {
            AgentMessage::ToolResult(r) => Some(format!("{}={}", r.tool_call_id, r.content)),
            _ => None,
        })
        .collect()
}

#[test]
fn independent_calls_run_together_and_results_keep_call_order() {
    let (tools, log) = lookups(true);
    let (outcome, _, state) = run(&three_lookups(), &tools, Default::default());
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        *log.borrow(),
        ["start a", "start b", "start c", "end a", "end b", "end c"]
    );
    assert_eq!(result_ids(&state), ["a=a", "b=b", "c=c"]);
}

#[test]
fn tools_that_do_not_allow_it_run_one_after_another() {
    let (tools, log) = lookups(false);
    run(&three_lookups(), &tools, Default::default());
    assert_eq!(
        *log.borrow(),
        ["start a", "end a", "start b", "end b", "start c", "end c"]
    );
}

#[test]
fn steering_arriving_during_the_last_tool_skips_nothing_and_joins_before_the_next_call() {
    let queues = Rc::new(LocalQueues::default());
    let mut tools = current_time_registry();
    tools.register_server_tool(Box::new(SteersWhileRunning {
        def: tool_def("weather"),
        queues: queues.clone(),
        message: "also check Bergen",
        output: "Oslo: 4C",
    }));
    let provider = Scripted::new(vec![
        calls(vec![
            ("c1", "current_time", json!({})),
            ("c2", "weather", json!({})),
        ]),
        text("Oslo 4C; Bergen next."),
    ]);
    let (outcome, events, state) = run(&provider, &tools, queues);
    assert_eq!(outcome, TurnOutcome::Completed);
    assert!(
        events.contains(&"steering skipped=[] messages=1".to_string()),
        "{events:?}"
    );
    assert_eq!(
        kinds(&state),
        [
            "user",
            "assistant",
            "tool_result",
            "tool_result",
            "user",
            "assistant"
        ]
    );
    assert!(result_ids(&state).iter().all(|r| !r.contains("skipped")));
    assert_eq!(
        provider.seen.borrow()[1].last().unwrap(),
        &Message::user_text("also check Bergen")
    );
}

/// A provider that, while it answers, lets a follow-up arrive.
struct FollowupWhileAnswering {
    inner: Rc<Scripted>,
    queues: Rc<LocalQueues>,
    sent: Cell<bool>,
}

#[async_trait(?Send)]
impl Provider for FollowupWhileAnswering {
    fn model(&self) -> &ModelRef {
        self.inner.model()
    }
    async fn health_check(&self) -> Result<(), LlmError> {
        Ok(())
    }
    async fn stream(
        &self,
        request: &LlmRequest<'_>,
        on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
    ) -> Completion {
        if !self.sent.replace(true) {
            self.queues
                .enqueue_followup(AgentMessage::user_text("and in Fahrenheit?"));
        }
        self.inner.stream(request, on_event).await
    }
}

struct Fixed(Rc<dyn Provider>);

#[async_trait(?Send)]
impl ProviderResolver for Fixed {
    async fn resolve(&self, call: CallSize<'_>) -> Result<Resolved, LlmError> {
        Ok(Resolved {
            provider: self.0.clone(),
            max_tokens: call.max_tokens,
        })
    }
}

#[test]
fn a_followup_arriving_while_the_model_answers_starts_another_round() {
    let queues = Rc::new(LocalQueues::default());
    let inner = Scripted::new(vec![text("4C."), text("39F.")]);
    let provider = Rc::new(FollowupWhileAnswering {
        inner: inner.clone(),
        queues: queues.clone(),
        sent: Cell::new(false),
    });
    let mut state = AgentState::new(None, vec![AgentMessage::user_text("temperature?")]);
    state.queues = queues;
    let mut events = vec![];
    let outcome = futures::executor::block_on(run_agent_turn(
        &Fixed(provider),
        &mut state,
        &ToolRegistry::new(),
        None,
        &Recorder::default(),
        &mut |e| events.push(describe(&e)),
    ));
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(kinds(&state), ["user", "assistant", "user", "assistant"]);
    assert_eq!(events.last().unwrap(), "done \"39F.\" turns=2 in=20");
}

/// Hands out the primary, then a second model (e.g. credits ran out mid-turn).
struct Switches {
    first: Rc<Scripted>,
    second: Rc<Scripted>,
    calls: Cell<u32>,
}

#[async_trait(?Send)]
impl ProviderResolver for Switches {
    async fn resolve(&self, call: CallSize<'_>) -> Result<Resolved, LlmError> {
        let n = self.calls.get();
        self.calls.set(n + 1);
        let provider: Rc<dyn Provider> = if n == 0 {
            self.first.clone()
        } else {
            self.second.clone()
        };
        Ok(Resolved {
            provider,
            max_tokens: call.max_tokens,
        })
    }
}

/// Answers with a cheaper model from the first call (the budget was spent before the turn).
struct StartsElsewhere {
    asked: ModelRef,
    answers: Rc<Scripted>,
}

#[async_trait(?Send)]
impl ProviderResolver for StartsElsewhere {
    async fn resolve(&self, call: CallSize<'_>) -> Result<Resolved, LlmError> {
        Ok(Resolved {
            provider: self.answers.clone(),
            max_tokens: call.max_tokens,
        })
    }

    fn intended(&self) -> Option<ModelRef> {
        Some(self.asked.clone())
    }
}

#[test]
fn a_turn_that_starts_on_another_model_than_asked_announces_the_switch() {
    let resolver = StartsElsewhere {
        asked: ModelRef::parse("big:model-9").unwrap(),
        answers: Scripted::new(vec![text("Hello from the cheap one.")]),
    };
    let mut state = AgentState::new(None, vec![AgentMessage::user_text("hi")]);
    let mut events = vec![];
    futures::executor::block_on(run_agent_turn(
        &resolver,
        &mut state,
        &ToolRegistry::new(),
        None,
        &Recorder::default(),
        &mut |e| events.push(describe(&e)),
    ));
    let switches: Vec<_> = events.iter().filter(|e| e.starts_with("switch")).collect();
    assert_eq!(
        switches,
        ["switch big:model-9->scripted:model-1"],
        "{events:?}"
    );
    // The same resolver asked for the model it answers with: nothing to announce.
    let mut events = vec![];
    let mut state = AgentState::new(None, vec![AgentMessage::user_text("hi")]);
    let same = StartsElsewhere {
        asked: ModelRef::parse("scripted:model-1").unwrap(),
        answers: Scripted::new(vec![text("Hello.")]),
    };
    futures::executor::block_on(run_agent_turn(
        &same,
        &mut state,
        &ToolRegistry::new(),
        None,
        &Recorder::default(),
        &mut |e| events.push(describe(&e)),
    ));
    assert!(
        !events.iter().any(|e| e.starts_with("switch")),
        "{events:?}"
    );
}

#[test]
fn a_provider_switch_mid_turn_is_reported_and_the_history_handed_over() {
    let first = Scripted::new(vec![calls(vec![("toolu_01:x", "current_time", json!({}))])]);
    let second = Rc::new(Scripted {
        model: ModelRef::parse("other:model-2").unwrap(),
        ..Rc::try_unwrap(Scripted::new(vec![text("Noon, says the second model.")]))
            .ok()
            .unwrap()
    });
    let resolver = Switches {
        first,
        second: second.clone(),
        calls: Cell::new(0),
    };
    let mut state = AgentState::new(None, vec![AgentMessage::user_text("time?")]);
    let mut events = vec![];
    let outcome = futures::executor::block_on(run_agent_turn(
        &resolver,
        &mut state,
        &current_time_registry(),
        None,
        &Recorder::default(),
        &mut |e| events.push(describe(&e)),
    ));
    assert_eq!(outcome, TurnOutcome::Completed);
    assert!(
        events.contains(&"switch scripted:model-1->other:model-2".to_string()),
        "{events:?}"
    );
    let AgentMessage::Assistant(last) = state.messages.last().unwrap() else {
        panic!()
    };
    assert_eq!(
        (last.provider.as_str(), last.model.as_str()),
        ("other", "model-2")
    );
    // The second model got the first one's call and its result, consistently.
    let seen = &second.seen.borrow()[0];
    let Message::Assistant(a) = &seen[1] else {
        panic!()
    };
    let Message::ToolResult(r) = &seen[2] else {
        panic!()
    };
    assert_eq!(a.tool_calls().next().unwrap().id, r.tool_call_id);
}

/// Answers with reasoning, then text.
struct Thinks(ModelRef);

#[async_trait(?Send)]
impl Provider for Thinks {
    fn model(&self) -> &ModelRef {
        &self.0
    }
    async fn health_check(&self) -> Result<(), LlmError> {
        Ok(())
    }
    async fn stream(
        &self,
        _: &LlmRequest<'_>,
        on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
    ) -> Completion {
        use edge_agent::llm::{AssistantMessage, ContentBlock, StopReason, Usage};
        for e in [
            LlmEvent::ThinkingStart { index: 0 },
            LlmEvent::ThinkingDelta {
                index: 0,
                delta: "The user wants".into(),
            },
            LlmEvent::ThinkingDelta {
                index: 0,
                delta: " a number.".into(),
            },
            LlmEvent::ThinkingEnd { index: 0 },
            LlmEvent::TextStart { index: 1 },
            LlmEvent::TextDelta {
                index: 1,
                delta: "42".into(),
            },
            LlmEvent::TextEnd { index: 1 },
        ] {
            on_event(&e);
        }
        Completion {
            message: AssistantMessage {
                content: vec![
                    ContentBlock::Thinking {
                        thinking: "The user wants a number.".into(),
                        signature: Some("sig".into()),
                    },
                    ContentBlock::Text { text: "42".into() },
                ],
                stop_reason: StopReason::EndTurn,
                model: self.0.model.clone(),
                provider: self.0.provider.clone(),
                usage: Usage::default(),
                output: None,
            },
            error: None,
            given_up: Vec::new(),
        }
    }
}

#[test]
fn reasoning_streams_through_and_stays_on_the_stored_answer() {
    let provider: Rc<dyn Provider> = Rc::new(Thinks(
        ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap(),
    ));
    let mut state = AgentState::new(None, vec![AgentMessage::user_text("a number?")]);
    let mut deltas = vec![];
    futures::executor::block_on(run_agent_turn(
        &Fixed(provider),
        &mut state,
        &ToolRegistry::new(),
        None,
        &Recorder::default(),
        &mut |e| {
            if let edge_agent::agent::AgentEvent::Llm(LlmEvent::ThinkingDelta { delta, .. }) = e {
                deltas.push(delta.clone());
            }
        },
    ));
    assert_eq!(deltas, ["The user wants", " a number."]);
    let AgentMessage::Assistant(a) = &state.messages[1] else {
        panic!()
    };
    assert!(
        matches!(&a.content[0], edge_agent::llm::ContentBlock::Thinking { thinking, signature: Some(s) } if thinking == "The user wants a number." && s == "sig")
    );
}

mod cancel {
    use super::*;
    use edge_agent::agent::{CancelToken, CANCELLED};
    use edge_agent::llm::StopReason;

    /// Streams an answer; the turn is cancelled while it does.
    struct CancelledWhileAnswering {
        inner: Rc<Scripted>,
        token: CancelToken,
    }

    #[async_trait(?Send)]
    impl Provider for CancelledWhileAnswering {
        fn model(&self) -> &ModelRef {
            self.inner.model()
        }
        async fn health_check(&self) -> Result<(), LlmError> {
            Ok(())
        }
        async fn stream(
            &self,
            request: &LlmRequest<'_>,
            on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
        ) -> Completion {
            self.token.cancel();
            self.inner.stream(request, on_event).await
        }
    }

    #[test]
    fn cancelling_during_an_answer_keeps_it_marked_aborted_and_runs_none_of_its_calls() {
        let state = asking("time?");
        let inner = Scripted::new(vec![Answer {
            text: "Let me chec",
            calls: vec![("c1", "current_time", json!({}))],
            error: None,
            cut_off: false,
        }]);
        let provider: Rc<dyn Provider> = Rc::new(CancelledWhileAnswering {
            inner,
            token: state.cancel.clone(),
        });
        let (outcome, events, state) = run_turn(
            &Fixed(provider),
            &current_time_registry(),
            &Recorder::default(),
            state,
        );
        assert_eq!(outcome, TurnOutcome::Cancelled);
        assert!(!events.iter().any(|e| e.starts_with("tool ")), "{events:?}");
        assert_eq!(kinds(&state), ["user", "assistant", "tool_result"]);
        let AgentMessage::Assistant(a) = &state.messages[1] else {
            panic!()
        };
        assert_eq!(
            (a.stop_reason.clone(), a.text()),
            (StopReason::Aborted, "Let me chec".to_string())
        );
        let AgentMessage::ToolResult(r) = &state.messages[2] else {
            panic!()
        };
        assert_eq!((r.content.as_str(), r.is_error), (CANCELLED, true));
    }

    /// Cancels the turn when it runs.
    struct CancelsTheTurn {
        def: ToolDef,
        token: CancelToken,
    }

    #[async_trait(?Send)]
    impl ServerTool for CancelsTheTurn {
        fn definition(&self) -> &ToolDef {
            &self.def
        }
        async fn call(&self, _: &Map<String, Value>) -> Result<Value, String> {
            self.token.cancel();
            Ok(json!("ran"))
        }
    }

    #[test]
    fn cancelling_between_tools_answers_the_rest_and_calls_no_model() {
        let state = asking("go");
        let mut tools = current_time_registry();
        tools.register_server_tool(Box::new(CancelsTheTurn {
            def: tool_def("first"),
            token: state.cancel.clone(),
        }));
        let provider = Scripted::new(vec![calls(vec![
            ("c1", "first", json!({})),
            ("c2", "current_time", json!({})),
        ])]);
        let (outcome, _, state) = run_turn(
            &Resolver(provider.clone()),
            &tools,
            &Recorder::default(),
            state,
        );
        assert_eq!(outcome, TurnOutcome::Cancelled);
        assert_eq!(
            result_ids(&state),
            ["c1=ran", format!("c2={CANCELLED}").as_str()]
        );
        assert_eq!(provider.seen.borrow().len(), 1);
    }
}

/// Holds each call's worst case as a budget does: records what each call would send, lowers
/// its `max_tokens`, and records every settlement.
struct Holding {
    answers: Rc<Scripted>,
    plans: RefCell<Vec<(u64, u32)>>,
    settled: RefCell<Vec<(StopReason, u64)>>,
}

#[async_trait(?Send)]
impl ProviderResolver for Holding {
    async fn resolve(&self, call: CallSize<'_>) -> Result<Resolved, LlmError> {
        self.plans
            .borrow_mut()
            .push(((call.input_tokens)(), call.max_tokens));
        Ok(Resolved {
            provider: self.answers.clone(),
            max_tokens: 300,
        })
    }

    async fn settle(&self, answer: &AssistantMessage) {
        self.settled
            .borrow_mut()
            .push((answer.stop_reason.clone(), answer.usage.output_tokens));
    }
}

#[test]
fn a_resolver_sees_each_call_before_it_is_made_and_is_settled_after_it_ends() {
    let holding = Holding {
        answers: Scripted::new(vec![
            calls(vec![("t1", "current_time", json!({}))]),
            Answer {
                text: "It is noon, and then the connection broke",
                calls: vec![],
                error: Some(LlmError::Network {
                    provider: "scripted".into(),
                    message: "reset".into(),
                }),
                cut_off: false,
            },
        ]),
        plans: RefCell::default(),
        settled: RefCell::default(),
    };
    let mut tools = ToolRegistry::new();
    tools.register_server_tool(Box::new(edge_agent::agent::CurrentTime::default()));
    let mut state = AgentState::new(
        Some("You tell the time.".into()),
        vec![AgentMessage::user_text("what time is it?")],
    );
    let outcome = futures::executor::block_on(run_agent_turn(
        &holding,
        &mut state,
        &tools,
        None,
        &Recorder::default(),
        &mut |_| {},
    ));
    assert!(matches!(outcome, TurnOutcome::Failed { .. }), "{outcome:?}");
    // The estimate counts the system prompt, the history and the tool's definition, and grows
    // with the tool's result; the turn asked for its own limit, and the call got the lowered one.
    let plans = holding.plans.borrow();
    assert_eq!(plans.len(), 2);
    let bare = edge_agent::agent::estimate::estimate_tokens("You tell the time.")
        + edge_agent::agent::estimate::message_tokens(
            &AgentMessage::user_text("what time is it?"),
            None,
        );
    assert!(plans[0].0 > bare, "{plans:?} against {bare}");
    assert!(plans[1].0 > plans[0].0, "{plans:?}");
    assert_eq!(plans[0].1, state.max_tokens);
    assert_eq!(*holding.answers.limits.borrow(), [300, 300]);
    // Both calls were settled, the failed one with what it streamed.
    let settled = holding.settled.borrow();
    assert_eq!(settled.len(), 2);
    assert_eq!(settled[1].0, StopReason::Error);
    assert!(settled[1].1 >= 5, "{settled:?}");
}

/// A provider whose first attempt at every call is billed and given up on, as
/// `llm::retry::Resilient` does after an overload: its request's billing hears of it first.
struct BilledFirst {
    inner: Rc<Scripted>,
}

#[async_trait(?Send)]
impl Provider for BilledFirst {
    fn model(&self) -> &ModelRef {
        self.inner.model()
    }

    async fn health_check(&self) -> Result<(), LlmError> {
        Ok(())
    }

    async fn stream(
        &self,
        request: &LlmRequest<'_>,
        on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
    ) -> Completion {
        let attempt = AssistantMessage {
            content: vec![],
            stop_reason: StopReason::Error,
            model: "model-1".into(),
            provider: "scripted".into(),
            usage: edge_agent::llm::Usage {
                input_tokens: 700,
                ..Default::default()
            },
            output: None,
        };
        let billing = request.billing.expect("a turn's calls carry their billing");
        if let Err(stop) = billing.given_up(&attempt).await {
            return Completion {
                message: AssistantMessage {
                    usage: Default::default(),
                    ..attempt.clone()
                },
                error: Some(stop),
                given_up: vec![attempt],
            };
        }
        let mut completion = self.inner.stream(request, on_event).await;
        completion.given_up = vec![attempt];
        completion
    }
}

/// Records what a budget would be told: attempts given up on, and settlements.
struct Told {
    provider: Rc<BilledFirst>,
    told: RefCell<Vec<String>>,
    /// Refuses the attempts after this many.
    covers: usize,
}

#[async_trait(?Send)]
impl ProviderResolver for Told {
    async fn resolve(&self, call: CallSize<'_>) -> Result<Resolved, LlmError> {
        Ok(Resolved {
            provider: self.provider.clone(),
            max_tokens: call.max_tokens,
        })
    }

    async fn settle(&self, answer: &AssistantMessage) {
        self.told
            .borrow_mut()
            .push(format!("settle {}", answer.usage.input_tokens));
    }

    async fn given_up(&self, attempt: &AssistantMessage) -> Result<(), LlmError> {
        let mut told = self.told.borrow_mut();
        told.push(format!("given up {}", attempt.usage.input_tokens));
        if told.iter().filter(|t| t.starts_with("given up")).count() > self.covers {
            return Err(LlmError::BudgetExceeded("spent".into()));
        }
        Ok(())
    }
}

/// Issue 56: the ledger sees each paid attempt as it is given up on.
struct Ledger(RefCell<Vec<String>>);

#[async_trait(?Send)]
impl TurnHooks for Ledger {
    async fn on_message(&self, message: &AgentMessage) -> Result<(), HookError> {
        self.0.borrow_mut().push(message.kind().to_string());
        Ok(())
    }

    async fn on_unstored_call(
        &self,
        _: &ModelRef,
        usage: &edge_agent::llm::Usage,
    ) -> Result<(), HookError> {
        self.0
            .borrow_mut()
            .push(format!("ledger {}", usage.input_tokens));
        Ok(())
    }
}

#[test]
fn an_attempt_given_up_on_is_charged_and_ledgered_as_it_happens_and_never_settled_twice() {
    let run = |covers: usize| {
        let told = Told {
            provider: Rc::new(BilledFirst {
                inner: Scripted::new(vec![text("Done.")]),
            }),
            told: RefCell::default(),
            covers,
        };
        let ledger = Ledger(RefCell::default());
        let mut state = AgentState::new(None, vec![AgentMessage::user_text("hi")]);
        let outcome = futures::executor::block_on(run_agent_turn(
            &told,
            &mut state,
            &ToolRegistry::new(),
            None,
            &ledger,
            &mut |_| {},
        ));
        (
            outcome,
            told.told.into_inner(),
            ledger.0.into_inner(),
            state,
        )
    };
    // Covered: charged, ledgered before the answer is stored, settled once with the answer.
    let (outcome, told, ledger, state) = run(1);
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        told,
        ["given up 700", "settle 10"],
        "the answer's own prompt only"
    );
    assert_eq!(ledger, ["ledger 700", "assistant"]);
    assert_eq!(state.total_usage.input_tokens, 710);
    // Not covered: the call ends with the budget's error, the attempt still in the ledger.
    let (outcome, told, ledger, _) = run(0);
    assert!(
        matches!(&outcome, TurnOutcome::Failed { message, is_retryable: false } if message.contains("spent")),
        "{outcome:?}"
    );
    assert_eq!(told.len(), 2, "{told:?}");
    assert!(
        told[1].starts_with("settle") && told[1] != "settle 700",
        "{told:?}"
    );
    assert_eq!(ledger, ["ledger 700"]);
}
