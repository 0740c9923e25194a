//! A turn as an OpenTelemetry trace, after the GenAI semantic conventions: one `invoke_agent
//! <agent>` span for the turn, a `chat <model>` span for each provider call (a fallback ends one
//! with its error and starts the next), an `execute_tool <tool>` span for each server tool call.
//! Built from the turn's events as they come (each with the time it was handled) and handed
//! over whole at the turn's end, to be exported in one request ([`otlp`]). Pure code, tested
//! natively; the Worker decides which turns are traced and sends the export.
//!
//! A tool call's span id is derived from the trace and the call's id, so a sub-agent's turn,
//! run elsewhere, is given it as its parent before the call's span exists.

pub mod otlp;

use serde_json::Value;

use super::event::AgentEvent;
use crate::llm::{AssistantMessage, ContentBlock, LlmEvent, ModelRef, StopReason, ToolCall};

/// Most bytes of message content a piece of an attribute carries (with `OTEL_CAPTURE_CONTENT`).
pub const CONTENT_BYTES: usize = 4 * 1024;

/// Most spans a turn exports besides its own: past them, spans are counted
/// (`edge_agent.spans_dropped`), not kept. With content, about 2.5 MB at most: within the 4 MB
/// collectors commonly take in one request.
pub const MAX_SPANS: usize = 256;

/// The longest tool call id a span names (a provider's ids are far shorter).
const MAX_ID_BYTES: usize = 64;

/// Where a turn's spans belong: a W3C `traceparent`'s trace and parent span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// The span the turn's root is a child of (16 hex digits), if any.
    pub parent_id: Option<String>,
    /// The caller's sampling decision (`traceparent`'s flag), if it said.
    pub sampled: Option<bool>,
}

impl TraceContext {
    /// A `traceparent` header's context; `None` for one that is not version `00` of the W3C
    /// format (or names the all-zero trace or span).
    pub fn parse(traceparent: &str) -> Option<TraceContext> {
        let mut parts = traceparent.trim().split('-');
        let (version, trace, parent, flags) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        let hex = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                && s.bytes().any(|b| b != b'0')
        };
        if version != "00" || parts.next().is_some() || !hex(trace, 32) || !hex(parent, 16) {
            return None;
        }
        let flags = u8::from_str_radix(flags, 16)
            .ok()
            .filter(|_| flags.len() == 2)?;
        Some(TraceContext {
            trace_id: trace.to_string(),
            parent_id: Some(parent.to_string()),
            sampled: Some(flags & 1 == 1),
        })
    }

    /// The `traceparent` a request made within span `span_id` carries (sampled).
    pub fn header(&self, span_id: &str) -> String {
        format!("00-{}-{span_id}-01", self.trace_id)
    }
}

/// A 16-hex-digit span id derived from `seed` and `name` (FNV-1a, 64 bits): the same call of the
/// same trace always has the same span id.
pub fn derived_span_id(seed: &str, name: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed.bytes().chain([0]).chain(name.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:016x}", hash.max(1))
}

