//! The `memories` table (a user's working memory with each agent) and the `message_search`
//! index recall reads (kept by triggers as messages are written and deleted; migration 0016).

use serde::Serialize;

use super::params::BindParams;
use super::rows;
use super::Store;
use crate::agent::memory::recall::Recalled;
use crate::edge::error::ApiError;

/// A working memory as it is kept.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryRow {
    pub agent: String,
    /// The document: a JSON object's text for a schema, else Markdown.
    #[serde(rename = "memory")]
    pub body: String,
    /// How many times it was written.
    pub version: i64,
    pub updated_at: i64,
}

crate::json_struct!(MemoryRow {
    "agent" => agent,
    "body" => body,
    "version" => version,
    "updated_at" => updated_at,
});

struct RecallRow {
    conversation_id: String,
    title: Option<String>,
    message_id: String,
    kind: String,
    created_at: i64,
    text: String,
}

crate::json_struct!(RecallRow {
    "conversation_id" => conversation_id,
    "title" => title,
    "message_id" => message_id,
    "kind" => kind,
    "created_at" => created_at,
    "text" => text: default,
});

impl RecallRow {
    fn recalled(self) -> Recalled {
        Recalled {
            conversation_id: self.conversation_id,
            title: self.title,
            message_id: self.message_id,
            role: self.kind,
            created_at: self.created_at,
            text: self.text,
        }
    }
}

/// The token `message_search`'s `scope` column holds for `owner`: their id's UTF-8 bytes in
/// hex, as SQLite's `hex()` writes them, then `0` (which no stemmer rule ends with). No other
/// owner's can equal it, and a message's words can never be read as it.
pub fn scope(owner: &str) -> String {
    let mut hex = String::with_capacity(owner.len() * 2 + 1);
    for byte in owner.bytes() {
        hex.push_str(&format!("{byte:02X}"));
    }
    hex.push('0');
    hex
}

