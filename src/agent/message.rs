//! `AgentMessage`: the application's superset of LLM messages, and the filter to the LLM's view.

use serde::Serialize;

use crate::llm::json::{self, FromJson, Reader};
use crate::llm::{AssistantMessage, ContentBlock, Message, StopReason, ToolResult, Usage};

/// One entry of a conversation's history. Its serde form is the stored form.
///
/// | kind | reaches the LLM |
/// |---|---|
/// | user, assistant, tool_result | as itself |
/// | summary, a schedule's system_event | as a user message |
/// | context_note, other system_events, tool_log | never |
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentMessage {
    User {
        content: Vec<ContentBlock>,
    },
    Assistant(AssistantMessage),
    ToolResult(ToolResult),
    /// Compacted earlier history.
    Summary {
        text: String,
    },
    /// Context for the application, e.g. "switched to the standard queue".
    ContextNote {
        text: String,
    },
    /// Notices such as a credit warning or a rate limit; with `schedule`, the instruction of
    /// the schedule that started the turn, which the model reads as the turn's reason.
    SystemEvent {
        text: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        schedule: Option<String>,
    },
    /// A server tool's execution log.
    ToolLog {
        text: String,
    },
}

/// Read through one flat struct (every field of every kind); `kind` picks the fields it needs.
impl<'a> FromJson<'a> for AgentMessage {
    fn read(r: &mut Reader<'a>) -> json::Result<Self> {
        struct Flat {
            kind: String,
            content: Option<Content>,
            stop_reason: Option<StopReason>,
            model: Option<String>,
            provider: Option<String>,
            usage: Option<Usage>,
            tool_call_id: Option<String>,
            tool_name: Option<String>,
            is_error: bool,
            text: Option<String>,
            schedule: Option<String>,
            output: Option<serde_json::Value>,
        }

        crate::json_struct!(Flat {
            "kind" => kind,
            "content" => content,
            "stop_reason" => stop_reason,
            "model" => model,
            "provider" => provider,
            "usage" => usage,
            "tool_call_id" => tool_call_id,
            "tool_name" => tool_name,
            "is_error" => is_error: default,
            "text" => text,
            "schedule" => schedule,
            "output" => output,
        });
        let flat = Flat::read(r)?;
        fn need<T>(r: &Reader<'_>, value: Option<T>, field: &str) -> json::Result<T> {
            value.ok_or_else(|| r.missing(field))
        }
        let blocks = |content: Option<Content>| match need(r, content, "content")? {
            Content::Blocks(blocks) => Ok(blocks),
            Content::Text(_) => Err(r.error("`content` must be a list of blocks")),
        };
        Ok(match flat.kind.as_str() {
            "user" => AgentMessage::User {
                content: blocks(flat.content)?,
            },
            "assistant" => AgentMessage::Assistant(AssistantMessage {
                content: blocks(flat.content)?,
                stop_reason: need(r, flat.stop_reason, "stop_reason")?,
                model: need(r, flat.model, "model")?,
                provider: need(r, flat.provider, "provider")?,
                usage: need(r, flat.usage, "usage")?,
                output: flat.output,
            }),
            "tool_result" => AgentMessage::ToolResult(ToolResult {
                tool_call_id: need(r, flat.tool_call_id, "tool_call_id")?,
                tool_name: need(r, flat.tool_name, "tool_name")?,
                content: match need(r, flat.content, "content")? {
                    Content::Text(text) => text,
                    Content::Blocks(_) => return Err(r.error("a tool result's `content` is text")),
                },
                is_error: flat.is_error,
            }),
            "summary" => AgentMessage::Summary {
                text: need(r, flat.text, "text")?,
            },
            "context_note" => AgentMessage::ContextNote {
                text: need(r, flat.text, "text")?,
            },
            "system_event" => AgentMessage::SystemEvent {
                text: need(r, flat.text, "text")?,
                schedule: flat.schedule,
            },
            "tool_log" => AgentMessage::ToolLog {
                text: need(r, flat.text, "text")?,
            },
            other => return Err(r.unknown_name("variant", other, KINDS)),
        })
    }
}

const KINDS: &[&str] = &[
    "user",
    "assistant",
    "tool_result",
    "summary",
    "context_note",
    "system_event",
    "tool_log",
];

/// `content`: blocks (user, assistant) or text (tool result).
enum Content {
    Text(String),
    Blocks(Vec<ContentBlock>),
}

impl<'a> FromJson<'a> for Content {
    fn read(r: &mut Reader<'a>) -> json::Result<Self> {
        match r.peek_kind()? {
            b'"' => String::read(r).map(Content::Text),
            b'[' => Vec::read(r).map(Content::Blocks),
            _ => Err(r.invalid_type("text or a list of content blocks")),
        }
    }
}

impl AgentMessage {
    pub fn user_text(text: impl Into<String>) -> Self {
        AgentMessage::User {
            content: vec![ContentBlock::Text { text: text.into() }],
        }
    }

    /// What a user message says: its text blocks, one per line (`None` for another kind).
    pub fn user_said(&self) -> Option<String> {
        match self {
            AgentMessage::User { content } => Some(
                content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect::<Vec<_>>()
                    .join("\n"),
            ),
            _ => None,
        }
    }

