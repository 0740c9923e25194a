//! One file per wire API. Each turns an [`LlmRequest`](super::LlmRequest) into one HTTP request
//! and the answer's bytes into [`LlmEvent`](super::LlmEvent)s.

pub mod anthropic;
pub mod gemini;
pub mod ollama;
pub mod openai;

#[cfg(test)]
mod handoff_tests;
#[cfg(test)]
pub(crate) mod testing;

pub use anthropic::Anthropic;
pub use gemini::Gemini;
pub use ollama::Ollama;
pub use openai::OpenAiChat;

/// Joins a base URL and a path without doubling or dropping the slash.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}
