//! The conversation object's decisions, as plain functions of what it knows: whether a turn
//! runs, what waits in the queue, how the last turn ended, how often an interrupted turn was
//! recovered. The object applies them to its storage; keeping them here, free of the platform,
//! lets every rule be tested natively.
//!
//! The rules:
//! - one turn at a time; a message sent meanwhile waits in the queue;
//! - whatever ends a turn, the queue is looked at in the same synchronous step: anything there
//!   starts the next turn at once, so nothing accepted is ever stranded;
//! - a turn the object recorded but no task of this isolate runs was interrupted (eviction or a
//!   restart): it is recovered from D1, at most [`MAX_RECOVERIES`] times, then given up with an
//!   error in the history;
//! - a turn for waiting messages that fails to start is tried again by the alarm, at most
//!   [`MAX_FAILED_STARTS`] times in a row; then the messages wait for the next one, and the
//!   history says why;
//! - one alarm serves the running turn's heartbeat and the next schedule ([`alarm_at`]); a
//!   schedule due while a turn runs waits for it and starts when the turn ends.

use crate::agent::{pending_calls, AgentMessage};
use crate::llm::{AssistantMessage, StopReason, ToolResult};

/// How far ahead of a running turn its alarm is kept.
pub const ALARM_MS: i64 = 30_000;

/// How often an interrupted turn is resumed before it is given up.
pub const MAX_RECOVERIES: u32 = 3;

/// Times in a row a turn for waiting messages may fail to start before they are left waiting
/// for the next message.
pub const MAX_FAILED_STARTS: u32 = 5;

/// The result content of a tool call whose turn was interrupted before it ran or finished.
pub const INTERRUPTED: &str = "no result: the turn was interrupted before this call finished";

/// Whether a turn is running, as the object sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activity {
    Idle,
    /// A task of this isolate runs the turn.
    Running,
    /// Storage records a turn, but no task of this isolate runs it: the object was evicted or
    /// the runtime restarted mid-turn.
    Orphaned,
}

pub fn activity(turn_recorded: bool, task_alive: bool) -> Activity {
    match (turn_recorded, task_alive) {
        (_, true) => Activity::Running,
        (true, false) => Activity::Orphaned,
        (false, false) => Activity::Idle,
    }
}

/// A user message arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnMessage {
    /// Nothing runs: the message starts a turn.
    StartTurn,
    /// It waits for the running turn.
    Queue,
    /// It waits, and the interrupted turn it waits for is recovered now rather than at the alarm.
    QueueAndRecover,
}

pub fn on_message(activity: Activity) -> OnMessage {
    match activity {
        Activity::Idle => OnMessage::StartTurn,
        Activity::Running => OnMessage::Queue,
        Activity::Orphaned => OnMessage::QueueAndRecover,
    }
}

/// Answers for a paused turn and retries need the conversation to themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnExclusive {
    StartTurn,
    Busy,
    /// Busy with an interrupted turn, which is recovered now.
    BusyAndRecover,
}

pub fn on_exclusive(activity: Activity) -> OnExclusive {
    match activity {
        Activity::Idle => OnExclusive::StartTurn,
        Activity::Running => OnExclusive::Busy,
        Activity::Orphaned => OnExclusive::BusyAndRecover,
    }
}

/// What a paused turn waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseKind {
    ToolResults,
    Approval,
}

impl PauseKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PauseKind::ToolResults => "tool_results",
            PauseKind::Approval => "approval",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "tool_results" => Some(PauseKind::ToolResults),
            "approval" => Some(PauseKind::Approval),
            _ => None,
        }
    }
}

/// What follows a turn's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AfterTurn {
    /// The conversation rests; `paused` says what it waits for, if anything.
    Idle { paused: Option<PauseKind> },
    /// Queued messages start the next turn now.
    NextTurn,
}

/// Decides the step after any ending: completed, cancelled, failed, limit or paused. A
/// conversation being deleted starts nothing.
pub fn after_turn(paused: Option<PauseKind>, queued: usize, deleting: bool) -> AfterTurn {
    if queued > 0 && !deleting {
        AfterTurn::NextTurn
    } else if deleting {
        AfterTurn::Idle { paused: None }
    } else {
        AfterTurn::Idle { paused }
    }
}

/// What to do with an interrupted turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Orphan {
    /// Resume it; `attempt` counts from 1.
    Recover { attempt: u32 },
    /// It was interrupted too often: record why and end it.
    GiveUp,
}

