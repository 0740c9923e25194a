//! The `schedules` toolset: the model schedules a turn of its conversation for later, lists
//! the conversation's schedules and cancels one, through the application's store.

use std::rc::Rc;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::{Schedule, ScheduleError, ScheduleRequest, ScheduleStore, TOOLSET};
use crate::agent::calendar::format_utc;
use crate::agent::tools::{ServerTool, ToolRegistry};
use crate::llm::ToolDef;

const SCHEDULE_TURN: &str = "schedule_turn";
const LIST_SCHEDULES: &str = "list_schedules";
const CANCEL_SCHEDULE: &str = "cancel_schedule";

/// The tools of [`TOOLSET`].
pub const TOOLS: [&str; 3] = [SCHEDULE_TURN, LIST_SCHEDULES, CANCEL_SCHEDULE];

/// Registers the three schedule tools in the `schedules` toolset; `schedule_turn` waits for
/// approval when the store says so ([`ScheduleStore::model_needs_approval`]).
pub fn register(tools: &mut ToolRegistry, store: Rc<dyn ScheduleStore>) {
    if store.model_needs_approval() {
        tools.require_approval(SCHEDULE_TURN);
    }
    for op in [Op::Schedule, Op::List, Op::Cancel] {
        tools.register_in_toolset(
            TOOLSET,
            Box::new(ScheduleTool {
                definition: op.definition(),
                op,
                store: store.clone(),
            }),
        );
    }
}

#[derive(Clone, Copy)]
enum Op {
    Schedule,
    List,
    Cancel,
}

impl Op {
    fn definition(self) -> ToolDef {
        let (name, description, schema) = match self {
            Op::Schedule => (
                SCHEDULE_TURN,
                "Schedules a turn of this conversation for later: once at `at` (an RFC 3339 \
                 time, e.g. 2026-11-26T09:30:00Z), once after `delay_seconds`, or repeatedly on \
                 `cron` (5 fields, UTC: minute hour day-of-month month day-of-week). Give \
                 exactly one; a one-time turn must be at least a minute ahead, or what the \
                 deployment sets. A recurring one ends after `max_runs` runs (default 100) or \
                 at `until` (RFC 3339). When it is due you are run with `instruction` as the \
                 reason, with no new user message; write it as a note to yourself of what to \
                 do then.",
                r#"{"type": "object", "properties": {
                    "instruction": {"type": "string"},
                    "at": {"type": "string"},
                    "delay_seconds": {"type": "number", "minimum": 1},
                    "cron": {"type": "string"},
                    "max_runs": {"type": "integer", "minimum": 1, "maximum": 10000},
                    "until": {"type": "string"}
                }, "required": ["instruction"]}"#,
            ),
            Op::List => (
                LIST_SCHEDULES,
                "Lists this conversation's schedules with their next and last runs.",
                r#"{"type": "object", "properties": {}}"#,
            ),
            Op::Cancel => (
                CANCEL_SCHEDULE,
                "Cancels one of this conversation's schedules by its id.",
                r#"{"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}"#,
            ),
        };
        crate::agent::tools::definition(name, description, schema)
    }
}

struct ScheduleTool {
    definition: ToolDef,
    op: Op,
    store: Rc<dyn ScheduleStore>,
}

#[async_trait(?Send)]
impl ServerTool for ScheduleTool {
    fn definition(&self) -> &ToolDef {
        &self.definition
    }

    async fn call(&self, arguments: &Map<String, Value>) -> Result<Value, String> {
        let failed = |e: ScheduleError| e.to_string();
        match self.op {
            Op::Schedule => {
                // Read from text, as the API's body is: one reader of the request in the Worker.
                let text = Value::Object(arguments.clone()).to_string();
                let request: ScheduleRequest = crate::llm::json::from_str(&text)
                    .map_err(|e| format!("the arguments do not fit: {e}"))?;
                let schedule = self.store.create(request).map_err(failed)?;
                Ok(json!({"status": "scheduled", "schedule": schedule.for_model()}))
            }
            Op::List => {
                let listed = self.store.list().map_err(failed)?;
                let schedules: Vec<Value> = listed.iter().map(Schedule::for_model).collect();
                Ok(json!({ "schedules": schedules }))
            }
            Op::Cancel => {
                let id = arguments
                    .get("id")
                    .and_then(Value::as_str)
                    .ok_or("`id` is required and must be text")?;
                self.store.cancel(id).map_err(failed)?;
                Ok(json!({ "status": "cancelled", "id": id }))
            }
        }
    }
}

