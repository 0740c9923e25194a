//! What runs the storage's statements: the object's SQLite, or in native tests an in-memory one
//! (`memory`).

use worker::{Result, SqlCursor, SqlStorage, SqlStorageValue};

use crate::edge::d1::rows;
use crate::llm::json::FromJsonOwned;

/// What runs the storage's statements.
pub trait Engine {
    type Cursor;
    /// Runs `query` (several statements: the last one's rows).
    fn exec(&self, query: &str, bindings: Option<Vec<SqlStorageValue>>) -> Result<Self::Cursor>;
    /// The rows of a cursor.
    fn rows<T: FromJsonOwned>(cursor: Self::Cursor) -> Result<Vec<T>>;
    /// How many rows a cursor yields (`None` if reading them failed), read no further.
    fn count(cursor: Self::Cursor) -> Option<i64>;
}

impl Engine for SqlStorage {
    type Cursor = SqlCursor;

    fn exec(&self, query: &str, bindings: Option<Vec<SqlStorageValue>>) -> Result<SqlCursor> {
        SqlStorage::exec(self, query, bindings)
    }

    fn rows<T: FromJsonOwned>(cursor: SqlCursor) -> Result<Vec<T>> {
        rows::cursor(cursor)
    }

    // Stepped through, not read as JSON: a crossing per row and none to write them out.
    fn count(cursor: SqlCursor) -> Option<i64> {
        let mut n = 0;
        for row in cursor {
            row.ok()?;
            n += 1;
        }
        Some(n)
    }
}
