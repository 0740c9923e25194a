//! The `memories` table (a user's working memory with each agent, migration 0016) and the
//! `message_search` index recall reads (kept by triggers as messages are written and deleted,
//! both made by the Worker when first needed: [`Store::ensure_recall`]).

use serde::Serialize;

use super::params::BindParams;
use super::rows;
use super::Store;
use crate::agent::memory::recall::Recalled;
use crate::edge::error::ApiError;

/// How a write of a working memory went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Yes,
    /// Another write came first: nothing was written.
    Raced,
    /// The owner is being erased, or the turn's conversation is gone.
    NotAllowed,
}

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

/// A message's id, as a query returns it.
struct MessageId {
    id: String,
}

crate::json_struct!(MessageId { "id" => id });

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

/// The recall index and the triggers that keep it: the text of users' and assistants' messages
/// of conversations whose `memory` is 1, searched per owner by BM25 (`scope`: the owner's UTF-8
/// bytes in hex and a `0`, so the stemmer leaves it whole: a token no other owner's can match,
/// and no message's words can be read as), each message naming its row (`search_rowid`) so
/// that deleting it (a conversation's deletion, retention, erasure, a message taken back)
/// deletes the row. Made by the Worker when it first needs them ([`Store::ensure_recall`]), not
/// by a migration: `wrangler d1 export` refuses a database with a virtual table.
const RECALL_SCHEMA: [&str; 3] = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS message_search USING fts5(
       body, scope, message_id UNINDEXED, conversation_id UNINDEXED, created_at UNINDEXED,
       tokenize = 'porter unicode61 remove_diacritics 2')",
    "CREATE TRIGGER IF NOT EXISTS message_search_add AFTER INSERT ON messages
     WHEN new.kind IN ('user', 'assistant')
       AND EXISTS (SELECT 1 FROM conversations c
                   WHERE c.id = new.conversation_id AND c.memory = 1 AND c.parent IS NULL)
       AND EXISTS (SELECT 1 FROM json_each(new.body, '$.content')
                   WHERE json_extract(value, '$.type') = 'text'
                     AND json_extract(value, '$.text') <> '')
     BEGIN
       INSERT INTO message_search (body, scope, message_id, conversation_id, created_at)
       SELECT (SELECT group_concat(json_extract(value, '$.text'), ' ')
               FROM json_each(new.body, '$.content')
               WHERE json_extract(value, '$.type') = 'text'),
              hex(c.owner) || '0', new.id, new.conversation_id, new.created_at
       FROM conversations c WHERE c.id = new.conversation_id;
       UPDATE messages SET search_rowid = last_insert_rowid() WHERE rowid = new.rowid;
     END",
    "CREATE TRIGGER IF NOT EXISTS message_search_drop AFTER DELETE ON messages
     WHEN old.search_rowid IS NOT NULL
     BEGIN
       DELETE FROM message_search WHERE rowid = old.search_rowid AND message_id = old.id;
     END",
];

