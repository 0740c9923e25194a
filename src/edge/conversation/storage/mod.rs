//! The conversation object's own SQLite tables. Every function is synchronous SQL: between two
//! `await`s the object is single-threaded, so a sequence of these calls is atomic with respect
//! to every other request to the object.
//!
//! - `conversation`: what a turn needs of the D1 row (so recovery needs no request)
//! - `turn`: the running turn, if any: how often it was recovered, the client tools it offered,
//!   the answer it was streaming (for recovery)
//! - `inbox`: messages waiting for a turn, with the ids their D1 rows will have
//! - `paused`: what the last turn waits for, and the client tools it offered
//! - `chunks`: the running turn's UI stream, in batches, for readers that re-attach
//! - `schedules`: the conversation's scheduled turns (its `schedules` module)
//! - `marks`: rare facts by name: the conversation is being deleted ([`DELETED`]), its queue
//!   failed to start ([`FAILED_STARTS`])
//!
//! The object is its storage's only writer, so what it has read or written stays true until it
//! writes again: `Known` remembers it, and a read of something known costs no SQL. Opening an
//! object with tables reads it all in the statement that makes what is missing of them, so a
//! turn of an idle conversation makes only its writes (recording and ending the turn, saving
//! the conversation's row).
//!
//! An object with no tables (a new conversation's, a deleted one's, one a request for an unknown
//! id reached) gets them with its first write, not when it opens: an object whose storage is
//! empty does not exist, so one that is only asked about, or whose conversation was deleted,
//! keeps nothing.

use std::cell::{Cell, RefCell};

use worker::{Result, SqlStorage, SqlStorageValue};

use crate::agent::AgentMessage;
use crate::edge::protocol::{Delivery, TurnConversation};
use crate::llm::ToolDef;

use super::rules::PauseKind;
use crate::edge::d1::rows;

mod schedules;

pub struct ObjectStorage {
    sql: SqlStorage,
    known: Known,
    /// SQL statements run since the object opened (for each turn's log line).
    statements: Cell<u32>,
    /// The tables are not there: they are made before the next statement.
    missing: Cell<bool>,
}

