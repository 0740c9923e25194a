//! History normalisation before any provider: what makes replaying a conversation to a
//! different provider (a model switch or a fallback mid-conversation) always produce a request
//! that provider accepts.
//!
//! - Reasoning from another model becomes plain text; its signatures, encrypted reasoning and
//!   signature-only blocks are dropped (they are only valid for the model that made them).
//! - Tool-call ids are rewritten to what the target allows (Anthropic: `[a-zA-Z0-9_-]{1,64}`;
//!   OpenAI: at most 40 characters), the same way on the call and on its result.
//! - A tool call without a result gets a synthetic error result; a result without its call is
//!   dropped.
//! - Assistant messages that ended in an error or were aborted are dropped.
//! - A file the target cannot see (an image for a text-only model, a PDF for a provider that
//!   reads none) becomes a short note saying what was attached.
//!
//! Merging consecutive same-role messages is left to the encoders of the providers that need
//! alternation (Anthropic, Gemini), since only they know their roles.

use std::collections::{HashMap, HashSet};

use super::capabilities::Capabilities;
use super::{ContentBlock, Message, ModelRef, StopReason, ToolResult};

/// The result content given to a tool call that never got one.
pub const NO_RESULT: &str = "No result provided: the call was interrupted.";

/// `messages` prepared for `target`, a model with `sees`. They are taken, not copied: what needs
/// no change is moved into the result, since a turn's history is converted for each LLM call
/// and can be long.
pub fn prepare_for(messages: Vec<Message>, target: &ModelRef, sees: &Capabilities) -> Vec<Message> {
    let kept = |m: &Message| match m {
        Message::Assistant(a) => !matches!(
            a.stop_reason,
            StopReason::Error | StopReason::Aborted | StopReason::Interrupted
        ),
        _ => true,
    };
    // Ids of calls that survive, and what they become for the target.
    let mut ids = IdMap::new(target);
    for message in messages.iter().filter(|m| kept(m)) {
        if let Message::Assistant(a) = message {
            for call in a.tool_calls() {
                ids.map(&call.id);
            }
        }
    }

    let mut out: Vec<Message> = Vec::with_capacity(messages.len());
    let mut pending: Vec<(String, String)> = Vec::new(); // (new id, tool name) awaiting a result
    for message in messages.into_iter().filter(kept) {
        match message {
            Message::ToolResult(mut r) => {
                let Some(id) = ids.get(&r.tool_call_id) else {
                    continue; // its call was dropped
                };
                let Some(at) = pending.iter().position(|(p, _)| p == id) else {
                    continue; // a second result for the same call
                };
                pending.remove(at);
                if r.tool_call_id != id {
                    r.tool_call_id = id.to_string();
                }
                out.push(Message::ToolResult(r));
            }
            Message::User { mut content } => {
                close_pending(&mut out, &mut pending);
                for block in content.iter_mut() {
                    if let ContentBlock::File(file) = block {
                        if !file.seen_by(&target.provider, sees) {
                            *block = ContentBlock::Text {
                                text: file.unseen_note(),
                            };
                        }
                    }
                }
                out.push(Message::User { content });
            }
            Message::Assistant(mut answer) => {
                close_pending(&mut out, &mut pending);
                let same_model = answer.provider == target.provider && answer.model == target.model;
                answer.content = std::mem::take(&mut answer.content)
                    .into_iter()
                    .filter_map(|block| match block {
                        ContentBlock::ToolUse(mut call) => {
                            if let Some(id) = ids.get(&call.id).filter(|id| *id != call.id) {
                                call.id = id.to_string();
                            }
                            if !same_model {
                                call.signature = None;
                            }
                            pending.push((call.id.clone(), call.name.clone()));
                            Some(ContentBlock::ToolUse(call))
                        }
                        block if same_model => Some(block),
                        ContentBlock::Thinking { thinking, .. } if !thinking.trim().is_empty() => {
                            Some(ContentBlock::Text { text: thinking })
                        }
                        ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. } => {
                            None
                        }
                        block @ ContentBlock::Text { .. } => Some(block),
                        // Only users attach files.
                        ContentBlock::File(_) => None,
                    })
                    .collect();
                out.push(Message::Assistant(answer));
            }
        }
    }
    close_pending(&mut out, &mut pending);
    out
}

