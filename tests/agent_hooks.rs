//! The hook failure rules of the seed design, one scenario each: `on_step_end` may stop the
//! loop and its failure aborts it; `on_message` failing is logged and the loop goes on;
//! `on_error` is told of LLM and resolver failures and its own failure is ignored.

mod support;

use std::cell::RefCell;
use std::rc::Rc;

use async_trait::async_trait;
use edge_agent::agent::{
    AgentMessage, AgentState, CallSize, HookError, NoHooks, ProviderResolver, Resolved,
    StepEndInfo, TurnHooks, TurnOutcome,
};
use edge_agent::llm::LlmError;
use serde_json::json;
use support::*;

#[derive(Clone, Copy, PartialEq)]
enum StepEnd {
    Continue,
    Stop,
    Fail,
}

struct Hooks {
    step_end: StepEnd,
    fail_on_message: bool,
    fail_on_error: bool,
    log: RefCell<Vec<String>>,
}

impl Hooks {
    fn new(step_end: StepEnd) -> Self {
        Self {
            step_end,
            fail_on_message: false,
            fail_on_error: false,
            log: RefCell::new(vec![]),
        }
    }

    fn log(&self) -> Vec<String> {
        self.log.borrow().clone()
    }
}

#[async_trait(?Send)]
impl TurnHooks for Hooks {
    async fn on_step_end(&self, info: StepEndInfo<'_>) -> Result<bool, HookError> {
        self.log.borrow_mut().push(format!(
            "step_end {} {}:{} in={} out={}",
            info.step, info.provider, info.model, info.usage.input_tokens, info.usage.output_tokens
        ));
        match self.step_end {
            StepEnd::Continue => Ok(true),
            StepEnd::Stop => Ok(false),
            StepEnd::Fail => Err(HookError("credits service down".into())),
        }
    }

    async fn on_message(&self, message: &AgentMessage) -> Result<(), HookError> {
        self.log
            .borrow_mut()
            .push(format!("message {}", message.kind()));
        if self.fail_on_message {
            return Err(HookError("D1 write failed".into()));
        }
        Ok(())
    }

    async fn on_error(&self, error: &str, is_retryable: bool) -> Result<(), HookError> {
        self.log
            .borrow_mut()
            .push(format!("error retryable={is_retryable} {error}"));
        if self.fail_on_error {
            return Err(HookError("alerting is down".into()));
        }
        Ok(())
    }

    fn warn(&self, message: &str) {
        self.log.borrow_mut().push(format!("warn {message}"));
    }
}

fn turn(provider: &Rc<Scripted>, hooks: &dyn TurnHooks) -> (TurnOutcome, Vec<String>, AgentState) {
    turn_with(&Resolver(provider.clone()), hooks)
}

fn turn_with(
    resolver: &dyn ProviderResolver,
    hooks: &dyn TurnHooks,
) -> (TurnOutcome, Vec<String>, AgentState) {
    run_turn(resolver, &current_time_registry(), hooks, asking("hi"))
}

fn overloaded() -> LlmError {
    LlmError::Overloaded {
        provider: "scripted".into(),
        message: "Overloaded".into(),
        retry_after_ms: None,
    }
}

#[test]
fn hook_1_on_step_end_true_lets_the_loop_run_tools_and_continue() {
    let provider = Scripted::new(vec![
        calls(vec![("c1", "current_time", json!({}))]),
        text("Noon."),
    ]);
    let hooks = Hooks::new(StepEnd::Continue);
    let (outcome, _, state) = turn(&provider, &hooks);
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(state.messages.len(), 4);
}

#[test]
fn hook_2_on_step_end_false_stops_before_the_tools_run() {
    let provider = Scripted::new(vec![calls(vec![("c1", "current_time", json!({}))])]);
    let hooks = Hooks::new(StepEnd::Stop);
    let (outcome, events, state) = turn(&provider, &hooks);
    assert_eq!(outcome, TurnOutcome::Stopped);
    assert!(!events.iter().any(|e| e.starts_with("tool ")), "{events:?}");
    assert!(events.last().unwrap().starts_with("done"));
    assert_eq!(kinds(&state), ["user", "assistant"]);
}

#[test]
fn hook_3_on_step_end_failing_aborts_with_an_error_event() {
    let provider = Scripted::new(vec![calls(vec![("c1", "current_time", json!({}))])]);
    let hooks = Hooks::new(StepEnd::Fail);
    let (outcome, events, state) = turn(&provider, &hooks);
    assert!(
        matches!(&outcome, TurnOutcome::Failed { message, is_retryable: false } if message.contains("credits service down"))
    );
    assert_eq!(
        events.last().unwrap(),
        "error on_step_end failed: credits service down"
    );
    assert!(!events.iter().any(|e| e.starts_with("tool ")));
    assert_eq!(
        kinds(&state),
        ["user", "assistant"],
        "the answer is kept, the tools are not run"
    );
}

#[test]
fn hook_4_on_step_end_learns_turn_usage_model_and_provider() {
    let provider = Scripted::new(vec![
        calls(vec![("c1", "current_time", json!({}))]),
        text("Noon."),
    ]);
    let hooks = Hooks::new(StepEnd::Continue);
    turn(&provider, &hooks);
    let ends: Vec<String> = hooks
        .log()
        .into_iter()
        .filter(|l| l.starts_with("step_end"))
        .collect();
    assert_eq!(
        ends,
        [
            "step_end 1 scripted:model-1 in=10 out=5",
            "step_end 2 scripted:model-1 in=10 out=5"
        ]
    );
}

