//! A turn's spans as one OTLP/HTTP JSON export request (`ExportTraceServiceRequest`, as the
//! protobuf JSON mapping writes it: ids in hex, times as decimal strings of nanoseconds, 64-bit
//! integers as strings), and `OTEL_EXPORTER_OTLP_HEADERS` read. Pure code, tested natively.

use serde_json::{json, Value};

use super::{Attr, Span, SpanKind};

/// The instrumentation scope the spans are of.
pub const SCOPE: &str = "edge-agent";

/// The export request's body for `spans` of trace `trace_id`, from service `service`.
pub fn export_body(service: &str, trace_id: &str, spans: &[Span]) -> String {
    let spans: Vec<Value> = spans.iter().map(|span| span_json(trace_id, span)).collect();
    json!({"resourceSpans": [{
        "resource": {"attributes": [attribute("service.name", &Attr::Str(service.to_string()))]},
        "scopeSpans": [{
            "scope": {"name": SCOPE, "version": env!("CARGO_PKG_VERSION")},
            "spans": spans,
        }],
    }]})
    .to_string()
}

fn span_json(trace_id: &str, span: &Span) -> Value {
    let mut out = json!({
        "traceId": trace_id,
        "spanId": span.id,
        "name": span.name,
        // SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT.
        "kind": match span.kind { SpanKind::Internal => 1, SpanKind::Client => 3 },
        "startTimeUnixNano": nanos(span.start_ms),
        "endTimeUnixNano": nanos(span.end_ms.max(span.start_ms)),
        "attributes": span.attributes.iter().map(|(k, v)| attribute(k, v)).collect::<Vec<_>>(),
    });
    if let Some(parent) = &span.parent {
        out["parentSpanId"] = parent.as_str().into();
    }
    if !span.events.is_empty() {
        out["events"] = span
            .events
            .iter()
            .map(|e| {
                json!({
                    "name": e.name,
                    "timeUnixNano": nanos(e.at_ms),
                    "attributes": e.attributes.iter().map(|(k, v)| attribute(k, v)).collect::<Vec<_>>(),
                })
            })
            .collect();
    }
    if let Some(message) = &span.error {
        // STATUS_CODE_ERROR.
        out["status"] = json!({"code": 2, "message": message});
    }
    out
}

fn nanos(ms: i64) -> String {
    format!("{}", (ms.max(0) as u64).saturating_mul(1_000_000))
}

fn attribute(key: &str, value: &Attr) -> Value {
    json!({"key": key, "value": any_value(value)})
}

fn any_value(value: &Attr) -> Value {
    match value {
        Attr::Str(s) => json!({"stringValue": s}),
        Attr::Int(n) => json!({"intValue": n.to_string()}),
        Attr::Float(f) => json!({"doubleValue": f}),
        Attr::Bool(b) => json!({"boolValue": b}),
        Attr::List(items) => {
            json!({"arrayValue": {"values": items.iter().map(|s| json!({"stringValue": s})).collect::<Vec<_>>()}})
        }
    }
}

/// `OTEL_EXPORTER_OTLP_HEADERS`: `name=value` pairs, comma-separated, values percent-decoded
/// (the OpenTelemetry specification's form). A bad pair is named by its place, never quoted:
/// its value is a secret.
pub fn parse_headers(value: &str) -> Result<Vec<(String, String)>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .enumerate()
        .map(|(n, pair)| {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| format!("pair {} is not `name=value`", n + 1))?;
            let name = name.trim().to_ascii_lowercase();
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            {
                return Err(format!("pair {} has no valid header name", n + 1));
            }
            let value = percent_encoding::percent_decode_str(value.trim())
                .decode_utf8()
                .map_err(|_| format!("the value of `{name}` is not UTF-8 once decoded"))?;
            if value.chars().any(char::is_control) {
                return Err(format!("the value of `{name}` holds a control character"));
            }
            Ok((name, value.into_owned()))
        })
        .collect()
}
