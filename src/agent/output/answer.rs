//! A turn's typed answer as the loop asks for it and reads it: the form each call takes, the
//! answer parsed as it streams (shown at most every [`SHOW_EVERY`], and only when the parse
//! changed), and the check at the end: local repair (prose or a fence around the JSON, a cut-off
//! tail), then at most one repair call told what was wrong, then `on_invalid`.
//!
//! What the loop does with it is in `agent::turn`; what a reader sees is
//! [`AgentEvent::Output`](crate::agent::AgentEvent): the answer's state, `{status: "streaming",
//! partial}`, then `{status: "complete", object}` or `{status: "error", error: {type, message},
//! raw}`, which is also kept on the answer's message (`AssistantMessage::output`).

use std::rc::Rc;

use serde_json::{json, Value};
use web_time::{Duration, Instant};

use super::form::{answer_tool, form, instruction, Form};
use super::partial::PartialJson;
use super::spec::{unstrict, Kind, OnInvalid, OutputSpec, Strategy};
use crate::agent::schema::{problems, problems_in};
use crate::agent::AgentEvent;
use crate::llm::types::{answer_tool_instruction, system_with};
use crate::llm::{
    AnswerFormat, AssistantMessage, ContentBlock, LlmEvent, Message, StopReason, ToolDef,
};

/// How often a forming answer is shown at most.
pub const SHOW_EVERY: Duration = Duration::from_millis(50);

/// The error type of an answer no valid object could be made of.
pub const NO_OBJECT: &str = "no_object_generated";

/// The typed answer of one turn.
pub struct Answering {
    spec: Rc<OutputSpec>,
    /// The invalid answer and what the repair call is told, until that call is made.
    repair: Option<(AssistantMessage, String)>,
    repaired: bool,
    /// The one step past the step limit has been given.
    extra_step: bool,
    /// The form of the call being made.
    form: Option<Form>,
    forced: bool,
    /// The call being made has the turn's tools off: any other call it makes never runs.
    tools_off: bool,
    /// What the answer adds to a call's prompt, estimated once (the schema, as a tool or a
    /// response format or an instruction).
    schema_tokens: u64,
}

/// One call's answer as it streams: parsed as it comes, shown as it forms.
pub struct Watch {
    spec: Rc<OutputSpec>,
    /// What carries the answer: the text, or the answer tool's input.
    in_text: bool,
    parser: PartialJson,
    /// The answer tool's call's place in the answer being streamed (tool form).
    tool_index: Option<usize>,
    shown: Option<Instant>,
    /// The bytes read when the answer was last shown.
    read_at_show: usize,
    /// Elements of an `array` answer shown as complete so far.
    elements_shown: usize,
}

/// Below this many bytes read, a changed answer is shown every [`SHOW_EVERY`]; past it, only
/// once it has grown by a sixteenth since it was last shown, so the bytes re-sent stay within
/// a small multiple of the answer's size however long it grows.
const SMALL_ANSWER: usize = 2_048;

/// What the end of a call means for the answer.
#[derive(Debug, PartialEq)]
pub enum Settled {
    /// The model called tools: the turn goes on.
    NotFinal,
    /// Invalid: one more call, told why (the answer is not kept).
    Repair,
    /// The answer's end state, to keep on the message.
    Done(Value),
}

impl Answering {
    pub fn new(spec: Rc<OutputSpec>) -> Self {
        Self {
            repair: None,
            repaired: false,
            extra_step: false,
            form: None,
            forced: false,
            tools_off: false,
            schema_tokens: crate::agent::estimate::estimate_tokens(&spec_text(&spec)),
            spec,
        }
    }

    /// What the answer adds to a call's prompt beyond the turn's own: its schema, and on the
    /// repair call the invalid answer and the note.
    pub fn extra_tokens(&self) -> u64 {
        self.schema_tokens
            + self.repair.as_ref().map_or(0, |(answer, note)| {
                crate::agent::estimate::estimate_tokens(&answer.text())
                    + crate::agent::estimate::estimate_tokens(note)
            })
    }

    /// Whether a call may be made past the step limit, with tools off: the repair call, or
    /// once, an answer for a turn whose steps ran out on a tool call.
    pub fn past_limit(&mut self) -> bool {
        if self.repair.is_some() {
            return true;
        }
        !std::mem::replace(&mut self.extra_step, true)
    }

    /// Whether the next call is the repair call (made with tools off).
    pub fn repairing(&self) -> bool {
        self.repair.is_some()
    }

