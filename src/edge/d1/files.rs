//! The files users attach, in two tables: `files`, which conversation's stored messages name
//! each file (a trigger fills it as they are stored), and `stored_files`, every object put in
//! R2 with its owner, recorded before its bytes are written (what the quota counts, what
//! refusals, deletions, erasures and the hourly sweep remove). The bytes are in R2.

use super::params::BindParams;
use super::rows;
use super::Store;
use crate::edge::error::ApiError;
use crate::edge::platform::files::Files;

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

struct Used {
    bytes: f64,
}

crate::json_struct!(Used {
    "bytes" => bytes,
});

pub use crate::edge::config::FILE_FLOOR_BYTES;

/// How long an upload no conversation took may stay: a request cut off between storing its
/// files and the conversation's answer leaves them, and the scheduled run removes them after.
pub const UNACCEPTED_GRACE_MS: i64 = 60 * 60 * 1000;

/// How long a file a conversation took may wait to be named by a stored message (it waits in
/// the conversation's queue meanwhile) before the scheduled run takes it for lost.
pub const UNSTORED_GRACE_MS: i64 = 30 * 24 * 60 * 60 * 1000;

/// A file about to be put in R2.
pub struct NewFile<'a> {
    pub id: &'a str,
    pub owner: &'a str,
    /// The conversation the request named (for a `/v1/chat` guess, perhaps not the one that
    /// takes the message: the messages that name a file say which).
    pub conversation_id: &'a str,
    pub size: u64,
}

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

    /// The ids of a conversation's files: those its stored messages name, and those `owner`
    /// stored for it that no message names yet (waiting in its queue, or refused).
    pub async fn conversation_files(
        &self,
        owner: &str,
        conversation_id: &str,
    ) -> Result<Vec<String>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "SELECT id FROM files WHERE conversation_id = ?1
                 UNION SELECT id FROM stored_files WHERE conversation_id = ?1 AND owner = ?2",
            )
            .bind_params(&[conversation_id.into(), owner.into()])?;
        ids(&statement).await
    }

    /// Records `file` before its bytes are put in R2, within its owner's quota: `false` (and no
    /// row) when the files they keep and this one would pass `quota` bytes. One statement, so
    /// two uploads at once cannot both take the last room.
    pub async fn record_file(
        &self,
        file: &NewFile<'_>,
        quota: u64,
        now_ms: i64,
    ) -> Result<bool, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "INSERT INTO stored_files (id, owner, conversation_id, size, created_at)
                 SELECT ?1, ?2, ?3, ?4, ?5
                 WHERE (SELECT COALESCE(SUM(MAX(size, ?7)), 0) FROM stored_files WHERE owner = ?2)
                   + MAX(?4, ?7) <= ?6
                 RETURNING id",
            )
            .bind_params(&[
                file.id.into(),
                file.owner.into(),
                file.conversation_id.into(),
                (file.size as f64).into(),
                (now_ms as f64).into(),
                (quota as f64).into(),
                (FILE_FLOOR_BYTES as f64).into(),
            ])?;
        Ok(!rows::all::<Id>(&statement).await?.is_empty())
    }

    /// The bytes of the files `owner` keeps, as the quota counts them (at least
    /// [`FILE_FLOOR_BYTES`] each).
    pub async fn file_bytes_used(&self, owner: &str) -> Result<u64, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "SELECT COALESCE(SUM(MAX(size, ?2)), 0) AS bytes FROM stored_files WHERE owner = ?1",
            )
            .bind_params(&[owner.into(), (FILE_FLOOR_BYTES as f64).into()])?;
        Ok(rows::first::<Used>(&statement)
            .await?
            .map_or(0, |u| u.bytes as u64))
    }

    /// The conversation took the message that carries `ids`: they wait for it to be stored,
    /// and the sweep leaves them.
    pub async fn accept_files(&self, ids: &[String]) -> Result<(), ApiError> {
        self.by_ids("UPDATE stored_files SET accepted = MAX(accepted, 1)", ids)
            .await
    }

    /// Removes files `ids` from R2, then their records: every path that drops files no message
    /// will name (refusals, a repeated send's copies, a deleted conversation's queue, an
    /// erasure, the sweep). A failure leaves the records, so the sweep tries again.
    pub async fn discard_files(&self, bucket: &Files, ids: &[String]) -> Result<(), ApiError> {
        if ids.is_empty() {
            return Ok(());
        }
        bucket.delete(ids).await?;
        self.forget_files(ids).await
    }

    /// Forgets `ids`, whose objects were removed from R2.
    pub async fn forget_files(&self, ids: &[String]) -> Result<(), ApiError> {
        self.by_ids("DELETE FROM stored_files", ids).await
    }

    async fn by_ids(&self, head: &str, ids: &[String]) -> Result<(), ApiError> {
        if ids.is_empty() {
            return Ok(());
        }
        self.tick(1);
        self.db
            .prepare(format!(
                "{head} WHERE id IN (SELECT value FROM json_each(?1))"
            ))
            .bind_params(&[serde_json::to_string(ids)?.into()])?
            .run()
            .await?;
        Ok(())
    }

    /// Up to `limit` of the files `owner` keeps (an erasure's last step).
    pub async fn owner_files(&self, owner: &str, limit: u32) -> Result<Vec<String>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare("SELECT id FROM stored_files WHERE owner = ?1 LIMIT ?2")
            .bind_params(&[owner.into(), f64::from(limit).into()])?;
        ids(&statement).await
    }

    /// Up to `limit` files no stored message names: uploads no conversation took, stored before
    /// `now_ms -` [`UNACCEPTED_GRACE_MS`], and taken ones that waited past
    /// [`UNSTORED_GRACE_MS`]. Oldest first.
    pub async fn orphaned_files(&self, now_ms: i64, limit: u32) -> Result<Vec<String>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "SELECT id FROM stored_files s
                 WHERE ((accepted = 0 AND created_at < ?1) OR (accepted = 1 AND created_at < ?2))
                   AND NOT EXISTS (SELECT 1 FROM files f WHERE f.id = s.id)
                 ORDER BY created_at LIMIT ?3",
            )
            .bind_params(&[
                ((now_ms - UNACCEPTED_GRACE_MS) as f64).into(),
                ((now_ms - UNSTORED_GRACE_MS) as f64).into(),
                f64::from(limit).into(),
            ])?;
        ids(&statement).await
    }
}

async fn ids(statement: &worker::D1PreparedStatement) -> Result<Vec<String>, ApiError> {
    Ok(rows::all::<Id>(statement)
        .await?
        .into_iter()
        .map(|row| row.id)
        .collect())
}
