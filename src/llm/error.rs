//! Errors of Layer 1, each knowing whether trying again can help and, where the provider said
//! so, how long to wait.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Error)]
pub enum LlmError {
    /// HTTP 429, or a `rate_limit_error` mid-stream.
    #[error("{provider} rate-limited the request: {message}")]
    RateLimited {
        provider: String,
        message: String,
        retry_after_ms: Option<u64>,
    },
    /// HTTP 529/503, or an `overloaded_error` mid-stream.
    #[error("{provider} is overloaded: {message}")]
    Overloaded {
        provider: String,
        message: String,
        retry_after_ms: Option<u64>,
    },
    /// Any other 5xx, or a server-side error reported mid-stream.
    #[error("{provider} had a server error{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    Server {
        provider: String,
        status: Option<u16>,
        message: String,
    },
    /// The request never got an answer (DNS, refused, reset, dropped mid-stream).
    #[error("could not reach {provider}: {message}")]
    Network { provider: String, message: String },
    /// HTTP 408/504, or our own deadline.
    #[error("{provider} did not answer in time: {message}")]
    Timeout { provider: String, message: String },
    /// The provider rejected the request as malformed (4xx not covered below).
    #[error("{provider} rejected the request (HTTP {status}): {message}")]
    BadRequest {
        provider: String,
        status: u16,
        message: String,
    },
    /// HTTP 401/403: a missing, wrong or unauthorised key.
    #[error("{provider} refused the credentials (HTTP {status}): {message}; check the API key")]
    Auth {
        provider: String,
        status: u16,
        message: String,
    },
    /// The prompt does not fit the model's context window.
    #[error("the conversation is too long for {provider}: {message}")]
    ContextLengthExceeded { provider: String, message: String },
    /// The provider refused the content (safety filters).
    #[error("{provider} filtered the content: {message}")]
    ContentFiltered { provider: String, message: String },
    /// The stream carried something that is not the provider's format.
    #[error("could not decode the {provider} stream: {message}")]
    Decode { provider: String, message: String },
    /// The connection closed before the provider said the answer was complete.
    #[error("the {provider} stream ended before the answer was complete")]
    Truncated { provider: String },
    /// The provider or model is not usable as configured.
    #[error("{0}")]
    Config(String),
    /// The user's budget is spent and no cheaper model may answer instead.
    #[error("{0}")]
    BudgetExceeded(String),
}

impl LlmError {
    /// Whether the same request may succeed if sent again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            LlmError::RateLimited { .. }
                | LlmError::Overloaded { .. }
                | LlmError::Server { .. }
                | LlmError::Network { .. }
                | LlmError::Timeout { .. }
                | LlmError::Truncated { .. }
        )
    }

    /// A stable snake_case name for the kind, for logs and API error codes.
    pub fn kind(&self) -> &'static str {
        match self {
            LlmError::RateLimited { .. } => "rate_limited",
            LlmError::Overloaded { .. } => "overloaded",
            LlmError::Server { .. } => "server_error",
            LlmError::Network { .. } => "network",
            LlmError::Timeout { .. } => "timeout",
            LlmError::BadRequest { .. } => "bad_request",
            LlmError::Auth { .. } => "auth",
            LlmError::ContextLengthExceeded { .. } => "context_length_exceeded",
            LlmError::ContentFiltered { .. } => "content_filtered",
            LlmError::Decode { .. } => "decode",
            LlmError::Truncated { .. } => "truncated",
            LlmError::Config(_) => "config",
            LlmError::BudgetExceeded(_) => "budget_exceeded",
        }
    }

    /// What an end user may be told: the kind of failure and the provider's name, never the
    /// provider's error body, an upstream URL or a configuration value (those go to the log).
    pub fn public_message(&self) -> String {
        match self {
            LlmError::RateLimited { provider, .. } => {
                format!("{provider} is rate-limiting requests; try again shortly")
            }
            LlmError::Overloaded { provider, .. } => {
                format!("{provider} is overloaded; try again shortly")
            }
            LlmError::Server { provider, .. } => format!("{provider} had a server error"),
            LlmError::Network { provider, .. } => format!("could not reach {provider}"),
            LlmError::Timeout { provider, .. } => format!("{provider} did not answer in time"),
            LlmError::BadRequest { provider, .. } => format!("{provider} rejected the request"),
            LlmError::Auth { provider, .. } => format!(
                "{provider} refused the server's credentials; the operator should check the API key"
            ),
            LlmError::ContextLengthExceeded { provider, .. } => {
                format!("the conversation is too long for {provider}'s model")
            }
            LlmError::ContentFiltered { provider, .. } => {
                format!("{provider} filtered the content")
            }
            LlmError::Decode { provider, .. } => {
                format!("{provider} sent an answer that could not be read")
            }
            LlmError::Truncated { provider } => {
                format!("the {provider} stream ended before the answer was complete")
            }
            LlmError::Config(_) => "the model is not usable as configured".to_string(),
            LlmError::BudgetExceeded(message) => message.clone(),
        }
    }

    /// How long to wait before retrying, when the provider said so.
    pub fn retry_after_ms(&self) -> Option<u64> {
        match self {
            LlmError::RateLimited { retry_after_ms, .. }
            | LlmError::Overloaded { retry_after_ms, .. } => *retry_after_ms,
            _ => None,
        }
    }

    /// Classifies a non-2xx answer from its status and the provider's message.
    pub fn from_http(
        provider: &str,
        status: u16,
        message: String,
        retry_after_ms: Option<u64>,
    ) -> Self {
        let provider = provider.to_string();
        let lower = message.to_ascii_lowercase();
        match status {
            429 => LlmError::RateLimited {
                provider,
                message,
                retry_after_ms,
            },
            503 | 529 => LlmError::Overloaded {
                provider,
                message,
                retry_after_ms,
            },
            408 | 504 => LlmError::Timeout { provider, message },
            500..=599 => LlmError::Server {
                provider,
                status: Some(status),
                message,
            },
            401 | 403 => LlmError::Auth {
                provider,
                status,
                message,
            },
            _ if mentions_context_length(&lower) => {
                LlmError::ContextLengthExceeded { provider, message }
            }
            _ if mentions_content_filter(&lower) => LlmError::ContentFiltered { provider, message },
            _ => LlmError::BadRequest {
                provider,
                status,
                message,
            },
        }
    }

    /// Classifies an error the provider reported inside a stream, by its type name.
    pub fn from_stream(provider: &str, kind: &str, message: String) -> Self {
        let provider = provider.to_string();
        let lower = message.to_ascii_lowercase();
        match kind {
            "overloaded_error" | "overloaded" => LlmError::Overloaded {
                provider,
                message,
                retry_after_ms: None,
            },
            "rate_limit_error" | "rate_limit_exceeded" | "RESOURCE_EXHAUSTED" => {
                LlmError::RateLimited {
                    provider,
                    message,
                    retry_after_ms: None,
                }
            }
            "authentication_error" | "permission_error" => LlmError::Auth {
                provider,
                status: 401,
                message,
            },
            _ if mentions_context_length(&lower) => {
                LlmError::ContextLengthExceeded { provider, message }
            }
            "invalid_request_error" | "INVALID_ARGUMENT" => LlmError::BadRequest {
                provider,
                status: 400,
                message,
            },
            _ => LlmError::Server {
                provider,
                status: None,
                message,
            },
        }
    }
}

