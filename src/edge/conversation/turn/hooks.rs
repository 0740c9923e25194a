//! The turn's hooks: every message stored in D1 as it is produced (an answer with its ledger
//! row), compactions recorded; and the object's inbox table as the loop's queues.

use super::artifact_store::SystemPrompt;
use crate::agent::{AgentMessage, Compaction, HookError, Queues, StepEndInfo, TurnHooks};
use crate::edge::config::Config;
use crate::edge::conversation::storage::ObjectStorage;
use crate::edge::conversation::turn::{HashSet, VecDeque};
use crate::edge::d1::{Store, UsageRow};
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::ids::new_id;
use crate::edge::protocol::Delivery;
use crate::llm::{ModelRef, Usage};
use async_trait::async_trait;
use futures::channel::oneshot;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use worker::{console_error, console_warn};

/// What the hooks and the queues share: the D1 sequence number of each message of the turn's
/// history (in the agent's order, for compaction), and the queued messages the queues handed to
/// the loop, which the loop passes to `on_message` next, in its own order (after the results of
/// calls a steering message skipped).
pub(super) struct Persisted {
    pub(super) seqs: RefCell<Vec<Option<i64>>>,
    /// (message, the id it was accepted under, its queue row).
    pub(super) handed_over: RefCell<VecDeque<(AgentMessage, String, i64)>>,
    /// Queue rows handed over in this turn: never handed over twice, even if storing one failed.
    pub(super) taken: RefCell<HashSet<i64>>,
    /// The turn's new messages, being written while the model is called.
    pub(super) pending: RefCell<Option<PendingWrite>>,
    /// Why writing them failed: nothing of the turn may be stored after them.
    pub(super) write_failed: RefCell<Option<String>>,
    /// An answer that could not be stored was charged (its ledger row written): what was saved
    /// of it for recovery is gone, and nothing more of it may be saved (recovery would charge it
    /// again).
    pub(super) charged: Cell<bool>,
    /// The id of the last answer stored (a typed answer's `message_id`; the id semantic recall
    /// keeps an answer's vector under).
    pub(super) last_answer: RefCell<Option<String>>,
}

/// A turn's new messages on their way to D1, written alongside the history's read and the first
/// LLM call rather than before them. They stay in the object's inbox until they are in D1 (the
/// write dequeues them), and anything the turn stores waits for them first, so history keeps
/// its order.
pub(super) struct PendingWrite {
    /// Each message's sequence number, or why the write failed.
    pub(super) stored: oneshot::Receiver<Result<Vec<Option<i64>>, String>>,
    /// Where the messages sit in the turn's history (they end it when the turn starts).
    pub(super) at: usize,
}

impl Persisted {
    pub(super) fn new(
        seqs: Vec<Option<i64>>,
        pending: Option<PendingWrite>,
        taken: HashSet<i64>,
    ) -> Self {
        Self {
            seqs: RefCell::new(seqs),
            handed_over: RefCell::default(),
            taken: RefCell::new(taken),
            pending: RefCell::new(pending),
            write_failed: RefCell::default(),
            charged: Cell::default(),
            last_answer: RefCell::default(),
        }
    }

    /// Waits for the turn's new messages to be in D1 and records where they are; an error once
    /// they cannot be, and for the rest of the turn.
    pub(super) async fn settle(&self) -> Result<(), HookError> {
        let pending = self.pending.borrow_mut().take();
        if let Some(pending) = pending {
            let stored = pending
                .stored
                .await
                .unwrap_or_else(|_| Err("the write was dropped".into()));
            match stored {
                Ok(stored) => {
                    let mut seqs = self.seqs.borrow_mut();
                    for (i, seq) in stored.into_iter().enumerate() {
                        if let Some(slot) = seqs.get_mut(pending.at + i) {
                            *slot = seq;
                        }
                    }
                }
                Err(e) => *self.write_failed.borrow_mut() = Some(e),
            }
        }
        match self.write_failed.borrow().as_ref() {
            Some(e) => Err(HookError(format!("storing the turn's new messages: {e}"))),
            None => Ok(()),
        }
    }
}

