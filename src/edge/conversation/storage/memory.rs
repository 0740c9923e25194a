//! The storage's engine in native tests: an in-memory SQLite (rusqlite's bundled one), running
//! the same statements as the object's. Rows come back as the object's cursor gives them to
//! `edge::d1::rows`: one JSON object per row, keyed by column.

use std::rc::Rc;

use rusqlite::fallible_iterator::FallibleIterator;
use rusqlite::types::ValueRef;
use rusqlite::{Batch, Connection};
use worker::{Error, Result, SqlStorageValue};

use super::engine::Engine;
use crate::llm::json::FromJsonOwned;

/// One in-memory database; clones share it (a second object opening the same storage).
#[derive(Clone)]
pub struct Memory(Rc<Connection>);

impl Memory {
    pub fn new() -> Self {
        Self(Rc::new(
            Connection::open_in_memory().expect("an in-memory SQLite"),
        ))
    }

    pub fn has_table(&self, name: &str) -> bool {
        self.0
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
                [name],
                |row| row.get::<_, i64>(0),
            )
            .is_ok_and(|n| n > 0)
    }
}

fn error(e: rusqlite::Error) -> Error {
    Error::RustError(e.to_string())
}

fn value(v: SqlStorageValue) -> rusqlite::types::Value {
    use rusqlite::types::Value;
    match v {
        SqlStorageValue::Null => Value::Null,
        SqlStorageValue::Boolean(b) => Value::Integer(i64::from(b)),
        SqlStorageValue::Integer(n) => Value::Integer(n),
        SqlStorageValue::Float(f) => Value::Real(f),
        SqlStorageValue::String(s) => Value::Text(s),
        SqlStorageValue::Blob(b) => Value::Blob(b),
    }
}

impl Engine for Memory {
    /// The last statement's rows, as a JSON array.
    type Cursor = String;

    fn exec(&self, query: &str, bindings: Option<Vec<SqlStorageValue>>) -> Result<String> {
        let mut bindings: Vec<_> = bindings
            .unwrap_or_default()
            .into_iter()
            .map(value)
            .collect();
        let mut rows = Vec::new();
        let mut batch = Batch::new(&self.0, query);
        while let Some(mut statement) = batch.next().map_err(error)? {
            let params = std::mem::take(&mut bindings);
            let names: Vec<String> = statement
                .column_names()
                .iter()
                .map(|n| n.to_string())
                .collect();
            let mut cursor = statement
                .query(rusqlite::params_from_iter(params))
                .map_err(error)?;
            rows.clear();
            while let Some(row) = cursor.next().map_err(error)? {
                let mut object = serde_json::Map::new();
                for (i, name) in names.iter().enumerate() {
                    let v = match row.get_ref(i).map_err(error)? {
                        ValueRef::Null => serde_json::Value::Null,
                        ValueRef::Integer(n) => n.into(),
                        ValueRef::Real(f) => f.into(),
                        ValueRef::Text(t) => String::from_utf8_lossy(t).into(),
                        ValueRef::Blob(b) => b.to_vec().into(),
                    };
                    object.insert(name.clone(), v);
                }
                rows.push(serde_json::Value::Object(object));
            }
        }
        Ok(serde_json::Value::Array(rows).to_string())
    }

    fn count(cursor: String) -> Option<i64> {
        let rows: Vec<serde_json::Value> = crate::llm::json::from_str(&cursor).ok()?;
        i64::try_from(rows.len()).ok()
    }

    fn rows<T: FromJsonOwned>(cursor: String) -> Result<Vec<T>> {
        crate::llm::json::from_str(&cursor).map_err(|e| Error::RustError(e.to_string()))
    }
}
