//! Credits and model tiers (the design's resolver, at the edge): each user has a budget in US
//! dollars per UTC day or month (`budgets` rows set by an admin, else `USER_BUDGET_USD` /
//! `USER_BUDGET_PERIOD` for everyone), spent as the usage ledger records it. Before every LLM
//! call the resolver reserves the call's worst case with the user's spend object
//! ([`super::spend`]): what the budget covers, the conversation's model answers (with fewer
//! output tokens when the rest covers fewer); below [`MIN_TOKENS`] `BUDGET_MODEL` does (the
//! turn switches mid-loop), or, without one, the turn ends with an error (and the Worker
//! refuses new messages with 402 before any work). Each call is settled when it ends.
//!
//! The budget is read from D1 once per turn, with the history; the period arithmetic and the
//! resolver's choices are tested natively against an in-memory spend.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::error::ApiError;
use super::spend::{Ask, Reply, Seed, Settle};
use crate::agent::tools::civil_from_days;
use crate::agent::{AgentMessage, CallPlan, ProviderResolver, Resolved};
use crate::llm::models::Registry;
use crate::llm::{AssistantMessage, LlmError, Provider};

/// A share of the budget past which the user is warned, once per period.
pub const WARN_AT: f64 = 0.8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Period {
    Day,
    Month,
}

impl Period {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "day" => Some(Period::Day),
            "month" => Some(Period::Month),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    /// The UTC start of the period holding `now_ms`, and the start of the next one.
    pub fn bounds(self, now_ms: i64) -> (i64, i64) {
        const DAY_MS: i64 = 86_400_000;
        let day = now_ms.div_euclid(DAY_MS);
        match self {
            Period::Day => (day * DAY_MS, (day + 1) * DAY_MS),
            Period::Month => {
                let (y, m, _) = civil_from_days(day);
                let start = days_from_civil(y, m, 1);
                let next = if m == 12 {
                    days_from_civil(y + 1, 1, 1)
                } else {
                    days_from_civil(y, m + 1, 1)
                };
                (start * DAY_MS, next * DAY_MS)
            }
        }
    }
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A user's budget for the current period and what they spent of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub limit_usd: f64,
    pub period: Period,
    pub spent_usd: f64,
    /// When the period resets (ms since the epoch).
    pub resets_at: i64,
    /// The user was already warned this period.
    pub warned: bool,
}

impl Budget {
    pub fn over(&self) -> bool {
        self.spent_usd >= self.limit_usd
    }

    /// The ledger's total, for a spend object that holds none for this period.
    pub fn seed(&self) -> Seed {
        Seed {
            period_start: self.period.bounds(self.resets_at - 1).0,
            spent_usd: self.spent_usd,
        }
    }

    /// Why a call may not be made: the budget is spent, or what is left (`spent_usd` counting
    /// the calls in flight) is too little for an answer.
    pub fn short_message(&self) -> String {
        if self.over() {
            return self.exhausted_message();
        }
        format!(
            "your budget of {} per {} has {} left, too little for an answer; it resets at {}",
            usd(self.limit_usd),
            self.period.as_str(),
            usd(self.limit_usd - self.spent_usd),
            iso_utc(self.resets_at)
        )
    }

    /// Why nothing more may be spent, with when that changes.
    pub fn exhausted_message(&self) -> String {
        format!(
            "your budget of {} per {} is spent ({}); it resets at {}",
            usd(self.limit_usd),
            self.period.as_str(),
            usd(self.spent_usd),
            iso_utc(self.resets_at)
        )
    }
}

/// `$1.25`, or four decimals below a cent (`$0.0003`).
pub fn usd(amount: f64) -> String {
    // Whole hundredths (or ten-thousandths) in integers: `{:.2}` on a float would ship core's
    // exact float formatting (14 KB of wasm) for this one line.
    let places: usize = if amount != 0.0 && amount.abs() < 0.01 {
        4
    } else {
        2
    };
    let scale: u64 = if places == 4 { 10_000 } else { 100 };
    let units = (amount.abs() * scale as f64).round() as u64;
    let sign = if amount < 0.0 && units != 0 { "-" } else { "" };
    format!("${sign}{}.{:0places$}", units / scale, units % scale)
}

