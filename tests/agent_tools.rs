//! Tool behaviours in the loop: argument validation against the schema.

mod support;

use std::cell::RefCell;
use std::rc::Rc;

use async_trait::async_trait;
use edge_agent::agent::{
    run_agent_turn, AgentMessage, AgentState, ServerTool, ToolRegistry, TurnOutcome,
};
use edge_agent::llm::ToolDef;
use serde_json::{json, Map, Value};
use support::*;

/// A weather tool that records what its handler received.
struct Weather {
    def: ToolDef,
    received: Rc<RefCell<Vec<Value>>>,
}

#[async_trait(?Send)]
impl ServerTool for Weather {
    fn definition(&self) -> &ToolDef {
        &self.def
    }
    async fn call(&self, arguments: &Map<String, Value>) -> Result<Value, String> {
        self.received
            .borrow_mut()
            .push(Value::Object(arguments.clone()));
        Ok(json!({"temp_c": 4}))
    }
}

#[test]
fn arguments_that_break_the_schema_never_reach_the_handler_and_the_model_can_correct_them() {
    let received = Rc::new(RefCell::new(vec![]));
    let mut tools = ToolRegistry::new();
    tools.register_server_tool(Box::new(Weather {
        def: ToolDef {
            name: "weather".into(),
            description: "Weather for a city".into(),
            input_schema: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        },
        received: received.clone(),
    }));
    let provider = Scripted::new(vec![
        calls(vec![("c1", "weather", json!({"city": 5}))]),
        calls(vec![("c2", "weather", json!({"city": "Oslo"}))]),
        text("4 degrees."),
    ]);
    let mut state = AgentState::new(None, vec![AgentMessage::user_text("weather?")]);
    let outcome = futures::executor::block_on(run_agent_turn(
        &Resolver(provider.clone()),
        &mut state,
        &tools,
        None,
        &Recorder::default(),
        &mut |_| {},
    ));
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        *received.borrow(),
        [json!({"city": "Oslo"})],
        "only the valid call ran"
    );
    let AgentMessage::ToolResult(first) = &state.messages[2] else {
        panic!()
    };
    assert!(first.is_error);
    assert_eq!(first.content, "invalid arguments for `weather`: $.city: expected string, got number. Fix them and call the tool again.");
    let AgentMessage::ToolResult(second) = &state.messages[4] else {
        panic!()
    };
    assert_eq!(
        (second.is_error, second.content.as_str()),
        (false, "{\"temp_c\":4}")
    );
}

mod plan {
    use super::*;
    use edge_agent::agent::{plan_from_history, PlanItem, UpdatePlan};
    use edge_agent::llm::{ContentBlock, Message};

    fn recited(messages: &[Message]) -> Option<String> {
        match messages.last() {
            Some(Message::User { content }) => match &content[0] {
                ContentBlock::Text { text } if text.starts_with("## Current Plan") => {
                    Some(text.clone())
                }
                _ => None,
            },
            _ => None,
        }
    }

    #[test]
    fn update_plan_keeps_a_todo_list_recited_before_each_call_and_never_stored() {
        let provider = Scripted::new(vec![
            calls(vec![(
                "p1",
                "update_plan",
                json!({"items": [{"title": "Find flights", "done": false}, {"title": "Book hotel", "done": false}]}),
            )]),
            calls(vec![(
                "p2",
                "update_plan",
                json!({"items": [{"title": "Find flights", "done": true}, {"title": "Book hotel", "done": false}]}),
            )]),
            text("Flights found; the hotel is next."),
        ]);
        let mut state = AgentState::new(None, vec![AgentMessage::user_text("plan my trip")]);
        let mut tools = ToolRegistry::new();
        tools.register_server_tool(Box::new(UpdatePlan::new(state.plan.clone())));
        let outcome = futures::executor::block_on(run_agent_turn(
            &Resolver(provider.clone()),
            &mut state,
            &tools,
            None,
            &Recorder::default(),
            &mut |_| {},
        ));
        assert_eq!(outcome, TurnOutcome::Completed);
        let seen = provider.seen.borrow();
        assert_eq!(recited(&seen[0]), None, "no plan yet");
        assert_eq!(
            recited(&seen[1]).as_deref(),
            Some("## Current Plan (TODO List)\n⬜ 1. Find flights\n⬜ 2. Book hotel\n")
        );
        assert_eq!(
            recited(&seen[2]).as_deref(),
            Some("## Current Plan (TODO List)\n✅ 1. Find flights\n⬜ 2. Book hotel\n")
        );
        assert!(!state.messages.iter().any(|m| matches!(m, AgentMessage::User { content } if matches!(&content[0], ContentBlock::Text { text } if text.starts_with("## Current Plan")))));
        assert_eq!(
            state.plan.borrow()[0],
            PlanItem {
                title: "Find flights".into(),
                done: true
            }
        );
        // The next request rebuilds the plan from the stored history.
        assert_eq!(plan_from_history(&state.messages), *state.plan.borrow());
    }

