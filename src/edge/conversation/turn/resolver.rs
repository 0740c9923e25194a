//! The budget resolver: before every LLM call of a turn it reserves the call's worst case with
//! the user's spend object ([`crate::edge::spend`]) and picks the model (the conversation's,
//! with fewer output tokens when the rest of the budget covers fewer; `BUDGET_MODEL`; or none),
//! and settles the call when it ends.
//!
//! The worst case is priced at the priciest model that may answer the call: the conversation's,
//! or one of the `FALLBACK_MODELS` behind it, at the long-context prices when the estimated
//! prompt is past their threshold. A call moved to `BUDGET_MODEL` holds nothing (it answers
//! past the budget by design), so that model is called without fallbacks: one of them could
//! cost more than the budget was moved away from.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use async_trait::async_trait;

use crate::agent::calendar::format_utc;
use crate::agent::{AgentMessage, CallSize, ProviderResolver, Resolved};
use crate::edge::budget::{usd, Budget, Period, WARN_AT};
use crate::edge::error::ApiError;
use crate::edge::spend::{Ask, Charge, Reply, Settle, Spend};
use crate::llm::models::Registry;
use crate::llm::retry::chain;
use crate::llm::{AssistantMessage, LlmError, ModelRef, Provider};

/// Where the resolver reads a budget, holds and settles its calls' costs, and records what it
/// decided.
#[async_trait(?Send)]
pub trait BudgetStore {
    /// The user's budget now, as the ledger has it, or `None` when they have none.
    async fn budget(&self) -> Result<Option<Budget>, ApiError>;
    /// Reserves a call's worst case against the user's spend (see [`crate::edge::spend`]).
    async fn reserve(&self, ask: &Ask) -> Result<Reply, ApiError>;
    /// Settles a call that ended.
    async fn settle(&self, settle: &Settle);
    /// Charges an attempt given up on while its call goes on: what is spent and held now, or
    /// `None` when the call holds no reservation any more (see [`crate::edge::spend::Spend::charge`]).
    async fn charge(&self, charge: &Charge) -> Result<Option<f64>, ApiError>;
    /// Stores a message in the conversation that never reaches a model (a context note or a
    /// system event).
    async fn note(&self, message: AgentMessage);
    /// Remembers that the user was warned in the current `period`.
    async fn mark_warned(&self, period: Period);
}

/// How a new message's turn's first reservation went: the request waits for it (with budgets on
/// and no `BUDGET_MODEL`), so a budget that cannot cover the first call is a 402 before any
/// stream, not a stream that ends in an error. Dropped undecided (the turn never reached a
/// call), the request goes on as it would.
#[derive(Default)]
pub struct FirstCall {
    decided: RefCell<Option<futures::channel::oneshot::Sender<Option<String>>>>,
    refused: RefCell<Option<String>>,
}

impl FirstCall {
    /// A first call to be decided, and what the request waits on: `Some(why)` when it was
    /// refused for the budget.
    pub fn new() -> (
        Rc<Self>,
        futures::channel::oneshot::Receiver<Option<String>>,
    ) {
        let (tx, rx) = futures::channel::oneshot::channel();
        let first = Self {
            decided: RefCell::new(Some(tx)),
            refused: RefCell::new(None),
        };
        (Rc::new(first), rx)
    }

    /// The first reservation was made (`None`) or refused (`Some(why)`); later ones change
    /// nothing.
    fn decide(&self, refused: Option<String>) {
        if let Some(tx) = self.decided.borrow_mut().take() {
            self.refused.replace(refused.clone());
            let _ = tx.send(refused);
        }
    }

    /// Whether the first call was refused: the request was answered 402.
    pub fn refused(&self) -> bool {
        self.refused.borrow().is_some()
    }

    fn refusal(&self) -> Option<String> {
        self.refused.borrow().clone()
    }
}