/// `2026-12-01T00:00:00Z`.
pub fn iso_utc(ms: i64) -> String {
    let day = ms.div_euclid(86_400_000);
    let (y, m, d) = civil_from_days(day);
    let s = ms.rem_euclid(86_400_000) / 1000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// Where the resolver reads a budget, holds and settles its calls' costs, and records what it
/// decided.
#[async_trait(?Send)]
pub trait BudgetStore {
    /// The user's budget now, as the ledger has it, or `None` when they have none.
    async fn budget(&self) -> Result<Option<Budget>, ApiError>;
    /// Reserves a call's worst case against the user's spend (see [`super::spend`]).
    async fn reserve(&self, ask: &Ask) -> Result<Reply, ApiError>;
    /// Settles a call that ended.
    async fn settle(&self, settle: &Settle);
    /// Stores a message in the conversation that never reaches a model (a context note or a
    /// system event).
    async fn note(&self, message: AgentMessage);
    /// Remembers that the user was warned in the current `period`.
    async fn mark_warned(&self, period: Period);
}

/// The fewest output tokens worth a call on the conversation's model: below them it goes to
/// `BUDGET_MODEL`, or is refused.
pub const MIN_TOKENS: u32 = 256;

/// Picks the model before every LLM call from the user's budget, and holds the call's worst
/// case until it ends.
pub struct BudgetResolver {
    pub store: Rc<dyn BudgetStore>,
    pub model: Rc<dyn Provider>,
    pub economy: Option<Rc<dyn Provider>>,
    /// Prices, for what a call may cost and what it did.
    pub models: Registry,
    /// Times the turn moved to the economy model.
    pub switches: Rc<Cell<u32>>,
    /// The budget as read with the turn's history (else at its first call).
    pub read: RefCell<Option<Option<Budget>>>,
    /// The reservation the call in flight holds.
    pub open: RefCell<Option<String>>,
}

impl BudgetResolver {
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
                    iso_utc(budget.resets_at)
                ),
            })
            .await;
    }
}

