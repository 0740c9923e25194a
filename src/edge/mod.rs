//! Layer 3: the Worker. The only layer that imports `worker`. Its folders follow the system:
//!
//! - [`gateway`]: the Worker's side of a request (the `fetch` entry, the route table, auth, CORS,
//!   the rate limit, body reading, `routes/`)
//! - [`protocol`]: what the Worker hands the conversation's object; imports neither side
//! - [`conversation`]: the conversation's Durable Object, its client, and the turn it runs
//! - [`spend`]: each user's spend object, which budgets hold against
//! - [`d1`]: the D1 queries, by table group
//! - [`platform`]: the runtime adapters (fetch, Workers AI, providers, clock, ids)
//! - [`config`], [`error`], [`budget`]: environment parsing; the one JSON error shape; budgets
//! - [`mcp`]: the deployment as an MCP server, its protocol's pure parts (the route is the
//!   gateway's)
//! - [`retention`]: the scheduled run that deletes idle conversations (`RETENTION_DAYS`);
//!   [`erasure`]: a user's data erased; [`sweep`]: files no message names removed
//!
//! Dependencies point one way: gateway → conversation → agent/llm; both sides → d1/platform.

pub mod budget;
pub mod config;
pub mod conversation;
pub mod d1;
pub mod erasure;
pub mod error;
pub mod gateway;
pub mod mcp;
pub mod platform;
pub mod protocol;
pub mod retention;
pub mod spend;
pub mod sweep;

pub use conversation::ConversationCoordinator;
pub use spend::UserSpend;

use std::future::Future;
use std::pin::Pin;

use worker::Response;

use error::ApiError;

/// A future (a route's handler, a rarely taken path) behind a `dyn Future`, so that its state
/// machine stays a function of its own instead of being inlined into its caller's: V8 compiles a
/// wasm function whole on its first call and again, optimised, once it is hot, and a route table
/// with every handler inlined would be one huge function compiled by every request.
pub(crate) fn out_of_line<'a, T>(
    handler: impl Future<Output = T> + 'a,
) -> Pin<Box<dyn Future<Output = T> + 'a>> {
    Box::pin(handler)
}

pub(crate) fn error_response(e: &ApiError, request_id: &str) -> worker::Result<Response> {
    let headers = worker::Headers::new();
    headers.set("content-type", "application/json")?;
    if let Some(seconds) = e.retry_after_s() {
        headers.set("retry-after", &seconds.to_string())?;
    }
    Ok(Response::ok(e.body(request_id))?
        .with_status(e.status())
        .with_headers(headers))
}

/// A JSON response with a status.
pub(crate) fn json_response(
    status: u16,
    body: &impl serde::Serialize,
) -> Result<Response, ApiError> {
    Ok(Response::from_json(body)?.with_status(status))
}