    #[test]
    fn a_rejected_plan_update_is_not_the_plan() {
        let provider = Scripted::new(vec![
            calls(vec![(
                "p1",
                "update_plan",
                json!({"items": [{"title": "A", "done": false}]}),
            )]),
            calls(vec![("p2", "update_plan", json!({"items": "not a list"}))]),
            text("ok"),
        ]);
        let mut state = AgentState::new(None, vec![AgentMessage::user_text("go")]);
        let mut tools = ToolRegistry::new();
        tools.register_server_tool(Box::new(UpdatePlan::new(state.plan.clone())));
        futures::executor::block_on(run_agent_turn(
            &Resolver(provider),
            &mut state,
            &tools,
            None,
            &Recorder::default(),
            &mut |_| {},
        ));
        let want = vec![PlanItem {
            title: "A".into(),
            done: false,
        }];
        assert_eq!(*state.plan.borrow(), want);
        assert_eq!(plan_from_history(&state.messages), want);
    }
}

mod toolsets {
    use super::*;
    use edge_agent::agent::CurrentTime;
    use edge_agent::llm::ContentBlock;

    struct Named(ToolDef);

    #[async_trait(?Send)]
    impl ServerTool for Named {
        fn definition(&self) -> &ToolDef {
            &self.0
        }
        async fn call(&self, _: &Map<String, Value>) -> Result<Value, String> {
            Ok(json!("ok"))
        }
    }

    fn last_user_text(history: &[AgentMessage]) -> String {
        history
            .iter()
            .rev()
            .find_map(|m| match m {
                AgentMessage::User { content } => content.iter().find_map(|b| match b {
                    ContentBlock::Text { text } => Some(text.clone()),
                    _ => None,
                }),
                _ => None,
            })
            .unwrap_or_default()
    }

    #[test]
    fn the_selector_decides_per_call_which_toolsets_the_model_sees() {
        let mut tools = ToolRegistry::new();
        tools.register_server_tool(Box::new(CurrentTime::default()));
        tools.register_in_toolset("weather", Box::new(Named(tool_def("forecast"))));
        tools.register_in_toolset("travel", Box::new(Named(tool_def("book_flight"))));
        tools.register_in_toolset("travel", Box::new(Named(tool_def("book_hotel"))));
        let asked: Rc<RefCell<Vec<Vec<String>>>> = Rc::default();
        let log = asked.clone();
        tools.set_toolset_selector(Box::new(move |history, available| {
            log.borrow_mut()
                .push(available.iter().map(|s| s.to_string()).collect());
            let text = last_user_text(history);
            available
                .iter()
                .filter(|set| text.contains(*set))
                .map(|s| s.to_string())
                .collect()
        }));
        tools.merge_client_tools([tool_def("show_map")]);
        let queues = Rc::new(edge_agent::agent::LocalQueues::default());
        queues.enqueue_followup(AgentMessage::user_text("now the travel part"));
        let provider = Scripted::new(vec![text("Sunny."), text("Booked.")]);
        let mut state =
            AgentState::new(None, vec![AgentMessage::user_text("what is the weather?")]);
        state.queues = queues;
        futures::executor::block_on(run_agent_turn(
            &Resolver(provider.clone()),
            &mut state,
            &tools,
            None,
            &Recorder::default(),
            &mut |_| {},
        ));
        let offered = provider.offered.borrow();
        assert_eq!(offered[0], ["current_time", "forecast", "show_map"]);
        assert_eq!(
            offered[1],
            ["current_time", "book_flight", "book_hotel", "show_map"]
        );
        assert_eq!(
            asked.borrow()[0],
            ["travel", "weather"],
            "the selector is told the toolsets there are"
        );
    }
}

#[test]
fn a_tool_made_of_one_function_runs_in_the_loop() {
    let mut tools = ToolRegistry::new();
    tools.register_server_tool(edge_agent::agent::tool_fn(
        "double",
        "Doubles a number.",
        r#"{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}"#,
        |args| async move {
            let n = args["n"].as_i64().ok_or("`n` must be a whole number")?;
            if n < 0 {
                return Err(format!("{n} is negative"));
            }
            Ok(json!({ "doubled": n * 2 }))
        },
    ));
    assert_eq!(
        tools.definitions()[0].input_schema["required"],
        json!(["n"])
    );
    let provider = Scripted::new(vec![
        calls(vec![
            ("c1", "double", json!({"n": 21})),
            ("c2", "double", json!({"n": -1})),
        ]),
        text("42."),
    ]);
    let mut state = AgentState::new(None, vec![AgentMessage::user_text("double 21")]);
    let outcome = futures::executor::block_on(run_agent_turn(
        &Resolver(provider),
        &mut state,
        &tools,
        None,
        &Recorder::default(),
        &mut |_| {},
    ));
    assert_eq!(outcome, TurnOutcome::Completed);
    let results: Vec<(bool, String)> = state
        .messages
        .iter()
        .filter_map(|m| match m {
            AgentMessage::ToolResult(r) => Some((r.is_error, r.content.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        vec![
            (false, "{\"doubled\":42}".to_string()),
            (true, "-1 is negative".to_string())
        ]
    );
}
