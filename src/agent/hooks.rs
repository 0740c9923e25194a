//! Hooks: how the application takes part in a turn without the runtime knowing its types.
//!
//! Failure rules (docs/design.md):
//! - `on_step_end` failing aborts the turn with an error event;
//! - `on_message` failing is reported through `warn` and the loop goes on (the message is in the
//!   state already);
//! - `on_error` failing is ignored, so it never hides the original error.

use async_trait::async_trait;
use thiserror::Error;

use crate::llm::Usage;

#[derive(Debug, Clone, PartialEq, Error)]
#[error("{0}")]
pub struct HookError(pub String);

/// What `on_step_end` learns about the LLM call that just ended.
#[derive(Debug, Clone, Copy)]
pub struct StepEndInfo<'a> {
    pub step: u32,
    pub usage: &'a Usage,
    pub model: &'a str,
    pub provider: &'a str,
}

#[async_trait(?Send)]
pub trait TurnHooks {
    /// After each LLM answer is stored, before its tools run. `Ok(false)` ends the turn.
    async fn on_step_end(&self, _info: StepEndInfo<'_>) -> Result<bool, HookError> {
        Ok(true)
    }

    /// Each message the loop adds to the history (answers, tool results, injected messages).
    async fn on_message(&self, _message: &super::AgentMessage) -> Result<(), HookError> {
        Ok(())
    }

    /// The history was compacted: `compaction.replaces` (indices into the history before the
    /// change) became `compaction.summary`. Persistence mirrors it here; failing is logged, like
    /// `on_message`.
    async fn on_compaction(&self, _compaction: &super::Compaction) -> Result<(), HookError> {
        Ok(())
    }

    /// A call was paid for that leaves no answer in the history: compaction's summary request
    /// (whether or not it succeeded), an attempt a retry gave up on, an answer that showed
    /// nothing. `model` answered and used `usage`; the ledger records it here.
    async fn on_unstored_call(
        &self,
        _model: &crate::llm::ModelRef,
        _usage: &crate::llm::Usage,
    ) -> Result<(), HookError> {
        Ok(())
    }

    /// The system prompt for the next LLM call, rebuilt before every call (it may
    /// carry state that tools change, such as an index of artifacts). `None` keeps the
    /// conversation's own prompt (`base`) as it is.
    async fn system_prompt(&self, _base: Option<&str>) -> Option<String> {
        None
    }

    /// An LLM or provider-resolution failure.
    async fn on_error(&self, _error: &str, _is_retryable: bool) -> Result<(), HookError> {
        Ok(())
    }

    /// A failure the loop swallowed by rule (e.g. `on_message`), for the application's log.
    fn warn(&self, _message: &str) {}
}

/// Hooks that do nothing.
pub struct NoHooks;

impl TurnHooks for NoHooks {}
