//! A child conversation's turn as its parent sees it: the child's UI message stream folded into
//! the message it forms (shown on the parent's stream as the agent tool's preliminary outputs)
//! and, at its end, the call's result: the child's answer, or a failure the parent's model can
//! act on. Pure code, tested natively.

use serde_json::{json, Value};

use crate::llm::{AssistantMessage, StopReason};

/// Most bytes of a child's tool call's input shown on the parent's stream.
const SHOWN_INPUT_BYTES: usize = 512;

/// Why a child's turn gave no answer, as the parent's model reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Error,
    Cancelled,
    /// The child's runtime stopped before its turn ended.
    Interrupted,
    /// A limit ended it: its budget, its steps, its time, its tokens.
    LimitReached,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Error => "error",
            Status::Cancelled => "cancelled",
            Status::Interrupted => "interrupted",
            Status::LimitReached => "limit_reached",
        }
    }
}

/// A failed agent tool call: the error result its model reads, `{ok: false, status, message,
/// retryable}`.
pub fn failure(status: Status, message: &str) -> String {
    let retryable = matches!(status, Status::Error | Status::Interrupted);
    json!({"ok": false, "status": status.as_str(), "message": message, "retryable": retryable})
        .to_string()
}

/// One part of the child's message, as an AI SDK `UIMessage` has it.
enum Part {
    /// A text block, by its id in the child's stream.
    Text { id: String, text: String },
    /// A tool call: its id, name, state (the `UIMessage` tool part's), input and error.
    Tool {
        id: String,
        name: String,
        state: &'static str,
        input: Value,
        error: Option<String>,
    },
}

/// The child's message so far, read chunk by chunk from its stream.
#[derive(Default)]
pub struct Progress {
    parts: Vec<Part>,
    /// The answer: the text of the last step that said something.
    answer: String,
    /// A step began and has said nothing yet: its first text replaces the answer. A step that
    /// says nothing (the empty one a turn that ended on quiet calls closes with) leaves the
    /// last step's text the answer.
    fresh_step: bool,
    /// The typed answer's state (`data-output`), and its size as JSON.
    output: Option<Value>,
    output_len: usize,
    /// The stream's `error` text, if any.
    error: Option<String>,
    finish: Option<String>,
    aborted: bool,
    /// Calls the child waits to have approved.
    approvals: Vec<String>,
    /// A part was added or changed state since [`Progress::take_changed`].
    changed: bool,
}

impl Progress {
    /// Folds one chunk of the child's stream in.
    pub fn apply(&mut self, chunk: &Value) {
        let text = |field: &str| chunk[field].as_str().unwrap_or_default();
        let kind = text("type");
        let state = match kind {
            // The answer is the last step's text: an earlier step's narration is not.
            "start-step" => {
                self.fresh_step = true;
                return;
            }
            "text-start" => {
                self.parts.push(Part::Text {
                    id: text("id").to_string(),
                    text: String::new(),
                });
                self.changed = true;
                return;
            }
            "text-delta" => {
                let delta = text("delta");
                if std::mem::take(&mut self.fresh_step) {
                    self.answer.clear();
                }
                self.answer.push_str(delta);
                let id = text("id");
                let open = self.parts.iter_mut().rev().find_map(|p| match p {
                    Part::Text { id: i, text } if i == id => Some(text),
                    _ => None,
                });
                if let Some(open) = open {
                    open.push_str(delta);
                }
                return;
            }
            "data-output" => {
                // Its size, once per show of the child's own (those are spaced already).
                self.output_len = chunk["data"].to_string().len();
                self.output = Some(chunk["data"].clone());
                self.changed = true;
                return;
            }
            "error" => {
                self.error = chunk["errorText"].as_str().map(str::to_string);
                return;
            }
            "abort" => {
                self.aborted = true;
                return;
            }
            "finish" => {
                self.finish = chunk["finishReason"].as_str().map(str::to_string);
                return;
            }
            "tool-input-start" => "input-streaming",
            "tool-input-available" => "input-available",
            "tool-output-available" => "output-available",
            "tool-output-error" => "output-error",
            "tool-output-denied" => "output-denied",
            "tool-approval-request" => "approval-requested",
            _ => return,
        };
        let call = text("toolCallId");
        if kind == "tool-approval-request" {
            self.approvals.push(call.to_string());
        }
        let known = self
            .parts
            .iter()
            .rposition(|p| matches!(p, Part::Tool { id, .. } if id == call));
        let at = match known {
            Some(at) => at,
            // A call is first seen by its input.
            None if kind.starts_with("tool-input") => {
                self.parts.push(Part::Tool {
                    id: call.to_string(),
                    name: text("toolName").to_string(),
                    state,
                    input: Value::Null,
                    error: None,
                });
                self.parts.len() - 1
            }
            None => return,
        };
        if let Some(Part::Tool {
            state: now,
            input,
            error,
            ..
        }) = self.parts.get_mut(at)
        {
            *now = state;
            match kind {
                "tool-input-available" => *input = chunk["input"].clone(),
                "tool-output-error" => *error = chunk["errorText"].as_str().map(str::to_string),
                _ => {}
            }
        }
        self.changed = true;
    }

