//! How a turn picks the provider for each LLM call ([`ProviderResolver`]): the application
//! may move a turn to another model midway, hold each call's worst case against a budget, and
//! settle it when the call ends.

use std::rc::Rc;

use async_trait::async_trait;

use crate::llm::{AssistantMessage, LlmError, ModelRef, Provider};

/// What an LLM call is about to ask for, so a resolver can hold its worst case against a budget.
#[derive(Clone, Copy)]
pub struct CallSize<'a> {
    /// The most the answer may be, as the turn would ask for it.
    pub max_tokens: u32,
    /// An estimate of the request's input tokens (system prompt, history, tool definitions),
    /// made only when asked for: a resolver without a budget never pays for it.
    pub input_tokens: &'a dyn Fn() -> u64,
}

/// The provider chosen for one call, and the most its answer may be (a budget may lower it).
pub struct Resolved {
    pub provider: Rc<dyn Provider>,
    pub max_tokens: u32,
}

/// Picks the provider before every LLM call, so a turn can move to another model midway.
#[async_trait(?Send)]
pub trait ProviderResolver {
    async fn resolve(&self, call: CallSize<'_>) -> Result<Resolved, LlmError>;

    /// The call the last `resolve` was for has ended with `answer` (its usage, estimated when
    /// the provider sent none): whatever was held for it is settled. Called on every ending,
    /// cancelled and failed ones included.
    async fn settle(&self, _answer: &AssistantMessage) {}

    /// An attempt of the call in flight was given up on after it was billed (see
    /// [`crate::llm::retry::Billing`]): it is charged now, and `Err` ends the call instead of
    /// another attempt. [`Self::settle`] never sees it.
    async fn given_up(&self, _attempt: &AssistantMessage) -> Result<(), LlmError> {
        Ok(())
    }

    /// The model the conversation asked for, when the resolver may answer with another from
    /// the first call on: a turn that starts on another model announces the switch too.
    fn intended(&self) -> Option<ModelRef> {
        None
    }
}

/// Where the attempts a call gives up on that were billed are recorded as they happen (the
/// application's ledger), so a runtime that dies later in the call loses none.
#[async_trait(?Send)]
pub trait AttemptLedger {
    async fn record(&self, attempt: &AssistantMessage);
}

/// A resolver as the [`Billing`](crate::llm::retry::Billing) of a call it resolved: each
/// attempt given up on is charged by the resolver, then recorded in `ledger`. Charged first, so
/// the budget always holds it; a runtime that dies between the two leaves the spend object
/// with a cost the ledger lacks (the ledger is the record; the spend resets with its period).
pub(crate) struct ResolverBilling<'a> {
    pub resolver: &'a dyn ProviderResolver,
    pub ledger: &'a dyn AttemptLedger,
}

#[async_trait(?Send)]
impl crate::llm::retry::Billing for ResolverBilling<'_> {
    async fn given_up(&self, attempt: &AssistantMessage) -> Result<(), LlmError> {
        let charged = self.resolver.given_up(attempt).await;
        self.ledger.record(attempt).await;
        charged
    }
}