impl Schedule {
    /// The schedule as the model reads it: times in RFC 3339.
    pub fn for_model(&self) -> Value {
        let utc = |t: Option<i64>| t.map(format_utc);
        json!({
            "id": self.id,
            "instruction": self.instruction,
            "when": self.describe_when(),
            "status": self.status,
            "running": self.running,
            "next_run": utc(self.next_run_at),
            "last_run": utc(self.last_run_at),
            "last_outcome": self.last_outcome,
            "last_error": self.last_error,
            "runs": self.runs,
            "max_runs": self.max_runs,
            "until": utc(self.until),
            "failures": self.failures,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::agent::schedules::new_schedule;
    use crate::agent::schedules::rules::tests::{LIMITS, NOW};

    /// A store in memory, for the tools.
    #[derive(Default)]
    struct Memory(RefCell<Vec<Schedule>>);

    impl ScheduleStore for Memory {
        fn create(&self, request: ScheduleRequest) -> Result<Schedule, ScheduleError> {
            let kept = self.0.borrow().iter().filter(|s| s.counts()).count();
            let id = format!("s{}", self.0.borrow().len() + 1);
            let schedule = new_schedule(request, id, NOW, &LIMITS, kept, &[])?;
            self.0.borrow_mut().push(schedule.clone());
            Ok(schedule)
        }
        fn list(&self) -> Result<Vec<Schedule>, ScheduleError> {
            Ok(self.0.borrow().clone())
        }
        fn cancel(&self, id: &str) -> Result<(), ScheduleError> {
            let before = self.0.borrow().len();
            self.0.borrow_mut().retain(|s| s.id != id);
            if self.0.borrow().len() == before {
                return Err(ScheduleError::NotFound(id.into()));
            }
            Ok(())
        }
    }

    /// A store whose deployment sets `SCHEDULE_APPROVAL`.
    #[derive(Default)]
    struct Approving(Memory);

    impl ScheduleStore for Approving {
        fn create(&self, request: ScheduleRequest) -> Result<Schedule, ScheduleError> {
            self.0.create(request)
        }
        fn list(&self) -> Result<Vec<Schedule>, ScheduleError> {
            self.0.list()
        }
        fn cancel(&self, id: &str) -> Result<(), ScheduleError> {
            self.0.cancel(id)
        }
        fn model_needs_approval(&self) -> bool {
            true
        }
    }

    #[test]
    fn with_approval_on_the_models_schedule_turn_waits_for_a_person() {
        use crate::agent::ToolKind;
        let mut tools = ToolRegistry::new();
        register(&mut tools, Rc::new(Approving::default()));
        assert!(matches!(
            tools.classify("schedule_turn"),
            Some(ToolKind::NeedsApproval(_))
        ));
        // Reading and cancelling make nothing run.
        assert!(matches!(
            tools.classify("list_schedules"),
            Some(ToolKind::Server(_))
        ));
        assert!(matches!(
            tools.classify("cancel_schedule"),
            Some(ToolKind::Server(_))
        ));
        let mut tools = ToolRegistry::new();
        register(&mut tools, Rc::new(Memory::default()));
        assert!(matches!(
            tools.classify("schedule_turn"),
            Some(ToolKind::Server(_))
        ));
    }

    #[test]
    fn the_tools_schedule_list_and_cancel_through_the_store() {
        let store = Rc::new(Memory::default());
        let mut tools = ToolRegistry::new();
        register(&mut tools, store.clone());
        let call = |name: &str, args: Value| {
            let Some(crate::agent::ToolKind::Server(tool)) = tools.classify(name) else {
                panic!("{name} is a server tool");
            };
            let Value::Object(args) = args else {
                unreachable!()
            };
            futures::executor::block_on(tool.call(&args))
        };
        let made = call(
            "schedule_turn",
            json!({"instruction": "remind me", "at": "2026-11-26T10:00:00Z"}),
        )
        .unwrap();
        assert_eq!(made["schedule"]["next_run"], "2026-11-26T10:00:00Z");
        assert_eq!(made["schedule"]["when"], "at 2026-11-26T10:00:00Z");
        let error = call("schedule_turn", json!({"instruction": "x", "every": "day"})).unwrap_err();
        assert!(error.contains("every"), "{error}");
        let error = call(
            "schedule_turn",
            json!({"instruction": "x", "at": null, "delay_seconds": 90}),
        )
        .unwrap_err();
        assert!(error.contains("null"), "{error}");
        let error = call(
            "schedule_turn",
            json!({"instruction": "x", "cron": "*/30 * * * * *"}),
        )
        .unwrap_err();
        assert!(error.contains("at most every 60 s"), "{error}");
        let error = call(
            "schedule_turn",
            json!({"instruction": "again", "delay_seconds": 1}),
        )
        .unwrap_err();
        assert!(error.contains("SCHEDULE_MIN_INTERVAL_SECONDS"), "{error}");
        let daily = call(
            "schedule_turn",
            json!({"instruction": "b", "cron": "@daily", "max_runs": 7}),
        )
        .unwrap();
        assert_eq!(daily["schedule"]["max_runs"], 7);
        let full = call(
            "schedule_turn",
            json!({"instruction": "c", "delay_seconds": 90}),
        )
        .unwrap_err();
        assert!(full.contains("keeps 2 schedules"), "{full}");
        let listed = call("list_schedules", json!({})).unwrap();
        assert_eq!(listed["schedules"].as_array().map(Vec::len), Some(2));
        assert_eq!(listed["schedules"][1]["when"], "cron `@daily`, UTC");
        call("cancel_schedule", json!({"id": "s1"})).unwrap();
        let gone = call("cancel_schedule", json!({"id": "s1"})).unwrap_err();
        assert!(gone.contains("no schedule `s1`"), "{gone}");
        assert_eq!(store.0.borrow().len(), 1);
    }
}
