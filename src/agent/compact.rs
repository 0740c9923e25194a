//! Compaction: when the history grows past a share of the model's context window, older whole
//! exchanges are summarised into one `summary` message (sent to the LLM as a user message).
//!
//! - The history is measured with [`super::estimate`]'s pessimistic token estimates.
//! - Cuts fall only where an exchange starts (a user or summary message), so a tool call is
//!   never separated from its result, and the latest user message always stays verbatim.
//! - The summary comes from a resolved (usually cheaper) provider. If it fails, the oldest whole
//!   exchanges are dropped instead, so the turn can still go on.
//! - The [`Compaction`] says which messages the summary replaces, so the application can persist
//!   the same change.

use std::ops::Range;
use std::rc::Rc;

use super::estimate::{charge_unreported, estimate_tokens, message_tokens};
use super::resolve::{AttemptLedger, CallSize, ProviderResolver, Resolved, ResolverBilling};
use super::{convert_to_llm, AgentMessage};
use crate::llm::{LlmRequest, Message, ModelRef, Usage};

/// A change to the history: `replaces` is taken out and `summary` put in its place (what the
/// application marks as compacted: only what the summary covers), and `hidden`, the old
/// exchanges after it that the summary does not cover, are left out of this call's view only.
/// When summarising fails there is no summary, nothing is replaced, and every old exchange is
/// hidden from this call: nothing is lost for good because a summary call failed.
#[derive(Debug, Clone, PartialEq)]
pub struct Compaction {
    pub replaces: Range<usize>,
    /// `None` when summarising failed.
    pub summary: Option<AgentMessage>,
    /// Left out of this call's view, kept in the history (indices before `apply`).
    pub hidden: Range<usize>,
    /// The summary request's call, when one was made (whether or not it succeeded): the model
    /// that answered and what it used (estimated when the provider never said), for the
    /// ledger. Its attempts given up on were recorded as they happened.
    pub calls: Vec<(ModelRef, Usage)>,
}

impl Compaction {
    /// Puts the summary in place of what it covers (nothing without a summary).
    pub fn apply(&self, messages: &mut Vec<AgentMessage>) {
        if self.summary.is_some() {
            messages.splice(self.replaces.clone(), self.summary.clone());
        }
    }

    /// Where the hidden exchanges are once [`Compaction::apply`] has run.
    pub fn hidden_after_apply(&self) -> Range<usize> {
        let start = if self.summary.is_some() {
            self.hidden.start + 1 - self.replaces.len()
        } else {
            self.hidden.start
        };
        start..start + self.hidden.len()
    }
}

pub struct Compactor {
    /// Who writes the summary.
    pub summariser: Rc<dyn ProviderResolver>,
    pub context_window: u64,
    /// Compact when the estimate passes this share of the window (e.g. 0.8).
    pub threshold_ratio: f64,
    /// The most the summariser's model may write in one answer.
    pub max_output_tokens: u64,
    /// The provider of the model whose window this is: files are counted by its rule of thumb.
    pub provider: Option<String>,
}

const INSTRUCTION: &str = "Summarise the conversation above for your own later use. Keep every \
    fact, decision, name, number, open question and unfinished task; drop pleasantries. Write it \
    as notes, not as a reply to the user.";

impl Compactor {
    /// The compaction `messages` need, if they are over the threshold.
    /// `ledger` records the summary request's attempts given up on as they happen.
    pub async fn compact(
        &self,
        messages: &[AgentMessage],
        ledger: &dyn AttemptLedger,
    ) -> Option<Compaction> {
        let provider = self.provider.as_deref();
        let tokens: Vec<u64> = messages
            .iter()
            .map(|m| message_tokens(m, provider))
            .collect();
        let threshold = (self.context_window as f64 * self.threshold_ratio) as u64;
        if tokens.iter().sum::<u64>() <= threshold {
            return None;
        }
        let cut = cut(messages, &tokens, threshold / 2)?;
        let (summary, calls) = self
            .summarise(&messages[..cut], &tokens[..cut], ledger)
            .await;
        Some(match summary {
            Some((text, covered)) => Compaction {
                replaces: 0..covered,
                summary: Some(AgentMessage::Summary { text }),
                hidden: covered..cut,
                calls,
            },
            None => Compaction {
                replaces: 0..0,
                summary: None,
                hidden: 0..cut,
                calls,
            },
        })
    }