fn close_pending(out: &mut Vec<Message>, pending: &mut Vec<(String, String)>) {
    for (id, name) in pending.drain(..) {
        out.push(Message::ToolResult(ToolResult {
            tool_call_id: id,
            tool_name: name,
            content: NO_RESULT.to_string(),
            is_error: true,
        }));
    }
}

/// Tool-call ids as the target accepts them, rewritten consistently and kept unique.
struct IdMap {
    max_len: usize,
    rewrite: bool,
    map: HashMap<String, String>,
    used: HashSet<String>,
}

impl IdMap {
    fn new(target: &ModelRef) -> Self {
        let (rewrite, max_len) = match target.provider.as_str() {
            "anthropic" => (true, 64),
            "openai" => (true, 40),
            // Gemini and Ollama match results by name or position; ids never reach them.
            _ => (false, usize::MAX),
        };
        Self {
            max_len,
            rewrite,
            map: HashMap::new(),
            used: HashSet::new(),
        }
    }

    fn map(&mut self, id: &str) {
        if self.map.contains_key(id) {
            return;
        }
        let mut new: String = if self.rewrite {
            id.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .take(self.max_len)
                .collect()
        } else {
            id.to_string()
        };
        if new.is_empty() {
            new.push_str("call");
        }
        // Truncation or replacement can collide: add a counter, within the length limit.
        let base = new.clone();
        let mut n = 1;
        while self.used.contains(&new) {
            let suffix = format!("_{n}");
            let keep = base.len().min(self.max_len.saturating_sub(suffix.len()));
            new = format!("{}{suffix}", &base[..keep]);
            n += 1;
        }
        self.used.insert(new.clone());
        self.map.insert(id.to_string(), new);
    }