pub fn orphan(recoveries_so_far: u32) -> Orphan {
    if recoveries_so_far >= MAX_RECOVERIES {
        Orphan::GiveUp
    } else {
        Orphan::Recover {
            attempt: recoveries_so_far + 1,
        }
    }
}

/// What follows a turn for waiting messages that failed to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailedStart {
    /// The alarm tries again.
    Later,
    /// Give up until the next message; say so in the history.
    Wait,
}

/// `failed`: the times in a row the turn failed to start, this one included.
pub fn after_failed_start(failed: u32) -> FailedStart {
    if failed >= MAX_FAILED_STARTS {
        FailedStart::Wait
    } else {
        FailedStart::Later
    }
}

/// The alarm a running turn keeps ahead of itself fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnAlarm {
    Nothing,
    /// The turn is alive: set the next alarm.
    Rearm,
    Orphan(Orphan),
    /// Nothing runs but messages wait (their turn never started): start one.
    StartQueued,
}

pub fn on_alarm(activity: Activity, recoveries_so_far: u32, queued: usize) -> OnAlarm {
    match activity {
        Activity::Running => OnAlarm::Rearm,
        Activity::Orphaned => OnAlarm::Orphan(orphan(recoveries_so_far)),
        Activity::Idle if queued > 0 => OnAlarm::StartQueued,
        Activity::Idle => OnAlarm::Nothing,
    }
}

/// When the object's alarm fires next (`None`: no alarm). `heartbeat`: a turn runs or waiting
/// messages are to be retried, so the alarm comes at most [`ALARM_MS`] ahead. A schedule is
/// served at its time; one overdue waits for the running turn (which starts it when it ends),
/// or, when nothing runs, is tried again after [`ALARM_MS`] (its start failed just now).
pub fn alarm_at(now: i64, heartbeat: bool, next_due: Option<i64>) -> Option<i64> {
    let beat = heartbeat.then_some(now + ALARM_MS);
    let due = match next_due {
        Some(t) if t > now => Some(t),
        Some(_) if !heartbeat => Some(now + ALARM_MS),
        _ => None,
    };
    match (beat, due) {
        (Some(beat), Some(due)) => Some(beat.min(due)),
        (beat, due) => beat.or(due),
    }
}

/// What resuming an interrupted turn stores before the model is called again.
#[derive(Debug, Clone, PartialEq)]
pub enum Recovery {
    /// The turn's last answer was stored whole: there is nothing to call the model for.
    Answered,
    /// Store these (the partial answer marked interrupted, results for calls left without one),
    /// then call the model.
    Continue(Vec<AgentMessage>),
    /// The turn was cancelled (its last answer is stored, aborted): store these (results for
    /// calls left without one) and call no model.
    Closed(Vec<AgentMessage>),
}

/// The last user message, schedule instruction or answer: who spoke last.
fn last_exchange(history: &[AgentMessage]) -> Option<&AgentMessage> {
    history.iter().rev().find(|m| {
        matches!(
            m,
            AgentMessage::User { .. }
                | AgentMessage::Assistant(_)
                | AgentMessage::SystemEvent {
                    schedule: Some(_),
                    ..
                }
        )
    })
}

