//! The answer being streamed, saved with each batch of the replay log so a turn interrupted
//! mid-answer keeps what it had said; and, when the turn is recovered, that answer stored and
//! charged. The bookkeeping (what to save, when a saved one is stale) is here; the turn writes
//! it to the object's storage.
//!
//! An interrupted answer was paid for as far as it went: it is stored with its usage (what the
//! provider had reported, with the model that was answering; the rest estimated) and a ledger
//! row in one batch, and its cost settled with the owner's spend object.

use worker::console_error;

use super::TurnEnv;
use crate::agent::estimate::{estimate_tokens, message_tokens};
use crate::agent::{charge_unreported, AgentEvent, AgentMessage};
use crate::edge::d1::UsageRow;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;
use crate::edge::platform::ids::new_id;
use crate::edge::protocol::TurnConversation;
use crate::edge::spend::client::SpendClient;
use crate::edge::spend::Settle;
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
            AgentEvent::StepStart { model, .. } => {
                self.answer = Some(AssistantMessage {
                    content: vec![],
                    stop_reason: StopReason::Interrupted,
                    model: model.model.clone(),
                    provider: model.provider.clone(),
                    usage: Usage::default(),
                    output: None,
                });
            }
            AgentEvent::Llm(LlmEvent::TextDelta { delta, .. }) => self.append(delta, false),
            AgentEvent::Llm(LlmEvent::ThinkingDelta { delta, .. }) => self.append(delta, true),
            // What the provider reported so far (its running total), kept to charge the answer
            // if the runtime dies under it.
            AgentEvent::Llm(LlmEvent::Usage(usage)) => {
                if let Some(answer) = &mut self.answer {
                    answer.usage = *usage;
                }
            }
            // A fallback took the call over: its prices are the answer's, and what the attempt
            // before it reported was charged when it was given up on. (A switch between calls
            // comes before the next call starts, with no answer in progress.)
            AgentEvent::ProviderSwitch { to, .. } => {
                if let Some(answer) = &mut self.answer {
                    answer.model = to.model.clone();
                    answer.provider = to.provider.clone();
                    answer.usage = Usage::default();
                }
            }
            // Another attempt starts: the one before was charged when it was given up on.
            AgentEvent::Llm(LlmEvent::Retry { .. }) => {
                if let Some(answer) = &mut self.answer {
                    answer.usage = Usage::default();
                }
            }
            // The answer is stored: nothing partial is left.
            AgentEvent::StepEnd { .. } => {
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

/// An interrupted answer's usage: what its provider reported before the runtime died, the rest
/// estimated as for any answer cut short: its input from the system prompt and `seen` (the
/// history its call was made with), its output from what it streamed.
pub(super) fn charge_interrupted(
    answer: &mut AssistantMessage,
    system: Option<&str>,
    seen: &[AgentMessage],
) {
    charge_unreported(answer, || {
        system.map_or(0, estimate_tokens)
            + seen.iter().map(|m| message_tokens(m, None)).sum::<u64>()
    });
}

/// Stores a message a recovered (or given-up) turn keeps, after `seen`, the history as read
/// ([`rules::recovery`](crate::edge::conversation::rules::recovery)): an interrupted answer
/// charged ([`charge_interrupted`]) with its ledger row in the same batch, and its cost settled
/// with the owner's spend object when budgets are on (the call's reservation itself lapses, no
/// longer renewed); anything else as it is. Returns its sequence number and the message as
/// stored.
pub(super) async fn store_recovered(
    turn_env: &TurnEnv,
    conversation: &TurnConversation,
    seen: &[AgentMessage],
    message: AgentMessage,
) -> Result<(i64, AgentMessage), ApiError> {
    let store = &turn_env.store;
    let mut answer = match message {
        AgentMessage::Assistant(answer) => answer,
        other => {
            let seq = store.append_new(&conversation.id, &other).await?;
            return Ok((seq, other));
        }
    };
    // The agent's instructions were sent too (a conversation whose agent is gone: its own).
    let system = match conversation.agent(&turn_env.config) {
        Ok(agent) => agent.system_with(conversation.system.as_deref()),
        Err(_) => conversation.system.clone(),
    };
    charge_interrupted(&mut answer, system.as_deref(), seen);
    let cost_usd = turn_env.config.models.answer_cost(&answer);
    let usage = answer.usage;
    let (model, provider) = (answer.model.clone(), answer.provider.clone());
    let message = AgentMessage::Assistant(answer);
    let row = UsageRow {
        owner: &conversation.owner,
        model: &model,
        provider: &provider,
        usage: &usage,
        cost_usd,
    };
    let stored = store
        .append_answer(&conversation.id, &new_id()?, &message, &row, now_ms())
        .await;
    if stored.is_err() {
        // Its conversation deleted meanwhile (an erasure): charged all the same.
        let charged = store
            .record_usage_of_deleted(&conversation.id, &row, now_ms())
            .await;
        if let Err(e) = charged {
            console_error!("charging an interrupted answer that could not be stored: {e}");
        }
    }
    let seq = stored?;
    let cost_usd = cost_usd.unwrap_or(0.0);
    if turn_env.config.budgets_on() && cost_usd > 0.0 {
        let settle = Settle {
            call: None,
            cost_usd,
        };
        let settled = match SpendClient::for_user(&turn_env.env, &conversation.owner) {
            Ok(client) => client.settle(&settle).await,
            Err(e) => Err(e),
        };
        // The ledger has the cost: the next period's seed counts it.
        if let Err(e) = settled {
            console_error!("settling an interrupted answer's cost: {e}");
        }
    }
    Ok((seq, message))
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
        assert!(!partial.track(&AgentEvent::StepStart {
            step: 1,
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
    fn an_interrupted_answer_is_charged_what_was_reported_and_the_rest_estimated() {
        // Issue 56: a call cut off by a crash or a deploy was never charged.
        let sonnet = ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap();
        let fallback = ModelRef::parse("openai:gpt-4o").unwrap();
        let mut partial = PartialAnswer::default();
        partial.track(&AgentEvent::StepStart {
            step: 1,
            model: &sonnet,
        });
        // Sonnet failed before it said anything; the fallback reported nothing yet.
        partial.track(&AgentEvent::ProviderSwitch {
            from: &sonnet,
            to: &fallback,
        });
        let said = text(&"word ".repeat(80));
        partial.track(&AgentEvent::Llm(&said));
        let mut saved: AssistantMessage =
            crate::llm::json::from_str(&partial.snapshot().unwrap()).unwrap();
        assert_eq!(saved.model_ref(), fallback);
        let seen = [AgentMessage::user_text("x".repeat(396))];
        charge_interrupted(&mut saved, Some("abcd"), &seen);
        // 1 for the system prompt, 99 + 4 for the message; 100 for the 400 characters said.
        assert_eq!(
            (saved.usage.input_tokens, saved.usage.output_tokens),
            (104, 100)
        );
        assert!(saved.usage.estimated);

        // Anthropic reported the prompt when it began: that count stands.
        let mut partial = PartialAnswer::default();
        partial.track(&AgentEvent::StepStart {
            step: 1,
            model: &sonnet,
        });
        let reported = LlmEvent::Usage(Usage {
            input_tokens: 5_000,
            output_tokens: 1,
            ..Usage::default()
        });
        partial.track(&AgentEvent::Llm(&reported));
        partial.track(&AgentEvent::Llm(&said));
        let mut saved: AssistantMessage =
            crate::llm::json::from_str(&partial.snapshot().unwrap()).unwrap();
        assert_eq!(saved.usage.input_tokens, 5_000);
        charge_interrupted(&mut saved, None, &seen);
        assert_eq!(
            (saved.usage.input_tokens, saved.usage.output_tokens),
            (5_000, 100)
        );
        let cost = crate::llm::models::Registry::default()
            .answer_cost(&saved)
            .unwrap();
        assert!((cost - (0.015 + 0.0015)).abs() < 1e-12, "{cost}");

        // An attempt given up on (charged then) is not the answer's: what it reported goes with
        // a retry or a fallback, and the answer's prompt is estimated if nothing else comes.
        for next in [
            AgentEvent::Llm(&LlmEvent::Retry {
                attempt: 2,
                wait_ms: 500,
                reason: "overloaded".into(),
            }),
            AgentEvent::ProviderSwitch {
                from: &sonnet,
                to: &fallback,
            },
        ] {
            let mut partial = PartialAnswer::default();
            partial.track(&AgentEvent::StepStart {
                step: 1,
                model: &sonnet,
            });
            partial.track(&AgentEvent::Llm(&reported));
            partial.track(&next);
            partial.track(&AgentEvent::Llm(&said));
            let saved: AssistantMessage =
                crate::llm::json::from_str(&partial.snapshot().unwrap()).unwrap();
            assert_eq!(saved.usage, Usage::default(), "{next:?}");
        }
    }

    #[test]
    fn the_end_of_an_answer_clears_a_saved_one_and_only_a_saved_one() {
        let model = ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap();
        let start = AgentEvent::StepStart {
            step: 1,
            model: &model,
        };
        let hi = text("hi");
        let stored = AssistantMessage {
            content: vec![ContentBlock::Text { text: "hi".into() }],
            stop_reason: StopReason::EndTurn,
            model: "claude-sonnet-4-5".into(),
            provider: "anthropic".into(),
            usage: Usage::default(),
            output: None,
        };
        let end = AgentEvent::StepEnd {
            step: 1,
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