/// Persists every message the loop adds, as it is added (an answer with its usage and cost in
/// the owner's ledger, in one batch), and compactions.
pub(super) struct D1Hooks {
    pub(super) store: Rc<Store>,
    pub(super) conversation_id: String,
    pub(super) owner: String,
    pub(super) config: Rc<Config>,
    pub(super) storage: Rc<ObjectStorage>,
    pub(super) persisted: Rc<Persisted>,
    /// Why the last answer's ledger row (or the messages before it) could not be written;
    /// `on_step_end` stops the turn.
    /// (Shared by the hooks of each agent a turn runs as: a handoff does not forget it.)
    pub(super) ledger_failure: Rc<RefCell<Option<String>>>,
    pub(super) prompt: SystemPrompt,
}

impl D1Hooks {
    /// A paid call's own ledger row, at its model's prices; a failure is remembered, so the
    /// turn stops at its next step's end.
    async fn record_row(&self, model: &ModelRef, usage: &Usage) -> Result<(), HookError> {
        let row = UsageRow::of_call(&self.owner, model, usage, &self.config.models);
        let recorded = self
            .store
            .record_usage(&self.conversation_id, &row, now_ms())
            .await;
        if let Err(e) = &recorded {
            *self.ledger_failure.borrow_mut() = Some(e.to_string());
        }
        recorded.map_err(|e| HookError(e.to_string()))
    }
}

#[async_trait(?Send)]
impl TurnHooks for D1Hooks {
    /// The billing step: a ledger that cannot be written stops the turn (docs/design.md: the hook rules). The row was
    /// written with the answer, in the same D1 batch.
    async fn on_step_end(&self, _info: StepEndInfo<'_>) -> Result<bool, HookError> {
        match self.ledger_failure.borrow_mut().take() {
            Some(e) => Err(HookError(format!("storing the answer: {e}"))),
            None => Ok(true),
        }
    }

    async fn system_prompt(&self, _base: Option<&str>) -> Option<String> {
        self.prompt.build().await
    }

    async fn on_message(&self, message: &AgentMessage) -> Result<(), HookError> {
        if let Err(e) = self.persisted.settle().await {
            // Stored after the message it answers failed to be, an answer would stand alone:
            // the turn stops, and the message waits in the inbox for the next. Its call was
            // paid all the same (the spend object has its cost): the ledger gets its row.
            if let AgentMessage::Assistant(answer) = message {
                if answer.usage != Usage::default() {
                    match self.record_row(&answer.model_ref(), &answer.usage).await {
                        Ok(()) => {
                            // In the same step as the row: recovery must not find it to charge.
                            if let Err(e) = self.storage.set_partial(None) {
                                console_error!("clearing a charged partial answer: {e}");
                            }
                            self.persisted.charged.set(true);
                        }
                        Err(row) => {
                            console_error!("charging an answer that could not be stored: {row}");
                        }
                    }
                }
            }
            *self.ledger_failure.borrow_mut() = Some(e.to_string());
            self.persisted.seqs.borrow_mut().push(None);
            return Err(e);
        }
        let handed_over = {
            let mut queue = self.persisted.handed_over.borrow_mut();
            match queue.front() {
                Some((m, _, _)) if m == message => queue.pop_front(),
                _ => None,
            }
        };
        // A queued message is stored under the id it was accepted with (a repeat is harmless)
        // and leaves the queue only once it is in D1.
        let (id, queue_seq) = match handed_over {
            Some((_, id, queue_seq)) => (id, Some(queue_seq)),
            None => (new_id().map_err(|e| HookError(e.to_string()))?, None),
        };
        let stored = match message {
            // Every answer, a cancelled or failed one too, cost tokens: its ledger row goes in the
            // same batch.
            AgentMessage::Assistant(answer) => {
                let row = UsageRow {
                    owner: &self.owner,
                    model: &answer.model,
                    provider: &answer.provider,
                    usage: &answer.usage,
                    cost_usd: self.config.models.answer_cost(answer),
                };
                let stored = self
                    .store
                    .append_answer(&self.conversation_id, &id, message, &row, now_ms())
                    .await;
                if stored.is_ok() {
                    *self.persisted.last_answer.borrow_mut() = Some(id.clone());
                }
                if let Err(e) = &stored {
                    *self.ledger_failure.borrow_mut() = Some(e.to_string());
                    // Its conversation deleted under it (an erasure): charged all the same.
                    let charged = self
                        .store
                        .record_usage_of_deleted(&self.conversation_id, &row, now_ms())
                        .await;
                    if let Err(e) = charged {
                        console_error!("charging an answer that could not be stored: {e}");
                    }
                }
                stored
            }
            _ => {
                self.store
                    .append_message(&self.conversation_id, &id, message, now_ms())
                    .await
            }
        };
        if let (Ok(_), Some(queue_seq)) = (&stored, queue_seq) {
            if let Err(e) = self.storage.dequeue(queue_seq) {
                console_error!("dequeuing {id}: {e}");
            }
        }
        self.persisted
            .seqs
            .borrow_mut()
            .push(stored.as_ref().ok().copied());
        stored.map(|_| ()).map_err(|e| HookError(e.to_string()))
    }