/// A call's reservation in the user's spend object, and the budget it was held against.
#[derive(Debug, Clone)]
pub struct Held {
    pub call: String,
    pub budget: Budget,
}

/// The fewest output tokens worth a call on the conversation's model: below them it goes to
/// `BUDGET_MODEL`, or is refused.
pub const MIN_TOKENS: u32 = 256;

/// Picks the model before every LLM call from the user's budget, and holds the call's worst
/// case until it ends.
pub struct BudgetResolver {
    pub store: Rc<dyn BudgetStore>,
    /// The conversation's model, with `fallbacks` behind it.
    pub model: Rc<dyn Provider>,
    /// `BUDGET_MODEL`, without fallbacks.
    pub economy: Option<Rc<dyn Provider>>,
    /// `FALLBACK_MODELS`: any of them may answer a call to `model`, so its worst case is priced
    /// at the priciest.
    pub fallbacks: Vec<ModelRef>,
    /// Prices, for what a call may cost and what it did.
    pub models: Registry,
    /// Times the turn moved to the economy model.
    pub switches: Rc<Cell<u32>>,
    /// The budget as read with the turn's history (else at its first call).
    pub read: RefCell<Option<Option<Budget>>>,
    /// The reservation the call in flight holds, with the budget it was held against.
    pub open: RefCell<Option<Held>>,
    /// What attempts given up on cost whose charge the spend object may not have had (it
    /// failed): added to the call's settlement, so a lost charge is counted late rather than
    /// never (a charge that did land and only its answer was lost is counted twice, in the
    /// user's disfavour by a prompt's price, never in the operator's).
    pub uncharged: Cell<f64>,
    /// Told how the turn's first reservation goes (its request waits for it).
    pub first: Option<Rc<FirstCall>>,
}

impl BudgetResolver {
    /// A call's price to `model` with a prompt of about `input_tokens`, as (its input in US
    /// dollars, US dollars per output token): the highest input and output prices among the
    /// models that may answer it (`model`, then the fallbacks), at the long-context prices
    /// where the prompt passes their threshold. Unpriced models are refused before a turn
    /// starts when budgets are on.
    fn worst_price(&self, input_tokens: u64) -> (f64, f64) {
        let (input, output) = chain(self.model.model(), &self.fallbacks)
            .iter()
            .map(|m| {
                self.models
                    .info(m)
                    .price
                    .unwrap_or_default()
                    .at(input_tokens)
            })
            .fold((0.0_f64, 0.0_f64), |(input, output), price| {
                (input.max(price.input), output.max(price.output))
            });
        (
            input_tokens as f64 * input / 1_000_000.0,
            output / 1_000_000.0,
        )
    }

    /// The budget the turn read, or `again` read now.
    async fn budget(&self, again: bool) -> Result<Option<Budget>, LlmError> {
        if again || self.read.borrow().is_none() {
            let budget = self
                .store
                .budget()
                .await
                .map_err(|e| LlmError::Config(format!("the budget could not be read: {e}")))?;
            *self.read.borrow_mut() = Some(budget);
        }
        Ok(self.read.borrow().clone().flatten())
    }

    /// Warns the user, once a period, that most of the budget is spent.
    async fn warn(&self, budget: &Budget, committed_usd: f64) {
        if let Some(Some(read)) = self.read.borrow_mut().as_mut() {
            read.warned = true;
        }
        self.store.mark_warned(budget.period).await;
        self.store
            .note(AgentMessage::SystemEvent {
                text: format!(
                    "{}% of the budget is spent ({} of {} per {}); it resets at {}",
                    (WARN_AT * 100.0).round() as u32,
                    usd(committed_usd),
                    usd(budget.limit_usd),
                    budget.period.as_str(),
                    format_utc(budget.resets_at)
                ),
                schedule: None,
            })
            .await;
    }
}

