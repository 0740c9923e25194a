//! Artifacts: versioned documents the model and the user of a conversation write together.
//! The `artifacts` toolset, the edits it applies and the index the system
//! prompt carries live here; where versions are kept is the application's [`ArtifactStore`].
//!
//! Every change is a new whole version; an edit that does not apply writes nothing.

use std::cell::Cell;
use std::rc::Rc;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::{json, Map, Value};

use super::tools::{ServerTool, ToolRegistry};
use crate::llm::fields::{self, Fields};
use crate::llm::ToolDef;

/// The toolset the artifact tools belong to.
pub const TOOLSET: &str = "artifacts";
/// The tools whose successful output names the artifact they changed (`"artifact"`).
pub const CHANGING_TOOLS: [&str; 3] = ["create_artifact", "update_artifact", "patch_artifact"];
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

/// Most operations in one JSON Patch.
pub const MAX_PATCH_OPERATIONS: usize = 1_000;

/// The deepest nesting of arrays and objects a `json` artifact may have, as the JSON reader
/// allows it: the pretty-printed text grows with the square of the depth, and printing and
/// dropping a document recurse as deep as it goes.
pub const MAX_JSON_DEPTH: usize = 128;

/// How deep `value` nests (a scalar 0, `[]` 1, `[[]]` 2), walked without recursion.
fn json_depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((value, above)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(fields) => Box::new(fields.values()),
            _ => continue,
        };
        deepest = deepest.max(above + 1);
        stack.extend(children.map(|child| (child, above + 1)));
    }
    deepest
}

/// The bytes `value` takes as compact JSON, counted without building the text.
fn json_size(value: &Value) -> usize {
    json_size_as(value, false)
}

/// The bytes `value` takes as JSON, compact or pretty, counted without building the text.
fn json_size_as(value: &Value, pretty: bool) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    let _ = if pretty {
        serde_json::to_writer_pretty(&mut count, value)
    } else {
        serde_json::to_writer(&mut count, value)
    };
    count.0
}

