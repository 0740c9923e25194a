//! Agent-loop scenarios with a scripted provider, run natively on a single-threaded executor
//! (the futures are not `Send`, as on wasm).

mod support;

use support::*;

use std::rc::Rc;

use edge_agent::agent::{
    run_agent_turn, AgentMessage, AgentState, LocalQueues, ToolRegistry, TurnOutcome,
    SKIPPED_FOR_STEERING,
};
use edge_agent::llm::Message;
use serde_json::{json, Value};

/// Runs a turn that starts from "hi" with a system prompt.
fn run(
    provider: &Rc<Scripted>,
    tools: &ToolRegistry,
    hooks: &Recorder,
    queues: Rc<LocalQueues>,
) -> (TurnOutcome, Vec<String>, AgentState) {
    let mut state = AgentState::new(Some("be brief".into()), vec![AgentMessage::user_text("hi")]);
    state.queues = queues;
    run_turn(&Resolver(provider.clone()), tools, hooks, state)
}

#[test]
fn text_only_turn() {
    let provider = Scripted::new(vec![text("Hello!")]);
    let hooks = Recorder::default();
    let (outcome, events, state) = run(&provider, &ToolRegistry::new(), &hooks, Default::default());
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        events,
        [
            "step-start 1",
            "llm",
            "text Hello!",
            "llm",
            "llm",
            "step-end 1",
            "done \"Hello!\" turns=1 in=10"
        ]
    );
    assert_eq!(kinds(&state), ["user", "assistant"]);
    assert_eq!(*hooks.stored.borrow(), ["assistant"]);
    assert_eq!(provider.seen.borrow()[0], vec![Message::user_text("hi")]);
}

