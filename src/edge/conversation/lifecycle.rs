//! A turn's life in the object: claimed, prepared, run as work of the object, finished (the
//! queue looked at in the same step), abandoned when it cannot start, recovered by the alarm
//! when the runtime died under it.

use super::report::log_turn;
use super::schedules::run_outcome;
use super::{Claimed, Live, Object};
use crate::agent::schedules::RunOutcome;
use crate::agent::{AgentMessage, CancelToken, TurnOutcome};
use crate::edge::conversation::replay::ChunkLog;
use crate::edge::conversation::rules::{AfterTurn, FailedStart, OnAlarm, Orphan, PauseKind};
use crate::edge::conversation::storage::FAILED_STARTS;
use crate::edge::conversation::turn::{
    choose_model, prepare, Kickoff, Prepared, Ready, Start, TurnEnv, TurnResult,
};
use crate::edge::conversation::{rules, ui_stream};
use crate::edge::d1::Conversation;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::ids::new_id;
use crate::edge::protocol::TurnConversation;
use crate::llm::{ModelRef, Provider, ToolDef};
use futures::channel::oneshot;
use std::cell::Cell;
use std::rc::Rc;
use worker::{console_error, AbortController};

impl Object {
    /// Takes the conversation for a new turn, synchronously: from here on messages queue.
    pub(super) fn claim(
        &self,
        recoveries: u32,
        offered: (&[ToolDef], Option<&serde_json::Value>),
        message_id: Option<String>,
        request_id: Option<&str>,
    ) -> std::result::Result<Claimed, ApiError> {
        let sql_before = self.storage.statements();
        let turn_id = new_id()?;
        self.storage
            .begin_turn(&turn_id, now_ms(), recoveries, offered)?;
        let log = Rc::new(ChunkLog::new(self.storage.clone()));
        let abort = AbortController::default();
        let signal = abort.signal();
        let cancel = CancelToken::default();
        *self.live.borrow_mut() = Some(Live {
            turn_id: turn_id.clone(),
            cancel: cancel.clone(),
            abort: Some(abort),
            log: log.clone(),
            started_by: None,
        });
        self.keep_alarm();
        Ok(Claimed {
            turn_id,
            started_at: now_ms(),
            requests_before: self.requests.get(),
            d1_before: self.turn_env()?.store.round_trips(),
            sql_before,
            sql_ended: Cell::new(None),
            cancel,
            signal,
            log,
            message_id,
            announced: Cell::new(false),
            request_id: request_id.filter(|r| !r.is_empty()).map(str::to_string),
            traceparent: None,
        })
    }

    /// Runs a prepared turn as work of the object; its end step follows synchronously.
    /// `answered`: the request being handled is answered once this returns (its response the
    /// turn's stream), and the turn lets that response leave first.
    pub(super) fn run(
        self: &Rc<Self>,
        turn_env: Rc<TurnEnv>,
        claimed: Claimed,
        prepared: Prepared,
        summary: Option<oneshot::Sender<TurnResult>>,
        answered: bool,
    ) {
        if let Err(e) = self.storage.clear_paused() {
            console_error!("clearing the pause: {e}");
        }
        let object = self.clone();
        let of = prepared.conversation();
        let who = (of.id.clone(), of.owner.clone());
        self.state.wait_until(async move {
            // Until the provider's request is sent the turn runs without a pause (on a new
            // isolate, compiling all the code it runs): one timer turn first lets the response
            // (and its `start`) leave before it, not after.
            if answered {
                worker::Delay::from(std::time::Duration::ZERO).await;
            }
            let mut result = prepared
                .run(
                    &turn_env,
                    claimed.cancel.clone(),
                    claimed.signal.clone(),
                    claimed.log.clone(),
                    (
                        claimed.reference(),
                        &claimed.turn_id,
                        claimed.message_id.as_deref(),
                    ),
                    claimed.traceparent.as_deref(),
                )
                .await;
            match &result.unstored {
                // Not stored, its messages wait for the alarm (so often in a row), as if the
                // turn had not started: a D1 that refuses writes does not loop on the model.
                Some(why) => object.abandon(&claimed, &ApiError::Internal(why.clone())),
                None => {
                    if let Err(e) = object.storage.clear_mark(FAILED_STARTS) {
                        console_error!("clearing the failed starts: {e}");
                    }
                    let offered = (result.client_tools.as_slice(), result.output.as_ref());
                    object.finish(&claimed, &result.outcome, offered);
                }
            }
            log_turn(&claimed, &result, &object, &turn_env, &who);
            let (extract, embed) = (result.extract.take(), result.embed.take());
            // A turn whose messages were not stored runs again later: its trace is not sent.
            let trace = result.trace.take().filter(|_| result.unstored.is_none());
            if let Some(tx) = summary {
                let _ = tx.send(result);
            }
            // The stream has ended (`finish` closed it): memory is kept after it, never on the
            // way to the answer.
            if extract.is_some() || embed.is_some() {
                // Behind a `dyn Future`: compiled as code of its own, for the turns that keep
                // memory only.
                let remembering: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> =
                    Box::pin(crate::edge::conversation::turn::extract::after_stream(
                        turn_env.clone(),
                        embed,
                        extract,
                    ));
                remembering.await;
            }
            // Sent after the answer and after memory: never on the way to a token.
            if let Some(trace) = trace {
                let exporting: std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> =
                    Box::pin(trace.send());
                exporting.await;
            }
        });
    }

