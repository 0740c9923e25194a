//! The `artifacts` table: versioned artifacts, each version a row, held to the deployment's
//! counts inside the statement that writes them.

use super::params::BindParams;
use super::rows;
use super::{Created, Store};
use crate::agent::artifacts::{first_line, Artifact, ArtifactKind, ArtifactSummary, Author};
use crate::edge::config::ArtifactLimits;
use crate::edge::error::ApiError;

/// An artifact version as D1 returns it.
pub(super) struct ArtifactRow {
    id: String,
    title: String,
    kind: String,
    content: String,
    version: i64,
    author: String,
    created_at: i64,
    updated_at: i64,
}

crate::json_struct!(ArtifactRow {
    "id" => id,
    "title" => title,
    "kind" => kind,
    "content" => content: default,
    "version" => version,
    "author" => author: default,
    "created_at" => created_at: default,
    "updated_at" => updated_at,
});

impl ArtifactRow {
    fn kind(&self) -> Result<ArtifactKind, ApiError> {
        ArtifactKind::parse(&self.kind)
            .map_err(|e| ApiError::Internal(format!("artifact {}: {e}", self.id)))
    }
}

/// The first line of an artifact's content, as the listing shows it.
const HEAD_CHARS: usize = 120;

pub(super) fn summaries(rows: Vec<ArtifactRow>) -> Result<Vec<ArtifactSummary>, ApiError> {
    rows.into_iter()
        .map(|row| {
            Ok(ArtifactSummary {
                kind: row.kind()?,
                first_line: first_line(&row.content, HEAD_CHARS),
                version: row.version as u32,
                id: row.id,
                title: row.title,
                updated_at: row.updated_at,
            })
        })
        .collect()
}

impl Store {
    /// Artifact `id` of a conversation: its latest version, or `version`.
    pub async fn artifact(
        &self,
        conversation_id: &str,
        id: &str,
        version: Option<u32>,
    ) -> Result<Option<Artifact>, ApiError> {
        self.tick(1);
        let statement = match version {
            Some(v) => self
                .db
                .prepare(
                    "SELECT * FROM artifacts WHERE conversation_id = ?1 AND id = ?2 AND version = ?3",
                )
                .bind_params(&[conversation_id.into(), id.into(), f64::from(v).into()])?,
            None => self
                .db
                .prepare(
                    "SELECT * FROM artifacts WHERE conversation_id = ?1 AND id = ?2
                     ORDER BY version DESC LIMIT 1",
                )
                .bind_params(&[conversation_id.into(), id.into()])?,
        };
        let Some(row) = rows::first::<ArtifactRow>(&statement).await? else {
            return Ok(None);
        };
        Ok(Some(Artifact {
            kind: row.kind()?,
            author: if row.author == "user" {
                Author::User
            } else {
                Author::Model
            },
            version: row.version as u32,
            id: row.id,
            title: row.title,
            content: row.content,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }))
    }

    /// Every artifact of a conversation at its latest version, oldest first.
    pub async fn artifacts(&self, conversation_id: &str) -> Result<Vec<ArtifactSummary>, ApiError> {
        self.tick(1);
        summaries(rows::all::<ArtifactRow>(&self.artifacts_statement(conversation_id)?).await?)
    }

    pub(super) fn artifacts_statement(
        &self,
        conversation_id: &str,
    ) -> Result<worker::D1PreparedStatement, ApiError> {
        self.db
            .prepare(
                "SELECT a.id, a.title, a.kind, a.version, a.updated_at,
                        substr(a.content, 1, 400) AS content
                 FROM artifacts a
                 WHERE a.conversation_id = ?1 AND a.version = (
                   SELECT MAX(b.version) FROM artifacts b
                   WHERE b.conversation_id = a.conversation_id AND b.id = a.id)
                 ORDER BY a.created_at, a.id",
            )
            .bind_params(&[conversation_id.into()])
    }

    /// Stores a new version. Someone else having written that version first is a conflict; an
    /// artifact past `limits.versions` versions, or a new one in a conversation that holds
    /// `limits.artifacts`, is refused (413) with what to do.
    pub async fn put_artifact(
        &self,
        conversation_id: &str,
        artifact: &Artifact,
        limits: ArtifactLimits,
    ) -> Result<(), ApiError> {
        if artifact.version > limits.versions {
            return Err(ApiError::PayloadTooLarge(format!(
                "artifact `{}` has {} versions, the most one keeps; create a new artifact instead",
                artifact.id, limits.versions
            )));
        }
        self.tick(1);
        let statement = self
            .db
            .prepare(
                "INSERT INTO artifacts
                   (conversation_id, id, version, title, kind, content, author, created_at, updated_at)
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9
                 WHERE ?3 > 1 OR (SELECT COUNT(DISTINCT id) FROM artifacts
                                  WHERE conversation_id = ?1) < ?10
                 RETURNING version",
            )
            .bind_params(&[
                conversation_id.into(),
                artifact.id.as_str().into(),
                f64::from(artifact.version).into(),
                artifact.title.as_str().into(),
                artifact.kind.as_str().into(),
                artifact.content.as_str().into(),
                artifact.author.as_str().into(),
                (artifact.created_at as f64).into(),
                (artifact.updated_at as f64).into(),
                f64::from(limits.artifacts).into(),
            ])?;
        let result = rows::all::<Created>(&statement).await;
        match result {
            Ok(rows) if rows.is_empty() => Err(ApiError::PayloadTooLarge(format!(
                "this conversation holds {} artifacts, the most one keeps; update one of them \
                 instead",
                limits.artifacts
            ))),
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("UNIQUE") => Err(ApiError::Conflict(format!(
                "version {} of artifact `{}` was written by someone else first; read it and try again",
                artifact.version, artifact.id
            ))),
            Err(e) => Err(e),
        }
    }
}
