//! Erasing a user (`DELETE /v1/me`, or an admin's `DELETE /v1/admin/users/{user}`): every
//! conversation they own goes as a `DELETE` takes one (running turns cancelled first, history,
//! artifacts, files, the objects' storage). Content goes, accounting stays: the usage ledger
//! keeps its rows (amounts, model, time; the conversation they named is blanked), the budget
//! row and the spend object's period total stay, so erasing oneself neither resets what one has
//! spent nor lifts an admin's limit, and a turn still running is charged. The request is
//! recorded first (`erasures`), answered 202, and the erasure runs after the answer; should it
//! not end (the Worker's time after a response is short), the scheduled run finishes it. While
//! the request's row is there no new conversation of the user's is made
//! (`Store::refused_conversation`).
//! Nobody else's data is touched: every query is by owner.

use serde_json::json;
use worker::{console_error, console_log, Env};

use crate::edge::config::Config;
use crate::edge::conversation::deletion::delete_whole;
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::files::Files;

/// Conversations looked up at a time while erasing.
const PAGE: i64 = 25;

/// Everything `owner` has, erased; logs one line. The erasure's row goes last, so a failure
/// leaves it for the scheduled run.
pub async fn erase(env: &Env, owner: &str) -> Result<(), ApiError> {
    let started = now_ms();
    let store = Store::for_owner(env, owner).await?;
    let (mut conversations, mut rows) = (0u64, 0u64);
    loop {
        let (page, _) = store
            .conversations_page(owner, crate::edge::d1::Listing::All, None, PAGE)
            .await?;
        if page.is_empty() {
            break;
        }
        for conversation in page {
            rows += delete_whole(env, &store, &conversation.id, owner)
                .await?
                .unwrap_or(0);
            conversations += 1;
        }
    }
    // Files no conversation named any more: uploads refused or cut off, queued messages'.
    if let Some(bucket) = Files::from_env(env) {
        loop {
            let ids = store.owner_files(owner, 1_000).await?;
            if ids.is_empty() {
                break;
            }
            store.discard_files(&bucket, &ids).await?;
            rows += ids.len() as u64;
        }
    }
    let kept = store.finish_erasure(owner).await?;
    console_log!(
        "{}",
        json!({
            "event": "erasure", "level": "info", "user": owner,
            "conversations_deleted": conversations, "rows_deleted": rows,
            "ledger_rows_kept": kept,
            "duration_ms": now_ms() - started,
        })
    );
    Ok(())
}

/// The erasures requested but not finished, in every D1 database (a few per run).
pub async fn resume(env: &Env, config: &Config) {
    for binding in &config.d1_shards {
        let pending = match Store::on(env, binding) {
            Ok(store) => store.pending_erasures(5).await,
            Err(e) => Err(e),
        };
        let owners = match pending {
            Ok(owners) => owners,
            Err(e) => {
                console_error!("erasure: listing pending erasures in {binding}: {e}");
                continue;
            }
        };
        for owner in owners {
            if let Err(e) = erase(env, &owner).await {
                console_error!("erasure of {owner}: {e}");
            }
        }
    }
}
