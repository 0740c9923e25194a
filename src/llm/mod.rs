//! Layer 1: provider-agnostic LLM access.
//!
//! A provider turns an [`LlmRequest`] into one HTTP request and the response bytes into
//! [`LlmEvent`]s, finishing with a [`Completion`]. Everything a caller touches is in this
//! module's plain types; wire formats stay private to their provider file.

mod assembler;
pub mod attachment;
pub mod capabilities;
pub mod error;
pub mod event;
pub mod fields;
pub mod json;
pub mod model_ref;
pub mod models;
pub mod ndjson;
pub mod provider;
pub mod providers;
pub mod repair;
pub mod retry;
pub mod sse;
pub mod transform;
pub mod transport;
pub mod types;

pub use attachment::{Attachment, FileData, FileKind};
pub use error::LlmError;
pub use event::LlmEvent;
pub use model_ref::ModelRef;
pub use provider::{Completion, Provider};
pub use retry::{Resilient, RetryPolicy, Sleeper};
pub use transport::{
    idle_timeout, ApiRequest, ByteStream, HttpRequest, HttpResponse, HttpTransport, IDLE_TIMEOUT,
};
pub use types::{
    AnswerFormat, AssistantMessage, ContentBlock, LlmRequest, Message, StopReason, ToolCall,
    ToolDef, ToolResult, Usage,
};
