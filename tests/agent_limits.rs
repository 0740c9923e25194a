//! Limits: MAX_TOOL_CALLS, TOOL_TIMEOUT_MS and TURN_DEADLINE_MS end as error results the model
//! sees ("keep the failures"), never as a crash or a tool call without a result.

mod support;

use std::rc::Rc;

use async_trait::async_trait;
use edge_agent::agent::{AgentMessage, AgentState, ServerTool, ToolRegistry, TurnOutcome};
use edge_agent::llm::{Message, Sleeper, ToolDef};
use serde_json::{json, Map, Value};
use support::*;

/// A timer that has always already fired.
struct Elapsed;

#[async_trait(?Send)]
impl Sleeper for Elapsed {
    async fn sleep(&self, _ms: u64) {}
    fn random(&self) -> f64 {
        0.5
    }
}

/// A tool that never finishes.
struct Hangs(ToolDef);

#[async_trait(?Send)]
impl ServerTool for Hangs {
    fn definition(&self) -> &ToolDef {
        &self.0
    }
    async fn call(&self, _: &Map<String, Value>) -> Result<Value, String> {
        futures::future::pending().await
    }
}

/// A tool that blocks for a while.
struct Slow(ToolDef);

#[async_trait(?Send)]
impl ServerTool for Slow {
    fn definition(&self) -> &ToolDef {
        &self.0
    }
    async fn call(&self, _: &Map<String, Value>) -> Result<Value, String> {
        std::thread::sleep(std::time::Duration::from_millis(60));
        Ok(json!("done slowly"))
    }
}

fn run(
    provider: &Rc<Scripted>,
    tools: &ToolRegistry,
    configure: impl FnOnce(&mut AgentState),
) -> (TurnOutcome, Vec<String>, AgentState) {
    let mut state = asking("go");
    configure(&mut state);
    run_turn(
        &Resolver(provider.clone()),
        tools,
        &Recorder::default(),
        state,
    )
}

fn results(state: &AgentState) -> Vec<(String, bool, String)> {
    state
        .messages
        .iter()
        .filter_map(|m| match m {
            AgentMessage::ToolResult(r) => {
                Some((r.tool_call_id.clone(), r.is_error, r.content.clone()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn calls_past_max_tool_calls_get_error_results_and_the_model_answers() {
    let provider = Scripted::new(vec![
        calls(vec![
            ("c1", "current_time", json!({})),
            ("c2", "current_time", json!({})),
            ("c3", "current_time", json!({})),
        ]),
        text("Two were enough."),
    ]);
    let (outcome, _, state) = run(&provider, &current_time_registry(), |s| {
        s.max_tool_calls = 2
    });
    assert_eq!(outcome, TurnOutcome::Completed);
    let r = results(&state);
    assert_eq!((r[0].1, r[1].1), (false, false));
    assert_eq!((r[2].0.as_str(), r[2].1), ("c3", true));
    assert!(r[2].2.contains("MAX_TOOL_CALLS"), "{}", r[2].2);
    let second = &provider.seen.borrow()[1];
    assert!(
        matches!(second.last(), Some(Message::ToolResult(t)) if t.tool_call_id == "c3" && t.is_error)
    );
}

#[test]
fn a_tool_that_hangs_times_out_into_an_error_result() {
    let mut tools = current_time_registry();
    tools.register_server_tool(Box::new(Hangs(tool_def("fetch_page"))));
    let provider = Scripted::new(vec![
        calls(vec![
            ("c1", "fetch_page", json!({})),
            ("c2", "current_time", json!({})),
        ]),
        text("The page did not load."),
    ]);
    let (outcome, events, state) = run(&provider, &tools, |s| {
        s.timer = Some(Rc::new(Elapsed));
        s.tool_timeout_ms = Some(100);
    });
    assert_eq!(outcome, TurnOutcome::Completed);
    assert!(events.contains(&"tool fetch_page error=true".to_string()));
    let r = results(&state);
    assert_eq!(
        r[0],
        (
            "c1".into(),
            true,
            "`fetch_page` did not finish within 100 ms (TOOL_TIMEOUT_MS)".into()
        )
    );
    assert!(!r[1].1, "a tool that finishes at once beats the timer");
}

#[test]
fn the_turn_deadline_refuses_further_tools_and_ends_the_turn() {
    let mut tools = current_time_registry();
    tools.register_server_tool(Box::new(Slow(tool_def("crunch"))));
    let provider = Scripted::new(vec![calls(vec![
        ("c1", "crunch", json!({})),
        ("c2", "current_time", json!({})),
    ])]);
    let (outcome, events, state) = run(&provider, &tools, |s| s.turn_deadline_ms = Some(30));
    assert!(
        matches!(&outcome, TurnOutcome::LimitReached(m) if m.contains("TURN_DEADLINE_MS")),
        "{outcome:?}"
    );
    let r = results(&state);
    assert_eq!((r[0].1, r[0].2.as_str()), (false, "done slowly"));
    assert!(
        r[1].1 && r[1].2.starts_with("not run: the turn ran"),
        "{:?}",
        r[1]
    );
    assert!(events.last().unwrap().contains("TURN_DEADLINE_MS"));
    assert_eq!(
        provider.seen.borrow().len(),
        1,
        "no LLM call after the deadline"
    );
}
