//! All D1 SQL, in one place. D1 is the source of truth for history: every message is written
//! as it is produced.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use worker::wasm_bindgen::JsValue;
use worker::D1Database;

use super::budget::{Budget, Period};
use super::config::ArtifactLimits;
use super::error::ApiError;
use super::rows;
use crate::agent::artifacts::{first_line, Artifact, ArtifactKind, ArtifactSummary, Author};
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
    /// The toolsets its turns may use; `None`: every configured one.
    #[serde(default, deserialize_with = "json_list")]
    pub toolsets: Option<Vec<String>>,
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

/// One live row of a turn's history, as [`rows::embedding`] writes it into the history's
/// document: the stored message embedded as it is.
#[derive(Deserialize)]
struct HistoryEntry {
    seq: i64,
    id: String,
    /// 1 for a compaction's summary, which the model sees first.
    summary: i64,
    message: Option<AgentMessage>,
}

/// The same row with its message as text, read only to name a stored message that does not
/// read ([`history_of_rows`]).
#[derive(Deserialize)]
struct HistoryRow {
    seq: i64,
    id: String,
    summary: i64,
    message: String,
}

/// A conversation's live rows (neither superseded nor compacted). Their order is set after
/// reading, summary first, so SQLite sorts nothing.
const HISTORY: &str = "SELECT seq, id, kind = 'summary' AS summary, body AS message
     FROM messages WHERE conversation_id = ?1 AND compacted = 0 AND superseded = 0";

/// What a turn starts from.
pub struct TurnHistory {
    /// Each message's sequence number in D1.
    pub seqs: Vec<Option<i64>>,
    pub messages: Vec<AgentMessage>,
    pub artifacts: Vec<ArtifactSummary>,
    /// The owner's budget, when the turn asked for it and it could be read (`Some(None)`: they
    /// have none).
    pub budget: Option<Option<Budget>>,
}

/// Whose budget a turn reads in its history's round trip, and the deployment's default
/// (`USER_BUDGET_USD`, `USER_BUDGET_PERIOD`).
pub struct BudgetRead<'a> {
    pub owner: &'a str,
    pub default: (f64, Period),
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

