//! The conversation's queue, all of it: the `inbox` table of messages waiting for a turn (with
//! the ids their D1 rows will have), its cap ([`MAX_QUEUED`]), the two deliveries (a turn takes
//! steering between tool calls and everything left when it would end: [`Storage::take`]), and
//! the message that starts a turn, kept here until it is in D1 ([`STARTING`]).
//!
//! A message leaves the queue only once it is in D1 ([`Storage::dequeue`]): a turn that dies
//! first leaves it here for the next. Its native tests run on an in-memory SQLite (`memory`).

use std::collections::HashSet;

use worker::Result;

use super::{Count, Engine, Storage};
use crate::agent::AgentMessage;
use crate::edge::protocol::Delivery;

/// Most messages one conversation keeps waiting for its running turn.
pub const MAX_QUEUED: i64 = 50;

/// The delivery of a message kept while the turn it starts stores it.
pub const STARTING: &str = "starting";

#[derive(Debug, Clone)]
pub struct QueuedRow {
    pub seq: i64,
    pub id: String,
    pub delivery: String,
    pub message: String,
}

crate::json_struct!(QueuedRow {
    "seq" => seq,
    "id" => id,
    "delivery" => delivery,
    "message" => message,
});

struct Seq {
    seq: i64,
}

crate::json_struct!(Seq {
    "seq" => seq,
});

/// [`MAX_QUEUED`] messages wait already.
#[derive(Debug, PartialEq, Eq)]
pub struct QueueFull;

/// A queued message handed to a turn.
#[derive(Debug)]
pub struct Taken {
    pub message: AgentMessage,
    /// The id it was accepted under (its D1 row's).
    pub id: String,
    /// Its row in the queue.
    pub seq: i64,
}

/// A queued row no turn could ever read: dropped from the queue rather than left to block it.
#[derive(Debug, thiserror::Error)]
#[error("dropped an unreadable queued message {id}: {reason}")]
pub struct Unreadable {
    pub id: String,
    pub reason: String,
}

impl<E: Engine> Storage<E> {
    /// Queues a message for the running turn unless [`MAX_QUEUED`] rows are queued already (the
    /// message starting a turn among them, until it is stored); then how many wait, itself
    /// among them. A repeated id is queued once.
    pub fn offer(
        &self,
        id: &str,
        delivery: Delivery,
        message: &str,
        now: i64,
    ) -> Result<std::result::Result<i64, QueueFull>> {
        if self.queue_len(None)? >= MAX_QUEUED {
            return Ok(Err(QueueFull));
        }
        let added = E::count(self.insert(id, delivery.as_str(), message, now)?);
        let known = self.known.queued.get();
        self.known.queued.set(known.zip(added).map(|(n, a)| n + a));
        Ok(Ok(self.waiting_len()?))
    }

    /// Keeps the message that starts a turn in the inbox until it is in D1; its `seq`, or
    /// `None` when a message with its id is kept already. Its delivery is [`STARTING`]: no
    /// drain takes it and no queue position counts it; recovery and the alarm do see it.
    pub fn hold(&self, id: &str, message: &str, now: i64) -> Result<Option<i64>> {
        let written = self.insert(id, STARTING, message, now)?;
        // Written, whatever reading its row says: unread, the count is not known.
        let seq = E::rows::<Seq>(written)
            .inspect_err(|_| self.known.queued.set(None))?
            .into_iter()
            .next()
            .map(|row| row.seq);
        let known = self.known.queued.get();
        self.known
            .queued
            .set(known.map(|n| n + i64::from(seq.is_some())));
        Ok(seq)
    }

    /// Adds a row unless one has its id; RETURNING says whether it was added (a repeated id was
    /// queued before and is not again).
    fn insert(&self, id: &str, delivery: &str, message: &str, now: i64) -> Result<E::Cursor> {
        self.write(
            "INSERT OR IGNORE INTO inbox (id, delivery, message, queued_at) VALUES (?, ?, ?, ?)
             RETURNING seq",
            vec![id.into(), delivery.into(), message.into(), now.into()],
        )
    }