/// Applies a JSON Patch (RFC 6902) to a `json` artifact's content. The error names the
/// operation that failed (counted from 0) and why.
///
/// The document cannot grow past the artifact limit on the way: each `add`, `replace` and
/// `copy` adds what it brings to a bound on the document's size, and once the bound passes
/// the limit the document is measured; over it, the patch is refused there (ten `copy`s of the
/// root would otherwise ask for 2^10 times the document). Its depth is bounded the same way
/// after every operation ([`MAX_JSON_DEPTH`]: a `copy` into the deepest node doubles it), and
/// the pretty text is measured before it is built.
pub fn apply_json_patch(content: &str, operations: &Value) -> Result<String, String> {
    use json_patch::jsonptr::PointerBuf;
    use json_patch::{
        AddOperation, CopyOperation, MoveOperation, PatchOperation, RemoveOperation,
        ReplaceOperation, TestOperation,
    };
    let mut doc: Value = crate::llm::json::from_str(content)
        .map_err(|e| format!("the artifact's content is not valid JSON: {e}"))?;
    let Value::Array(operations) = operations else {
        return Err("`patch` must be a list of JSON Patch operations".into());
    };
    if operations.len() > MAX_PATCH_OPERATIONS {
        return Err(format!(
            "the patch has {} operations; one patch holds at most {MAX_PATCH_OPERATIONS}",
            operations.len()
        ));
    }
    let mut parsed = Vec::with_capacity(operations.len());
    for (i, op) in operations.iter().enumerate() {
        let field = |name: &str| op.get(name).and_then(Value::as_str);
        let pointer = |name: &str| {
            let raw = field(name).ok_or_else(|| format!("operation {i} has no `{name}` string"))?;
            PointerBuf::parse(raw)
                .map_err(|e| format!("operation {i}: `{name}` is not a JSON Pointer: {e}"))
        };
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| format!("operation {i} has no `value`"))
        };
        parsed.push(match field("op") {
            Some("add") => PatchOperation::Add(AddOperation {
                path: pointer("path")?,
                value: value()?,
            }),
            Some("remove") => PatchOperation::Remove(RemoveOperation {
                path: pointer("path")?,
            }),
            Some("replace") => PatchOperation::Replace(ReplaceOperation {
                path: pointer("path")?,
                value: value()?,
            }),
            Some("move") => PatchOperation::Move(MoveOperation {
                from: pointer("from")?,
                path: pointer("path")?,
            }),
            Some("copy") => PatchOperation::Copy(CopyOperation {
                from: pointer("from")?,
                path: pointer("path")?,
            }),
            Some("test") => PatchOperation::Test(TestOperation {
                path: pointer("path")?,
                value: value()?,
            }),
            Some(other) => {
                return Err(format!(
                    "operation {i}: `op` must be add, remove, replace, move, copy or test, not `{other}`"
                ))
            }
            None => return Err(format!("operation {i} has no `op`")),
        });
    }
    let too_big = |i: usize| {
        format!(
            "operation {i} makes the document over {MAX_ARTIFACT_BYTES} bytes, the most an \
             artifact holds; nothing was changed"
        )
    };
    let too_deep = |i: usize| {
        format!(
            "operation {i} makes the document nest deeper than {MAX_JSON_DEPTH} levels, the most \
             a `json` artifact may; nothing was changed"
        )
    };
    // At least the document's size: what it was, plus what each operation brought.
    let mut bound = content.len();
    // At least the document's depth: what reaches deepest is a value put at a path, or a
    // subtree moved or copied from `from` (no deeper than the document below `from`).
    let mut depth = json_depth(&doc);
    for (i, op) in parsed.iter().enumerate() {
        let tokens = |p: &PointerBuf| p.count();
        let reach = match op {
            PatchOperation::Add(AddOperation { path, value })
            | PatchOperation::Replace(ReplaceOperation { path, value }) => {
                tokens(path) + json_depth(value)
            }
            PatchOperation::Copy(CopyOperation { from, path })
            | PatchOperation::Move(MoveOperation { from, path }) => {
                tokens(path) + depth.saturating_sub(tokens(from))
            }
            _ => 0,
        };
        let growth = match op {
            PatchOperation::Add(AddOperation { value, .. })
            | PatchOperation::Replace(ReplaceOperation { value, .. }) => json_size(value),
            PatchOperation::Copy(CopyOperation { from, .. }) => {
                doc.pointer(from.as_str()).map_or(0, json_size)
            }
            _ => 0,
        };
        // A copy is refused before it is made; what an add or replace brings is in memory
        // already (and may replace as much), so the document is measured after it.
        if matches!(op, PatchOperation::Copy(_)) && bound + growth > MAX_ARTIFACT_BYTES {
            bound = json_size(&doc);
            if bound + growth > MAX_ARTIFACT_BYTES {
                return Err(too_big(i));
            }
        }
        json_patch::patch(&mut doc, std::slice::from_ref(op)).map_err(|e| {
            let name = operations[i]
                .get("op")
                .and_then(Value::as_str)
                .unwrap_or("?");
            format!(
                "operation {i} ({name} at `{}`) failed: {}; nothing was changed",
                e.path, e.kind
            )
        })?;
        bound += growth;
        if bound > MAX_ARTIFACT_BYTES {
            bound = json_size(&doc);
            if bound > MAX_ARTIFACT_BYTES {
                return Err(too_big(i));
            }
        }
        depth = depth.max(reach);
        if depth > MAX_JSON_DEPTH {
            depth = json_depth(&doc);
            if depth > MAX_JSON_DEPTH {
                return Err(too_deep(i));
            }
        }
    }
    let pretty = json_size_as(&doc, true);
    if pretty > MAX_ARTIFACT_BYTES {
        return Err(format!(
            "the patched document is {pretty} bytes as stored (indented), over the \
             {MAX_ARTIFACT_BYTES} an artifact holds; nothing was changed"
        ));
    }
    serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())
}

/// One find-and-replace edit of a text artifact.
#[derive(Debug, Clone)]
pub struct Edit {
    pub find: String,
    pub replace: String,
}

fn read_edits(edits: Value) -> Result<Vec<Edit>, String> {
    fields::list(edits, "it", |edit| {
        let mut f = Fields::any(edit)?;
        Ok(Edit {
            find: f.required("find", fields::STRING)?,
            replace: f.required("replace", fields::STRING)?,
        })
    })
}