/// The 429 of a user who keeps `max` conversations.
fn too_many_conversations(max: u32) -> ApiError {
    ApiError::TooManyRequests {
        message: format!(
            "you keep {max} conversations, the most this deployment allows; delete one to start \
             another"
        ),
        retry_after_s: 3_600,
    }
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

    /// Creates `c` unless its owner keeps `max` conversations already (a 429 saying so).
    pub async fn create_conversation(&self, c: &Conversation, max: u32) -> Result<(), ApiError> {
        self.tick(1);
        let mut values = conversation_values(c);
        values.push(f64::from(max).into());
        let statement = self
            .db
            .prepare(
                "INSERT INTO conversations
                   (id, owner, title, system, model, metadata, created_at, updated_at, toolsets)
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8
                 WHERE (SELECT COUNT(*) FROM conversations WHERE owner = ?2) < ?9
                 RETURNING id",
            )
            .bind(&values)?;
        if rows::all::<Created>(&statement).await?.is_empty() {
            return Err(too_many_conversations(max));
        }
        Ok(())
    }

    /// Whether `owner` may start conversation `id` (one round trip): it exists already, or they
    /// keep fewer than `max`.
    pub async fn may_create(&self, owner: &str, id: &str, max: u32) -> Result<(), ApiError> {
        self.tick(1);
        #[derive(Deserialize)]
        struct Room {
            room: i64,
        }
        let room = rows::first::<Room>(
            &self
                .db
                .prepare(
                    "SELECT EXISTS (SELECT 1 FROM conversations WHERE id = ?1 AND owner = ?2)
                       OR (SELECT COUNT(*) FROM conversations WHERE owner = ?2) < ?3 AS room",
                )
                .bind(&[id.into(), owner.into(), f64::from(max).into()])?,
        )
        .await?;
        match room {
            Some(Room { room: 0 }) => Err(too_many_conversations(max)),
            _ => Ok(()),
        }
    }

    /// The conversation a `/v1/chat` id names for its caller: `raw_id` when that is one of the
    /// caller's conversations, else `c` (whose id is the caller's own scoped id), created on
    /// first use. One round trip; another user's `raw_id` is never read, so it can be neither
    /// learned nor squatted.
    pub async fn chat_conversation(
        &self,
        raw_id: &str,
        c: &Conversation,
        max: u32,
    ) -> Result<Conversation, ApiError> {
        self.tick(1);
        let results = rows::batch(
            &self.db,
            &[
                self.db
                    .prepare(
                        "INSERT INTO conversations
                           (id, owner, title, system, model, metadata, created_at, updated_at,
                            toolsets)
                         SELECT ?1, ?2, ?3, NULL, NULL, NULL, ?4, ?4, NULL
                         WHERE NOT EXISTS
                           (SELECT 1 FROM conversations WHERE id = ?5 AND owner = ?2)
                           AND (SELECT COUNT(*) FROM conversations WHERE owner = ?2) < ?6
                         ON CONFLICT (id) DO NOTHING",
                    )
                    .bind(&[
                        c.id.as_str().into(),
                        c.owner.as_str().into(),
                        opt(&c.title),
                        (c.created_at as f64).into(),
                        raw_id.into(),
                        f64::from(max).into(),
                    ])?,
                self.db
                    .prepare(
                        "SELECT * FROM conversations
                         WHERE owner = ?2 AND (id = ?1 OR id = ?3)
                         ORDER BY id = ?1 DESC LIMIT 1",
                    )
                    .bind(&[raw_id.into(), c.owner.as_str().into(), c.id.as_str().into()])?,
            ],
        )
        .await?;
        results
            .get(1)
            .map(rows::results::<Conversation>)
            .transpose()?
            .and_then(|rows| rows.into_iter().next())
            // Neither found nor made: the owner keeps as many as they may.
            .ok_or_else(|| too_many_conversations(max))
    }

    fn insert_conversation(
        &self,
        c: &Conversation,
        on_conflict: &str,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        Ok(self
            .db
            .prepare(format!(
                "INSERT INTO conversations
                   (id, owner, title, system, model, metadata, created_at, updated_at, toolsets)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8) {on_conflict}"
            ))
            .bind(&conversation_values(c))?)
    }

    pub async fn conversation(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Option<Conversation>, ApiError> {
        self.tick(1);
        rows::first::<Conversation>(
            &self
                .db
                .prepare(
                    "SELECT * FROM conversations WHERE owner = ?2 AND (id = ?1 OR id = ?3)
                     ORDER BY id = ?1 DESC LIMIT 1",
                )
                .bind(&[id.into(), owner.into(), scoped_id(owner, id).into()])?,
        )
        .await
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
        let mut page = rows::all::<Conversation>(
            &self
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
                ])?,
        )
        .await?;
        let next = if page.len() as i64 > limit {
            page.truncate(limit as usize);
            page.last().map(|c| (c.created_at, c.id.clone()))
        } else {
            None
        };
        Ok((page, next))
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
                .prepare("DELETE FROM artifacts WHERE conversation_id = ?1")
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
        let last = rows::first::<Last>(
            &self
                .db
                .prepare(
                    "SELECT MAX(seq) AS seq FROM messages
                 WHERE conversation_id = ?1 AND kind = 'user' AND superseded = 0",
                )
                .bind(&[conversation_id.into()])?,
        )
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
        let results = rows::batch(&self.db, &batch).await?;
        let seq = results
            .last()
            .map(rows::results::<Seq>)
            .transpose()?
            .and_then(|rows| rows.into_iter().next())
            .ok_or_else(|| ApiError::Internal(format!("message {message_id} was not stored")))?;
        Ok(seq.seq)
    }

    /// Where message `message_id` is in the conversation's history, if it is there.
    pub async fn message_seq(
        &self,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<Option<i64>, ApiError> {
        self.tick(1);
        let found = rows::first::<Seq>(
            &self
                .db
                .prepare("SELECT seq FROM messages WHERE conversation_id = ?1 AND id = ?2")
                .bind(&[conversation_id.into(), message_id.into()])?,
        )
        .await?;
        Ok(found.map(|row| row.seq))
    }

    /// A ledger row for a call that stores no message (compaction's summary requests).
    pub async fn record_usage(
        &self,
        conversation_id: &str,
        usage: &UsageRow<'_>,
        now_ms: i64,
    ) -> Result<(), ApiError> {
        self.tick(1);
        self.ledger_row(conversation_id, usage, now_ms)?
            .run()
            .await?;
        Ok(())
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
                   output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, created_at,
                   estimated)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
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
                f64::from(u8::from(usage.estimated)).into(),
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
        let results = rows::batch(&self.db, &statements).await?;
        if summary.is_none() {
            return Ok(0);
        }
        let seq = results
            .last()
            .map(rows::results::<Seq>)
            .transpose()?
            .and_then(|rows| rows.into_iter().next())
            .map_or(0, |s| s.seq);
        Ok(seq)
    }

    /// What a turn works on, loaded once in one round trip: the live rows (neither superseded
    /// nor compacted), with the latest summary first, each message's sequence number, and the
    /// conversation's artifacts (for the system prompt's index). `create` (the conversation's
    /// row, unless it exists) and `incoming` (id, message) are stored first in the same round
    /// trip, so the messages come back at the end of the history: a new message costs no round
    /// trip of its own before the model is called, nor does reading the owner's `budget`.
    pub async fn turn_history(
        &self,
        conversation_id: &str,
        create: Option<&Conversation>,
        incoming: &[(&str, &AgentMessage)],
        budget: Option<BudgetRead<'_>>,
        now_ms: i64,
    ) -> Result<TurnHistory, ApiError> {
        self.tick(1);
        let mut batch = Vec::with_capacity(incoming.len() + 6);
        if let Some(c) = create {
            batch.push(self.insert_conversation(c, "ON CONFLICT (id) DO NOTHING")?);
        }
        for (id, message) in incoming {
            batch.push(self.insert_message(conversation_id, id, message, now_ms)?);
        }
        if !incoming.is_empty() {
            batch.push(self.touch(conversation_id, now_ms)?);
        }
        let stored = batch.len();
        batch.push(self.db.prepare(HISTORY).bind(&[conversation_id.into()])?);
        batch.push(self.artifacts_statement(conversation_id)?);
        if let Some(read) = &budget {
            batch.extend(self.budget_statements(read.owner, now_ms)?);
        }
        let results = rows::batch(&self.db, &batch).await?;
        let (Some(history), Some(artifacts)) = (results.get(stored), results.get(stored + 1))
        else {
            return Err(ApiError::Internal("a D1 batch answered short".into()));
        };
        // A budget that cannot be read here is left unread: the turn's resolver reads it again
        // at the first LLM call and says why it cannot, as it did before it rode along.
        let budget = budget.and_then(|read| {
            budget_from(
                results.get(stored + 2..).unwrap_or_default(),
                Some(read.default),
                now_ms,
            )
            .ok()
        });
        // The rows cross into wasm as one document, the stored messages in it as they are:
        // quoted inside the rows' JSON, every message would be escaped by `JSON.stringify`,
        // unescaped and read again. Only when the document does not read are the rows read
        // one by one, to name the message that does not.
        let (seqs, messages) = match history_of(&rows::embedding(history, "message")?) {
            Ok(read) => read,
            Err(_) => history_of_rows(rows::results::<HistoryRow>(history)?)?,
        };
        Ok(TurnHistory {
            seqs,
            messages,
            artifacts: summaries(rows::results::<ArtifactRow>(artifacts)?)?,
            budget,
        })
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
            let mut value: Value = crate::llm::json::from_str(&row.body)?;
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
        rows::all::<MessageRow>(
            &self
                .db
                .prepare(
                    "SELECT seq, id, body, created_at, superseded, compacted FROM messages
                 WHERE conversation_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
                )
                .bind(&[
                    conversation_id.into(),
                    (after as f64).into(),
                    (limit.min(1 << 40) as f64).into(),
                ])?,
        )
        .await
    }
}