    /// Whether a part was added or changed state since last asked (text growing is not).
    pub fn take_changed(&mut self) -> bool {
        std::mem::take(&mut self.changed)
    }

    /// About how many bytes [`Progress::shown`] re-sends: its text, a little per part, its
    /// typed answer.
    pub fn weight(&self) -> usize {
        self.output_len
            + self
                .parts
                .iter()
                .map(|p| match p {
                    Part::Text { text, .. } => text.len(),
                    Part::Tool { .. } => SHOWN_INPUT_BYTES,
                })
                .sum::<usize>()
    }

    /// The child's message as it forms: the agent tool's preliminary output. Its tool parts
    /// show their state and input (cut to `SHOWN_INPUT_BYTES`) but not their outputs, which
    /// may be large and are in the child's conversation: each show re-sends the whole message.
    pub fn shown(&self, conversation_id: &str, agent: &str) -> Value {
        let parts: Vec<Value> = self
            .parts
            .iter()
            .map(|p| match p {
                Part::Text { text, .. } => json!({"type": "text", "text": text}),
                Part::Tool {
                    id,
                    name,
                    state,
                    input,
                    error,
                } => {
                    let mut part =
                        json!({"type": format!("tool-{name}"), "toolCallId": id, "state": state});
                    if !input.is_null() {
                        let text = input.to_string();
                        part["input"] = if text.len() > SHOWN_INPUT_BYTES {
                            let cut = crate::agent::text::clip(&text, SHOWN_INPUT_BYTES);
                            format!("{cut}…").into()
                        } else {
                            input.clone()
                        };
                    }
                    if let Some(error) = error {
                        part["errorText"] = error.as_str().into();
                    }
                    part
                }
            })
            .collect();
        let mut shown = json!({
            "conversation_id": conversation_id,
            "agent": agent,
            "status": "streaming",
            "parts": parts,
        });
        if let Some(output) = &self.output {
            shown["output"] = output.clone();
        }
        shown
    }

    /// The calls the turn paused to have approved: `{tool_call_id, tool, input}` each, as far
    /// as the stream showed them (a sub-agent's call, `<call>/<child call>`, comes with its id
    /// alone).
    pub fn awaiting(&self) -> Vec<Value> {
        self.approvals
            .iter()
            .map(|id| {
                let shown = self.parts.iter().find_map(|p| match p {
                    Part::Tool {
                        id: i, name, input, ..
                    } if i == id => Some((name.as_str(), input)),
                    _ => None,
                });
                match shown {
                    Some((name, input)) => {
                        json!({"tool_call_id": id, "tool": name, "input": input})
                    }
                    None => json!({"tool_call_id": id, "tool": null, "input": null}),
                }
            })
            .collect()
    }

