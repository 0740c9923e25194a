//! All D1 SQL, in one place. D1 is the source of truth for history: every message is written
//! as it is produced.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use worker::wasm_bindgen::JsValue;
use worker::D1Database;

use super::error::ApiError;
use crate::agent::AgentMessage;

/// A conversation row as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Conversation {
    pub id: String,
    #[serde(skip_serializing)]
    pub owner: String,
    pub title: Option<String>,
    pub system: Option<String>,
    pub model: Option<String>,
    #[serde(default, deserialize_with = "json_text", serialize_with = "raw_json")]
    pub metadata: Option<Value>,
    pub created_at: i64,
    pub updated_at: i64,
}

/// One LLM call in the owner's usage ledger.
pub struct UsageRow<'a> {
    pub owner: &'a str,
    pub model: &'a str,
    pub provider: &'a str,
    pub usage: &'a crate::llm::Usage,
    pub cost_usd: Option<f64>,
}

#[derive(Deserialize)]
struct Seq {
    seq: i64,
}

/// A stored message: the `AgentMessage` plus where it sits.
#[derive(Debug, Clone, Deserialize)]
struct MessageRow {
    seq: i64,
    id: String,
    body: String,
    created_at: i64,
    superseded: i64,
    #[serde(default)]
    compacted: i64,
}

pub struct Store {
    db: D1Database,
    /// D1 round trips made through this store (a batch is one), for the per-turn log line.
    round_trips: std::cell::Cell<u32>,
}

impl Store {
    pub fn new(db: D1Database) -> Self {
        Self {
            db,
            round_trips: std::cell::Cell::new(0),
        }
    }

    pub fn round_trips(&self) -> u32 {
        self.round_trips.get()
    }

    fn tick(&self, n: u32) {
        self.round_trips.set(self.round_trips.get().wrapping_add(n));
    }

    pub async fn create_conversation(&self, c: &Conversation) -> Result<(), ApiError> {
        self.tick(1);
        let metadata = c.metadata.as_ref().map(Value::to_string);
        self.db
            .prepare(
                "INSERT INTO conversations (id, owner, title, system, model, metadata, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
            )
            .bind(&[
                c.id.as_str().into(),
                c.owner.as_str().into(),
                opt(&c.title),
                opt(&c.system),
                opt(&c.model),
                opt(&metadata),
                (c.created_at as f64).into(),
            ])?
            .run()
            .await?;
        Ok(())
    }

