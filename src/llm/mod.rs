//! Layer 1: provider-agnostic LLM access.
//!
//! A provider turns an [`LlmRequest`] into one HTTP request and the response bytes into
//! [`LlmEvent`]s, finishing with a [`Completion`]. Everything a caller touches is in this
//! module's plain types; wire formats stay private to their provider file.

pub mod error;
pub mod event;
pub mod models;
pub mod ndjson;
mod partial;
pub mod provider;
pub mod providers;
pub mod repair;
pub mod retry;
pub mod sse;
pub mod transform;
pub mod transport;
pub mod types;

pub use error::LlmError;
pub use event::LlmEvent;
pub use models::ModelRef;
pub use provider::{Completion, Provider};
pub use retry::{Resilient, RetryPolicy, Sleeper};
pub use transport::{
    idle_timeout, ApiRequest, ByteStream, HttpRequest, HttpResponse, HttpTransport, IDLE_TIMEOUT,
};
pub use types::{
    AssistantMessage, ContentBlock, LlmRequest, Message, StopReason, ToolCall, ToolDef, ToolResult,
    Usage,
};

/// `serde_json::from_value` through text. The wasm then carries one JSON reader (text's)
/// instead of two; what goes through here is small and rare (tool arguments, configuration
/// entries), so printing it again costs nothing that matters. The error leaves out the line
/// and column, which would point into the reprinted text rather than anything the user wrote.
pub fn from_value<T: serde::de::DeserializeOwned>(value: &serde_json::Value) -> Result<T, String> {
    serde_json::from_str(&value.to_string()).map_err(|e| {
        let message = e.to_string();
        let position = format!(" at line {} column {}", e.line(), e.column());
        match message.strip_suffix(&position) {
            Some(bare) => bare.to_string(),
            None => message,
        }
    })
}

#[cfg(test)]
mod tests {
    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Entry {
        name: String,
    }

    #[test]
    fn from_value_errors_say_what_is_wrong_without_a_position() {
        let e = super::from_value::<Entry>(&serde_json::json!({"nmae": "x"})).unwrap_err();
        assert_eq!(e, "missing field `name`");
        let e = super::from_value::<Entry>(&serde_json::json!({"name": 3})).unwrap_err();
        assert_eq!(e, "invalid type: integer `3`, expected a string");
    }
}
