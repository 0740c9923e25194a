//! The `chunks` table: the running turn's UI stream, in batches, for readers that re-attach
//! after an eviction (`replay` writes and reads it).

use worker::Result;

use super::{rows, ObjectStorage, Text};

impl ObjectStorage {
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