/// `history` is what D1 holds; `partial` what the turn had streamed of an answer it never
/// stored. Open calls of the tools `rerun` names are left open, and run again by the recovered
/// turn: an agent tool's call reaches the same child, which answers it once.
pub fn recovery(
    history: &[AgentMessage],
    partial: Option<AssistantMessage>,
    rerun: &dyn Fn(&str) -> bool,
) -> Recovery {
    let mut messages = Vec::new();
    let last_answer = history.iter().rev().find_map(|m| match m {
        AgentMessage::Assistant(a) => Some(a),
        _ => None,
    });
    // A partial answer the turn went on to store (cancelled or failed, the runtime dying before
    // its saved copy was cleared) is that answer, stored and charged once: an aborted or failed
    // answer ends its turn, so a partial saved after it with no message since is its own.
    let ended = matches!(last_exchange(history), Some(AgentMessage::Assistant(a))
        if matches!(a.stop_reason, StopReason::Aborted | StopReason::Error));
    let partial = partial.filter(|p| !ended && last_answer.is_none_or(|a| a.content != p.content));
    if let Some(mut partial) = partial.filter(|p| !p.content.is_empty()) {
        partial.stop_reason = StopReason::Interrupted;
        messages.push(AgentMessage::Assistant(partial));
    }
    for call in pending_calls(history)
        .into_iter()
        .filter(|c| !rerun(&c.name))
    {
        messages.push(AgentMessage::ToolResult(ToolResult {
            tool_call_id: call.id,
            tool_name: call.name,
            content: INTERRUPTED.to_string(),
            is_error: true,
        }));
    }
    let last_seen = history.iter().rev().find(|m| m.to_llm().is_some());
    let answered = matches!(last_seen, Some(AgentMessage::Assistant(a))
        if a.tool_calls().next().is_none() && !matches!(a.stop_reason, StopReason::Error | StopReason::Aborted | StopReason::Interrupted));
    // Cancelled: the aborted answer is the last word (a message after it starts another turn).
    let cancelled = !messages
        .iter()
        .any(|m| matches!(m, AgentMessage::Assistant(_)))
        && matches!(last_exchange(history), Some(AgentMessage::Assistant(a)) if a.stop_reason == StopReason::Aborted);
    if messages.is_empty() && answered {
        Recovery::Answered
    } else if cancelled {
        Recovery::Closed(messages)
    } else {
        Recovery::Continue(messages)
    }
}

/// Whether an inbox message whose D1 row has `seq` was stored before the history was read (a
/// crash came between its write and its leaving the inbox), so the history holds it already:
/// a row written now gets a `seq` past every row read, whose newest is `newest_read`.
pub fn stored_before(seq: i64, newest_read: Option<i64>) -> bool {
    newest_read.is_some_and(|newest| seq <= newest)
}

/// How long a request that claimed an idempotency key has to have its message taken: another
/// request with the key meanwhile is a 409, and after it the claim is taken for abandoned (its
/// request failed before the message was taken).
pub const KEY_CLAIM_MS: i64 = 10_000;

/// Whether an idempotency key's claim (made at `at`, its message `accepted` or not) belongs to
/// a request still being handled.
pub fn key_in_flight(accepted: bool, at: i64, now: i64) -> bool {
    !accepted && now - at < KEY_CLAIM_MS
}

/// Why a given-up turn failed, as a schedule that started it records.
pub fn given_up_reason() -> String {
    format!(
        "the turn was interrupted {MAX_RECOVERIES} times (the runtime restarted or evicted the \
         conversation mid-turn) and was stopped"
    )
}

