//! Scheduled turns: work a conversation runs later, at a time, after a delay or on a cron
//! expression, with an instruction the model reads as the reason for the turn.
//!
//! - `mod.rs`: a [`Schedule`], the request that makes one ([`ScheduleRequest`]), the limits it
//!   is held to ([`Limits`]), and where schedules are kept ([`ScheduleStore`])
//! - `rules.rs`: how a request becomes a schedule ([`new_schedule`]), how a run moves it on
//!   ([`Schedule::start_run`], [`Schedule::finish_run`]), and what keeps its conversation from
//!   retention ([`retain_until`])
//! - `tools.rs`: the `schedules` toolset the model schedules, lists and cancels through
//!   ([`register`])
//! - [`cron`]: cron expressions
//!
//! Where schedules are kept and what runs them is the application's ([`ScheduleStore`]); the
//! rules here are plain functions of the schedule and the time, tested natively.

pub mod cron;
mod rules;
mod tools;

use serde::Serialize;

use crate::llm::json::{self, FromJson, Reader};

pub use rules::{
    made_within_day, new_schedule, retain_until, DEFAULT_MAX_RUNS, MAX_AHEAD_DAYS, MAX_FAILURES,
    MAX_INSTRUCTION_CHARS, MAX_RUNS,
};
pub use tools::{register, TOOLS};

/// The toolset the schedule tools belong to.
pub const TOOLSET: &str = "schedules";

/// How many schedules a conversation may keep and make, how often one may run, and whether the
/// model's need a person's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Schedules kept at once, active or paused (`MAX_SCHEDULES_PER_CONVERSATION`).
    pub per_conversation: u32,
    /// The shortest time between a recurring schedule's runs, and how far ahead a one-time
    /// schedule must be at least (`SCHEDULE_MIN_INTERVAL_SECONDS`).
    pub min_interval_s: u32,
    /// Schedules made in any 24 hours, cancelled and finished ones included, so a turn that
    /// schedules itself again stops (`MAX_SCHEDULES_PER_DAY`).
    pub per_day: u32,
    /// The model's `schedule_turn` waits for a person's approval (`SCHEDULE_APPROVAL`).
    pub approval: bool,
}

/// Where a schedule stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Waiting for its next run (or running it).
    Active,
    /// A recurring schedule that failed [`MAX_FAILURES`] times in a row: it runs no more.
    Paused,
    /// A one-time schedule that ran, or a recurring one that reached its end (`max_runs`,
    /// `until`).
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
    /// A recurring schedule ends once it has run this many times. `None` on one made before
    /// schedules had an end: [`DEFAULT_MAX_RUNS`] applies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
    /// A recurring schedule's end: no run starts after it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<i64>,
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
    "max_runs" => max_runs: default,
    "until" => until: default,
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
/// of `at` (RFC 3339), `delay_seconds` or `cron`; a recurring one may say when it ends
/// (`max_runs`, `until`).
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
    /// Runs after which a recurring schedule ends (default [`DEFAULT_MAX_RUNS`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_runs: Option<u32>,
    /// An RFC 3339 time after which a recurring schedule starts no run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

crate::json_struct!(#[deny_unknown_fields] ScheduleRequest {
    "instruction" => instruction,
    "at" => at: default_with(present),
    "delay_seconds" => delay_seconds: default_with(present),
    "cron" => cron: default_with(present),
    "max_runs" => max_runs: default_with(present),
    "until" => until: default_with(present),
});

/// A field that is there must hold a value (`null` is an error, not `None`).
fn present<'a, T: FromJson<'a>>(r: &mut Reader<'a>) -> json::Result<Option<T>> {
    T::read(r).map(Some)
}

/// Why a schedule was not made, found or changed; each says what the caller can do.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("{0}")]
    Invalid(String),
    #[error(
        "this conversation keeps {max} schedules, the most it may \
         (MAX_SCHEDULES_PER_CONVERSATION); cancel one before adding another"
    )]
    TooMany { max: u32 },
    /// [`Limits::per_day`] schedules were made in the last 24 hours; the oldest of them leaves
    /// the window in `retry_after_s` seconds.
    #[error(
        "this conversation has made {max} schedules in the last 24 hours, the most it may \
         (MAX_SCHEDULES_PER_DAY; cancelled and finished ones count); another may be made in \
         {retry_after_s} s"
    )]
    TooManyToday { max: u32, retry_after_s: u32 },
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

/// What finishing a run did to its schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// It waits for its next run, or is done (a one-time schedule).
    Recorded,
    /// It failed [`MAX_FAILURES`] times in a row and paused itself.
    Paused,
    /// A recurring schedule reached its end (`max_runs`, `until`, or its expression's last
    /// occurrence) and is done.
    Ended,
}

/// Where a conversation's schedules are kept.
pub trait ScheduleStore {
    /// Checks `request` against the conversation's limits ([`new_schedule`]) and keeps the schedule.
    fn create(&self, request: ScheduleRequest) -> Result<Schedule, ScheduleError>;
    /// Every schedule, oldest first.
    fn list(&self) -> Result<Vec<Schedule>, ScheduleError>;
    /// Removes the schedule (a running turn of it finishes).
    fn cancel(&self, id: &str) -> Result<(), ScheduleError>;
    /// The model's `schedule_turn` waits for a person's approval (`SCHEDULE_APPROVAL`), as a
    /// tool `APPROVAL_REQUIRED_TOOLS` names does: a schedule the model asks for is made only
    /// once someone approves the call.
    fn model_needs_approval(&self) -> bool {
        false
    }
}