    /// Starts a turn nobody waits on (queued messages, a recovery) as work of the object.
    pub(super) fn start_background(
        self: &Rc<Self>,
        kickoff: Kickoff,
        recoveries: u32,
        (client_tools, output): (Vec<ToolDef>, Option<serde_json::Value>),
    ) -> std::result::Result<(), ApiError> {
        let Some(conversation) = self.storage.conversation()? else {
            return Err(ApiError::Internal(
                "the conversation object does not know its conversation".into(),
            ));
        };
        let turn_env = self.turn_env()?;
        let offered = (client_tools.as_slice(), output.as_ref());
        let claimed = self.claim(recoveries, offered, Some(new_id()?), None)?;
        let chosen = match choose_model(&turn_env, &conversation, &claimed.signal) {
            Ok(chosen) => chosen,
            Err(e) => {
                self.abandon(&claimed, &e);
                return Err(e);
            }
        };
        // The D1 row is created unless it exists: a `/v1/chat` conversation's first message may
        // be kept here while the write that creates its row failed.
        let now = now_ms();
        let create = Conversation {
            id: conversation.id.clone(),
            owner: conversation.owner.clone(),
            title: None,
            system: conversation.system.clone(),
            model: conversation.model.clone(),
            metadata: None,
            toolsets: conversation.toolsets.clone(),
            agent: conversation.agent.clone(),
            created_at: now,
            updated_at: now,
            parent: None,
            tool_call_id: None,
            memory: conversation.memory,
        };
        let start = Start {
            kickoff,
            queued: self.storage.queued(None)?,
            own: None,
            narrowed: None,
            // A recovered turn's message's (kept with the turn).
            output,
            // It may follow a turn that just paused.
            settled: false,
            create: Some(create),
            // Its first message was accepted already.
            create_within: None,
            first_call: None,
        };
        let object = self.clone();
        self.state.wait_until(async move {
            object
                .prepare_and_run(turn_env, claimed, conversation, start, client_tools, chosen)
                .await;
        });
        Ok(())
    }

    pub(super) async fn prepare_and_run(
        self: Rc<Self>,
        turn_env: Rc<TurnEnv>,
        claimed: Claimed,
        conversation: TurnConversation,
        start: Start,
        client_tools: Vec<ToolDef>,
        chosen: (ModelRef, Rc<dyn Provider>),
    ) {
        let prepared = prepare(
            &turn_env,
            &conversation,
            start,
            client_tools,
            chosen,
            &claimed.signal,
        )
        .await;
        if let Ok(Some(prepared)) = self.settle_prepared(&claimed, prepared, Some(&conversation.id))
        {
            claimed.announce();
            self.run(turn_env, claimed, *prepared, None, false)
        }
    }

    /// Settles the ways a prepared turn may not run: nothing to answer (the turn is finished,
    /// `Ok(None)`) or a failure (the turn is abandoned, `Err`). With `streamed` (the
    /// conversation's id) the failure is logged and a reader of the stream learns why it ends;
    /// otherwise the caller answers with the error.
    pub(super) fn settle_prepared(
        self: &Rc<Self>,
        claimed: &Claimed,
        ready: std::result::Result<Ready, ApiError>,
        streamed: Option<&str>,
    ) -> std::result::Result<Option<Box<Prepared>>, ApiError> {
        match ready {
            Ok(Ready::Run(prepared)) => Ok(Some(prepared)),
            Ok(Ready::Nothing) => {
                self.finish(claimed, &TurnOutcome::Completed, (&[], None));
                Ok(None)
            }
            // Ended as a failure, so that a schedule that started the turn records one.
            Ok(Ready::GivenUp) => {
                let outcome = TurnOutcome::Failed {
                    message: rules::given_up_reason(),
                    is_retryable: false,
                };
                self.finish(claimed, &outcome, (&[], None));
                Ok(None)
            }
            Err(e) => {
                if let Some(conversation) = streamed {
                    console_error!("{}", e.log_line(claimed.reference(), "turn", conversation));
                    claimed.announce();
                    let mut out = String::new();
                    ui_stream::failed_to_start(&e.public_message(claimed.reference()), &mut out);
                    claimed.log.push(&out, now_ms());
                }
                self.abandon(claimed, &e);
                Err(e)
            }
        }
    }

