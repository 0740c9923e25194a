//! The `artifacts` toolset: the tools through which the model creates, reads, changes and
//! lists a conversation's artifacts. Every change passes [`check`] and is stored as a whole
//! new version.

use std::rc::Rc;

use async_trait::async_trait;
use serde_json::{json, Map, Value};

use super::edit::{apply_edits, line_range, read_edits};
use super::patch::apply_json_patch;
use super::{check, Artifact, ArtifactContext, ArtifactKind, Author, TOOLSET};
use crate::agent::tools::{ServerTool, ToolRegistry};
use crate::llm::ToolDef;

const CREATE: &str = "create_artifact";
const READ: &str = "read_artifact";
const UPDATE: &str = "update_artifact";
const PATCH: &str = "patch_artifact";
const LIST: &str = "list_artifacts";

/// The tools of [`TOOLSET`].
pub const TOOLS: [&str; 5] = [CREATE, READ, UPDATE, PATCH, LIST];
/// The tools whose successful output names the artifact they changed (`"artifact"`).
pub const CHANGING_TOOLS: [&str; 3] = [CREATE, UPDATE, PATCH];

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
                CREATE,
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
                READ,
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
                UPDATE,
                "Replaces an artifact's whole content (and optionally its title) with a new \
                 version.",
                r#"{"type": "object", "properties": {
                    "id": {"type": "string"},
                    "content": {"type": "string"},
                    "title": {"type": "string"}
                }, "required": ["id", "content"]}"#,
            ),
            Op::Patch => (
                PATCH,
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
                LIST,
                "Lists this conversation's artifacts with their latest versions.",
                r#"{"type": "object", "properties": {}}"#,
            ),
        };
        crate::agent::tools::definition(name, description, schema)
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
    use std::cell::{Cell, RefCell};

    use super::*;
    use crate::agent::artifacts::{first_line, ArtifactStore, ArtifactSummary};
    use crate::agent::tools::ToolKind;

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
}
