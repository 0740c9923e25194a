//! Agent events → the AI SDK UI message stream (v1), so a stock `useChat` client can read a turn.
//!
//! Each chunk is `data: {json}\n\n`; the stream always ends with `data: [DONE]`. A turn is one
//! message (`start` … `finish`); each LLM call is a step (`start-step` … `finish-step`), and a
//! step stays open through its tool results so they land in it. Only the protocol's own fields
//! are emitted: strict clients reject anything else. Pure code: no platform types, so it is
//! tested natively.

use serde::Serialize;
use serde_json::Value;

use crate::agent::artifacts;
use crate::agent::{AgentEvent, AgentMessage, TurnOutcome, SKIPPED_FOR_STEERING};
use crate::llm::{LlmEvent, StopReason, Usage};

/// `{}`.
#[derive(Serialize)]
struct EmptyObject {}

/// The chunks of the protocol that we emit.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum Chunk<'a> {
    Start {
        #[serde(rename = "messageId", skip_serializing_if = "Option::is_none")]
        message_id: Option<&'a str>,
    },
    StartStep,
    FinishStep,
    TextStart {
        id: &'a str,
    },
    TextDelta {
        id: &'a str,
        delta: &'a str,
    },
    TextEnd {
        id: &'a str,
    },
    ReasoningStart {
        id: &'a str,
    },
    ReasoningDelta {
        id: &'a str,
        delta: &'a str,
    },
    ReasoningEnd {
        id: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    ToolInputStart {
        tool_call_id: &'a str,
        tool_name: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    ToolInputDelta {
        tool_call_id: &'a str,
        input_text_delta: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    ToolInputAvailable {
        tool_call_id: &'a str,
        tool_name: &'a str,
        input: &'a Value,
    },
    #[serde(rename_all = "camelCase")]
    ToolOutputAvailable {
        tool_call_id: &'a str,
        output: &'a Value,
    },
    #[serde(rename_all = "camelCase")]
    ToolOutputError {
        tool_call_id: &'a str,
        error_text: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    ToolApprovalRequest {
        approval_id: &'a str,
        tool_call_id: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    ToolOutputDenied {
        tool_call_id: &'a str,
    },
    #[serde(rename = "data-usage")]
    DataUsage {
        data: UsageData<'a>,
        transient: bool,
    },
    #[serde(rename = "data-steering")]
    DataSteering {
        data: SteeringData<'a>,
        transient: bool,
    },
    /// An artifact changed: `id` is the artifact's, so a client
    /// keeps one part per artifact, updated in place.
    #[serde(rename = "data-artifact")]
    DataArtifact {
        id: &'a str,
        data: &'a Value,
    },
    /// A typed answer's state: one part per message (`id`), re-sent in place as it forms.
    #[serde(rename = "data-output")]
    DataOutput {
        id: &'a str,
        data: &'a Value,
    },
    /// A whole, valid element of an `array` typed answer.
    #[serde(rename = "data-output-element")]
    DataOutputElement {
        id: &'a str,
        data: ElementData<'a>,
    },
    #[serde(rename = "data-provider-switch")]
    DataProviderSwitch {
        data: SwitchData,
        transient: bool,
    },
    #[serde(rename_all = "camelCase")]
    Error {
        error_text: &'a str,
    },
    #[serde(rename_all = "camelCase")]
    Finish {
        finish_reason: &'a str,
        /// `{}` after an empty last step: a stock client keeps a message's parts as of its last
        /// update, and only a chunk like this one updates it after a `start-step`.
        #[serde(skip_serializing_if = "Option::is_none")]
        message_metadata: Option<EmptyObject>,
    },
    Abort {
        reason: &'a str,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct UsageData<'a> {
    model: &'a str,
    provider: &'a str,
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SteeringData<'a> {
    skipped_tool_call_ids: Vec<&'a str>,
    messages: Vec<String>,
}

#[derive(Serialize)]
struct ElementData<'a> {
    index: usize,
    element: &'a Value,
}

#[derive(Serialize)]
struct SwitchData {
    from: String,
    to: String,
}

/// Encodes one turn. Feed it every event, then call [`UiStream::finish`].
#[derive(Default)]
pub struct UiStream {
    step: u32,
    step_open: bool,
    /// Tool call ids by content index within the current step.
    tool_ids: Vec<Option<String>>,
    last_stop: Option<StopReason>,
    /// The last part id made, and what it was made of: a part's deltas reuse it.
    id_buf: String,
    id_of: Option<(&'static str, u32, usize)>,
    /// The request (or turn) an error chunk names, so a user's report finds the log line.
    reference: String,
    /// A typed answer's part id (`output:<messageId>`) and its tool's name: the answer shows
    /// as that part, never as text or a tool call.
    output: Option<(String, String)>,
    /// The answer shown forming has not ended (complete or failed).
    output_open: bool,
}

pub const HEADERS: [(&str, &str); 4] = [
    ("content-type", "text/event-stream"),
    ("cache-control", "no-cache"),
    ("x-vercel-ai-ui-message-stream", "v1"),
    ("x-accel-buffering", "no"),
];

/// The `start` chunk, written as soon as a turn is claimed (before its history loads, so the
/// client's first byte does not wait on storage). `None` continues the client's last message
/// (a paused turn resuming), which a stock client does when `start` names no new id.
pub fn start(message_id: Option<&str>, out: &mut String) {
    write(out, &Chunk::Start { message_id });
}

/// The end of a stream whose turn could not start: an `error` chunk, then `finish`.
pub fn failed_to_start(message: &str, out: &mut String) {
    write(
        out,
        &Chunk::Error {
            error_text: message,
        },
    );
    UiStream::new().finish(
        &TurnOutcome::Failed {
            message: message.to_string(),
            is_retryable: false,
        },
        out,
    );
}

impl UiStream {
    /// The chunks of a turn's events, after its `start` chunk.
    pub fn new() -> Self {
        Self::default()
    }

    /// A stream whose error chunks name `reference` (the request id, or the turn's).
    pub fn for_request(reference: &str) -> Self {
        Self {
            reference: reference.to_string(),
            ..Self::default()
        }
    }

    /// A stream whose turn answers in JSON (`output`): its text and the answer tool `tool`'s
    /// calls are not shown, the answer shows as a `data-output` part of id `part_id`.
    pub fn typed(mut self, part_id: String, tool: &str) -> Self {
        self.output = Some((part_id, tool.to_string()));
        self
    }

    /// Writes the chunks for one event (possibly none).
    pub fn event(&mut self, event: &AgentEvent<'_>, out: &mut String) {
        match event {
            AgentEvent::StepStart { step, .. } => {
                self.close_step(out);
                self.step = *step;
                self.step_open = true;
                self.tool_ids.clear();
                write(out, &Chunk::StartStep);
            }
            AgentEvent::Llm(e) => match (&self.output, e) {
                (
                    Some(_),
                    LlmEvent::TextStart { .. }
                    | LlmEvent::TextDelta { .. }
                    | LlmEvent::TextEnd { .. },
                ) => {}
                (
                    Some((_, tool)),
                    LlmEvent::ToolCallStart { name, .. } | LlmEvent::ToolCallEnd { name, .. },
                ) if name == tool => {}
                _ => self.llm(e, out),
            },
            AgentEvent::Output(data) => {
                if let Some((id, _)) = &self.output {
                    self.output_open = data["status"] == "streaming";
                    write(out, &Chunk::DataOutput { id, data });
                }
            }
            AgentEvent::OutputElement { index, value } => {
                if let Some((id, _)) = &self.output {
                    let id = format!("{id}:{index}");
                    let data = ElementData {
                        index: *index,
                        element: value,
                    };
                    write(out, &Chunk::DataOutputElement { id: &id, data });
                }
            }
            AgentEvent::StepEnd { message, .. } => {
                self.last_stop = Some(message.stop_reason.clone());
                write(
                    out,
                    &usage_chunk(&message.usage, &message.model, &message.provider),
                );
            }
            AgentEvent::ToolExecution {
                call,
                output,
                is_error,
                ..
            } => {
                if *is_error {
                    let text = output
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| output.to_string());
                    write(
                        out,
                        &Chunk::ToolOutputError {
                            tool_call_id: &call.id,
                            error_text: &text,
                        },
                    );
                } else {
                    write(
                        out,
                        &Chunk::ToolOutputAvailable {
                            tool_call_id: &call.id,
                            output,
                        },
                    );
                    if artifacts::CHANGING_TOOLS.contains(&call.name.as_str()) {
                        let data = &output["artifact"];
                        if let Some(id) = data["id"].as_str() {
                            write(out, &Chunk::DataArtifact { id, data });
                        }
                    }
                }
            }
            AgentEvent::Steering { skipped, messages } => {
                for call in *skipped {
                    write(
                        out,
                        &Chunk::ToolOutputError {
                            tool_call_id: &call.id,
                            error_text: SKIPPED_FOR_STEERING,
                        },
                    );
                }
                let data = SteeringData {
                    skipped_tool_call_ids: skipped.iter().map(|c| c.id.as_str()).collect(),
                    messages: messages.iter().map(message_text).collect(),
                };
                write(
                    out,
                    &Chunk::DataSteering {
                        data,
                        transient: true,
                    },
                );
            }
            // Said in history (the summary) and in traces, not on the stream.
            AgentEvent::Compacted { .. } => {}
            AgentEvent::ProviderSwitch { from, to } => {
                let data = SwitchData {
                    from: from.to_string(),
                    to: to.to_string(),
                };
                write(
                    out,
                    &Chunk::DataProviderSwitch {
                        data,
                        transient: true,
                    },
                );
            }
            // The detail goes to the log; the user gets what they may see and where to look.
            AgentEvent::Error { public, .. } => {
                let text = if self.reference.is_empty() {
                    public.clone()
                } else {
                    format!("{public} (request {})", self.reference)
                };
                write(out, &Chunk::Error { error_text: &text });
            }
            // The approval id is the call id: one decision per call.
            AgentEvent::ApprovalRequest { calls } => {
                for call in *calls {
                    write(
                        out,
                        &Chunk::ToolApprovalRequest {
                            approval_id: &call.id,
                            tool_call_id: &call.id,
                        },
                    );
                }
            }
            AgentEvent::ToolDenied { call, .. } => {
                write(
                    out,
                    &Chunk::ToolOutputDenied {
                        tool_call_id: &call.id,
                    },
                );
            }
            // The tool inputs are out already; `finish` says the client has work to do.
            AgentEvent::ClientToolRequest { .. } | AgentEvent::Done { .. } => {}
        }
    }

    /// Closes the message: `finish-step`, `finish`, `[DONE]`.
    pub fn finish(mut self, outcome: &TurnOutcome, out: &mut String) {
        // A typed answer shown forming that the turn's end cut off ends failed, not forming.
        let why = match outcome {
            TurnOutcome::Failed { .. } => Some("the turn failed before its answer was complete"),
            TurnOutcome::LimitReached(_) => Some("the turn reached a limit before its answer"),
            TurnOutcome::Cancelled => Some("the turn was cancelled before its answer"),
            _ => None,
        };
        if let (Some((id, _)), Some(message), true) = (&self.output, why, self.output_open) {
            let data = serde_json::json!({
                "status": "error",
                "error": {"type": crate::agent::output::answer::NO_OBJECT, "message": message},
            });
            write(out, &Chunk::DataOutput { id, data: &data });
        }
        self.close_step(out);
        // Ended on calls that need no reply (`update_memory`, beside the answer): an empty last
        // step, or a stock client (`lastAssistantMessageIsCompleteWithToolCalls`) would take
        // the answered calls for its own and send them back.
        let quiet_end =
            *outcome == TurnOutcome::Completed && self.last_stop == Some(StopReason::ToolUse);
        if quiet_end {
            write(out, &Chunk::StartStep);
            write(out, &Chunk::FinishStep);
        }
        if *outcome == TurnOutcome::Cancelled {
            write(
                out,
                &Chunk::Abort {
                    reason: "cancelled",
                },
            );
        }
        let finish_reason = match outcome {
            TurnOutcome::AwaitingToolResults(_) | TurnOutcome::AwaitingApproval(_) => "tool-calls",
            TurnOutcome::Failed { .. } => "error",
            TurnOutcome::LimitReached(_) => "length",
            TurnOutcome::Cancelled => "other",
            TurnOutcome::Completed | TurnOutcome::Stopped | TurnOutcome::HandedOff(_) => {
                match self.last_stop {
                    Some(StopReason::MaxTokens) => "length",
                    Some(StopReason::ContentFilter | StopReason::Refusal) => "content-filter",
                    Some(StopReason::ToolUse) if !quiet_end => "tool-calls",
                    Some(StopReason::Other(_)) => "other",
                    _ => "stop",
                }
            }
        };
        write(
            out,
            &Chunk::Finish {
                finish_reason,
                message_metadata: quiet_end.then_some(EmptyObject {}),
            },
        );
        out.push_str("data: [DONE]\n\n");
    }

    fn close_step(&mut self, out: &mut String) {
        if self.step_open {
            self.step_open = false;
            write(out, &Chunk::FinishStep);
        }
    }

    fn llm(&mut self, event: &LlmEvent, out: &mut String) {
        match event {
            LlmEvent::TextStart { index } => {
                let id = self.part_id("text", *index);
                write(out, &Chunk::TextStart { id });
            }
            LlmEvent::TextDelta { index, delta } => {
                let id = self.part_id("text", *index);
                write(out, &Chunk::TextDelta { id, delta });
            }
            LlmEvent::TextEnd { index } => {
                let id = self.part_id("text", *index);
                write(out, &Chunk::TextEnd { id });
            }
            LlmEvent::ThinkingStart { index } => {
                let id = self.part_id("reasoning", *index);
                write(out, &Chunk::ReasoningStart { id });
            }
            LlmEvent::ThinkingDelta { index, delta } => {
                let id = self.part_id("reasoning", *index);
                write(out, &Chunk::ReasoningDelta { id, delta });
            }
            LlmEvent::ThinkingEnd { index } => {
                let id = self.part_id("reasoning", *index);
                write(out, &Chunk::ReasoningEnd { id });
            }
            LlmEvent::ToolCallStart { index, id, name } => {
                if self.tool_ids.len() <= *index {
                    self.tool_ids.resize(index + 1, None);
                }
                self.tool_ids[*index] = Some(id.clone());
                write(
                    out,
                    &Chunk::ToolInputStart {
                        tool_call_id: id,
                        tool_name: name,
                    },
                );
            }
            LlmEvent::ToolCallDelta { index, delta } => {
                if let Some(Some(id)) = self.tool_ids.get(*index) {
                    write(
                        out,
                        &Chunk::ToolInputDelta {
                            tool_call_id: id,
                            input_text_delta: delta,
                        },
                    );
                }
            }
            LlmEvent::ToolCallEnd {
                id, name, input, ..
            } => {
                write(
                    out,
                    &Chunk::ToolInputAvailable {
                        tool_call_id: id,
                        tool_name: name,
                        input,
                    },
                );
            }
            LlmEvent::Usage(_) => {} // reported once per step, at its end
            // The agent reports fallbacks as `ProviderSwitch`; nothing reaches here.
            LlmEvent::Fallback { .. } => {}
            // Counted in the turn's log line; the client sees the answer when it comes.
            LlmEvent::Retry { .. } => {}
            // For traces.
            LlmEvent::ResponseId(_) => {}
        }
    }

    /// `"{kind}-{step}-{index}"`: unique within the message, stable for one part. Formatted once
    /// per part, not once per delta (`core::fmt` was a visible share of a streamed turn).
    fn part_id(&mut self, kind: &'static str, index: usize) -> &str {
        let of = (kind, self.step, index);
        if self.id_of != Some(of) {
            use std::fmt::Write;
            self.id_buf.clear();
            let _ = write!(self.id_buf, "{kind}-{}-{index}", self.step);
            self.id_of = Some(of);
        }
        &self.id_buf
    }
}

fn usage_chunk<'a>(usage: &Usage, model: &'a str, provider: &'a str) -> Chunk<'a> {
    Chunk::DataUsage {
        data: UsageData {
            model,
            provider,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            cache_read_tokens: usage.cache_read_tokens,
            cache_write_tokens: usage.cache_write_tokens,
        },
        transient: true,
    }
}

fn message_text(message: &AgentMessage) -> String {
    message
        .user_said()
        .unwrap_or_else(|| message.kind().to_string())
}

fn write(out: &mut String, chunk: &Chunk<'_>) {
    out.push_str("data: ");
    // Serializing plain structs of strings and numbers into a String cannot fail.
    if let Ok(json) = serde_json::to_string(chunk) {
        out.push_str(&json);
    }
    out.push_str("\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{AssistantMessage, ModelRef, ToolCall};
    use serde_json::json;

    fn chunks(out: &str) -> Vec<Value> {
        assert!(out.ends_with("data: [DONE]\n\n"));
        out.split("\n\n")
            .filter(|c| !c.is_empty() && *c != "data: [DONE]")
            .map(|c| crate::llm::json::from_str(c.strip_prefix("data: ").unwrap()).unwrap())
            .collect()
    }

    #[test]
    fn an_artifact_change_follows_its_tool_output_as_a_data_artifact_part() {
        let call = |name: &str| ToolCall {
            id: "c1".into(),
            name: name.into(),
            input: json!({}),
            signature: None,
        };
        let output = json!({"status": "ok", "artifact": {"id": "a1", "title": "Plan", "kind": "json", "version": 2}});
        let mut out = String::new();
        let mut s = UiStream::new();
        for name in ["patch_artifact", "read_artifact"] {
            s.event(
                &AgentEvent::ToolExecution {
                    call: &call(name),
                    output: &output,
                    is_error: false,
                    duration_ms: 1,
                },
                &mut out,
            );
        }
        s.finish(&TurnOutcome::Completed, &mut out);
        let parts = chunks(&out);
        assert_eq!(parts[0]["type"], "tool-output-available");
        assert_eq!(
            parts[1],
            json!({"type": "data-artifact", "id": "a1", "data": output["artifact"]})
        );
        // Reading changes nothing: no part.
        assert_eq!(parts[2]["type"], "tool-output-available");
        assert_eq!(parts[3]["type"], "finish");
    }

    #[test]
    fn a_typed_answer_shows_as_its_data_part_not_as_text_or_its_tool() {
        let text = LlmEvent::TextDelta {
            index: 0,
            delta: "{\"a\"".into(),
        };
        let start_answer = LlmEvent::ToolCallStart {
            index: 1,
            id: "c9".into(),
            name: "answer".into(),
        };
        let forming = json!({"status": "streaming", "partial": {"a": 1}});
        let element = json!(3);
        let mut out = String::new();
        let mut s = UiStream::new().typed("output:m1".into(), "answer");
        for event in [
            AgentEvent::Llm(&text),
            AgentEvent::Llm(&start_answer),
            AgentEvent::Output(&forming),
            AgentEvent::OutputElement {
                index: 2,
                value: &element,
            },
        ] {
            s.event(&event, &mut out);
        }
        // Cut off by a failure: the part ends failed, not forming.
        s.finish(
            &TurnOutcome::Failed {
                message: "x".into(),
                is_retryable: false,
            },
            &mut out,
        );
        let parts = chunks(&out);
        assert_eq!(
            parts[0],
            json!({"type": "data-output", "id": "output:m1", "data": forming})
        );
        assert_eq!(
            parts[1],
            json!({"type": "data-output-element", "id": "output:m1:2", "data": {"index": 2, "element": 3}})
        );
        assert_eq!(parts[2]["id"], "output:m1");
        assert_eq!(parts[2]["data"]["status"], "error");
        assert_eq!(parts[3]["type"], "finish");
        assert_eq!(parts.len(), 4);
        // An untyped stream shows the same text as text.
        let mut out = String::new();
        let mut s = UiStream::new();
        s.event(&AgentEvent::Llm(&text), &mut out);
        s.finish(&TurnOutcome::Completed, &mut out);
        assert_eq!(chunks(&out)[0]["type"], "text-delta");
    }

    #[test]
    fn a_tool_round_trip_is_two_steps_with_the_output_inside_the_first() {
        let model = ModelRef::parse("openai:gpt-4o").unwrap();
        let call = ToolCall {
            id: "c1".into(),
            name: "current_time".into(),
            input: json!({}),
            signature: None,
        };
        let answer = AssistantMessage {
            content: vec![],
            stop_reason: StopReason::EndTurn,
            model: "gpt-4o".into(),
            provider: "openai".into(),
            usage: Usage {
                input_tokens: 5,
                output_tokens: 2,
                ..Default::default()
            },
            output: None,
        };
        let output = json!({"utc": "2026-11-21T05:00:00.000Z"});
        let mut out = String::new();
        start(Some("msg-1"), &mut out);
        let mut s = UiStream::new();
        let events = [
            AgentEvent::StepStart {
                step: 1,
                model: &model,
            },
            AgentEvent::Llm(&LlmEvent::ToolCallStart {
                index: 0,
                id: "c1".into(),
                name: "current_time".into(),
            }),
            AgentEvent::Llm(&LlmEvent::ToolCallDelta {
                index: 0,
                delta: "{}".into(),
            }),
            AgentEvent::Llm(&LlmEvent::ToolCallEnd {
                index: 0,
                id: "c1".into(),
                name: "current_time".into(),
                input: json!({}),
            }),
            AgentEvent::StepEnd {
                step: 1,
                message: &answer,
            },
            AgentEvent::ToolExecution {
                call: &call,
                output: &output,
                is_error: false,
                duration_ms: 1,
            },
            AgentEvent::StepStart {
                step: 2,
                model: &model,
            },
            AgentEvent::Llm(&LlmEvent::TextStart { index: 0 }),
            AgentEvent::Llm(&LlmEvent::TextDelta {
                index: 0,
                delta: "It is 5.".into(),
            }),
            AgentEvent::Llm(&LlmEvent::TextEnd { index: 0 }),
            AgentEvent::StepEnd {
                step: 2,
                message: &answer,
            },
        ];
        for e in &events {
            s.event(e, &mut out);
        }
        s.finish(&TurnOutcome::Completed, &mut out);
        let got = chunks(&out);
        let types: Vec<&str> = got.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(
            types,
            [
                "start",
                "start-step",
                "tool-input-start",
                "tool-input-delta",
                "tool-input-available",
                "data-usage",
                "tool-output-available",
                "finish-step",
                "start-step",
                "text-start",
                "text-delta",
                "text-end",
                "data-usage",
                "finish-step",
                "finish"
            ]
        );
        assert_eq!(got[0], json!({"type": "start", "messageId": "msg-1"}));
        assert_eq!(
            got[3],
            json!({"type": "tool-input-delta", "toolCallId": "c1", "inputTextDelta": "{}"})
        );
        assert_eq!(
            got[6],
            json!({"type": "tool-output-available", "toolCallId": "c1", "output": output})
        );
        assert_eq!(
            got[10],
            json!({"type": "text-delta", "id": "text-2-0", "delta": "It is 5."})
        );
        assert_eq!(got[14], json!({"type": "finish", "finishReason": "stop"}));
    }

    #[test]
    fn a_turn_ended_on_calls_that_need_no_reply_closes_with_an_empty_step() {
        let model = ModelRef::parse("openai:gpt-4o").unwrap();
        let call = ToolCall {
            id: "m1".into(),
            name: "update_memory".into(),
            input: json!({"patch": {}}),
            signature: None,
        };
        let answer = AssistantMessage {
            content: vec![],
            stop_reason: StopReason::ToolUse,
            model: "gpt-4o".into(),
            provider: "openai".into(),
            usage: Usage::default(),
            output: None,
        };
        let mut out = String::new();
        let mut s = UiStream::new();
        s.event(
            &AgentEvent::StepStart {
                step: 1,
                model: &model,
            },
            &mut out,
        );
        s.event(
            &AgentEvent::StepEnd {
                step: 1,
                message: &answer,
            },
            &mut out,
        );
        s.event(
            &AgentEvent::ToolExecution {
                call: &call,
                output: &json!({"ok": true}),
                is_error: false,
                duration_ms: 1,
            },
            &mut out,
        );
        s.finish(&TurnOutcome::Completed, &mut out);
        let got = chunks(&out);
        let types: Vec<&str> = got.iter().map(|c| c["type"].as_str().unwrap()).collect();
        // The stock client's `lastAssistantMessageIsCompleteWithToolCalls` reads the last step:
        // it has no call, so the answered one is not sent back.
        assert_eq!(
            types[types.len() - 4..],
            ["finish-step", "start-step", "finish-step", "finish"]
        );
        assert_eq!(
            got.last().unwrap(),
            &json!({"type": "finish", "finishReason": "stop", "messageMetadata": {}})
        );
    }

    #[test]
    fn errors_and_client_tool_pauses_set_the_finish_reason() {
        let mut out = String::new();
        start(Some("m"), &mut out);
        let mut s = UiStream::for_request("r1");
        s.event(
            &AgentEvent::Error {
                message: "anthropic had a server error (HTTP 500): {\"secret\": 1}".into(),
                public: "boom".into(),
                is_retryable: true,
            },
            &mut out,
        );
        s.finish(
            &TurnOutcome::Failed {
                message: "boom".into(),
                is_retryable: true,
            },
            &mut out,
        );
        let got = chunks(&out);
        // The provider's detail stays out of the stream; the request id is in.
        assert_eq!(
            got[1],
            json!({"type": "error", "errorText": "boom (request r1)"})
        );
        assert_eq!(got[2], json!({"type": "finish", "finishReason": "error"}));

        let mut out = String::new();
        start(None, &mut out);
        UiStream::new().finish(&TurnOutcome::AwaitingToolResults(vec![]), &mut out);
        assert_eq!(chunks(&out)[1]["finishReason"], "tool-calls");
    }
}
