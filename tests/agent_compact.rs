//! Compaction in the loop: older exchanges summarised by a (cheaper) provider, tool calls never
//! separated from their results, the latest user message kept verbatim, and a drop fallback.

mod support;

use std::cell::RefCell;
use std::rc::Rc;

use async_trait::async_trait;
use edge_agent::agent::{
    run_agent_turn, AgentMessage, AgentState, Compaction, Compactor, HookError, ToolRegistry,
    TurnHooks, TurnOutcome,
};
use edge_agent::llm::{
    AssistantMessage, ContentBlock, LlmError, Message, StopReason, ToolCall, ToolResult, Usage,
};
use serde_json::json;
use support::*;

fn long(tag: &str) -> String {
    format!("{tag} {}", "lorem ipsum ".repeat(70)) // about 210 tokens
}

fn answer(content: Vec<ContentBlock>) -> AgentMessage {
    AgentMessage::Assistant(AssistantMessage {
        content,
        stop_reason: StopReason::EndTurn,
        model: "model-1".into(),
        provider: "scripted".into(),
        usage: Usage::default(),
    })
}

fn exchange(question: &str, id: &str) -> Vec<AgentMessage> {
    vec![
        AgentMessage::user_text(long(question)),
        answer(vec![ContentBlock::ToolUse(ToolCall {
            id: id.into(),
            name: "current_time".into(),
            input: json!({}),
            signature: None,
        })]),
        AgentMessage::ToolResult(ToolResult {
            tool_call_id: id.into(),
            tool_name: "current_time".into(),
            content: "noon".into(),
            is_error: false,
        }),
        answer(vec![ContentBlock::Text {
            text: format!("answer to {question}"),
        }]),
    ]
}

/// Two long exchanges, then the latest question.
fn history() -> Vec<AgentMessage> {
    let mut h = exchange("Q1", "t1");
    h.extend(exchange("Q2", "t2"));
    h.push(AgentMessage::user_text("Q3: and now?"));
    h
}

fn compactor(summariser: Rc<Scripted>) -> Rc<Compactor> {
    Rc::new(Compactor {
        summariser: Rc::new(Resolver(summariser)),
        // Compacts past 250 tokens; the summary request (old exchanges plus a quarter of the
        // window to answer in) still fits the window.
        context_window: 1000,
        threshold_ratio: 0.25,
        max_output_tokens: 4096,
    })
}

#[derive(Default)]
struct Persist {
    compactions: RefCell<Vec<Compaction>>,
}

#[async_trait(?Send)]
impl TurnHooks for Persist {
    async fn on_compaction(&self, compaction: &Compaction) -> Result<(), HookError> {
        self.compactions.borrow_mut().push(compaction.clone());
        Ok(())
    }
}

fn run(state: &mut AgentState, provider: &Rc<Scripted>, hooks: &Persist) -> TurnOutcome {
    futures::executor::block_on(run_agent_turn(
        &Resolver(provider.clone()),
        state,
        &ToolRegistry::new(),
        None,
        hooks,
        &mut |_| {},
    ))
}

#[test]
fn old_exchanges_become_a_summary_and_the_latest_question_stays_verbatim() {
    let summariser = Scripted::new(vec![text(
        "User asked Q1 and Q2 about the time; it was noon both times.",
    )]);
    let model = Scripted::new(vec![text("Still noon.")]);
    let mut state = AgentState::new(None, history());
    state.compactor = Some(compactor(summariser.clone()));
    let hooks = Persist::default();
    assert_eq!(run(&mut state, &model, &hooks), TurnOutcome::Completed);

    // The summariser saw exactly the replaced exchanges, with every call paired to its result.
    let asked = &summariser.seen.borrow()[0];
    assert_eq!(asked.len(), 9, "8 old messages and the instruction");
    assert!(matches!(&asked[2], Message::ToolResult(r) if r.tool_call_id == "t1"));
    assert!(matches!(&asked[6], Message::ToolResult(r) if r.tool_call_id == "t2"));

    // The model saw the summary, then the latest question as it was written.
    let seen = &model.seen.borrow()[0];
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], Message::user_text("Summary of the earlier conversation:\nUser asked Q1 and Q2 about the time; it was noon both times."));
    assert_eq!(seen[1], Message::user_text("Q3: and now?"));

    assert_eq!(kinds(&state), ["summary", "user", "assistant"]);
    let compactions = hooks.compactions.borrow();
    assert_eq!(compactions.len(), 1);
    assert_eq!(
        compactions[0].replaces,
        0..8,
        "the application is told what to replace"
    );
}

#[test]
fn cuts_never_separate_a_tool_call_from_its_result() {
    // Shrink the window so the cut must fall early; it still lands on an exchange start.
    let summariser = Scripted::new(vec![text("S")]);
    let mut h = exchange("Q1", "t1");
    h.extend(exchange("Q2", "t2"));
    h.extend(exchange("Q3", "t3"));
    h.push(AgentMessage::user_text("latest"));
    let c = Compactor {
        summariser: Rc::new(Resolver(summariser)),
        context_window: 1200,
        max_output_tokens: 4096,
        threshold_ratio: 0.5,
    };
    let compaction = futures::executor::block_on(c.compact(&h)).unwrap();
    let end = compaction.replaces.end;
    assert!(matches!(h[end], AgentMessage::User { .. }), "cut at {end}");
    assert!(end == 4 || end == 8 || end == 12, "cut at {end}");
}

#[test]
fn a_failing_summariser_falls_back_to_dropping_the_oldest_exchanges() {
    let mut broken = text("");
    broken.error = Some(LlmError::Overloaded {
        provider: "scripted".into(),
        message: "Overloaded".into(),
        retry_after_ms: None,
    });
    let summariser = Scripted::new(vec![broken]);
    let model = Scripted::new(vec![text("Noon.")]);
    let mut state = AgentState::new(None, history());
    state.compactor = Some(compactor(summariser));
    let hooks = Persist::default();
    assert_eq!(run(&mut state, &model, &hooks), TurnOutcome::Completed);
    assert_eq!(
        model.seen.borrow()[0],
        vec![Message::user_text("Q3: and now?")]
    );
    assert_eq!(
        hooks.compactions.borrow()[0],
        Compaction {
            replaces: 0..8,
            summary: None
        }
    );
}

#[test]
fn a_short_history_is_left_alone() {
    let summariser = Scripted::new(vec![]);
    let model = Scripted::new(vec![text("Hi.")]);
    let mut state = AgentState::new(None, vec![AgentMessage::user_text("hi")]);
    state.compactor = Some(compactor(summariser.clone()));
    let hooks = Persist::default();
    run(&mut state, &model, &hooks);
    assert!(summariser.seen.borrow().is_empty());
    assert!(hooks.compactions.borrow().is_empty());
}
