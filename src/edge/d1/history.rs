//! The `messages` table: a turn's history in one round trip (with what the turn stores first),
//! messages appended as they are produced, pages of history for the API, retry and compaction.

use serde_json::Value;

use super::artifacts::{summaries, ArtifactRow};
use super::params::BindParams;
use super::rows;
use super::usage::{budget_from, BudgetRead, UsageRow};
use super::{Conversation, Created, Store};
use crate::agent::artifacts::ArtifactSummary;
use crate::agent::AgentMessage;
use crate::edge::budget::Budget;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::ids::new_id;

struct Seq {
    seq: i64,
}

crate::json_struct!(Seq {
    "seq" => seq,
});

/// One live row of a turn's history, as [`rows::embedding`] writes it into the history's
/// document: the stored message embedded as it is.
struct HistoryEntry {
    seq: i64,
    id: String,
    /// 1 for a compaction's summary, which the model sees first.
    summary: i64,
    message: Option<AgentMessage>,
}

crate::json_struct!(HistoryEntry {
    "seq" => seq,
    "id" => id,
    "summary" => summary,
    "message" => message,
});

/// The same row with its message as text, read only to name a stored message that does not
/// read ([`history_of_rows`]).
struct HistoryRow {
    seq: i64,
    id: String,
    summary: i64,
    message: String,
}

crate::json_struct!(HistoryRow {
    "seq" => seq,
    "id" => id,
    "summary" => summary,
    "message" => message,
});

/// A conversation's live rows (neither superseded nor compacted). Their order is set after
/// reading, summary first, so SQLite sorts nothing.
/// `?2`: a JSON list of ids left out (messages written alongside the read).
const HISTORY: &str = "SELECT seq, id, kind = 'summary' AS summary, body AS message
     FROM messages WHERE conversation_id = ?1 AND compacted = 0 AND superseded = 0
       AND id NOT IN (SELECT value FROM json_each(?2))";

/// The ids of the files message `?2` of conversation `?1` carries.
const FILES_OF_MESSAGE: &str = "SELECT json_extract(c.value, '$.id')
     FROM messages m, json_each(m.body, '$.content') c
     WHERE m.id = ?2 AND m.conversation_id = ?1 AND json_extract(c.value, '$.type') = 'file'";

/// What a turn starts from.
pub struct TurnHistory {
    /// Each message's sequence number in D1.
    pub seqs: Vec<Option<i64>>,
    pub messages: Vec<AgentMessage>,
    pub artifacts: Vec<ArtifactSummary>,
    /// The owner's budget, when the turn asked for it and it could be read (`Some(None)`: they
    /// have none).
    pub budget: Option<Option<Budget>>,
    /// The conversation's row was to be created within its owner's count, and is not there: the
    /// owner keeps as many as they may, and nothing of the turn was stored.
    pub refused: bool,
}

/// The conversation's row, created with a turn's history unless it exists.
pub struct CreateRow<'a> {
    pub row: &'a Conversation,
    /// `Some(max)`: only while its owner keeps fewer than `max` conversations (a new chat's
    /// first message); the check and the insert are one statement, so two new chats cannot
    /// both take the last place.
    pub within: Option<u32>,
}

/// A stored message: the `AgentMessage` plus where it sits.
#[derive(Debug, Clone)]
struct MessageRow {
    seq: i64,
    id: String,
    body: String,
    created_at: i64,
    superseded: i64,
    compacted: i64,
}

crate::json_struct!(MessageRow {
    "seq" => seq,
    "id" => id,
    "body" => body,
    "created_at" => created_at,
    "superseded" => superseded,
    "compacted" => compacted: default,
});

