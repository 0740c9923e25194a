//! Scheduled turns: work a conversation runs later, at a time, after a delay or on a cron
//! expression, with an instruction the model reads as the reason for the turn.
//!
//! - `mod.rs`: a [`Schedule`], how a request becomes one ([`plan`]), how a run moves it on
//!   ([`Schedule::start_run`], [`Schedule::finish_run`]), and the `schedules` toolset
//! - [`cron`]: cron expressions
//!
//! Where schedules are kept and what runs them is the application's ([`ScheduleStore`]); the
//! rules here are plain functions of the schedule and the time, tested natively.

pub mod cron;

use std::rc::Rc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Map, Value};

use self::cron::Cron;
use super::calendar::{format_utc, parse_utc, MS_PER_SECOND, SECONDS_PER_DAY};
use super::{ServerTool, ToolRegistry};
use crate::llm::json::{self, FromJson, Reader};
use crate::llm::ToolDef;

/// The toolset the schedule tools belong to.
pub const TOOLSET: &str = "schedules";

/// The tools of [`TOOLSET`].
pub const TOOLS: [&str; 3] = ["schedule_turn", "list_schedules", "cancel_schedule"];

/// Failed runs in a row after which a recurring schedule pauses itself.
pub const MAX_FAILURES: u32 = 3;

/// The longest instruction, in characters.
pub const MAX_INSTRUCTION_CHARS: usize = 4_000;

/// How far ahead a one-time schedule may be set, in days.
pub const MAX_AHEAD_DAYS: i64 = 366;

/// How many schedules a conversation may keep and how often one may recur.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub per_conversation: u32,
    pub min_interval_s: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Waiting for its next run (or running it).
    Active,
    /// A recurring schedule that failed [`MAX_FAILURES`] times in a row: it runs no more.
    Paused,
    /// A one-time schedule that ran.
    Done,
}

crate::json_enum!(Status { "active" => Active, "paused" => Paused, "done" => Done });

/// One schedule, as stored and as the API shows it. Times are milliseconds since the epoch.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schedule {
    pub id: String,
    pub instruction: String,
    /// A one-time schedule's time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<i64>,
    /// A recurring schedule's expression.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    pub status: Status,
    /// Its turn runs now.
    pub running: bool,
    pub next_run_at: Option<i64>,
    pub last_run_at: Option<i64>,
    /// How the last run ended: `completed`, `failed`, `cancelled`, `limit_reached`.
    pub last_outcome: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    pub runs: u32,
    /// Failed runs in a row.
    pub failures: u32,
    pub created_at: i64,
}

crate::json_struct!(Schedule {
    "id" => id,
    "instruction" => instruction,
    "at" => at: default,
    "cron" => cron: default,
    "status" => status,
    "running" => running: default,
    "next_run_at" => next_run_at,
    "last_run_at" => last_run_at,
    "last_outcome" => last_outcome,
    "last_error" => last_error: default,
    "runs" => runs,
    "failures" => failures,
    "created_at" => created_at,
});

/// What a caller (the model, or a person through the API) asks for: the instruction and one
/// of `at` (RFC 3339), `delay_seconds` or `cron`.
///
/// A field given as `null` is refused rather than read as absent: the API's schema says each
/// is a string or a number when present.
#[derive(Debug, Clone, Default, Serialize)]

pub struct ScheduleRequest {
    pub instruction: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
}

crate::json_struct!(#[deny_unknown_fields] ScheduleRequest {
    "instruction" => instruction,
    "at" => at: default_with(present),
    "delay_seconds" => delay_seconds: default_with(present),
    "cron" => cron: default_with(present),
});

/// A field that is there must hold a value (`null` is an error, not `None`).
fn present<'a, T: FromJson<'a>>(r: &mut Reader<'a>) -> json::Result<Option<T>> {
    T::read(r).map(Some)
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0}")]
    Invalid(String),
    #[error(
        "this conversation keeps {max} schedules, the most it may; cancel one before adding another"
    )]
    TooMany { max: u32 },
    #[error("there is no schedule `{0}` in this conversation")]
    NotFound(String),
    #[error("the schedules could not be read or written: {0}")]
    Storage(String),
}

/// How a scheduled turn ended, for its schedule's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    Completed,
    /// The turn failed, or could not start; says why.
    Failed(String),
    Cancelled,
    LimitReached(String),
}