    /// Shapes the next call: its tools (`definitions`, the answer tool added in the tool form)
    /// for `provider`; `native_model`: the model has its provider's structured output;
    /// `tools_off`: the turn's tools were taken off this call (the history may hold their
    /// calls). An error says why this provider cannot answer so.
    pub fn begin_call(
        &mut self,
        provider: &str,
        native_model: bool,
        definitions: &mut Vec<ToolDef>,
        tools_off: bool,
    ) -> Result<Watch, String> {
        // In every form: a call of the answer's name is read as the answer (a fallback model
        // may be asked in another form), so no tool may have it.
        if definitions.iter().any(|t| t.name == self.spec.name) {
            return Err(format!(
                "a tool is named `{}` like the typed answer: give `output.name` another name",
                self.spec.name
            ));
        }
        let mut chosen = form(&self.spec, provider, !definitions.is_empty(), native_model)?;
        // Claude refuses a request whose history holds tool calls but which defines no tool:
        // with the tools off, the answer comes as the (forced) answer tool's input.
        if tools_off && provider == "anthropic" && self.spec.strategy != Strategy::Prompt {
            chosen = Form::Tool;
        }
        self.forced = false;
        self.tools_off = tools_off;
        if chosen == Form::Tool {
            // Forced only when it is the only tool: otherwise the model could use no other.
            self.forced = definitions.is_empty();
            definitions.push(answer_tool(&self.spec));
        }
        let in_text = chosen != Form::Tool;
        self.form = Some(chosen);
        Ok(Watch {
            spec: self.spec.clone(),
            in_text,
            parser: PartialJson::new(),
            tool_index: None,
            shown: None,
            read_at_show: 0,
            elements_shown: 0,
        })
    }

    /// The call's system prompt, when the form adds to it.
    pub fn system(&self, base: Option<&str>) -> Option<String> {
        let added = match &self.form {
            Some(Form::Prompt) => instruction(&self.spec),
            Some(Form::Tool) if !self.forced => answer_tool_instruction(&self.spec.name),
            _ => return None,
        };
        Some(system_with(base, &added))
    }