    /// Queued messages of one delivery (or all, the one starting a turn among them), oldest
    /// first. They stay queued until [`Storage::dequeue`], which comes only once they are in D1.
    pub fn queued(&self, only: Option<Delivery>) -> Result<Vec<QueuedRow>> {
        if self.known.queued.get() == Some(0) {
            return Ok(Vec::new());
        }
        let kind = only.map_or("%", |d| d.as_str());
        let rows: Vec<QueuedRow> = E::rows(self.exec(
            "SELECT seq, id, delivery, message FROM inbox WHERE delivery LIKE ? ORDER BY seq",
            vec![kind.into()],
        )?)?;
        if only.is_none() {
            self.known.queued.set(i64::try_from(rows.len()).ok());
        }
        Ok(rows)
    }

    /// Hands a turn the queued messages of one delivery (`None`: all: what waits when the turn
    /// would end), oldest first, leaving out the rows it was handed before (`taken`, which
    /// gains these, and which starts with the rows that started the turn). They stay queued
    /// until the turn has stored them. Unreadable rows are dropped and told.
    pub fn take(
        &self,
        only: Option<Delivery>,
        taken: &mut HashSet<i64>,
    ) -> Result<(Vec<Taken>, Vec<Unreadable>)> {
        let mut messages = Vec::new();
        let mut unreadable = Vec::new();
        for row in self.queued(only)? {
            if !taken.insert(row.seq) {
                continue;
            }
            match self.try_read(&row) {
                Ok(message) => messages.push(Taken {
                    message,
                    id: row.id,
                    seq: row.seq,
                }),
                Err(e) => unreadable.push(e),
            }
        }
        Ok((messages, unreadable))
    }

    /// The message a queued row holds; a row no turn could ever read is dropped from the queue.
    pub fn try_read(&self, row: &QueuedRow) -> std::result::Result<AgentMessage, Unreadable> {
        crate::llm::json::from_str(&row.message).map_err(|e| {
            let mut reason = e.to_string();
            if let Err(e) = self.dequeue(row.seq) {
                reason = format!("{reason} (and dequeuing it failed: {e})");
            }
            Unreadable {
                id: row.id.clone(),
                reason,
            }
        })
    }

    pub fn dequeue(&self, seq: i64) -> Result<()> {
        let removed = self.write(
            "DELETE FROM inbox WHERE seq = ? RETURNING seq",
            vec![seq.into()],
        )?;
        let removed = E::count(removed);
        let known = self.known.queued.get();
        self.known
            .queued
            .set(known.zip(removed).map(|(n, r)| n - r));
        Ok(())
    }

    /// Messages waiting for the running turn (or the next), the one that starts a turn left
    /// out: a queued message's position.
    pub fn waiting_len(&self) -> Result<i64> {
        if self.known.queued.get() == Some(0) {
            return Ok(0);
        }
        let rows: Vec<Count> = E::rows(self.exec(
            "SELECT COUNT(*) AS n FROM inbox WHERE delivery != ?",
            vec![STARTING.into()],
        )?)?;
        Ok(rows.first().map_or(0, |c| c.n))
    }

    /// Rows in the queue of one delivery (or all, the one starting a turn among them).
    pub fn queue_len(&self, only: Option<Delivery>) -> Result<i64> {
        match (self.known.queued.get(), only) {
            (Some(n), None) => return Ok(n),
            (Some(0), Some(_)) => return Ok(0),
            _ => {}
        }
        let kind = only.map_or("%", |d| d.as_str());
        let rows: Vec<Count> = E::rows(self.exec(
            "SELECT COUNT(*) AS n FROM inbox WHERE delivery LIKE ?",
            vec![kind.into()],
        )?)?;
        let n = rows.first().map_or(0, |c| c.n);
        if only.is_none() {
            self.known.queued.set(Some(n));
        }
        Ok(n)
    }
}