    /// What the turn does now, in a few words: its latest part (a tool call's name and state,
    /// or that it writes its answer).
    pub fn doing(&self) -> String {
        match self.parts.last() {
            Some(Part::Tool { name, state, .. }) => match *state {
                "input-streaming" | "input-available" => format!("calling `{name}`"),
                "approval-requested" => format!("waiting for approval of `{name}`"),
                "output-error" => format!("`{name}` failed"),
                "output-denied" => format!("`{name}` was denied"),
                _ => format!("`{name}` answered"),
            },
            Some(Part::Text { .. }) => "writing".to_string(),
            None if self.output.is_some() => "forming its answer".to_string(),
            None => "thinking".to_string(),
        }
    }

    /// Whether the stream said how the turn ended.
    pub fn finished(&self) -> bool {
        self.finish.is_some()
    }

    /// Whether the child's turn paused for a person's approval of its calls.
    pub fn paused_for_approval(&self) -> bool {
        self.finish.as_deref() == Some("tool-calls") && !self.approvals.is_empty()
    }

    /// The call's result once the stream has ended: the child's answer (its text, or its typed
    /// answer's object), or why there is none.
    pub fn result(&self, agent: &str) -> Result<Value, String> {
        let error = |status, default: &str| {
            let message = match &self.error {
                Some(e) => format!("the agent `{agent}` failed: {e}"),
                None => default.to_string(),
            };
            Err(failure(status, &message))
        };
        let Some(finish) = self.finish.as_deref() else {
            return Err(failure(
                Status::Interrupted,
                &format!("the agent `{agent}`'s turn was cut off before it ended"),
            ));
        };
        if self.aborted {
            return Err(failure(
                Status::Cancelled,
                &format!("the agent `{agent}`'s turn was cancelled"),
            ));
        }
        match finish {
            "error" => error(Status::Error, &format!("the agent `{agent}` failed")),
            "length" => error(
                Status::LimitReached,
                &format!("the agent `{agent}` reached a limit before its answer was complete"),
            ),
            "tool-calls" => error(
                Status::Error,
                &format!("the agent `{agent}` stopped waiting on a tool"),
            ),
            _ => answer(agent, self.output.as_ref(), &self.answer),
        }
    }
}

/// A child's answer: its typed answer's object when it had one, else its text; never empty.
fn answer(agent: &str, output: Option<&Value>, text: &str) -> Result<Value, String> {
    match output {
        Some(output) if output["status"] == "complete" => Ok(output["object"].clone()),
        Some(output) => {
            let why = output["error"]["message"]
                .as_str()
                .unwrap_or("its answer did not fit its schema");
            Err(failure(
                Status::Error,
                &format!("the agent `{agent}` gave no valid typed answer: {why}"),
            ))
        }
        None if text.trim().is_empty() => Err(failure(
            Status::Error,
            &format!("the agent `{agent}` answered nothing"),
        )),
        None => Ok(Value::String(text.to_string())),
    }
}