/// The span id of tool call `call_id`'s `execute_tool` span in trace `trace_id`.
pub fn tool_span_id(trace_id: &str, call_id: &str) -> String {
    derived_span_id(trace_id, call_id)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    Internal,
    Client,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Attr {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    List(Vec<String>),
}

/// Something that happened at a moment within a span (a retry).
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEvent {
    pub name: &'static str,
    pub at_ms: i64,
    pub attributes: Vec<(&'static str, Attr)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub id: String,
    pub parent: Option<String>,
    pub name: String,
    pub kind: SpanKind,
    pub start_ms: i64,
    pub end_ms: i64,
    pub attributes: Vec<(&'static str, Attr)>,
    /// The status's message when the span failed (its `error.type` is an attribute).
    pub error: Option<String>,
    pub events: Vec<SpanEvent>,
}

impl Span {
    fn new(id: String, parent: Option<String>, name: String, kind: SpanKind, at: i64) -> Span {
        Span {
            id,
            parent,
            name,
            kind,
            start_ms: at,
            end_ms: at,
            attributes: Vec::new(),
            error: None,
            events: Vec::new(),
        }
    }

    fn set(&mut self, key: &'static str, value: Attr) {
        match self.attributes.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => *v = value,
            None => self.attributes.push((key, value)),
        }
    }

    fn fail(&mut self, kind: &str, message: &str) {
        self.set("error.type", Attr::Str(kind.to_string()));
        self.error = Some(message.to_string());
    }

    /// An attribute's value, for tests and readers.
    pub fn attr(&self, key: &str) -> Option<&Attr> {
        self.attributes
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

/// What a traced turn is.
pub struct TraceStart {
    pub context: TraceContext,
    /// The turn's root span's id (16 hex digits, random).
    pub root_id: String,
    pub agent: String,
    pub conversation: String,
    /// Message content on the spans (`OTEL_CAPTURE_CONTENT`), each within [`CONTENT_BYTES`].
    pub capture: bool,
    /// The turn's new user message, shown on the root span when content is captured.
    pub asked: Option<String>,
    /// Tool names that are an MCP server's (`<server>__<tool>`): these prefixes.
    pub mcp_prefixes: Vec<String>,
}

/// A turn's spans as its events come.
pub struct Recorder {
    context: TraceContext,
    root: Span,
    chat: Option<Span>,
    answered: bool,
    calls: u32,
    done: Vec<Span>,
    capture: bool,
    mcp_prefixes: Vec<String>,
    common: Vec<(&'static str, Attr)>,
    /// Spans past [`MAX_SPANS`], not kept.
    dropped: usize,
}

impl Recorder {
    pub fn new(start: TraceStart, now: i64) -> Recorder {
        let common = vec![
            ("gen_ai.agent.name", Attr::Str(start.agent.clone())),
            ("gen_ai.conversation.id", Attr::Str(start.conversation)),
        ];
        let mut root = Span::new(
            start.root_id,
            start.context.parent_id.clone(),
            format!("invoke_agent {}", start.agent),
            SpanKind::Internal,
            now,
        );
        root.set("gen_ai.operation.name", Attr::Str("invoke_agent".into()));
        root.attributes.extend(common.iter().cloned());
        if let (true, Some(asked)) = (start.capture, &start.asked) {
            let messages = serde_json::json!([{"role": "user", "parts": [{"type": "text", "content": clipped(asked)}]}]);
            root.set("gen_ai.input.messages", Attr::Str(messages.to_string()));
        }
        Recorder {
            context: start.context,
            root,
            chat: None,
            answered: false,
            calls: 0,
            done: Vec::new(),
            capture: start.capture,
            mcp_prefixes: start.mcp_prefixes,
            common,
            dropped: 0,
        }
    }

    /// The trace's id.
    pub fn trace_id(&self) -> &str {
        &self.context.trace_id
    }

    /// The `traceparent` the turn's outgoing requests carry: within its root span.
    pub fn traceparent(&self) -> String {
        self.context.header(&self.root.id)
    }

    /// Takes one of the turn's events, handled at `now` (ms since the epoch).
    pub fn record(&mut self, event: &AgentEvent<'_>, now: i64) {
        match event {
            AgentEvent::StepStart { model, .. } => self.open_chat(model, now),
            AgentEvent::Llm(event) => self.chunk(event, now),
            // Within a call: a fallback (the failed call's span ends, the next model's starts).
            // Between calls (a budget's switch), the next step's span names the model.
            AgentEvent::ProviderSwitch { to, .. } => {
                if let Some(mut chat) = self.chat.take() {
                    chat.fail(
                        "fallback",
                        "the model failed; the next in the fallback chain answers",
                    );
                    chat.end_ms = now;
                    self.keep(chat);
                    self.open_chat(to, now);
                }
            }
            AgentEvent::StepEnd { message, .. } => self.close_chat(message, now),
            AgentEvent::Compacted { duration_ms } => {
                let name = format!("compact {}", self.calls + 1);
                let attributes = vec![("gen_ai.operation.name", Attr::Str("compact".into()))];
                self.add(&name, (now - *duration_ms as i64, now), attributes);
            }
            AgentEvent::ToolExecution {
                call,
                output,
                is_error,
                duration_ms,
            } => self.tool(call, output, *is_error, (*duration_ms, now)),
            AgentEvent::ApprovalRequest { calls } => {
                self.root.set(
                    "edge_agent.awaiting_approval",
                    Attr::Int(calls.len() as i64),
                );
            }
            AgentEvent::ClientToolRequest { calls } => {
                self.root.set(
                    "edge_agent.awaiting_client_tools",
                    Attr::Int(calls.len() as i64),
                );
            }
            AgentEvent::Error { public, .. } => {
                if let Some(mut chat) = self.chat.take() {
                    chat.fail("provider_error", public);
                    chat.end_ms = now;
                    self.keep(chat);
                }
                self.root.fail("turn_error", public);
            }
            AgentEvent::Done { total_usage, .. } => {
                self.root.set(
                    "gen_ai.usage.input_tokens",
                    Attr::Int(total_usage.input_tokens as i64),
                );
                self.root.set(
                    "gen_ai.usage.output_tokens",
                    Attr::Int(total_usage.output_tokens as i64),
                );
            }
            _ => {}
        }
    }

    /// A span of work the turn did outside the agent loop (recall before it, say), from
    /// `start` to `end`, under the root.
    pub fn add(
        &mut self,
        name: &str,
        (start, end): (i64, i64),
        attributes: Vec<(&'static str, Attr)>,
    ) {
        let id = derived_span_id(&self.root.id, name);
        // The root begins no later than what it holds.
        self.root.start_ms = self.root.start_ms.min(start);
        let mut span = Span::new(
            id,
            Some(self.root.id.clone()),
            name.to_string(),
            SpanKind::Internal,
            start,
        );
        span.end_ms = end;
        span.attributes = attributes;
        self.keep(span);
    }

    /// The turn ended (`outcome`: completed, failed, cancelled, awaiting_approval, ...): every
    /// span, the root first. A call still open (cancelled, cut off) ends now, failed.
    pub fn finish(mut self, outcome: &str, now: i64) -> Vec<Span> {
        if let Some(mut chat) = self.chat.take() {
            chat.fail(outcome, "the call ended with the turn, unanswered");
            chat.end_ms = now;
            self.keep(chat);
        }
        self.root
            .set("edge_agent.turn.outcome", Attr::Str(outcome.to_string()));
        if outcome == "cancelled" && self.root.error.is_none() {
            self.root.set("error.type", Attr::Str("cancelled".into()));
        }
        self.root.end_ms = now;
        let mut spans = vec![self.root];
        spans.append(&mut self.done);
        spans
    }

    fn open_chat(&mut self, model: &ModelRef, now: i64) {
        self.calls += 1;
        let id = derived_span_id(&self.root.id, &format!("chat {}", self.calls));
        let mut chat = Span::new(
            id,
            Some(self.root.id.clone()),
            format!("chat {}", model.model),
            SpanKind::Client,
            now,
        );
        chat.set("gen_ai.operation.name", Attr::Str("chat".into()));
        chat.set(
            "gen_ai.provider.name",
            Attr::Str(provider_name(&model.provider).into()),
        );
        chat.set("gen_ai.request.model", Attr::Str(model.model.clone()));
        chat.attributes.extend(self.common.iter().cloned());
        self.chat = Some(chat);
        self.answered = false;
    }

    fn chunk(&mut self, event: &LlmEvent, now: i64) {
        let Some(chat) = self.chat.as_mut() else {
            return;
        };
        match event {
            LlmEvent::Retry {
                attempt,
                wait_ms,
                reason,
            } => {
                // The attempt given up on named an answer that never came.
                chat.attributes.retain(|(k, _)| *k != "gen_ai.response.id");
                chat.events.push(SpanEvent {
                    name: "gen_ai.retry",
                    at_ms: now,
                    attributes: vec![
                        ("edge_agent.retry.attempt", Attr::Int(i64::from(*attempt))),
                        ("edge_agent.retry.wait_ms", Attr::Int(*wait_ms as i64)),
                        ("edge_agent.retry.reason", Attr::Str(reason.clone())),
                    ],
                })
            }
            LlmEvent::ResponseId(id) => {
                chat.set("gen_ai.response.id", Attr::Str(clipped_id(id).to_string()))
            }
            LlmEvent::Usage(_) | LlmEvent::Fallback { .. } => {}
            _ if !self.answered => {
                self.answered = true;
                let seconds = (now - chat.start_ms).max(0) as f64 / 1000.0;
                chat.set("gen_ai.response.time_to_first_chunk", Attr::Float(seconds));
            }
            _ => {}
        }
    }

    fn close_chat(&mut self, message: &AssistantMessage, now: i64) {
        let Some(mut chat) = self.chat.take() else {
            return;
        };
        chat.set("gen_ai.response.model", Attr::Str(message.model.clone()));
        let usage = &message.usage;
        chat.set(
            "gen_ai.usage.input_tokens",
            Attr::Int(usage.input_tokens as i64),
        );
        chat.set(
            "gen_ai.usage.output_tokens",
            Attr::Int(usage.output_tokens as i64),
        );
        chat.set(
            "gen_ai.usage.cache_read.input_tokens",
            Attr::Int(usage.cache_read_tokens as i64),
        );
        chat.set(
            "gen_ai.usage.cache_creation.input_tokens",
            Attr::Int(usage.cache_write_tokens as i64),
        );
        chat.set(
            "gen_ai.response.finish_reasons",
            Attr::List(vec![finish_reason(&message.stop_reason).to_string()]),
        );
        match &message.stop_reason {
            StopReason::Error => chat.fail("provider_error", "the provider's stream failed"),
            StopReason::Aborted => chat.fail("cancelled", "the turn was cancelled"),
            StopReason::Interrupted => chat.fail("interrupted", "the runtime stopped mid-answer"),
            _ => {}
        }
        if self.capture {
            // Each piece cut, then the whole written: the attribute stays JSON a reader parses.
            let parts: Vec<Value> = message
                .content
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::Text { text } => {
                        Some(serde_json::json!({"type": "text", "content": clipped(text)}))
                    }
                    ContentBlock::ToolUse(call) => Some(serde_json::json!({
                        "type": "tool_call", "id": clipped_id(&call.id), "name": tool_name(&call.name),
                        "arguments": clipped_json(&call.input),
                    })),
                    _ => None,
                })
                .take(8)
                .collect();
            let finish = finish_reason(&message.stop_reason);
            let messages =
                serde_json::json!([{"role": "assistant", "parts": parts, "finish_reason": finish}]);
            chat.set("gen_ai.output.messages", Attr::Str(messages.to_string()));
        }
        chat.end_ms = now;
        self.keep(chat);
    }

    fn tool(&mut self, call: &ToolCall, output: &Value, is_error: bool, (ms, now): (u64, i64)) {
        // A name the model wrote that names no tool could be any text: not on a span.
        let name = tool_name(&call.name);
        let mut span = Span::new(
            tool_span_id(&self.context.trace_id, &call.id),
            Some(self.root.id.clone()),
            format!("execute_tool {name}"),
            SpanKind::Internal,
            now - ms as i64,
        );
        span.end_ms = now;
        span.set("gen_ai.operation.name", Attr::Str("execute_tool".into()));
        span.set("gen_ai.tool.name", Attr::Str(name.to_string()));
        span.set(
            "gen_ai.tool.call.id",
            Attr::Str(clipped_id(&call.id).to_string()),
        );
        span.set("gen_ai.tool.type", Attr::Str("function".into()));
        span.attributes.extend(self.common.iter().cloned());
        if self
            .mcp_prefixes
            .iter()
            .any(|p| call.name.starts_with(p.as_str()))
        {
            span.set("mcp.method.name", Attr::Str("tools/call".into()));
        }
        if is_error {
            span.fail("tool_error", "the tool failed");
        }
        if self.capture {
            span.set(
                "gen_ai.tool.call.arguments",
                Attr::Str(clipped_json(&call.input).to_string()),
            );
            let result = match output {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            span.set("gen_ai.tool.call.result", Attr::Str(clipped(&result)));
        }
        self.keep(span);
    }

    /// A finished span, kept while the turn is within [`MAX_SPANS`], else counted.
    fn keep(&mut self, span: Span) {
        if self.done.len() < MAX_SPANS {
            self.done.push(span);
            return;
        }
        self.dropped += 1;
        self.root
            .set("edge_agent.spans_dropped", Attr::Int(self.dropped as i64));
    }
}

/// The tool's name when it is one a tool may have, else `unknown`.
fn tool_name(name: &str) -> &str {
    if crate::agent::tools::is_tool_name(name) {
        name
    } else {
        "unknown"
    }
}

fn clipped_id(id: &str) -> &str {
    crate::agent::text::clip(id, MAX_ID_BYTES)
}

/// Content within [`CONTENT_BYTES`], cut at a character and marked when cut.
fn clipped(text: &str) -> String {
    if text.len() <= CONTENT_BYTES {
        return text.to_string();
    }
    format!("{}…", crate::agent::text::clip(text, CONTENT_BYTES))
}

/// A JSON value as it is when its text is within [`CONTENT_BYTES`], else that text cut (a
/// string): JSON either way.
fn clipped_json(value: &Value) -> Value {
    let text = value.to_string();
    if text.len() <= CONTENT_BYTES {
        value.clone()
    } else {
        Value::String(clipped(&text))
    }
}

/// The conventions' name for a provider (`gen_ai.provider.name`).
fn provider_name(provider: &str) -> &str {
    match provider {
        "gemini" => "gcp.gemini",
        "workers-ai" => "cloudflare.workers_ai",
        other => other,
    }
}

fn finish_reason(stop: &StopReason) -> &str {
    match stop {
        StopReason::EndTurn | StopReason::StopSequence => "stop",
        StopReason::MaxTokens => "length",
        StopReason::ToolUse => "tool_call",
        StopReason::ContentFilter | StopReason::Refusal => "content_filter",
        StopReason::PauseTurn => "pause",
        StopReason::Error => "error",
        StopReason::Aborted => "cancelled",
        StopReason::Interrupted => "interrupted",
        StopReason::Other(other) => other,
    }
}

#[cfg(test)]
mod tests;
