//! What `GET /v1/me/export` reads beyond the usual pages: every version of a conversation's
//! artifacts, its files, and the owner's ledger, each row as D1 returns it.

use serde_json::Value;

use super::rows;
use super::Store;
use crate::edge::error::ApiError;

impl Store {
    /// Every version of every artifact of a conversation, by artifact then version.
    pub async fn artifact_versions(&self, conversation_id: &str) -> Result<Vec<Value>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare("SELECT * FROM artifacts WHERE conversation_id = ?1 ORDER BY id, version")
            .bind(&[conversation_id.into()])?;
        rows::all(&statement).await
    }

    /// A conversation's files (their bytes are served by the files route).
    pub async fn files_of(&self, conversation_id: &str) -> Result<Vec<Value>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "SELECT id, media_type, size, name, created_at FROM files
                 WHERE conversation_id = ?1 ORDER BY created_at, id",
            )
            .bind(&[conversation_id.into()])?;
        rows::all(&statement).await
    }

    /// Up to `limit` of `owner`'s ledger rows after row `after`, oldest first.
    pub async fn ledger_page(
        &self,
        owner: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<Value>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "SELECT id, conversation_id, model, provider, input_tokens, output_tokens,
                        cache_read_tokens, cache_write_tokens, cost_usd, created_at
                 FROM usage_ledger WHERE owner = ?1 AND id > ?2 ORDER BY id LIMIT ?3",
            )
            .bind(&[owner.into(), (after as f64).into(), f64::from(limit).into()])?;
        rows::all(&statement).await
    }
}
