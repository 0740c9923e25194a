//! The scheduled run's sweep of files no message names: uploads whose conversation never took
//! them (a request cut off between storing its files and the conversation's answer, an R2 or
//! D1 failure while removing a refused message's) after an hour, and files a conversation took
//! that waited a month without being stored. Every stored file is recorded before its bytes
//! are written (`stored_files`), so nothing put in R2 escapes it. A bounded batch per D1
//! database and run; one log line per run.

use serde_json::json;
use worker::{console_error, console_log, Env};

use crate::edge::config::Config;
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::files::Files;

/// Files removed per run and database: one R2 request and two D1 queries.
pub const BATCH: u32 = 1_000;

/// One run over every database.
pub async fn run(env: &Env, config: &Config) {
    let Some(bucket) = Files::from_env(env) else {
        return;
    };
    let now = now_ms();
    let (mut removed, mut failed, mut more) = (0u64, 0u64, false);
    for binding in &config.d1_shards {
        match sweep(env, &bucket, binding, now).await {
            Ok(n) => {
                removed += n as u64;
                more |= n == BATCH as usize;
            }
            Err(e) => {
                failed += 1;
                console_error!("file sweep in {binding}: {e}");
            }
        }
    }
    if removed > 0 || failed > 0 {
        console_log!(
            "{}",
            json!({
                "event": "file_sweep", "level": "info", "files_removed": removed,
                "databases_failed": failed, "more_waiting": more,
            })
        );
    }
}

async fn sweep(env: &Env, bucket: &Files, binding: &str, now: i64) -> Result<usize, ApiError> {
    let store = Store::on(env, binding)?;
    let ids = store.orphaned_files(now, BATCH).await?;
    store.discard_files(bucket, &ids).await?;
    Ok(ids.len())
}
