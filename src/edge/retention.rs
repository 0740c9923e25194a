//! The Worker's scheduled run (the Cron Trigger in `wrangler.toml`): with `RETENTION_DAYS` set,
//! the conversations not updated for that long are deleted, history, artifacts, files and the
//! object's storage, exactly as `DELETE /v1/conversations/{id}` deletes one. The usage ledger
//! keeps its rows (spend is accounting; they hold no content). Each run takes a bounded batch,
//! oldest first, from every D1 database, so a backlog drains over several runs and a run that
//! stops early is resumed by the next; each run writes one summary line, and one line per
//! conversation it deleted.
//!
//! A conversation with a scheduled run still to come is kept however long it has been idle:
//! schedules live in its object, out of D1's sight, so the run asks the object
//! (`GET /schedules`) before deleting, and writes the earliest run to come into D1
//! (`conversations.retain_until`) so later runs pass over it until then, rather than asking
//! again every hour or filling each batch with conversations they keep. Nothing is written
//! when schedules are made or cancelled: a cancelled schedule keeps its conversation until the
//! time it would have run at most.
//!
//! Working memories not written for as long go too (what an agent kept of a user is content).
//!
//! The same run finishes any user erasure that did not end ([`crate::edge::erasure`]) and
//! sweeps files no message names ([`crate::edge::sweep`]).

use serde_json::json;
use worker::{console_error, console_log, event, Env, ScheduleContext, ScheduledEvent};

use crate::agent::calendar::DAY_MS;
use crate::agent::schedules::retain_until;
use crate::edge::config::Config;
use crate::edge::conversation::client::ConversationClient;
use crate::edge::conversation::deletion::delete_whole;
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;

/// Conversations deleted per run and database: each costs about six subrequests (the object
/// three times, D1 twice, R2), well within a scheduled run's limit.
pub const BATCH: u32 = 25;

/// How long a conversation retention could not decide on (its object did not answer, or a
/// scheduled run is under way) is left before it is asked again.
const RETRY_MS: i64 = 3_600_000;

#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    match Config::cached(&env) {
        Ok(config) => {
            run(&env, &config).await;
            crate::edge::erasure::resume(&env, &config).await;
            crate::edge::sweep::run(&env, &config).await;
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
    let (mut deleted, mut kept, mut rows, mut failed, mut more) = (0u64, 0u64, 0u64, 0u64, false);
    let mut memories = 0u64;
    for binding in &config.d1_shards {
        match Store::on(env, binding) {
            Ok(store) => match store.forget_memories_before(before).await {
                Ok(n) => memories += n,
                Err(e) => {
                    failed += 1;
                    console_error!("retention: deleting idle memories in {binding}: {e}");
                }
            },
            Err(e) => console_error!("retention: {binding}: {e}"),
        }
        let idle = match Store::on(env, binding) {
            Ok(store) => store
                .idle_since(before, started, BATCH)
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
        for (id, owner, updated_at) in idle {
            match scheduled_until(env, &id, started).await {
                Ok(Some(until)) => {
                    kept += 1;
                    // A run under way (`until` is now) is asked about again an hour on; the
                    // kept ones never fill the next run's batch.
                    let until = until.max(started + RETRY_MS);
                    if let Err(e) = store.retain_until(&id, until).await {
                        console_error!("retention: keeping conversation {id}: {e}");
                    }
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    // Not known to have no schedule: kept, asked again an hour on (not at the
                    // head of every batch, where the oldest would stall the rest).
                    failed += 1;
                    console_error!("retention: asking conversation {id} for its schedules: {e}");
                    if let Err(e) = store.retain_until(&id, started + RETRY_MS).await {
                        console_error!("retention: keeping conversation {id}: {e}");
                    }
                    continue;
                }
            }
            match delete_whole(env, &store, &id, &owner).await {
                Ok(n) => {
                    deleted += 1;
                    rows += n.unwrap_or(0);
                    console_log!(
                        "{}",
                        json!({
                            "event": "retention_deleted", "level": "info",
                            "conversation": id, "owner": owner, "updated_at": updated_at,
                        })
                    );
                }
                Err(e) => {
                    failed += 1;
                    console_error!("retention: deleting conversation {id}: {e}");
                    // Tried again an hour on, not at the head of every batch.
                    if let Err(e) = store.retain_until(&id, started + RETRY_MS).await {
                        console_error!("retention: keeping conversation {id}: {e}");
                    }
                }
            }
        }
    }
    console_log!(
        "{}",
        json!({
            "event": "retention", "level": "info", "retention_days": days,
            "conversations_deleted": deleted, "conversations_kept": kept,
            "rows_deleted": rows, "memories_deleted": memories, "failed": failed,
            "more_waiting": more, "duration_ms": now_ms() - started,
        })
    );
}

/// Whether conversation `id` has a scheduled run to come, asked of its object: keep it until
/// then ([`retain_until`]), or `None` when nothing will run and it may go.
async fn scheduled_until(env: &Env, id: &str, now: i64) -> Result<Option<i64>, ApiError> {
    let schedules = ConversationClient::for_conversation(env, id)?
        .list_schedules()
        .await?;
    Ok(retain_until(&schedules, now))
}
