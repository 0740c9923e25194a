//! The answer being streamed, saved with each batch of the replay log so a turn interrupted
//! mid-answer keeps what it had said. Only the bookkeeping lives here (what to save, when a
//! saved one is stale); the turn writes it to the object's storage.

use crate::agent::AgentEvent;
use crate::llm::{AssistantMessage, ContentBlock, LlmEvent, StopReason, Usage};

/// The answer being streamed, as far as it has come.
#[derive(Default)]
pub(super) struct PartialAnswer {
    answer: Option<AssistantMessage>,
    saved: bool,
}

impl PartialAnswer {
    /// Follows the turn's events. `true` when a saved answer went stale (the answer is stored
    /// in full now) and must be cleared.
    pub(super) fn track(&mut self, event: &AgentEvent<'_>) -> bool {
        match event {
            AgentEvent::TurnStart { model, .. } => {
                self.answer = Some(AssistantMessage {
                    content: vec![],
                    stop_reason: StopReason::Interrupted,
                    model: model.model.clone(),
                    provider: model.provider.clone(),
                    usage: Usage::default(),
                });
            }
            AgentEvent::Llm(LlmEvent::TextDelta { delta, .. }) => self.append(delta, false),
            AgentEvent::Llm(LlmEvent::ThinkingDelta { delta, .. }) => self.append(delta, true),
            // The answer is stored: nothing partial is left.
            AgentEvent::TurnEnd { .. } => {
                self.answer = None;
                return std::mem::take(&mut self.saved);
            }
            _ => {}
        }
        false
    }

    fn append(&mut self, delta: &str, thinking: bool) {
        let Some(answer) = &mut self.answer else {
            return;
        };
        match (answer.content.last_mut(), thinking) {
            (Some(ContentBlock::Text { text }), false) => text.push_str(delta),
            (Some(ContentBlock::Thinking { thinking, .. }), true) => thinking.push_str(delta),
            (_, false) => answer
                .content
                .push(ContentBlock::Text { text: delta.into() }),
            (_, true) => answer.content.push(ContentBlock::Thinking {
                thinking: delta.into(),
                signature: None,
            }),
        }
    }

    /// The answer so far as JSON, to be saved; `None` while it has no content. Once one was
    /// handed out, the end of the answer reports it stale.
    pub(super) fn snapshot(&mut self) -> Option<String> {
        let answer = self.answer.as_ref().filter(|a| !a.content.is_empty())?;
        let json = serde_json::to_string(answer).ok()?;
        self.saved = true;
        Some(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ModelRef;

    fn text(delta: &str) -> LlmEvent {
        LlmEvent::TextDelta {
            index: 1,
            delta: delta.into(),
        }
    }

    #[test]
    fn an_answer_in_progress_is_saved_as_an_interrupted_message_of_text_and_thinking() {
        let model = ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap();
        let mut partial = PartialAnswer::default();
        assert!(!partial.track(&AgentEvent::TurnStart {
            turn: 1,
            model: &model
        }));
        assert_eq!(
            partial.snapshot(),
            None,
            "nothing said yet, nothing to save"
        );
        let events = [
            LlmEvent::ThinkingDelta {
                index: 0,
                delta: "let me ".into(),
            },
            LlmEvent::ThinkingDelta {
                index: 0,
                delta: "think".into(),
            },
            text("Hel"),
            text("lo"),
        ];
        for event in &events {
            assert!(!partial.track(&AgentEvent::Llm(event)));
        }
        let saved: AssistantMessage =
            crate::llm::json::from_str(&partial.snapshot().unwrap()).unwrap();
        assert_eq!(saved.stop_reason, StopReason::Interrupted);
        assert_eq!(saved.model, "claude-sonnet-4-5");
        assert_eq!(
            saved.content,
            vec![
                ContentBlock::Thinking {
                    thinking: "let me think".into(),
                    signature: None
                },
                ContentBlock::Text {
                    text: "Hello".into()
                },
            ]
        );
    }

    #[test]
    fn the_end_of_an_answer_clears_a_saved_one_and_only_a_saved_one() {
        let model = ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap();
        let start = AgentEvent::TurnStart {
            turn: 1,
            model: &model,
        };
        let hi = text("hi");
        let stored = AssistantMessage {
            content: vec![ContentBlock::Text { text: "hi".into() }],
            stop_reason: StopReason::EndTurn,
            model: "claude-sonnet-4-5".into(),
            provider: "anthropic".into(),
            usage: Usage::default(),
        };
        let end = AgentEvent::TurnEnd {
            turn: 1,
            message: &stored,
        };

        let mut partial = PartialAnswer::default();
        partial.track(&start);
        partial.track(&AgentEvent::Llm(&hi));
        assert!(!partial.track(&end), "never saved: nothing to clear");

        partial.track(&start);
        partial.track(&AgentEvent::Llm(&hi));
        assert!(partial.snapshot().is_some());
        assert!(
            partial.track(&end),
            "saved: the stored answer supersedes it"
        );
        assert_eq!(
            partial.snapshot(),
            None,
            "nothing is in progress after the end"
        );
        assert!(!partial.track(&end), "cleared once");
    }
}