/// What a user spent on one model in a period (`GET /v1/usage`).
#[derive(Debug, Serialize, Deserialize)]
pub struct ModelSpend {
    pub provider: String,
    pub model: String,
    pub calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// `None` when no call's price was known.
    pub cost_usd: Option<f64>,
}

impl Store {
    /// `owner`'s budget now: their own row, else `default` (limit, period); `None` when neither
    /// gives a limit. One round trip.
    pub async fn budget(
        &self,
        owner: &str,
        default: Option<(f64, Period)>,
        now_ms: i64,
    ) -> Result<Option<Budget>, ApiError> {
        self.tick(1);
        let results = rows::batch(&self.db, &self.budget_statements(owner, now_ms)?).await?;
        budget_from(&results, default, now_ms)
    }

    /// The two reads a budget is made of (the user's row, what they spent this day and month),
    /// for a batch of their own or a turn's history batch; [`budget_from`] reads their results.
    fn budget_statements(
        &self,
        owner: &str,
        now_ms: i64,
    ) -> Result<[worker::D1PreparedStatement; 2], ApiError> {
        let (day_start, _) = Period::Day.bounds(now_ms);
        let (month_start, _) = Period::Month.bounds(now_ms);
        Ok([
            self.db
                .prepare("SELECT limit_usd, period, warned_period FROM budgets WHERE user = ?1")
                .bind(&[owner.into()])?,
            self.db
                .prepare(
                    "SELECT SUM(CASE WHEN created_at >= ?2 THEN cost_usd ELSE 0 END) AS day_usd,
                            SUM(cost_usd) AS month_usd
                     FROM usage_ledger WHERE owner = ?1 AND created_at >= ?3",
                )
                .bind(&[
                    owner.into(),
                    (day_start as f64).into(),
                    (month_start as f64).into(),
                ])?,
        ])
    }