    /// The end step of every turn, synchronous so no message can slip between "the turn ends"
    /// and "the queue is looked at": queued messages start the next turn at once.
    pub(super) fn finish(
        self: &Rc<Self>,
        claimed: &Claimed,
        outcome: &TurnOutcome,
        (client_tools, output): (&[ToolDef], Option<&serde_json::Value>),
    ) {
        claimed.log.close();
        if !self.release(claimed) {
            return;
        }
        let paused = match outcome {
            TurnOutcome::AwaitingToolResults(_) => Some(PauseKind::ToolResults),
            TurnOutcome::AwaitingApproval(_) => Some(PauseKind::Approval),
            _ => None,
        };
        // The calls waiting for approval, kept: those of sub-agents are in no history, and a
        // parent asks a paused child which they are.
        let waiting: &[_] = match outcome {
            TurnOutcome::AwaitingApproval(calls) => calls,
            _ => &[],
        };
        let queued = self.storage.queue_len(None).unwrap_or(0) as usize;
        let next = rules::after_turn(paused, queued, self.deleting.get());
        let ended = match next {
            AfterTurn::Idle { paused } => self
                .storage
                .end_turn(paused.map(|kind| (kind, client_tools, output)), waiting),
            AfterTurn::NextTurn => self.storage.end_turn(None, &[]),
        };
        if let Err(e) = ended {
            console_error!("ending turn {}: {e}", claimed.turn_id);
        }
        claimed.sql_ended.set(Some(self.storage.statements()));
        self.record_schedule_run(run_outcome(outcome));
        if matches!(next, AfterTurn::Idle { .. }) {
            // A schedule that came due meanwhile starts now; otherwise the conversation rests.
            if let Err(e) = self.start_due_or_rest() {
                console_error!("starting a due schedule: {e}; the alarm will");
            }
        }
        if next == AfterTurn::NextTurn {
            if let Err(e) = self.start_background(Kickoff::Queued, 0, Default::default()) {
                console_error!("starting the next turn: {e}; the alarm will");
                self.keep_alarm();
            }
        }
    }

    /// A turn refused before any work (its model, the owner's rate limit): the message that was
    /// to start it is not kept either (`held`: its place in the inbox), and the conversation is
    /// free again.
    pub(super) fn refuse(self: &Rc<Self>, claimed: &Claimed, held: Option<i64>, why: &ApiError) {
        if let Some(seq) = held {
            if let Err(e) = self.storage.dequeue(seq) {
                console_error!("dropping a refused turn's message: {e}");
            }
        }
        self.abandon(claimed, why);
    }

    /// A turn that could not start (`why`): the conversation is free again. Queued messages are
    /// left for the alarm rather than retried at once, so a failing store cannot spin, and only
    /// so often in a row ([`rules::after_failed_start`]): then they wait for the next message,
    /// and the history says why.
    pub(super) fn abandon(self: &Rc<Self>, claimed: &Claimed, why: &ApiError) {
        claimed.log.close();
        if !self.release(claimed) {
            return;
        }
        if let Err(e) = self.storage.end_turn(None, &[]) {
            console_error!("ending turn {}: {e}", claimed.turn_id);
        }
        self.record_schedule_run(RunOutcome::Failed(why.public_message(claimed.reference())));
        let waiting = self.storage.queue_len(None).unwrap_or(0);
        if waiting == 0 {
            return;
        }
        let failed = self
            .storage
            .mark(FAILED_STARTS)
            .ok()
            .flatten()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(0)
            + 1;
        if let Err(e) = self.storage.set_mark(FAILED_STARTS, &failed.to_string()) {
            console_error!("counting a failed start: {e}");
        }
        if rules::after_failed_start(failed) == FailedStart::Later {
            self.keep_alarm();
            return;
        }
        self.drop_alarm();
        let text = format!(
            "{waiting} waiting message(s) could not start a turn ({failed} attempts; the last: {}); \
             they wait for the next message",
            why.public_message(claimed.reference())
        );
        let Some(conversation) = self.storage.conversation().ok().flatten() else {
            return;
        };
        let Ok(turn_env) = self.turn_env() else {
            return;
        };
        self.state.wait_until(async move {
            let event = AgentMessage::SystemEvent {
                text,
                schedule: None,
            };
            if let Err(e) = turn_env.store.append_new(&conversation.id, &event).await {
                console_error!("noting the failed starts of {}: {e}", conversation.id);
            }
        });
    }

