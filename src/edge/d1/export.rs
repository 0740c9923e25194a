//! A user's data as a whole: what `GET /v1/me/export` reads beyond the usual pages (a
//! conversation's messages and artifact versions a page of bounded size at a time, its files,
//! the owner's ledger), and the rows an erasure keeps and removes.
//!
//! An export page stops at a number of rows or at [`PAGE_CHARS`] of content, whichever comes
//! first, so that a conversation of many large rows (600 versions of a 256 KB artifact) is read
//! a few megabytes at a time. The size is counted in SQL over the rows' lengths only: D1 holds
//! the sizes of a page's candidates, not their contents, and returns the contents of the rows
//! that fit. A row larger than a page is returned alone, whole.

use serde_json::Value;
use worker::wasm_bindgen::JsValue;

use super::params::BindParams;
use super::rows;
use super::{Created, Store};
use crate::edge::error::ApiError;

/// Most characters of content (messages' bodies, artifacts' contents) one page returns, unless
/// its first row alone is larger.
pub const PAGE_CHARS: i64 = 2 << 20;
/// Most messages one page returns (their sizes are read for this many).
const MESSAGE_ROWS: i64 = 200;
/// Most artifact versions one page returns: a version may be 256 KB, and D1 reads the content
/// of every candidate to measure it, so a few more than a page holds at that size.
const ARTIFACT_ROWS: i64 = 16;

/// One page of an export's rows, and where the next one starts (`None`: there is no more).
pub struct Page<K> {
    pub rows: Vec<Value>,
    pub next: Option<K>,
}

/// A conversation's first pages, read in one round trip: its messages (when asked for), its
/// artifact versions, its files.
pub struct Opening {
    pub messages: Option<Page<i64>>,
    pub artifacts: Page<(String, i64)>,
    /// Each as D1 returns it (their bytes are served by the files route).
    pub files: Vec<Value>,
}

/// A message row of an export page, with how many rows the page considered (`scanned`): fewer
/// returned than considered means the size bound stopped the page and more follow.
struct MessageRow {
    seq: i64,
    id: String,
    body: String,
    created_at: i64,
    superseded: i64,
    compacted: i64,
    scanned: i64,
}

crate::json_struct!(MessageRow {
    "seq" => seq,
    "id" => id,
    "body" => body,
    "created_at" => created_at,
    "superseded" => superseded: default,
    "compacted" => compacted: default,
    "scanned" => scanned,
});

impl Store {
    /// The first pages of conversation `conversation_id`'s export, in one round trip: its
    /// messages after `messages_after` (`None`: none are wanted, they were exported already),
    /// its artifact versions after `artifacts_after` (`("", 0)`: from the first), its files.
    pub async fn export_opening(
        &self,
        conversation_id: &str,
        messages_after: Option<i64>,
        artifacts_after: (&str, i64),
    ) -> Result<Opening, ApiError> {
        self.tick(1);
        let mut statements = Vec::with_capacity(3);
        if let Some(after) = messages_after {
            statements.push(self.messages_page_statement(conversation_id, after)?);
        }
        statements.push(self.artifacts_page_statement(conversation_id, artifacts_after)?);
        statements.push(self.files_statement(conversation_id)?);
        let results = rows::batch(&self.db, &statements).await?;
        let mut at = 0;
        let messages = match messages_after {
            Some(_) => {
                at += 1;
                Some(message_page(rows::results(result(&results, 0)?)?)?)
            }
            None => None,
        };
        let artifacts = artifact_page(rows::results(result(&results, at)?)?)?;
        let files = rows::results(result(&results, at + 1)?)?;
        Ok(Opening {
            messages,
            artifacts,
            files,
        })
    }

    /// A page of a conversation's messages after `seq` `after`, as the messages route shows
    /// them; the next page's cursor is the last one's `seq`.
    pub async fn export_messages(
        &self,
        conversation_id: &str,
        after: i64,
    ) -> Result<Page<i64>, ApiError> {
        self.tick(1);
        message_page(rows::all(&self.messages_page_statement(conversation_id, after)?).await?)
    }

    /// A page of a conversation's artifact versions after `(artifact, version)` `after`, by
    /// artifact then version, each row as D1 returns it.
    pub async fn export_artifacts(
        &self,
        conversation_id: &str,
        after: (&str, i64),
    ) -> Result<Page<(String, i64)>, ApiError> {
        self.tick(1);
        artifact_page(rows::all(&self.artifacts_page_statement(conversation_id, after)?).await?)
    }

