//! The usage ledger and budgets: each call's row, a user's budget and spend for the period,
//! what they spent per model.

use serde::Serialize;
use worker::wasm_bindgen::JsValue;

use super::params::BindParams;
use super::rows;
use super::Store;
use crate::edge::budget::{Budget, Period};
use crate::edge::error::ApiError;

/// One LLM call in the owner's usage ledger.
pub struct UsageRow<'a> {
    pub owner: &'a str,
    pub model: &'a str,
    pub provider: &'a str,
    pub usage: &'a crate::llm::Usage,
    pub cost_usd: Option<f64>,
}

impl<'a> UsageRow<'a> {
    /// The row of a call of `model` that used `usage`, at its price in `models`.
    pub fn of_call(
        owner: &'a str,
        model: &'a crate::llm::ModelRef,
        usage: &'a crate::llm::Usage,
        models: &crate::llm::models::Registry,
    ) -> Self {
        Self {
            owner,
            model: &model.model,
            provider: &model.provider,
            usage,
            cost_usd: models.cost(model, usage),
        }
    }
}

/// Whose budget a turn reads in its history's round trip, and the deployment's default
/// (`USER_BUDGET_USD`, `USER_BUDGET_PERIOD`).
pub struct BudgetRead<'a> {
    pub owner: &'a str,
    pub default: (f64, Period),
}

/// What a user spent on one model in a period (`GET /v1/usage`).
#[derive(Debug, Serialize)]
pub struct ModelSpend {
    pub provider: String,
    pub model: String,
    pub calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// `None` when no call's price was known.
    pub cost_usd: Option<f64>,
}

crate::json_struct!(ModelSpend {
    "provider" => provider,
    "model" => model,
    "calls" => calls,
    "input_tokens" => input_tokens,
    "output_tokens" => output_tokens,
    "cost_usd" => cost_usd,
});

impl Store {
    /// A ledger row for a call that stores no message (compaction's summary requests).
    pub async fn record_usage(
        &self,
        conversation_id: &str,
        usage: &UsageRow<'_>,
        now_ms: i64,
    ) -> Result<(), ApiError> {
        self.tick(1);
        self.ledger_row(conversation_id, usage, now_ms)?
            .run()
            .await?;
        Ok(())
    }

