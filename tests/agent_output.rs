//! Typed answers through the agent loop: the form each call asks in, the answer shown as it
//! forms and kept on its message, the repair call, `on_invalid`, the answer tool that never
//! runs, and the extra step when the steps run out on a tool call.

mod support;

use support::*;

use std::rc::Rc;

use edge_agent::agent::output::OutputSpec;
use edge_agent::agent::{AgentMessage, AgentState, ToolRegistry, TurnOutcome};
use edge_agent::llm::{ContentBlock, Message};
use serde_json::{json, Value};

fn city(extra: Value) -> Rc<OutputSpec> {
    let mut output = json!({
        "type": "object",
        "schema": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    });
    if let (Some(o), Some(extra)) = (output.as_object_mut(), extra.as_object()) {
        o.extend(extra.clone());
    }
    Rc::new(OutputSpec::parse(&output).unwrap())
}

fn run_typed(
    provider: &Rc<Scripted>,
    tools: &ToolRegistry,
    hooks: &Recorder,
    spec: Rc<OutputSpec>,
    max_llm_calls: u32,
) -> (TurnOutcome, Vec<String>, AgentState) {
    let mut state = AgentState::new(None, vec![AgentMessage::user_text("where?")]);
    state.output = Some(spec);
    state.max_llm_calls = max_llm_calls;
    run_turn(&Resolver(provider.clone()), tools, hooks, state)
}

/// The typed answer kept on the turn's last answer.
fn kept(state: &AgentState) -> Value {
    match state.messages.last() {
        Some(AgentMessage::Assistant(a)) => a.output.clone().unwrap_or(Value::Null),
        other => panic!("the turn did not end on an answer: {other:?}"),
    }
}

fn outputs(events: &[String]) -> Vec<&str> {
    events
        .iter()
        .filter(|e| e.starts_with("output ") || e.starts_with("element "))
        .map(String::as_str)
        .collect()
}

#[test]
fn an_object_in_prose_and_a_fence_is_shown_forming_then_kept_complete() {
    let provider = Scripted::new(vec![text(
        "Here it is:\n```json\n{\"city\": \"Paris\"}\n```",
    )]);
    let hooks = Recorder::default();
    let (outcome, events, state) =
        run_typed(&provider, &ToolRegistry::new(), &hooks, city(json!({})), 5);
    assert_eq!(outcome, TurnOutcome::Completed);
    // An unknown provider takes the schema natively; nothing else is offered.
    assert_eq!(*provider.formats.borrow(), ["schema"]);
    assert_eq!(
        outputs(&events),
        [
            r#"output {"status":"streaming","partial":{"city":"Paris"}}"#,
            r#"output {"status":"complete","object":{"city":"Paris"}}"#,
        ]
    );
    assert_eq!(
        kept(&state),
        json!({"status": "complete", "object": {"city": "Paris"}})
    );
    // The model's words are kept as it wrote them: what it reads of its answer later.
    let AgentMessage::Assistant(answer) = &state.messages[1] else {
        panic!()
    };
    assert!(answer.text().starts_with("Here it is"));
}