#[test]
fn tool_round_trip_runs_current_time_and_calls_the_llm_again() {
    let provider = Scripted::new(vec![
        calls(vec![("c1", "current_time", json!({}))]),
        text("It is noon."),
    ]);
    let hooks = Recorder::default();
    let (outcome, events, state) = run(
        &provider,
        &current_time_registry(),
        &hooks,
        Default::default(),
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    assert!(
        events.contains(&"tool current_time error=false".to_string()),
        "{events:?}"
    );
    assert_eq!(events.last().unwrap(), "done \"It is noon.\" turns=2 in=20");
    assert_eq!(
        kinds(&state),
        ["user", "assistant", "tool_result", "assistant"]
    );
    assert_eq!(
        *hooks.stored.borrow(),
        ["assistant", "tool_result", "assistant"]
    );
    // The second call saw the tool's real output.
    let second = &provider.seen.borrow()[1];
    let Message::ToolResult(result) = &second[2] else {
        panic!("{second:?}")
    };
    assert_eq!(result.tool_call_id, "c1");
    assert!(!result.is_error);
    let output: Value = serde_json::from_str(&result.content).unwrap();
    assert!(output["utc"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn steering_between_two_tool_calls_skips_the_rest_and_records_skipped_results() {
    let queues = Rc::new(LocalQueues::default());
    let mut tools = current_time_registry();
    tools.register_server_tool(Box::new(SteersWhileRunning {
        def: tool_def("fetch_weather"),
        queues: queues.clone(),
        message: "stop, use Celsius",
        output: "first tool ran",
    }));
    let provider = Scripted::new(vec![
        calls(vec![
            ("c1", "fetch_weather", json!({})),
            ("c2", "current_time", json!({})),
            ("c3", "current_time", json!({})),
        ]),
        text("OK, Celsius."),
    ]);
    let hooks = Recorder::default();
    let (outcome, events, state) = run(&provider, &tools, &hooks, queues);
    assert_eq!(outcome, TurnOutcome::Completed);
    assert!(events.contains(&"tool fetch_weather error=false".to_string()));
    assert!(
        !events.iter().any(|e| e.starts_with("tool current_time")),
        "skipped tools must not run: {events:?}"
    );
    assert!(
        events.contains(&"steering skipped=[current_time,current_time] messages=1".to_string()),
        "{events:?}"
    );
    assert_eq!(
        kinds(&state),
        [
            "user",
            "assistant",
            "tool_result",
            "tool_result",
            "tool_result",
            "user",
            "assistant"
        ]
    );
    // Every tool_use keeps a tool_result; the skipped ones say why.
    for (i, id) in [(3, "c2"), (4, "c3")] {
        let AgentMessage::ToolResult(r) = &state.messages[i] else {
            panic!()
        };
        assert_eq!(
            (r.tool_call_id.as_str(), r.content.as_str(), r.is_error),
            (id, SKIPPED_FOR_STEERING, true)
        );
    }
    // The next LLM call saw the steering message last.
    let second = &provider.seen.borrow()[1];
    assert_eq!(
        second.last().unwrap(),
        &Message::user_text("stop, use Celsius")
    );
    assert_eq!(
        hooks
            .stored
            .borrow()
            .iter()
            .filter(|k| *k == "user")
            .count(),
        1,
        "the injected message is persisted"
    );
}

#[test]
fn a_followup_waiting_at_the_end_starts_another_round() {
    let queues = Rc::new(LocalQueues::default());
    queues.enqueue_followup(AgentMessage::user_text("and tomorrow?"));
    let provider = Scripted::new(vec![text("Today is fine."), text("Tomorrow too.")]);
    let hooks = Recorder::default();
    let (outcome, events, state) = run(&provider, &ToolRegistry::new(), &hooks, queues);
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(kinds(&state), ["user", "assistant", "user", "assistant"]);
    assert!(events.contains(&"steering skipped=[] messages=1".to_string()));
    assert_eq!(
        events.last().unwrap(),
        "done \"Tomorrow too.\" turns=2 in=20"
    );
}

#[test]
fn on_message_failing_does_not_stop_the_loop() {
    let provider = Scripted::new(vec![
        calls(vec![("c1", "current_time", json!({}))]),
        text("Done."),
    ]);
    let hooks = Recorder {
        fail_on_message: true,
        ..Default::default()
    };
    let (outcome, events, state) = run(
        &provider,
        &current_time_registry(),
        &hooks,
        Default::default(),
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(events.last().unwrap(), "done \"Done.\" turns=2 in=20");
    assert_eq!(
        kinds(&state),
        ["user", "assistant", "tool_result", "assistant"]
    );
    let warnings = hooks.warnings.borrow();
    assert_eq!(warnings.len(), 3);
    assert!(warnings[0].contains("D1 is down"));
}

#[test]
fn unknown_tools_and_bad_arguments_become_error_results() {
    let provider = Scripted::new(vec![
        calls(vec![
            ("c1", "teleport", json!({})),
            ("c2", "current_time", json!("{\"broken")),
        ]),
        text("Sorry."),
    ]);
    let (outcome, events, state) = run(
        &provider,
        &current_time_registry(),
        &Recorder::default(),
        Default::default(),
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    assert!(events.contains(&"tool teleport error=true".to_string()));
    assert!(events.contains(&"tool current_time error=true".to_string()));
    let AgentMessage::ToolResult(r) = &state.messages[2] else {
        panic!()
    };
    assert_eq!(r.content, "unknown tool `teleport`");
    let AgentMessage::ToolResult(r) = &state.messages[3] else {
        panic!()
    };
    assert!(r.content.contains("not valid JSON"), "{}", r.content);
}

#[test]
fn max_llm_calls_stops_a_model_that_never_stops_calling_tools() {
    let provider = Scripted::new(
        (0..5)
            .map(|_| calls(vec![("c", "current_time", json!({}))]))
            .collect(),
    );
    let mut state = AgentState::new(None, vec![AgentMessage::user_text("loop")]);
    state.max_llm_calls = 3;
    let mut last = String::new();
    let outcome = futures::executor::block_on(run_agent_turn(
        &Resolver(provider.clone()),
        &mut state,
        &current_time_registry(),
        None,
        &Recorder::default(),
        &mut |e| last = describe(&e),
    ));
    assert!(matches!(&outcome, TurnOutcome::LimitReached(m) if m.contains("MAX_LLM_CALLS")));
    assert_eq!(provider.seen.borrow().len(), 3);
    assert!(last.contains("MAX_LLM_CALLS"), "{last}");
}

#[test]
fn client_tools_pause_the_turn_with_every_pending_call() {
    let mut tools = current_time_registry();
    tools.merge_client_tools([tool_def("pick_color")]);
    let provider = Scripted::new(vec![calls(vec![
        ("c1", "current_time", json!({})),
        ("c2", "pick_color", json!({})),
    ])]);
    let (outcome, events, state) = run(&provider, &tools, &Recorder::default(), Default::default());
    let TurnOutcome::AwaitingToolResults(pending) = outcome else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        pending.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["c2"]
    );
    assert_eq!(events.last().unwrap(), "client-tools 1");
    assert_eq!(kinds(&state), ["user", "assistant", "tool_result"]);
}

#[test]
fn generated_call_ids_are_unique_to_each_call_and_each_run() {
    // Two users' conversations of the same length, each calling a tool: the ids a provider
    // generates for id-less calls start with the call's `call_ids`, which must never repeat.
    let run_with = |nonce: &str| {
        let provider = Scripted::new(vec![
            calls(vec![("c1", "current_time", json!({}))]),
            text("It is noon."),
        ]);
        let mut state = AgentState::new(None, vec![AgentMessage::user_text("hi")]);
        state.call_id_nonce = nonce.into();
        run_turn(
            &Resolver(provider.clone()),
            &current_time_registry(),
            &Recorder::default(),
            state,
        );
        let ids = provider.call_ids.borrow().clone();
        ids
    };
    let mut all = run_with("a1b2c3");
    all.extend(run_with("d4e5f6"));
    assert_eq!(all.len(), 4);
    let distinct: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), 4, "{all:?}");
    assert!(all[0].starts_with("call_a1b2c3_"), "{all:?}");
}