/// The object's tables, made where missing.
macro_rules! schema {
    () => {
        "
        CREATE TABLE IF NOT EXISTS conversation (
          id INTEGER PRIMARY KEY CHECK (id = 1), row TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS turn (
          id INTEGER PRIMARY KEY CHECK (id = 1),
          turn_id TEXT NOT NULL,
          started_at INTEGER NOT NULL,
          recoveries INTEGER NOT NULL DEFAULT 0,
          client_tools TEXT NOT NULL,
          partial TEXT);
        CREATE TABLE IF NOT EXISTS inbox (
          seq INTEGER PRIMARY KEY AUTOINCREMENT,
          id TEXT NOT NULL UNIQUE,
          delivery TEXT NOT NULL,
          message TEXT NOT NULL,
          queued_at INTEGER NOT NULL);
        CREATE TABLE IF NOT EXISTS paused (
          id INTEGER PRIMARY KEY CHECK (id = 1), kind TEXT NOT NULL, client_tools TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS chunks (
          seq INTEGER PRIMARY KEY AUTOINCREMENT, data TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS marks (name TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE IF NOT EXISTS schedules (
          id TEXT PRIMARY KEY, row TEXT NOT NULL, due INTEGER, running INTEGER NOT NULL);"
    };
}

/// What the tables hold, as far as this instance knows (`None`: not known; read it). A write
/// that fails forgets everything, since it may or may not have happened.
#[derive(Default)]
struct Known {
    /// The conversation's row (`Some(None)`: none).
    conversation: RefCell<Option<Option<TurnConversation>>>,
    /// Whether a turn is recorded.
    turn: Cell<Option<bool>>,
    /// Whether a pause is recorded.
    paused: Cell<Option<bool>>,
    /// How many messages are queued.
    queued: Cell<Option<i64>>,
    /// Whether any chunk is logged.
    chunks: Cell<Option<bool>>,
    /// Whether any mark is set.
    marks: Cell<Option<bool>>,
    /// Whether any schedule is kept.
    schedules: Cell<Option<bool>>,
}

/// The mark of a conversation being deleted: the object refuses messages until the D1 rows are
/// gone. Its value is a [`Deleted`], JSON.
pub const DELETED: &str = "deleted";

/// The mark counting the queue's turns that failed to start in a row.
pub const FAILED_STARTS: &str = "failed_starts";

/// The mark naming the D1 binding that holds the conversation (`D1_SHARDS`), once looked up.
pub const SHARD: &str = "shard";

/// Whose conversation is being deleted, for the alarm that finishes it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Deleted {
    pub conversation: String,
    pub owner: String,
}

crate::json_struct!(Deleted {
    "conversation" => conversation,
    "owner" => owner,
});

#[derive(Debug, Clone)]
pub struct TurnRow {
    pub turn_id: String,
    pub recoveries: i64,
    pub client_tools: String,
    /// The answer being streamed when last flushed (an `AssistantMessage`, JSON).
    pub partial: Option<String>,
}

crate::json_struct!(TurnRow {
    "turn_id" => turn_id,
    "recoveries" => recoveries,
    "client_tools" => client_tools,
    "partial" => partial,
});

impl TurnRow {
    pub fn client_tools(&self) -> Vec<ToolDef> {
        crate::llm::json::from_str(&self.client_tools).unwrap_or_default()
    }
}

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

/// What opening reads: whether a legacy queue is there, and what [`Known`] starts from.
struct Opened {
    legacy: i64,
    conversation: Option<String>,
    turns: i64,
    paused: i64,
    queued: i64,
    chunks: i64,
    marks: i64,
    schedules: i64,
}

crate::json_struct!(Opened {
    "legacy" => legacy,
    "conversation" => conversation,
    "turns" => turns,
    "paused" => paused,
    "queued" => queued,
    "chunks" => chunks,
    "marks" => marks,
    "schedules" => schedules,
});

struct Count {
    n: i64,
}

crate::json_struct!(Count {
    "n" => n,
});

/// The delivery of a message kept while the turn it starts stores it.
pub const STARTING: &str = "starting";

struct Seq {
    seq: i64,
}

crate::json_struct!(Seq {
    "seq" => seq,
});

struct Text {
    t: String,
}

crate::json_struct!(Text {
    "t" => t,
});

struct PausedRow {
    kind: String,
    client_tools: String,
}

crate::json_struct!(PausedRow {
    "kind" => kind,
    "client_tools" => client_tools,
});

impl ObjectStorage {
    pub fn open(sql: SqlStorage) -> Self {
        let storage = Self {
            sql,
            known: Known::default(),
            statements: Cell::new(0),
            missing: Cell::new(false),
        };
        // Whether the object has any table of ours, or of its older versions.
        const ANY: &str = "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name IN
            ('conversation', 'turn', 'inbox', 'paused', 'chunks', 'marks', 'schedules', 'queue', 'lease',
             'cancelled')";
        match storage.exec(ANY, None).and_then(rows::cursor::<Count>) {
            Ok(rows) if rows.first().is_some_and(|c| c.n == 0) => {
                storage.emptied();
                return storage;
            }
            Ok(_) => {}
            Err(e) => worker::console_error!("conversation object tables: {e}"),
        }
        storage.open_tables();
        storage
    }

    /// Makes what is missing of the tables and reads what [`Known`] starts from.
    fn open_tables(&self) {
        let (sql, known) = (&self.sql, &self.known);
        // One `exec` (one crossing, one SQLite call) creates what is missing and asks whether a
        // legacy table is there: an object with tables opens once per isolate.
        const OPEN: &str = concat!(
            schema!(),
            "
            SELECT
              (SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'queue') AS legacy,
              (SELECT row FROM conversation WHERE id = 1) AS conversation,
              (SELECT COUNT(*) FROM turn) AS turns,
              (SELECT COUNT(*) FROM paused) AS paused,
              (SELECT COUNT(*) FROM inbox) AS queued,
              (SELECT COUNT(*) FROM chunks) AS chunks,
              (SELECT COUNT(*) FROM marks) AS marks,
              (SELECT COUNT(*) FROM schedules) AS schedules"
        );
        self.statements.set(self.statements.get().wrapping_add(1));
        // Objects created before turns moved here kept a lease and a queue without ids: keep
        // the queued messages, drop the rest.
        let legacy = match sql.exec(OPEN, None).and_then(rows::cursor::<Opened>) {
            Ok(rows) => match rows.into_iter().next() {
                Some(opened) => {
                    let row = opened
                        .conversation
                        .and_then(|r| crate::llm::json::from_str(&r).ok());
                    *known.conversation.borrow_mut() = Some(row);
                    known.turn.set(Some(opened.turns > 0));
                    known.paused.set(Some(opened.paused > 0));
                    known.queued.set(Some(opened.queued));
                    known.chunks.set(Some(opened.chunks > 0));
                    known.marks.set(Some(opened.marks > 0));
                    known.schedules.set(Some(opened.schedules > 0));
                    opened.legacy > 0
                }
                None => false,
            },
            Err(e) => {
                worker::console_error!("conversation object schema: {e}");
                false
            }
        };
        if legacy {
            // The queue moved into the inbox: count it when asked.
            known.queued.set(None);
            for statement in [
                "INSERT INTO inbox (id, delivery, message, queued_at)
                 SELECT lower(hex(randomblob(16))), delivery, message, queued_at FROM queue ORDER BY seq",
                "DROP TABLE queue",
                "DROP TABLE IF EXISTS lease",
                "DROP TABLE IF EXISTS cancelled",
            ] {
                if let Err(e) = sql.exec(statement, None) {
                    worker::console_error!("conversation object migration: {e}");
                }
            }
        }
    }

    /// The object's storage was emptied (or never held anything): every table is empty, and
    /// none is made until something is written.
    pub fn emptied(&self) {
        self.missing.set(true);
        *self.known.conversation.borrow_mut() = Some(None);
        self.known.turn.set(Some(false));
        self.known.paused.set(Some(false));
        self.known.queued.set(Some(0));
        self.known.chunks.set(Some(false));
        self.known.marks.set(Some(false));
        self.known.schedules.set(Some(false));
    }

    /// Emptying the storage failed, so whether it holds anything, or even its tables, is not
    /// known: they are made where missing before the next statement, and what is needed is read
    /// again.
    pub fn maybe_emptied(&self) {
        self.forget();
        self.missing.set(true);
    }

    fn exec(
        &self,
        query: &str,
        bindings: impl Into<Option<Vec<SqlStorageValue>>>,
    ) -> Result<worker::SqlCursor> {
        if self.missing.replace(false) {
            self.statements.set(self.statements.get().wrapping_add(1));
            if let Err(e) = self.sql.exec(schema!(), None) {
                self.missing.set(true);
                return Err(e);
            }
        }
        self.statements.set(self.statements.get().wrapping_add(1));
        self.sql.exec(query, bindings)
    }

    /// SQL statements run since the object opened (opening is one or two).
    pub fn statements(&self) -> u32 {
        self.statements.get()
    }

    /// Runs a statement that changes the tables; if it fails, nothing is known any more.
    fn write(&self, query: &str, bindings: Vec<SqlStorageValue>) -> Result<worker::SqlCursor> {
        let written = self.exec(query, bindings);
        if written.is_err() {
            self.forget();
        }
        written
    }

    fn forget(&self) {
        self.known.conversation.borrow_mut().take();
        self.known.turn.set(None);
        self.known.paused.set(None);
        self.known.queued.set(None);
        self.known.chunks.set(None);
        self.known.marks.set(None);
        self.known.schedules.set(None);
    }

    /// The value of mark `name`, if set (no SQL while none is known to be).
    pub fn mark(&self, name: &str) -> Result<Option<String>> {
        if self.known.marks.get() == Some(false) {
            return Ok(None);
        }
        let rows: Vec<Text> = rows::cursor(self.exec(
            "SELECT value AS t FROM marks WHERE name = ?",
            vec![name.into()],
        )?)?;
        Ok(rows.into_iter().next().map(|r| r.t))
    }

    pub fn set_mark(&self, name: &str, value: &str) -> Result<()> {
        self.write(
            "INSERT INTO marks (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value",
            vec![name.into(), value.into()],
        )?;
        self.known.marks.set(Some(true));
        Ok(())
    }

    pub fn clear_mark(&self, name: &str) -> Result<()> {
        if self.known.marks.get() == Some(false) {
            return Ok(());
        }
        self.write("DELETE FROM marks WHERE name = ?", vec![name.into()])?;
        // Another mark may be left.
        self.known.marks.set(None);
        Ok(())
    }

    /// The conversation is being deleted (see [`DELETED`]).
    pub fn deleted(&self) -> Result<Option<Deleted>> {
        Ok(self
            .mark(DELETED)?
            .and_then(|v| crate::llm::json::from_str(&v).ok()))
    }

    pub fn conversation(&self) -> Result<Option<TurnConversation>> {
        if let Some(known) = self.known.conversation.borrow().as_ref() {
            return Ok(known.clone());
        }
        let rows: Vec<Text> =
            rows::cursor(self.exec("SELECT row AS t FROM conversation WHERE id = 1", None)?)?;
        let row: Option<TurnConversation> = rows
            .first()
            .and_then(|r| crate::llm::json::from_str(&r.t).ok());
        *self.known.conversation.borrow_mut() = Some(row.clone());
        Ok(row)
    }

    pub fn set_conversation(&self, conversation: &TurnConversation) -> Result<()> {
        let row =
            serde_json::to_string(conversation).map_err(|e| worker::Error::from(e.to_string()))?;
        self.write(
            "INSERT INTO conversation (id, row) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET row = excluded.row",
            vec![row.into()],
        )?;
        *self.known.conversation.borrow_mut() = Some(Some(conversation.clone()));
        Ok(())
    }

    /// Forgets the conversation's row: its creation was refused, so a later message is checked
    /// against the owner's count again.
    pub fn forget_conversation(&self) -> Result<()> {
        self.write("DELETE FROM conversation", vec![])?;
        *self.known.conversation.borrow_mut() = Some(None);
        Ok(())
    }

    /// Whether a turn is recorded (running, or interrupted and not yet recovered).
    pub fn has_turn(&self) -> Result<bool> {
        match self.known.turn.get() {
            Some(known) => Ok(known),
            None => Ok(self.turn()?.is_some()),
        }
    }

    pub fn turn(&self) -> Result<Option<TurnRow>> {
        if self.known.turn.get() == Some(false) {
            return Ok(None);
        }
        let rows: Vec<TurnRow> = rows::cursor(self.exec(
            "SELECT turn_id, recoveries, client_tools, partial FROM turn WHERE id = 1",
            None,
        )?)?;
        self.known.turn.set(Some(!rows.is_empty()));
        Ok(rows.into_iter().next())
    }

    /// Records a new turn (or the recovery of the recorded one, keeping its count).
    pub fn begin_turn(
        &self,
        turn_id: &str,
        now: i64,
        recoveries: u32,
        client_tools: &[ToolDef],
    ) -> Result<()> {
        let tools = serde_json::to_string(client_tools).unwrap_or_else(|_| "[]".into());
        self.write(
            "INSERT INTO turn (id, turn_id, started_at, recoveries, client_tools, partial)
             VALUES (1, ?, ?, ?, ?, NULL)
             ON CONFLICT (id) DO UPDATE SET turn_id = excluded.turn_id, started_at = excluded.started_at,
               recoveries = excluded.recoveries, client_tools = excluded.client_tools, partial = NULL",
            vec![
                turn_id.into(),
                now.into(),
                i64::from(recoveries).into(),
                tools.into(),
            ],
        )?;
        self.known.turn.set(Some(true));
        Ok(())
    }

    /// A turn runs: the pause it answers (or moves on from) is over.
    pub fn clear_paused(&self) -> Result<()> {
        if self.known.paused.get() != Some(false) {
            self.write("DELETE FROM paused", vec![])?;
            self.known.paused.set(Some(false));
        }
        Ok(())
    }

    pub fn set_partial(&self, partial: Option<&str>) -> Result<()> {
        let value: SqlStorageValue = partial.map(str::to_string).into();
        self.write("UPDATE turn SET partial = ? WHERE id = 1", vec![value])?;
        Ok(())
    }

    /// The turn ended: forget it, and remember what a pause waits for.
    pub fn end_turn(&self, paused: Option<(PauseKind, &[ToolDef])>) -> Result<()> {
        self.write("DELETE FROM turn; DELETE FROM chunks", vec![])?;
        self.known.turn.set(Some(false));
        self.known.chunks.set(Some(false));
        if let Some((kind, tools)) = paused {
            let tools = serde_json::to_string(tools).unwrap_or_else(|_| "[]".into());
            self.write(
                "INSERT INTO paused (id, kind, client_tools) VALUES (1, ?, ?)
                 ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, client_tools = excluded.client_tools",
                vec![kind.as_str().into(), tools.into()],
            )?;
            self.known.paused.set(Some(true));
        }
        Ok(())
    }

    /// What the last turn paused for, and the client tools it had offered.
    pub fn paused(&self) -> Result<Option<(PauseKind, Vec<ToolDef>)>> {
        if self.known.paused.get() == Some(false) {
            return Ok(None);
        }
        let rows: Vec<PausedRow> =
            rows::cursor(self.exec("SELECT kind, client_tools FROM paused WHERE id = 1", None)?)?;
        self.known.paused.set(Some(!rows.is_empty()));
        Ok(rows.into_iter().next().and_then(|r| {
            let kind = PauseKind::parse(&r.kind)?;
            Some((
                kind,
                crate::llm::json::from_str(&r.client_tools).unwrap_or_default(),
            ))
        }))
    }

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

    pub fn append_chunks(&self, data: &str) -> Result<()> {
        self.write("INSERT INTO chunks (data) VALUES (?)", vec![data.into()])?;
        self.known.chunks.set(Some(true));
        Ok(())
    }

    /// The logged stream, in order, as one string.
    pub fn chunks(&self) -> Result<String> {
        if self.known.chunks.get() == Some(false) {
            return Ok(String::new());
        }
        let rows: Vec<Text> =
            rows::cursor(self.exec("SELECT data AS t FROM chunks ORDER BY seq", None)?)?;
        Ok(rows.into_iter().map(|r| r.t).collect())
    }

    pub fn clear_chunks(&self) -> Result<()> {
        if self.known.chunks.get() != Some(false) {
            self.write("DELETE FROM chunks", vec![])?;
            self.known.chunks.set(Some(false));
        }
        Ok(())
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