impl Store {
    /// Marks everything after the last (live) user message superseded, for a retry. `false`
    /// when there is no user message to retry.
    pub async fn supersede_after_last_user(&self, conversation_id: &str) -> Result<bool, ApiError> {
        self.tick(2);
        struct Last {
            seq: Option<i64>,
        }

        crate::json_struct!(Last {
            "seq" => seq,
        });
        let last = rows::first::<Last>(
            &self
                .db
                .prepare(
                    "SELECT MAX(seq) AS seq FROM messages
                 WHERE conversation_id = ?1 AND kind = 'user' AND superseded = 0",
                )
                .bind_params(&[conversation_id.into()])?,
        )
        .await?
        .and_then(|l| l.seq);
        let Some(seq) = last else {
            return Ok(false);
        };
        self.db
            .prepare("UPDATE messages SET superseded = 1 WHERE conversation_id = ?1 AND seq > ?2")
            .bind_params(&[conversation_id.into(), (seq as f64).into()])?
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

    /// Appends `message` under a new id, now (a message no client named).
    pub async fn append_new(
        &self,
        conversation_id: &str,
        message: &AgentMessage,
    ) -> Result<i64, ApiError> {
        self.append_message(conversation_id, &new_id()?, message, now_ms())
            .await
    }

    /// Appends an answer and its row in the owner's usage ledger, in the same round trip.
    /// Takes back message `id` of a turn refused at its first call for its owner's budget (its
    /// request was answered 402): the message and the `files` rows it made go, and with
    /// `new_chat`, the conversation's row when nothing else is in it. `true` when the row went.
    pub async fn take_back(
        &self,
        conversation_id: &str,
        owner: &str,
        id: &str,
        new_chat: bool,
    ) -> Result<bool, ApiError> {
        self.tick(1);
        let mut batch = vec![
            // Its files are the Worker's to remove (it was answered 402): back to unaccepted,
            // so the sweep finds them should that fail.
            self.db
                .prepare(format!(
                    "UPDATE stored_files SET accepted = 0 WHERE id IN ({FILES_OF_MESSAGE})"
                ))
                .bind_params(&[conversation_id.into(), id.into()])?,
            self.db
                .prepare(format!(
                    "DELETE FROM files WHERE conversation_id = ?1 AND id IN ({FILES_OF_MESSAGE})"
                ))
                .bind_params(&[conversation_id.into(), id.into()])?,
            self.db
                .prepare("DELETE FROM messages WHERE id = ?2 AND conversation_id = ?1")
                .bind_params(&[conversation_id.into(), id.into()])?,
        ];
        if new_chat {
            batch.push(
                self.db
                    .prepare(
                        "DELETE FROM conversations WHERE id = ?1 AND owner = ?2
                           AND NOT EXISTS (SELECT 1 FROM messages WHERE conversation_id = ?1)
                         RETURNING 1 AS seq",
                    )
                    .bind_params(&[conversation_id.into(), owner.into()])?,
            );
        }
        let results = rows::batch(&self.db, &batch).await?;
        Ok(match results.get(3) {
            Some(deleted) => !rows::results::<Seq>(deleted)
                .map(|r| r.is_empty())
                .unwrap_or(true),
            None => false,
        })
    }

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
                .bind_params(&[message_id.into()])?,
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

    /// Stores a turn's new messages (and `create`, the conversation's row, unless it exists) in
    /// one batch, written alongside the read of the history ([`Self::turn_history`] leaves them
    /// out by id). Returns each message's sequence number, in order; one stored before (a
    /// repeated id) keeps its own.
    pub async fn store_new(
        &self,
        conversation_id: &str,
        create: Option<&Conversation>,
        incoming: &[(&str, &AgentMessage)],
        now_ms: i64,
    ) -> Result<Vec<Option<i64>>, ApiError> {
        self.tick(1);
        let mut batch = Vec::with_capacity(incoming.len() + 3);
        if let Some(row) = create {
            batch.push(self.insert_conversation(row, "ON CONFLICT (id) DO NOTHING")?);
        }
        for (id, message) in incoming {
            batch.push(self.insert_message(conversation_id, id, message, now_ms)?);
        }
        batch.push(self.touch(conversation_id, now_ms)?);
        let ids: Vec<&str> = incoming.iter().map(|(id, _)| *id).collect();
        batch.push(
            self.db
                .prepare(
                    "SELECT id, seq FROM messages
                     WHERE conversation_id = ?1 AND id IN (SELECT value FROM json_each(?2))",
                )
                .bind_params(&[conversation_id.into(), serde_json::to_string(&ids)?.into()])?,
        );
        let results = rows::batch(&self.db, &batch).await?;
        struct Stored {
            id: String,
            seq: i64,
        }

        crate::json_struct!(Stored {
            "id" => id,
            "seq" => seq,
        });
        let stored = match results.last() {
            Some(last) => rows::results::<Stored>(last)?,
            None => return Err(ApiError::Internal("a D1 batch answered short".into())),
        };
        Ok(ids
            .iter()
            .map(|id| stored.iter().find(|s| s.id == *id).map(|s| s.seq))
            .collect())
    }

    /// The conversation's last answer (a sub-agent's, read back by the turn that asked it).
    pub async fn last_answer(
        &self,
        conversation_id: &str,
    ) -> Result<Option<crate::llm::AssistantMessage>, ApiError> {
        struct Body {
            body: String,
        }

        crate::json_struct!(Body { "body" => body });
        self.tick(1);
        let row = rows::first::<Body>(
            &self
                .db
                .prepare(
                    "SELECT body FROM messages WHERE conversation_id = ?1 AND kind = 'assistant'
                     ORDER BY seq DESC LIMIT 1",
                )
                .bind_params(&[conversation_id.into()])?,
        )
        .await?;
        Ok(row
            .and_then(|r| crate::llm::json::from_str::<AgentMessage>(&r.body).ok())
            .and_then(|m| match m {
                AgentMessage::Assistant(a) => Some(a),
                _ => None,
            }))
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
                .bind_params(&[conversation_id.into(), message_id.into()])?,
        )
        .await?;
        Ok(found.map(|row| row.seq))
    }

