//! `POST/GET /v1/conversations/{id}/schedules`, `DELETE .../schedules/{sid}`: the turns a
//! conversation runs later, kept and run by its object; the owner's only.

use worker::{Env, Method, Request, Response};

use super::owned;
use crate::agent::schedules::ScheduleRequest;
use crate::edge::conversation::client::ConversationClient;
use crate::edge::error::ApiError;
use crate::edge::gateway::body::json_body;
use crate::edge::protocol::{ScheduleHandover, TurnConversation};

/// Creates a schedule: 201 with it, 400 for a time or expression it cannot take (a one-time
/// schedule less than `SCHEDULE_MIN_INTERVAL_SECONDS` ahead among them, as the model's are), 409
/// when the conversation keeps as many as it may, 429 when it made `MAX_SCHEDULES_PER_DAY` in
/// the last 24 hours (cancelled and finished ones count).
pub async fn create(req: Request, env: &Env, user: &str, id: &str) -> Result<Response, ApiError> {
    let request: ScheduleRequest = json_body(req).await?;
    // The conversation `id` names for the caller (a `/v1/chat` id resolves to theirs).
    let conversation = owned(env, user, id).await?;
    let handover = ScheduleHandover {
        conversation: TurnConversation::from(&conversation),
        request,
    };
    ConversationClient::for_conversation(env, &conversation.id)?
        .schedules(Method::Post, None, Some(serde_json::to_string(&handover)?))
        .await
}

/// The conversation's schedules, oldest first, with their next and last runs.
pub async fn list(env: &Env, user: &str, id: &str) -> Result<Response, ApiError> {
    let conversation = owned(env, user, id).await?;
    ConversationClient::for_conversation(env, &conversation.id)?
        .schedules(Method::Get, None, None)
        .await
}

/// Cancels a schedule (204); its turn, if one runs, finishes.
pub async fn cancel(env: &Env, user: &str, id: &str, schedule: &str) -> Result<Response, ApiError> {
    let conversation = owned(env, user, id).await?;
    ConversationClient::for_conversation(env, &conversation.id)?
        .schedules(Method::Delete, Some(schedule), None)
        .await
}
