//! `ApiError`: every failure the HTTP API reports, mapped to one JSON shape
//! `{"error": {"code", "message"}}` with a fitting status.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum ApiError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Unauthorized(String),
    /// A budget is spent (`402`, with when it resets).
    #[error("{0}")]
    PaymentRequired(String),
    /// Authenticated, but not allowed (an admin route without an admin key).
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    /// An idempotency key sent again with another body (`422`).
    #[error("{0}")]
    KeyReused(String),
    /// A limit per user or per conversation; the client may try again after `retry_after_s`.
    #[error("{message}")]
    TooManyRequests { message: String, retry_after_s: u32 },
    #[error("configuration error in {variable}: {message}")]
    Config { variable: String, message: String },
    /// A platform failure (D1, Durable Object, runtime). The detail is logged, not returned.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ApiError {
    /// The 404 of a conversation the caller does not have (or that does not exist).
    pub fn conversation_not_found(id: &str) -> ApiError {
        ApiError::NotFound(format!("conversation `{id}` does not exist"))
    }
}

impl ApiError {
    pub fn config(variable: &str, message: impl std::fmt::Display) -> Self {
        ApiError::Config {
            variable: variable.to_string(),
            message: message.to_string(),
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            ApiError::BadRequest(_) => 400,
            ApiError::Unauthorized(_) => 401,
            ApiError::PaymentRequired(_) => 402,
            ApiError::Forbidden(_) => 403,
            ApiError::NotFound(_) => 404,
            ApiError::MethodNotAllowed(_) => 405,
            ApiError::Conflict(_) => 409,
            ApiError::PayloadTooLarge(_) => 413,
            ApiError::KeyReused(_) => 422,
            ApiError::TooManyRequests { .. } => 429,
            ApiError::Config { .. } | ApiError::Internal(_) => 500,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::PaymentRequired(_) => "budget_exceeded",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::KeyReused(_) => "idempotency_key_reused",
            ApiError::TooManyRequests { .. } => "rate_limited",
            ApiError::Config { .. } => "configuration_error",
            ApiError::Internal(_) => "internal_error",
        }
    }

    /// The message a client sees: configuration values and platform details stay in the log,
    /// which the request id finds.
    pub fn public_message(&self, request_id: &str) -> String {
        match self {
            ApiError::Internal(_) => {
                format!("internal error; the server log has the details (request {request_id})")
            }
            ApiError::Config { variable, .. } => format!(
                "the server is misconfigured: {variable} is not valid; the server log has the \
                 details (request {request_id})"
            ),
            other => other.to_string(),
        }
    }

    /// The JSON body.
    pub fn body(&self, request_id: &str) -> String {
        serde_json::json!({"error": {"code": self.code(), "message": self.public_message(request_id)}})
            .to_string()
    }

    /// Seconds a client should wait before trying again (`Retry-After`), for a 429.
    pub fn retry_after_s(&self) -> Option<u32> {
        match self {
            ApiError::TooManyRequests { retry_after_s, .. } => Some(*retry_after_s),
            _ => None,
        }
    }

    /// The structured log line for this error: the full detail, never shown to the client.
    pub fn log_line(&self, request_id: &str, method: &str, path: &str) -> String {
        serde_json::json!({
            "event": "error",
            "level": if self.status() >= 500 { "error" } else { "warn" },
            "request_id": request_id,
            "method": method,
            "path": path,
            "status": self.status(),
            "code": self.code(),
            "detail": self.to_string(),
        })
        .to_string()
    }
}

impl From<worker::Error> for ApiError {
    fn from(e: worker::Error) -> Self {
        ApiError::Internal(e.to_string())
    }
}

impl From<serde_json::Error> for ApiError {
    fn from(e: serde_json::Error) -> Self {
        ApiError::Internal(format!("JSON: {e}"))
    }
}