    /// The stored `kind` name.
    pub fn kind(&self) -> &'static str {
        match self {
            AgentMessage::User { .. } => "user",
            AgentMessage::Assistant(_) => "assistant",
            AgentMessage::ToolResult(_) => "tool_result",
            AgentMessage::Summary { .. } => "summary",
            AgentMessage::ContextNote { .. } => "context_note",
            AgentMessage::SystemEvent { .. } => "system_event",
            AgentMessage::ToolLog { .. } => "tool_log",
        }
    }

    /// This message as the LLM sees it, if it sees it at all.
    pub fn to_llm(&self) -> Option<Message> {
        match self {
            AgentMessage::User { content } => Some(Message::User {
                content: content.clone(),
            }),
            AgentMessage::Assistant(a) => Some(Message::Assistant(a.clone())),
            AgentMessage::ToolResult(r) => Some(Message::ToolResult(r.clone())),
            AgentMessage::Summary { text } => Some(Message::user_text(format!(
                "Summary of the earlier conversation:\n{text}"
            ))),
            AgentMessage::SystemEvent {
                text,
                schedule: Some(schedule),
            } => Some(Message::user_text(turn_reason(schedule, text))),
            AgentMessage::ContextNote { .. }
            | AgentMessage::SystemEvent { .. }
            | AgentMessage::ToolLog { .. } => None,
        }
    }
}

/// The history as the LLM sees it.
pub fn convert_to_llm(messages: &[AgentMessage]) -> Vec<Message> {
    messages.iter().filter_map(AgentMessage::to_llm).collect()
}

/// The text the model reads for a turn a schedule started.
pub fn turn_reason(schedule_id: &str, instruction: &str) -> String {
    format!(
        "[Scheduled turn: schedule `{schedule_id}` started this turn, not a new message from the \
         user. Its instruction:]\n{instruction}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{StopReason, ToolCall, Usage};

    fn all_kinds() -> Vec<AgentMessage> {
        vec![
            AgentMessage::user_text("hi"),
            AgentMessage::Assistant(AssistantMessage {
                content: vec![
                    ContentBlock::Thinking {
                        thinking: "hmm".into(),
                        signature: Some("sig".into()),
                    },
                    ContentBlock::ToolUse(ToolCall {
                        id: "c1".into(),
                        name: "current_time".into(),
                        input: serde_json::json!({}),
                        signature: None,
                    }),
                ],
                stop_reason: StopReason::Other("weird".into()),
                model: "m".into(),
                provider: "p".into(),
                usage: Usage {
                    input_tokens: 3,
                    output_tokens: 4,
                    ..Default::default()
                },
                output: None,
            }),
            AgentMessage::ToolResult(ToolResult {
                tool_call_id: "c1".into(),
                tool_name: "current_time".into(),
                content: "noon".into(),
                is_error: false,
            }),
            AgentMessage::Summary { text: "s".into() },
            AgentMessage::ContextNote { text: "n".into() },
            AgentMessage::SystemEvent {
                text: "e".into(),
                schedule: None,
            },
            AgentMessage::ToolLog { text: "l".into() },
            AgentMessage::SystemEvent {
                text: "check the build".into(),
                schedule: Some("s1".into()),
            },
        ]
    }

    #[test]
    fn stored_form_round_trips_every_kind() {
        for m in all_kinds() {
            let json = serde_json::to_string(&m).unwrap();
            let value: serde_json::Value = crate::llm::json::from_str(&json).unwrap();
            assert_eq!(value["kind"], m.kind());
            assert_eq!(
                crate::llm::json::from_str::<AgentMessage>(&json).unwrap(),
                m
            );
        }
    }

    #[test]
    fn reads_the_stored_form_with_kind_anywhere_and_names_what_is_missing() {
        let m: AgentMessage = crate::llm::json::from_str(
            r#"{"content":[{"text":"hi","type":"text"}],"kind":"user"}"#,
        )
        .unwrap();
        assert_eq!(m, AgentMessage::user_text("hi"));
        let missing =
            crate::llm::json::from_str::<AgentMessage>(r#"{"kind":"assistant","content":[]}"#);
        assert!(missing.unwrap_err().to_string().contains("stop_reason"));
        let unknown = crate::llm::json::from_str::<AgentMessage>(r#"{"kind":"poem","text":"x"}"#);
        assert!(unknown.unwrap_err().to_string().contains("poem"));
        let text_for_blocks =
            crate::llm::json::from_str::<AgentMessage>(r#"{"kind":"user","content":"hi"}"#);
        assert!(text_for_blocks.is_err());
    }

    #[test]
    fn only_conversation_kinds_reach_the_llm_and_summary_goes_as_user() {
        let llm = convert_to_llm(&all_kinds());
        assert_eq!(llm.len(), 5);
        assert!(matches!(&llm[3], Message::User { content }
            if matches!(&content[0], ContentBlock::Text { text } if text.ends_with("\ns"))));
        // A schedule's instruction is the reason for its turn, said to be no user message.
        assert!(matches!(&llm[4], Message::User { content }
            if matches!(&content[0], ContentBlock::Text { text }
                if text.contains("schedule `s1`") && text.ends_with("\ncheck the build"))));
    }
}
