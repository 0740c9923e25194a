//! An agent's `memory` (memory across conversations) and the deployment's `MEMORY_*` settings.
//!
//! `"memory": {"working": {"schema": {...}} | {"template": "..."}, "managed_by": "tool" |
//! "background", "recall": {"top_k": 5} | false}`: the agent keeps a working memory per user
//! (shaped by a JSON Schema, or Markdown begun from a template), kept by the model through
//! `update_memory` or by an extractor call after each answer, and is given the messages of the
//! user's other conversations that match their new one.

use std::rc::Rc;

use serde_json::Value;

use crate::agent::memory::Shape;
use crate::llm::fields::{self, Fields};

/// Most messages recall may give a turn.
pub const MAX_TOP_K: u32 = 20;

/// One agent's memory.
#[derive(Debug, Clone, PartialEq)]
pub struct MemorySpec {
    pub shape: Rc<Shape>,
    /// Kept by an extractor call after each answer (`managed_by: "background"`), not by the
    /// model's `update_memory`.
    pub background: bool,
    /// Most messages of other conversations given to a turn (`0`: no recall).
    pub top_k: u32,
}

impl MemorySpec {
    /// Whether its turns offer `update_memory`.
    pub fn by_tool(&self) -> bool {
        !self.background
    }
}

/// The deployment's settings for memory.
#[derive(Debug, Clone, PartialEq)]
pub struct MemorySettings {
    /// Most bytes a working memory may take (`MEMORY_MAX_BYTES`).
    pub max_bytes: usize,
    /// How long recall may take before a turn goes on without it (`MEMORY_RECALL_MS`).
    pub recall_ms: u32,
    /// The model of the background extractor (`MEMORY_MODEL`; default: the agent's).
    pub model: Option<crate::llm::ModelRef>,
    /// The Workers AI model that embeds messages for semantic recall, when `VECTORS` and `AI`
    /// are bound (`MEMORY_EMBEDDING_MODEL`).
    pub embedding_model: String,
}

/// The embedding model unless `MEMORY_EMBEDDING_MODEL` names another (its dimensions are the
/// index's: 768).
pub const EMBEDDING_MODEL: &str = "@cf/baai/bge-base-en-v1.5";

/// Reads an agent's `memory`.
pub fn read(value: Value) -> Result<MemorySpec, String> {
    let at = |message: String| format!("`memory`: {message}");
    let mut f = Fields::of(value, &["working", "managed_by", "recall"]).map_err(at)?;
    let shape = match f.value("working") {
        None => Shape::Template(String::new()),
        Some(working) => {
            let mut w = Fields::of(working, &["schema", "template"])
                .map_err(|e| at(format!("`working`: {e}")))?;
            match (w.value("schema"), w.optional("template", fields::STRING)) {
                (Some(_), Ok(Some(_))) => {
                    return Err(at(
                        "`working` takes a `schema` or a `template`, not both".into()
                    ))
                }
                (Some(schema), _) if schema["type"] == "object" => Shape::Schema(schema),
                (Some(_), _) => {
                    return Err(at(
                        "`working.schema` must be a JSON Schema of `type: object`".into(),
                    ))
                }
                (None, Ok(template)) => Shape::Template(template.unwrap_or_default()),
                (None, Err(e)) => return Err(at(format!("`working`: {e}"))),
            }
        }
    };
    let background = match f
        .optional("managed_by", fields::STRING)
        .map_err(at)?
        .as_deref()
    {
        None | Some("tool") => false,
        Some("background") => true,
        Some(other) => {
            return Err(at(format!(
                "`managed_by` must be `tool` or `background`, not `{other}`"
            )))
        }
    };
    let top_k = match f.value("recall") {
        None => 5,
        Some(Value::Bool(false)) => 0,
        Some(recall @ Value::Object(_)) => {
            let mut r = Fields::of(recall, &["top_k"]).map_err(|e| at(format!("`recall`: {e}")))?;
            let top_k = r.optional("top_k", fields::U32).map_err(at)?.unwrap_or(5);
            if !(1..=MAX_TOP_K).contains(&top_k) {
                return Err(at(format!("`recall.top_k` must be from 1 to {MAX_TOP_K}")));
            }
            top_k
        }
        Some(_) => {
            return Err(at(
                "`recall` must be an object (`{\"top_k\": 5}`) or false".into()
            ))
        }
    };
    Ok(MemorySpec {
        shape: Rc::new(shape),
        background,
        top_k,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_agents_memory_is_read_with_its_defaults_and_refused_when_wrong() {
        let spec = read(json!({})).expect("empty is fine");
        assert_eq!(*spec.shape, Shape::Template(String::new()));
        assert!(spec.by_tool());
        assert_eq!(spec.top_k, 5);
        let spec = read(json!({
            "working": {"schema": {"type": "object", "properties": {"diet": {"type": "string"}}}},
            "managed_by": "background",
            "recall": {"top_k": 3},
        }))
        .expect("valid");
        assert!(matches!(&*spec.shape, Shape::Schema(_)) && spec.background && spec.top_k == 3);
        assert_eq!(read(json!({"recall": false})).expect("valid").top_k, 0);
        for (wrong, says) in [
            (
                json!({"working": {"schema": {"type": "string"}}}),
                "type: object",
            ),
            (
                json!({"working": {"schema": {"type": "object"}, "template": "x"}}),
                "not both",
            ),
            (json!({"managed_by": "user"}), "`tool` or `background`"),
            (json!({"recall": {"top_k": 50}}), "from 1 to 20"),
            (json!({"recall": 3}), "or false"),
            (json!({"remember": true}), "remember"),
        ] {
            let e = read(wrong.clone()).expect_err("refused");
            assert!(
                e.starts_with("`memory`") && e.contains(says),
                "{wrong}: {e}"
            );
        }
    }
}