/// Applies exact find-and-replace edits in order; each `find` must match exactly once in the
/// text as the earlier edits left it.
pub fn apply_edits(content: &str, edits: &[Edit]) -> Result<String, String> {
    let mut text = content.to_string();
    for (i, edit) in edits.iter().enumerate() {
        if edit.find.is_empty() {
            return Err(format!("edit {i}: `find` is empty; nothing was changed"));
        }
        let mut matches = text.match_indices(&edit.find);
        let Some((at, _)) = matches.next() else {
            return Err(format!(
                "edit {i}: `find` does not occur in the artifact; nothing was changed"
            ));
        };
        let more = matches.count();
        if more > 0 {
            return Err(format!(
                "edit {i}: `find` occurs {} times; give more of the surrounding text so it \
                 matches once; nothing was changed",
                more + 1
            ));
        }
        text.replace_range(at..at + edit.find.len(), &edit.replace);
    }
    Ok(text)
}

/// Lines `from..=to` (1-based; either end open) of `content`, and how many lines it has.
pub fn line_range(content: &str, from: Option<u64>, to: Option<u64>) -> (String, usize) {
    let total = content.lines().count();
    let from = from.unwrap_or(1).max(1) as usize;
    let to = to.map_or(total, |t| (t as usize).min(total));
    let picked: Vec<&str> = content
        .lines()
        .skip(from - 1)
        .take((to + 1).saturating_sub(from))
        .collect();
    (picked.join("\n"), total)
}

/// The first line of `content`, clipped to `max` characters.
pub fn first_line(content: &str, max: usize) -> String {
    let line = content.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    clip(line.trim(), max)
}

fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The index of a conversation's artifacts for the system prompt, within `budget` bytes
/// (whole entries only; the rest are counted).
pub fn index(artifacts: &[ArtifactSummary], budget: usize) -> Option<String> {
    if artifacts.is_empty() {
        return None;
    }
    let mut out = String::from(
        "Artifacts in this conversation (newest last; read_artifact shows the content):",
    );
    for (shown, a) in artifacts.iter().enumerate() {
        let entry = format!(
            "\n- {} \"{}\" ({}, version {}): {}",
            a.id,
            clip(&a.title, 80),
            a.kind.as_str(),
            a.version,
            a.first_line
        );
        if out.len() + entry.len() > budget {
            // The newest matter most: say how many older ones are left out.
            out.push_str(&format!("\n- ... and {} more", artifacts.len() - shown));
            break;
        }
        out.push_str(&entry);
    }
    Some(out)
}

/// Registers the five artifact tools in the `artifacts` toolset.
pub fn register(tools: &mut ToolRegistry, context: Rc<ArtifactContext>) {
    for op in [Op::Create, Op::Read, Op::Update, Op::Patch, Op::List] {
        tools.register_in_toolset(
            TOOLSET,
            Box::new(ArtifactTool {
                definition: op.definition(),
                op,
                context: context.clone(),
            }),
        );
    }
}

#[derive(Clone, Copy)]
enum Op {
    Create,
    Read,
    Update,
    Patch,
    List,
}

impl Op {
    fn definition(self) -> ToolDef {
        // Schemas as JSON text: a `json!` literal compiles to code per key, in the Worker too.
        let (name, description, schema) = match self {
            Op::Create => (
                "create_artifact",
                "Creates an artifact: a document kept beside the conversation (a report, a \
                 plan, data, a page, code) that you and the user can both edit. Answers with \
                 its id.",
                r#"{"type": "object", "properties": {
                    "title": {"type": "string"},
                    "kind": {"type": "string", "enum": ["markdown", "json", "html", "text", "code"]},
                    "content": {"type": "string"}
                }, "required": ["title", "kind", "content"]}"#,
            ),
            Op::Read => (
                "read_artifact",
                "Reads an artifact's latest version (or `version`), optionally only lines \
                 `from_line` to `to_line` (1-based).",
                r#"{"type": "object", "properties": {
                    "id": {"type": "string"},
                    "version": {"type": "integer", "minimum": 1},
                    "from_line": {"type": "integer", "minimum": 1},
                    "to_line": {"type": "integer", "minimum": 1}
                }, "required": ["id"]}"#,
            ),
            Op::Update => (
                "update_artifact",
                "Replaces an artifact's whole content (and optionally its title) with a new \
                 version.",
                r#"{"type": "object", "properties": {
                    "id": {"type": "string"},
                    "content": {"type": "string"},
                    "title": {"type": "string"}
                }, "required": ["id", "content"]}"#,
            ),
            Op::Patch => (
                "patch_artifact",
                "Edits an artifact into a new version. For a `json` artifact give `patch`, a \
                 JSON Patch (RFC 6902) list of operations. For other kinds give `edits`: exact \
                 {find, replace} pairs, applied in order, each `find` occurring exactly once. \
                 If any edit does not apply, nothing changes.",
                r#"{"type": "object", "properties": {
                    "id": {"type": "string"},
                    "patch": {"type": "array", "items": {"type": "object"}},
                    "edits": {"type": "array", "items": {"type": "object", "properties": {
                        "find": {"type": "string"},
                        "replace": {"type": "string"}
                    }, "required": ["find", "replace"]}}
                }, "required": ["id"]}"#,
            ),
            Op::List => (
                "list_artifacts",
                "Lists this conversation's artifacts with their latest versions.",
                r#"{"type": "object", "properties": {}}"#,
            ),
        };
        super::tools::definition(name, description, schema)
    }
}