#[async_trait(?Send)]
impl ProviderResolver for BudgetResolver {
    async fn resolve(&self, call: CallSize<'_>) -> Result<Resolved, LlmError> {
        // Its request was answered 402: the turn makes no call at all (a summary's refusal
        // would otherwise let the main call through, for a message the client was told was
        // refused).
        if let Some(why) = self.first.as_ref().and_then(|f| f.refusal()) {
            return Err(LlmError::BudgetExceeded(why));
        }
        let resolved = self.resolve_call(call).await;
        if let Some(first) = &self.first {
            first.decide(match &resolved {
                Err(LlmError::BudgetExceeded(why)) => Some(why.clone()),
                _ => None,
            });
        }
        resolved
    }

    /// Settles the call to what its answer cost, at the prices of the model that answered (a
    /// fallback's, after a switch); attempts given up on were charged as they were (see
    /// [`Self::given_up`]), apart from any whose charge failed.
    async fn settle(&self, answer: &AssistantMessage) {
        let call = self.open.borrow_mut().take().map(|held| held.call);
        let cost = self.models.answer_cost(answer).unwrap_or(0.0) + self.uncharged.take();
        if call.is_some() || cost > 0.0 {
            self.store
                .settle(&Settle {
                    call,
                    cost_usd: cost,
                })
                .await;
        }
    }

    /// Charged at once at its own model's prices, so calls at once see it; with the call's
    /// reservation held, another attempt only while the budget still covers it. An economy
    /// call holds nothing and answers past the budget by design: it is charged and goes on.
    ///
    /// Refused, the call ends with the budget's error (not the provider's, which a client
    /// would retry); a charge that failed ends it too, unsure what the budget covers.
    async fn given_up(&self, attempt: &AssistantMessage) -> Result<(), LlmError> {
        let cost_usd = self.models.answer_cost(attempt).unwrap_or(0.0);
        let Some(Held { call, budget }) = self.open.borrow().clone() else {
            if cost_usd > 0.0 {
                self.store
                    .settle(&Settle {
                        call: None,
                        cost_usd,
                    })
                    .await;
            }
            return Ok(());
        };
        match self.store.charge(&Charge { call, cost_usd }).await {
            Ok(Some(committed)) if Spend::covers(committed, budget.limit_usd) => Ok(()),
            // Not "spent": what is committed holds this call's own reservation and others'.
            Ok(Some(_)) => Err(LlmError::BudgetExceeded(format!(
                "your budget of {} per {} does not cover another attempt at this call after \
                 the provider failed; it resets at {}",
                usd(budget.limit_usd),
                budget.period.as_str(),
                format_utc(budget.resets_at)
            ))),
            Ok(None) => Err(LlmError::BudgetExceeded(
                "the call's hold on the budget lapsed or its period ended; send the message again"
                    .into(),
            )),
            Err(e) => {
                self.uncharged.set(self.uncharged.get() + cost_usd);
                Err(LlmError::Config(format!(
                    "the budget could not be checked: {e}"
                )))
            }
        }
    }

    fn intended(&self) -> Option<crate::llm::ModelRef> {
        Some(self.model.model().clone())
    }
}

