//! Memory in a turn ([`crate::agent::memory`]): the user's working memory with the turn's
//! agent, read while the history loads and shown in the system prompt, written by
//! `update_memory` (or after the answer, [`super::extract`]); and recall, the messages of the
//! user's other conversations that match the new one, found within `MEMORY_RECALL_MS`.

use std::cell::RefCell;
use std::rc::Rc;

use async_trait::async_trait;
use futures::future::{select, Either};
use worker::console_error;

use super::env::TurnEnv;
use crate::agent::memory::recall::{self, Recalled};
use crate::agent::memory::{MemoryError, MemoryStore};
use crate::edge::config::agents::AgentSpec;
use crate::edge::config::memory::MemorySpec;
use crate::edge::d1::conversations::Remembered;
use crate::edge::d1::memory::Written;
use crate::edge::d1::Store;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::vectors::Vectors;
use crate::edge::protocol::TurnConversation;

/// Most bytes of the recalled messages a turn's prompt is given.
const RECALL_BYTES: usize = 6 * 1024;

/// Most bytes of a message embedded.
const EMBEDDED_BYTES: usize = 1500;

/// Times a write is tried against other writers before it gives up.
const WRITE_TRIES: u32 = 8;

/// What a turn has of its user's memory.
pub struct TurnMemory {
    pub spec: Rc<MemorySpec>,
    /// The agent whose memory it is.
    pub agent: String,
    /// The document the prompt shows; `update_memory` changes it for the turn's next step.
    pub shown: Rc<RefCell<String>>,
    /// What recall found, best first.
    pub recalled: Vec<Recalled>,
    /// For the turn's log line: how recall went.
    pub report: serde_json::Value,
    /// The turn's new message (its id and text), if it has one.
    pub asked: Option<(String, String)>,
}

impl TurnMemory {
    /// The recalled messages as the system prompt gives them.
    pub fn recall_block(&self) -> Option<String> {
        recall::context(&self.recalled, RECALL_BYTES)
    }

    /// The transient `data-memory` part that tells the client what was recalled.
    pub fn recalled_part(&self) -> Option<String> {
        if self.recalled.is_empty() {
            return None;
        }
        let recalled: Vec<serde_json::Value> = self
            .recalled
            .iter()
            .map(|r| {
                serde_json::json!({
                    "conversation_id": r.conversation_id,
                    "message_id": r.message_id,
                    "title": r.title,
                    "created_at": r.created_at,
                })
            })
            .collect();
        let part = serde_json::json!({
            "type": "data-memory",
            "data": {"recalled": recalled},
            "transient": true,
        });
        Some(format!("data: {part}\n\n"))
    }

    /// The store a turn of conversation `id` of `owner` writes through (`update_memory`, the
    /// extractor).
    pub fn store(&self, turn_env: &TurnEnv, (owner, id): (&str, &str)) -> Rc<dyn MemoryStore> {
        Rc::new(D1Memory {
            store: turn_env.store.clone(),
            owner: owner.to_string(),
            agent: self.agent.clone(),
            initial: self.spec.shape.initial(),
            from: Some(id.to_string()),
        })
    }
}