    pub async fn conversation(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Option<Conversation>, ApiError> {
        self.tick(1);
        Ok(self
            .db
            .prepare("SELECT * FROM conversations WHERE id = ?1 AND owner = ?2")
            .bind(&[id.into(), owner.into()])?
            .first::<Conversation>(None)
            .await?)
    }

    /// Conversation `id`, whoever owns it (the caller checks).
    pub async fn conversation_by_id(&self, id: &str) -> Result<Option<Conversation>, ApiError> {
        self.tick(1);
        Ok(self
            .db
            .prepare("SELECT * FROM conversations WHERE id = ?1")
            .bind(&[id.into()])?
            .first::<Conversation>(None)
            .await?)
    }

    /// One page of `owner`'s conversations, newest first. The cursor is the last row's
    /// `(created_at, id)`: keyset pagination, so rows created meanwhile never shift a page.
    pub async fn conversations_page(
        &self,
        owner: &str,
        before: Option<(i64, &str)>,
        limit: i64,
    ) -> Result<(Vec<Conversation>, Option<(i64, String)>), ApiError> {
        self.tick(1);
        let (created, id) = before.unwrap_or((i64::MAX, ""));
        let mut rows = self
            .db
            .prepare(
                "SELECT * FROM conversations WHERE owner = ?1
                   AND (created_at < ?2 OR (created_at = ?2 AND id < ?3))
                 ORDER BY created_at DESC, id DESC LIMIT ?4",
            )
            .bind(&[
                owner.into(),
                (created.min(1 << 52) as f64).into(),
                id.into(),
                ((limit + 1) as f64).into(),
            ])?
            .all()
            .await?
            .results::<Conversation>()?;
        let next = if rows.len() as i64 > limit {
            rows.truncate(limit as usize);
            rows.last().map(|c| (c.created_at, c.id.clone()))
        } else {
            None
        };
        Ok((rows, next))
    }

    /// Deletes a conversation and its history; `false` if `owner` has no such conversation.
    pub async fn delete_conversation(&self, owner: &str, id: &str) -> Result<bool, ApiError> {
        self.tick(1);
        if self.conversation(owner, id).await?.is_none() {
            return Ok(false);
        }
        let statements = vec![
            self.db
                .prepare("DELETE FROM messages WHERE conversation_id = ?1")
                .bind(&[id.into()])?,
            self.db
                .prepare("DELETE FROM conversations WHERE id = ?1 AND owner = ?2")
                .bind(&[id.into(), owner.into()])?,
        ];
        self.db.batch(statements).await?;
        Ok(true)
    }

    /// Marks everything after the last (live) user message superseded, for a retry. `false`
    /// when there is no user message to retry.
    pub async fn supersede_after_last_user(&self, conversation_id: &str) -> Result<bool, ApiError> {
        self.tick(2);
        #[derive(Deserialize)]
        struct Last {
            seq: Option<i64>,
        }
        let last = self
            .db
            .prepare(
                "SELECT MAX(seq) AS seq FROM messages
                 WHERE conversation_id = ?1 AND kind = 'user' AND superseded = 0",
            )
            .bind(&[conversation_id.into()])?
            .first::<Last>(None)
            .await?
            .and_then(|l| l.seq);
        let Some(seq) = last else {
            return Ok(false);
        };
        self.db
            .prepare("UPDATE messages SET superseded = 1 WHERE conversation_id = ?1 AND seq > ?2")
            .bind(&[conversation_id.into(), (seq as f64).into()])?
            .run()
            .await?;
        Ok(true)
    }

    /// Appends a message at the end of the history and returns its sequence number, with the
    /// conversation's `updated_at`, in one round trip. Idempotent on `message_id`: a message
    /// stored before (a retry after a crash) keeps its place and its number. Only the
    /// conversation's object writes messages, one turn at a time, so `MAX(seq) + 1` cannot race.
    pub async fn append_message(
        &self,
        conversation_id: &str,
        message_id: &str,
        message: &AgentMessage,
        now_ms: i64,
    ) -> Result<i64, ApiError> {
        self.append(conversation_id, message_id, message, None, now_ms)
            .await
    }

    /// Appends an answer and its row in the owner's usage ledger, in the same round trip.
    pub async fn append_answer(
        &self,
        conversation_id: &str,
        message_id: &str,
        message: &AgentMessage,
        usage: &UsageRow<'_>,
        now_ms: i64,
    ) -> Result<i64, ApiError> {
        self.append(conversation_id, message_id, message, Some(usage), now_ms)
            .await
    }

    async fn append(
        &self,
        conversation_id: &str,
        message_id: &str,
        message: &AgentMessage,
        usage: Option<&UsageRow<'_>>,
        now_ms: i64,
    ) -> Result<i64, ApiError> {
        self.tick(1);
        let mut batch = vec![
            self.insert_message(conversation_id, message_id, message, now_ms)?,
            self.touch(conversation_id, now_ms)?,
        ];
        if let Some(usage) = usage {
            batch.push(self.ledger_row(conversation_id, usage, now_ms)?);
        }
        batch.push(
            self.db
                .prepare("SELECT seq FROM messages WHERE id = ?1")
                .bind(&[message_id.into()])?,
        );
        let results = self.db.batch(batch).await?;
        let seq = results
            .last()
            .map(|r| r.results::<Seq>())
            .transpose()?
            .and_then(|rows| rows.into_iter().next())
            .ok_or_else(|| ApiError::Internal(format!("message {message_id} was not stored")))?;
        Ok(seq.seq)
    }

    /// What one LLM call cost, as a row of the owner's usage ledger.
    fn ledger_row(
        &self,
        conversation_id: &str,
        row: &UsageRow<'_>,
        now_ms: i64,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        let usage = row.usage;
        Ok(self
            .db
            .prepare(
                "INSERT INTO usage_ledger (owner, conversation_id, model, provider, input_tokens,
                   output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .bind(&[
                row.owner.into(),
                conversation_id.into(),
                row.model.into(),
                row.provider.into(),
                (usage.input_tokens as f64).into(),
                (usage.output_tokens as f64).into(),
                (usage.cache_read_tokens as f64).into(),
                (usage.cache_write_tokens as f64).into(),
                row.cost_usd.map(JsValue::from_f64).unwrap_or(JsValue::NULL),
                (now_ms as f64).into(),
            ])?)
    }

    fn insert_message(
        &self,
        conversation_id: &str,
        message_id: &str,
        message: &AgentMessage,
        now_ms: i64,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        let body = serde_json::to_string(message)?;
        let (model, provider) = match message {
            AgentMessage::Assistant(a) => (Some(a.model.as_str()), Some(a.provider.as_str())),
            _ => (None, None),
        };
        Ok(self
            .db
            .prepare(
                "INSERT OR IGNORE INTO messages (conversation_id, seq, id, kind, body, model, provider, created_at)
                 SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4, ?5, ?6, ?7
                 FROM messages WHERE conversation_id = ?1",
            )
            .bind(&[
                conversation_id.into(),
                message_id.into(),
                message.kind().into(),
                body.into(),
                model.map(Into::into).unwrap_or(JsValue::NULL),
                provider.map(Into::into).unwrap_or(JsValue::NULL),
                (now_ms as f64).into(),
            ])?)
    }

    fn touch(
        &self,
        conversation_id: &str,
        now_ms: i64,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        Ok(self
            .db
            .prepare("UPDATE conversations SET updated_at = ?2 WHERE id = ?1")
            .bind(&[conversation_id.into(), (now_ms as f64).into()])?)
    }

    /// Mirrors a compaction in one batch: stores `summary` (if any) and marks the rows it
    /// replaces. Returns the summary's sequence number (0 without one).
    pub async fn compact(
        &self,
        conversation_id: &str,
        replaced: &[i64],
        summary: Option<(&str, &AgentMessage)>,
        now_ms: i64,
    ) -> Result<i64, ApiError> {
        self.tick(1);
        // Sequence numbers are integers we read from D1: safe to inline.
        let list = replaced
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let mut statements = vec![self
            .db
            .prepare(format!(
                "UPDATE messages SET compacted = 1 WHERE conversation_id = ?1 AND seq IN ({list})"
            ))
            .bind(&[conversation_id.into()])?];
        if let Some((id, message)) = summary {
            statements.push(self.insert_message(conversation_id, id, message, now_ms)?);
            statements.push(
                self.db
                    .prepare("SELECT seq FROM messages WHERE id = ?1")
                    .bind(&[id.into()])?,
            );
        }
        let results = self.db.batch(statements).await?;
        if summary.is_none() {
            return Ok(0);
        }
        let seq = results
            .last()
            .map(|r| r.results::<Seq>())
            .transpose()?
            .and_then(|rows| rows.into_iter().next())
            .map_or(0, |s| s.seq);
        Ok(seq)
    }

    /// What a turn works on, loaded once: the live rows (neither superseded nor compacted),
    /// with the latest summary first, and each message's sequence number.
    pub async fn turn_history(
        &self,
        conversation_id: &str,
    ) -> Result<(Vec<Option<i64>>, Vec<AgentMessage>), ApiError> {
        self.tick(1);
        let rows = self
            .db
            .prepare(
                "SELECT seq, id, body, created_at, superseded FROM messages
                 WHERE conversation_id = ?1 AND compacted = 0 AND superseded = 0
                 ORDER BY kind = 'summary' DESC, seq",
            )
            .bind(&[conversation_id.into()])?
            .all()
            .await?
            .results::<MessageRow>()?;
        let mut seqs = Vec::with_capacity(rows.len());
        let mut messages = Vec::with_capacity(rows.len());
        for row in rows {
            let message = serde_json::from_str(&row.body).map_err(|e| {
                ApiError::Internal(format!("stored message {} is unreadable: {e}", row.id))
            })?;
            seqs.push(Some(row.seq));
            messages.push(message);
        }
        Ok((seqs, messages))
    }

    /// One page of history as the API returns it: messages with `seq > after`, oldest first.
    pub async fn history_page(
        &self,
        conversation_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<(Vec<Value>, Option<i64>), ApiError> {
        // One extra row tells whether another page follows.
        let mut rows = self.rows(conversation_id, after, limit + 1).await?;
        let next = if rows.len() as i64 > limit {
            rows.truncate(limit as usize);
            rows.last().map(|r| r.seq)
        } else {
            None
        };
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let mut value: Value = serde_json::from_str(&row.body)?;
            if let Value::Object(map) = &mut value {
                map.insert("id".into(), row.id.into());
                map.insert("seq".into(), row.seq.into());
                map.insert("created_at".into(), row.created_at.into());
                if row.superseded != 0 {
                    map.insert("superseded".into(), true.into());
                }
                if row.compacted != 0 {
                    map.insert("compacted".into(), true.into());
                }
            }
            out.push(value);
        }
        Ok((out, next))
    }

    async fn rows(
        &self,
        conversation_id: &str,
        after: i64,
        limit: i64,
    ) -> Result<Vec<MessageRow>, ApiError> {
        self.tick(1);
        Ok(self
            .db
            .prepare(
                "SELECT seq, id, body, created_at, superseded, compacted FROM messages
                 WHERE conversation_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )
            .bind(&[
                conversation_id.into(),
                (after as f64).into(),
                (limit.min(1 << 40) as f64).into(),
            ])?
            .all()
            .await?
            .results::<MessageRow>()?)
    }
}

fn opt(v: &Option<String>) -> JsValue {
    match v {
        Some(s) => s.as_str().into(),
        None => JsValue::NULL,
    }
}

fn json_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    let text: Option<String> = Option::deserialize(d)?;
    Ok(text.and_then(|t| serde_json::from_str(&t).ok()))
}

fn raw_json<S: serde::Serializer>(v: &Option<Value>, s: S) -> Result<S::Ok, S::Error> {
    v.serialize(s)
}