    /// How the call asks for the answer.
    pub fn format(&self) -> Option<AnswerFormat<'_>> {
        match &self.form {
            Some(Form::Native { schema, strict }) => Some(AnswerFormat::Schema {
                name: &self.spec.name,
                schema,
                strict: *strict,
            }),
            Some(Form::Tool) if self.forced => Some(AnswerFormat::Tool {
                name: &self.spec.name,
            }),
            Some(Form::Tool) => Some(AnswerFormat::Offered {
                name: &self.spec.name,
            }),
            _ => None,
        }
    }

    /// The repair call's view of the history: the invalid answer, then what was wrong with it.
    /// Neither is kept.
    pub fn extend_history(&self, history: &mut Vec<Message>) {
        if let Some((answer, note)) = &self.repair {
            history.push(Message::Assistant(answer.clone()));
            history.push(Message::user_text(note.clone()));
        }
    }

    /// An answer kept as it was cut short (cancelled, failed): a call of the answer tool in it
    /// becomes its text, so it is never taken for a tool call waiting for a result.
    pub fn strip(&self, answer: &mut AssistantMessage) {
        for block in &mut answer.content {
            if let ContentBlock::ToolUse(call) = block {
                if call.name == self.spec.name {
                    let text = match &call.input {
                        // An input that could not be read comes as the text the model wrote.
                        Value::String(text) => text.clone(),
                        input => input.to_string(),
                    };
                    *block = ContentBlock::Text { text };
                }
            }
        }
    }

    /// The end of a call: whether `answer` is the typed answer, and if it is, whether it is
    /// valid. The answer tool's call becomes the answer's text (it never runs, and no other
    /// call of that step does).
    pub fn settle(
        &mut self,
        answer: &mut AssistantMessage,
        watch: &mut Watch,
        emit: &mut dyn FnMut(AgentEvent<'_>),
    ) -> Settled {
        let repairing = self.repair.take().is_some();
        let answered = answer
            .tool_calls()
            .find(|c| c.name == self.spec.name)
            .map(|c| c.input.clone());
        let called = answer.tool_calls().next().is_some();
        if answered.is_none() && called && !self.tools_off {
            return Settled::NotFinal;
        }
        // The answer (its tool's call, or its text): no call of this step runs, the answer's
        // becomes its text, and calls made with the tools off are dropped.
        let cut_off = answer.stop_reason == StopReason::MaxTokens;
        answer
            .content
            .retain(|b| !matches!(b, ContentBlock::ToolUse(_)));
        if called && !cut_off {
            answer.stop_reason = StopReason::EndTurn;
        }
        let (raw, candidate) = match answered {
            Some(input) => {
                let raw = input.to_string();
                answer
                    .content
                    .push(ContentBlock::Text { text: raw.clone() });
                (raw, Ok(input))
            }
            None => {
                let text = answer.text();
                let read = read_text(&text);
                (text, read)
            }
        };
        // Closing a cut-off answer would pass a cut-off string as a whole one.
        let candidate = match candidate {
            Ok(_) if cut_off => Err("the answer was cut off at the output token limit".into()),
            other => other,
        };
        let strict = matches!(self.form, Some(Form::Native { strict: true, .. }));
        let checked = candidate.and_then(|value| {
            let value = if strict {
                unstrict(&self.spec.schema, value)
            } else {
                value
            };
            let found = problems(&self.spec.schema, &value);
            if found.is_empty() {
                return Ok(value);
            }
            let said: Vec<String> = found
                .iter()
                .map(|p| match p.pointer.as_str() {
                    "" => p.message.clone(),
                    at => format!("at {at}: {}", p.message),
                })
                .collect();
            Err(format!(
                "the answer does not match its schema: {}",
                said.join("; ")
            ))
        });
        let state = match checked {
            Ok(value) => {
                let object = self.spec.unwrap(value);
                if let (Kind::Array, Some(elements)) = (self.spec.kind, object.as_array()) {
                    watch.show_elements(elements, emit);
                }
                json!({"status": "complete", "object": object})
            }
            Err(why)
                if self.spec.on_invalid == OnInvalid::Repair && !repairing && !self.repaired =>
            {
                self.repaired = true;
                // How to give it is the next call's form (which may differ: no tools on it).
                let note = format!(
                    "Your answer could not be used: {why}. Give the whole answer again, \
                     corrected."
                );
                self.repair = Some((answer.clone(), note));
                return Settled::Repair;
            }
            Err(why) => match (&self.spec.on_invalid, &self.spec.fallback) {
                (OnInvalid::Fallback, Some(fallback)) => {
                    json!({"status": "complete", "object": fallback, "fallback": true})
                }
                _ => json!({
                    "status": "error",
                    "error": {"type": NO_OBJECT, "message": why},
                    "raw": raw,
                }),
            },
        };
        Settled::Done(state)
    }
}

/// The JSON object in an answer's text: the text around it (a fence, a sentence) left out, a
/// cut-off tail closed.
fn read_text(text: &str) -> Result<Value, String> {
    let mut parser = PartialJson::new();
    parser.push(text.as_bytes());
    if let Some(e) = parser.error() {
        return Err(format!("the answer is not JSON: {e}"));
    }
    match parser.span() {
        // Strictly: the parser reads separators loosely.
        Some(span) => crate::llm::json::from_str(&text[span])
            .map_err(|e| format!("the answer is not JSON: {e}")),
        None => parser
            .value()
            .ok_or_else(|| "the answer holds no JSON object".to_string()),
    }
}

