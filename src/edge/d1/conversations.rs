//! The `conversations` table: creating one within a user's count, reading, listing and deleting
//! them, and the ids a `/v1/chat` id stands for.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use super::params::{BindParams, Param};
use super::rows;
use super::{Created, Store};
use crate::edge::error::ApiError;
use crate::llm::json::{self, FromJson, FromJsonOwned, Reader};

/// A conversation row as the API returns it.
#[derive(Debug, Clone, Serialize)]
pub struct Conversation {
    pub id: String,
    #[serde(skip_serializing)]
    pub owner: String,
    pub title: Option<String>,
    pub system: Option<String>,
    pub model: Option<String>,
    #[serde(serialize_with = "raw_json")]
    pub metadata: Option<Value>,
    /// The toolsets its turns may use; `None`: every configured one.
    pub toolsets: Option<Vec<String>>,
    /// The agent it belongs to (`None`: the deployment's default agent).
    pub agent: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
    /// A child conversation's: the conversation whose agent tool started it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// A child conversation's: the tool call it answers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Whether it is remembered (shown as `memory`, false when made with `memory: false`).
    #[serde(serialize_with = "remembered")]
    pub memory: Remembered,
}

/// Whether a conversation is remembered: its `memory` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Remembered {
    /// Made with `memory: false`: never recalled, nor given recall or working memory.
    Off = 0,
    /// Its messages are indexed for recall as they are written (its agent kept memory when it
    /// was made).
    Indexed = 1,
    /// Not indexed (its agent kept no memory when it was made), but not refused memory.
    #[default]
    NotIndexed = 2,
}

impl Remembered {
    /// For a new conversation of `agent`, unless the user said `memory: false`.
    pub fn new(agent: &crate::edge::config::agents::AgentSpec, refused: bool) -> Self {
        match (refused, agent.memory.is_some()) {
            (true, _) => Remembered::Off,
            (false, true) => Remembered::Indexed,
            (false, false) => Remembered::NotIndexed,
        }
    }

    /// For a new chat of the agent named `agent` (the default one when `None`).
    pub fn of_chat(config: &crate::edge::config::Config, agent: Option<&str>) -> Self {
        config
            .agent(agent)
            .map(|a| Remembered::new(a, false))
            .unwrap_or_default()
    }

    pub fn is_default(&self) -> bool {
        *self == Remembered::default()
    }
}

crate::json_struct!(Conversation {
    "id" => id,
    "owner" => owner,
    "title" => title,
    "system" => system,
    "model" => model,
    "metadata" => metadata: default_with(json_column),
    "toolsets" => toolsets: default_with(json_column),
    "agent" => agent,
    "created_at" => created_at,
    "updated_at" => updated_at,
    "parent" => parent: default,
    "tool_call_id" => tool_call_id: default,
    "memory" => memory: default_with(memory_column_read),
});

/// Most child conversations one conversation's agent tools may start, over its life.
pub const MAX_CHILDREN: u32 = 1_000;

/// Which of an owner's conversations a page lists.
#[derive(Clone, Copy)]
pub enum Listing<'a> {
    /// Every one (an export, an erasure).
    All,
    /// Those the owner started, not the children agents started.
    TopLevel,
    /// The children of one conversation.
    ChildrenOf(&'a str),
}

impl Conversation {
    /// A conversation as a `/v1/chat` id starts it: the caller's, titled by its first message,
    /// with the deployment's defaults.
    pub fn new_chat(
        id: String,
        owner: String,
        title: Option<String>,
        (agent, memory): (Option<String>, Remembered),
        now_ms: i64,
    ) -> Self {
        Self {
            id,
            owner,
            title,
            system: None,
            model: None,
            metadata: None,
            toolsets: None,
            agent,
            created_at: now_ms,
            updated_at: now_ms,
            parent: None,
            tool_call_id: None,
            memory,
        }
    }
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

impl Store {
    /// Creates `c` unless its owner keeps `max` conversations already or is being erased
    /// ([`Self::refused_conversation`] says which).
    pub async fn create_conversation(&self, c: &Conversation, max: u32) -> Result<(), ApiError> {
        self.tick(1);
        let statement = self.insert_conversation_within(c, max, "RETURNING id")?;
        if rows::all::<Created>(&statement).await?.is_empty() {
            return Err(self.refused_conversation(&c.owner, max).await);
        }
        Ok(())
    }