    /// Remembers that `owner` was warned in the period starting at `period_start`.
    pub async fn mark_warned(
        &self,
        owner: &str,
        period_start: i64,
        now_ms: i64,
    ) -> Result<(), ApiError> {
        self.tick(1);
        self.db
            .prepare(
                "INSERT INTO budgets (user, warned_period, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (user) DO UPDATE SET warned_period = excluded.warned_period",
            )
            .bind(&[
                owner.into(),
                (period_start as f64).into(),
                (now_ms as f64).into(),
            ])?
            .run()
            .await?;
        Ok(())
    }

    /// Sets `owner`'s budget (an admin's decision).
    pub async fn set_budget(
        &self,
        owner: &str,
        limit_usd: f64,
        period: Period,
        now_ms: i64,
    ) -> Result<(), ApiError> {
        self.tick(1);
        self.db
            .prepare(
                "INSERT INTO budgets (user, limit_usd, period, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (user) DO UPDATE SET limit_usd = excluded.limit_usd,
                   period = excluded.period, updated_at = excluded.updated_at",
            )
            .bind(&[
                owner.into(),
                limit_usd.into(),
                period.as_str().into(),
                (now_ms as f64).into(),
            ])?
            .run()
            .await?;
        Ok(())
    }

    /// What `owner` spent per model since `since_ms`, the most expensive first.
    pub async fn spend_by_model(
        &self,
        owner: &str,
        since_ms: i64,
    ) -> Result<Vec<ModelSpend>, ApiError> {
        self.tick(1);
        rows::all(
            &self
                .db
                .prepare(
                    "SELECT provider, model, COUNT(*) AS calls, SUM(input_tokens) AS input_tokens,
                            SUM(output_tokens) AS output_tokens, SUM(cost_usd) AS cost_usd
                     FROM usage_ledger WHERE owner = ?1 AND created_at >= ?2
                     GROUP BY provider, model ORDER BY SUM(cost_usd) DESC, model",
                )
                .bind(&[owner.into(), (since_ms as f64).into()])?,
        )
        .await
    }
}

/// The budget from the results of [`Store::budget_statements`], in order.
fn budget_from(
    results: &[JsValue],
    default: Option<(f64, Period)>,
    now_ms: i64,
) -> Result<Option<Budget>, ApiError> {
    #[derive(Deserialize)]
    struct Row {
        limit_usd: Option<f64>,
        period: Option<String>,
        warned_period: Option<i64>,
    }
    #[derive(Deserialize)]
    struct Spent {
        day_usd: Option<f64>,
        month_usd: Option<f64>,
    }
    let (Some(row), Some(spent)) = (results.first(), results.get(1)) else {
        return Err(ApiError::Internal("a D1 batch answered short".into()));
    };
    let row = rows::results::<Row>(row)?.into_iter().next();
    let spent = rows::results::<Spent>(spent)?.into_iter().next();
    let own = row
        .as_ref()
        .and_then(|r| Some((r.limit_usd?, Period::parse(r.period.as_deref()?)?)));
    let Some((limit_usd, period)) = own.or(default) else {
        return Ok(None);
    };
    let (start, resets_at) = period.bounds(now_ms);
    let spent_usd = spent
        .and_then(|s| match period {
            Period::Day => s.day_usd,
            Period::Month => s.month_usd,
        })
        .unwrap_or(0.0);
    Ok(Some(Budget {
        limit_usd,
        period,
        spent_usd,
        resets_at,
        warned: row.and_then(|r| r.warned_period) == Some(start),
    }))
}