impl BudgetResolver {
    /// [`ProviderResolver::resolve`], before the turn's first call hears how it went.
    async fn resolve_call(&self, call: CallSize<'_>) -> Result<Resolved, LlmError> {
        let Some(mut budget) = self.budget(false).await? else {
            return Ok(Resolved {
                provider: self.model.clone(),
                max_tokens: call.max_tokens,
            });
        };
        let (input_usd, usd_per_output_token) = self.worst_price((call.input_tokens)());
        let reserve = |budget: &Budget| {
            let ask = Ask {
                limit_usd: budget.limit_usd,
                period: budget.period,
                ledger: budget.seed(),
                input_usd,
                usd_per_output_token,
                max_tokens: call.max_tokens,
                min_tokens: MIN_TOKENS,
            };
            async move {
                self.store
                    .reserve(&ask)
                    .await
                    .map_err(|e| LlmError::Config(format!("the budget could not be checked: {e}")))
            }
        };
        let mut reply = reserve(&budget).await?;
        if reply == Reply::Reseed {
            // The period turned since the turn read its budget: read it again, once.
            if let Some(fresh) = self.budget(true).await? {
                budget = fresh;
            }
            reply = reserve(&budget).await?;
        }
        match reply {
            Reply::Granted {
                call: held,
                max_tokens,
                committed_usd,
            } => {
                *self.open.borrow_mut() = Some(Held {
                    call: held,
                    budget: budget.clone(),
                });
                if !budget.warned && committed_usd >= WARN_AT * budget.limit_usd {
                    self.warn(&budget, committed_usd).await;
                }
                Ok(Resolved {
                    provider: self.model.clone(),
                    max_tokens,
                })
            }
            Reply::Short { committed_usd } => {
                let Some(economy) = self.economy.clone() else {
                    budget.spent_usd = committed_usd;
                    return Err(LlmError::BudgetExceeded(budget.short_message()));
                };
                if self.switches.get() == 0 {
                    self.switches.set(1);
                    self.store
                        .note(AgentMessage::ContextNote {
                            text: format!(
                                "switched to the economy model {}: budget reached",
                                economy.model()
                            ),
                        })
                        .await;
                }
                Ok(Resolved {
                    provider: economy,
                    max_tokens: call.max_tokens,
                })
            }
            Reply::Reseed => Err(LlmError::Config(
                "the budget could not be checked: the ledger's total is of another period".into(),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::budget::{Budget, Period};

    use crate::agent::{CallSize, Resolved};
    use crate::llm::{Completion, LlmRequest, ModelRef, Usage};
    use futures::executor::block_on;

    /// A provider that is only its model: the resolver never calls it.
    struct Named(ModelRef);

    #[async_trait(?Send)]
    impl Provider for Named {
        fn model(&self) -> &ModelRef {
            &self.0
        }
        async fn stream(
            &self,
            _: &LlmRequest<'_>,
            _: &mut dyn for<'e> FnMut(&'e crate::llm::LlmEvent),
        ) -> Completion {
            unreachable!("the resolver only chooses")
        }
        async fn health_check(&self) -> Result<(), LlmError> {
            Ok(())
        }
    }

    /// The user's spend object in memory, with the ledger's figure it would be seeded from.
    struct Memory {
        budget: RefCell<Budget>,
        spend: RefCell<Option<crate::edge::spend::Spend>>,
        notes: RefCell<Vec<String>>,
        settled: RefCell<Vec<Settle>>,
        now: Cell<i64>,
        charge_fails: Cell<bool>,
    }

    #[async_trait(?Send)]
    impl BudgetStore for Memory {
        async fn budget(&self) -> Result<Option<Budget>, ApiError> {
            Ok(Some(self.budget.borrow().clone()))
        }
        async fn reserve(&self, ask: &Ask) -> Result<Reply, ApiError> {
            let mut spend = self.spend.borrow_mut();
            Ok(crate::edge::spend::Spend::reserve(
                &mut spend,
                ask,
                self.now.get(),
            ))
        }
        async fn settle(&self, settle: &Settle) {
            if let Some(spend) = self.spend.borrow_mut().as_mut() {
                spend.settle(settle, self.now.get());
            }
            self.settled.borrow_mut().push(settle.clone());
        }
        async fn charge(&self, charge: &Charge) -> Result<Option<f64>, ApiError> {
            if self.charge_fails.get() {
                return Err(ApiError::Internal("the spend object is overloaded".into()));
            }
            let mut spend = self.spend.borrow_mut();
            Ok(Spend::charge(&mut spend, charge, self.now.get()))
        }
        async fn note(&self, message: AgentMessage) {
            self.notes.borrow_mut().push(format!("{message:?}"));
        }
        async fn mark_warned(&self, _: Period) {}
    }

    const NOW: i64 = 1_795_336_200_000; // 2026-11-22T08:30:00Z

    fn resolver(limit_usd: f64, economy: bool) -> (BudgetResolver, Rc<Memory>) {
        let (start, resets_at) = Period::Day.bounds(NOW);
        let memory = Rc::new(Memory {
            budget: RefCell::new(Budget {
                limit_usd,
                period: Period::Day,
                spent_usd: 0.0,
                resets_at,
                warned: false,
            }),
            spend: RefCell::default(),
            notes: RefCell::default(),
            settled: RefCell::default(),
            now: Cell::new(start + 3_600_000),
            charge_fails: Cell::new(false),
        });
        let named = |id: &str| -> Rc<dyn Provider> {
            Rc::new(Named(ModelRef::parse(id).expect("a model id")))
        };
        let resolver = BudgetResolver {
            store: memory.clone(),
            model: named("anthropic:claude-sonnet-4-5"),
            economy: economy.then(|| named("anthropic:claude-haiku-4-5")),
            fallbacks: vec![],
            models: Registry::default(),
            switches: Rc::default(),
            read: RefCell::default(),
            open: RefCell::default(),
            uncharged: Cell::default(),
            first: None,
        };
        (resolver, memory)
    }

    /// A call of 1,000 input tokens asking for up to 4,000 output tokens: on Sonnet at most
    /// $0.003 + $0.06.
    fn call(resolver: &BudgetResolver) -> Result<(String, u32), LlmError> {
        call_of(resolver, 1_000)
    }

    /// A call of `input_tokens` asking for up to 4,000 output tokens.
    fn call_of(resolver: &BudgetResolver, input_tokens: u64) -> Result<(String, u32), LlmError> {
        let input = || input_tokens;
        let size = CallSize {
            max_tokens: 4_000,
            input_tokens: &input,
        };
        block_on(resolver.resolve(size)).map(
            |Resolved {
                 provider,
                 max_tokens,
             }| { (provider.model().to_string(), max_tokens) },
        )
    }

    fn answer(model: &str, input_tokens: u64, output_tokens: u64) -> AssistantMessage {
        AssistantMessage {
            content: vec![],
            stop_reason: crate::llm::StopReason::EndTurn,
            model: model.into(),
            provider: "anthropic".into(),
            usage: Usage {
                input_tokens,
                output_tokens,
                ..Usage::default()
            },
            output: None,
        }
    }

    #[test]
    fn each_call_holds_its_worst_case_and_gets_fewer_tokens_when_the_rest_is_short() {
        let (turn, memory) = resolver(0.1, false);
        let (other, _) = resolver(0.1, false);
        let other = BudgetResolver {
            store: memory.clone(),
            ..other
        };
        let sonnet = "anthropic:claude-sonnet-4-5".to_string();
        assert_eq!(call(&turn).ok(), Some((sonnet.clone(), 4_000)));
        // Another turn of the same user, at the same time: $0.037 is left of the $0.1.
        assert_eq!(call(&other).ok(), Some((sonnet.clone(), 2_266)));
        // The first answer cost $0.0045: what it held beyond that is free again.
        block_on(turn.settle(&answer("claude-sonnet-4-5", 1_000, 100)));
        assert_eq!(memory.settled.borrow()[0].call.as_deref(), Some("c1"));
        assert!((memory.settled.borrow()[0].cost_usd - 0.0045).abs() < 1e-12);
        assert_eq!(call(&turn).ok(), Some((sonnet, 3_700)));
        // Nothing covers 256 tokens any more: with no economy model the call is refused.
        let Err(LlmError::BudgetExceeded(why)) = call(&turn) else {
            panic!("refused")
        };
        assert!(why.starts_with("your budget of $0.10 per day"), "{why}");
    }

    #[test]
    fn a_call_is_held_at_the_priciest_model_that_may_answer_it() {
        // Issue 56: with Opus behind Sonnet, a call may cost Opus's $15 in and $75 out per
        // million: $0.2 covers $0.015 of input and 2,466 output tokens, not Sonnet's 4,000.
        let (turn, memory) = resolver(0.2, false);
        let turn = BudgetResolver {
            fallbacks: vec![ModelRef::parse("anthropic:claude-opus-4-1").expect("a model id")],
            ..turn
        };
        let sonnet = "anthropic:claude-sonnet-4-5".to_string();
        assert_eq!(call(&turn).ok(), Some((sonnet, 2_466)));
        // The fallback answered: its own prices settle the call.
        block_on(turn.settle(&answer("claude-opus-4-1", 1_000, 1_000)));
        let settled = memory.settled.borrow();
        assert_eq!(settled[0].call.as_deref(), Some("c1"));
        assert!((settled[0].cost_usd - 0.09).abs() < 1e-12);
    }

    #[test]
    fn an_attempt_given_up_on_is_charged_before_the_retry_and_stops_it_past_the_budget() {
        // Issue 56: $0.1 holds a 1,000-token prompt and 4,000 output tokens on Sonnet ($0.063).
        // Each attempt an overload cut off after its prompt was billed costs $0.003: charged at
        // once (another call of the user sees it), and the call is tried again only while the
        // rest covers the next attempt.
        let (turn, memory) = resolver(0.1, false);
        call(&turn).expect("granted");
        let billed = answer("claude-sonnet-4-5", 1_000, 0);
        assert_eq!(block_on(turn.given_up(&billed)), Ok(()));
        // Spent $0.003 and held $0.063: $0.034 is left, which covers 2,066 tokens of another
        // call of the same user, not the 4,000 it would have had.
        let (other, _) = resolver(0.1, false);
        let other = BudgetResolver {
            store: memory.clone(),
            ..other
        };
        let sonnet = "anthropic:claude-sonnet-4-5".to_string();
        assert_eq!(call(&other).ok(), Some((sonnet, 2_066)));
        // Now held $0.063 + $0.034 and spent $0.003: one more billed attempt passes the limit,
        // and the call is not made again.
        let Err(LlmError::BudgetExceeded(why)) = block_on(turn.given_up(&billed)) else {
            panic!("refused for the budget")
        };
        assert!(why.starts_with("your budget of $0.10 per day"), "{why}");
        // The call's answer settles its reservation; the attempts are not charged twice.
        block_on(turn.settle(&answer("claude-sonnet-4-5", 0, 0)));
        let settled = memory.settled.borrow();
        assert_eq!((settled.len(), settled[0].call.as_deref()), (1, Some("c1")));
    }

    #[test]
    fn an_attempt_whose_charge_failed_ends_the_call_and_is_settled_with_it() {
        let (turn, memory) = resolver(1.0, false);
        call(&turn).expect("granted");
        memory.charge_fails.set(true);
        let billed = answer("claude-sonnet-4-5", 1_000, 0);
        assert!(matches!(
            block_on(turn.given_up(&billed)),
            Err(LlmError::Config(why)) if why.contains("could not be checked")
        ));
        // The call's settlement carries the attempt's $0.003 with the answer's $0.0045.
        block_on(turn.settle(&answer("claude-sonnet-4-5", 1_000, 100)));
        let settled = memory.settled.borrow();
        assert!((settled[0].cost_usd - 0.0075).abs() < 1e-12, "{settled:?}");
        // Only once.
        drop(settled);
        call(&turn).expect("granted");
        block_on(turn.settle(&answer("claude-sonnet-4-5", 0, 0)));
        assert_eq!(memory.settled.borrow()[1].cost_usd, 0.0);
    }

    #[test]
    fn a_long_prompt_is_held_at_its_long_context_prices() {
        // Issue 56: Gemini 2.5 Pro charges $2.50 in and $15 out per million past 200,000 prompt
        // tokens. 300,000 of them cost $0.75, and $0.8 leaves 3,333 output tokens at $15.
        let on_pro = || BudgetResolver {
            model: Rc::new(Named(
                ModelRef::parse("gemini:gemini-2.5-pro").expect("a model id"),
            )),
            ..resolver(0.8, false).0
        };
        let pro = "gemini:gemini-2.5-pro".to_string();
        assert_eq!(call_of(&on_pro(), 300_000).ok(), Some((pro.clone(), 3_333)));
        // Below the threshold the base prices hold: $0.1875 + $0.04 leave all 4,000.
        assert_eq!(call_of(&on_pro(), 150_000).ok(), Some((pro, 4_000)));
    }

    #[test]
    fn the_first_call_tells_its_request_whether_it_was_refused() {
        // $0.002 covers no answer on Sonnet (256 tokens at $15 per million are $0.0038).
        let (mut turn, _) = resolver(0.002, false);
        let (first, decided) = FirstCall::new();
        turn.first = Some(first.clone());
        assert!(call(&turn).is_err());
        let why = block_on(decided).unwrap_or_else(|e| panic!("{e}"));
        assert!(why.is_some_and(|w| w.contains("too little for an answer")));
        assert!(first.refused());
        // Granted: the request goes on, and later calls change nothing.
        let (mut turn, _) = resolver(1.0, false);
        let (first, decided) = FirstCall::new();
        turn.first = Some(first.clone());
        assert!(call(&turn).is_ok());
        assert_eq!(block_on(decided).ok(), Some(None));
        assert!(!first.refused());
    }

    #[test]
    fn a_short_budget_moves_to_the_economy_model_and_says_so_once() {
        let (turn, memory) = resolver(0.005, true);
        let haiku = "anthropic:claude-haiku-4-5".to_string();
        assert_eq!(call(&turn).ok(), Some((haiku.clone(), 4_000)));
        assert_eq!(call(&turn).ok(), Some((haiku, 4_000)));
        assert_eq!(memory.notes.borrow().len(), 1);
        assert!(memory.notes.borrow()[0].contains("switched to the economy model"));
        // The economy model's answer held nothing, and its cost still counts.
        block_on(turn.settle(&answer("claude-haiku-4-5", 1_000, 1_000)));
        let settled = memory.settled.borrow();
        assert_eq!(settled[0].call, None);
        assert!((settled[0].cost_usd - 0.006).abs() < 1e-12);
    }

    #[test]
    fn the_user_is_warned_once_past_80_percent() {
        let (turn, memory) = resolver(0.1, false);
        memory.budget.borrow_mut().spent_usd = 0.0;
        call(&turn).expect("granted");
        block_on(turn.settle(&answer("claude-sonnet-4-5", 1_000, 5_000)));
        call(&turn).expect("granted");
        assert!(memory.notes.borrow().is_empty());
        block_on(turn.settle(&answer("claude-sonnet-4-5", 1_000, 300)));
        call(&turn).expect("granted");
        assert_eq!(
            memory.notes.borrow().len(),
            1,
            "{:?}",
            memory.notes.borrow()
        );
        assert!(memory.notes.borrow()[0].contains("80% of the budget is spent ($0.09 of $0.10"));
        block_on(turn.settle(&answer("claude-sonnet-4-5", 10, 10)));
        call(&turn).expect("granted");
        assert_eq!(memory.notes.borrow().len(), 1);
    }

    #[test]
    fn a_budget_read_in_another_period_is_read_again() {
        let (turn, memory) = resolver(0.1, false);
        // The turn read yesterday's budget (all of it spent); the object has no figure for today.
        let yesterday = memory.budget.borrow().clone();
        *turn.read.borrow_mut() = Some(Some(Budget {
            spent_usd: 0.1,
            resets_at: yesterday.resets_at - 86_400_000,
            ..yesterday
        }));
        assert_eq!(call(&turn).map(|(_, tokens)| tokens).ok(), Some(4_000));
    }
}