#[test]
fn hook_5_on_message_sees_every_added_message_in_order_before_on_step_end() {
    let provider = Scripted::new(vec![
        calls(vec![("c1", "current_time", json!({}))]),
        text("Noon."),
    ]);
    let hooks = Hooks::new(StepEnd::Continue);
    turn(&provider, &hooks);
    let log: Vec<String> = hooks
        .log()
        .iter()
        .map(|l| l.split(' ').take(2).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        log,
        [
            "message assistant",
            "step_end 1",
            "message tool_result",
            "message assistant",
            "step_end 2"
        ]
    );
}

#[test]
fn hook_6_on_message_failing_is_logged_and_the_loop_goes_on() {
    let provider = Scripted::new(vec![
        calls(vec![("c1", "current_time", json!({}))]),
        text("Noon."),
    ]);
    let mut hooks = Hooks::new(StepEnd::Continue);
    hooks.fail_on_message = true;
    let (outcome, _, state) = turn(&provider, &hooks);
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        kinds(&state),
        ["user", "assistant", "tool_result", "assistant"],
        "messages stay in the state"
    );
    let warnings = hooks
        .log()
        .into_iter()
        .filter(|l| l.starts_with("warn"))
        .count();
    assert_eq!(warnings, 3);
}

#[test]
fn hook_7_on_error_hears_of_an_llm_failure_and_the_partial_answer_is_kept() {
    let mut answer = text("Partial");
    answer.error = Some(overloaded());
    let provider = Scripted::new(vec![answer]);
    let hooks = Hooks::new(StepEnd::Continue);
    let (outcome, events, state) = turn(&provider, &hooks);
    assert!(matches!(
        outcome,
        TurnOutcome::Failed {
            is_retryable: true,
            ..
        }
    ));
    assert!(hooks
        .log()
        .contains(&format!("error retryable=true {}", overloaded())));
    assert_eq!(events.last().unwrap(), &format!("error {}", overloaded()));
    assert_eq!(kinds(&state), ["user", "assistant"]);
    assert!(
        !hooks.log().iter().any(|l| l.starts_with("step_end")),
        "no turn end for a failed call"
    );
}

#[test]
fn hook_8_on_error_failing_does_not_hide_the_original_error() {
    let mut answer = text("");
    answer.error = Some(overloaded());
    let provider = Scripted::new(vec![answer]);
    let mut hooks = Hooks::new(StepEnd::Continue);
    hooks.fail_on_error = true;
    let (outcome, events, state) = turn(&provider, &hooks);
    assert!(
        matches!(&outcome, TurnOutcome::Failed { message, .. } if *message == overloaded().to_string())
    );
    assert_eq!(events.last().unwrap(), &format!("error {}", overloaded()));
    assert_eq!(
        kinds(&state),
        ["user"],
        "an empty failed answer is not stored"
    );
}

#[test]
fn hook_9_a_resolver_failure_reaches_on_error_and_ends_the_turn() {
    struct NoProvider;
    #[async_trait(?Send)]
    impl ProviderResolver for NoProvider {
        async fn resolve(&self, _: CallSize<'_>) -> Result<Resolved, LlmError> {
            Err(LlmError::Config("no credits left for any model".into()))
        }
    }
    let hooks = Hooks::new(StepEnd::Continue);
    let (outcome, events, _) = turn_with(&NoProvider, &hooks);
    assert!(matches!(
        outcome,
        TurnOutcome::Failed {
            is_retryable: false,
            ..
        }
    ));
    assert_eq!(
        hooks.log(),
        ["error retryable=false no credits left for any model"]
    );
    assert_eq!(events, ["error no credits left for any model"]);
}

#[test]
fn no_hooks_at_all_is_fine() {
    let provider = Scripted::new(vec![text("Hi.")]);
    let (outcome, _, _) = turn(&provider, &NoHooks);
    assert_eq!(outcome, TurnOutcome::Completed);
}

/// Numbers the system prompt by the LLM calls made so far.
struct CountingPrompt(std::cell::Cell<u32>);

#[async_trait(?Send)]
impl TurnHooks for CountingPrompt {
    async fn system_prompt(&self, base: Option<&str>) -> Option<String> {
        self.0.set(self.0.get() + 1);
        Some(format!("{} (call {})", base.unwrap_or(""), self.0.get()))
    }
}

#[test]
fn hook_10_the_system_prompt_is_rebuilt_before_every_llm_call() {
    let provider = Scripted::new(vec![
        calls(vec![("c1", "current_time", json!({}))]),
        text("noon"),
    ]);
    let mut state = asking("time?");
    state.system_prompt = Some("Be brief.".into());
    let hooks = CountingPrompt(std::cell::Cell::new(0));
    let (outcome, _, _) = run_turn(
        &Resolver(provider.clone()),
        &current_time_registry(),
        &hooks,
        state,
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        *provider.systems.borrow(),
        vec![
            Some("Be brief. (call 1)".to_string()),
            Some("Be brief. (call 2)".to_string())
        ]
    );
    // Without the hook the conversation's own prompt goes as it is.
    let provider = Scripted::new(vec![text("hi")]);
    let mut state = asking("hello");
    state.system_prompt = Some("Be brief.".into());
    run_turn(
        &Resolver(provider.clone()),
        &current_time_registry(),
        &NoHooks,
        state,
    );
    assert_eq!(
        *provider.systems.borrow(),
        vec![Some("Be brief.".to_string())]
    );
}
