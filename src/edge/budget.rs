//! Credits and model tiers (seed 000's resolver, at the edge): each user has a budget in US
//! dollars per UTC day or month (`budgets` rows set by an admin, else `USER_BUDGET_USD` /
//! `USER_BUDGET_PERIOD` for everyone), spent as the usage ledger records it. Before every LLM
//! call of a turn the resolver looks: within budget the conversation's model answers; over it
//! `BUDGET_MODEL` does (the turn switches mid-loop), or, without one, the turn ends with an
//! error (and the Worker refuses new messages with 402 before any work).
//!
//! The policy ([`Budget::decide`], the period arithmetic) is pure and tested natively; the
//! resolver reads D1 once per turn and adds the turn's own calls as they are made.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use async_trait::async_trait;
use serde::Deserialize;

use super::error::ApiError;
use crate::agent::tools::civil_from_days;
use crate::agent::{AgentMessage, ProviderResolver};
use crate::llm::{LlmError, Provider};

/// A share of the budget past which the user is warned, once per period.
pub const WARN_AT: f64 = 0.8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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

/// What the next LLM call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The conversation's model answers.
    Within,
    /// The conversation's model answers, and the user is told 80% is spent.
    Warn,
    /// Over budget: the economy model answers.
    Economy,
    /// Over budget and no economy model: nothing may be called.
    Refuse,
}

impl Budget {
    pub fn over(&self) -> bool {
        self.spent_usd >= self.limit_usd
    }

    pub fn decide(&self, has_economy_model: bool) -> Decision {
        if self.over() {
            if has_economy_model {
                Decision::Economy
            } else {
                Decision::Refuse
            }
        } else if !self.warned && self.spent_usd >= WARN_AT * self.limit_usd {
            Decision::Warn
        } else {
            Decision::Within
        }
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

/// Where the resolver reads a budget and records what it decided.
#[async_trait(?Send)]
pub trait BudgetStore {
    /// The user's budget now, or `None` when they have none.
    async fn budget(&self) -> Result<Option<Budget>, ApiError>;
    /// Stores a message in the conversation that never reaches a model (a context note or a
    /// system event).
    async fn note(&self, message: AgentMessage);
    /// Remembers that the user was warned in the current `period`.
    async fn mark_warned(&self, period: Period);
}

/// Picks the model before every LLM call from the user's budget.
pub struct BudgetResolver {
    pub store: Rc<dyn BudgetStore>,
    pub model: Rc<dyn Provider>,
    pub economy: Option<Rc<dyn Provider>>,
    /// What the turn's own calls cost so far (they are in the ledger too, but the budget is
    /// read once per turn).
    pub turn_spent: Rc<Cell<f64>>,
    /// Times the turn moved to the economy model.
    pub switches: Rc<Cell<u32>>,
    /// The budget as read with the turn's history (else at its first call).
    pub read: RefCell<Option<Option<Budget>>>,
}

#[async_trait(?Send)]
impl ProviderResolver for BudgetResolver {
    async fn resolve(&self) -> Result<Rc<dyn Provider>, LlmError> {
        if self.read.borrow().is_none() {
            let budget = self
                .store
                .budget()
                .await
                .map_err(|e| LlmError::Config(format!("the budget could not be read: {e}")))?;
            *self.read.borrow_mut() = Some(budget);
        }
        let Some(mut budget) = self.read.borrow().clone().flatten() else {
            return Ok(self.model.clone());
        };
        budget.spent_usd += self.turn_spent.get();
        match budget.decide(self.economy.is_some()) {
            Decision::Within => Ok(self.model.clone()),
            Decision::Warn => {
                if let Some(Some(read)) = self.read.borrow_mut().as_mut() {
                    read.warned = true;
                }
                self.store.mark_warned(budget.period).await;
                self.store
                    .note(AgentMessage::SystemEvent {
                        text: format!(
                            "{}% of the budget is spent ({} of {} per {}); it resets at {}",
                            (WARN_AT * 100.0).round() as u32,
                            usd(budget.spent_usd),
                            usd(budget.limit_usd),
                            budget.period.as_str(),
                            iso_utc(budget.resets_at)
                        ),
                    })
                    .await;
                Ok(self.model.clone())
            }
            Decision::Economy => {
                let economy = self.economy.clone().unwrap_or_else(|| self.model.clone());
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
                Ok(economy)
            }
            Decision::Refuse => Err(LlmError::BudgetExceeded(budget.exhausted_message())),
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
    fn the_decision_follows_the_spend() {
        let budget = |spent_usd, warned| Budget {
            limit_usd: 1.0,
            period: Period::Day,
            spent_usd,
            resets_at: 0,
            warned,
        };
        assert_eq!(budget(0.5, false).decide(true), Decision::Within);
        assert_eq!(budget(0.8, false).decide(true), Decision::Warn);
        assert_eq!(budget(0.9, true).decide(true), Decision::Within);
        assert_eq!(budget(1.0, true).decide(true), Decision::Economy);
        assert_eq!(budget(1.2, false).decide(false), Decision::Refuse);
        assert!(budget(1.2, false)
            .exhausted_message()
            .contains("$1.00 per day is spent ($1.20); it resets at 1970-01-01T00:00:00Z"));
        assert_eq!(usd(0.0003), "$0.0003");
        assert_eq!(usd(0.0), "$0.00");
        assert_eq!(usd(12.345_6), "$12.35");
        assert_eq!(usd(0.009_99), "$0.0100");
        assert_eq!(usd(-1.5), "$-1.50");
    }
}
