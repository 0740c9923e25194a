//! `OTEL_*`: where each turn's trace is exported (OTLP over HTTP, JSON), which turns are traced,
//! and whether spans carry message content. Without an endpoint, nothing is traced.

use super::parse::{flag, url, Lookup};
use crate::edge::error::ApiError;
use crate::llm::error::decimal;

#[derive(Debug, Clone, PartialEq)]
pub struct TraceSettings {
    /// The traces URL: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as given, else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` after it.
    pub endpoint: String,
    /// `OTEL_EXPORTER_OTLP_HEADERS`: sent with each export (a collector's key).
    pub headers: Vec<(String, String)>,
    /// `OTEL_SAMPLE_RATE`: the share of turns traced (a caller's `traceparent` decides for its
    /// turns when it says).
    pub sample_rate: f64,
    /// `OTEL_CAPTURE_CONTENT`: message content on the spans, each piece within a bound.
    pub capture_content: bool,
    /// `OTEL_SERVICE_NAME`, the resource's `service.name`.
    pub service: String,
}

pub(super) fn traces(get: Lookup) -> Result<Option<TraceSettings>, ApiError> {
    let endpoint = match url(get, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")? {
        Some(endpoint) => endpoint,
        None => match url(get, "OTEL_EXPORTER_OTLP_ENDPOINT")? {
            Some(base) => format!("{}/v1/traces", base.trim_end_matches('/')),
            None => return Ok(None),
        },
    };
    let headers = match get("OTEL_EXPORTER_OTLP_HEADERS") {
        Some(raw) => crate::agent::trace::otlp::parse_headers(&raw)
            .map_err(|e| ApiError::config("OTEL_EXPORTER_OTLP_HEADERS", e))?,
        None => Vec::new(),
    };
    let sample_rate = match get("OTEL_SAMPLE_RATE") {
        None => 1.0,
        Some(raw) => decimal(&raw)
            .filter(|r| (0.0..=1.0).contains(r))
            .ok_or_else(|| {
                ApiError::config(
                    "OTEL_SAMPLE_RATE",
                    format!("`{raw}` is not a number from 0 to 1"),
                )
            })?,
    };
    Ok(Some(TraceSettings {
        endpoint,
        headers,
        sample_rate,
        capture_content: flag(get, "OTEL_CAPTURE_CONTENT")?,
        service: get("OTEL_SERVICE_NAME").unwrap_or_else(|| "edge-agent".into()),
    }))
}