/// The shape of every conversation id (made by [`scoped_id`] or `new_id`): 32 lowercase hex
/// digits. A `/v1/chat` id of any other shape can only name the caller's scoped conversation.
pub fn is_conversation_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The id of `owner`'s conversation for an id that is not one of theirs (a `/v1/chat` id
/// another user took, or one never used): 32 hex digits of a SHA-256 over both, the shape of
/// every conversation id. Ids are scoped to their owner this way, so no user can learn or
/// block another's.
pub fn scoped_id(owner: &str, id: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(b"edge-agent conversation id\0")
        .chain_update(owner.as_bytes())
        .chain_update(b"\0")
        .chain_update(id.as_bytes())
        .finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A turn's history from its rows' document: the latest summary first, then the rest in
/// order; each message with its sequence number.
fn history_of(document: &str) -> Result<(Vec<Option<i64>>, Vec<AgentMessage>), ApiError> {
    let entries: Vec<HistoryEntry> = crate::llm::json::from_str(document)
        .map_err(|e| ApiError::Internal(format!("the stored history is unreadable: {e}")))?;
    in_order(entries)
}

/// A turn's history from its rows, each message read on its own: slower, but it names the
/// stored message that does not read.
fn history_of_rows(
    rows: Vec<HistoryRow>,
) -> Result<(Vec<Option<i64>>, Vec<AgentMessage>), ApiError> {
    let mut entries = Vec::with_capacity(rows.len());
    for row in rows {
        let message = crate::llm::json::from_str(&row.message).map_err(|e| {
            ApiError::Internal(format!("stored message {} is unreadable: {e}", row.id))
        })?;
        entries.push(HistoryEntry {
            seq: row.seq,
            id: row.id,
            summary: row.summary,
            message: Some(message),
        });
    }
    in_order(entries)
}

/// The latest summary first, then the rest in order of `seq`.
fn in_order(
    mut entries: Vec<HistoryEntry>,
) -> Result<(Vec<Option<i64>>, Vec<AgentMessage>), ApiError> {
    entries.sort_by_key(|entry| (entry.summary == 0, entry.seq));
    let mut seqs = Vec::with_capacity(entries.len());
    let mut messages = Vec::with_capacity(entries.len());
    for entry in entries {
        let Some(message) = entry.message else {
            return Err(ApiError::Internal(format!(
                "stored message {} is unreadable: it is not JSON",
                entry.id
            )));
        };
        seqs.push(Some(entry.seq));
        messages.push(message);
    }
    Ok((seqs, messages))
}

fn opt(v: &Option<String>) -> JsValue {
    match v {
        Some(s) => s.as_str().into(),
        None => JsValue::NULL,
    }
}

fn json_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    let text: Option<String> = Option::deserialize(d)?;
    Ok(text.and_then(|t| crate::llm::json::from_str(&t).ok()))
}

fn json_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    let text: Option<String> = Option::deserialize(d)?;
    Ok(text.and_then(|t| crate::llm::json::from_str(&t).ok()))
}

fn raw_json<S: serde::Serializer>(v: &Option<Value>, s: S) -> Result<S::Ok, S::Error> {
    v.serialize(s)
}

/// An artifact version as D1 returns it.
#[derive(Deserialize)]
struct ArtifactRow {
    id: String,
    title: String,
    kind: String,
    #[serde(default)]
    content: String,
    version: i64,
    #[serde(default)]
    author: String,
    #[serde(default)]
    created_at: i64,
    updated_at: i64,
}

impl ArtifactRow {
    fn kind(&self) -> Result<ArtifactKind, ApiError> {
        ArtifactKind::parse(&self.kind)
            .map_err(|e| ApiError::Internal(format!("artifact {}: {e}", self.id)))
    }
}

/// The first line of an artifact's content, as the listing shows it.
const HEAD_CHARS: usize = 120;

