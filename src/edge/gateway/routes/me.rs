//! A user's data as a whole: `DELETE /v1/me` (and an admin's `DELETE /v1/admin/users/{user}`)
//! erases it ([`crate::edge::erasure`]); `GET /v1/me/export` gives it.
//!
//! The export is everything the caller owns as JSON, streamed as it is read so that a large
//! account needs no memory in proportion: their conversations (each with its whole history,
//! every artifact version, its files by link and its schedules), then their usage ledger.
//!
//! ```text
//! {"user", "exported_at", "conversations": [{...the conversation, "messages": [...],
//!   "artifacts": [...], "files": [{id, media_type, size, name, created_at, url}],
//!   "schedules": [...]}, ...],
//!  "usage": [...], "memory": [{agent, memory, version, updated_at}], "next": "<cursor>" | null}
//! ```
//!
//! `memory` (the caller's working memory with each agent) is in the first part only.
//!
//! A request may make at most 1,000 subrequests (each D1 query, each call to a Durable Object),
//! and schedules live in each conversation's object, not in D1: one call per conversation. So
//! an account is exported in parts. Each part is a whole JSON document that stops once it has
//! spent `SUBREQUESTS` or sent `PART_BYTES`, and names in `next` the cursor that
//! `GET /v1/me/export?after=<cursor>` continues from (`null`: this was the last part). A part
//! that stops inside a conversation closes its entry with `"incomplete": true`; the next part
//! opens with an entry of the same `id` marked `"continued": true` that holds the rest of the
//! arrays it names, to be appended to the earlier entry's. Nothing is ever left out silently.
//!
//! Within a part, a conversation costs one D1 round trip (its first page of messages and of
//! artifact versions, and its files, in one batch) and its object's call, plus a round trip
//! per further page; pages are bounded in bytes
//! ([`PAGE_CHARS`](crate::edge::d1::export::PAGE_CHARS)), not only in rows.
//!
//! A task reads D1 page by page and writes into a small bounded channel that the response's
//! body drains, so reading waits for the client. A failure part-way ends the body with an
//! error: the client gets a truncated document, never a complete-looking wrong one.

use std::fmt::Write as _;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use futures::channel::mpsc;
use futures::SinkExt;
use serde_json::Value;
use worker::{console_error, wasm_bindgen_futures, Context, Env, Headers, Request, Response};

use crate::edge::config::access::ANONYMOUS;
use crate::edge::conversation::client::ConversationClient;
use crate::edge::gateway::auth::Caller;
use crate::edge::json_response;

use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;

type Chunks = mpsc::Sender<Result<Vec<u8>, worker::Error>>;

/// Subrequests one part may make: the platform allows 1,000 a request, and the rest is left for
/// what the request does before the export starts (the caller's token, their D1 shard).
const SUBREQUESTS: u32 = 900;
/// Bytes one part may send before it stops at the next page: its CPU time grows with them.
const PART_BYTES: usize = 64 << 20;
const CONVERSATIONS_PAGE: i64 = 50;
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

