//! Errors of Layer 1, each knowing whether trying again can help.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum LlmError {
    /// The provider answered with a non-success HTTP status.
    #[error("{provider} answered HTTP {status}: {message}")]
    Http {
        provider: String,
        status: u16,
        message: String,
        /// How long the provider asked us to wait, from `retry-after` / `retry-after-ms`.
        retry_after_ms: Option<u64>,
    },
    /// The request never got an answer (DNS, connection refused, reset).
    #[error("could not reach {provider}: {message}")]
    Network { provider: String, message: String },
    /// The provider sent an error inside an otherwise successful stream.
    #[error("{provider} reported {kind} mid-stream: {message}")]
    Stream {
        provider: String,
        kind: String,
        message: String,
    },
    /// The stream carried something that is not the provider's format.
    #[error("could not decode the {provider} stream: {message}")]
    Decode { provider: String, message: String },
    /// The connection closed before the provider said the answer was complete.
    #[error("the {provider} stream ended before the answer was complete")]
    Truncated { provider: String },
    /// The provider or model is not usable as configured.
    #[error("{0}")]
    Config(String),
}

impl LlmError {
    /// Whether the same request may succeed if sent again.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmError::Http { status, .. } => {
                matches!(status, 408 | 409 | 429 | 500..=599)
            }
            LlmError::Network { .. } | LlmError::Truncated { .. } => true,
            LlmError::Stream { kind, .. } => matches!(
                kind.as_str(),
                "overloaded_error" | "api_error" | "rate_limit_error" | "server_error"
            ),
            LlmError::Decode { .. } | LlmError::Config(_) => false,
        }
    }

    /// How long to wait before retrying, when the provider said so.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            LlmError::Http { retry_after_ms, .. } => *retry_after_ms,
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16) -> LlmError {
        LlmError::Http {
            provider: "p".into(),
            status,
            message: String::new(),
            retry_after_ms: None,
        }
    }

    #[test]
    fn rate_limits_overload_and_server_errors_are_retryable() {
        for status in [429, 500, 502, 503, 529] {
            assert!(http(status).is_retryable(), "{status}");
        }
        for status in [400, 401, 403, 404, 413] {
            assert!(!http(status).is_retryable(), "{status}");
        }
        let overloaded = LlmError::Stream {
            provider: "anthropic".into(),
            kind: "overloaded_error".into(),
            message: "Overloaded".into(),
        };
        assert!(overloaded.is_retryable());
        assert!(!LlmError::Config("x".into()).is_retryable());
    }
}