/// The memory a turn of `agent` in `conversation` has: none for an agent without `memory`, a
/// conversation made with `memory: false` or a child's. `asked`: the turn's new message (its id
/// and text), which recall looks for (none: no recall). Read together, the working memory in
/// full and the recall within `MEMORY_RECALL_MS` (past it the turn goes on without it): words
/// by full-text search, and meaning by the `VECTORS` index when it is bound.
pub async fn load(
    turn_env: &TurnEnv,
    conversation: &TurnConversation,
    agent: &AgentSpec,
    asked: Option<(&str, &str)>,
) -> Option<TurnMemory> {
    let spec = agent.memory.clone()?;
    if conversation.memory == Remembered::Off || conversation.parent.is_some() {
        return None;
    }
    let store = &turn_env.store;
    let owner = conversation.owner.as_str();
    let config = &turn_env.config;
    let budget_ms = config.memory.recall_ms;
    let top_k = spec.top_k;
    let except = Some(conversation.id.as_str());
    let started = now_ms();
    let recalling = async {
        let Some((_, text)) = asked.filter(|_| top_k > 0) else {
            return Ok::<_, RecallError>(None);
        };
        store.ensure_recall().await?;
        let words = async {
            match recall::search_terms(text) {
                Some(terms) => store.recall(owner, &terms, except, top_k).await,
                None => Ok(Vec::new()),
            }
        };
        let meaning = async {
            let vectors = Vectors::from_env(&turn_env.env, &config.memory.embedding_model)?;
            let found = async {
                let [asked] = <[_; 1]>::try_from(vectors.embed(&[text]).await?)
                    .map_err(|_| "no embedding".to_string())?;
                let ids = vectors.query(&asked, &namespace(owner), top_k).await?;
                store
                    .recalled_by_ids(owner, &ids, except)
                    .await
                    .map_err(|e| e.to_string())
            };
            Some(found.await)
        };
        // Each within the budget on its own: a slow index (a cold embedding model) does not
        // cost the words' results, which are in long before.
        let (words, meaning) =
            futures::future::join(within(words, budget_ms), within(meaning, budget_ms)).await;
        let past = || format!("past MEMORY_RECALL_MS ({budget_ms} ms)");
        let mut skipped = Vec::new();
        let words = match words {
            Some(found) => found.map_err(RecallError::from)?,
            None => {
                skipped.push(format!("words: {}", past()));
                Vec::new()
            }
        };
        let meaning = match meaning {
            Some(None) => None,
            Some(Some(Ok(found))) => Some(found),
            // Words alone, then: the failure is said in the log line.
            Some(Some(Err(e))) => {
                skipped.push(format!("meaning: {e}"));
                None
            }
            None => {
                skipped.push(format!("meaning: {}", past()));
                None
            }
        };
        let semantic = meaning.as_ref().map(Vec::len);
        let fused = recall::fuse(vec![words, meaning.unwrap_or_default()], top_k as usize);
        Ok(Some((fused, semantic, skipped)))
    };
    let (working, recalled) =
        futures::future::join(store.memory(owner, &agent.name), recalling).await;
    let document = match working {
        Ok(Some(row)) => row.body,
        Ok(None) => spec.shape.initial(),
        Err(e) => {
            // Shown as empty for this turn; `update_memory` reads it again before it writes.
            console_error!("reading the working memory of `{}`: {e}", agent.name);
            spec.shape.initial()
        }
    };
    let took = now_ms() - started;
    let (recalled, report) = match recalled {
        Ok(None) => (Vec::new(), serde_json::json!({"recalled": null})),
        Ok(Some((found, semantic, skipped))) => {
            let report = serde_json::json!({
                "recalled": found.len(),
                "by_meaning": semantic,
                "recall_ms": took,
                "recall_skipped": (!skipped.is_empty()).then(|| skipped.join("; ")),
            });
            (found, report)
        }
        Err(e) => (
            Vec::new(),
            serde_json::json!({"recalled": 0, "recall_ms": took, "recall_skipped": e.0}),
        ),
    };
    Some(TurnMemory {
        spec,
        agent: agent.name.clone(),
        shown: Rc::new(RefCell::new(document)),
        recalled,
        report,
        asked: asked.map(|(id, text)| (id.to_string(), text.to_string())),
    })
}

/// The Vectorize namespace of `owner`'s vectors: a digest, within the index's 64 bytes.
pub fn namespace(owner: &str) -> String {
    crate::edge::d1::conversations::derived_id(b"edge-agent memory namespace\0", owner, "")
}

/// Messages to embed once the stream has ended, for semantic recall: the turn's new message and
/// its answer, each under its message id.
pub struct Embed {
    pub owner: String,
    pub messages: Vec<(String, String)>,
}

