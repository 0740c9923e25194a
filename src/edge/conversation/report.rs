//! The turn's log line.

use super::{Claimed, Object};
use crate::edge::conversation::turn::{TurnEnv, TurnResult};
use crate::edge::platform::clock::now_ms;
use crate::llm::ModelRef;

/// One structured log line per turn, with no message content and no secret: who (`who`: its
/// conversation and user), which models, how it ended, how long the first token took, what it
/// cost, and the requests to this object, D1 round trips and SQL statements it took (the
/// Worker adds one request and, for a conversation it resolves, one round trip).
pub(super) fn log_turn(
    claimed: &Claimed,
    result: &TurnResult,
    object: &Object,
    turn_env: &TurnEnv,
    (conversation_id, user): &(String, String),
) {
    let outcome = result.outcome.name();
    let stats = &result.stats;
    let mut cost: Option<f64> = None;
    let calls: Vec<serde_json::Value> = stats
        .calls
        .iter()
        .map(|call| {
            let model = ModelRef {
                provider: call.provider.clone(),
                model: call.model.clone(),
            };
            let call_cost = turn_env.config.models.cost(&model, &call.usage);
            if let Some(c) = call_cost {
                cost = Some(cost.unwrap_or(0.0) + c);
            }
            serde_json::json!({
                "provider": call.provider,
                "model": call.model,
                "input_tokens": call.usage.input_tokens,
                "output_tokens": call.usage.output_tokens,
            })
        })
        .collect();
    let usage = stats.usage();
    let line = serde_json::json!({
        "event": "turn",
        "level": "info",
        "request_id": claimed.request_id,
        "turn_id": claimed.turn_id,
        "conversation_id": conversation_id,
        "user": user,
        "outcome": outcome,
        "calls": calls,
        "first_token_ms": stats.first_token_ms,
        "duration_ms": now_ms() - claimed.started_at,
        "llm_calls": stats.calls.len(),
        "tool_calls": stats.tool_calls,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": cost,
        "retries": stats.retries,
        "fallbacks": stats.fallbacks,
        "budget_switches": stats.budget_switches,
        "messages": result.messages.len(),
        "memory": result.memory,
        "object_requests": object.requests.get().wrapping_sub(claimed.requests_before),
        "d1_round_trips": turn_env.store.round_trips().wrapping_sub(claimed.d1_before),
        "sql_statements": claimed
            .sql_ended
            .get()
            .unwrap_or_else(|| object.storage.statements())
            .wrapping_sub(claimed.sql_before),
    });
    worker::console_log!("{line}");
}
