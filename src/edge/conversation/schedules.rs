//! The conversation's scheduled turns in its object: kept in its storage (made by the API's
//! routes and the model's `schedules` tools alike), started when due as a message's turn would
//! be, their outcomes recorded when the turn ends.
//!
//! A due schedule starts a turn only when the conversation is free: the alarm fires at its time,
//! and one due while a turn runs starts when that turn ends (after messages that waited for it).
//! Its instruction is held in the inbox as the turn's first message (a `system_event` naming the
//! schedule), so an object that dies before the turn stores it still finds it.
//!
//! Besides the schedules it keeps, the object remembers when schedules were made over the last
//! day (a mark), so `MAX_SCHEDULES_PER_DAY` counts those cancelled or run since: a turn that
//! schedules itself again stops there. Retention (`RETENTION_DAYS`) asks the object through
//! `GET /schedules` whether a run is still to come before it deletes an idle conversation.

use std::rc::Rc;

use worker::{console_error, Method, Request, Response};

use super::Object;
use crate::agent::schedules::{
    made_within_day, new_schedule, Finished, Limits, RunOutcome, Schedule, ScheduleError,
    ScheduleStore,
};
use crate::agent::{AgentMessage, TurnOutcome};
use crate::edge::conversation::storage::ObjectStorage;
use crate::edge::conversation::turn::{choose_model, Kickoff, Start};
use crate::edge::error::ApiError;
use crate::edge::json_response;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::ids::new_id;
use crate::edge::platform::rate_limit;
use crate::edge::protocol::ScheduleHandover;

/// The object's storage as the model's tools and the API see the schedules.
pub struct ObjectSchedules {
    pub storage: Rc<ObjectStorage>,
    pub limits: Limits,
}

impl ScheduleStore for ObjectSchedules {
    fn create(
        &self,
        request: crate::agent::schedules::ScheduleRequest,
    ) -> Result<Schedule, ScheduleError> {
        let now = now_ms();
        let kept = self.list()?.iter().filter(|s| s.counts()).count();
        let mut made = made_within_day(&self.storage.schedules_made().map_err(storage)?, now);
        let id = new_id().map_err(|e| ScheduleError::Storage(e.to_string()))?;
        let schedule = new_schedule(request, id, now, &self.limits, kept, &made)?;
        // Counted before it is kept: a failure between the two writes spends a place of the
        // day's rather than giving one away.
        made.push(now);
        self.storage.set_schedules_made(&made).map_err(storage)?;
        self.storage.put_schedule(&schedule).map_err(storage)?;
        Ok(schedule)
    }

    fn list(&self) -> Result<Vec<Schedule>, ScheduleError> {
        self.storage.schedules().map_err(storage)
    }

    fn cancel(&self, id: &str) -> Result<(), ScheduleError> {
        match self.storage.delete_schedule(id).map_err(storage)? {
            true => Ok(()),
            false => Err(ScheduleError::NotFound(id.to_string())),
        }
    }

    fn model_needs_approval(&self) -> bool {
        self.limits.approval
    }
}

fn storage(e: worker::Error) -> ScheduleError {
    ScheduleError::Storage(e.to_string())
}

impl From<ScheduleError> for ApiError {
    fn from(e: ScheduleError) -> Self {
        match e {
            ScheduleError::Invalid(_) => ApiError::BadRequest(e.to_string()),
            ScheduleError::TooMany { .. } => ApiError::Conflict(e.to_string()),
            ScheduleError::TooManyToday { retry_after_s, .. } => ApiError::TooManyRequests {
                message: e.to_string(),
                retry_after_s,
            },
            ScheduleError::NotFound(_) => ApiError::NotFound(e.to_string()),
            ScheduleError::Storage(_) => ApiError::Internal(e.to_string()),
        }
    }
}

/// How a turn's ending counts for the schedule that started it.
pub fn run_outcome(outcome: &TurnOutcome) -> RunOutcome {
    match outcome {
        TurnOutcome::Failed { message, .. } => RunOutcome::Failed(message.clone()),
        TurnOutcome::Cancelled => RunOutcome::Cancelled,
        TurnOutcome::LimitReached(which) => RunOutcome::LimitReached(which.clone()),
        TurnOutcome::Completed
        | TurnOutcome::Stopped
        | TurnOutcome::HandedOff(_)
        | TurnOutcome::AwaitingToolResults(_)
        | TurnOutcome::AwaitingApproval(_) => RunOutcome::Completed,
    }
}

impl Object {
    fn schedule_store(&self) -> Result<ObjectSchedules, ApiError> {
        Ok(ObjectSchedules {
            storage: self.storage.clone(),
            limits: self.turn_env()?.config.schedule_limits,
        })
    }