thread_local! {
    /// The bindings whose recall index this isolate has made sure of.
    static RECALL_READY: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Store {
    /// Makes sure the recall index and its triggers exist in this database: once per isolate
    /// (after that, no round trip). Before an indexed conversation's messages are written, and
    /// before a search.
    pub async fn ensure_recall(&self) -> Result<(), ApiError> {
        if RECALL_READY.with(|ready| ready.borrow().contains(&self.binding)) {
            return Ok(());
        }
        self.tick(1);
        let statements = RECALL_SCHEMA
            .iter()
            .map(|sql| self.db.prepare(*sql))
            .collect::<Vec<_>>();
        rows::batch(&self.db, &statements).await?;
        // A deleted message's words leave the index's pages at once, not at their next merge
        // (SQLite 3.44 and later; kept by the table, so once is enough, and a database without
        // it still indexes).
        let secure = self.db.prepare(
            "INSERT INTO message_search (message_search, rank) VALUES ('secure-delete', 1)",
        );
        if let Err(e) = rows::batch(&self.db, &[secure]).await {
            worker::console_warn!(
                "the recall index keeps deleted words until its pages merge: {e}"
            );
        }
        RECALL_READY.with(|ready| ready.borrow_mut().push(self.binding.clone()));
        Ok(())
    }

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
    /// change was made on; `0`: none was kept): not for an owner being erased, nor for a turn
    /// (`from`: its conversation) whose conversation is gone (deleted, or erased: a write after
    /// it would outlive the erasure).
    pub async fn write_memory(
        &self,
        (owner, agent): (&str, &str),
        body: &str,
        (read, from): (i64, Option<&str>),
        now_ms: i64,
    ) -> Result<Written, ApiError> {
        // Whether the write may be made at all (the same condition guards both statements).
        const ALLOWED: &str = "NOT EXISTS (SELECT 1 FROM erasures WHERE owner = ?1)
             AND (?6 IS NULL OR EXISTS (SELECT 1 FROM conversations WHERE id = ?6 AND owner = ?1))";
        self.tick(1);
        let params = [
            owner.into(),
            agent.into(),
            body.into(),
            (read as f64).into(),
            (now_ms as f64).into(),
            from.into(),
        ];
        let statements = [
            self.db
                .prepare(format!(
                    "INSERT INTO memories (owner, agent, body, version, updated_at)
                     SELECT ?1, ?2, ?3, 1, ?5 WHERE ?4 = 0 AND {ALLOWED}
                     ON CONFLICT (owner, agent) DO NOTHING"
                ))
                .bind_params(&params)?,
            self.db
                .prepare(format!(
                    "UPDATE memories SET body = ?3, version = version + 1, updated_at = ?5
                     WHERE owner = ?1 AND agent = ?2 AND version = ?4 AND ?4 > 0 AND {ALLOWED}"
                ))
                .bind_params(&params)?,
            self.db
                .prepare(format!("SELECT 1 AS found WHERE {ALLOWED}"))
                .bind_params(&params)?,
        ];
        let results = rows::batch(&self.db, &statements).await?;
        if super::changes(&results[..2]) == 1 {
            return Ok(Written::Yes);
        }
        let allowed = results
            .get(2)
            .map(rows::results::<super::Created>)
            .transpose()?
            .is_some_and(|rows| !rows.is_empty());
        Ok(if allowed {
            Written::Raced
        } else {
            Written::NotAllowed
        })
    }

    /// Deletes every working memory last written before `before` (retention); how many.
    pub async fn forget_memories_before(&self, before: i64) -> Result<u64, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare("DELETE FROM memories WHERE updated_at < ?1")
            .bind_params(&[(before as f64).into()])?;
        Ok(super::changes(&rows::batch(&self.db, &[statement]).await?))
    }

    /// Sets `owner`'s memory with `agent` back to `initial` at a new version; whether there was
    /// one.
    pub async fn clear_memory(
        &self,
        owner: &str,
        agent: &str,
        initial: &str,
    ) -> Result<bool, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "UPDATE memories SET body = ?3, version = version + 1, updated_at = ?4
                 WHERE owner = ?1 AND agent = ?2",
            )
            .bind_params(&[
                owner.into(),
                agent.into(),
                initial.into(),
                (crate::edge::platform::clock::now_ms() as f64).into(),
            ])?;
        Ok(super::changes(&rows::batch(&self.db, &[statement]).await?) > 0)
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
                 JOIN message_search s ON s.rowid = m.search_rowid AND s.message_id = m.id
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

    /// Which of the messages of `ids` are stored and indexed (what deletion finds to delete the
    /// vectors of: [`Store::remembered_ids`]).
    pub async fn indexed_messages(&self, ids: &[String]) -> Result<Vec<String>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "SELECT id FROM messages
                 WHERE id IN (SELECT value FROM json_each(?1)) AND search_rowid IS NOT NULL",
            )
            .bind_params(&[serde_json::to_string(ids)?.into()])?;
        Ok(rows::all::<MessageId>(&statement)
            .await?
            .into_iter()
            .map(|r| r.id)
            .collect())
    }

    /// The ids of a conversation's messages that recall indexed (and semantic recall may hold
    /// vectors of).
    pub async fn remembered_ids(&self, conversation_id: &str) -> Result<Vec<String>, ApiError> {
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "SELECT id FROM messages WHERE conversation_id = ?1 AND search_rowid IS NOT NULL",
            )
            .bind_params(&[conversation_id.into()])?;
        Ok(rows::all::<MessageId>(&statement)
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
