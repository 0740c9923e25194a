//! The `marks` table: rare facts by name, each a text value. The conversation is being deleted
//! ([`DELETED`]), its queue failed to start ([`FAILED_STARTS`]), the D1 database that holds it
//! ([`SHARD`]), when its schedules were made (`schedules_made`, see the `schedules` module).

use worker::Result;

use super::{rows, ObjectStorage, Text};

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

impl ObjectStorage {
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
}