    /// Why a new conversation of `owner`'s was not made: they are being erased (a 409: whatever
    /// started now would outlive the erasure), or they keep `max` already (a 429). One more
    /// read, on the refusal's path only.
    pub async fn refused_conversation(&self, owner: &str, max: u32) -> ApiError {
        match self.erasing(owner).await {
            Ok(true) => ApiError::Conflict(
                "your data is being erased (`DELETE /v1/me`); new conversations can start once \
                 the erasure has finished"
                    .into(),
            ),
            Ok(false) => too_many_conversations(max),
            Err(e) => e,
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
                            toolsets, agent, memory)
                         SELECT ?1, ?2, ?3, NULL, NULL, NULL, ?4, ?4, NULL, ?7, ?8
                         WHERE NOT EXISTS
                           (SELECT 1 FROM conversations WHERE id = ?5 AND owner = ?2)
                           AND (SELECT COUNT(*) FROM conversations WHERE owner = ?2 AND parent IS NULL) < ?6
                           AND NOT EXISTS (SELECT 1 FROM erasures WHERE owner = ?2)
                         ON CONFLICT (id) DO NOTHING",
                    )
                    .bind_params(&[
                        c.id.as_str().into(),
                        c.owner.as_str().into(),
                        c.title.as_deref().into(),
                        (c.created_at as f64).into(),
                        raw_id.into(),
                        f64::from(max).into(),
                        c.agent.as_deref().into(),
                        memory_column(c),
                    ])?,
                self.db
                    .prepare(
                        "SELECT * FROM conversations
                         WHERE owner = ?2 AND (id = ?1 OR id = ?3)
                         ORDER BY id = ?1 DESC LIMIT 1",
                    )
                    .bind_params(&[raw_id.into(), c.owner.as_str().into(), c.id.as_str().into()])?,
            ],
        )
        .await?;
        let found = results
            .get(1)
            .map(rows::results::<Conversation>)
            .transpose()?
            .and_then(|rows| rows.into_iter().next());
        // Neither found nor made: the owner keeps as many as they may, or is being erased.
        match found {
            Some(conversation) => Ok(conversation),
            None => Err(self.refused_conversation(&c.owner, max).await),
        }
    }

    /// Inserts `c` unless its owner keeps `max` conversations already or is being erased (an
    /// erasure deletes what it finds: a conversation begun after that would outlive it); `tail`
    /// ends the statement (`RETURNING id`, or `ON CONFLICT (id) DO NOTHING` for a row that may
    /// exist).
    pub(super) fn insert_conversation_within(
        &self,
        c: &Conversation,
        max: u32,
        tail: &str,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        let mut values = conversation_values(c);
        values.push(f64::from(max).into());
        self.db
            .prepare(format!(
                "INSERT INTO conversations
                   (id, owner, title, system, model, metadata, created_at, updated_at, toolsets,
                    agent, memory)
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10
                 WHERE (SELECT COUNT(*) FROM conversations WHERE owner = ?2 AND parent IS NULL) < ?11
                   AND NOT EXISTS (SELECT 1 FROM erasures WHERE owner = ?2)
                 {tail}"
            ))
            .bind_params(&values)
    }

    pub(super) fn insert_conversation(
        &self,
        c: &Conversation,
        on_conflict: &str,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        self.db
            .prepare(format!(
                "INSERT INTO conversations
                   (id, owner, title, system, model, metadata, created_at, updated_at, toolsets,
                    agent, memory)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10) {on_conflict}"
            ))
            .bind_params(&conversation_values(c))
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
                .bind_params(&[id.into(), owner.into(), scoped_id(owner, id).into()])?,
        )
        .await
    }

    /// One page of `owner`'s conversations, newest first. The cursor is the last row's
    /// `(created_at, id)`: keyset pagination, so rows created meanwhile never shift a page.
    pub async fn conversations_page(
        &self,
        owner: &str,
        listing: Listing<'_>,
        before: Option<(i64, &str)>,
        limit: i64,
    ) -> Result<(Vec<Conversation>, Option<(i64, String)>), ApiError> {
        self.tick(1);
        let (created, id) = before.unwrap_or((i64::MAX, ""));
        // A statement each, so that each reads its own index (the owner's own conversations,
        // a parent's children) and no page reads rows it leaves out.
        let (which, parent) = match listing {
            Listing::All => ("", ""),
            Listing::TopLevel => ("AND parent IS NULL", ""),
            Listing::ChildrenOf(parent) => ("AND parent = ?5", parent),
        };
        let mut params = vec![
            owner.into(),
            (created.min(1 << 52) as f64).into(),
            id.into(),
            ((limit + 1) as f64).into(),
        ];
        if !parent.is_empty() {
            params.push(parent.into());
        }
        let mut page = rows::all::<Conversation>(
            &self
                .db
                .prepare(format!(
                    "SELECT * FROM conversations WHERE owner = ?1 {which}
                   AND (created_at < ?2 OR (created_at = ?2 AND id < ?3))
                 ORDER BY created_at DESC, id DESC LIMIT ?4"
                ))
                .bind_params(&params)?,
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

    /// A child conversation for an agent tool's call, made unless it exists (a call run again
    /// after a crash reaches the same one). Children do not count toward
    /// `MAX_CONVERSATIONS_PER_USER`, which counts the conversations a user started; a parent
    /// has at most [`MAX_CHILDREN`]. None is made for an owner being erased, nor for a parent
    /// gone. `Err` says why not.
    pub async fn create_child(&self, c: &Conversation) -> Result<(), ApiError> {
        struct Found {
            id: String,
        }

        crate::json_struct!(Found { "id" => id });
        self.tick(1);
        let mut values = conversation_values(c);
        values.push(c.parent.as_deref().into());
        values.push(c.tool_call_id.as_deref().into());
        values.push(f64::from(MAX_CHILDREN).into());
        let statements = [
            self.db
                .prepare(
                    "INSERT INTO conversations
                       (id, owner, title, system, model, metadata, created_at, updated_at,
                        toolsets, agent, memory, parent, tool_call_id)
                     SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10, ?11, ?12
                     WHERE NOT EXISTS (SELECT 1 FROM erasures WHERE owner = ?2)
                       AND EXISTS (SELECT 1 FROM conversations WHERE id = ?11 AND owner = ?2)
                       AND (SELECT COUNT(*) FROM conversations WHERE parent = ?11) < ?13
                     ON CONFLICT (id) DO NOTHING",
                )
                .bind_params(&values)?,
            self.db
                .prepare(
                    "SELECT id FROM conversations WHERE id = ?1 AND owner = ?2 AND parent = ?3",
                )
                .bind_params(&[
                    c.id.as_str().into(),
                    c.owner.as_str().into(),
                    c.parent.as_deref().into(),
                ])?,
        ];
        let results = rows::batch(&self.db, &statements).await?;
        let made = results
            .get(1)
            .map(rows::results::<Found>)
            .transpose()?
            .is_some_and(|rows| rows.iter().any(|r| r.id == c.id));
        if made {
            return Ok(());
        }
        Err(ApiError::Conflict(format!(
            "no child conversation could be made: the owner is being erased, the conversation \
             that asks is gone, or it has started {MAX_CHILDREN} already"
        )))
    }

    /// Conversation `id` belongs to the agent `agent` from now on, with its model (a handoff).
    pub async fn hand_over(&self, id: &str, owner: &str, agent: &str) -> Result<(), ApiError> {
        self.tick(1);
        self.db
            .prepare(
                "UPDATE conversations SET agent = ?3, model = NULL, updated_at = ?4
                 WHERE id = ?1 AND owner = ?2",
            )
            .bind_params(&[
                id.into(),
                owner.into(),
                agent.into(),
                (crate::edge::platform::clock::now_ms() as f64).into(),
            ])?
            .run()
            .await?;
        Ok(())
    }

    /// The ids of `owner`'s conversations that `parent`'s agent tools started.
    pub async fn children(&self, owner: &str, parent: &str) -> Result<Vec<String>, ApiError> {
        struct Child {
            id: String,
        }

        crate::json_struct!(Child { "id" => id });
        self.tick(1);
        let statement = self
            .db
            .prepare("SELECT id FROM conversations WHERE parent = ?1 AND owner = ?2")
            .bind_params(&[parent.into(), owner.into()])?;
        Ok(rows::all::<Child>(&statement)
            .await?
            .into_iter()
            .map(|c| c.id)
            .collect())
    }

    /// Deletes a conversation's rows (the ledger keeps its own): how many went, or `None` when
    /// no such conversation is stored.
    pub async fn delete_conversation(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Option<u64>, ApiError> {
        self.tick(1);
        if self.conversation(owner, id).await?.is_none() {
            return Ok(None);
        }
        let statements = vec![
            self.db
                .prepare("DELETE FROM messages WHERE conversation_id = ?1")
                .bind_params(&[id.into()])?,
            self.db
                .prepare("DELETE FROM artifacts WHERE conversation_id = ?1")
                .bind_params(&[id.into()])?,
            // Before the `files` rows that name some of them.
            self.db
                .prepare(
                    "DELETE FROM stored_files WHERE (conversation_id = ?1 AND owner = ?2)
                       OR id IN (SELECT id FROM files WHERE conversation_id = ?1)",
                )
                .bind_params(&[id.into(), owner.into()])?,
            self.db
                .prepare("DELETE FROM files WHERE conversation_id = ?1")
                .bind_params(&[id.into()])?,
            self.db
                .prepare("DELETE FROM conversations WHERE id = ?1 AND owner = ?2")
                .bind_params(&[id.into(), owner.into()])?,
        ];
        Ok(Some(super::changes(
            &rows::batch(&self.db, &statements).await?,
        )))
    }

    /// Up to `limit` conversations (id, owner, last update) not updated since `before_ms`, oldest
    /// first, leaving out those a scheduled run keeps past `now_ms` (`retain_until`, written by
    /// [`Self::retain_until`]).
    pub async fn idle_since(
        &self,
        before_ms: i64,
        now_ms: i64,
        limit: u32,
    ) -> Result<Vec<(String, String, i64)>, ApiError> {
        struct Idle {
            id: String,
            owner: String,
            updated_at: i64,
        }

        crate::json_struct!(Idle {
            "id" => id,
            "owner" => owner,
            "updated_at" => updated_at,
        });
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "SELECT id, owner, updated_at FROM conversations
                 WHERE updated_at < ?1 AND (retain_until IS NULL OR retain_until <= ?3)
                 ORDER BY updated_at LIMIT ?2",
            )
            .bind_params(&[
                (before_ms as f64).into(),
                f64::from(limit).into(),
                (now_ms as f64).into(),
            ])?;
        Ok(super::rows::all::<Idle>(&statement)
            .await?
            .into_iter()
            .map(|row| (row.id, row.owner, row.updated_at))
            .collect())
    }

    /// Keeps conversation `id` from retention until `until_ms`: its object said a scheduled run
    /// comes then. Retention asks the object again once that time has passed.
    pub async fn retain_until(&self, id: &str, until_ms: i64) -> Result<(), ApiError> {
        self.tick(1);
        self.db
            .prepare("UPDATE conversations SET retain_until = ?2 WHERE id = ?1")
            .bind_params(&[id.into(), (until_ms as f64).into()])?
            .run()
            .await?;
        Ok(())
    }
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
    derived_id(b"edge-agent conversation id\0", owner, id)
}

/// A conversation id derived from two strings for one use (`domain`, which ends in a NUL): 32
/// hex digits of a SHA-256 over the three, the shape of every conversation id.
pub fn derived_id(domain: &[u8], a: &str, b: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(domain)
        .chain_update(a.as_bytes())
        .chain_update(b"\0")
        .chain_update(b.as_bytes())
        .finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A column holding JSON as text (or null), read as what the text holds; text that does not
/// read is `None`.
fn json_column<'a, T: FromJsonOwned>(r: &mut Reader<'a>) -> json::Result<Option<T>> {
    let text: Option<Cow<'a, str>> = FromJson::read(r)?;
    Ok(text.and_then(|t| json::from_str(&t).ok()))
}

/// The `memory` column ([`Remembered`]).
pub(crate) fn memory_column_read(r: &mut Reader<'_>) -> json::Result<Remembered> {
    let value: Option<i64> = FromJson::read(r)?;
    Ok(match value {
        Some(0) => Remembered::Off,
        Some(1) => Remembered::Indexed,
        _ => Remembered::NotIndexed,
    })
}

fn remembered<S: serde::Serializer>(memory: &Remembered, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bool(*memory != Remembered::Off)
}

/// [`Remembered`] as its column's number (what [`memory_column_read`] reads back).
pub(crate) fn memory_column_write<S: serde::Serializer>(
    memory: &Remembered,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_u8(*memory as u8)
}

fn raw_json<S: serde::Serializer>(v: &Option<Value>, s: S) -> Result<S::Ok, S::Error> {
    v.serialize(s)
}

/// A conversation row's values, bound as `?1` to `?10` (id, owner, title, system, model,
/// metadata, created, toolsets, agent, memory).
fn conversation_values(c: &Conversation) -> Vec<Param<'_>> {
    let metadata = c.metadata.as_ref().map(Value::to_string);
    let toolsets = c
        .toolsets
        .as_ref()
        .and_then(|t| serde_json::to_string(t).ok());
    vec![
        c.id.as_str().into(),
        c.owner.as_str().into(),
        c.title.as_deref().into(),
        c.system.as_deref().into(),
        c.model.as_deref().into(),
        metadata.into(),
        (c.created_at as f64).into(),
        toolsets.into(),
        c.agent.as_deref().into(),
        memory_column(c),
    ]
}

/// The `memory` column ([`Remembered`]; the migration's trigger indexes the rows of `1`).
fn memory_column(c: &Conversation) -> Param<'static> {
    f64::from(c.memory as u8).into()
}

#[cfg(test)]
mod tests {
    use super::scoped_id;

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
}
