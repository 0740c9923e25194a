//! Per-user limits on message-sending requests (`POST /v1/chat`, `.../messages`, `.../retry`,
//! an MCP `tools/call`), on scheduled turns, and on writes that take D1 space (`POST /v1/conversations`, artifact `PUT`s), through the
//! Workers Rate Limiting binding. Reads are never counted.
//!
//! The platform takes the limit from the binding's declaration (`[[ratelimits]]` in
//! `wrangler.toml`, `simple = { limit = 30, period = 60 }`); `RATE_LIMIT_PER_MINUTE` states the
//! same figure for the error message and `0` turns the check off.

use worker::js_sys::{Function, Object, Promise, Reflect};
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
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
    if allowed(limiter.as_ref(), user)
        .await
        .map_err(limiter_error)?
    {
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

/// The binding's `limit({key})`, called as it is: workers-rs's `limit` goes through
/// serde_wasm_bindgen both ways, the only code that would compile it into the Worker.
async fn allowed(limiter: &JsValue, key: &str) -> Result<bool, JsValue> {
    let limit: Function = Reflect::get(limiter, &"limit".into())?.dyn_into()?;
    let options = Object::new();
    Reflect::set(&options, &"key".into(), &key.into())?;
    let promise: Promise = limit.call1(limiter, &options)?.dyn_into()?;
    let outcome = JsFuture::from(promise).await?;
    Ok(Reflect::get(&outcome, &"success".into())?.as_bool() == Some(true))
}

fn limiter_error(e: JsValue) -> ApiError {
    ApiError::Internal(format!("the rate limiter failed: {}", super::js_message(e)))
}