/// The result of a child's turn that ended before it was read (read back from its history,
/// after a crash or a re-dispatch): its last answer.
pub fn stored_result(agent: &str, last: Option<&AssistantMessage>) -> Result<Value, String> {
    let Some(last) = last else {
        return Err(failure(
            Status::Error,
            &format!("the agent `{agent}` stored no answer"),
        ));
    };
    let ended = |status, what: &str| Err(failure(status, &format!("the agent `{agent}` {what}")));
    match &last.stop_reason {
        StopReason::Aborted => ended(Status::Cancelled, "was cancelled"),
        StopReason::Error => ended(Status::Error, "failed"),
        StopReason::Interrupted => ended(Status::Interrupted, "was cut off"),
        StopReason::MaxTokens => ended(Status::LimitReached, "reached its token limit"),
        StopReason::ToolUse => ended(Status::LimitReached, "ended its turn before answering"),
        _ => answer(agent, last.output.as_ref(), &last.text()),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stream's chunks, folded.
    pub(crate) fn fold(chunks: &[Value]) -> Progress {
        let mut p = Progress::default();
        for c in chunks {
            p.apply(c);
        }
        p
    }

    fn failed(result: Result<Value, String>) -> Value {
        serde_json::from_str(&result.unwrap_err()).unwrap()
    }

    #[test]
    fn the_answer_is_the_last_step_s_text_and_the_parts_show_the_tools() {
        let p = fold(&[
            json!({"type": "start"}),
            json!({"type": "start-step"}),
            json!({"type": "text-start", "id": "t0"}),
            json!({"type": "text-delta", "id": "t0", "delta": "Let me look."}),
            json!({"type": "text-end", "id": "t0"}),
            json!({"type": "tool-input-start", "toolCallId": "c1", "toolName": "search"}),
            json!({"type": "tool-input-available", "toolCallId": "c1", "toolName": "search", "input": {"q": "x"}}),
            json!({"type": "tool-output-available", "toolCallId": "c1", "output": {"hits": 2}}),
            json!({"type": "finish-step"}),
            json!({"type": "start-step"}),
            json!({"type": "text-start", "id": "t0"}),
            json!({"type": "text-delta", "id": "t0", "delta": "Two "}),
            json!({"type": "text-delta", "id": "t0", "delta": "hits."}),
            json!({"type": "finish", "finishReason": "stop"}),
        ]);
        assert_eq!(p.result("r").unwrap(), json!("Two hits."));
        let shown = p.shown("c0", "r");
        assert_eq!(shown["parts"][0]["text"], "Let me look.");
        // A tool's output is left out of what is shown (it is in the child's conversation).
        assert_eq!(
            shown["parts"][1],
            json!({"type": "tool-search", "toolCallId": "c1", "state": "output-available",
                   "input": {"q": "x"}})
        );
        assert_eq!(shown["parts"][2]["text"], "Two hits.");
        assert_eq!(
            p.weight(),
            "Let me look.Two hits.".len() + SHOWN_INPUT_BYTES
        );
    }

    #[test]
    fn a_turn_that_ends_on_quiet_calls_answers_the_text_before_them() {
        // `update_memory` beside the answer: the stream closes with an empty step.
        let p = fold(&[
            json!({"type": "start-step"}),
            json!({"type": "text-start", "id": "t0"}),
            json!({"type": "text-delta", "id": "t0", "delta": "Noted: you like tea."}),
            json!({"type": "tool-input-available", "toolCallId": "m1", "toolName": "update_memory", "input": {}}),
            json!({"type": "tool-output-available", "toolCallId": "m1", "output": "ok"}),
            json!({"type": "finish-step"}),
            json!({"type": "start-step"}),
            json!({"type": "finish-step"}),
            json!({"type": "finish", "finishReason": "stop"}),
        ]);
        assert_eq!(p.result("r").unwrap(), json!("Noted: you like tea."));
        assert_eq!(p.doing(), "`update_memory` answered");
    }

    #[test]
    fn a_turn_paused_for_approval_names_the_calls_it_waits_on() {
        let p = fold(&[
            json!({"type": "start-step"}),
            json!({"type": "tool-input-available", "toolCallId": "c1", "toolName": "lookup", "input": {"q": "x"}}),
            json!({"type": "tool-output-available", "toolCallId": "c1", "output": 1}),
            json!({"type": "tool-input-available", "toolCallId": "c2", "toolName": "refund", "input": {"usd": 5}}),
            json!({"type": "tool-approval-request", "approvalId": "a2", "toolCallId": "c2"}),
            json!({"type": "finish", "finishReason": "tool-calls"}),
        ]);
        assert!(p.paused_for_approval());
        assert_eq!(
            p.awaiting(),
            vec![json!({"tool_call_id": "c2", "tool": "refund", "input": {"usd": 5}})]
        );
        assert_eq!(p.doing(), "waiting for approval of `refund`");
    }

    #[test]
    fn every_way_a_child_ends_without_an_answer_is_a_failure_the_model_can_act_on() {
        let start = || vec![json!({"type": "start"}), json!({"type": "start-step"})];
        let cut = fold(&start());
        assert_eq!(
            failed(cut.result("r")),
            json!({"ok": false, "status": "interrupted", "retryable": true,
                   "message": "the agent `r`'s turn was cut off before it ended"})
        );
        let mut chunks = start();
        chunks.extend([
            json!({"type": "abort", "reason": "cancelled"}),
            json!({"type": "finish", "finishReason": "other"}),
        ]);
        assert_eq!(failed(fold(&chunks).result("r"))["status"], "cancelled");
        assert_eq!(failed(fold(&chunks).result("r"))["retryable"], false);
        let mut chunks = start();
        chunks.extend([
            json!({"type": "error", "errorText": "provider down"}),
            json!({"type": "finish", "finishReason": "error"}),
        ]);
        let e = failed(fold(&chunks).result("r"));
        assert_eq!(
            (e["status"].as_str(), e["retryable"].as_bool()),
            (Some("error"), Some(true))
        );
        assert!(e["message"].as_str().unwrap().contains("provider down"));
        let mut chunks = start();
        chunks.push(json!({"type": "finish", "finishReason": "length"}));
        assert_eq!(failed(fold(&chunks).result("r"))["status"], "limit_reached");
        let mut chunks = start();
        chunks.extend([
            json!({"type": "tool-input-available", "toolCallId": "c9", "toolName": "wire", "input": {}}),
            json!({"type": "tool-approval-request", "approvalId": "c9", "toolCallId": "c9"}),
            json!({"type": "finish", "finishReason": "tool-calls"}),
        ]);
        let waiting = fold(&chunks);
        assert_eq!(
            waiting.shown("x", "r")["parts"][0]["state"],
            "approval-requested"
        );
        assert!(waiting.paused_for_approval());
        // Never an empty success.
        let mut chunks = start();
        chunks.push(json!({"type": "finish", "finishReason": "stop"}));
        assert_eq!(
            failed(fold(&chunks).result("r"))["message"],
            "the agent `r` answered nothing"
        );
    }

    #[test]
    fn a_typed_child_answers_its_object() {
        let mut chunks = vec![json!({"type": "start"})];
        chunks.push(json!({"type": "data-output", "id": "output:m", "data": {"status": "streaming", "partial": {"a": 1}}}));
        chunks.push(json!({"type": "data-output", "id": "output:m", "data": {"status": "complete", "object": {"a": 1, "b": 2}}}));
        chunks.push(json!({"type": "finish", "finishReason": "stop"}));
        let p = fold(&chunks);
        assert_eq!(p.result("r").unwrap(), json!({"a": 1, "b": 2}));
        assert_eq!(p.shown("x", "r")["output"]["status"], "complete");
        let bad = json!({"status": "error", "error": {"type": "no_object_generated", "message": "missing `b`"}});
        chunks[2]["data"] = bad;
        assert!(failed(fold(&chunks).result("r"))["message"]
            .as_str()
            .unwrap()
            .contains("missing `b`"));
    }

    #[test]
    fn a_stored_answer_reads_as_the_streamed_one_would() {
        let mut answer = AssistantMessage {
            content: vec![crate::llm::ContentBlock::Text {
                text: "done".into(),
            }],
            stop_reason: StopReason::EndTurn,
            model: "m".into(),
            provider: "p".into(),
            usage: Default::default(),
            output: None,
        };
        assert_eq!(stored_result("r", Some(&answer)).unwrap(), json!("done"));
        answer.stop_reason = StopReason::Aborted;
        assert_eq!(
            failed(stored_result("r", Some(&answer)))["status"],
            "cancelled"
        );
        assert_eq!(failed(stored_result("r", None))["status"], "error");
    }
}
