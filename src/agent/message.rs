//! `AgentMessage`: the application's superset of LLM messages, and the filter to the LLM's view.

use serde::{Deserialize, Serialize};

use crate::llm::{AssistantMessage, ContentBlock, Message, ToolResult};

/// One entry of a conversation's history. Its serde form is the stored form.
///
/// | kind | reaches the LLM |
/// |---|---|
/// | user, assistant, tool_result | as itself |
/// | summary | as a user message |
/// | context_note, system_event, tool_log | never |
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
    /// Notices such as a credit warning or a rate limit.
    SystemEvent {
        text: String,
    },
    /// A server tool's execution log.
    ToolLog {
        text: String,
    },
}

impl AgentMessage {
    pub fn user_text(text: impl Into<String>) -> Self {
        AgentMessage::User {
            content: vec![ContentBlock::Text { text: text.into() }],
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
            }),
            AgentMessage::ToolResult(ToolResult {
                tool_call_id: "c1".into(),
                tool_name: "current_time".into(),
                content: "noon".into(),
                is_error: false,
            }),
            AgentMessage::Summary { text: "s".into() },
            AgentMessage::ContextNote { text: "n".into() },
            AgentMessage::SystemEvent { text: "e".into() },
            AgentMessage::ToolLog { text: "l".into() },
        ]
    }

    #[test]
    fn stored_form_round_trips_every_kind() {
        for m in all_kinds() {
            let json = serde_json::to_string(&m).unwrap();
            let value: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(value["kind"], m.kind());
            assert_eq!(serde_json::from_str::<AgentMessage>(&json).unwrap(), m);
        }
    }

    #[test]
    fn only_conversation_kinds_reach_the_llm_and_summary_goes_as_user() {
        let llm = convert_to_llm(&all_kinds());
        assert_eq!(llm.len(), 4);
        assert!(matches!(&llm[3], Message::User { content }
            if matches!(&content[0], ContentBlock::Text { text } if text.ends_with("\ns"))));
    }
}