fn summaries(rows: Vec<ArtifactRow>) -> Result<Vec<ArtifactSummary>, ApiError> {
    rows.into_iter()
        .map(|row| {
            Ok(ArtifactSummary {
                kind: row.kind()?,
                first_line: first_line(&row.content, HEAD_CHARS),
                version: row.version as u32,
                id: row.id,
                title: row.title,
                updated_at: row.updated_at,
            })
        })
        .collect()
}

impl Store {
    /// Artifact `id` of a conversation: its latest version, or `version`.
    pub async fn artifact(
        &self,
        conversation_id: &str,
        id: &str,
        version: Option<u32>,
    ) -> Result<Option<Artifact>, ApiError> {
        self.tick(1);
        let statement = match version {
            Some(v) => self
                .db
                .prepare(
                    "SELECT * FROM artifacts WHERE conversation_id = ?1 AND id = ?2 AND version = ?3",
                )
                .bind(&[conversation_id.into(), id.into(), f64::from(v).into()])?,
            None => self
                .db
                .prepare(
                    "SELECT * FROM artifacts WHERE conversation_id = ?1 AND id = ?2
                     ORDER BY version DESC LIMIT 1",
                )
                .bind(&[conversation_id.into(), id.into()])?,
        };
        let Some(row) = rows::first::<ArtifactRow>(&statement).await? else {
            return Ok(None);
        };
        Ok(Some(Artifact {
            kind: row.kind()?,
            author: if row.author == "user" {
                Author::User
            } else {
                Author::Model
            },
            version: row.version as u32,
            id: row.id,
            title: row.title,
            content: row.content,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }))
    }

    /// Every artifact of a conversation at its latest version, oldest first.
    pub async fn artifacts(&self, conversation_id: &str) -> Result<Vec<ArtifactSummary>, ApiError> {
        self.tick(1);
        summaries(rows::all::<ArtifactRow>(&self.artifacts_statement(conversation_id)?).await?)
    }

    fn artifacts_statement(
        &self,
        conversation_id: &str,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        Ok(self
            .db
            .prepare(
                "SELECT a.id, a.title, a.kind, a.version, a.updated_at,
                        substr(a.content, 1, 400) AS content
                 FROM artifacts a
                 WHERE a.conversation_id = ?1 AND a.version = (
                   SELECT MAX(b.version) FROM artifacts b
                   WHERE b.conversation_id = a.conversation_id AND b.id = a.id)
                 ORDER BY a.created_at, a.id",
            )
            .bind(&[conversation_id.into()])?)
    }

    /// Stores a new version. Someone else having written that version first is a conflict; an
    /// artifact past `limits.versions` versions, or a new one in a conversation that holds
    /// `limits.artifacts`, is refused (413) with what to do.
    pub async fn put_artifact(
        &self,
        conversation_id: &str,
        artifact: &Artifact,
        limits: ArtifactLimits,
    ) -> Result<(), ApiError> {
        if artifact.version > limits.versions {
            return Err(ApiError::PayloadTooLarge(format!(
                "artifact `{}` has {} versions, the most one keeps; create a new artifact instead",
                artifact.id, limits.versions
            )));
        }
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "INSERT INTO artifacts
                   (conversation_id, id, version, title, kind, content, author, created_at, updated_at)
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9
                 WHERE ?3 > 1 OR (SELECT COUNT(DISTINCT id) FROM artifacts
                                  WHERE conversation_id = ?1) < ?10
                 RETURNING version",
            )
            .bind(&[
                conversation_id.into(),
                artifact.id.as_str().into(),
                f64::from(artifact.version).into(),
                artifact.title.as_str().into(),
                artifact.kind.as_str().into(),
                artifact.content.as_str().into(),
                artifact.author.as_str().into(),
                (artifact.created_at as f64).into(),
                (artifact.updated_at as f64).into(),
                f64::from(limits.artifacts).into(),
            ])?;
        let result = rows::all::<Created>(&statement).await;
        match result {
            Ok(rows) if rows.is_empty() => Err(ApiError::PayloadTooLarge(format!(
                "this conversation holds {} artifacts, the most one keeps; update one of them \
                 instead",
                limits.artifacts
            ))),
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("UNIQUE") => Err(ApiError::Conflict(format!(
                "version {} of artifact `{}` was written by someone else first; read it and try again",
                artifact.version, artifact.id
            ))),
            Err(e) => Err(e),
        }
    }
}

