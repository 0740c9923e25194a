//! The budget gate: work for a user whose budget is spent is refused before it starts (402),
//! when no cheaper model may answer instead. Shared by the routes that start turns and by MCP's
//! calls.

use worker::Env;

use crate::edge::config::Config;
use crate::edge::d1;
use crate::edge::error::ApiError;
use crate::edge::platform::clock::now_ms;

/// A message that would start work for a user whose budget is spent, when no cheaper model
/// may answer instead: 402 with when the budget resets. (With `BUDGET_MODEL` the turn runs on it.)
pub async fn budget_check(env: &Env, config: &Config, user: &str) -> Result<(), ApiError> {
    let (Some(limit), None) = (config.user_budget_usd, &config.budget_model) else {
        return Ok(());
    };
    let budget = d1::Store::for_owner(env, user)
        .await?
        .budget(user, Some((limit, config.budget_period)), now_ms())
        .await?;
    match budget {
        Some(budget) if budget.over() => Err(ApiError::PaymentRequired(budget.exhausted_message())),
        _ => Ok(()),
    }
}
