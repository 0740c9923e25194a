//! Pausing and resuming: client tools and approvals. A paused turn's history ends with calls
//! that have no result; the next run takes the caller's answers for them before calling the
//! model again.

mod support;

use std::rc::Rc;

use edge_agent::agent::{
    AgentMessage, AgentState, Approval, ToolAnswers, ToolRegistry, TurnOutcome, DENIED,
};
use edge_agent::llm::Message;
use serde_json::json;
use support::*;

fn registry() -> ToolRegistry {
    let mut tools = current_time_registry();
    tools.require_approval("current_time");
    tools.merge_client_tools([tool_def("pick_color")]);
    tools
}

fn run(
    provider: &Rc<Scripted>,
    messages: Vec<AgentMessage>,
    answers: ToolAnswers,
) -> (TurnOutcome, Vec<String>, AgentState) {
    let mut state = AgentState::new(None, messages);
    state.answers = answers;
    run_turn(
        &Resolver(provider.clone()),
        &registry(),
        &Recorder::default(),
        state,
    )
}

fn approval(id: &str, approved: bool, reason: Option<&str>) -> ToolAnswers {
    let mut answers = ToolAnswers::default();
    answers.approvals.insert(
        id.into(),
        Approval {
            approved,
            reason: reason.map(Into::into),
        },
    );
    answers
}

fn paused_for_approval(provider: &Rc<Scripted>) -> Vec<AgentMessage> {
    let (outcome, events, state) = run(
        provider,
        vec![AgentMessage::user_text("what time is it?")],
        ToolAnswers::default(),
    );
    let TurnOutcome::AwaitingApproval(calls) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(calls.len(), 1);
    assert!(events.contains(&"approval c1".to_string()), "{events:?}");
    assert!(
        !events.iter().any(|e| e.starts_with("tool ")),
        "nothing ran before approval"
    );
    assert_eq!(kinds(&state), ["user", "assistant"]);
    state.messages
}

#[test]
fn an_approved_call_runs_on_resume_and_the_model_continues() {
    let provider = Scripted::new(vec![
        calls(vec![("c1", "current_time", json!({}))]),
        text("It is noon."),
    ]);
    let history = paused_for_approval(&provider);
    let (outcome, events, state) = run(&provider, history, approval("c1", true, None));
    assert_eq!(outcome, TurnOutcome::Completed);
    assert!(events.contains(&"tool current_time error=false".to_string()));
    assert_eq!(
        kinds(&state),
        ["user", "assistant", "tool_result", "assistant"]
    );
    assert_eq!(provider.seen.borrow().len(), 2);
}

#[test]
fn a_denied_call_records_the_denial_for_the_model_and_never_runs() {
    let provider = Scripted::new(vec![
        calls(vec![("c1", "current_time", json!({}))]),
        text("Understood, I won't check."),
    ]);
    let history = paused_for_approval(&provider);
    let (outcome, events, state) = run(&provider, history, approval("c1", false, Some("not now")));
    assert_eq!(outcome, TurnOutcome::Completed);
    assert!(
        events.contains(&"denied c1 Some(\"not now\")".to_string()),
        "{events:?}"
    );
    assert!(!events.iter().any(|e| e.starts_with("tool current_time")));
    let AgentMessage::ToolResult(r) = &state.messages[2] else {
        panic!()
    };
    assert_eq!(
        (r.is_error, r.content.as_str()),
        (true, format!("{DENIED}: not now").as_str())
    );
    let seen = &provider.seen.borrow()[1];
    assert!(matches!(seen.last(), Some(Message::ToolResult(t)) if t.content.starts_with(DENIED)));
}

#[test]
fn a_client_tool_and_a_server_tool_in_one_answer() {
    let provider = Scripted::new(vec![
        calls(vec![
            ("s1", "current_time", json!({})),
            ("k1", "pick_color", json!({})),
        ]),
        text("Blue at noon."),
    ]);
    // Approve the server call up front, so only the client tool pauses the turn.
    let (outcome, events, state) = run(
        &provider,
        vec![AgentMessage::user_text("pick")],
        approval("s1", true, None),
    );
    let TurnOutcome::AwaitingToolResults(calls) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["k1"]
    );
    assert!(events.contains(&"tool current_time error=false".to_string()));
    assert_eq!(kinds(&state), ["user", "assistant", "tool_result"]);

    // Resumed without the result: it pauses again and the model is not called.
    let (outcome, _, again) = run(&provider, state.messages.clone(), ToolAnswers::default());
    assert!(matches!(outcome, TurnOutcome::AwaitingToolResults(_)));
    assert_eq!(again.messages.len(), 3);
    assert_eq!(provider.seen.borrow().len(), 1);

    // Resumed with the client's result: both results reach the model.
    let mut answers = ToolAnswers::default();
    answers.results.insert("k1".into(), ("blue".into(), false));
    let (outcome, _, state) = run(&provider, state.messages, answers);
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        kinds(&state),
        [
            "user",
            "assistant",
            "tool_result",
            "tool_result",
            "assistant"
        ]
    );
    let seen = &provider.seen.borrow()[1];
    let results: Vec<(&str, &str)> = seen
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult(r) => Some((r.tool_call_id.as_str(), r.content.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(results[1], ("k1", "blue"));
    assert_eq!(results[0].0, "s1");
}

#[test]
fn a_new_user_message_abandons_the_pending_calls() {
    let provider = Scripted::new(vec![
        calls(vec![("k1", "pick_color", json!({}))]),
        text("Forget the color then."),
    ]);
    let (_, _, state) = run(
        &provider,
        vec![AgentMessage::user_text("pick")],
        ToolAnswers::default(),
    );
    let mut history = state.messages;
    history.push(AgentMessage::user_text("never mind"));
    let (outcome, _, _) = run(&provider, history, ToolAnswers::default());
    assert_eq!(outcome, TurnOutcome::Completed);
    // The model was not left with an unanswered call.
    let seen = &provider.seen.borrow()[1];
    assert!(matches!(&seen[2], Message::ToolResult(r) if r.tool_call_id == "k1" && r.is_error));
}

#[test]
fn calls_in_an_answer_that_failed_wait_for_nothing_and_never_run() {
    use edge_agent::agent::pending_calls;
    use edge_agent::llm::{AssistantMessage, ContentBlock, StopReason, ToolCall, Usage};
    let answer = |stop_reason| {
        AgentMessage::Assistant(AssistantMessage {
            content: vec![ContentBlock::ToolUse(ToolCall {
                id: "half".into(),
                name: "pick_color".into(),
                input: json!({"palette": "wa"}),
                signature: None,
            })],
            stop_reason,
            model: "m".into(),
            provider: "p".into(),
            usage: Usage::default(),
            output: None,
        })
    };
    for failed in [
        StopReason::Error,
        StopReason::Aborted,
        StopReason::Interrupted,
    ] {
        let history = vec![AgentMessage::user_text("pick"), answer(failed.clone())];
        assert!(pending_calls(&history).is_empty(), "{failed:?}");
    }
    let paused = vec![AgentMessage::user_text("pick"), answer(StopReason::ToolUse)];
    assert_eq!(pending_calls(&paused).len(), 1);
}