#[async_trait(?Send)]
impl ProviderResolver for BudgetResolver {
    async fn resolve(&self, call: CallPlan<'_>) -> Result<Resolved, LlmError> {
        let Some(mut budget) = self.budget(false).await? else {
            return Ok(Resolved {
                provider: self.model.clone(),
                max_tokens: call.max_tokens,
            });
        };
        // Unpriced models are refused before a turn starts when budgets are on.
        let price = self
            .models
            .info(self.model.model())
            .price
            .unwrap_or_default();
        let mut ask = Ask {
            limit_usd: budget.limit_usd,
            period: budget.period,
            ledger: budget.seed(),
            input_usd: (call.input_tokens)() as f64 * price.input / 1_000_000.0,
            usd_per_output_token: price.output / 1_000_000.0,
            max_tokens: call.max_tokens,
            min_tokens: MIN_TOKENS,
        };
        let mut reply = Reply::Reseed;
        for again in [false, true] {
            if again {
                // The period turned since the turn read its budget.
                if let Some(fresh) = self.budget(true).await? {
                    budget = fresh;
                }
                ask.limit_usd = budget.limit_usd;
                ask.period = budget.period;
                ask.ledger = budget.seed();
            }
            reply =
                self.store.reserve(&ask).await.map_err(|e| {
                    LlmError::Config(format!("the budget could not be checked: {e}"))
                })?;
            if reply != Reply::Reseed {
                break;
            }
        }
        match reply {
            Reply::Granted {
                call: held,
                max_tokens,
                committed_usd,
            } => {
                *self.open.borrow_mut() = Some(held);
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

    async fn settle(&self, answer: &AssistantMessage) {
        let call = self.open.borrow_mut().take();
        let cost = self
            .models
            .info(&answer.model_ref())
            .cost(&answer.usage)
            .unwrap_or(0.0);
        if call.is_some() || cost > 0.0 {
            self.store
                .settle(&Settle {
                    call,
                    cost_usd: cost,
                })
                .await;
        }
    }

    fn intended(&self) -> Option<crate::llm::ModelRef> {
        Some(self.model.model().clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_utc_days_and_calendar_months() {
        // 2026-11-22T08:30:00Z
        let now = 1_795_336_200_000;
        let (start, next) = Period::Day.bounds(now);
        assert_eq!(iso_utc(start), "2026-11-22T00:00:00Z");
        assert_eq!(iso_utc(next), "2026-11-23T00:00:00Z");
        let (start, next) = Period::Month.bounds(now);
        assert_eq!(iso_utc(start), "2026-11-01T00:00:00Z");
        assert_eq!(iso_utc(next), "2026-12-01T00:00:00Z");
        // December rolls into the next year; February of a leap year has 29 days.
        let december = 1_796_601_600_000 + 86_400_000 * 10; // 2026-12-11
        assert_eq!(
            iso_utc(Period::Month.bounds(december).1),
            "2027-01-01T00:00:00Z"
        );
        let leap = 1_709_164_800_000; // 2024-02-29T00:00:00Z
        assert_eq!(iso_utc(leap), "2024-02-29T00:00:00Z");
        assert_eq!(
            iso_utc(Period::Month.bounds(leap).1),
            "2024-03-01T00:00:00Z"
        );
    }

    #[test]
    fn money_is_written_as_people_read_it() {
        let budget = |spent_usd| Budget {
            limit_usd: 1.0,
            period: Period::Day,
            spent_usd,
            resets_at: 0,
            warned: false,
        };
        assert!(budget(1.2)
            .short_message()
            .contains("$1.00 per day is spent ($1.20); it resets at 1970-01-01T00:00:00Z"));
        assert!(budget(0.999)
            .short_message()
            .contains("$1.00 per day has $0.0010 left, too little for an answer"));
        assert_eq!(usd(0.0003), "$0.0003");
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(usd(12.345_6), "$12.35");
        assert_eq!(usd(0.009_99), "$0.0100");
        assert_eq!(usd(-1.5), "$-1.50");
    }

    use crate::agent::{CallPlan, Resolved};
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
        spend: RefCell<Option<super::super::spend::Spend>>,
        notes: RefCell<Vec<String>>,
        settled: RefCell<Vec<Settle>>,
        now: Cell<i64>,
    }

    #[async_trait(?Send)]
    impl BudgetStore for Memory {
        async fn budget(&self) -> Result<Option<Budget>, ApiError> {
            Ok(Some(self.budget.borrow().clone()))
        }
        async fn reserve(&self, ask: &Ask) -> Result<Reply, ApiError> {
            let mut spend = self.spend.borrow_mut();
            Ok(super::super::spend::Spend::reserve(
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
        });
        let named = |id: &str| -> Rc<dyn Provider> {
            Rc::new(Named(ModelRef::parse(id).expect("a model id")))
        };
        let resolver = BudgetResolver {
            store: memory.clone(),
            model: named("anthropic:claude-sonnet-4-5"),
            economy: economy.then(|| named("anthropic:claude-haiku-4-5")),
            models: Registry::default(),
            switches: Rc::default(),
            read: RefCell::default(),
            open: RefCell::default(),
        };
        (resolver, memory)
    }

    /// A call of 1,000 input tokens asking for up to 4,000 output tokens: on Sonnet at most
    /// $0.003 + $0.06.
    fn call(resolver: &BudgetResolver) -> Result<(String, u32), LlmError> {
        let input = || 1_000;
        let plan = CallPlan {
            max_tokens: 4_000,
            input_tokens: &input,
        };
        block_on(resolver.resolve(plan)).map(
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