impl Embed {
    /// Embeds and writes them, when `VECTORS` and `AI` are bound; a failure costs a log line.
    pub async fn run(self, turn_env: &TurnEnv) {
        let Some(vectors) =
            Vectors::from_env(&turn_env.env, &turn_env.config.memory.embedding_model)
        else {
            return;
        };
        // Nothing to find in an answer that only called tools.
        let messages: Vec<&(String, String)> = self
            .messages
            .iter()
            .filter(|(_, text)| !text.trim().is_empty())
            .collect();
        if messages.is_empty() {
            return;
        }
        // An embedding model reads a few hundred tokens: the start of a long message is what it
        // is about.
        let texts: Vec<&str> = messages
            .iter()
            .map(|(_, t)| crate::agent::text::clip(t, EMBEDDED_BYTES))
            .collect();
        let ids: Vec<String> = messages.iter().map(|(id, _)| id.clone()).collect();
        let store = &turn_env.store;
        let written = async {
            // Only what the index holds: deletion finds a message's vectors through it.
            let indexed = store
                .indexed_messages(&ids)
                .await
                .map_err(|e| e.to_string())?;
            let (ids, texts): (Vec<&str>, Vec<&str>) = ids
                .iter()
                .zip(texts)
                .filter(|(id, _)| indexed.contains(id))
                .map(|(id, text)| (id.as_str(), text))
                .unzip();
            if ids.is_empty() {
                return Ok(());
            }
            let embeddings = vectors.embed(&texts).await?;
            vectors
                .upsert(
                    &namespace(&self.owner),
                    ids.iter().copied().zip(embeddings).collect(),
                )
                .await?;
            // The conversation may have been deleted meanwhile, its vectors with it: these
            // would outlive it.
            let owned: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
            let kept = store
                .indexed_messages(&owned)
                .await
                .map_err(|e| e.to_string())?;
            let gone: Vec<String> = owned.into_iter().filter(|id| !kept.contains(id)).collect();
            if gone.is_empty() {
                Ok(())
            } else {
                vectors.delete(&gone).await
            }
        };
        if let Err(e) = written.await {
            console_error!("writing the vectors of a turn's messages: {e}");
        }
    }
}

/// `work`'s output, unless `ms` pass first.
async fn within<T>(work: impl std::future::Future<Output = T>, ms: u32) -> Option<T> {
    let timer = worker::Delay::from(std::time::Duration::from_millis(ms.into()));
    match select(Box::pin(work), timer).await {
        Either::Left((done, _)) => Some(done),
        Either::Right(_) => None,
    }
}

/// Why recall gave nothing: its time ran out, or the search failed.
struct RecallError(String);

impl From<crate::edge::error::ApiError> for RecallError {
    fn from(e: crate::edge::error::ApiError) -> Self {
        Self(format!("the search failed: {e}"))
    }
}

/// A user's working memory with one agent in D1, written by compare-and-set on its version: a
/// change made on a version another writer has moved past is made again on the newer one.
pub struct D1Memory {
    pub store: Rc<Store>,
    pub owner: String,
    pub agent: String,
    /// The document before anything is kept.
    pub initial: String,
    /// The conversation of the turn that writes (`None`: the user, through the API): once it is
    /// gone (deleted, erased) the turn writes nothing.
    pub from: Option<String>,
}

#[async_trait(?Send)]
impl MemoryStore for D1Memory {
    async fn update(
        &self,
        change: &dyn for<'a> Fn(&'a str) -> Result<String, String>,
    ) -> Result<String, MemoryError> {
        let failed = |e: crate::edge::error::ApiError| {
            MemoryError::Failed(format!("the memory could not be kept: {e}"))
        };
        for _ in 0..WRITE_TRIES {
            let kept = self
                .store
                .memory(&self.owner, &self.agent)
                .await
                .map_err(failed)?;
            let (current, version) = match kept {
                Some(row) => (row.body, row.version),
                None => (self.initial.clone(), 0),
            };
            let next = change(&current).map_err(MemoryError::Refused)?;
            if next == current {
                return Ok(next);
            }
            let written = self
                .store
                .write_memory(
                    (&self.owner, &self.agent),
                    &next,
                    (version, self.from.as_deref()),
                    now_ms(),
                )
                .await
                .map_err(failed)?;
            match written {
                Written::Yes => return Ok(next),
                Written::Raced => continue,
                Written::NotAllowed => {
                    return Err(MemoryError::Busy(
                        "nothing was written: the conversation is gone, or the user's data is \
                         being erased"
                            .into(),
                    ))
                }
            }
        }
        Err(MemoryError::Busy(
            "the memory is being changed elsewhere right now; nothing was written".into(),
        ))
    }
}
