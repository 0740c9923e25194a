//! Working memory in the loop: `update_memory` needs no reply of its own, so a step that
//! answers and updates memory ends the turn (the loop Mastra's #5374 describes cannot start);
//! the system prompt's next step shows the update; two writers lose nothing.

mod support;

use std::cell::RefCell;
use std::rc::Rc;

use async_trait::async_trait;
use edge_agent::agent::memory::{self, MemoryError, MemoryStore, Shape};
use edge_agent::agent::{AgentMessage, ToolRegistry, TurnOutcome};
use serde_json::json;
use support::*;

/// A store that keeps one document, and may let another writer in before the first write.
#[derive(Default)]
struct Kept {
    document: RefCell<String>,
    /// Written by "another conversation" between the first read and write.
    interloper: RefCell<Option<String>>,
}

#[async_trait(?Send)]
impl MemoryStore for Kept {
    async fn update(
        &self,
        change: &dyn for<'a> Fn(&'a str) -> Result<String, String>,
    ) -> Result<String, MemoryError> {
        loop {
            let read = self.document.borrow().clone();
            let next = change(&read).map_err(MemoryError::Refused)?;
            if let Some(other) = self.interloper.borrow_mut().take() {
                // Compare-and-set fails: the other writer's document is read again.
                *self.document.borrow_mut() = other;
                continue;
            }
            *self.document.borrow_mut() = next.clone();
            return Ok(next);
        }
    }
}

fn with_memory(store: Rc<Kept>, shown: Rc<RefCell<String>>) -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    let shape = Rc::new(Shape::Schema(json!({"type": "object"})));
    memory::register(&mut tools, shape, store, 1024, shown);
    tools.register_server_tool(Box::new(edge_agent::agent::CurrentTime::default()));
    tools
}

#[test]
fn an_answer_that_updates_memory_ends_the_turn() {
    let store = Rc::new(Kept::default());
    *store.document.borrow_mut() = "{}".into();
    let shown = Rc::new(RefCell::new("{}".to_string()));
    let tools = with_memory(store.clone(), shown.clone());
    let mut answer = calls(vec![(
        "m1",
        "update_memory",
        json!({"patch": {"diet": "vegan"}}),
    )]);
    answer.text = "Noted, you are vegan.";
    let provider = Scripted::new(vec![answer, text("never called")]);
    let (outcome, _, state) = run_turn(
        &Resolver(provider.clone()),
        &tools,
        &Recorder::default(),
        asking("I am vegan"),
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        provider.seen.borrow().len(),
        1,
        "no second step for the update"
    );
    assert_eq!(kinds(&state), ["user", "assistant", "tool_result"]);
    assert_eq!(*store.document.borrow(), r#"{"diet":"vegan"}"#);
    assert_eq!(*shown.borrow(), r#"{"diet":"vegan"}"#);
}

#[test]
fn an_update_alone_or_beside_another_tool_is_answered_by_a_next_step() {
    // Without text the user would get no answer: the model is called again.
    let store = Rc::new(Kept::default());
    let tools = with_memory(store.clone(), Rc::default());
    let provider = Scripted::new(vec![
        calls(vec![("m1", "update_memory", json!({"patch": {"a": 1}}))]),
        text("Done."),
    ]);
    let (outcome, _, _) = run_turn(
        &Resolver(provider.clone()),
        &tools,
        &Recorder::default(),
        asking("remember a=1"),
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(provider.seen.borrow().len(), 2);
    // Beside a tool whose result the model needs, the step goes on as any other.
    let mut answer = calls(vec![
        ("m1", "update_memory", json!({"patch": {"b": 2}})),
        ("t1", "current_time", json!({})),
    ]);
    answer.text = "Let me look.";
    let provider = Scripted::new(vec![answer, text("It is noon.")]);
    let (_, _, _) = run_turn(
        &Resolver(provider.clone()),
        &tools,
        &Recorder::default(),
        asking("time?"),
    );
    assert_eq!(provider.seen.borrow().len(), 2);
    assert_eq!(*store.document.borrow(), r#"{"a":1,"b":2}"#);
}

#[test]
fn an_update_racing_another_writer_keeps_both() {
    let store = Rc::new(Kept::default());
    *store.document.borrow_mut() = r#"{"name":"Ana"}"#.into();
    *store.interloper.borrow_mut() = Some(r#"{"name":"Ana","city":"Oslo"}"#.into());
    let tools = with_memory(store.clone(), Rc::default());
    let mut answer = calls(vec![(
        "m1",
        "update_memory",
        json!({"patch": {"diet": "vegan"}}),
    )]);
    answer.text = "Noted.";
    let provider = Scripted::new(vec![answer]);
    let (outcome, _, state) = run_turn(
        &Resolver(provider),
        &tools,
        &Recorder::default(),
        asking("I am vegan"),
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        *store.document.borrow(),
        r#"{"name":"Ana","city":"Oslo","diet":"vegan"}"#
    );
    let AgentMessage::ToolResult(result) = &state.messages[2] else {
        panic!("a result")
    };
    assert!(!result.is_error);
}

#[test]
fn a_refused_update_is_the_models_to_answer() {
    let store = Rc::new(Kept::default());
    let tools = with_memory(store.clone(), Rc::default());
    let mut answer = calls(vec![(
        "m1",
        "update_memory",
        json!({"patch": "not an object"}),
    )]);
    answer.text = "Noted.";
    let provider = Scripted::new(vec![answer, text("I could not keep that.")]);
    let (outcome, _, state) = run_turn(
        &Resolver(provider.clone()),
        &tools,
        &Recorder::default(),
        asking("remember this"),
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    assert_eq!(
        provider.seen.borrow().len(),
        2,
        "the failure is read and answered"
    );
    assert_eq!(
        kinds(&state),
        ["user", "assistant", "tool_result", "assistant"]
    );
}

#[test]
fn a_whole_text_made_on_an_older_memory_is_refused_with_the_newer_one() {
    let store = Rc::new(Kept::default());
    *store.document.borrow_mut() = "# User\n- vegan\n".into();
    // The turn read an older text (before another conversation added a line).
    let shown = Rc::new(RefCell::new("# User\n".to_string()));
    let mut tools = ToolRegistry::new();
    let shape = Rc::new(Shape::Template("# User\n".into()));
    memory::register(&mut tools, shape, store.clone(), 1024, shown.clone());
    let mut answer = calls(vec![(
        "m1",
        "update_memory",
        json!({"memory": "# User\n- sails\n"}),
    )]);
    answer.text = "Noted.";
    let provider = Scripted::new(vec![
        answer,
        calls(vec![(
            "m2",
            "update_memory",
            json!({"memory": "# User\n- vegan\n- sails\n"}),
        )]),
        text("Noted, both."),
    ]);
    let (outcome, _, state) = run_turn(
        &Resolver(provider.clone()),
        &tools,
        &Recorder::default(),
        asking("I sail"),
    );
    assert_eq!(outcome, TurnOutcome::Completed);
    let AgentMessage::ToolResult(refused) = &state.messages[2] else {
        panic!("a result")
    };
    assert!(
        refused.is_error && refused.content.contains("- vegan"),
        "{}",
        refused.content
    );
    assert_eq!(
        *store.document.borrow(),
        "# User\n- vegan\n- sails\n",
        "nothing lost"
    );
    assert_eq!(*shown.borrow(), "# User\n- vegan\n- sails\n");
}