/// Checks a request and makes the schedule it asks for. `kept`: the schedules the conversation
/// keeps that still count (active or paused).
pub fn plan(
    request: ScheduleRequest,
    id: String,
    now: i64,
    limits: &Limits,
    kept: usize,
) -> Result<Schedule, ScheduleError> {
    let invalid = |why: String| Err(ScheduleError::Invalid(why));
    // Blank as JSON Schema's `\S` sees it (a byte-order mark is a space there), and counted
    // before trimming, as `maxLength` counts: the API's document states both.
    let chars = request.instruction.chars().count();
    let instruction = request
        .instruction
        .trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
        .to_string();
    if instruction.is_empty() {
        return invalid("`instruction` must say what the scheduled turn is to do".into());
    }
    if chars > MAX_INSTRUCTION_CHARS {
        return invalid(format!(
            "`instruction` is {chars} characters; the limit is {MAX_INSTRUCTION_CHARS}"
        ));
    }
    let latest = now + MAX_AHEAD_DAYS * SECONDS_PER_DAY * MS_PER_SECOND;
    let (at, cron, next) = match (request.at, request.delay_seconds, request.cron) {
        (Some(at), None, None) => {
            let when = parse_utc(&at).map_err(ScheduleError::Invalid)?;
            if when <= now {
                return invalid(format!(
                    "`at` ({at}) has passed; it is {} now",
                    format_utc(now)
                ));
            }
            (Some(when), None, when)
        }
        (None, Some(delay), None) => {
            if !(delay >= 1.0 && delay.is_finite()) {
                return invalid(format!("`delay_seconds` must be at least 1, got {delay}"));
            }
            let when = now.saturating_add((delay * 1_000.0).min(i64::MAX as f64 / 2.0) as i64);
            (Some(when), None, when)
        }
        (None, None, Some(expression)) => {
            let parsed = Cron::parse(&expression).map_err(ScheduleError::Invalid)?;
            let gap = parsed.shortest_gap_s();
            if gap < i64::from(limits.min_interval_s) {
                return invalid(format!(
                    "`{expression}` can run every {gap} s; schedules may recur at most every {} s",
                    limits.min_interval_s
                ));
            }
            let Some(next) = parsed.next_after(now) else {
                return invalid(format!("`{expression}` never comes"));
            };
            (None, Some(expression.trim().to_string()), next)
        }
        _ => {
            return invalid(
                "give exactly one of `at` (an RFC 3339 time), `delay_seconds` or `cron`".into(),
            )
        }
    };
    if next > latest {
        return invalid(format!(
            "the first run ({}) is more than {MAX_AHEAD_DAYS} days away",
            format_utc(next)
        ));
    }
    if kept >= limits.per_conversation as usize {
        return Err(ScheduleError::TooMany {
            max: limits.per_conversation,
        });
    }
    Ok(Schedule {
        id,
        instruction,
        at,
        cron,
        status: Status::Active,
        running: false,
        next_run_at: Some(next),
        last_run_at: None,
        last_outcome: None,
        last_error: None,
        runs: 0,
        failures: 0,
        created_at: now,
    })
}

/// What finishing a run did to its schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// It waits for its next run, or is done.
    Recorded,
    /// It failed [`MAX_FAILURES`] times in a row and paused itself.
    Paused,
}

impl Schedule {
    /// Counts toward the conversation's limit (a one-time schedule that ran does not).
    pub fn counts(&self) -> bool {
        self.status != Status::Done
    }

    /// Its run is due at `now`.
    pub fn due(&self, now: i64) -> bool {
        self.status == Status::Active && !self.running && self.next_run_at.is_some_and(|t| t <= now)
    }

    /// Its turn starts at `now`. The next run is the first occurrence after `now`, not after
    /// the time it was due: occurrences missed while nothing ran (an eviction, a deploy, a long
    /// turn) run once, not once each.
    pub fn start_run(&mut self, now: i64) {
        self.running = true;
        self.last_run_at = Some(now);
        self.runs = self.runs.saturating_add(1);
        self.next_run_at = self
            .cron
            .as_deref()
            .and_then(|c| Cron::parse(c).ok())
            .and_then(|c| c.next_after(now));
    }

    /// Records how its turn ended.
    pub fn finish_run(&mut self, outcome: &RunOutcome) -> Finished {
        self.running = false;
        let (name, error) = match outcome {
            RunOutcome::Completed => ("completed", None),
            RunOutcome::Failed(why) => ("failed", Some(why.clone())),
            RunOutcome::Cancelled => ("cancelled", None),
            RunOutcome::LimitReached(which) => ("limit_reached", Some(which.clone())),
        };
        self.last_outcome = Some(name.to_string());
        self.last_error = error;
        if matches!(outcome, RunOutcome::Failed(_)) {
            self.failures = self.failures.saturating_add(1);
        } else {
            self.failures = 0;
        }
        if self.cron.is_none() {
            self.status = Status::Done;
            self.next_run_at = None;
            Finished::Recorded
        } else if self.failures >= MAX_FAILURES {
            self.status = Status::Paused;
            self.next_run_at = None;
            Finished::Paused
        } else {
            Finished::Recorded
        }
    }