#[test]
fn an_invalid_answer_is_repaired_by_one_more_call_told_what_was_wrong() {
    let provider = Scripted::new(vec![text(r#"{"city": 3}"#), text(r#"{"city": "Lyon"}"#)]);
    let hooks = Recorder::default();
    let (outcome, _, state) =
        run_typed(&provider, &ToolRegistry::new(), &hooks, city(json!({})), 5);
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        kept(&state),
        json!({"status": "complete", "object": {"city": "Lyon"}})
    );
    // The repair call saw the invalid answer and what was wrong with it, by pointer.
    let seen = provider.seen.borrow();
    assert_eq!(seen.len(), 2);
    let Some(Message::User { content }) = seen[1].last() else {
        panic!("no repair note: {:?}", seen[1]);
    };
    let ContentBlock::Text { text: note } = &content[0] else {
        panic!()
    };
    assert!(note.contains("/city"), "{note}");
    assert!(matches!(seen[1][seen[1].len() - 2], Message::Assistant(_)));
    // Only the valid answer is kept; the invalid one was paid for all the same.
    assert_eq!(kinds(&state), ["user", "assistant"]);
    assert_eq!(*hooks.unstored.borrow(), [5]);
}

#[test]
fn on_invalid_error_keeps_the_raw_answer_and_fallback_the_fallback() {
    let provider = Scripted::new(vec![text("no idea")]);
    let (outcome, events, state) = run_typed(
        &provider,
        &ToolRegistry::new(),
        &Recorder::default(),
        city(json!({"on_invalid": "error"})),
        5,
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    let end = kept(&state);
    assert_eq!(end["status"], "error");
    assert_eq!(end["error"]["type"], "no_object_generated");
    assert_eq!(end["raw"], "no idea");
    assert_eq!(provider.seen.borrow().len(), 1);
    assert!(outputs(&events)[0].contains("\"error\""));

    // A repair that fails again gives up too.
    let provider = Scripted::new(vec![text(r#"{"town": "x"}"#), text(r#"{"town": "y"}"#)]);
    let (_, _, state) = run_typed(
        &provider,
        &ToolRegistry::new(),
        &Recorder::default(),
        city(json!({})),
        5,
    );
    assert_eq!(kept(&state)["status"], "error");
    assert!(kept(&state)["error"]["message"]
        .as_str()
        .unwrap()
        .contains("city"));
    assert_eq!(provider.seen.borrow().len(), 2);

    let provider = Scripted::new(vec![text("[]")]);
    let (_, _, state) = run_typed(
        &provider,
        &ToolRegistry::new(),
        &Recorder::default(),
        city(json!({"on_invalid": "fallback", "fallback": {"city": "unknown"}})),
        5,
    );
    assert_eq!(kept(&state)["object"], json!({"city": "unknown"}));
    assert_eq!(kept(&state)["fallback"], true);
}

#[test]
fn with_tools_on_gemini_the_answer_is_a_tool_that_never_runs() {
    let provider = Scripted::of(
        "gemini:gemini-2.5-flash",
        vec![
            calls(vec![("c1", "current_time", json!({}))]),
            calls(vec![("c2", "answer", json!({"city": "Rome"}))]),
        ],
    );
    let hooks = Recorder::default();
    let (outcome, events, state) = run_typed(
        &provider,
        &current_time_registry(),
        &hooks,
        city(json!({})),
        5,
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    // Offered beside the tools, not forced (the model could call no other tool).
    assert_eq!(
        *provider.offered.borrow(),
        [
            vec!["current_time", "answer"],
            vec!["current_time", "answer"]
        ]
    );
    assert_eq!(
        *provider.formats.borrow(),
        ["offered answer", "offered answer"]
    );
    let systems = provider.systems.borrow();
    assert!(systems[0].as_deref().unwrap().contains("`answer` tool"));
    assert!(!events.iter().any(|e| e.starts_with("tool answer")));
    // The answer's call became its text: nothing waits for a result.
    let AgentMessage::Assistant(last) = state.messages.last().unwrap() else {
        panic!()
    };
    assert_eq!(last.tool_calls().count(), 0);
    assert_eq!(last.text(), r#"{"city":"Rome"}"#);
    assert_eq!(kept(&state)["object"], json!({"city": "Rome"}));
    assert_eq!(
        kinds(&state),
        ["user", "assistant", "tool_result", "assistant"]
    );
}

#[test]
fn steps_that_run_out_on_a_tool_call_get_one_more_without_tools() {
    let provider = Scripted::of(
        "workers-ai:@cf/meta/llama",
        vec![
            calls(vec![("c1", "current_time", json!({}))]),
            calls(vec![("c2", "answer", json!({"city": "Oslo"}))]),
        ],
    );
    let (outcome, _, state) = run_typed(
        &provider,
        &current_time_registry(),
        &Recorder::default(),
        city(json!({})),
        1,
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    // The extra step offers the answer tool alone, and forces it.
    assert_eq!(provider.offered.borrow()[1], ["answer"]);
    assert_eq!(provider.formats.borrow()[1], "tool answer");
    assert_eq!(kept(&state)["object"], json!({"city": "Oslo"}));

    // Without a typed answer the limit stops the turn as before.
    let provider = Scripted::new(vec![calls(vec![("c1", "current_time", json!({}))])]);
    let mut state = AgentState::new(None, vec![AgentMessage::user_text("where?")]);
    state.max_llm_calls = 1;
    let (outcome, _, _) = run_turn(
        &Resolver(provider.clone()),
        &current_time_registry(),
        &Recorder::default(),
        state,
    );
    assert!(matches!(outcome, TurnOutcome::LimitReached(_)));
}

#[test]
fn an_array_shows_each_valid_element_once_and_keeps_the_elements() {
    let spec = Rc::new(
        OutputSpec::parse(&json!({
            "type": "array",
            "schema": {"type": "integer"},
            "on_invalid": "error",
        }))
        .unwrap(),
    );
    let provider = Scripted::new(vec![text(r#"{"elements": [1, 2, 3]}"#)]);
    let (_, events, state) = run_typed(
        &provider,
        &ToolRegistry::new(),
        &Recorder::default(),
        spec,
        5,
    );
    assert_eq!(
        outputs(&events),
        [
            "element 0 1",
            "element 1 2",
            "element 2 3",
            r#"output {"status":"streaming","partial":[1,2,3]}"#,
            r#"output {"status":"complete","object":[1,2,3]}"#,
        ]
    );
    assert_eq!(kept(&state)["object"], json!([1, 2, 3]));
}

#[test]
fn openai_is_asked_in_the_strict_form_and_its_nulls_are_read_back() {
    let spec = Rc::new(
        OutputSpec::parse(&json!({
            "type": "object",
            "schema": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                "required": ["city"],
            },
        }))
        .unwrap(),
    );
    let provider = Scripted::of(
        "openai:gpt-5-mini",
        vec![text(r#"{"city": "Nice", "zip": null}"#)],
    );
    let (_, _, state) = run_typed(
        &provider,
        &ToolRegistry::new(),
        &Recorder::default(),
        spec,
        5,
    );
    assert_eq!(*provider.formats.borrow(), ["strict schema"]);
    assert_eq!(kept(&state)["object"], json!({"city": "Nice"}));
}

#[test]
fn an_answer_cut_off_at_the_token_limit_is_repaired_not_closed() {
    let mut cut = text(r#"{"city": "Wellin"#);
    cut.cut_off = true;
    let provider = Scripted::new(vec![cut, text(r#"{"city": "Wellington"}"#)]);
    let (_, _, state) = run_typed(
        &provider,
        &ToolRegistry::new(),
        &Recorder::default(),
        city(json!({})),
        5,
    );
    // Closed, `{"city": "Wellin"}` would have passed as a whole answer.
    assert_eq!(provider.seen.borrow().len(), 2);
    assert_eq!(kept(&state)["object"], json!({"city": "Wellington"}));
}

#[test]
fn with_the_tools_off_other_calls_never_run_and_the_answer_tool_is_read_in_any_form() {
    // The extra step past the limit has no tools; a model that calls one anyway is not obeyed.
    let provider = Scripted::new(vec![
        calls(vec![("c1", "current_time", json!({}))]),
        Answer {
            text: r#"{"city": "Bern"}"#,
            calls: vec![("c2", "current_time", json!({}))],
            error: None,
            cut_off: false,
        },
    ]);
    let (outcome, events, state) = run_typed(
        &provider,
        &current_time_registry(),
        &Recorder::default(),
        city(json!({})),
        1,
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        events.iter().filter(|e| e.starts_with("tool ")).count(),
        1,
        "only the first step's call ran: {events:?}"
    );
    assert_eq!(kept(&state)["object"], json!({"city": "Bern"}));
    let AgentMessage::Assistant(last) = state.messages.last().unwrap() else {
        panic!()
    };
    assert_eq!(last.tool_calls().count(), 0);

    // Asked natively, a model (a fallback asked for the tool) that calls the answer tool gives
    // its answer so.
    let provider = Scripted::new(vec![calls(vec![("c3", "answer", json!({"city": "Riga"}))])]);
    let (_, _, state) = run_typed(
        &provider,
        &ToolRegistry::new(),
        &Recorder::default(),
        city(json!({})),
        5,
    );
    assert_eq!(*provider.formats.borrow(), ["schema"]);
    assert_eq!(kept(&state)["object"], json!({"city": "Riga"}));
}

#[test]
fn a_tool_named_like_the_answer_fails_the_turn_before_any_call() {
    let provider = Scripted::new(vec![]);
    let (outcome, _, _) = run_typed(
        &provider,
        &current_time_registry(),
        &Recorder::default(),
        city(json!({"name": "current_time"})),
        5,
    );
    let TurnOutcome::Failed { message, .. } = outcome else {
        panic!("{outcome:?}")
    };
    assert!(message.contains("`current_time`"), "{message}");
    assert!(provider.seen.borrow().is_empty());
}
