//! Compaction in the loop: older exchanges summarised by a (cheaper) provider, tool calls never
//! separated from their results, the latest user message kept verbatim, only what a summary
//! covers replaced, and a failed summary hiding old exchanges from that call alone.

mod support;

use std::cell::RefCell;
use std::rc::Rc;

use async_trait::async_trait;
use edge_agent::agent::{
    run_agent_turn, AgentMessage, AgentState, AttemptLedger, Compaction, Compactor, HookError,
    ToolRegistry, TurnHooks, TurnOutcome,
};
use edge_agent::llm::{
    AssistantMessage, ContentBlock, LlmError, Message, ModelRef, StopReason, ToolCall, ToolResult,
    Usage,
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
        output: None,
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
        provider: None,
    })
}

#[derive(Default)]
struct Persist {
    compactions: RefCell<Vec<Compaction>>,
    summary_calls: RefCell<Vec<(String, Usage)>>,
}

#[async_trait(?Send)]
impl TurnHooks for Persist {
    async fn on_unstored_call(&self, model: &ModelRef, usage: &Usage) -> Result<(), HookError> {
        self.summary_calls
            .borrow_mut()
            .push((model.to_string(), *usage));
        Ok(())
    }

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
    // The summary request is a call like any: the application is told what it used.
    assert_eq!(hooks.summary_calls.borrow().len(), 1);
    assert_eq!(hooks.summary_calls.borrow()[0].0, "scripted:model-1");
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
        provider: None,
    };
    struct NoLedger;
    #[async_trait(?Send)]
    impl AttemptLedger for NoLedger {
        async fn record(&self, _: &AssistantMessage) {}
    }
    let compaction = futures::executor::block_on(c.compact(&h, &NoLedger)).unwrap();
    let end = compaction.replaces.end;
    assert!(matches!(h[end], AgentMessage::User { .. }), "cut at {end}");
    assert!(end == 4 || end == 8 || end == 12, "cut at {end}");
}

#[test]
fn a_failing_summariser_hides_old_exchanges_from_that_call_only_and_marks_nothing() {
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
    // Nothing is replaced: the history keeps every exchange, and the application is told of no
    // compaction, so it marks no row.
    assert!(hooks.compactions.borrow().is_empty());
    assert_eq!(state.messages.len(), 10);
    // The failed summary request still cost what it used: the application is told, to charge it.
    let calls = hooks.summary_calls.borrow();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].1.input_tokens, 10, "{calls:?}");
}

#[test]
fn only_what_the_summary_covers_is_replaced_and_the_rest_waits_for_the_next_one() {
    // Old exchanges too long for one summary request: the oldest that fit are summarised (the
    // earlier summary first among them), the others stay in the history, out of this call.
    let summariser = Scripted::new(vec![text("Notes on Q1 and Q2.")]);
    let model = Scripted::new(vec![text("Still noon.")]);
    let mut h = vec![AgentMessage::Summary {
        text: "Earlier notes.".into(),
    }];
    for (i, q) in ["Q1", "Q2", "Q3", "Q4"].iter().enumerate() {
        h.extend(exchange(q, &format!("t{i}")));
    }
    h.push(AgentMessage::user_text("latest?"));
    let mut state = AgentState::new(None, h);
    state.compactor = Some(Rc::new(Compactor {
        summariser: Rc::new(Resolver(summariser.clone())),
        context_window: 900,
        threshold_ratio: 0.25,
        max_output_tokens: 4096,
        provider: None,
    }));
    let hooks = Persist::default();
    assert_eq!(run(&mut state, &model, &hooks), TurnOutcome::Completed);
    let compactions = hooks.compactions.borrow();
    let Compaction {
        replaces, hidden, ..
    } = &compactions[0];
    // The earlier summary and what fitted after it, whole exchanges.
    assert_eq!(replaces.start, 0);
    assert!(
        replaces.end > 1 && replaces.end < 17 && (replaces.end - 1) % 4 == 0,
        "{replaces:?}"
    );
    assert_eq!(hidden.start, replaces.end);
    let asked = &summariser.seen.borrow()[0];
    assert_eq!(
        asked[0],
        Message::user_text("Summary of the earlier conversation:\nEarlier notes.")
    );
    assert_eq!(
        asked.len(),
        replaces.end + 1,
        "what it covers, and the instruction"
    );
    // The model saw the new summary and the latest question; the uncovered exchanges are still
    // in the history, after the summary, for the next compaction.
    let seen = &model.seen.borrow()[0];
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(state.messages.len(), 1 + (17 - replaces.end) + 2);
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
