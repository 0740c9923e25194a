//! The answer being streamed, saved with each batch of the replay log so a turn interrupted
//! mid-answer keeps what it had said.

use crate::agent::AgentEvent;
use crate::edge::conversation::storage::ObjectStorage;
use crate::llm::{AssistantMessage, ContentBlock, LlmEvent, StopReason, Usage};
use worker::console_error;

/// The answer being streamed, saved with each batch of the chunk log so a turn interrupted
/// mid-answer keeps what it had said.
#[derive(Default)]
pub(super) struct PartialAnswer {
    answer: Option<AssistantMessage>,
    saved: bool,
}

impl PartialAnswer {
    pub(super) fn track(&mut self, event: &AgentEvent<'_>, storage: &ObjectStorage) {
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
                if self.saved {
                    self.saved = false;
                    if let Err(e) = storage.set_partial(None) {
                        console_error!("clearing the partial answer: {e}");
                    }
                }
            }
            _ => {}
        }
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

    pub(super) fn save(&mut self, storage: &ObjectStorage) {
        let Some(answer) = self.answer.as_ref().filter(|a| !a.content.is_empty()) else {
            return;
        };
        match serde_json::to_string(answer) {
            Ok(json) => match storage.set_partial(Some(&json)) {
                Ok(()) => self.saved = true,
                Err(e) => console_error!("saving the partial answer: {e}"),
            },
            Err(e) => console_error!("encoding the partial answer: {e}"),
        }
    }
}
