//! A turn's trace on the platform: whether the turn is traced (`OTEL_*`, the caller's
//! `traceparent`), its recorder set up, and the export sent once the stream has ended. The
//! spans themselves are `agent::trace`'s.
//!
//! The clock: span times are `Date.now()` when the turn handles each event, which in Workers
//! moves only across I/O. A provider call's span (from its request to its last chunk) and a
//! tool's (across its fetch) are real; CPU work between two I/O waits takes no time in them.

use std::time::Duration;

use futures::future::{select, Either};
use worker::{console_warn, AbortController};

use crate::agent::trace::otlp::export_body;
use crate::agent::trace::{Recorder, Span, TraceContext, TraceStart};
use crate::edge::config::traces::TraceSettings;
use crate::edge::config::Config;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::fetch::FetchTransport;
use crate::edge::platform::ids::new_id;
use crate::llm::{ApiRequest, HttpTransport};

/// How long an export may take before it is given up (a log line, never the turn's concern).
const EXPORT_MS: u64 = 5_000;

/// A traced turn's recorder, when this turn is traced: tracing is on (`OTEL_EXPORTER_OTLP_*`),
/// the caller's `traceparent` (if any) does not say unsampled, and the turn falls within
/// `OTEL_SAMPLE_RATE` (a sub-agent's turn: its parent's says sampled). `asked` gives the turn's
/// new message, read only when content is shown.
pub fn recorder(
    config: &Config,
    (traceparent, child): (Option<&str>, bool),
    (agent, conversation): (&str, &str),
    asked: impl FnOnce() -> Option<String>,
) -> Option<Recorder> {
    let settings = config.traces.as_ref()?;
    let incoming = traceparent.and_then(TraceContext::parse);
    // A caller may keep its turn out of the trace (its flag unset), never add turns past
    // `OTEL_SAMPLE_RATE`: the operator pays for what is exported. A sub-agent's conversation
    // (`child`: only its parent's turn sends it messages) follows its parent's decision, so a
    // traced parent's tree is whole.
    let said = incoming.as_ref().and_then(|c| c.sampled);
    let traced = match (said, child) {
        (Some(false), _) => false,
        (Some(true), true) => true,
        _ => worker::js_sys::Math::random() < settings.sample_rate,
    };
    if !traced {
        return None;
    }
    let context = match incoming {
        Some(context) => context,
        None => TraceContext {
            trace_id: new_id().ok()?,
            parent_id: None,
            sampled: Some(true),
        },
    };
    let root_id = new_id().ok()?.get(..16)?.to_string();
    Some(Recorder::new(
        TraceStart {
            context,
            root_id,
            agent: agent.to_string(),
            conversation: conversation.to_string(),
            capture: settings.capture_content,
            // Read only to be shown.
            asked: settings.capture_content.then(asked).flatten(),
            mcp_prefixes: config
                .mcp_servers
                .iter()
                .map(|s| format!("{}__", s.name))
                .collect(),
        },
        now_ms(),
    ))
}

/// A finished turn's spans, to be sent.
pub struct Export {
    settings: TraceSettings,
    trace_id: String,
    spans: Vec<Span>,
}

impl Export {
    pub fn new(settings: &TraceSettings, trace_id: &str, spans: Vec<Span>) -> Export {
        Export {
            settings: settings.clone(),
            trace_id: trace_id.to_string(),
            spans,
        }
    }

    /// Sends the spans, within [`EXPORT_MS`]; a collector that is down or slow costs a log
    /// line.
    pub async fn send(self) {
        let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
        headers.extend(self.settings.headers.iter().cloned());
        let request = ApiRequest {
            method: "POST",
            url: self.settings.endpoint.clone(),
            headers,
            body: Some(export_body(
                &self.settings.service,
                &self.trace_id,
                &self.spans,
            )),
        };
        let abort = AbortController::default();
        let transport = FetchTransport {
            signal: Some(abort.signal()),
            idle_timeout_ms: None,
        };
        let sent = std::pin::pin!(transport.send(request));
        let limit = std::pin::pin!(worker::Delay::from(Duration::from_millis(EXPORT_MS)));
        let why = match select(sent, limit).await {
            Either::Left((Ok(response), _)) if (200..300).contains(&response.status) => return,
            Either::Left((Ok(response), _)) => {
                format!("the collector answered {}", response.status)
            }
            Either::Left((Err(e), _)) => e,
            Either::Right(_) => {
                abort.abort();
                format!("no answer within {EXPORT_MS} ms")
            }
        };
        failed(&self.settings.endpoint, &why);
    }
}

/// Logs a failed export, naming the collector by its host: its URL may carry a key.
fn failed(endpoint: &str, why: &str) {
    let host = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest)
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    // A fetch's error may quote the URL.
    let why = why.replace(endpoint, host);
    let line = serde_json::json!({
        "event": "trace_export_failed",
        "level": "warn",
        "collector": host,
        "error": why,
    });
    console_warn!("{line}");
}