    /// A summary of the oldest of `old` that fit one summary request, and how many messages
    /// it covers. Oldest first, so an earlier summary (always first) is folded into the new
    /// one and each compaction moves forward from where the last stopped.
    /// `tokens` holds each message's estimate (made once, by [`Compactor::compact`]).
    async fn summarise(
        &self,
        old: &[AgentMessage],
        tokens: &[u64],
        ledger: &dyn AttemptLedger,
    ) -> (Option<(String, usize)>, Vec<(ModelRef, Usage)>) {
        // The summary request must fit the window too: it gets a quarter of it to answer in
        // (at most 1,024 tokens) and the oldest exchanges that fit in the rest, less room for
        // the instruction and the system prompt.
        let max_tokens = (self.context_window / 4)
            .clamp(64, 1024)
            .min(self.max_output_tokens.max(1));
        let budget = self.context_window.saturating_sub(max_tokens + 96);
        let covered = fitting_head(old, tokens, budget);
        if covered == 0 {
            return (None, Vec::new());
        }
        let input = || tokens[..covered].iter().sum::<u64>() + estimate_tokens(INSTRUCTION);
        let size = CallSize {
            max_tokens: max_tokens as u32,
            input_tokens: &input,
        };
        let Ok(Resolved {
            provider,
            max_tokens,
        }) = self.summariser.resolve(size).await
        else {
            return (None, Vec::new());
        };
        let old = &old[..covered];
        let mut history = crate::llm::transform::prepare_for(
            convert_to_llm(old),
            provider.model(),
            &provider.capabilities(),
        );
        history.push(Message::user_text(INSTRUCTION));
        let billed = ResolverBilling {
            resolver: self.summariser.as_ref(),
            ledger,
        };
        let request = LlmRequest {
            system: Some("You compress conversations into faithful notes."),
            messages: &history,
            tools: &[],
            max_tokens,
            temperature: None,
            // No tools are offered: a summary has no calls to name.
            call_ids: "call_summary_",
            billing: Some(&billed),
            answer: None,
        };
        let mut completion = provider.complete(&request).await;
        // Whatever the provider did not report is estimated (see `charge_unreported`).
        charge_unreported(&mut completion.message, input);
        self.summariser.settle(&completion.message).await;
        // The model that answered (a fallback's, after a switch) is the one that is paid; the
        // attempts given up on were charged and recorded as they were.
        let calls = vec![(completion.message.model_ref(), completion.message.usage)];
        let text = completion.message.text();
        let summary =
            (completion.error.is_none() && !text.trim().is_empty()).then_some((text, covered));
        (summary, calls)
    }
}

/// Where the kept tail starts: the earliest exchange start from which the tail fits `target`,
/// but never past the latest user message. `None` if nothing can be cut. `tokens` holds each
/// message's estimate, so each tail is a sum of numbers, not another pass over its text.
fn cut(messages: &[AgentMessage], tokens: &[u64], target: u64) -> Option<usize> {
    let latest_user = messages
        .iter()
        .rposition(|m| matches!(m, AgentMessage::User { .. }))?;
    let mut tail: u64 = tokens.iter().skip(1).sum();
    let mut chosen = None;
    let exchanges = messages.iter().zip(tokens).enumerate();
    for (start, (message, &own)) in exchanges.take(latest_user + 1).skip(1) {
        if matches!(
            message,
            AgentMessage::User { .. } | AgentMessage::Summary { .. }
        ) {
            chosen = Some(start);
            if tail <= target {
                break;
            }
        }
        tail = tail.saturating_sub(own);
    }
    chosen
}

/// How many of `messages` (whole exchanges, from the first; `tokens` their estimates) fit
/// `budget` tokens: the end of the longest head that stops where an exchange starts, or all of
/// them when they all fit.
fn fitting_head(messages: &[AgentMessage], tokens: &[u64], budget: u64) -> usize {
    let mut used = 0;
    let mut end = 0;
    for (i, (message, &own)) in messages.iter().zip(tokens).enumerate() {
        if i > 0
            && matches!(
                message,
                AgentMessage::User { .. } | AgentMessage::Summary { .. }
            )
        {
            end = i;
        }
        used += own;
        if used > budget {
            return end;
        }
    }
    messages.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::ContentBlock;

    #[test]
    fn the_kept_tail_is_the_longest_that_fits_from_an_exchange_start() {
        let words = |n: usize| AgentMessage::user_text("word ".repeat(n));
        let answer = |n: usize| {
            AgentMessage::Assistant(crate::llm::AssistantMessage {
                content: vec![ContentBlock::Text {
                    text: "word ".repeat(n),
                }],
                stop_reason: crate::llm::StopReason::EndTurn,
                model: "m".into(),
                provider: "p".into(),
                usage: Default::default(),
                output: None,
            })
        };
        let messages = vec![
            words(400),
            answer(400),
            words(40),
            answer(400),
            words(40),
            answer(40),
            words(4),
            answer(4),
        ];
        let tokens: Vec<u64> = messages.iter().map(|m| message_tokens(m, None)).collect();
        // The tail from each start, summed the slow way, says which start is right.
        let tail = |start: usize| tokens[start..].iter().sum::<u64>();
        assert_eq!(cut(&messages, &tokens, tail(2)), Some(2));
        assert_eq!(cut(&messages, &tokens, tail(2) - 1), Some(4));
        assert_eq!(cut(&messages, &tokens, tail(4)), Some(4));
        assert_eq!(cut(&messages, &tokens, tail(6)), Some(6));
        // Nothing fits: the latest user message starts the tail, kept verbatim.
        assert_eq!(cut(&messages, &tokens, 1), Some(6));
        // A history without a user message past the first cannot be cut.
        assert_eq!(cut(&messages[..2], &tokens[..2], 1), None);
    }

    #[test]
    fn the_summarised_head_ends_where_an_exchange_starts_and_fits() {
        let long = "word ".repeat(400); // about 500 tokens
        let messages = vec![
            AgentMessage::user_text(long.clone()),
            AgentMessage::user_text(long.clone()),
            AgentMessage::ToolResult(crate::llm::ToolResult {
                tool_call_id: "c".into(),
                tool_name: "t".into(),
                content: "ok".into(),
                is_error: false,
            }),
            AgentMessage::user_text("short"),
        ];
        let tokens: Vec<u64> = messages.iter().map(|m| message_tokens(m, None)).collect();
        let fitting_head = |budget| fitting_head(&messages, &tokens, budget);
        assert_eq!(fitting_head(10_000), 4);
        // 504 + 504 + 5 fit 1,015; the short question (6 more) does not, and starts the rest.
        assert_eq!(fitting_head(1_015), 3);
        assert_eq!(fitting_head(700), 1);
        assert_eq!(fitting_head(50), 0);
    }
}