    /// What an answer cost whose conversation was deleted while it streamed (an erasure or a
    /// `DELETE` cancelled the turn): the answer cannot be stored, but its cost is, under no
    /// conversation. Written only when the conversation is gone, so an answer whose own batch
    /// landed is never charged twice.
    pub async fn record_usage_of_deleted(
        &self,
        conversation_id: &str,
        usage: &UsageRow<'_>,
        now_ms: i64,
    ) -> Result<(), ApiError> {
        self.tick(1);
        self.ledger_statement(
            "INSERT INTO usage_ledger (owner, conversation_id, model, provider, input_tokens,
               output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, created_at,
               estimated)
             SELECT ?1, '', ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11
             WHERE NOT EXISTS (SELECT 1 FROM conversations WHERE id = ?2)",
            conversation_id,
            usage,
            now_ms,
        )?
        .run()
        .await?;
        Ok(())
    }

    /// What one LLM call cost, as a row of the owner's usage ledger.
    pub(super) fn ledger_row(
        &self,
        conversation_id: &str,
        row: &UsageRow<'_>,
        now_ms: i64,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        self.ledger_statement(
            "INSERT INTO usage_ledger (owner, conversation_id, model, provider, input_tokens,
               output_tokens, cache_read_tokens, cache_write_tokens, cost_usd, created_at,
               estimated)
             VALUES (?1, CASE WHEN EXISTS (SELECT 1 FROM conversations WHERE id = ?2) THEN ?2
                 ELSE '' END, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            conversation_id,
            row,
            now_ms,
        )
    }

    /// `sql` with a ledger row's eleven parameters bound.
    fn ledger_statement(
        &self,
        sql: &str,
        conversation_id: &str,
        row: &UsageRow<'_>,
        now_ms: i64,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        let usage = row.usage;
        self.db.prepare(sql).bind_params(&[
            row.owner.into(),
            conversation_id.into(),
            row.model.into(),
            row.provider.into(),
            (usage.input_tokens as f64).into(),
            (usage.output_tokens as f64).into(),
            (usage.cache_read_tokens as f64).into(),
            (usage.cache_write_tokens as f64).into(),
            row.cost_usd.into(),
            (now_ms as f64).into(),
            f64::from(u8::from(usage.estimated)).into(),
        ])
    }

    /// `owner`'s budget now: their own row, else `default` (limit, period); `None` when neither
    /// gives a limit. One round trip.
    pub async fn budget(
        &self,
        owner: &str,
        default: Option<(f64, Period)>,
        now_ms: i64,
    ) -> Result<Option<Budget>, ApiError> {
        self.tick(1);
        let results = rows::batch(&self.db, &self.budget_statements(owner, now_ms)?).await?;
        budget_from(&results, default, now_ms)
    }

    /// The two reads a budget is made of (the user's row, what they spent this day and month),
    /// for a batch of their own or a turn's history batch; [`budget_from`] reads their results.
    pub(super) fn budget_statements(
        &self,
        owner: &str,
        now_ms: i64,
    ) -> Result<[worker::D1PreparedStatement; 2], ApiError> {
        let (day_start, _) = Period::Day.bounds(now_ms);
        let (month_start, _) = Period::Month.bounds(now_ms);
        Ok([
            self.db
                .prepare("SELECT limit_usd, period, warned_period FROM budgets WHERE user = ?1")
                .bind_params(&[owner.into()])?,
            self.db
                .prepare(
                    "SELECT SUM(CASE WHEN created_at >= ?2 THEN cost_usd ELSE 0 END) AS day_usd,
                            SUM(cost_usd) AS month_usd
                     FROM usage_ledger WHERE owner = ?1 AND created_at >= ?3",
                )
                .bind_params(&[
                    owner.into(),
                    (day_start as f64).into(),
                    (month_start as f64).into(),
                ])?,
        ])
    }

    /// Remembers that `owner` was warned in the period starting at `period_start`.
    pub async fn mark_warned(
        &self,
        owner: &str,
        period_start: i64,
        now_ms: i64,
    ) -> Result<(), ApiError> {
        self.tick(1);
        self.db
            .prepare(
                "INSERT INTO budgets (user, warned_period, updated_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (user) DO UPDATE SET warned_period = excluded.warned_period",
            )
            .bind_params(&[
                owner.into(),
                (period_start as f64).into(),
                (now_ms as f64).into(),
            ])?
            .run()
            .await?;
        Ok(())
    }

    /// Sets `owner`'s budget (an admin's decision).
    pub async fn set_budget(
        &self,
        owner: &str,
        limit_usd: f64,
        period: Period,
        now_ms: i64,
    ) -> Result<(), ApiError> {
        self.tick(1);
        self.db
            .prepare(
                "INSERT INTO budgets (user, limit_usd, period, updated_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (user) DO UPDATE SET limit_usd = excluded.limit_usd,
                   period = excluded.period, updated_at = excluded.updated_at",
            )
            .bind_params(&[
                owner.into(),
                limit_usd.into(),
                period.as_str().into(),
                (now_ms as f64).into(),
            ])?
            .run()
            .await?;
        Ok(())
    }

    /// What `owner` spent per model since `since_ms`, the most expensive first.
    pub async fn spend_by_model(
        &self,
        owner: &str,
        since_ms: i64,
    ) -> Result<Vec<ModelSpend>, ApiError> {
        self.tick(1);
        rows::all(
            &self
                .db
                .prepare(
                    "SELECT provider, model, COUNT(*) AS calls, SUM(input_tokens) AS input_tokens,
                            SUM(output_tokens) AS output_tokens, SUM(cost_usd) AS cost_usd
                     FROM usage_ledger WHERE owner = ?1 AND created_at >= ?2
                     GROUP BY provider, model ORDER BY SUM(cost_usd) DESC, model",
                )
                .bind_params(&[owner.into(), (since_ms as f64).into()])?,
        )
        .await
    }
}

/// The budget from the results of [`Store::budget_statements`], in order.
pub(super) fn budget_from(
    results: &[JsValue],
    default: Option<(f64, Period)>,
    now_ms: i64,
) -> Result<Option<Budget>, ApiError> {
    struct Row {
        limit_usd: Option<f64>,
        period: Option<String>,
        warned_period: Option<i64>,
    }

    crate::json_struct!(Row {
        "limit_usd" => limit_usd,
        "period" => period,
        "warned_period" => warned_period,
    });
    struct Spent {
        day_usd: Option<f64>,
        month_usd: Option<f64>,
    }

    crate::json_struct!(Spent {
        "day_usd" => day_usd,
        "month_usd" => month_usd,
    });
    let (Some(row), Some(spent)) = (results.first(), results.get(1)) else {
        return Err(ApiError::Internal("a D1 batch answered short".into()));
    };
    let row = rows::results::<Row>(row)?.into_iter().next();
    let spent = rows::results::<Spent>(spent)?.into_iter().next();
    let own = row
        .as_ref()
        .and_then(|r| Some((r.limit_usd?, Period::parse(r.period.as_deref()?)?)));
    let Some((limit_usd, period)) = own.or(default) else {
        return Ok(None);
    };
    let (start, resets_at) = period.bounds(now_ms);
    let spent_usd = spent
        .and_then(|s| match period {
            Period::Day => s.day_usd,
            Period::Month => s.month_usd,
        })
        .unwrap_or(0.0);
    Ok(Some(Budget {
        limit_usd,
        period,
        spent_usd,
        resets_at,
        warned: row.and_then(|r| r.warned_period) == Some(start),
    }))
}
