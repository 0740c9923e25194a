//! Per-user limits on message-sending requests (`POST /v1/chat`, `.../messages`, `.../retry`),
//! on scheduled turns, and on writes that take D1 space (`POST /v1/conversations`, artifact `PUT`s), through the
//! Workers Rate Limiting binding. Reads are never counted.
//!
//! The platform takes the limit from the binding's declaration (`[[ratelimits]]` in
//! `wrangler.toml`, `simple = { limit = 30, period = 60 }`); `RATE_LIMIT_PER_MINUTE` states the
//! same figure for the error message and `0` turns the check off.

use worker::Env;

use crate::edge::config::Config;
use crate::edge::error::ApiError;

pub const BINDING: &str = "MESSAGE_RATE_LIMITER";

/// The binding's period: a refused caller may try again after it.
const PERIOD_S: u32 = 60;

/// `Err(429)` when `user` has sent their share of messages this minute.
pub async fn check(env: &Env, config: &Config, user: &str) -> Result<(), ApiError> {
    if config.rate_limit_per_minute == 0 {
        return Ok(());
    }
    let limiter = env.rate_limiter(BINDING).map_err(|_| {
        ApiError::config(
            "RATE_LIMIT_PER_MINUTE",
            format!(
                "the rate limit is on but the Worker has no `{BINDING}` binding ([[ratelimits]] \
                 in wrangler.toml); declare it or set RATE_LIMIT_PER_MINUTE=0"
            ),
        )
    })?;
    let outcome = limiter.limit(user.to_string()).await?;
    if outcome.success {
        return Ok(());
    }
    Err(ApiError::TooManyRequests {
        message: format!(
            "too many requests: each user may send {} a minute (messages, new conversations and \
             artifact edits together); try again in {PERIOD_S} s",
            config.rate_limit_per_minute
        ),
        retry_after_s: PERIOD_S,
    })
}
