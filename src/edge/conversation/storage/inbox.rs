//! The `inbox` table: messages waiting for a turn (the conversation's queue), with the ids
//! their D1 rows will have, and the message that starts a turn until it is in D1 ([`STARTING`]).

use worker::Result;

use super::{rows, Count, ObjectStorage};
use crate::agent::AgentMessage;
use crate::edge::protocol::Delivery;

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

impl ObjectStorage {
    /// Queues a message; returns its position in the queue.
    pub fn enqueue(&self, id: &str, delivery: Delivery, message: &str, now: i64) -> Result<i64> {
        // RETURNING says whether it was added: a repeated id was queued before and is not again.
        let added = self
            .write(
                "INSERT OR IGNORE INTO inbox (id, delivery, message, queued_at) VALUES (?, ?, ?, ?)
                 RETURNING seq",
                vec![
                    id.into(),
                    delivery.as_str().into(),
                    message.into(),
                    now.into(),
                ],
            )
            .map(rows_returned)?;
        let known = self.known.queued.get();
        self.known.queued.set(known.zip(added).map(|(n, a)| n + a));
        self.queue_len(None)
    }

    /// Keeps the message that starts a turn in the inbox until it is in D1; its `seq`, or
    /// `None` when a message with its id is kept already. Its delivery is [`STARTING`]: no
    /// drain takes it and no queue position counts it; recovery and the alarm do see it.
    pub fn hold(&self, id: &str, message: &str, now: i64) -> Result<Option<i64>> {
        let seq = rows::cursor::<Seq>(self.write(
            "INSERT OR IGNORE INTO inbox (id, delivery, message, queued_at) VALUES (?, ?, ?, ?)
             RETURNING seq",
            vec![id.into(), STARTING.into(), message.into(), now.into()],
        )?)?
        .into_iter()
        .next()
        .map(|row| row.seq);
        let known = self.known.queued.get();
        self.known
            .queued
            .set(known.map(|n| n + i64::from(seq.is_some())));
        Ok(seq)
    }

    /// Queued messages of one delivery (or all), oldest first. They stay queued until
    /// [`ObjectStorage::dequeue`], which comes only once they are in D1.
    pub fn queued(&self, only: Option<Delivery>) -> Result<Vec<QueuedRow>> {
        if self.known.queued.get() == Some(0) {
            return Ok(Vec::new());
        }
        let kind = only.map_or("%", |d| d.as_str());
        let rows: Vec<QueuedRow> = rows::cursor(self.exec(
            "SELECT seq, id, delivery, message FROM inbox WHERE delivery LIKE ? ORDER BY seq",
            vec![kind.into()],
        )?)?;
        if only.is_none() {
            self.known.queued.set(i64::try_from(rows.len()).ok());
        }
        Ok(rows)
    }

    /// The message a queued row holds. A row no turn could ever read is dropped from the queue
    /// (and logged) rather than left to block it.
    pub fn read(&self, row: &QueuedRow) -> Option<AgentMessage> {
        match crate::llm::json::from_str(&row.message) {
            Ok(message) => Some(message),
            Err(e) => {
                worker::console_error!("dropping an unreadable queued message {}: {e}", row.id);
                if let Err(e) = self.dequeue(row.seq) {
                    worker::console_error!("dequeuing {}: {e}", row.id);
                }
                None
            }
        }
    }

    pub fn dequeue(&self, seq: i64) -> Result<()> {
        let removed = self
            .write(
                "DELETE FROM inbox WHERE seq = ? RETURNING seq",
                vec![seq.into()],
            )
            .map(rows_returned)?;
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
        let rows: Vec<Count> = rows::cursor(self.exec(
            "SELECT COUNT(*) AS n FROM inbox WHERE delivery != ?",
            vec![STARTING.into()],
        )?)?;
        Ok(rows.first().map_or(0, |c| c.n))
    }

    pub fn queue_len(&self, only: Option<Delivery>) -> Result<i64> {
        match (self.known.queued.get(), only) {
            (Some(n), None) => return Ok(n),
            (Some(0), Some(_)) => return Ok(0),
            _ => {}
        }
        let kind = only.map_or("%", |d| d.as_str());
        let rows: Vec<Count> = rows::cursor(self.exec(
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

/// How many rows a statement returned (`None` if reading them failed).
fn rows_returned(cursor: worker::SqlCursor) -> Option<i64> {
    let mut n = 0;
    for row in cursor {
        row.ok()?;
        n += 1;
    }
    Some(n)
}