    /// Forgets the live turn if it is `claimed`'s; `false` if another took its place.
    pub(super) fn release(&self, claimed: &Claimed) -> bool {
        let mut live = self.live.borrow_mut();
        if live.as_ref().map(|l| l.turn_id.as_str()) != Some(claimed.turn_id.as_str()) {
            return false;
        }
        *live = None;
        true
    }

    /// Resumes (or gives up) the turn storage records but no task runs.
    pub(super) fn recover_orphan(self: &Rc<Self>) -> std::result::Result<(), ApiError> {
        let Some(row) = self.storage.turn()? else {
            return Ok(());
        };
        let partial = row
            .partial
            .as_deref()
            .and_then(|p| crate::llm::json::from_str(p).ok());
        let recoveries = u32::try_from(row.recoveries).unwrap_or(u32::MAX);
        match rules::orphan(recoveries) {
            Orphan::Recover { attempt } => {
                worker::console_warn!(
                    "recovering interrupted turn {} (attempt {attempt})",
                    row.turn_id
                );
                self.start_background(Kickoff::Recover { partial }, attempt, row.offered())
            }
            Orphan::GiveUp => {
                self.start_background(Kickoff::GiveUp { partial }, recoveries, Default::default())
            }
        }
    }

    pub(super) fn alarm(self: &Rc<Self>) -> std::result::Result<(), ApiError> {
        if let Some(deleted) = self.storage.deleted()? {
            return self.finish_deletion(deleted);
        }
        let recoveries = self
            .storage
            .turn()?
            .map_or(0, |t| u32::try_from(t.recoveries).unwrap_or(u32::MAX));
        let queued = self.storage.queue_len(None)? as usize;
        match rules::on_alarm(self.activity()?, recoveries, queued) {
            OnAlarm::Nothing => {
                // Nothing runs: a schedule still marked running lost its turn before the turn
                // was recorded (a failed write), and counts that as a failed run.
                self.record_schedule_run(RunOutcome::Failed(
                    "its turn did not start (the conversation's storage failed)".into(),
                ));
                // The alarm served a schedule, or the next one's time is set again.
                self.start_due_or_rest()
            }
            OnAlarm::Rearm => {
                self.keep_alarm();
                Ok(())
            }
            OnAlarm::Orphan(_) => self.recover_orphan(),
            OnAlarm::StartQueued => self.start_background(Kickoff::Queued, 0, Default::default()),
        }
    }

    /// A turn runs (or waiting messages are to be retried): the alarm comes
    /// [`ALARM_MS`](super::ALARM_MS) ahead, or sooner for a schedule.
    pub(super) fn keep_alarm(&self) {
        self.set_alarm(true);
    }

    /// The conversation rests: the alarm serves only the next schedule, if any (storage calls
    /// run in the order they are made, so a turn claimed after this still gets its alarm).
    pub(super) fn drop_alarm(&self) {
        self.set_alarm(false);
    }

    /// Sets the alarm for what the object now holds (a schedule was added or cancelled).
    pub(super) fn rearm(&self) {
        let busy = self.activity().map_or(true, |a| a != rules::Activity::Idle)
            || self.storage.queue_len(None).map_or(true, |n| n > 0);
        self.set_alarm(busy);
    }

    fn set_alarm(&self, heartbeat: bool) {
        let next_due = self.storage.next_due().unwrap_or_else(|e| {
            console_error!("reading the next schedule: {e}");
            None
        });
        let now = now_ms();
        let at = rules::alarm_at(now, heartbeat, next_due);
        let storage = self.state.storage();
        self.state.wait_until(async move {
            let set = match at {
                Some(at) => storage.set_alarm((at - now).max(0)).await,
                None => storage.delete_alarm().await,
            };
            if let Err(e) = set {
                console_error!("setting the conversation alarm: {e}");
            }
        });
    }
}