impl super::ObjectStorage {
    /// [`Storage::try_read`], logging a row it drops.
    pub fn read(&self, row: &QueuedRow) -> Option<AgentMessage> {
        self.try_read(row)
            .map_err(|e| worker::console_error!("{e}"))
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::super::memory::Memory;
    use super::*;
    use crate::llm::ContentBlock;

    fn storage() -> (Memory, Storage<Memory>) {
        let engine = Memory::new();
        (engine.clone(), Storage::open(engine))
    }

    fn message(text: &str) -> String {
        serde_json::to_string(&AgentMessage::user_text(text)).unwrap()
    }

    fn text(taken: &Taken) -> &str {
        match &taken.message {
            AgentMessage::User { content } => match content.as_slice() {
                [ContentBlock::Text { text }] => text,
                _ => "",
            },
            _ => "",
        }
    }

    /// What a fresh open of the same SQLite counts: the cache must agree with it.
    fn counted(engine: &Memory) -> i64 {
        Storage::open(engine.clone()).queue_len(None).unwrap()
    }

    #[test]
    fn positions_count_the_waiting_messages_and_a_repeated_id_is_queued_once() {
        let (engine, queue) = storage();
        assert_eq!(queue.queue_len(None).unwrap(), 0);
        let held = queue.hold("m0", &message("starts the turn"), 1).unwrap();
        assert!(held.is_some());
        assert_eq!(queue.hold("m0", &message("again"), 2).unwrap(), None);
        // The message starting the turn has no place among those waiting for it.
        let first = queue.offer("m1", Delivery::Steering, &message("a"), 3);
        assert_eq!(first.unwrap(), Ok(1));
        let second = queue.offer("m2", Delivery::Followup, &message("b"), 4);
        assert_eq!(second.unwrap(), Ok(2));
        // Sent again (a client retrying its POST): still one row, still second.
        let repeat = queue.offer("m2", Delivery::Followup, &message("b"), 5);
        assert_eq!(repeat.unwrap(), Ok(2));
        assert_eq!(queue.queue_len(None).unwrap(), 3);
        assert_eq!(counted(&engine), 3);
        assert_eq!(queue.queue_len(Some(Delivery::Steering)).unwrap(), 1);
        assert_eq!(queue.queue_len(Some(Delivery::Followup)).unwrap(), 1);
    }

    #[test]
    fn the_fifty_first_waiting_message_is_refused_until_one_leaves() {
        let (engine, queue) = storage();
        for i in 0..MAX_QUEUED {
            let placed = queue.offer(&format!("m{i}"), Delivery::Followup, &message("x"), i);
            assert_eq!(placed.unwrap(), Ok(i + 1));
        }
        let refused = queue.offer("late", Delivery::Steering, &message("late"), 99);
        assert_eq!(refused.unwrap(), Err(QueueFull));
        assert_eq!(counted(&engine), MAX_QUEUED, "the refused one is not kept");
        let oldest = queue.queued(None).unwrap()[0].seq;
        queue.dequeue(oldest).unwrap();
        let placed = queue.offer("late", Delivery::Steering, &message("late"), 100);
        assert_eq!(placed.unwrap(), Ok(MAX_QUEUED));
        assert_eq!(counted(&engine), MAX_QUEUED);
    }

    #[test]
    fn steering_is_taken_between_tool_calls_and_everything_left_at_the_end_each_once() {
        let (engine, queue) = storage();
        let own = queue.hold("m0", &message("start"), 1).unwrap().unwrap();
        queue
            .offer("f1", Delivery::Followup, &message("later 1"), 2)
            .unwrap()
            .unwrap();
        queue
            .offer("s1", Delivery::Steering, &message("steer 1"), 3)
            .unwrap()
            .unwrap();
        queue
            .offer("s2", Delivery::Steering, &message("steer 2"), 4)
            .unwrap()
            .unwrap();
        // The turn started with its own message: never handed to it again.
        let mut taken = HashSet::from([own]);
        let (steering, bad) = queue.take(Some(Delivery::Steering), &mut taken).unwrap();
        assert!(bad.is_empty());
        let ids: Vec<_> = steering.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["s1", "s2"], "steering only, oldest first");
        assert_eq!(text(&steering[0]), "steer 1");
        // Taken is not stored: a turn that dies now leaves them for the next.
        assert_eq!(counted(&engine), 4);
        assert!(queue
            .take(Some(Delivery::Steering), &mut taken)
            .unwrap()
            .0
            .is_empty());
        // One more comes while the steering is being stored.
        queue
            .offer("s3", Delivery::Steering, &message("steer 3"), 5)
            .unwrap()
            .unwrap();
        let (rest, _) = queue.take(None, &mut taken).unwrap();
        let ids: Vec<_> = rest.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["f1", "s3"], "what is left, in the order it came");
        // Stored, they leave; a new turn (a new `taken`) finds only what was not stored.
        for t in steering.iter().chain(&rest) {
            queue.dequeue(t.seq).unwrap();
        }
        let (left, _) = queue.take(None, &mut HashSet::new()).unwrap();
        assert_eq!(left.iter().map(|t| t.seq).collect::<Vec<_>>(), [own]);
        assert_eq!(queue.queue_len(None).unwrap(), 1);
        assert_eq!(counted(&engine), 1);
    }

    #[test]
    fn an_unreadable_row_is_dropped_rather_than_left_to_block_the_queue() {
        let (engine, queue) = storage();
        queue
            .offer("bad", Delivery::Steering, "{\"role\":", 1)
            .unwrap()
            .unwrap();
        queue
            .offer("good", Delivery::Steering, &message("ok"), 2)
            .unwrap()
            .unwrap();
        let (taken, unreadable) = queue.take(None, &mut HashSet::new()).unwrap();
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].id, "good");
        assert_eq!(unreadable.len(), 1);
        assert!(
            unreadable[0].to_string().contains("bad"),
            "{}",
            unreadable[0]
        );
        assert_eq!(queue.queue_len(None).unwrap(), 1);
        assert_eq!(counted(&engine), 1);
    }

    #[test]
    fn a_new_object_counts_what_an_old_one_left_and_an_empty_one_makes_no_tables() {
        let engine = Memory::new();
        let idle = Storage::open(engine.clone());
        assert_eq!(idle.queue_len(None).unwrap(), 0);
        assert!(idle.queued(None).unwrap().is_empty());
        assert!(!engine.has_table("inbox"), "asking made nothing");
        idle.offer("m1", Delivery::Followup, &message("a"), 1)
            .unwrap()
            .unwrap();
        assert!(engine.has_table("inbox"), "the first write made the tables");
        let reopened = Storage::open(engine.clone());
        assert_eq!(reopened.queue_len(None).unwrap(), 1);
        assert_eq!(reopened.waiting_len().unwrap(), 1);
        assert_eq!(
            reopened.queued(Some(Delivery::Followup)).unwrap()[0].id,
            "m1"
        );
    }

    #[test]
    fn an_object_from_before_turns_moved_keeps_its_queue_with_new_ids() {
        let engine = Memory::new();
        let old = "CREATE TABLE queue (seq INTEGER PRIMARY KEY AUTOINCREMENT, delivery TEXT,
                     message TEXT, queued_at INTEGER);
                   CREATE TABLE lease (id INTEGER PRIMARY KEY);";
        engine.exec(old, None).unwrap();
        for (delivery, text) in [("followup", "first"), ("steering", "second")] {
            let insert = "INSERT INTO queue (delivery, message, queued_at) VALUES (?, ?, 1)";
            let bindings = vec![delivery.into(), message(text).into()];
            engine.exec(insert, Some(bindings)).unwrap();
        }
        let queue = Storage::open(engine.clone());
        let (taken, _) = queue.take(None, &mut HashSet::new()).unwrap();
        let texts: Vec<_> = taken.iter().map(text).collect();
        assert_eq!(texts, ["first", "second"]);
        assert_eq!(queue.queue_len(Some(Delivery::Steering)).unwrap(), 1);
        assert!(taken[0].id.len() == 32 && taken[0].id != taken[1].id);
        assert!(!engine.has_table("queue") && !engine.has_table("lease"));
    }
}
