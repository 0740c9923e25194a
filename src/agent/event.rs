//! What a turn reports while it runs. Borrowed, so streaming an event copies nothing.

use serde_json::Value;

use super::AgentMessage;
use crate::llm::{AssistantMessage, LlmEvent, ModelRef, ToolCall, Usage};

#[derive(Debug, Clone, PartialEq)]
pub enum AgentEvent<'a> {
    /// An LLM call, a step, starts (`step` counts them within this run, from 1).
    StepStart { step: u32, model: &'a ModelRef },
    /// A streamed piece of the answer, passed through as it arrives.
    Llm(&'a LlmEvent),
    /// The LLM call ended and its answer is stored.
    StepEnd {
        step: u32,
        message: &'a AssistantMessage,
    },
    /// A server tool ran (or failed, or was unknown: `is_error`).
    ToolExecution {
        call: &'a ToolCall,
        output: &'a Value,
        is_error: bool,
        duration_ms: u64,
    },
    /// The model called tools the client runs; the turn pauses until their results arrive.
    ClientToolRequest { calls: &'a [ToolCall] },
    /// The model called tools that need a person's approval; the turn pauses for decisions.
    ApprovalRequest { calls: &'a [ToolCall] },
    /// A person denied a call; it did not run and the model is told so.
    ToolDenied {
        call: &'a ToolCall,
        reason: Option<&'a str>,
    },
    /// Messages sent during the turn were injected; `skipped` tool calls were not run.
    Steering {
        skipped: &'a [ToolCall],
        messages: &'a [AgentMessage],
    },
    /// Old exchanges were summarised before the step's call (a summary call, `duration_ms`
    /// long, ended just now).
    Compacted { duration_ms: u64 },
    /// A different model answers from now on.
    ProviderSwitch {
        from: &'a ModelRef,
        to: &'a ModelRef,
    },
    /// A typed answer's state (`agent::output::answer`): forming, then complete or failed.
    Output(&'a Value),
    /// An element of an `array` typed answer, whole and valid, `index` its place.
    OutputElement { index: usize, value: &'a Value },
    /// The turn ended normally.
    Done {
        final_text: &'a str,
        total_steps: u32,
        total_usage: Usage,
    },
    /// The turn ended on an error: `message` has the detail (for logs), `public` what an end
    /// user may be shown (no provider bodies, URLs or configuration values).
    Error {
        message: String,
        public: String,
        is_retryable: bool,
    },
}
