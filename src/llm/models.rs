//! Model ids: `provider:model`, e.g. `anthropic:claude-sonnet-4-5`.

use std::fmt;

use super::LlmError;

/// Which provider and which of its models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRef {
    pub provider: String,
    pub model: String,
}

impl ModelRef {
    /// Parses `provider:model`. The model part may itself contain `:` (e.g. Ollama tags).
    pub fn parse(id: &str) -> Result<Self, LlmError> {
        match id.split_once(':') {
            Some((provider, model)) if !provider.is_empty() && !model.is_empty() => Ok(Self {
                provider: provider.to_string(),
                model: model.to_string(),
            }),
            _ => Err(LlmError::Config(format!(
                "model id `{id}` is not of the form provider:model (e.g. anthropic:claude-sonnet-4-5)"
            ))),
        }
    }
}

impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_provider_and_model_keeping_later_colons() {
        let m = ModelRef::parse("ollama:llama3.2:3b").unwrap();
        assert_eq!(
            (m.provider.as_str(), m.model.as_str()),
            ("ollama", "llama3.2:3b")
        );
        assert_eq!(m.to_string(), "ollama:llama3.2:3b");
        assert!(ModelRef::parse("gpt-4o").is_err());
        assert!(ModelRef::parse(":x").is_err());
        assert!(ModelRef::parse("openai:").is_err());
    }
}