    /// What the history says when the schedule paused itself.
    pub fn paused_note(&self) -> String {
        format!(
            "Schedule `{}` ({}) paused after {} failed runs in a row; the last: {}. Cancel it \
             and schedule it again to resume.",
            self.id,
            self.describe_when(),
            self.failures,
            self.last_error.as_deref().unwrap_or("no reason given")
        )
    }

    fn describe_when(&self) -> String {
        match (&self.cron, self.at) {
            (Some(cron), _) => format!("cron `{cron}`, UTC"),
            (None, Some(at)) => format!("at {}", format_utc(at)),
            (None, None) => "no time".into(),
        }
    }

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
            "failures": self.failures,
        })
    }
}

/// The text the model reads for a turn a schedule started.
pub fn turn_reason(schedule_id: &str, instruction: &str) -> String {
    format!(
        "[Scheduled turn: schedule `{schedule_id}` started this turn, not a new message from the \
         user. Its instruction:]\n{instruction}"
    )
}

/// Where a conversation's schedules are kept.
pub trait ScheduleStore {
    fn create(&self, request: ScheduleRequest) -> Result<Schedule, ScheduleError>;
    fn list(&self) -> Result<Vec<Schedule>, ScheduleError>;
    /// Removes the schedule (a running turn of it finishes).
    fn cancel(&self, id: &str) -> Result<(), ScheduleError>;
}

