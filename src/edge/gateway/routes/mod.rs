//! One module per resource; each handler is small: extract, call, answer.

pub mod agents;
pub mod artifacts;
pub mod chat;
pub mod chat_body;
pub mod client_tools;
pub mod conversations;
pub mod files;
pub mod health;
pub mod mcp;
pub mod me;
pub mod memory;
pub mod messages;
pub mod models;
pub mod openapi;
pub mod schedules;
pub mod usage;

/// The decoded `key=value` pairs of a request's query string.
///
/// Read from the raw URL rather than `Request::url()`, whose full WHATWG parser (with IDNA)
/// would be the only reason the `url` crate ships in the Worker.
/// The largest whole number a query parameter takes: JavaScript's largest exact integer.
pub const MAX_QUERY_INT: i64 = 9_007_199_254_740_991;

/// Query parameter `key` as a whole number from `min` to `max`, or a 400 saying so (the
/// OpenAPI document states the same bounds).
pub fn query_int(
    key: &str,
    value: &str,
    min: i64,
    max: i64,
) -> Result<i64, crate::edge::error::ApiError> {
    value
        .parse::<i64>()
        .ok()
        .filter(|n| {
            (min..=max).contains(n) && value.bytes().all(|b| b.is_ascii_digit() || b == b'-')
        })
        .ok_or_else(|| {
            crate::edge::error::ApiError::BadRequest(format!(
                "`{key}` must be a whole number from {min} to {max}, got `{value}`"
            ))
        })
}

pub fn query_pairs(req: &worker::Request) -> Vec<(String, String)> {
    let url = req.inner().url();
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

/// The request's `traceparent` when it is a valid W3C trace context (anything else is dropped,
/// as the specification asks): the turn it starts is traced as that span's child.
pub fn traceparent(req: &worker::Request) -> Option<String> {
    let value = req.headers().get("traceparent").ok().flatten()?;
    crate::agent::trace::TraceContext::parse(&value).map(|_| value.trim().to_string())
}

/// The caller's conversation `id` (a `/v1/chat` id resolves to theirs), or 404.
pub(crate) async fn owned(
    env: &worker::Env,
    user: &str,
    id: &str,
) -> Result<crate::edge::d1::Conversation, crate::edge::error::ApiError> {
    crate::edge::d1::Store::for_owner(env, user)
        .await?
        .conversation(user, id)
        .await?
        .ok_or_else(|| crate::edge::error::ApiError::conversation_not_found(id))
}