    /// A call that left no answer in the history (a summary, an attempt given up on) is
    /// charged like an answer, in a ledger row of its own: written even when the turn's last
    /// message could not be (a row depends on no message, and the spend object has the cost).
    async fn on_unstored_call(&self, model: &ModelRef, usage: &Usage) -> Result<(), HookError> {
        if let Err(e) = self.persisted.settle().await {
            console_error!("a message before a paid call's ledger row was not stored: {e}");
        }
        self.record_row(model, usage).await?;
        // In the same step as the row: what was saved of the call for recovery (a typed
        // answer's invalid first try, whose step ends next) must not be charged again by a
        // recovery. The answer being tracked is kept: a retry's attempt given up on charges
        // here while its next attempt streams into the same step.
        if let Err(e) = self.storage.set_partial(None) {
            console_error!("clearing a charged partial answer: {e}");
        }
        Ok(())
    }

    /// D1 mirrors the compaction: the summary is stored and the rows it replaces are marked,
    /// in one batch; they stay readable and are never loaded for a turn again.
    async fn on_compaction(&self, compaction: &Compaction) -> Result<(), HookError> {
        self.persisted.settle().await?;
        let replaced: Vec<i64> = {
            let seqs = self.persisted.seqs.borrow();
            seqs.get(compaction.replaces.clone())
                .unwrap_or_default()
                .iter()
                .flatten()
                .copied()
                .collect()
        };
        let summary_id = new_id().map_err(|e| HookError(e.to_string()))?;
        let summary = compaction
            .summary
            .as_ref()
            .map(|s| (summary_id.as_str(), s));
        let seq = self
            .store
            .compact(&self.conversation_id, &replaced, summary, now_ms())
            .await
            .map_err(|e| HookError(e.to_string()))?;
        let mut seqs = self.persisted.seqs.borrow_mut();
        if compaction.replaces.end <= seqs.len() {
            seqs.splice(compaction.replaces.clone(), summary.map(|_| Some(seq)));
        }
        Ok(())
    }

    fn warn(&self, message: &str) {
        console_warn!("{message}");
    }
}

/// The object's queue, seen from the running turn. Taking a message hands it to the loop; it
/// stays queued until `on_message` has stored it.
pub(super) struct ObjectQueues {
    pub(super) storage: Rc<ObjectStorage>,
    pub(super) persisted: Rc<Persisted>,
}

impl ObjectQueues {
    fn take(&self, only: Option<Delivery>) -> Vec<AgentMessage> {
        let taken = self
            .storage
            .take(only, &mut self.persisted.taken.borrow_mut());
        let (taken, unreadable) = match taken {
            Ok(taken) => taken,
            Err(e) => {
                console_error!("reading the queue: {e}");
                return vec![];
            }
        };
        for e in unreadable {
            console_error!("{e}");
        }
        let mut handed_over = self.persisted.handed_over.borrow_mut();
        taken
            .into_iter()
            .map(|t| {
                handed_over.push_back((t.message.clone(), t.id, t.seq));
                t.message
            })
            .collect()
    }
}

#[async_trait(?Send)]
impl Queues for ObjectQueues {
    async fn drain_steering(&self) -> Vec<AgentMessage> {
        self.take(Some(Delivery::Steering))
    }

    async fn drain_at_end(&self) -> Vec<AgentMessage> {
        self.take(None)
    }
}
