//! The one streaming event union every provider produces.

use serde_json::Value;

use super::types::Usage;
use super::ModelRef;

/// One step of a streamed answer. `index` is the position of the content block in the final
/// [`AssistantMessage`](super::AssistantMessage), so a consumer can keep per-block state in a
/// `Vec` without hashing ids.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmEvent {
    TextStart {
        index: usize,
    },
    TextDelta {
        index: usize,
        delta: String,
    },
    TextEnd {
        index: usize,
    },
    ThinkingStart {
        index: usize,
    },
    ThinkingDelta {
        index: usize,
        delta: String,
    },
    ThinkingEnd {
        index: usize,
    },
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// A fragment of the arguments' JSON text, as the model writes it.
    ToolCallDelta {
        index: usize,
        delta: String,
    },
    /// The call is complete; `input` is the parsed arguments (see [`ToolCall::input`](super::ToolCall)).
    ToolCallEnd {
        index: usize,
        id: String,
        name: String,
        input: Value,
    },
    /// The provider's id for its answer (Anthropic's message id, OpenAI's completion id,
    /// Gemini's response id), once per call, for traces.
    ResponseId(String),
    /// Usage so far (providers report it cumulatively; this is the running total).
    Usage(Usage),
    /// The call failed retryably before answering and is sent again after `wait_ms`
    /// (`attempt` is the one about to start, from 2).
    Retry {
        attempt: u32,
        wait_ms: u64,
        reason: String,
    },
    /// The model failed before answering and the next in the fallback chain takes over.
    Fallback {
        from: ModelRef,
        to: ModelRef,
        reason: String,
    },
}