/// A conversation row's values, bound as `?1` to `?8` (id, owner, title, system, model,
/// metadata, created, toolsets).
fn conversation_values(c: &Conversation) -> Vec<JsValue> {
    let metadata = c.metadata.as_ref().map(Value::to_string);
    let toolsets = c
        .toolsets
        .as_ref()
        .and_then(|t| serde_json::to_string(t).ok());
    vec![
        c.id.as_str().into(),
        c.owner.as_str().into(),
        opt(&c.title),
        opt(&c.system),
        opt(&c.model),
        opt(&metadata),
        (c.created_at as f64).into(),
        opt(&toolsets),
    ]
}

/// A row an `INSERT ... RETURNING` wrote; none when its condition held it back.
#[derive(serde::Deserialize)]
struct Created {}

#[cfg(test)]
mod tests {
    use super::{history_of, history_of_rows, scoped_id, HistoryRow};
    use crate::agent::AgentMessage;

    #[test]
    fn a_scoped_id_is_stable_per_owner_and_shaped_like_any_conversation_id() {
        let a = scoped_id("alice", "chat-1");
        assert_eq!(a, scoped_id("alice", "chat-1"));
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, scoped_id("bob", "chat-1"));
        assert_ne!(a, scoped_id("alice", "chat-2"));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(scoped_id("ab", "c"), scoped_id("a", "bc"));
    }

    fn stored(text: &str) -> String {
        serde_json::to_string(&AgentMessage::user_text(text)).unwrap()
    }

    #[test]
    fn a_history_document_is_read_summary_first_then_in_order() {
        // SQLite promises no order for an aggregate's elements; the reader sets it.
        let document = format!(
            r#"[{{"seq":7,"id":"c","summary":0,"message":{}}},
                {{"seq":2,"id":"a","summary":0,"message":{}}},
                {{"seq":9,"id":"s","summary":1,"message":{}}}]"#,
            stored("third"),
            stored("first"),
            stored("the summary"),
        );
        let (seqs, messages) = history_of(&document).unwrap();
        assert_eq!(seqs, vec![Some(9), Some(2), Some(7)]);
        let texts: Vec<String> = messages
            .iter()
            .map(|m| serde_json::to_string(m).unwrap())
            .collect();
        assert_eq!(
            texts,
            vec![stored("the summary"), stored("first"), stored("third")]
        );
        assert_eq!(history_of("[]").unwrap().1.len(), 0);
    }

    #[test]
    fn a_history_document_that_does_not_read_is_an_error() {
        // A null message (a NULL body): named by its id.
        let null = format!(
            r#"[{{"seq":1,"id":"fine","summary":0,"message":{}}},
                {{"seq":2,"id":"broken","summary":0,"message":null}}]"#,
            stored("hi")
        );
        let e = history_of(&null).unwrap_err().to_string();
        assert!(e.contains("stored message broken is unreadable"), "{e}");
        // JSON, but not a message: the rows are read one by one to name it.
        let not_a_message = format!(
            r#"[{{"seq":1,"id":"fine","summary":0,"message":{}}},
                {{"seq":2,"id":"odd","summary":0,"message":{{"kind":"nonsense"}}}}]"#,
            stored("hi")
        );
        let e = history_of(&not_a_message).unwrap_err().to_string();
        assert!(e.contains("the stored history is unreadable"), "{e}");
    }

    #[test]
    fn history_rows_read_one_by_one_come_in_the_same_order_and_name_what_does_not_read() {
        let row = |seq, id: &str, summary, message: String| HistoryRow {
            seq,
            id: id.into(),
            summary,
            message,
        };
        let (seqs, _) = history_of_rows(vec![
            row(7, "c", 0, stored("third")),
            row(9, "s", 1, stored("the summary")),
            row(2, "a", 0, stored("first")),
        ])
        .unwrap();
        assert_eq!(seqs, vec![Some(9), Some(2), Some(7)]);
        let e = history_of_rows(vec![row(1, "broken", 0, "{not json".into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("stored message broken is unreadable"), "{e}");
        let e = history_of_rows(vec![row(1, "odd", 0, r#"{"kind":"nonsense"}"#.into())])
            .unwrap_err()
            .to_string();
        assert!(e.contains("stored message odd is unreadable"), "{e}");
    }
}
