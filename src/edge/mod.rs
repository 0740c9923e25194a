//! Layer 3: the Worker. The only layer that imports `worker`.
//!
//! - `mod.rs`: the `fetch` entry and the one route table
//! - [`routes`]: one handler per endpoint
//! - `store`: all D1 SQL
//! - `conversation`: the conversation Durable Object: runs the turns, queues what arrives
//!   meanwhile, keeps the running turn's stream, recovers interrupted turns
//! - `coordinator`: the Worker's typed client for it, and what they exchange
//! - `turn`: one turn inside the object (preparation, hooks, inbox, stream)
//! - [`ui_stream`]: agent events → AI SDK UI message stream (pure, natively tested)
//! - `fetch`, `ai`: the `fetch` transport and the Workers AI binding Layer 1 uses
//! - [`config`], [`error`]: environment parsing; the one JSON error shape

pub mod budget;
pub mod config;
pub mod conversation;
pub mod d1;
pub mod error;
pub mod gateway;
pub mod platform;
pub mod protocol;
pub mod spend;

pub use conversation::ConversationCoordinator;
pub use spend::UserSpend;

use std::future::Future;
use std::pin::Pin;

use worker::Response;

use error::ApiError;

/// A handler's future behind a `dyn Future`, so that its state machine stays a function of its
/// own instead of being inlined into its caller's: V8 compiles a wasm function whole on its
/// first call and again, optimised, once it is hot, and `route` with every handler inside it
/// was the largest function in the Worker (48 KB of wasm), compiled by every request.
pub(crate) fn own<'a, T>(
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
