//! `GET /v1/conversations/{id}/artifacts`, `GET` and `PUT /v1/conversations/{id}/artifacts/{aid}`:
//! a conversation's artifacts over HTTP. A user's `PUT` is a new version the model sees (in the
//! system prompt's index) at its next call.

use worker::{Env, Request, Response};

use super::owned;
use crate::agent::artifacts::{check, Artifact, ArtifactKind, Author};
use crate::edge::config::Config;
use crate::edge::d1::Store;
use crate::edge::error::ApiError;
use crate::edge::gateway::body::json_body;
use crate::edge::json_response;
use crate::edge::platform::clock::now_ms;

pub async fn list(env: &Env, user: &str, id: &str) -> Result<Response, ApiError> {
    // The conversation `id` names for the caller (a `/v1/chat` id resolves to theirs).
    let owned = owned(env, user, id).await?;
    let id = owned.id.as_str();
    let artifacts = Store::for_owner(env, user).await?.artifacts(id).await?;
    json_response(200, &serde_json::json!({ "artifacts": artifacts }))
}

/// The latest version, or `?version=N`.
pub async fn get(
    req: &Request,
    env: &Env,
    user: &str,
    id: &str,
    artifact_id: &str,
) -> Result<Response, ApiError> {
    // The conversation `id` names for the caller (a `/v1/chat` id resolves to theirs).
    let owned = owned(env, user, id).await?;
    let id = owned.id.as_str();
    let mut version = None;
    for (key, value) in super::query_pairs(req) {
        if key == "version" {
            let v = super::query_int("version", &value, 1, i64::from(u32::MAX))?;
            version = u32::try_from(v).ok();
        }
    }
    let artifact = Store::for_owner(env, user)
        .await?
        .artifact(id, artifact_id, version)
        .await?
        .ok_or_else(|| {
            ApiError::NotFound(match version {
                Some(v) => format!("artifact `{artifact_id}` has no version {v}"),
                None => format!("conversation `{id}` has no artifact `{artifact_id}`"),
            })
        })?;
    json_response(200, &artifact)
}

struct Put {
    content: String,
    title: Option<String>,
    kind: Option<String>,
    /// The version this one follows; when given, a different latest version is a conflict.
    base_version: Option<u32>,
}

crate::json_struct!(#[deny_unknown_fields] Put {
    "content" => content,
    "title" => title,
    "kind" => kind,
    "base_version" => base_version,
});

/// A new version by the user; creates the artifact (with `title` and `kind`) if it is new.
pub async fn put(
    req: Request,
    env: &Env,
    config: &Config,
    user: &str,
    id: &str,
    artifact_id: &str,
) -> Result<Response, ApiError> {
    // The conversation `id` names for the caller (a `/v1/chat` id resolves to theirs).
    let owned = owned(env, user, id).await?;
    let id = owned.id.as_str();
    let body: Put = json_body(req).await?;
    if artifact_id.is_empty() || artifact_id.chars().count() > 64 {
        return Err(ApiError::BadRequest(
            "an artifact id is 1 to 64 characters".into(),
        ));
    }
    let store = Store::for_owner(env, user).await?;
    let now = now_ms();
    let previous = store.artifact(id, artifact_id, None).await?;
    let kind = body
        .kind
        .as_deref()
        .map(ArtifactKind::parse)
        .transpose()
        .map_err(ApiError::BadRequest)?;
    let next = match previous {
        Some(previous) => {
            if let Some(base) = body.base_version.filter(|b| *b != previous.version) {
                return Err(ApiError::Conflict(format!(
                    "artifact `{artifact_id}` is at version {}, not {base}; read it and try again",
                    previous.version
                )));
            }
            if kind.is_some_and(|k| k != previous.kind) {
                return Err(ApiError::Conflict(format!(
                    "artifact `{artifact_id}` is `{}`; its kind does not change",
                    previous.kind.as_str()
                )));
            }
            Artifact {
                title: body.title.unwrap_or(previous.title),
                content: body.content,
                version: previous.version + 1,
                author: Author::User,
                updated_at: now,
                id: previous.id,
                kind: previous.kind,
                created_at: previous.created_at,
            }
        }
        None => Artifact {
            id: artifact_id.to_string(),
            title: body.title.ok_or_else(|| new_needs(artifact_id, "title"))?,
            kind: kind.ok_or_else(|| new_needs(artifact_id, "kind"))?,
            content: body.content,
            version: 1,
            author: Author::User,
            created_at: now,
            updated_at: now,
        },
    };
    check(next.kind, &next.title, &next.content).map_err(|e| {
        if e.contains("at most") {
            ApiError::PayloadTooLarge(e)
        } else {
            ApiError::BadRequest(e)
        }
    })?;
    store
        .put_artifact(id, &next, config.artifact_limits)
        .await?;
    json_response(if next.version == 1 { 201 } else { 200 }, &next)
}

/// A PUT without `field` updates an artifact; there is none by that id to update.
fn new_needs(artifact_id: &str, field: &str) -> ApiError {
    ApiError::NotFound(format!(
        "there is no artifact `{artifact_id}` to update; creating it needs a `{field}`"
    ))
}
