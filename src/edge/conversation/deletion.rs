//! Deleting a conversation: the running turn cancelled, the object emptied but for a mark that
//! refuses messages until the D1 rows are gone, the deletion finished by the alarm if the
//! Worker does not come back.

use super::{Object, DELETION_MS};
use crate::agent::AgentMessage;
use crate::edge::conversation::storage::{Deleted, DELETED};
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::platform::files::Files;
use crate::edge::platform::vectors::Vectors;
use std::rc::Rc;
use worker::{console_error, Env};

/// Deletes a conversation, for a user's `DELETE` and the Worker's own runs (retention, a user's
/// erasure): the object refuses messages and drops its turn (nothing recreates the rows until
/// it forgets), the rows and files go, then the object forgets (or its alarm finishes the
/// deletion). The rows deleted, or `None` when no such conversation is stored.
pub async fn delete_whole(
    env: &Env,
    store: &Store,
    id: &str,
    owner: &str,
) -> Result<Option<u64>, ApiError> {
    let object = super::client::ConversationClient::for_conversation(env, id)?;
    // Its turn stops first, and with it the children it runs.
    object.clear(id, owner).await?;
    let rows = delete_stored(env, store, owner, id).await?;
    if let Err(e) = object.forget().await {
        console_error!("forgetting deleted conversation {id}: {e}");
    }
    Ok(rows)
}

/// Deletes a conversation's D1 rows and its files in R2, after its children (the
/// conversations its agent tools started, each deleted whole): the children and the files
/// first, so a failure leaves the rows that name them for the next attempt (the object's alarm
/// makes it when the Worker does not). The rows deleted, or `None` when no such conversation is
/// stored.
pub async fn delete_stored(
    env: &Env,
    store: &Store,
    owner: &str,
    id: &str,
) -> Result<Option<u64>, ApiError> {
    let mut children = 0;
    for child in store.children(owner, id).await? {
        children += Box::pin(delete_whole(env, store, &child, owner))
            .await?
            .unwrap_or(0);
    }
    if let Some(files) = Files::from_env(env) {
        let ids = store.conversation_files(owner, id).await?;
        if !ids.is_empty() {
            files.delete(&ids).await?;
        }
    }
    // Semantic recall's vectors too (recall never gives a deleted conversation's messages,
    // whatever the index holds, but the index is the user's data).
    let config = crate::edge::config::Config::cached(env)?;
    let vectors = Vectors::from_env(env, &config.memory.embedding_model);
    let vector_ids = match &vectors {
        Some(vectors) => {
            let ids = store.remembered_ids(id).await?;
            if !ids.is_empty() {
                vectors.delete(&ids).await.map_err(ApiError::Internal)?;
            }
            ids
        }
        None => Vec::new(),
    };
    let deleted = store.delete_conversation(owner, id).await?;
    // Again once the rows are gone: a turn's vectors written in between would outlive them.
    if let (Some(vectors), false) = (&vectors, vector_ids.is_empty()) {
        if let Err(e) = vectors.delete(&vector_ids).await {
            console_error!("deleting conversation {id}'s vectors again: {e}");
        }
    }
    Ok(deleted.map(|own| own + children))
}

impl Object {
    /// The conversation is being deleted: the running turn is cancelled and has ended before
    /// the object forgets everything but that it is being deleted (the [`DELETED`] mark). It
    /// refuses messages until the Worker, its D1 rows gone, says [`Object::forget`]; should the
    /// Worker never come back, the alarm deletes the rows itself.
    pub(super) async fn clear(&self, deleted: Deleted) -> std::result::Result<(), ApiError> {
        self.know_shard(&deleted.owner).await?;
        self.deleting.set(true);
        self.cancel();
        for _ in 0..200 {
            if self.live.borrow().is_none() {
                break;
            }
            worker::Delay::from(std::time::Duration::from_millis(25)).await;
        }
        // The queue goes with the object, and the files of its messages with it: no D1 row
        // names them (a `/v1/chat` sent to another guess recorded them under that one).
        let queued: Vec<AgentMessage> = self
            .storage
            .queued(None)?
            .iter()
            .filter_map(|row| self.storage.read(row))
            .collect();
        self.discard_files(&queued.iter().collect::<Vec<_>>()).await;
        let cleared = self.empty().await;
        // Emptying took the mark; the alarm that may finish the deletion needs it.
        self.keep_shard()?;
        let marked = serde_json::to_string(&deleted)
            .map_err(ApiError::from)
            .and_then(|json| Ok(self.storage.set_mark(DELETED, &json)?));
        if marked.is_ok() {
            if let Err(e) = self.state.storage().set_alarm(DELETION_MS).await {
                console_error!("setting the deletion's alarm: {e}");
            }
        }
        self.deleting.set(false);
        cleared?;
        marked
    }

    /// The conversation's D1 rows are gone: the object keeps nothing, not even the mark.
    pub(super) async fn forget(&self) -> std::result::Result<(), ApiError> {
        if self.storage.deleted()?.is_none() {
            return Ok(());
        }
        self.empty().await
    }

    /// Everything goes, tables and all: an object whose storage is empty does not exist, and
    /// costs nothing. The alarm is deleted first, so none fires on tables that are gone (with
    /// this compatibility date `deleteAll` deletes it too).
    pub(super) async fn empty(&self) -> std::result::Result<(), ApiError> {
        let storage = self.state.storage();
        if let Err(e) = storage.delete_alarm().await {
            console_error!("deleting the conversation alarm: {e}");
        }
        let cleared = storage.delete_all().await;
        match cleared {
            Ok(()) => self.storage.emptied(),
            Err(_) => self.storage.maybe_emptied(),
        }
        Ok(cleared?)
    }

    /// Finishes a deletion the Worker left half done: the D1 rows, then the object's mark.
    pub(super) fn finish_deletion(
        self: &Rc<Self>,
        deleted: Deleted,
    ) -> std::result::Result<(), ApiError> {
        let turn_env = self.turn_env()?;
        let (env, store) = (turn_env.env.clone(), turn_env.store.clone());
        let object = self.clone();
        self.state.wait_until(async move {
            let done =
                match delete_stored(&env, &store, &deleted.owner, &deleted.conversation).await {
                    Ok(_) => object.forget().await,
                    Err(e) => Err(e),
                };
            if let Err(e) = done {
                console_error!("finishing the deletion of {}: {e}", deleted.conversation);
                object.keep_alarm();
            }
        });
        Ok(())
    }
}
