//! Artifacts: versioned documents the model and the user of a conversation write together.
//! Every change is a new whole version; an edit that does not apply writes nothing. Where
//! versions are kept is the application's [`ArtifactStore`].
//!
//! - `mod.rs`: an artifact and its versions, the store that keeps them, the check every
//!   version passes ([`check`]), and the summary a listing shows ([`ArtifactSummary`])
//! - `patch.rs`: JSON Patch for `json` artifacts, bounded in size and depth as it applies
//! - `edit.rs`: find-and-replace edits of the other kinds, and the line ranges read of them
//! - `prompt.rs`: the index of a conversation's artifacts the system prompt carries
//! - `tools.rs`: the `artifacts` toolset the model works through

mod edit;
mod patch;
mod prompt;
mod tools;

use std::cell::Cell;
use std::rc::Rc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Value};

use crate::agent::text::shorten;

pub use edit::{apply_edits, line_range, Edit};
pub use patch::{apply_json_patch, MAX_JSON_DEPTH, MAX_PATCH_OPERATIONS};
pub use prompt::index;
pub use tools::{register, CHANGING_TOOLS, TOOLS};

/// The toolset the artifact tools belong to.
pub const TOOLSET: &str = "artifacts";
/// The largest artifact content, in bytes.
pub const MAX_ARTIFACT_BYTES: usize = 256 * 1024;
const MAX_TITLE_CHARS: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactKind {
    Markdown,
    Json,
    Html,
    Text,
    Code,
}

crate::json_enum!(ArtifactKind { "markdown" => Markdown, "json" => Json, "html" => Html, "text" => Text, "code" => Code });

impl ArtifactKind {
    pub const NAMES: [&'static str; 5] = ["markdown", "json", "html", "text", "code"];

    pub fn parse(name: &str) -> Result<Self, String> {
        Ok(match name {
            "markdown" => Self::Markdown,
            "json" => Self::Json,
            "html" => Self::Html,
            "text" => Self::Text,
            "code" => Self::Code,
            other => {
                return Err(format!(
                    "`kind` must be one of {}, not `{other}`",
                    Self::NAMES.join(", ")
                ))
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// Who wrote a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Author {
    Model,
    User,
}

crate::json_enum!(Author { "model" => Model, "user" => User });

impl Author {
    pub fn as_str(self) -> &'static str {
        match self {
            Author::Model => "model",
            Author::User => "user",
        }
    }
}

/// One version of an artifact.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Artifact {
    pub id: String,
    pub title: String,
    pub kind: ArtifactKind,
    pub content: String,
    pub version: u32,
    pub author: Author,
    /// When the first version was written (ms since the epoch).
    pub created_at: i64,
    /// When this version was written.
    pub updated_at: i64,
}

impl Artifact {
    /// What a `data-artifact` part and a tool's answer say of it.
    pub fn info(&self) -> Value {
        json!({"id": self.id, "title": self.title, "kind": self.kind, "version": self.version})
    }
}

/// An artifact's latest version as a listing and the index show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArtifactSummary {
    pub id: String,
    pub title: String,
    pub kind: ArtifactKind,
    pub version: u32,
    /// The first line of the content, clipped.
    pub first_line: String,
    pub updated_at: i64,
}

/// The first line of `content`, clipped to `max` characters.
pub fn first_line(content: &str, max: usize) -> String {
    let line = content.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    shorten(line.trim(), max)
}

/// Where a conversation's artifact versions are kept. Errors are messages for the model.
#[async_trait(?Send)]
pub trait ArtifactStore {
    /// The latest version of `id`, or version `version`.
    async fn get(&self, id: &str, version: Option<u32>) -> Result<Option<Artifact>, String>;
    /// Every artifact's latest version, oldest first.
    async fn list(&self) -> Result<Vec<ArtifactSummary>, String>;
    /// Stores a new version; refused if that version exists already (someone wrote first).
    async fn put(&self, artifact: &Artifact) -> Result<(), String>;
}

/// What the artifact tools of one turn share.
pub struct ArtifactContext {
    pub store: Rc<dyn ArtifactStore>,
    /// The clock, in ms since the epoch.
    pub now: Box<dyn Fn() -> i64>,
    /// A new artifact id.
    pub new_id: Box<dyn Fn() -> String>,
    /// Set when a tool changed an artifact, so the system prompt's index is rebuilt.
    pub changed: Cell<bool>,
    /// Set once a tool wrote an artifact in this turn.
    pub exists: Cell<bool>,
}

/// Checks a version's content and title before anything is stored.
pub fn check(kind: ArtifactKind, title: &str, content: &str) -> Result<(), String> {
    if title.trim().is_empty() {
        return Err("`title` is empty".into());
    }
    if title.chars().count() > MAX_TITLE_CHARS {
        return Err(format!(
            "`title` is longer than {MAX_TITLE_CHARS} characters"
        ));
    }
    if content.len() > MAX_ARTIFACT_BYTES {
        return Err(format!(
            "the content is {} bytes; an artifact holds at most {MAX_ARTIFACT_BYTES}",
            content.len()
        ));
    }
    if kind == ArtifactKind::Json {
        crate::llm::json::from_str::<Value>(content)
            .map_err(|e| format!("a `json` artifact must hold valid JSON: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_checked() {
        let big = "x".repeat(MAX_ARTIFACT_BYTES + 1);
        assert!(check(ArtifactKind::Text, "t", &big)
            .unwrap_err()
            .contains("at most"));
        assert!(check(ArtifactKind::Json, "t", "{").is_err());
        assert!(check(ArtifactKind::Text, " ", "x").is_err());
        assert!(ArtifactKind::parse("pdf").is_err());
    }
}