struct ArtifactTool {
    definition: ToolDef,
    op: Op,
    context: Rc<ArtifactContext>,
}

fn text<'a>(arguments: &'a Map<String, Value>, name: &str) -> Result<&'a str, String> {
    arguments
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| format!("`{name}` is required and must be text"))
}

fn number(arguments: &Map<String, Value>, name: &str) -> Result<Option<u64>, String> {
    match arguments.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| *n >= 1)
            .map(Some)
            .ok_or_else(|| format!("`{name}` must be a whole number from 1")),
    }
}

impl ArtifactTool {
    async fn latest(&self, id: &str) -> Result<Artifact, String> {
        self.context
            .store
            .get(id, None)
            .await?
            .ok_or_else(|| format!("there is no artifact `{id}`; list_artifacts shows them"))
    }

    /// Stores `next` as the version after `previous` and answers with what changed.
    async fn write(&self, next: Artifact) -> Result<Value, String> {
        check(next.kind, &next.title, &next.content)?;
        self.context.store.put(&next).await?;
        self.context.changed.set(true);
        self.context.exists.set(true);
        Ok(json!({"status": "ok", "artifact": next.info()}))
    }

    fn next_version(&self, previous: &Artifact, content: String) -> Artifact {
        Artifact {
            content,
            version: previous.version + 1,
            author: Author::Model,
            updated_at: (self.context.now)(),
            ..previous.clone()
        }
    }
}

#[async_trait(?Send)]
impl ServerTool for ArtifactTool {
    fn definition(&self) -> &ToolDef {
        &self.definition
    }