/// Registers the three schedule tools in the `schedules` toolset.
pub fn register(tools: &mut ToolRegistry, store: Rc<dyn ScheduleStore>) {
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
                TOOLS[0],
                "Schedules a turn of this conversation for later: once at `at` (an RFC 3339 \
                 time, e.g. 2026-11-26T09:30:00Z), once after `delay_seconds`, or repeatedly on \
                 `cron` (5 fields, UTC: minute hour day-of-month month day-of-week). Give \
                 exactly one. When it is due you are run with `instruction` as the reason, with \
                 no new user message; write it as a note to yourself of what to do then.",
                r#"{"type": "object", "properties": {
                    "instruction": {"type": "string"},
                    "at": {"type": "string"},
                    "delay_seconds": {"type": "number", "minimum": 1},
                    "cron": {"type": "string"}
                }, "required": ["instruction"]}"#,
            ),
            Op::List => (
                TOOLS[1],
                "Lists this conversation's schedules with their next and last runs.",
                r#"{"type": "object", "properties": {}}"#,
            ),
            Op::Cancel => (
                TOOLS[2],
                "Cancels one of this conversation's schedules by its id.",
                r#"{"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}"#,
            ),
        };
        super::tools::definition(name, description, schema)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    const LIMITS: Limits = Limits {
        per_conversation: 2,
        min_interval_s: 60,
    };
    const NOW: i64 = 1_795_685_400_000; // 2026-11-26T09:30:00Z

    fn request(at: Option<&str>, delay: Option<f64>, cron: Option<&str>) -> ScheduleRequest {
        ScheduleRequest {
            instruction: "check the build".into(),
            at: at.map(str::to_string),
            delay_seconds: delay,
            cron: cron.map(str::to_string),
        }
    }

    fn make(r: ScheduleRequest) -> Result<Schedule, ScheduleError> {
        plan(r, "s1".into(), NOW, &LIMITS, 0)
    }

    #[test]
    fn a_request_names_one_time_in_the_future_within_the_limits() {
        let at = make(request(Some("2026-11-26T10:00:00+00:00"), None, None)).unwrap();
        assert_eq!(at.next_run_at, Some(NOW + 1_800_000));
        let delay = make(request(None, Some(5.0), None)).unwrap();
        assert_eq!(delay.next_run_at, Some(NOW + 5_000));
        assert_eq!(delay.at, Some(NOW + 5_000));
        let cron = make(request(None, None, Some("*/15 * * * *"))).unwrap();
        assert_eq!(cron.next_run_at, Some(NOW + 900_000));

        let refused = |r: ScheduleRequest, says: &str| match make(r) {
            Err(ScheduleError::Invalid(why)) => assert!(why.contains(says), "{why}"),
            other => panic!("{other:?}"),
        };
        refused(request(None, None, None), "exactly one");
        refused(request(Some("x"), Some(5.0), None), "exactly one");
        refused(
            request(Some("2026-11-26T09:00:00Z"), None, None),
            "has passed",
        );
        refused(request(None, Some(0.5), None), "at least 1");
        refused(request(None, Some(f64::NAN), None), "at least 1");
        refused(request(None, Some(400.0 * 86_400.0), None), "366 days");
        refused(request(None, None, Some("*/30 * * * * *")), "every 30 s");
        refused(request(None, None, Some("0 0 30 2 *")), "never comes");
        refused(request(None, None, Some("nonsense")), "1 fields");
        let mut blank = request(None, Some(5.0), None);
        blank.instruction = " \u{feff}\n".into();
        refused(blank, "instruction");
        let mut long = request(None, Some(5.0), None);
        long.instruction = "x".repeat(MAX_INSTRUCTION_CHARS) + " ";
        refused(long, "limit");

        let full = plan(request(None, Some(5.0), None), "s3".into(), NOW, &LIMITS, 2);
        assert_eq!(full, Err(ScheduleError::TooMany { max: 2 }));
        // Every minute is allowed where the shortest interval is a minute.
        assert!(make(request(None, None, Some("* * * * *"))).is_ok());
    }

    #[test]
    fn a_missed_occurrence_runs_once_and_the_next_is_after_now() {
        let mut s = make(request(None, None, Some("*/15 * * * *"))).unwrap();
        // Due at 09:45; the object was away until 11:07.
        let late = NOW + 97 * 60_000;
        assert!(s.due(late));
        s.start_run(late);
        assert!(!s.due(late), "running, it is not due again");
        assert_eq!(
            s.next_run_at.map(format_utc).as_deref(),
            Some("2026-11-26T11:15:00Z")
        );
        assert_eq!(s.finish_run(&RunOutcome::Completed), Finished::Recorded);
        assert!(!s.due(late + 1_000));
        assert!(s.due(NOW + 105 * 60_000));
        assert_eq!(s.runs, 1);
    }

    #[test]
    fn a_recurring_schedule_pauses_after_three_failures_in_a_row_and_a_success_resets_them() {
        let mut s = make(request(None, None, Some("@hourly"))).unwrap();
        let mut t = NOW;
        let mut run = |s: &mut Schedule, outcome: RunOutcome| {
            t += 3_600_000;
            s.start_run(t);
            s.finish_run(&outcome)
        };
        let fail = || RunOutcome::Failed("the provider answered 400".into());
        assert_eq!(run(&mut s, fail()), Finished::Recorded);
        assert_eq!(run(&mut s, fail()), Finished::Recorded);
        assert_eq!(run(&mut s, RunOutcome::Completed), Finished::Recorded);
        assert_eq!(s.failures, 0);
        assert_eq!(run(&mut s, fail()), Finished::Recorded);
        assert_eq!(run(&mut s, RunOutcome::Cancelled), Finished::Recorded);
        assert_eq!(run(&mut s, fail()), Finished::Recorded);
        assert_eq!(run(&mut s, fail()), Finished::Recorded);
        assert_eq!(run(&mut s, fail()), Finished::Paused);
        assert_eq!(s.status, Status::Paused);
        assert_eq!(s.next_run_at, None);
        assert!(!s.due(t + 10 * 3_600_000));
        assert!(
            s.counts(),
            "a paused schedule still counts toward the limit"
        );
        let note = s.paused_note();
        assert!(
            note.contains("3 failed runs") && note.contains("400"),
            "{note}"
        );
    }

    #[test]
    fn a_one_time_schedule_is_done_after_its_run_whatever_the_outcome() {
        for outcome in [RunOutcome::Completed, RunOutcome::Failed("x".into())] {
            let mut s = make(request(None, Some(5.0), None)).unwrap();
            s.start_run(NOW + 5_000);
            assert_eq!(s.next_run_at, None);
            assert_eq!(s.finish_run(&outcome), Finished::Recorded);
            assert_eq!(s.status, Status::Done);
            assert!(!s.counts());
        }
    }

    /// A store in memory, for the tools.
    #[derive(Default)]
    struct Memory(RefCell<Vec<Schedule>>);

    impl ScheduleStore for Memory {
        fn create(&self, request: ScheduleRequest) -> Result<Schedule, ScheduleError> {
            let kept = self.0.borrow().iter().filter(|s| s.counts()).count();
            let id = format!("s{}", self.0.borrow().len() + 1);
            let schedule = plan(request, id, NOW, &LIMITS, kept)?;
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
            json!({"instruction": "x", "at": null, "delay_seconds": 5}),
        )
        .unwrap_err();
        assert!(error.contains("null"), "{error}");
        let error = call(
            "schedule_turn",
            json!({"instruction": "x", "cron": "*/30 * * * * *"}),
        )
        .unwrap_err();
        assert!(error.contains("at most every 60 s"), "{error}");
        call(
            "schedule_turn",
            json!({"instruction": "b", "cron": "@daily"}),
        )
        .unwrap();
        let full = call(
            "schedule_turn",
            json!({"instruction": "c", "delay_seconds": 9}),
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
