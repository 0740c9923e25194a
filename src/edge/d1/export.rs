//! A user's data as a whole: what `GET /v1/me/export` reads beyond the usual pages (every
//! version of a conversation's artifacts, its files, the owner's ledger, each row as D1 returns
//! it), and the rows an erasure keeps and removes.

use serde_json::Value;

use super::params::BindParams;
use super::rows;
use super::{Created, Store};
use crate::edge::error::ApiError;

impl Store {
    /// Every version of every artifact of a conversation, by artifact then version.
    pub async fn artifact_versions(&self, conversation_id: &str) -> Result<Vec<Value>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare("SELECT * FROM artifacts WHERE conversation_id = ?1 ORDER BY id, version")
            .bind_params(&[conversation_id.into()])?;
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
            .bind_params(&[conversation_id.into()])?;
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
            .bind_params(&[owner.into(), (after as f64).into(), f64::from(limit).into()])?;
        rows::all(&statement).await
    }
}

impl Store {
    /// Records that `owner` is to be erased (once; a repeated request keeps the first).
    pub async fn request_erasure(
        &self,
        owner: &str,
        by: &str,
        now_ms: i64,
    ) -> Result<(), ApiError> {
        self.tick(1);
        self.db
            .prepare("INSERT OR IGNORE INTO erasures (owner, requested_by, requested_at) VALUES (?1, ?2, ?3)")
            .bind_params(&[owner.into(), by.into(), (now_ms as f64).into()])?
            .run()
            .await?;
        Ok(())
    }

    /// Whether `owner`'s erasure is recorded and not finished.
    pub async fn erasing(&self, owner: &str) -> Result<bool, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare("SELECT 1 AS found FROM erasures WHERE owner = ?1")
            .bind_params(&[owner.into()])?;
        Ok(rows::first::<Created>(&statement).await?.is_some())
    }

    /// Up to `limit` users whose erasure has not finished.
    pub async fn pending_erasures(&self, limit: u32) -> Result<Vec<String>, ApiError> {
        struct Pending {
            owner: String,
        }

        crate::json_struct!(Pending {
            "owner" => owner,
        });
        self.tick(1);
        let statement = self
            .db
            .prepare("SELECT owner FROM erasures ORDER BY requested_at LIMIT ?1")
            .bind_params(&[f64::from(limit).into()])?;
        Ok(rows::all::<Pending>(&statement)
            .await?
            .into_iter()
            .map(|p| p.owner)
            .collect())
    }

    /// The last step of an erasure, once no conversation is left: the ledger's rows lose the
    /// conversation they named and keep the accounting (model, tokens, cost, time), the budget
    /// row (an admin's limit) stays, and the erasure's own row goes. Erasing oneself must not
    /// reset what one has spent, nor lift a limit. Returns the ledger rows kept.
    pub async fn finish_erasure(&self, owner: &str) -> Result<u64, ApiError> {
        self.tick(1);
        let statements = [
            self.db
                .prepare(
                    "UPDATE usage_ledger SET conversation_id = ''
                     WHERE owner = ?1 AND conversation_id <> ''",
                )
                .bind_params(&[owner.into()])?,
            self.db
                .prepare("DELETE FROM erasures WHERE owner = ?1")
                .bind_params(&[owner.into()])?,
        ];
        let results = super::rows::batch(&self.db, &statements).await?;
        Ok(super::changes(&results[..1]))
    }
}