/// The message a given-up turn leaves in the history.
pub fn given_up_note() -> AgentMessage {
    AgentMessage::SystemEvent {
        text: format!(
            "This turn was interrupted {MAX_RECOVERIES} times (the runtime restarted or evicted the \
             conversation mid-turn) and was stopped. Send the message again to retry."
        ),
        schedule: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{ContentBlock, ToolCall, Usage};

    #[test]
    fn a_queue_that_keeps_failing_to_start_is_tried_a_bounded_number_of_times() {
        let tries: Vec<FailedStart> = (1..=MAX_FAILED_STARTS).map(after_failed_start).collect();
        assert_eq!(
            tries.iter().filter(|t| **t == FailedStart::Later).count(),
            4
        );
        assert_eq!(tries.last(), Some(&FailedStart::Wait));
        assert_eq!(after_failed_start(MAX_FAILED_STARTS + 7), FailedStart::Wait);
    }

    fn answer(text: &str, calls: &[&str]) -> AgentMessage {
        let mut content = vec![ContentBlock::Text { text: text.into() }];
        for id in calls {
            content.push(ContentBlock::ToolUse(ToolCall {
                id: (*id).into(),
                name: "current_time".into(),
                input: serde_json::json!({}),
                signature: None,
            }));
        }
        AgentMessage::Assistant(AssistantMessage {
            content,
            stop_reason: if calls.is_empty() {
                StopReason::EndTurn
            } else {
                StopReason::ToolUse
            },
            model: "m".into(),
            provider: "p".into(),
            usage: Usage::default(),
            output: None,
        })
    }

    fn result(id: &str) -> AgentMessage {
        AgentMessage::ToolResult(ToolResult {
            tool_call_id: id.into(),
            tool_name: "current_time".into(),
            content: "noon".into(),
            is_error: false,
        })
    }

    #[test]
    fn a_task_of_this_isolate_means_running_a_record_without_one_means_orphaned() {
        assert_eq!(activity(false, false), Activity::Idle);
        assert_eq!(activity(true, true), Activity::Running);
        assert_eq!(activity(true, false), Activity::Orphaned);
    }

    #[test]
    fn messages_start_a_turn_or_wait_and_an_orphaned_turn_is_recovered_at_once() {
        assert_eq!(on_message(Activity::Idle), OnMessage::StartTurn);
        assert_eq!(on_message(Activity::Running), OnMessage::Queue);
        assert_eq!(on_message(Activity::Orphaned), OnMessage::QueueAndRecover);
        assert_eq!(on_exclusive(Activity::Idle), OnExclusive::StartTurn);
        assert_eq!(on_exclusive(Activity::Running), OnExclusive::Busy);
        assert_eq!(
            on_exclusive(Activity::Orphaned),
            OnExclusive::BusyAndRecover
        );
    }

    #[test]
    fn every_ending_with_a_queue_starts_the_next_turn() {
        for paused in [
            None,
            Some(PauseKind::ToolResults),
            Some(PauseKind::Approval),
        ] {
            assert_eq!(after_turn(paused, 1, false), AfterTurn::NextTurn);
            assert_eq!(after_turn(paused, 0, false), AfterTurn::Idle { paused });
            // A conversation being deleted neither runs its queue nor stays paused.
            assert_eq!(
                after_turn(paused, 3, true),
                AfterTurn::Idle { paused: None }
            );
        }
    }

    #[test]
    fn the_alarm_rearms_for_a_live_turn_recovers_an_orphan_and_runs_a_forgotten_queue() {
        assert_eq!(on_alarm(Activity::Running, 0, 2), OnAlarm::Rearm);
        assert_eq!(
            on_alarm(Activity::Orphaned, 0, 0),
            OnAlarm::Orphan(Orphan::Recover { attempt: 1 })
        );
        assert_eq!(
            on_alarm(Activity::Orphaned, MAX_RECOVERIES - 1, 0),
            OnAlarm::Orphan(Orphan::Recover {
                attempt: MAX_RECOVERIES
            })
        );
        assert_eq!(
            on_alarm(Activity::Orphaned, MAX_RECOVERIES, 0),
            OnAlarm::Orphan(Orphan::GiveUp)
        );
        assert_eq!(on_alarm(Activity::Idle, 0, 1), OnAlarm::StartQueued);
        assert_eq!(on_alarm(Activity::Idle, 0, 0), OnAlarm::Nothing);
    }

    #[test]
    fn one_alarm_serves_the_heartbeat_and_the_next_schedule() {
        let now = 1_000_000;
        // Nothing runs, nothing is scheduled: no alarm.
        assert_eq!(alarm_at(now, false, None), None);
        // A turn runs: the heartbeat, or the schedule if it comes first.
        assert_eq!(alarm_at(now, true, None), Some(now + ALARM_MS));
        assert_eq!(alarm_at(now, true, Some(now + 5_000)), Some(now + 5_000));
        assert_eq!(
            alarm_at(now, true, Some(now + 90_000)),
            Some(now + ALARM_MS)
        );
        // A schedule due while a turn runs waits for it: only the heartbeat.
        assert_eq!(alarm_at(now, true, Some(now - 1)), Some(now + ALARM_MS));
        // Idle: the schedule's time; an overdue one that did not start is tried again later,
        // never in a tight loop.
        assert_eq!(alarm_at(now, false, Some(now + 5_000)), Some(now + 5_000));
        assert_eq!(alarm_at(now, false, Some(now)), Some(now + ALARM_MS));
    }

    #[test]
    fn recovery_keeps_the_partial_answer_marked_interrupted_and_answers_open_calls() {
        let history = vec![
            AgentMessage::user_text("what time is it?"),
            answer("Checking.", &["a", "b"]),
            result("a"),
        ];
        let Recovery::Continue(stored) = recovery(&history, None, &|_| false) else {
            panic!("an unanswered call needs the model again");
        };
        assert_eq!(stored.len(), 1);
        assert!(
            matches!(&stored[0], AgentMessage::ToolResult(r) if r.tool_call_id == "b" && r.is_error && r.content == INTERRUPTED)
        );
        // An agent tool's open call is left open: the recovered turn runs it again, which
        // reaches the same child.
        assert_eq!(
            recovery(&history, None, &|name| name == "current_time"),
            Recovery::Continue(vec![])
        );

        let history = vec![AgentMessage::user_text("tell me a story")];
        let AgentMessage::Assistant(partial) = answer("Once upon", &[]) else {
            unreachable!()
        };
        let Recovery::Continue(stored) = recovery(&history, Some(partial), &|_| false) else {
            panic!("a partial answer needs the model again");
        };
        assert!(
            matches!(&stored[..], [AgentMessage::Assistant(a)] if a.stop_reason == StopReason::Interrupted && a.text() == "Once upon")
        );
        // An empty partial is not stored.
        let AgentMessage::Assistant(mut empty) = answer("", &[]) else {
            unreachable!()
        };
        empty.content.clear();
        assert_eq!(
            recovery(&history, Some(empty), &|_| false),
            Recovery::Continue(vec![])
        );
    }

    #[test]
    fn a_turn_whose_answer_was_stored_whole_is_not_run_again() {
        let history = vec![
            AgentMessage::user_text("hi"),
            answer("Hello!", &[]),
            AgentMessage::ContextNote {
                text: "not seen by the model".into(),
            },
        ];
        assert_eq!(recovery(&history, None, &|_| false), Recovery::Answered);
        // A failed answer is not an answer.
        let AgentMessage::Assistant(mut failed) = answer("Hel", &[]) else {
            unreachable!()
        };
        failed.stop_reason = StopReason::Error;
        let history = vec![
            AgentMessage::user_text("hi"),
            AgentMessage::Assistant(failed),
        ];
        assert_eq!(
            recovery(&history, None, &|_| false),
            Recovery::Continue(vec![])
        );
    }

    #[test]
    fn a_partial_answer_already_stored_is_not_stored_again_and_a_cancelled_turn_stays_so() {
        // Cancelled mid-answer, the runtime dying before the saved copy was cleared: the
        // answer is in D1, aborted.
        let AgentMessage::Assistant(mut cut) = answer("Checking.", &["a"]) else {
            unreachable!()
        };
        cut.stop_reason = StopReason::Aborted;
        let history = vec![
            AgentMessage::user_text("what time is it?"),
            AgentMessage::Assistant(cut.clone()),
        ];
        // Nothing to store (an aborted answer's calls are never replayed, so none is open),
        // and no model to call; a partial saved a little before the end is that answer too.
        assert_eq!(
            recovery(&history, Some(cut.clone()), &|_| false),
            Recovery::Closed(vec![])
        );
        let mut earlier = cut.clone();
        earlier.content.truncate(0);
        earlier.content.push(crate::llm::ContentBlock::Text {
            text: "Check".into(),
        });
        assert_eq!(
            recovery(&history, Some(earlier), &|_| false),
            Recovery::Closed(vec![])
        );
        // A message after the cancelled answer is a new turn: it is answered.
        let mut next = history.clone();
        next.push(AgentMessage::user_text("and now?"));
        assert_eq!(
            recovery(&next, None, &|_| false),
            Recovery::Continue(vec![])
        );
        // A failed answer stored whole is not stored again either; the model is called again.
        let AgentMessage::Assistant(mut failed) = answer("Hel", &[]) else {
            unreachable!()
        };
        failed.stop_reason = StopReason::Error;
        let history = vec![
            AgentMessage::user_text("hi"),
            AgentMessage::Assistant(failed.clone()),
        ];
        assert_eq!(
            recovery(&history, Some(failed), &|_| false),
            Recovery::Continue(vec![])
        );
    }

    #[test]
    fn an_inbox_message_stored_before_the_read_is_not_shown_twice() {
        // History read up to seq 12; the inbox message's row is 9: stored before a crash.
        assert!(stored_before(9, Some(12)));
        assert!(stored_before(12, Some(12)));
        // Written now: past everything read, or into an empty history.
        assert!(!stored_before(13, Some(12)));
        assert!(!stored_before(1, None));
    }

    #[test]
    fn a_keys_claim_holds_while_its_request_runs_and_not_after() {
        assert!(key_in_flight(false, 1_000, 1_000 + KEY_CLAIM_MS - 1));
        // Taken: a repeat now re-attaches or gets what was stored.
        assert!(!key_in_flight(true, 1_000, 1_001));
        // Abandoned (its request failed before taking the message): a new send may claim it.
        assert!(!key_in_flight(false, 1_000, 1_000 + KEY_CLAIM_MS));
    }
}