impl Store {
    /// `owner`'s working memory with `agent`, if any is kept.
    pub async fn memory(&self, owner: &str, agent: &str) -> Result<Option<MemoryRow>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare("SELECT * FROM memories WHERE owner = ?1 AND agent = ?2")
            .bind_params(&[owner.into(), agent.into()])?;
        rows::first(&statement).await
    }

    /// Every working memory `owner` has.
    pub async fn memories(&self, owner: &str) -> Result<Vec<MemoryRow>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare("SELECT * FROM memories WHERE owner = ? ORDER BY agent")
            .bind_params(&[owner.into()])?;
        rows::all(&statement).await
    }

    /// Writes `body` as `owner`'s memory with `agent` if it is still at `read` (the version the
    /// change was made on; `0`: none was kept), not for an owner being erased. `false`: another
    /// write came first (or the erasure), and nothing was written.
    pub async fn write_memory(
        &self,
        owner: &str,
        agent: &str,
        body: &str,
        read: i64,
        now_ms: i64,
    ) -> Result<bool, ApiError> {
        self.tick(1);
        let result = self
            .db
            .prepare(
                "INSERT INTO memories (owner, agent, body, version, updated_at)
                 SELECT ?1, ?2, ?3, 1, ?5
                 WHERE ?4 = 0 AND NOT EXISTS (SELECT 1 FROM erasures WHERE owner = ?1)
                 ON CONFLICT (owner, agent) DO NOTHING",
            )
            .bind_params(&[
                owner.into(),
                agent.into(),
                body.into(),
                (read as f64).into(),
                (now_ms as f64).into(),
            ])?;
        let update = self
            .db
            .prepare(
                "UPDATE memories SET body = ?3, version = version + 1, updated_at = ?5
                 WHERE owner = ?1 AND agent = ?2 AND version = ?4 AND ?4 > 0
                   AND NOT EXISTS (SELECT 1 FROM erasures WHERE owner = ?1)",
            )
            .bind_params(&[
                owner.into(),
                agent.into(),
                body.into(),
                (read as f64).into(),
                (now_ms as f64).into(),
            ])?;
        let results = rows::batch(&self.db, &[result, update]).await?;
        Ok(super::changes(&results) == 1)
    }

    /// Forgets `owner`'s memory with `agent`; whether there was one.
    pub async fn delete_memory(&self, owner: &str, agent: &str) -> Result<bool, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare("DELETE FROM memories WHERE owner = ?1 AND agent = ?2")
            .bind_params(&[owner.into(), agent.into()])?;
        let result = rows::batch(&self.db, &[statement]).await?;
        Ok(super::changes(&result) > 0)
    }

    /// The `top_k` messages of `owner`'s conversations other than `except` that best match
    /// `terms` (an FTS5 expression of quoted words, [`search_terms`]), best first: not a
    /// child's, not one made with `memory: false`, not superseded.
    ///
    /// [`search_terms`]: crate::agent::memory::recall::search_terms
    pub async fn recall(
        &self,
        owner: &str,
        terms: &str,
        except: Option<&str>,
        top_k: u32,
    ) -> Result<Vec<Recalled>, ApiError> {
        self.tick(1);
        let query = format!("scope:\"{}\" AND body:{terms}", scope(owner));
        let statement = self
            .db
            .prepare(
                "SELECT s.conversation_id, c.title, s.message_id, m.kind,
                        CAST(s.created_at AS INTEGER) AS created_at,
                        snippet(message_search, 0, '', '', '…', 48) AS text
                 FROM message_search s
                 JOIN messages m ON m.id = s.message_id
                 JOIN conversations c ON c.id = m.conversation_id
                 WHERE message_search MATCH ?1 AND s.conversation_id IS NOT ?2
                   AND c.owner = ?3 AND m.superseded = 0
                 ORDER BY bm25(message_search, 1.0, 0.0)
                 LIMIT ?4",
            )
            .bind_params(&[
                query.into(),
                except.into(),
                owner.into(),
                f64::from(top_k).into(),
            ])?;
        Ok(rows::all::<RecallRow>(&statement)
            .await?
            .into_iter()
            .map(RecallRow::recalled)
            .collect())
    }

    /// The messages of `ids` (what semantic search found, nearest first) that recall may give:
    /// `owner`'s, still stored and indexed (so never a deleted conversation's, whatever the
    /// index still holds), not in `except`, not superseded. In the order of `ids`.
    pub async fn recalled_by_ids(
        &self,
        owner: &str,
        ids: &[String],
        except: Option<&str>,
    ) -> Result<Vec<Recalled>, ApiError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.tick(1);
        let list = serde_json::to_string(ids)?;
        let statement = self
            .db
            .prepare(
                "SELECT m.conversation_id, c.title, m.id AS message_id, m.kind, m.created_at,
                        substr(s.body, 1, 600) AS text
                 FROM messages m
                 JOIN conversations c ON c.id = m.conversation_id
                 JOIN message_search s ON s.rowid = m.search_rowid
                 WHERE m.id IN (SELECT value FROM json_each(?1)) AND c.owner = ?2
                   AND m.conversation_id IS NOT ?3 AND m.superseded = 0",
            )
            .bind_params(&[list.into(), owner.into(), except.into()])?;
        let mut found: Vec<Recalled> = rows::all::<RecallRow>(&statement)
            .await?
            .into_iter()
            .map(RecallRow::recalled)
            .collect();
        found.sort_by_key(|r| ids.iter().position(|id| *id == r.message_id));
        Ok(found)
    }

    /// The ids of a conversation's messages that recall indexed (and semantic recall may hold
    /// vectors of).
    pub async fn remembered_ids(&self, conversation_id: &str) -> Result<Vec<String>, ApiError> {
        struct Id {
            id: String,
        }

        crate::json_struct!(Id { "id" => id });
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "SELECT id FROM messages WHERE conversation_id = ?1 AND search_rowid IS NOT NULL",
            )
            .bind_params(&[conversation_id.into()])?;
        Ok(rows::all::<Id>(&statement)
            .await?
            .into_iter()
            .map(|r| r.id)
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::scope;

    #[test]
    fn a_scope_is_the_owners_bytes_in_hex_and_unique() {
        assert_eq!(scope("user:alice"), "757365723A616C6963650");
        assert_ne!(scope("ab"), scope("a"));
        assert_ne!(scope("é"), scope("e"));
    }
}
