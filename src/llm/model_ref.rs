//! A model's id: which provider and which of its models (`provider:model`, e.g.
//! `anthropic:claude-sonnet-4-5`), checked before it reaches a provider's URL.

use std::fmt;

use super::LlmError;

/// Which provider and which of its models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRef {
    pub provider: String,
    pub model: String,
}

/// The longest model id accepted, provider included.
pub const MAX_MODEL_ID: usize = 128;

impl ModelRef {
    /// Parses `provider:model`. The model part may itself contain `:` (e.g. Ollama tags).
    ///
    /// Ids are checked before they reach a provider's URL (Gemini puts the model in its path):
    /// the provider is lowercase letters, digits and `-`; the model letters, digits and
    /// `. _ - : @`, plus `/` for Workers AI's `@cf/vendor/model`; never `..`; at most
    /// [`MAX_MODEL_ID`] characters in all.
    pub fn parse(id: &str) -> Result<Self, LlmError> {
        let Some((provider, model)) = id
            .split_once(':')
            .filter(|(p, m)| !p.is_empty() && !m.is_empty())
        else {
            return Err(LlmError::Config(format!(
                "model id `{}` is not of the form provider:model (e.g. anthropic:claude-sonnet-4-5)",
                shown(id)
            )));
        };
        let slash = provider == "workers-ai";
        let bad = id.len() > MAX_MODEL_ID
            || model.contains("..")
            || !provider
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            || !model.bytes().all(|b| {
                b.is_ascii_alphanumeric()
                    || matches!(b, b'.' | b'_' | b'-' | b':' | b'@')
                    || (slash && b == b'/')
            });
        if bad {
            return Err(LlmError::Config(format!(
                "model id `{}` is not valid: at most {MAX_MODEL_ID} characters, the provider in \
                 lowercase letters, digits and `-`, the model in letters, digits and `._-:@` \
                 (and `/` for workers-ai), never `..`",
                shown(id)
            )));
        }
        Ok(Self {
            provider: provider.to_string(),
            model: model.to_string(),
        })
    }
}

/// An id as an error message shows it: cut short, so a hostile one cannot fill a response.
fn shown(id: &str) -> &str {
    match id.char_indices().nth(MAX_MODEL_ID) {
        Some((end, _)) => &id[..end],
        None => id,
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}