impl Watch {
    /// Reads a streamed event: the answer's text (or its tool's input) extends the parse, and
    /// a changed parse is shown when [`SHOW_EVERY`] has passed.
    pub fn observe(&mut self, event: &LlmEvent, emit: &mut dyn FnMut(AgentEvent<'_>)) {
        let piece = match event {
            LlmEvent::TextDelta { delta, .. } if self.in_text => delta.as_str(),
            // In any form (a fallback model may have been asked for the tool): the answer is
            // the call's input from here on.
            LlmEvent::ToolCallStart { index, name, .. } if *name == self.spec.name => {
                self.in_text = false;
                self.tool_index = Some(*index);
                self.parser = PartialJson::new();
                return;
            }
            LlmEvent::ToolCallDelta { index, delta } if self.tool_index == Some(*index) => {
                delta.as_str()
            }
            // A provider that sends a call's input whole (Gemini, Ollama) sends it here.
            LlmEvent::ToolCallEnd { index, input, .. }
                if self.tool_index == Some(*index) && self.parser.span().is_none() =>
            {
                self.parser = PartialJson::new();
                self.parser.push(input.to_string().as_bytes());
                self.show(emit);
                return;
            }
            _ => return,
        };
        self.parser.push(piece.as_bytes());
        // A change not yet due stays marked, shown with the next piece that is.
        if self.parser.changed() && self.due() {
            self.show(emit);
        }
    }

    /// Whether a changed answer may be shown again: the first time at once, then after
    /// [`SHOW_EVERY`] and, past [`SMALL_ANSWER`], once it has grown by a sixteenth.
    fn due(&self) -> bool {
        let Some(at) = self.shown else {
            return true;
        };
        let read = self.parser.bytes_read();
        let grown = read.saturating_sub(self.read_at_show) >= self.read_at_show / 16;
        (self.read_at_show < SMALL_ANSWER || grown) && at.elapsed() >= SHOW_EVERY
    }

    fn show(&mut self, emit: &mut dyn FnMut(AgentEvent<'_>)) {
        let Some(partial) = self.parser.value() else {
            return;
        };
        self.shown = Some(Instant::now());
        self.read_at_show = self.parser.bytes_read();
        self.parser.take_changed();
        if self.spec.kind == Kind::Array {
            // Every element but the last is whole (the last may still be forming).
            let done = self.parser.done().is_some();
            if let Some(elements) = partial.get("elements").and_then(Value::as_array) {
                let whole = if done {
                    elements.len()
                } else {
                    elements.len().saturating_sub(1)
                };
                self.show_elements(&elements[..whole], emit);
            }
        }
        let state = json!({"status": "streaming", "partial": self.spec.unwrap(partial)});
        emit(AgentEvent::Output(&state));
    }

    /// Shows the elements past those shown already that are valid on their own.
    fn show_elements(&mut self, elements: &[Value], emit: &mut dyn FnMut(AgentEvent<'_>)) {
        let item = &self.spec.schema["properties"]["elements"]["items"];
        for (index, element) in elements.iter().enumerate().skip(self.elements_shown) {
            if !problems_in(&self.spec.schema, item, element).is_empty() {
                // Not shown, and no later one is either: their places would not be theirs.
                return;
            }
            emit(AgentEvent::OutputElement {
                index,
                value: element,
            });
            self.elements_shown = index + 1;
        }
    }
}

/// The schema as the model reads it, for the estimate of what it adds to a call.
fn spec_text(spec: &OutputSpec) -> String {
    serde_json::to_string(&spec.schema).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watch() -> Watch {
        let spec = OutputSpec::parse(&json!({"type": "json"})).unwrap();
        Watch {
            spec: Rc::new(spec),
            in_text: true,
            parser: PartialJson::new(),
            tool_index: None,
            shown: None,
            read_at_show: 0,
            elements_shown: 0,
        }
    }

    #[test]
    fn a_long_answer_is_shown_again_only_once_it_has_grown_by_a_sixteenth() {
        let mut w = watch();
        assert!(w.due(), "the first change is shown at once");
        let long_ago = Instant::now().checked_sub(Duration::from_secs(1));
        w.parser.push(br#"{"a": ""#);
        w.parser.push(&[b'x'; 4096]);
        w.read_at_show = w.parser.bytes_read();
        w.shown = long_ago;
        // 4 KB shown: 100 bytes more are not enough, 300 are.
        w.parser.push(&[b'x'; 100]);
        assert!(!w.due());
        w.parser.push(&[b'x'; 200]);
        assert!(w.due());
        // A small answer is shown every 50 ms, however little it grew; never sooner.
        let mut small = watch();
        small.parser.push(br#"{"a": "xy"#);
        small.read_at_show = 3;
        small.shown = long_ago;
        assert!(small.due());
        small.shown = Some(Instant::now());
        assert!(!small.due());
    }

    #[test]
    fn each_piece_is_read_once_and_shown_forming_then_whole() {
        let mut w = watch();
        let mut shown = Vec::new();
        let mut emit = |e: AgentEvent<'_>| {
            if let AgentEvent::Output(state) = e {
                shown.push(state.clone());
            }
        };
        for piece in [r#"{"ci"#, r#"ty": "Pa"#, r#"ris"}"#] {
            w.observe(
                &LlmEvent::TextDelta {
                    index: 0,
                    delta: piece.into(),
                },
                &mut emit,
            );
        }
        // The first change at once; the rest within 50 ms of it are not due.
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0]["status"], "streaming");
        assert_eq!(w.parser.bytes_read(), r#"{"city": "Paris"}"#.len());
    }
}
