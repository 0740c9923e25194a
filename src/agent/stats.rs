//! What a turn did, counted from its events for the one log line each turn writes: the model of
//! every LLM call and its usage, the time to the first token, tool calls and fallbacks. No
//! message content is kept.

use super::AgentEvent;
use crate::llm::{LlmEvent, Usage};

/// One LLM call of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct CallStats {
    pub provider: String,
    pub model: String,
    pub usage: Usage,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct TurnStats {
    /// Milliseconds from the start of the turn to the first streamed piece of an answer.
    pub first_token_ms: Option<u64>,
    /// Every LLM call, in order, with the model that answered it.
    pub calls: Vec<CallStats>,
    pub tool_calls: u32,
    /// Calls sent again after a retryable failure.
    pub retries: u32,
    /// Times the fallback chain moved to the next model.
    pub fallbacks: u32,
    /// Times a budget moved the turn to a cheaper model.
    pub budget_switches: u32,
    started_at_ms: u64,
}

impl TurnStats {
    pub fn new(started_at_ms: u64) -> Self {
        Self {
            started_at_ms,
            ..Self::default()
        }
    }

    /// Counts `event`, seen at `now_ms`.
    pub fn record(&mut self, event: &AgentEvent<'_>, now_ms: u64) {
        match event {
            AgentEvent::Llm(
                LlmEvent::TextDelta { .. }
                | LlmEvent::ThinkingDelta { .. }
                | LlmEvent::ToolCallStart { .. },
            ) if self.first_token_ms.is_none() => {
                self.first_token_ms = Some(now_ms.saturating_sub(self.started_at_ms));
            }
            AgentEvent::Llm(LlmEvent::Retry { .. }) => self.retries += 1,
            AgentEvent::StepStart { model, .. } => self.calls.push(CallStats {
                provider: model.provider.clone(),
                model: model.model.clone(),
                usage: Usage::default(),
            }),
            // The call's answer names the model that gave it (a fallback's, after a switch).
            AgentEvent::StepEnd { message, .. } => {
                if let Some(call) = self.calls.last_mut() {
                    call.provider.clone_from(&message.provider);
                    call.model.clone_from(&message.model);
                    call.usage = message.usage;
                }
            }
            AgentEvent::ProviderSwitch { to, .. } => {
                self.fallbacks += 1;
                if let Some(call) = self.calls.last_mut() {
                    call.provider.clone_from(&to.provider);
                    call.model.clone_from(&to.model);
                }
            }
            AgentEvent::ToolExecution { .. } | AgentEvent::ToolDenied { .. } => {
                self.tool_calls += 1
            }
            AgentEvent::ClientToolRequest { calls } | AgentEvent::ApprovalRequest { calls } => {
                self.tool_calls += calls.len() as u32
            }
            _ => {}
        }
    }

    /// Every call's usage added up.
    pub fn usage(&self) -> Usage {
        let mut total = Usage::default();
        for call in &self.calls {
            total.add(&call.usage);
        }
        total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{AssistantMessage, ModelRef, StopReason, ToolCall};
    use serde_json::json;

    fn answer(model: &str, input: u64, output: u64) -> AssistantMessage {
        AssistantMessage {
            content: vec![],
            stop_reason: StopReason::EndTurn,
            model: model.into(),
            provider: "anthropic".into(),
            usage: Usage {
                input_tokens: input,
                output_tokens: output,
                ..Usage::default()
            },
            output: None,
        }
    }

    #[test]
    fn a_turn_is_counted_from_its_events() {
        let mut stats = TurnStats::new(1_000);
        let from = ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap();
        let to = ModelRef::parse("anthropic:claude-haiku-4-5").unwrap();
        stats.record(
            &AgentEvent::StepStart {
                step: 1,
                model: &from,
            },
            1_001,
        );
        let retry = LlmEvent::Retry {
            attempt: 2,
            wait_ms: 500,
            reason: "overloaded".into(),
        };
        stats.record(&AgentEvent::Llm(&retry), 1_100);
        stats.record(
            &AgentEvent::ProviderSwitch {
                from: &from,
                to: &to,
            },
            1_200,
        );
        stats.record(&AgentEvent::Llm(&LlmEvent::TextStart { index: 0 }), 1_240);
        let delta = LlmEvent::TextDelta {
            index: 0,
            delta: "hi".into(),
        };
        stats.record(&AgentEvent::Llm(&delta), 1_250);
        stats.record(&AgentEvent::Llm(&delta), 1_300);
        let first = answer("claude-haiku-4-5", 10, 5);
        stats.record(
            &AgentEvent::StepEnd {
                step: 1,
                message: &first,
            },
            1_400,
        );
        let call = ToolCall {
            id: "t1".into(),
            name: "current_time".into(),
            input: json!({}),
            signature: None,
        };
        stats.record(
            &AgentEvent::StepStart {
                step: 2,
                model: &to,
            },
            1_405,
        );
        stats.record(
            &AgentEvent::ToolExecution {
                call: &call,
                output: &json!("noon"),
                is_error: false,
                duration_ms: 3,
            },
            1_410,
        );
        let second = answer("claude-haiku-4-5", 20, 7);
        stats.record(
            &AgentEvent::StepEnd {
                step: 2,
                message: &second,
            },
            1_600,
        );
        assert_eq!(stats.first_token_ms, Some(250));
        assert_eq!(stats.calls.len(), 2);
        assert_eq!(stats.calls[0].model, "claude-haiku-4-5");
        assert_eq!(stats.tool_calls, 1);
        assert_eq!(stats.fallbacks, 1);
        assert_eq!(stats.retries, 1);
        assert_eq!(stats.usage().input_tokens, 30);
        assert_eq!(stats.usage().output_tokens, 12);
    }
}