/// `GET /v1/me/export`, or with `?after=<cursor>` the part that cursor names: the caller's data
/// as one JSON document per part (see the module's doc).
pub async fn export(req: &Request, env: &Env, user: &str) -> Result<Response, ApiError> {
    refuse_shared(user, "exporting an account")?;
    let mut from = Resume::Conversations(None);
    for (key, value) in super::query_pairs(req) {
        if key == "after" {
            from = Resume::decode(&value)?;
        }
    }
    let store = Store::for_owner(env, user).await?;
    let (tx, rx) = mpsc::channel(2);
    let user = user.to_string();
    let env = env.clone();
    wasm_bindgen_futures::spawn_local(async move {
        let mut part = Part {
            store: &store,
            out: String::new(),
            tx,
            sent: 0,
            object_calls: 0,
        };
        if let Err(e) = write_export(&env, &mut part, &user, from).await {
            console_error!("exporting {user}'s data: {e}");
            let _ = part
                .tx
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

/// Where a part of the export starts: what a part's `next` encodes, read back from `?after=`.
#[derive(Debug, Clone, PartialEq)]
enum Resume {
    /// The conversations from the newest (`None`), or those older than the one whose
    /// `(created_at, id)` this is (keyset order, as the conversations are listed).
    Conversations(Option<(i64, String)>),
    /// Inside the conversation whose `(created_at, id)` this is, which a part left incomplete.
    Within((i64, String), Stage),
    /// The usage ledger, after the row of this id (every conversation is written).
    Usage(i64),
}

/// Where inside a conversation's entry a part starts.
#[derive(Debug, Clone, PartialEq)]
enum Stage {
    /// Its messages after this `seq`; its artifacts, files and schedules follow.
    Messages(i64),
    /// Its artifact versions after this `(artifact, version)`; its files and schedules follow.
    Artifacts(String, i64),
    /// Its schedules.
    Schedules,
}

impl Resume {
    /// The cursor: a short JSON array, base64url, so that it needs no escaping in a URL. It is
    /// opaque to clients; they pass it back as it is.
    fn encode(&self) -> String {
        let parts = match self {
            Resume::Conversations(None) => serde_json::json!(["c"]),
            Resume::Conversations(Some((at, id))) => serde_json::json!(["c", at, id]),
            Resume::Within((at, id), Stage::Messages(seq)) => {
                serde_json::json!(["m", at, id, seq])
            }
            Resume::Within((at, id), Stage::Artifacts(artifact, version)) => {
                serde_json::json!(["a", at, id, artifact, version])
            }
            Resume::Within((at, id), Stage::Schedules) => serde_json::json!(["s", at, id]),
            Resume::Usage(after) => serde_json::json!(["u", after]),
        };
        URL_SAFE_NO_PAD.encode(parts.to_string())
    }

    /// Reads a cursor [`Resume::encode`] wrote; anything else is a 400. Whatever it names is
    /// read as the caller's only (their conversations, their ledger), so a cursor made up or
    /// taken from another user's export reveals nothing.
    fn decode(cursor: &str) -> Result<Self, ApiError> {
        let bad = || {
            ApiError::BadRequest(
                "`after` must be the `next` cursor of an earlier part of the export".into(),
            )
        };
        let bytes = URL_SAFE_NO_PAD
            .decode(cursor.trim_end_matches('='))
            .map_err(|_| bad())?;
        let text = String::from_utf8(bytes).map_err(|_| bad())?;
        let parts: Vec<Value> = crate::llm::json::from_str(&text).map_err(|_| bad())?;
        let number = |i: usize| parts.get(i).and_then(Value::as_i64).ok_or_else(bad);
        let string = |i: usize| {
            parts
                .get(i)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(bad)
        };
        let key = || Ok::<_, ApiError>((number(1)?, string(2)?));
        Ok(match (parts.first().and_then(Value::as_str), parts.len()) {
            (Some("c"), 1) => Resume::Conversations(None),
            (Some("c"), 3) => Resume::Conversations(Some(key()?)),
            (Some("m"), 4) => Resume::Within(key()?, Stage::Messages(number(3)?)),
            (Some("a"), 5) => Resume::Within(key()?, Stage::Artifacts(string(3)?, number(4)?)),
            (Some("s"), 3) => Resume::Within(key()?, Stage::Schedules),
            (Some("u"), 2) => Resume::Usage(number(1)?),
            _ => return Err(bad()),
        })
    }
}

/// A part being written: the text gathered, where it goes, and what it has spent.
struct Part<'a> {
    /// The caller's D1, which counts its round trips.
    store: &'a Store,
    /// What has gathered since the last chunk was sent.
    out: String,
    /// The response body's side of the channel.
    tx: Chunks,
    /// Bytes sent so far.
    sent: usize,
    /// Calls made to conversations' objects (the store counts its own round trips).
    object_calls: u32,
}

impl Part<'_> {
    /// Whether `subrequests` more fit in this part, and it has bytes left to send. A part is
    /// checked before each page it reads, so each part reads at least one: every part moves on.
    fn room(&self, subrequests: u32) -> bool {
        self.store
            .round_trips()
            .saturating_add(self.object_calls)
            .saturating_add(subrequests)
            <= SUBREQUESTS
            && self.sent + self.out.len() < PART_BYTES
    }

    /// Sends what has gathered, once it is worth a chunk (or at the end).
    async fn flush(&mut self, last: bool) -> Result<(), Stop> {
        if self.out.is_empty() || (!last && self.out.len() < CHUNK_BYTES) {
            return Ok(());
        }
        let chunk = std::mem::take(&mut self.out).into_bytes();
        self.sent += chunk.len();
        self.tx.send(Ok(chunk)).await.map_err(|_| Stop::Gone)
    }
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

/// Writes the part from `from`; a client gone away is not a failure.
async fn write_export(
    env: &Env,
    part: &mut Part<'_>,
    user: &str,
    from: Resume,
) -> Result<(), ApiError> {
    match write_part(env, part, user, from).await {
        Ok(()) | Err(Stop::Gone) => Ok(()),
        Err(Stop::Failed(e)) => Err(e),
    }
}

/// One part, from `from` to wherever its budget runs out (or the end), `next` last.
async fn write_part(env: &Env, part: &mut Part<'_>, user: &str, from: Resume) -> Result<(), Stop> {
    let _ = write!(
        part.out,
        "{{\"user\":{},\"exported_at\":{},\"conversations\":[",
        serde_json::to_string(user)?,
        now_ms()
    );
    let opening = from == Resume::Conversations(None);
    let stopped = write_conversations(env, part, user, from).await?;
    part.out.push_str("],\"usage\":[");
    let next = match stopped {
        Resume::Usage(after) => write_usage(part, user, after).await?.map(Resume::Usage),
        stopped => Some(stopped),
    };
    if opening {
        // Small (one document per agent): whole, in the first part.
        let memory = part.store.memories(user).await?;
        let _ = write!(part.out, "],\"memory\":{}", serde_json::to_string(&memory)?);
        part.out.push_str(",\"next\":");
    } else {
        part.out.push_str("],\"next\":");
    }
    match next {
        Some(next) => part.out.push_str(&serde_json::to_string(&next.encode())?),
        None => part.out.push_str("null"),
    }
    part.out.push('}');
    part.flush(true).await
}

/// Writes the conversations from `from` on. Returns [`Resume::Usage`] once every one is
/// written (the ledger is next), else where the next part starts.
async fn write_conversations(
    env: &Env,
    part: &mut Part<'_>,
    user: &str,
    from: Resume,
) -> Result<Resume, Stop> {
    let mut first = true;
    let mut position = from;
    loop {
        position = match position {
            Resume::Usage(after) => return Ok(Resume::Usage(after)),
            Resume::Within(key, stage) => {
                if !part.room(2) {
                    return Ok(Resume::Within(key, stage));
                }
                // The cursor is the client's: the conversation is read only if it is the
                // caller's (and skipped if it was deleted meanwhile).
                let owned = part
                    .store
                    .conversation(user, &key.1)
                    .await?
                    .is_some_and(|c| c.id == key.1);
                if owned {
                    if !std::mem::take(&mut first) {
                        part.out.push(',');
                    }
                    let _ = write!(
                        part.out,
                        "{{\"id\":{},\"continued\":true",
                        serde_json::to_string(&key.1)?
                    );
                    if let Some(stage) = write_contents(env, part, &key.1, stage).await? {
                        return Ok(Resume::Within(key, stage));
                    }
                }
                Resume::Conversations(Some(key))
            }
            Resume::Conversations(before) => {
                // The page, and at least one conversation's opening and object call.
                if !part.room(3) {
                    return Ok(Resume::Conversations(before));
                }
                let (page, more) = part
                    .store
                    .conversations_page(
                        user,
                        crate::edge::d1::Listing::All,
                        before.as_ref().map(|(at, id)| (*at, id.as_str())),
                        CONVERSATIONS_PAGE,
                    )
                    .await?;
                let mut last = before;
                for conversation in page {
                    if !part.room(2) {
                        return Ok(Resume::Conversations(last));
                    }
                    if !std::mem::take(&mut first) {
                        part.out.push(',');
                    }
                    // The conversation's own fields (an object, never empty: it has an id),
                    // then its contents in the same object.
                    let mut head = serde_json::to_string(&conversation)?;
                    head.pop();
                    part.out.push_str(&head);
                    let key = (conversation.created_at, conversation.id);
                    if let Some(stage) =
                        write_contents(env, part, &key.1, Stage::Messages(0)).await?
                    {
                        return Ok(Resume::Within(key, stage));
                    }
                    last = Some(key);
                }
                match more {
                    Some(next) => Resume::Conversations(Some(next)),
                    None => Resume::Usage(0),
                }
            }
        };
    }
}

/// Writes conversation `id`'s contents from `stage` on, after its entry's first fields, and
/// closes the entry. `Some(stage)`: the part ran out of room there; the entry is closed marked
/// `"incomplete"`, and the next part continues it from `stage`.
async fn write_contents(
    env: &Env,
    part: &mut Part<'_>,
    id: &str,
    stage: Stage,
) -> Result<Option<Stage>, Stop> {
    let opening = match &stage {
        Stage::Messages(after) => Some(part.store.export_opening(id, Some(*after), ("", 0)).await?),
        Stage::Artifacts(artifact, version) => Some(
            part.store
                .export_opening(id, None, (artifact.as_str(), *version))
                .await?,
        ),
        Stage::Schedules => None,
    };
    if let Some(opening) = opening {
        if let Some(mut page) = opening.messages {
            part.out.push_str(",\"messages\":[");
            let mut first = true;
            loop {
                write_rows(&mut part.out, &page.rows, &mut first)?;
                part.flush(false).await?;
                let Some(after) = page.next else {
                    break;
                };
                // Another page, and the object's call still to come.
                if !part.room(2) {
                    part.out.push(']');
                    return Ok(Some(incomplete(part, Stage::Messages(after))));
                }
                page = part.store.export_messages(id, after).await?;
            }
            part.out.push(']');
        }
        part.out.push_str(",\"artifacts\":[");
        let mut page = opening.artifacts;
        let mut first = true;
        loop {
            write_rows(&mut part.out, &page.rows, &mut first)?;
            part.flush(false).await?;
            let Some((artifact, version)) = page.next else {
                break;
            };
            if !part.room(2) {
                part.out.push(']');
                return Ok(Some(incomplete(part, Stage::Artifacts(artifact, version))));
            }
            page = part
                .store
                .export_artifacts(id, (artifact.as_str(), version))
                .await?;
        }
        part.out.push(']');
        let mut files = opening.files;
        for file in &mut files {
            let url = format!(
                "/v1/conversations/{id}/files/{}",
                file.get("id").and_then(Value::as_str).unwrap_or_default()
            );
            if let Some(map) = file.as_object_mut() {
                map.insert("url".into(), url.into());
            }
        }
        let _ = write!(part.out, ",\"files\":{}", serde_json::to_string(&files)?);
    }
    if !part.room(1) {
        return Ok(Some(incomplete(part, Stage::Schedules)));
    }
    part.object_calls += 1;
    let schedules = ConversationClient::for_conversation(env, id)?
        .list_schedules()
        .await?;
    let _ = write!(
        part.out,
        ",\"schedules\":{}}}",
        serde_json::to_string(&schedules)?
    );
    part.flush(false).await?;
    Ok(None)
}

/// Closes the entry of a conversation the part stops inside; `stage` is where the next resumes.
fn incomplete(part: &mut Part<'_>, stage: Stage) -> Stage {
    part.out.push_str(",\"incomplete\":true}");
    stage
}

/// Appends `rows` to a JSON array being written (`first`: nothing is in it yet).
fn write_rows(out: &mut String, rows: &[Value], first: &mut bool) -> Result<(), Stop> {
    for row in rows {
        if !std::mem::take(first) {
            out.push(',');
        }
        out.push_str(&serde_json::to_string(row)?);
    }
    Ok(())
}

/// Writes the caller's ledger rows after row `after`. `Some(after)`: the part ran out of room
/// there.
async fn write_usage(part: &mut Part<'_>, user: &str, mut after: i64) -> Result<Option<i64>, Stop> {
    let mut first = true;
    loop {
        if !part.room(1) {
            return Ok(Some(after));
        }
        let rows = part.store.ledger_page(user, after, LEDGER_PAGE).await?;
        write_rows(&mut part.out, &rows, &mut first)?;
        part.flush(false).await?;
        match rows
            .last()
            .and_then(|r| r.get("id"))
            .and_then(Value::as_i64)
        {
            Some(id) if rows.len() == LEDGER_PAGE as usize => after = id,
            _ => return Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shared_anonymous_user_may_neither_export_nor_erase_its_account() {
        let e = refuse_shared(ANONYMOUS, "exporting an account").unwrap_err();
        assert!(
            matches!(&e, ApiError::Forbidden(m) if m.contains("ALLOW_ANONYMOUS")),
            "{e}"
        );
        assert!(refuse_shared("key:alice", "exporting an account").is_ok());
        assert!(refuse_shared("user-1", "erasing an account").is_ok());
    }

    #[test]
    fn every_cursor_reads_back_as_the_place_it_names() {
        let key = (1_795_200_000_123, "c\"1 é/?&=".to_string());
        for resume in [
            Resume::Conversations(None),
            Resume::Conversations(Some(key.clone())),
            Resume::Within(key.clone(), Stage::Messages(0)),
            Resume::Within(key.clone(), Stage::Messages(4_321)),
            Resume::Within(key.clone(), Stage::Artifacts("notes \"v\"".into(), 600)),
            Resume::Within(key.clone(), Stage::Schedules),
            Resume::Usage(98_765),
        ] {
            let cursor = resume.encode();
            // It goes in a query string as it is.
            assert!(
                cursor
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{cursor}"
            );
            assert_eq!(Resume::decode(&cursor).unwrap(), resume);
        }
    }

    #[test]
    fn a_cursor_no_part_gave_is_a_400() {
        let made_up = |json: &str| URL_SAFE_NO_PAD.encode(json);
        for cursor in [
            String::new(),
            "not base64!".to_string(),
            made_up("{\"c\":1}"),
            made_up("[\"x\"]"),
            made_up("[\"c\",1]"),
            made_up("[\"m\",1,\"id\"]"),
            made_up("[\"a\",1,\"id\",\"notes\",\"two\"]"),
            made_up("[\"u\",\"1\"]"),
            made_up("[\"u\",1,2]"),
        ] {
            let e = Resume::decode(&cursor).unwrap_err();
            assert!(
                matches!(&e, ApiError::BadRequest(m) if m.contains("`next`")),
                "{cursor}: {e}"
            );
        }
    }
}
