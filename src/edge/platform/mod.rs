//! The platform adapters: what the layers below need of the Workers runtime, and nothing of
//! the Worker's or the conversation object's own logic.
//!
//! - [`fetch`]: the `fetch` transport the providers and tools use, and response bodies read in
//!   large pieces (`bulk_read.js`)
//! - [`push_body`]: the response body the turn's stream is written into (`push_body.js`)
//! - [`ai`]: the Workers AI binding; [`vectors`]: Vectorize and embeddings, for recall
//! - [`files`]: the R2 bucket where attached files are kept
//! - [`rate_limit`]: the per-user limit on messages (and scheduled turns)
//! - [`providers`]: the provider factory (a model id to a configured provider, with fallbacks)
//! - [`clock`], [`timers`], [`ids`]: time, waits and randomness, ids
//! - [`microtasks`]: how the isolate wakes Rust futures (`microtasks.js`)

pub mod ai;
pub mod clock;
pub mod fetch;
pub mod files;
pub mod ids;
pub mod microtasks;
pub mod providers;
pub mod push_body;
pub mod rate_limit;
pub mod timers;
pub mod vectors;

use worker::js_sys::Reflect;
use worker::wasm_bindgen::JsValue;

/// What a JavaScript error says: its `message`, or the value itself.
pub(crate) fn js_message(e: JsValue) -> String {
    Reflect::get(&e, &JsValue::from_str("message"))
        .ok()
        .and_then(|m| m.as_string())
        .unwrap_or_else(|| format!("{e:?}"))
}