    fn insert_message(
        &self,
        conversation_id: &str,
        message_id: &str,
        message: &AgentMessage,
        now_ms: i64,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        self.message_statement(false, (conversation_id, message_id, message, now_ms))
    }

    /// A message's insert; with `if_kept`, one that stores nothing unless the conversation's
    /// row exists.
    fn message_statement(
        &self,
        if_kept: bool,
        (conversation_id, message_id, message, now_ms): (&str, &str, &AgentMessage, i64),
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        let sql = if if_kept {
            "INSERT OR IGNORE INTO messages (conversation_id, seq, id, kind, body, model, provider, created_at)
             SELECT ?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM messages WHERE conversation_id = ?1),
                    ?2, ?3, ?4, ?5, ?6, ?7
             WHERE EXISTS (SELECT 1 FROM conversations WHERE id = ?1)"
        } else {
            "INSERT OR IGNORE INTO messages (conversation_id, seq, id, kind, body, model, provider, created_at)
             SELECT ?1, COALESCE(MAX(seq), 0) + 1, ?2, ?3, ?4, ?5, ?6, ?7
             FROM messages WHERE conversation_id = ?1"
        };
        let body = serde_json::to_string(message)?;
        let (model, provider) = match message {
            AgentMessage::Assistant(a) => (Some(a.model.as_str()), Some(a.provider.as_str())),
            _ => (None, None),
        };
        self.db.prepare(sql).bind_params(&[
            conversation_id.into(),
            message_id.into(),
            message.kind().into(),
            body.into(),
            model.into(),
            provider.into(),
            (now_ms as f64).into(),
        ])
    }

    fn touch(
        &self,
        conversation_id: &str,
        now_ms: i64,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        self.db
            .prepare("UPDATE conversations SET updated_at = ?2 WHERE id = ?1")
            .bind_params(&[conversation_id.into(), (now_ms as f64).into()])
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
            .bind_params(&[conversation_id.into()])?];
        if let Some((id, message)) = summary {
            statements.push(self.insert_message(conversation_id, id, message, now_ms)?);
            statements.push(
                self.db
                    .prepare("SELECT seq FROM messages WHERE id = ?1")
                    .bind_params(&[id.into()])?,
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
        create: Option<CreateRow<'_>>,
        incoming: &[(&str, &AgentMessage)],
        budget: Option<BudgetRead<'_>>,
        alongside: &[&str],
        now_ms: i64,
    ) -> Result<TurnHistory, ApiError> {
        self.tick(1);
        let mut batch = Vec::with_capacity(incoming.len() + 7);
        let within = create.as_ref().and_then(|c| c.within);
        match &create {
            Some(CreateRow {
                row,
                within: Some(max),
            }) => batch.push(self.insert_conversation_within(
                row,
                *max,
                "ON CONFLICT (id) DO NOTHING",
            )?),
            Some(CreateRow { row, within: None }) => {
                batch.push(self.insert_conversation(row, "ON CONFLICT (id) DO NOTHING")?)
            }
            None => {}
        }
        for (id, message) in incoming {
            // A refused row has no messages either (rather than a failed foreign key, which
            // would fail the batch as a broken D1 does).
            batch.push(
                self.message_statement(within.is_some(), (conversation_id, id, message, now_ms))?,
            );
        }
        if !incoming.is_empty() {
            batch.push(self.touch(conversation_id, now_ms)?);
        }
        if within.is_some() {
            batch.push(
                self.db
                    .prepare("SELECT 1 AS kept FROM conversations WHERE id = ?1")
                    .bind_params(&[conversation_id.into()])?,
            );
        }
        let stored = batch.len();
        let alongside = serde_json::to_string(alongside)?;
        batch.push(
            self.db
                .prepare(HISTORY)
                .bind_params(&[conversation_id.into(), alongside.into()])?,
        );
        batch.push(self.artifacts_statement(conversation_id)?);
        if let Some(read) = &budget {
            batch.extend(self.budget_statements(read.owner, now_ms)?);
        }
        let results = rows::batch(&self.db, &batch).await?;
        let (Some(history), Some(artifacts)) = (results.get(stored), results.get(stored + 1))
        else {
            return Err(ApiError::Internal("a D1 batch answered short".into()));
        };
        let refused = match within {
            Some(_) => match results.get(stored - 1) {
                Some(kept) => rows::results::<Created>(kept)?.is_empty(),
                None => return Err(ApiError::Internal("a D1 batch answered short".into())),
            },
            None => false,
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
            refused,
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
        let out = rows
            .into_iter()
            .map(|r| {
                api_message(
                    &r.body,
                    r.id,
                    r.seq,
                    r.created_at,
                    (r.superseded, r.compacted),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
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
                .bind_params(&[
                    conversation_id.into(),
                    (after as f64).into(),
                    (limit.min(1 << 40) as f64).into(),
                ])?,
        )
        .await
    }
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

/// A stored message as the API shows it: its body, with its id, place and time, and whether
/// it was superseded or compacted (`marks`, as the row's 0 or 1).
pub(super) fn api_message(
    body: &str,
    id: String,
    seq: i64,
    created_at: i64,
    (superseded, compacted): (i64, i64),
) -> Result<Value, ApiError> {
    let mut value: Value = crate::llm::json::from_str(body)?;
    if let Value::Object(map) = &mut value {
        map.insert("id".into(), id.into());
        map.insert("seq".into(), seq.into());
        map.insert("created_at".into(), created_at.into());
        if superseded != 0 {
            map.insert("superseded".into(), true.into());
        }
        if compacted != 0 {
            map.insert("compacted".into(), true.into());
        }
    }
    Ok(value)
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

#[cfg(test)]
mod tests {
    use super::{history_of, history_of_rows, HistoryRow};
    use crate::agent::AgentMessage;

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
