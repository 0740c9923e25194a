//! `GET /v1/usage` (the caller's spend in the current budget period, per model, and the limit)
//! and `PUT /v1/admin/budgets/{user}` (an admin sets a user's budget).

use worker::{Env, Request, Response};

use crate::agent::calendar::format_utc;
use crate::edge::budget::Period;
use crate::edge::config::Config;
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::gateway::auth::Caller;
use crate::edge::gateway::body::json_body;
use crate::edge::json_response;
use crate::edge::platform::clock::now_ms;

pub async fn get(env: &Env, config: &Config, user: &str) -> Result<Response, ApiError> {
    let store = Store::for_owner(env, user).await?;
    let now = now_ms();
    let default = config
        .user_budget_usd
        .map(|limit| (limit, config.budget_period));
    let budget = store.budget(user, default, now).await?;
    let period = budget.as_ref().map_or(config.budget_period, |b| b.period);
    let (start, resets_at) = period.bounds(now);
    let models = store.spend_by_model(user, start).await?;
    let spent: f64 = models.iter().filter_map(|m| m.cost_usd).sum();
    json_response(
        200,
        &serde_json::json!({
            "user": user,
            "period": period.as_str(),
            "period_start": format_utc(start),
            "resets_at": format_utc(resets_at),
            // Budgets apply only when USER_BUDGET_USD is set.
            "limit_usd": config.user_budget_usd.and(budget.as_ref().map(|b| b.limit_usd)),
            "spent_usd": spent,
            "models": models,
        }),
    )
}

struct BudgetIn {
    limit_usd: f64,
    period: Period,
}

crate::json_struct!(#[deny_unknown_fields] BudgetIn {
    "limit_usd" => limit_usd,
    "period" => period,
});

pub async fn put(
    req: Request,
    env: &Env,
    config: &Config,
    caller: &Caller,
    user: &str,
) -> Result<Response, ApiError> {
    if !caller.admin {
        return Err(ApiError::Forbidden(
            "setting budgets needs a server key marked admin in API_KEYS (`name:key:admin`)".into(),
        ));
    }
    let body: BudgetIn = json_body(req).await?;
    if !body.limit_usd.is_finite() || body.limit_usd < 0.0 {
        return Err(ApiError::BadRequest(
            "`limit_usd` must be a number of US dollars, 0 or more".into(),
        ));
    }
    if user.is_empty() || user.len() > 256 {
        return Err(ApiError::BadRequest(
            "the user must be 1 to 256 characters".into(),
        ));
    }
    Store::for_owner(env, user)
        .await?
        .set_budget(user, body.limit_usd, body.period, now_ms())
        .await?;
    json_response(
        200,
        &serde_json::json!({
            "user": user,
            "limit_usd": body.limit_usd,
            "period": body.period.as_str(),
            "enforced": config.user_budget_usd.is_some(),
        }),
    )
}