fn mentions_context_length(lower: &str) -> bool {
    [
        "context length",
        "context_length",
        "context window",
        "prompt is too long",
        "too many tokens",
        "maximum context",
        "input is too long",
        "exceeds the maximum number of tokens",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

fn mentions_content_filter(lower: &str) -> bool {
    [
        "content_filter",
        "content filter",
        "content management policy",
        "safety",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

/// The wait a provider asked for, from (in order) `retry-after-ms`, `retry-after` (seconds),
/// OpenAI's `x-ratelimit-reset-requests` / `-tokens` (durations such as `1s`, `6m0s`, `20ms`),
/// and Anthropic's `anthropic-ratelimit-*-reset` (RFC 3339 instants). `header` looks a header
/// up by lower-case name.
pub fn retry_after_ms<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Option<u64> {
    let now_ms = web_time::SystemTime::now()
        .duration_since(web_time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    retry_after_ms_at(header, now_ms)
}

fn retry_after_ms_at<'a>(header: impl Fn(&str) -> Option<&'a str>, now_ms: i64) -> Option<u64> {
    if let Some(ms) = header("retry-after-ms").and_then(decimal) {
        return Some(ms.max(0.0) as u64);
    }
    if let Some(s) = header("retry-after").and_then(decimal) {
        return Some((s.max(0.0) * 1000.0) as u64);
    }
    let openai = ["x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"]
        .iter()
        .filter_map(|name| header(name).and_then(parse_duration_ms))
        .max();
    if openai.is_some() {
        return openai;
    }
    [
        "anthropic-ratelimit-requests-reset",
        "anthropic-ratelimit-tokens-reset",
        "anthropic-ratelimit-input-tokens-reset",
        "anthropic-ratelimit-output-tokens-reset",
    ]
    .iter()
    .filter_map(|name| header(name).and_then(parse_rfc3339_ms))
    .map(|at| at.saturating_sub(now_ms).max(0) as u64)
    .max()
}

/// `2026-11-21T06:10:05Z` or with fractional seconds / an offset → ms since the epoch.
fn parse_rfc3339_ms(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date, rest) = text.split_once(['T', 't', ' '])?;
    let mut ymd = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let zone_at = rest.find(['Z', 'z', '+', '-']).unwrap_or(rest.len());
    let (time, zone) = rest.split_at(zone_at);
    let mut hms = time.splitn(3, ':');
    let h: i64 = hms.next()?.parse().ok()?;
    let min: i64 = hms.next()?.parse().ok()?;
    let sec = decimal(hms.next()?)?;
    let offset_min = match zone.chars().next() {
        None | Some('Z' | 'z') => 0,
        Some(sign) => {
            let (oh, om) = zone[1..].split_once(':')?;
            let minutes = oh.parse::<i64>().ok()? * 60 + om.parse::<i64>().ok()?;
            if sign == '-' {
                -minutes
            } else {
                minutes
            }
        }
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + min * 60 - offset_min * 60;
    Some(secs * 1000 + (sec * 1000.0).round() as i64)
}

/// `12`, `0.5`, `05.250`, `7.` (surrounding spaces allowed): the plain decimals that headers and
/// settings carry. Not `str::parse::<f64>`: `core`'s float parser (exponents, `inf`, correct
/// rounding of any length) costs 16 KB of wasm for numbers these never hold. Exact for up to 15
/// digits after the point.
pub fn decimal(text: &str) -> Option<f64> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = whole.len() + fraction.len();
    if digits == 0
        || digits > 30
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let value = |s: &str| s.bytes().fold(0.0, |n, b| n * 10.0 + f64::from(b - b'0'));
    Some(value(whole) + value(fraction) / 10f64.powi(fraction.len() as i32))
}

/// `1h2m3.5s`, `6m0s`, `20ms`, `0.5s` → milliseconds.
fn parse_duration_ms(text: &str) -> Option<u64> {
    let mut total = 0.0;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value = decimal(&rest[..digits])?;
        rest = &rest[digits..];
        let (factor, unit_len) = if rest.starts_with("ms") {
            (1.0, 2)
        } else if rest.starts_with('h') {
            (3_600_000.0, 1)
        } else if rest.starts_with('m') {
            (60_000.0, 1)
        } else if rest.starts_with('s') {
            (1000.0, 1)
        } else {
            return None;
        };
        total += value * factor;
        rest = &rest[unit_len..];
    }
    Some(total as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_statuses_map_to_kinds_and_retryability() {
        let kinds: Vec<(u16, &str, bool)> = [
            (429, "slow down"),
            (529, "Overloaded"),
            (503, "unavailable"),
            (500, "oops"),
            (504, "gateway timeout"),
            (401, "invalid x-api-key"),
            (400, "prompt is too long: 210000 tokens > 200000 maximum"),
            (400, "This model's maximum context length is 128000 tokens"),
            (400, "The response was filtered due to the prompt triggering Azure OpenAI's content management policy"),
            (400, "messages: roles must alternate"),
            (404, "model not found"),
        ]
        .into_iter()
        .map(|(status, message)| {
            let e = LlmError::from_http("p", status, message.to_string(), None);
            (status, e.kind(), e.is_retryable())
        })
        .collect();
        assert_eq!(
            kinds,
            [
                (429, "rate_limited", true),
                (529, "overloaded", true),
                (503, "overloaded", true),
                (500, "server_error", true),
                (504, "timeout", true),
                (401, "auth", false),
                (400, "context_length_exceeded", false),
                (400, "context_length_exceeded", false),
                (400, "content_filtered", false),
                (400, "bad_request", false),
                (404, "bad_request", false),
            ]
        );
    }

    #[test]
    fn mid_stream_kinds() {
        let overloaded =
            LlmError::from_stream("anthropic", "overloaded_error", "Overloaded".into());
        assert!(matches!(overloaded, LlmError::Overloaded { .. }));
        assert!(overloaded.is_retryable());
        assert!(
            !LlmError::from_stream("openai", "invalid_request_error", "bad".into()).is_retryable()
        );
        assert!(LlmError::from_stream("openai", "server_error", "x".into()).is_retryable());
    }

    #[test]
    fn wait_hints_from_headers() {
        let from = |pairs: &'static [(&'static str, &'static str)]| {
            retry_after_ms(|name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| *v))
        };
        assert_eq!(from(&[("retry-after", "7")]), Some(7000));
        assert_eq!(
            from(&[("retry-after-ms", "250"), ("retry-after", "7")]),
            Some(250)
        );
        assert_eq!(
            from(&[
                ("x-ratelimit-reset-requests", "6m0s"),
                ("x-ratelimit-reset-tokens", "20ms")
            ]),
            Some(360_000)
        );
        assert_eq!(from(&[("x-ratelimit-reset-tokens", "1.5s")]), Some(1500));
        assert_eq!(
            from(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
            None
        );
        assert_eq!(from(&[]), None);
    }

    #[test]
    fn decimals_as_headers_and_settings_write_them() {
        assert_eq!(decimal("7"), Some(7.0));
        assert_eq!(decimal(" 0.8 "), Some(0.8));
        assert_eq!(decimal("05.250"), Some(5.25));
        assert_eq!(decimal(".5"), Some(0.5));
        assert_eq!(decimal("12."), Some(12.0));
        assert_eq!(decimal("0.1"), Some(0.1));
        for bad in ["", ".", "-1", "1e3", "inf", "NaN", "1.2.3", "1,5", "+2"] {
            assert_eq!(decimal(bad), None, "{bad}");
        }
        // An instant with fractional seconds: Anthropic's reset headers.
        assert_eq!(
            retry_after_ms_at(
                |name| (name == "anthropic-ratelimit-tokens-reset")
                    .then_some("2026-11-21T06:10:05.250Z"),
                parse_rfc3339_ms("2026-11-21T06:10:00Z").unwrap_or_default(),
            ),
            Some(5250)
        );
    }
}