    /// The messages after `after`: the first [`MESSAGE_ROWS`] are measured (`length(body)`,
    /// in the CTE), and those within [`PAGE_CHARS`] (at least one) are read whole.
    fn messages_page_statement(
        &self,
        conversation_id: &str,
        after: i64,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        self.db
            .prepare(
                "WITH page AS (
                   SELECT seq, ROW_NUMBER() OVER w AS n, SUM(size) OVER w AS upto,
                          COUNT(*) OVER () AS scanned
                   FROM (SELECT seq, length(body) AS size FROM messages
                         WHERE conversation_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3)
                   WINDOW w AS (ORDER BY seq ROWS UNBOUNDED PRECEDING))
                 SELECT m.seq, m.id, m.body, m.created_at, m.superseded, m.compacted, page.scanned
                 FROM page JOIN messages m ON m.conversation_id = ?1 AND m.seq = page.seq
                 WHERE page.n = 1 OR (page.n < ?3 AND page.upto <= ?4)
                 ORDER BY m.seq",
            )
            .bind_params(&[
                conversation_id.into(),
                (after.clamp(0, 1 << 52) as f64).into(),
                // One more than a page: considered, never returned, it tells that more follow.
                ((MESSAGE_ROWS + 1) as f64).into(),
                (PAGE_CHARS as f64).into(),
            ])
    }

    /// The artifact versions after `after`, measured and cut as
    /// [`Self::messages_page_statement`] does.
    fn artifacts_page_statement(
        &self,
        conversation_id: &str,
        (artifact, version): (&str, i64),
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        self.db
            .prepare(
                "WITH page AS (
                   SELECT id, version, ROW_NUMBER() OVER w AS n, SUM(size) OVER w AS upto,
                          COUNT(*) OVER () AS scanned
                   FROM (SELECT id, version, length(content) AS size FROM artifacts
                         WHERE conversation_id = ?1 AND (id > ?2 OR (id = ?2 AND version > ?3))
                         ORDER BY id, version LIMIT ?4)
                   WINDOW w AS (ORDER BY id, version ROWS UNBOUNDED PRECEDING))
                 SELECT a.conversation_id, a.id, a.version, a.title, a.kind, a.content, a.author,
                        a.created_at, a.updated_at, page.scanned
                 FROM page JOIN artifacts a
                   ON a.conversation_id = ?1 AND a.id = page.id AND a.version = page.version
                 WHERE page.n = 1 OR (page.n < ?4 AND page.upto <= ?5)
                 ORDER BY a.id, a.version",
            )
            .bind_params(&[
                conversation_id.into(),
                artifact.into(),
                (version.clamp(0, 1 << 52) as f64).into(),
                ((ARTIFACT_ROWS + 1) as f64).into(),
                (PAGE_CHARS as f64).into(),
            ])
    }

    /// A conversation's files (their bytes are served by the files route).
    fn files_statement(
        &self,
        conversation_id: &str,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        self.db
            .prepare(
                "SELECT id, media_type, size, name, created_at FROM files
                 WHERE conversation_id = ?1 ORDER BY created_at, id",
            )
            .bind_params(&[conversation_id.into()])
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

/// Result `index` of a batch.
fn result(results: &[JsValue], index: usize) -> Result<&JsValue, ApiError> {
    results.get(index).ok_or_else(|| {
        ApiError::Internal(format!("D1 answered a batch without its result {index}"))
    })
}

/// A page of message rows as the messages route shows them: each stored message with its
/// `id`, `seq`, `created_at`, and `superseded`/`compacted` when set.
fn message_page(rows: Vec<MessageRow>) -> Result<Page<i64>, ApiError> {
    let more = rows
        .first()
        .is_some_and(|r| (rows.len() as i64) < r.scanned);
    let next = if more {
        rows.last().map(|r| r.seq)
    } else {
        None
    };
    // The shape of `GET .../messages`.
    let out = rows
        .into_iter()
        .map(|r| {
            super::history::api_message(
                &r.body,
                r.id,
                r.seq,
                r.created_at,
                (r.superseded, r.compacted),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Page { rows: out, next })
}

/// A page of artifact rows, without the page's own `scanned` column.
fn artifact_page(mut rows: Vec<Value>) -> Result<Page<(String, i64)>, ApiError> {
    let scanned = rows
        .first()
        .and_then(|r| r.get("scanned"))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let next = if (rows.len() as i64) < scanned {
        let last = rows.last().and_then(|r| {
            Some((
                r.get("id")?.as_str()?.to_string(),
                r.get("version")?.as_i64()?,
            ))
        });
        // Without the last row's key the export could not go on from it: fail, never skip.
        Some(last.ok_or_else(|| {
            ApiError::Internal("an artifact row without its id or version".into())
        })?)
    } else {
        None
    };
    for row in &mut rows {
        if let Value::Object(map) = row {
            map.shift_remove("scanned");
        }
    }
    Ok(Page { rows, next })
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
                .prepare("DELETE FROM memories WHERE owner = ?1")
                .bind_params(&[owner.into()])?,
            self.db
                .prepare("DELETE FROM erasures WHERE owner = ?1")
                .bind_params(&[owner.into()])?,
        ];
        let results = super::rows::batch(&self.db, &statements).await?;
        Ok(super::changes(&results[..1]))
    }
}
