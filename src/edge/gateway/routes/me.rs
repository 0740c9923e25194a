//! A user's data as a whole: `DELETE /v1/me` (and an admin's `DELETE /v1/admin/users/{user}`)
//! erases it ([`crate::edge::erasure`]); `GET /v1/me/export` gives it.
//!
//! The export is everything the caller owns as one JSON document, streamed as it is read
//! so a large account needs no memory in proportion: their conversations (each with its whole
//! history, every artifact version, its files by link and its schedules), then their usage
//! ledger.
//!
//! ```text
//! {"user", "exported_at", "conversations": [{...the conversation, "messages": [...],
//!   "artifacts": [...], "files": [{id, media_type, size, name, created_at, url}],
//!   "schedules": [...]}, ...],
//!  "usage": [...]}
//! ```
//!
//! Schedules live in each conversation's object, not in D1: one request to it per conversation.
//!
//! A task reads D1 page by page and writes into a small bounded channel that the response's
//! body drains, so reading waits for the client. A failure part-way ends the body with an
//! error: the client gets a truncated document, never a complete-looking wrong one.

use std::fmt::Write as _;

use futures::channel::mpsc;
use futures::SinkExt;
use worker::{console_error, wasm_bindgen_futures, Context, Env, Headers, Response};

use crate::edge::config::access::ANONYMOUS;
use crate::edge::conversation::client::ConversationClient;
use crate::edge::gateway::auth::Caller;
use crate::edge::json_response;

use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;

type Chunks = mpsc::Sender<Result<Vec<u8>, worker::Error>>;

const CONVERSATIONS_PAGE: i64 = 20;
const MESSAGES_PAGE: i64 = 200;
const LEDGER_PAGE: u32 = 500;
/// Written out once this much has gathered.
const CHUNK_BYTES: usize = 64 << 10;

/// Erases the caller (`target` `None`) or, for an admin, `target`: recorded, answered 202, run
/// after the answer (and finished by the scheduled run should it not end).
pub async fn erase(
    env: &Env,
    ctx: &Context,
    caller: &Caller,
    target: Option<&str>,
) -> Result<Response, ApiError> {
    let owner = match target {
        None => {
            refuse_shared(&caller.user, "erasing an account")?;
            caller.user.clone()
        }
        Some(_) if !caller.admin => return Err(ApiError::Forbidden(
            "erasing another user needs a server key marked admin in API_KEYS (`name:key:admin`)"
                .into(),
        )),
        Some(user) if user.is_empty() || user.len() > 256 => {
            return Err(ApiError::BadRequest(
                "the user must be 1 to 256 characters".into(),
            ))
        }
        Some(user) => user.to_string(),
    };
    Store::for_owner(env, &owner)
        .await?
        .request_erasure(&owner, &caller.user, now_ms())
        .await?;
    let (env, erased) = (env.clone(), owner.clone());
    ctx.wait_until(async move {
        if let Err(e) = crate::edge::erasure::erase(&env, &erased).await {
            console_error!("erasure of {erased}: {e}; the scheduled run finishes it");
        }
    });
    json_response(202, &serde_json::json!({ "erasing": owner }))
}

/// With `ALLOW_ANONYMOUS=true` every caller without a token is the one user `anonymous`: "their"
/// account is every such visitor's, so no one of them may read or erase it whole.
fn refuse_shared(user: &str, what: &str) -> Result<(), ApiError> {
    if user != ANONYMOUS {
        return Ok(());
    }
    Err(ApiError::Forbidden(format!(
        "{what} needs a caller with a token: every caller without one is the shared user \
         `{ANONYMOUS}` (ALLOW_ANONYMOUS), whose data is every such visitor's"
    )))
}

pub async fn export(env: &Env, user: &str) -> Result<Response, ApiError> {
    refuse_shared(user, "exporting an account")?;
    let store = Store::for_owner(env, user).await?;
    let (mut tx, rx) = mpsc::channel(2);
    let user = user.to_string();
    let env = env.clone();
    wasm_bindgen_futures::spawn_local(async move {
        let mut out = String::new();
        if let Err(e) = write_export(&env, &store, &user, &mut out, &mut tx).await {
            console_error!("exporting {user}'s data: {e}");
            let _ = tx
                .send(Err(worker::Error::RustError(format!(
                    "the export failed: {e}"
                ))))
                .await;
        }
    });
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    headers.set(
        "content-disposition",
        "attachment; filename=\"edge-agent-export.json\"",
    )?;
    headers.set("cache-control", "no-store")?;
    Ok(Response::from_stream(rx)?.with_headers(headers))
}