    fn get(&self, id: &str) -> Option<&str> {
        self.map.get(id).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{AssistantMessage, ToolCall, Usage};
    use serde_json::json;

    fn assistant(
        provider: &str,
        model: &str,
        content: Vec<ContentBlock>,
        stop: StopReason,
    ) -> Message {
        Message::Assistant(AssistantMessage {
            content,
            stop_reason: stop,
            model: model.into(),
            provider: provider.into(),
            usage: Usage::default(),
            output: None,
        })
    }

    fn call(id: &str, signature: Option<&str>) -> ContentBlock {
        ContentBlock::ToolUse(ToolCall {
            id: id.into(),
            name: "t".into(),
            input: json!({}),
            signature: signature.map(Into::into),
        })
    }

    fn result(id: &str) -> Message {
        Message::ToolResult(ToolResult {
            tool_call_id: id.into(),
            tool_name: "t".into(),
            content: "ok".into(),
            is_error: false,
        })
    }

    #[test]
    fn foreign_thinking_becomes_text_and_signatures_go() {
        let history = vec![
            Message::user_text("q"),
            assistant(
                "gemini",
                "gemini-3-pro",
                vec![
                    ContentBlock::Thinking {
                        thinking: "let me think".into(),
                        signature: Some("g-sig".into()),
                    },
                    ContentBlock::Thinking {
                        thinking: String::new(),
                        signature: Some("g-sig2".into()),
                    },
                    ContentBlock::RedactedThinking { data: "xx".into() },
                    call("call_1_0", Some("g-sig3")),
                ],
                StopReason::ToolUse,
            ),
            result("call_1_0"),
        ];
        let out = prepare_for(
            history.clone(),
            &ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap(),
            &VISION,
        );
        let Message::Assistant(a) = &out[1] else {
            panic!()
        };
        assert_eq!(
            a.content[0],
            ContentBlock::Text {
                text: "let me think".into()
            }
        );
        assert_eq!(a.content.len(), 2);
        assert!(matches!(&a.content[1], ContentBlock::ToolUse(c) if c.signature.is_none()));
        // The same model keeps everything.
        let same = prepare_for(
            history.clone(),
            &ModelRef::parse("gemini:gemini-3-pro").unwrap(),
            &VISION,
        );
        assert_eq!(same, history);
    }

    #[test]
    fn ids_are_rewritten_consistently_and_stay_unique() {
        let long = "x".repeat(70);
        let history = vec![
            Message::user_text("q"),
            assistant(
                "ollama",
                "m",
                vec![
                    call("call.1:a", None),
                    call("call.1/a", None),
                    call(&long, None),
                ],
                StopReason::ToolUse,
            ),
            result("call.1:a"),
            result("call.1/a"),
            result(&long),
        ];
        let out = prepare_for(history, &ModelRef::parse("openai:gpt-4o").unwrap(), &VISION);
        let Message::Assistant(a) = &out[1] else {
            panic!()
        };
        let ids: Vec<&str> = a.tool_calls().map(|c| c.id.as_str()).collect();
        assert_eq!(ids[0], "call_1_a");
        assert_eq!(ids[1], "call_1_a_1");
        assert_eq!(ids[2].len(), 40);
        let results: Vec<&str> = out[2..]
            .iter()
            .map(|m| match m {
                Message::ToolResult(r) => r.tool_call_id.as_str(),
                _ => "",
            })
            .collect();
        assert_eq!(results, ids);
    }

    #[test]
    fn orphans_get_results_and_failed_answers_are_dropped() {
        let history = vec![
            Message::user_text("q"),
            assistant(
                "anthropic",
                "m",
                vec![call("a", None), call("b", None)],
                StopReason::ToolUse,
            ),
            result("a"),
            Message::user_text("new question"),
            assistant(
                "anthropic",
                "m",
                vec![
                    ContentBlock::Text {
                        text: "partial".into(),
                    },
                    call("c", None),
                ],
                StopReason::Error,
            ),
            result("c"),
            assistant(
                "anthropic",
                "m",
                vec![ContentBlock::Text { text: "cut".into() }],
                StopReason::Aborted,
            ),
            Message::user_text("again"),
        ];
        let out = prepare_for(history, &ModelRef::parse("anthropic:m").unwrap(), &VISION);
        let kinds: Vec<String> = out
            .iter()
            .map(|m| match m {
                Message::User { .. } => "user".to_string(),
                Message::Assistant(_) => "assistant".to_string(),
                Message::ToolResult(r) => format!("result {} {}", r.tool_call_id, r.is_error),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "user",
                "assistant",
                "result a false",
                "result b true",
                "user",
                "user"
            ]
        );
    }

    #[test]
    fn a_file_the_target_cannot_see_becomes_a_note_and_the_rest_stay() {
        let file = |media_type: &str, name: &str| {
            ContentBlock::File(crate::llm::Attachment {
                id: name.into(),
                media_type: media_type.into(),
                size: 2048,
                name: Some(name.into()),
                width: None,
                height: None,
                pages: None,
                data: Some(crate::llm::FileData::Base64("AAAA".into())),
            })
        };
        let history = vec![Message::User {
            content: vec![
                ContentBlock::Text {
                    text: "look".into(),
                },
                file("image/png", "a.png"),
                file("application/pdf", "b.pdf"),
                file("text/plain", "c.txt"),
            ],
        }];
        let blocks = |out: Vec<Message>| match out.into_iter().next() {
            Some(Message::User { content }) => content,
            other => panic!("{other:?}"),
        };
        // A vision model of a provider that reads PDFs keeps all three as files.
        let anthropic = ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap();
        assert_eq!(
            blocks(prepare_for(history.clone(), &anthropic, &VISION)),
            blocks(history.clone())
        );
        // Ollama with vision: the image stays, the PDF becomes a note.
        let ollama = ModelRef::parse("ollama:llava").unwrap();
        let out = blocks(prepare_for(history.clone(), &ollama, &VISION));
        assert!(matches!(&out[1], ContentBlock::File(f) if f.id == "a.png"));
        assert_eq!(
            out[2],
            ContentBlock::Text {
                text: "[The user attached \"b.pdf\" (application/pdf, 2 KB); this model cannot \
                       read PDFs, so it is not shown.]"
                    .into()
            }
        );
        // A text-only model: only the text file is left as a file.
        let text_only = Capabilities {
            vision: false,
            ..VISION
        };
        let out = blocks(prepare_for(history, &ollama, &text_only));
        assert!(
            matches!(&out[1], ContentBlock::Text { text } if text.contains("cannot see images"))
        );
        assert!(matches!(&out[3], ContentBlock::File(f) if f.id == "c.txt"));
    }

    const VISION: Capabilities = Capabilities {
        tools: true,
        thinking: true,
        vision: true,
        structured_output: false,
    };
}
