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

use serde::Deserialize;
use worker::{Result, SqlStorage, SqlStorageValue};

use crate::agent::AgentMessage;
use crate::edge::coordinator::{Delivery, TurnConversation};
use crate::llm::ToolDef;

use super::machine::PauseKind;
use crate::edge::rows;

pub struct ObjectStorage {
    sql: SqlStorage,
}

#[derive(Debug, Clone, Deserialize)]
pub struct TurnRow {
    pub turn_id: String,
    pub recoveries: i64,
    pub client_tools: String,
    /// The answer being streamed when last flushed (an `AssistantMessage`, JSON).
    pub partial: Option<String>,
}

impl TurnRow {
    pub fn client_tools(&self) -> Vec<ToolDef> {
        serde_json::from_str(&self.client_tools).unwrap_or_default()
    }
}

#[derive(Debug, Clone, Deserialize)]
pub struct QueuedRow {
    pub seq: i64,
    pub id: String,
    pub delivery: String,
    pub message: String,
}

#[derive(Deserialize)]
struct Count {
    n: i64,
}

#[derive(Deserialize)]
struct Text {
    t: String,
}

#[derive(Deserialize)]
struct PausedRow {
    kind: String,
    client_tools: String,
}

impl ObjectStorage {
    pub fn open(sql: SqlStorage) -> Self {
        // One `exec` (one crossing, one SQLite call) creates what is missing and asks whether a
        // legacy table is there: an object opens once per isolate, and a new conversation's
        // object opens on its first message.
        const OPEN: &str = "
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
            SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'queue'";
        // Objects created before turns moved here kept a lease and a queue without ids: keep
        // the queued messages, drop the rest.
        let legacy = match sql.exec(OPEN, None).and_then(rows::cursor::<Count>) {
            Ok(rows) => rows.first().is_some_and(|c| c.n > 0),
            Err(e) => {
                worker::console_error!("conversation object schema: {e}");
                false
            }
        };
        if legacy {
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
        Self { sql }
    }

    pub fn conversation(&self) -> Result<Option<TurnConversation>> {
        let rows: Vec<Text> = rows::cursor(
            self.sql
                .exec("SELECT row AS t FROM conversation WHERE id = 1", None)?,
        )?;
        Ok(rows.first().and_then(|r| serde_json::from_str(&r.t).ok()))
    }

    pub fn set_conversation(&self, conversation: &TurnConversation) -> Result<()> {
        let row =
            serde_json::to_string(conversation).map_err(|e| worker::Error::from(e.to_string()))?;
        self.sql.exec(
            "INSERT INTO conversation (id, row) VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET row = excluded.row",
            vec![row.into()],
        )?;
        Ok(())
    }

    pub fn turn(&self) -> Result<Option<TurnRow>> {
        let rows: Vec<TurnRow> = rows::cursor(self.sql.exec(
            "SELECT turn_id, recoveries, client_tools, partial FROM turn WHERE id = 1",
            None,
        )?)?;
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
        self.sql.exec(
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
        Ok(())
    }

    /// A turn runs: the pause it answers (or moves on from) is over.
    pub fn clear_paused(&self) -> Result<()> {
        self.sql.exec("DELETE FROM paused", None)?;
        Ok(())
    }

    pub fn set_partial(&self, partial: Option<&str>) -> Result<()> {
        let value: SqlStorageValue = partial.map(str::to_string).into();
        self.sql
            .exec("UPDATE turn SET partial = ? WHERE id = 1", vec![value])?;
        Ok(())
    }

    /// The turn ended: forget it, and remember what a pause waits for.
    pub fn end_turn(&self, paused: Option<(PauseKind, &[ToolDef])>) -> Result<()> {
        self.sql
            .exec("DELETE FROM turn; DELETE FROM chunks", None)?;
        if let Some((kind, tools)) = paused {
            let tools = serde_json::to_string(tools).unwrap_or_else(|_| "[]".into());
            self.sql.exec(
                "INSERT INTO paused (id, kind, client_tools) VALUES (1, ?, ?)
                 ON CONFLICT (id) DO UPDATE SET kind = excluded.kind, client_tools = excluded.client_tools",
                vec![kind.as_str().into(), tools.into()],
            )?;
        }
        Ok(())
    }

    /// What the last turn paused for, and the client tools it had offered.
    pub fn paused(&self) -> Result<Option<(PauseKind, Vec<ToolDef>)>> {
        let rows: Vec<PausedRow> = rows::cursor(
            self.sql
                .exec("SELECT kind, client_tools FROM paused WHERE id = 1", None)?,
        )?;
        Ok(rows.into_iter().next().and_then(|r| {
            let kind = PauseKind::parse(&r.kind)?;
            Some((
                kind,
                serde_json::from_str(&r.client_tools).unwrap_or_default(),
            ))
        }))
    }

    /// Queues a message; returns its position in the queue.
    pub fn enqueue(&self, id: &str, delivery: Delivery, message: &str, now: i64) -> Result<i64> {
        self.sql.exec(
            "INSERT OR IGNORE INTO inbox (id, delivery, message, queued_at) VALUES (?, ?, ?, ?)",
            vec![
                id.into(),
                delivery.as_str().into(),
                message.into(),
                now.into(),
            ],
        )?;
        self.queue_len(None)
    }

    /// Queued messages of one delivery (or all), oldest first. They stay queued until
    /// [`ObjectStorage::dequeue`], which comes only once they are in D1.
    pub fn queued(&self, only: Option<Delivery>) -> Result<Vec<QueuedRow>> {
        let kind = only.map_or("%", |d| d.as_str());
        rows::cursor(self.sql.exec(
            "SELECT seq, id, delivery, message FROM inbox WHERE delivery LIKE ? ORDER BY seq",
            vec![kind.into()],
        )?)
    }

    /// The message a queued row holds. A row no turn could ever read is dropped from the queue
    /// (and logged) rather than left to block it.
    pub fn read(&self, row: &QueuedRow) -> Option<AgentMessage> {
        match serde_json::from_str(&row.message) {
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
        self.sql
            .exec("DELETE FROM inbox WHERE seq = ?", vec![seq.into()])?;
        Ok(())
    }

    pub fn queue_len(&self, only: Option<Delivery>) -> Result<i64> {
        let kind = only.map_or("%", |d| d.as_str());
        let rows: Vec<Count> = rows::cursor(self.sql.exec(
            "SELECT COUNT(*) AS n FROM inbox WHERE delivery LIKE ?",
            vec![kind.into()],
        )?)?;
        Ok(rows.first().map_or(0, |c| c.n))
    }

    pub fn append_chunks(&self, data: &str) -> Result<()> {
        self.sql
            .exec("INSERT INTO chunks (data) VALUES (?)", vec![data.into()])?;
        Ok(())
    }

    /// The logged stream, in order, as one string.
    pub fn chunks(&self) -> Result<String> {
        let rows: Vec<Text> = rows::cursor(
            self.sql
                .exec("SELECT data AS t FROM chunks ORDER BY seq", None)?,
        )?;
        Ok(rows.into_iter().map(|r| r.t).collect())
    }

    pub fn clear_chunks(&self) -> Result<()> {
        self.sql.exec("DELETE FROM chunks", None)?;
        Ok(())
    }

    /// Everything (the conversation is being deleted).
    pub fn clear(&self) -> Result<()> {
        for table in ["turn", "inbox", "paused", "chunks", "conversation"] {
            self.sql.exec(&format!("DELETE FROM {table}"), None)?;
        }
        Ok(())
    }
}