/// Why writing stopped: D1 failed, or the client went away (nothing more to do).
enum Stop {
    Failed(ApiError),
    Gone,
}

impl From<ApiError> for Stop {
    fn from(e: ApiError) -> Self {
        Stop::Failed(e)
    }
}

impl From<serde_json::Error> for Stop {
    fn from(e: serde_json::Error) -> Self {
        Stop::Failed(e.into())
    }
}

async fn write_export(
    env: &Env,
    store: &Store,
    user: &str,
    out: &mut String,
    tx: &mut Chunks,
) -> Result<(), ApiError> {
    match write_all(env, store, user, out, tx).await {
        Ok(()) | Err(Stop::Gone) => Ok(()),
        Err(Stop::Failed(e)) => Err(e),
    }
}

async fn write_all(
    env: &Env,
    store: &Store,
    user: &str,
    out: &mut String,
    tx: &mut Chunks,
) -> Result<(), Stop> {
    let _ = write!(
        out,
        "{{\"user\":{},\"exported_at\":{},\"conversations\":[",
        serde_json::to_string(user)?,
        now_ms()
    );
    let mut cursor: Option<(i64, String)> = None;
    let mut first = true;
    loop {
        let before = cursor.as_ref().map(|(t, id)| (*t, id.as_str()));
        let (page, next) = store
            .conversations_page(user, before, CONVERSATIONS_PAGE)
            .await?;
        for conversation in page {
            if !std::mem::take(&mut first) {
                out.push(',');
            }
            // The conversation's own fields, then its contents in the same object.
            let mut head = serde_json::to_string(&conversation)?;
            head.pop();
            out.push_str(&head);
            if !head.ends_with('{') {
                out.push(',');
            }
            out.push_str("\"messages\":[");
            let mut after = 0;
            let mut first_message = true;
            loop {
                let (messages, next) = store
                    .history_page(&conversation.id, after, MESSAGES_PAGE)
                    .await?;
                for message in &messages {
                    if !std::mem::take(&mut first_message) {
                        out.push(',');
                    }
                    out.push_str(&serde_json::to_string(message)?);
                }
                flush(out, tx, false).await?;
                match next {
                    Some(seq) => after = seq,
                    None => break,
                }
            }
            let artifacts = store.artifact_versions(&conversation.id).await?;
            let mut files = store.files_of(&conversation.id).await?;
            for file in &mut files {
                let url = format!(
                    "/v1/conversations/{}/files/{}",
                    conversation.id,
                    file["id"].as_str().unwrap_or_default()
                );
                if let Some(map) = file.as_object_mut() {
                    map.insert("url".into(), url.into());
                }
            }
            let schedules = ConversationClient::for_conversation(env, &conversation.id)?
                .list_schedules()
                .await?;
            let _ = write!(
                out,
                "],\"artifacts\":{},\"files\":{},\"schedules\":{}}}",
                serde_json::to_string(&artifacts)?,
                serde_json::to_string(&files)?,
                serde_json::to_string(&schedules)?
            );
            flush(out, tx, false).await?;
        }
        match next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    out.push_str("],\"usage\":[");
    let mut after = 0i64;
    let mut first_row = true;
    loop {
        let rows = store.ledger_page(user, after, LEDGER_PAGE).await?;
        for row in &rows {
            if !std::mem::take(&mut first_row) {
                out.push(',');
            }
            out.push_str(&serde_json::to_string(row)?);
        }
        flush(out, tx, false).await?;
        match rows.last().and_then(|r| r["id"].as_i64()) {
            Some(id) if rows.len() == LEDGER_PAGE as usize => after = id,
            _ => break,
        }
    }
    out.push_str("]}");
    flush(out, tx, true).await
}

/// Sends what has gathered, once it is worth a chunk (or at the end).
async fn flush(out: &mut String, tx: &mut Chunks, last: bool) -> Result<(), Stop> {
    if out.is_empty() || (!last && out.len() < CHUNK_BYTES) {
        return Ok(());
    }
    let chunk = std::mem::take(out).into_bytes();
    tx.send(Ok(chunk)).await.map_err(|_| Stop::Gone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_anonymous_user_may_neither_export_nor_erase_its_account() {
        let e = refuse_shared(ANONYMOUS, "exporting an account").unwrap_err();
        assert!(matches!(&e, ApiError::Forbidden(m) if m.contains("ALLOW_ANONYMOUS")), "{e}");
        assert!(refuse_shared("key:alice", "exporting an account").is_ok());
        assert!(refuse_shared("user-1", "erasing an account").is_ok());
    }
}
