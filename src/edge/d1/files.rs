//! The `files` table: which conversation each attached file belongs to (a trigger fills it as
//! the messages that carry files are stored; the bytes are in R2).

use super::params::BindParams;
use super::rows;
use super::Store;
use crate::edge::error::ApiError;

/// A file as the files route serves it.
pub struct FileRow {
    pub media_type: String,
    pub size: i64,
    pub name: Option<String>,
}

crate::json_struct!(FileRow {
    "media_type" => media_type,
    "size" => size,
    "name" => name: default,
});

struct Id {
    id: String,
}

crate::json_struct!(Id {
    "id" => id,
});

impl Store {
    /// File `id` of conversation `conversation_id`, if it is one of its files.
    pub async fn file(&self, conversation_id: &str, id: &str) -> Result<Option<FileRow>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "SELECT media_type, size, name FROM files WHERE conversation_id = ?1 AND id = ?2",
            )
            .bind_params(&[conversation_id.into(), id.into()])?;
        rows::first(&statement).await
    }

    /// The ids of a conversation's files.
    pub async fn conversation_files(&self, conversation_id: &str) -> Result<Vec<String>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare("SELECT id FROM files WHERE conversation_id = ?1")
            .bind_params(&[conversation_id.into()])?;
        Ok(rows::all::<Id>(&statement)
            .await?
            .into_iter()
            .map(|row| row.id)
            .collect())
    }
}