    async fn call(&self, arguments: &Map<String, Value>) -> Result<Value, String> {
        match self.op {
            Op::Create => {
                let now = (self.context.now)();
                self.write(Artifact {
                    id: (self.context.new_id)(),
                    title: text(arguments, "title")?.trim().to_string(),
                    kind: ArtifactKind::parse(text(arguments, "kind")?)?,
                    content: text(arguments, "content")?.to_string(),
                    version: 1,
                    author: Author::Model,
                    created_at: now,
                    updated_at: now,
                })
                .await
            }
            Op::Read => {
                let id = text(arguments, "id")?;
                let version = number(arguments, "version")?;
                let artifact = match version {
                    None => self.latest(id).await?,
                    Some(v) => self
                        .context
                        .store
                        .get(id, Some(v as u32))
                        .await?
                        .ok_or_else(|| format!("artifact `{id}` has no version {v}"))?,
                };
                let (from, to) = (
                    number(arguments, "from_line")?,
                    number(arguments, "to_line")?,
                );
                let (content, lines) = if from.is_some() || to.is_some() {
                    line_range(&artifact.content, from, to)
                } else {
                    let lines = artifact.content.lines().count();
                    (artifact.content.clone(), lines)
                };
                let mut out = artifact.info();
                out["lines"] = json!(lines);
                out["content"] = Value::String(content);
                Ok(out)
            }
            Op::Update => {
                let previous = self.latest(text(arguments, "id")?).await?;
                let mut next =
                    self.next_version(&previous, text(arguments, "content")?.to_string());
                if let Some(title) = arguments.get("title").and_then(Value::as_str) {
                    next.title = title.trim().to_string();
                }
                self.write(next).await
            }
            Op::Patch => {
                let previous = self.latest(text(arguments, "id")?).await?;
                let content = match (
                    previous.kind,
                    arguments.get("patch"),
                    arguments.get("edits"),
                ) {
                    (ArtifactKind::Json, Some(patch), _) => {
                        apply_json_patch(&previous.content, patch)?
                    }
                    (ArtifactKind::Json, None, _) => {
                        return Err("a `json` artifact is patched with `patch` (JSON Patch)".into())
                    }
                    (_, _, Some(edits)) => {
                        let edits = read_edits(edits.clone()).map_err(|e| {
                            format!("`edits` must be a list of {{find, replace}}: {e}")
                        })?;
                        apply_edits(&previous.content, &edits)?
                    }
                    (kind, _, None) => {
                        return Err(format!(
                            "a `{}` artifact is patched with `edits` (find and replace)",
                            kind.as_str()
                        ))
                    }
                };
                self.write(self.next_version(&previous, content)).await
            }
            Op::List => {
                let artifacts = self.context.store.list().await?;
                Ok(json!({ "artifacts": artifacts }))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// Versions in memory, as the D1 store keeps them.
    #[derive(Default)]
    struct Memory(RefCell<Vec<Artifact>>);

    #[async_trait(?Send)]
    impl ArtifactStore for Memory {
        async fn get(&self, id: &str, version: Option<u32>) -> Result<Option<Artifact>, String> {
            let all = self.0.borrow();
            let mut versions = all.iter().filter(|a| a.id == id);
            Ok(match version {
                Some(v) => versions.find(|a| a.version == v).cloned(),
                None => versions.max_by_key(|a| a.version).cloned(),
            })
        }
        async fn list(&self) -> Result<Vec<ArtifactSummary>, String> {
            let all = self.0.borrow();
            let mut ids: Vec<&str> = all.iter().map(|a| a.id.as_str()).collect();
            ids.dedup();
            Ok(ids
                .into_iter()
                .filter_map(|id| all.iter().filter(|a| a.id == id).max_by_key(|a| a.version))
                .map(|a| ArtifactSummary {
                    id: a.id.clone(),
                    title: a.title.clone(),
                    kind: a.kind,
                    version: a.version,
                    first_line: first_line(&a.content, 80),
                    updated_at: a.updated_at,
                })
                .collect())
        }
        async fn put(&self, artifact: &Artifact) -> Result<(), String> {
            let mut all = self.0.borrow_mut();
            if all
                .iter()
                .any(|a| a.id == artifact.id && a.version == artifact.version)
            {
                return Err("version exists".into());
            }
            all.push(artifact.clone());
            Ok(())
        }
    }

    fn setup() -> (Rc<Memory>, Rc<ArtifactContext>, ToolRegistry) {
        let store = Rc::new(Memory::default());
        let next = Cell::new(0);
        let context = Rc::new(ArtifactContext {
            store: store.clone(),
            now: Box::new(|| 1_000),
            new_id: Box::new(move || {
                next.set(next.get() + 1);
                format!("art{}", next.get())
            }),
            changed: Cell::new(false),
            exists: Cell::new(false),
        });
        let mut tools = ToolRegistry::new();
        register(&mut tools, context.clone());
        (store, context, tools)
    }

    async fn call(tools: &ToolRegistry, name: &str, args: Value) -> Result<Value, String> {
        let Some(ToolKind::Server(tool)) = tools.classify(name) else {
            panic!("{name} is not a server tool");
        };
        let Value::Object(map) = args else { panic!() };
        tool.call(&map).await
    }

    use super::super::tools::ToolKind;

    #[test]
    fn every_tool_has_an_object_schema() {
        let (_, _, tools) = setup();
        for def in tools.definitions() {
            assert_eq!(def.input_schema["type"], "object", "{}", def.name);
        }
        assert_eq!(tools.definitions().len(), 5);
    }

    #[test]
    fn a_json_artifact_is_created_patched_and_a_failing_patch_writes_nothing() {
        futures::executor::block_on(async {
            let (store, context, tools) = setup();
            let made = call(
                &tools,
                "create_artifact",
                json!({"title": "Plan", "kind": "json", "content": "{\"steps\": [\"a\"]}"}),
            )
            .await
            .unwrap();
            assert_eq!(made["artifact"]["id"], "art1");
            assert_eq!(made["artifact"]["version"], 1);
            assert!(context.changed.get());
            let patched = call(
                &tools,
                "patch_artifact",
                json!({"id": "art1", "patch": [{"op": "add", "path": "/steps/-", "value": "b"}]}),
            )
            .await
            .unwrap();
            assert_eq!(patched["artifact"]["version"], 2);
            let failed = call(
                &tools,
                "patch_artifact",
                json!({"id": "art1", "patch": [
                    {"op": "replace", "path": "/steps/0", "value": "A"},
                    {"op": "remove", "path": "/missing"}
                ]}),
            )
            .await
            .unwrap_err();
            assert!(
                failed.contains("operation 1 (remove at `/missing`)"),
                "{failed}"
            );
            let latest = store.get("art1", None).await.unwrap().unwrap();
            assert_eq!(latest.version, 2);
            let doc: Value = crate::llm::json::from_str(&latest.content).unwrap();
            assert_eq!(doc, json!({"steps": ["a", "b"]}));
            let first = call(&tools, "read_artifact", json!({"id": "art1", "version": 1}))
                .await
                .unwrap();
            assert_eq!(first["content"], "{\"steps\": [\"a\"]}");
        })
    }

    #[test]
    fn text_edits_must_each_match_once() {
        let text = "one two\nthree two";
        let edit = |find: &str, replace: &str| Edit {
            find: find.into(),
            replace: replace.into(),
        };
        assert_eq!(
            apply_edits(text, &[edit("one", "1"), edit("three", "3")]).unwrap(),
            "1 two\n3 two"
        );
        let twice = apply_edits(text, &[edit("two", "2")]).unwrap_err();
        assert!(twice.contains("occurs 2 times"), "{twice}");
        let missing = apply_edits(text, &[edit("one", "1"), edit("four", "4")]).unwrap_err();
        assert!(missing.starts_with("edit 1:"), "{missing}");
        assert!(apply_edits(text, &[edit("", "x")]).is_err());
        // An edit sees what the earlier ones left: "1" now occurs once.
        assert_eq!(
            apply_edits(text, &[edit("one", "1"), edit("1 two", "x")]).unwrap(),
            "x\nthree two"
        );
    }

    #[test]
    fn json_patch_edge_cases() {
        let doc = r#"{"a": {"b": 1}, "list": [1, 2]}"#;
        let ok = apply_json_patch(
            doc,
            &json!([
                {"op": "test", "path": "/a/b", "value": 1},
                {"op": "move", "from": "/a/b", "path": "/c"},
                {"op": "copy", "from": "/list", "path": "/copy"}
            ]),
        )
        .unwrap();
        let value: Value = crate::llm::json::from_str(&ok).unwrap();
        assert_eq!(
            value,
            json!({"a": {}, "c": 1, "list": [1, 2], "copy": [1, 2]})
        );
        assert!(
            apply_json_patch(doc, &json!([{"op": "test", "path": "/a/b", "value": 2}]))
                .unwrap_err()
                .contains("operation 0 (test")
        );
        assert!(
            apply_json_patch(doc, &json!([{"op": "jump", "path": "/a"}]))
                .unwrap_err()
                .contains("`op` must be")
        );
        assert!(
            apply_json_patch(doc, &json!([{"op": "add", "path": "a", "value": 1}]))
                .unwrap_err()
                .contains("JSON Pointer")
        );
        assert!(apply_json_patch(doc, &json!({"op": "add"})).is_err());
        assert!(apply_json_patch("not json", &json!([])).is_err());
    }

    #[test]
    fn a_patch_cannot_grow_the_document_past_the_artifact_limit() {
        // Ten copies of the root would be 1,024 times the document: refused at the first copy
        // that passes the limit, fast and without building the rest.
        let doc = json!({"data": "x".repeat(50_000)}).to_string();
        let doubling: Vec<Value> = (0..10)
            .map(|n| json!({"op": "copy", "from": "", "path": format!("/c{n}")}))
            .collect();
        let started = std::time::Instant::now();
        let e = apply_json_patch(&doc, &Value::Array(doubling)).unwrap_err();
        assert!(
            e.starts_with("operation 2 makes the document over 262144 bytes"),
            "{e}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        // Adds that pile up are refused too; a patch within the limit goes through.
        let adds: Vec<Value> = (0..20)
            .map(|n| json!({"op": "add", "path": format!("/a{n}"), "value": "y".repeat(20_000)}))
            .collect();
        let e = apply_json_patch("{}", &Value::Array(adds)).unwrap_err();
        assert!(e.starts_with("operation 13 makes the document over"), "{e}");
        let small: Vec<Value> = (0..2)
            .map(|n| json!({"op": "copy", "from": "", "path": format!("/c{n}")}))
            .collect();
        assert!(apply_json_patch(&doc, &Value::Array(small)).is_ok());
        // Replacing a large value with another is measured, not refused by the bound.
        let replaces: Vec<Value> = (0..10)
            .map(|_| json!({"op": "replace", "path": "/data", "value": "z".repeat(50_000)}))
            .collect();
        assert!(apply_json_patch(&doc, &Value::Array(replaces)).is_ok());
        let many = Value::Array(vec![json!({"op": "test", "path": "", "value": {}}); 1_001]);
        let e = apply_json_patch("{}", &many).unwrap_err();
        assert!(e.contains("at most 1000"), "{e}");
    }

    #[test]
    fn a_patch_cannot_nest_the_document_past_the_depth_limit() {
        // 100 levels: copying the root into its deepest node would make 200.
        let mut doc = json!(1);
        for _ in 0..100 {
            doc = json!({ "a": doc });
        }
        let deepest = format!("{}/b", "/a".repeat(99));
        let copy = json!([{"op": "copy", "from": "", "path": deepest}]);
        let e = apply_json_patch(&doc.to_string(), &copy).unwrap_err();
        assert!(
            e.starts_with("operation 0 makes the document nest deeper than 128"),
            "{e}"
        );
        // An added value that nests too deep is refused too; a shallow one is not.
        let mut deep = json!(1);
        for _ in 0..40 {
            deep = json!([deep]);
        }
        let add = json!([{"op": "add", "path": deepest.clone(), "value": deep}]);
        assert!(apply_json_patch(&doc.to_string(), &add)
            .unwrap_err()
            .contains("deeper than 128"));
        let add = json!([{"op": "add", "path": deepest, "value": [[1]]}]);
        assert!(apply_json_patch(&doc.to_string(), &add).is_ok());
        // A move of a shallow subtree under a deep path is within the bound, and goes through.
        let moved = json!([{"op": "move", "from": "/a/a", "path": "/b"}]);
        assert!(apply_json_patch(&doc.to_string(), &moved).is_ok());
    }

    #[test]
    fn the_indented_text_is_measured_before_it_is_built() {
        // 200 KB compact, but 64 levels deep every line is indented by 128 spaces.
        let mut doc = json!(vec![1; 20_000]);
        for _ in 0..63 {
            doc = json!([doc]);
        }
        assert!(doc.to_string().len() < MAX_ARTIFACT_BYTES);
        let e = apply_json_patch(&doc.to_string(), &json!([])).unwrap_err();
        assert!(e.contains("as stored (indented)"), "{e}");
    }

    #[test]
    fn line_ranges_and_limits() {
        let content = "a\nb\nc\nd";
        assert_eq!(line_range(content, Some(2), Some(3)), ("b\nc".into(), 4));
        assert_eq!(line_range(content, Some(3), None), ("c\nd".into(), 4));
        assert_eq!(line_range(content, Some(9), None), (String::new(), 4));
        assert_eq!(line_range(content, Some(3), Some(2)), (String::new(), 4));
        let big = "x".repeat(MAX_ARTIFACT_BYTES + 1);
        assert!(check(ArtifactKind::Text, "t", &big)
            .unwrap_err()
            .contains("at most"));
        assert!(check(ArtifactKind::Json, "t", "{").is_err());
        assert!(check(ArtifactKind::Text, " ", "x").is_err());
        assert!(ArtifactKind::parse("pdf").is_err());
    }

    #[test]
    fn the_index_keeps_within_its_budget() {
        let summary = |i: u32| ArtifactSummary {
            id: format!("art{i}"),
            title: format!("Doc {i}"),
            kind: ArtifactKind::Markdown,
            version: i,
            first_line: "# Heading".into(),
            updated_at: 0,
        };
        assert_eq!(index(&[], 1000), None);
        let all: Vec<_> = (1..=50).map(summary).collect();
        let text = index(&all, 600).unwrap();
        assert!(text.len() <= 600 + 40, "{}", text.len());
        assert!(text.contains("art1 \"Doc 1\" (markdown, version 1): # Heading"));
        assert!(text.contains("more"));
        assert!(!index(&all[..2], 600).unwrap().contains("more"));
    }
}
