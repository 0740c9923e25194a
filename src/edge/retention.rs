//! The Worker's scheduled run (the Cron Trigger in `wrangler.toml`): with `RETENTION_DAYS` set,
//! the conversations not updated for that long are deleted, history, artifacts, files and the
//! object's storage, exactly as `DELETE /v1/conversations/{id}` deletes one. The usage ledger
//! keeps its rows (spend is accounting; they hold no content). Each run takes a bounded batch,
//! oldest first, from every D1 database, so a backlog drains over several runs and a run that
//! stops early is resumed by the next; each run writes one log line. The same run finishes any
//! user erasure that did not end ([`crate::edge::erasure`]).

use serde_json::json;
use worker::{console_error, console_log, event, Env, ScheduleContext, ScheduledEvent};

use crate::edge::config::Config;
use crate::edge::conversation::deletion::delete_whole;
use crate::edge::d1::Store;
use crate::edge::platform::clock::now_ms;

/// Conversations deleted per run and database: each costs about five subrequests (the object
/// twice, D1 twice, R2), well within a scheduled run's limit.
pub const BATCH: u32 = 25;

const DAY_MS: i64 = 86_400_000;

#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    match Config::cached(&env) {
        Ok(config) => {
            run(&env, &config).await;
            crate::edge::erasure::resume(&env, &config).await;
        }
        Err(e) => console_error!(
            "{}",
            json!({"event": "retention", "level": "error", "detail": e.to_string()})
        ),
    }
}

/// One run: a batch of idle conversations from each database, deleted one after another.
pub async fn run(env: &Env, config: &Config) {
    let Some(days) = config.retention_days else {
        return;
    };
    let started = now_ms();
    let before = started - i64::from(days) * DAY_MS;
    let (mut deleted, mut rows, mut failed, mut more) = (0u64, 0u64, 0u64, false);
    for binding in &config.d1_shards {
        let idle = match Store::on(env, binding) {
            Ok(store) => store
                .idle_since(before, BATCH)
                .await
                .map(|idle| (store, idle)),
            Err(e) => Err(e),
        };
        let (store, idle) = match idle {
            Ok(found) => found,
            Err(e) => {
                console_error!("retention: listing idle conversations in {binding}: {e}");
                failed += 1;
                continue;
            }
        };
        more |= idle.len() == BATCH as usize;
        for (id, owner) in idle {
            match delete_whole(env, &store, &id, &owner).await {
                Ok(n) => {
                    deleted += 1;
                    rows += n.unwrap_or(0);
                }
                Err(e) => {
                    failed += 1;
                    console_error!("retention: deleting conversation {id}: {e}");
                }
            }
        }
    }
    console_log!(
        "{}",
        json!({
            "event": "retention", "level": "info", "retention_days": days,
            "conversations_deleted": deleted, "rows_deleted": rows, "failed": failed,
            "more_waiting": more, "duration_ms": now_ms() - started,
        })
    );
}