    /// `POST /schedules` (a [`ScheduleHandover`]), `GET /schedules`, `DELETE /schedules/{id}`.
    pub(super) async fn schedules_route(
        self: &Rc<Self>,
        mut req: Request,
        id: Option<&str>,
    ) -> Result<Response, ApiError> {
        if let Some(deleted) = self.storage.deleted()? {
            return Err(ApiError::conversation_not_found(&deleted.conversation));
        }
        match (req.method(), id) {
            (Method::Post, None) => {
                let handover: ScheduleHandover = crate::llm::json::from_str(&req.text().await?)
                    .map_err(|e| ApiError::Internal(format!("a malformed hand-over: {e}")))?;
                // A sub-agent's conversation runs its parent's tasks only: a turn of its own
                // would take it off a pause its parent waits on.
                let kept = self.storage.conversation()?;
                if let Some(parent) = kept
                    .as_ref()
                    .unwrap_or(&handover.conversation)
                    .parent
                    .as_deref()
                {
                    return Err(ApiError::Conflict(format!(
                        "conversation `{}` is a sub-agent's: it runs the tasks of the conversation \
                         that asks it (`{parent}`), not schedules",
                        handover.conversation.id
                    )));
                }
                // A conversation with no message yet: its turns will need its row.
                self.know_shard(&handover.conversation.owner).await?;
                if self.storage.conversation()?.is_none() {
                    self.storage.set_conversation(&handover.conversation)?;
                }
                let schedule = self.schedule_store()?.create(handover.request)?;
                self.rearm();
                json_response(201, &schedule)
            }
            (Method::Get, None) => {
                let schedules = self.schedule_store()?.list()?;
                json_response(200, &serde_json::json!({ "schedules": schedules }))
            }
            (Method::Delete, Some(id)) => {
                self.schedule_store()?.cancel(id)?;
                self.rearm();
                Ok(Response::empty()?.with_status(204))
            }
            _ => Err(ApiError::MethodNotAllowed(
                "schedules are created (POST), listed (GET) or cancelled (DELETE .../{id})".into(),
            )),
        }
    }

    /// The conversation is free: the schedule due first starts its turn; otherwise the alarm is
    /// set for the next one, or dropped. A schedule that failed to start is tried again by that
    /// alarm, a while later ([`rules::alarm_at`](super::rules::alarm_at)).
    pub(super) fn start_due_or_rest(self: &Rc<Self>) -> Result<(), ApiError> {
        let started = self.start_due_schedule();
        if !matches!(started, Ok(true)) {
            self.drop_alarm();
        }
        started.map(|_| ())
    }

    /// Starts the turn of the schedule due first, if one is due and the conversation is free
    /// (the caller knows it is): `true` when one started.
    fn start_due_schedule(self: &Rc<Self>) -> Result<bool, ApiError> {
        let now = now_ms();
        if self.deleting.get() {
            return Ok(false);
        }
        let Some(mut schedule) = self.storage.due_schedule(now)? else {
            return Ok(false);
        };
        let Some(conversation) = self.storage.conversation()? else {
            return Err(ApiError::Internal(
                "the conversation object keeps a schedule but not its conversation".into(),
            ));
        };
        let turn_env = self.turn_env()?;
        let queued = self.storage.queued(None)?;
        schedule.start_run(now);
        self.storage.put_schedule(&schedule)?;
        let message = AgentMessage::SystemEvent {
            text: schedule.instruction.clone(),
            schedule: Some(schedule.id.clone()),
        };
        let message_id = new_id()?;
        let seq = self
            .storage
            .hold(&message_id, &serde_json::to_string(&message)?, now)?;
        let claimed = self.claim(0, (&[], None), Some(new_id()?), None)?;
        let chosen = match choose_model(&turn_env, &conversation, &claimed.signal) {
            Ok(chosen) => chosen,
            Err(e) => {
                self.refuse(&claimed, seq, &e);
                return Ok(true);
            }
        };
        let start = Start {
            kickoff: Kickoff::Queued,
            queued,
            own: Some((message_id, message, seq)),
            narrowed: None,
            output: None,
            settled: self.storage.paused()?.is_none(),
            create: None,
            create_within: None,
            first_call: None,
        };
        let object = self.clone();
        self.state.wait_until(async move {
            // The owner's rate limit counts a scheduled turn as it counts a message.
            let limited =
                rate_limit::check(&turn_env.env, &turn_env.config, &conversation.owner).await;
            if let Err(e) = limited {
                object.refuse(&claimed, seq, &e);
                return;
            }
            object
                .prepare_and_run(turn_env, claimed, conversation, start, Vec::new(), chosen)
                .await;
        });
        Ok(true)
    }

    /// Records how the scheduled turn that just ended went, if a schedule started it; a
    /// recurring schedule that failed too often in a row pauses, one that reached its end
    /// (`max_runs`, `until`) is done, and the history says so.
    pub(super) fn record_schedule_run(self: &Rc<Self>, outcome: RunOutcome) {
        let mut schedule = match self.storage.running_schedule() {
            Ok(Some(schedule)) => schedule,
            Ok(None) => return,
            Err(e) => {
                console_error!("reading the running schedule: {e}");
                return;
            }
        };
        let finished = schedule.finish_run(&outcome);
        if let Err(e) = self.storage.put_schedule(&schedule) {
            console_error!("recording schedule {}'s run: {e}", schedule.id);
        }
        let (text, what) = match finished {
            Finished::Recorded => return,
            Finished::Paused => (schedule.paused_note(), "paused"),
            Finished::Ended => (schedule.ended_note(), "ended"),
        };
        let (Ok(Some(conversation)), Ok(turn_env)) = (self.storage.conversation(), self.turn_env())
        else {
            return;
        };
        let note = AgentMessage::SystemEvent {
            text,
            schedule: None,
        };
        self.state.wait_until(async move {
            if let Err(e) = turn_env.store.append_new(&conversation.id, &note).await {
                console_error!("noting the {what} schedule in {}: {e}", conversation.id);
            }
        });
    }
}
