//! The conversation object's own SQLite tables. Every function is synchronous SQL: between two
//! `await`s the object is single-threaded, so a sequence of these calls is atomic with respect
//! to every other request to the object.
//!
//! One file per table (or pair of tables), each an `impl ObjectStorage` block of its reads and
//! writes; this file keeps the struct, the schema and opening:
//! - `conversation`: what a turn needs of the D1 row (so recovery needs no request)
//! - `turn`: the running turn, if any (how often it was recovered, the client tools it offered,
//!   the answer it was streaming, for recovery), and `paused`: what the last turn waits for
//! - `inbox`: the conversation's queue, all of it (the table, its cap, steering and follow-ups,
//!   what a turn takes), with the ids its messages' D1 rows will have
//! - `chunks`: the running turn's UI stream, in batches, for readers that re-attach
//! - `schedules`: the conversation's scheduled turns
//! - `marks`: rare facts by name: the conversation is being deleted ([`DELETED`]), its queue
//!   failed to start ([`FAILED_STARTS`]), its D1 database ([`SHARD`])
//! - `legacy`: the tables of objects from before turns moved here, migrated when one opens
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
//!
//! The statements run on an [`Engine`]: the object's SQLite, or in native tests an in-memory
//! SQLite (`memory`), so a table's rules (the queue's, `inbox`) are tested on real SQL.

use std::cell::{Cell, RefCell};

use worker::{Result, SqlStorage, SqlStorageValue};

use crate::edge::d1::rows;
use crate::edge::protocol::TurnConversation;

mod chunks;
mod conversation;
mod engine;
mod inbox;
mod legacy;
mod marks;
#[cfg(test)]
mod memory;
mod schedules;
mod turn;

pub use self::engine::Engine;
pub use self::inbox::{QueueFull, QueuedRow, Taken, Unreadable, MAX_QUEUED, STARTING};
pub use self::marks::{Deleted, DELETED, FAILED_STARTS, SHARD};
pub use self::turn::TurnRow;

/// The conversation object's storage.
pub type ObjectStorage = Storage<SqlStorage>;

pub struct Storage<E> {
    sql: E,
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

/// A count, read by opening and by the inbox.
struct Count {
    n: i64,
}

crate::json_struct!(Count {
    "n" => n,
});

/// One text column, `t`: what most tables' reads return.
struct Text {
    t: String,
}

crate::json_struct!(Text {
    "t" => t,
});

impl<E: Engine> Storage<E> {
    pub fn open(sql: E) -> Self {
        let storage = Self {
            sql,
            known: Known::default(),
            statements: Cell::new(0),
            missing: Cell::new(false),
        };
        // Whether the object has any table of ours, or of its older versions (`legacy`).
        const ANY: &str = "SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name IN
            ('conversation', 'turn', 'inbox', 'paused', 'chunks', 'marks', 'schedules', 'queue', 'lease',
             'cancelled')";
        match storage.exec(ANY, None).and_then(E::rows::<Count>) {
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
        // Objects created before turns moved here kept a lease and a queue without ids (see
        // `legacy`): keep the queued messages, drop the rest.
        let legacy = match sql.exec(OPEN, None).and_then(E::rows::<Opened>) {
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
            legacy::migrate(sql);
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
    ) -> Result<E::Cursor> {
        let bindings = bindings.into();
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
    fn write(&self, query: &str, bindings: Vec<SqlStorageValue>) -> Result<E::Cursor> {
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
}
