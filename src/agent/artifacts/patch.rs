//! JSON Patch (RFC 6902) for `json` artifacts, bounded as it applies: a patch may not grow the
//! document past what an artifact holds, nor nest it deeper than the JSON reader reads, since
//! a few `copy`s would otherwise ask for far more memory than the Worker has.

use serde_json::Value;

use super::MAX_ARTIFACT_BYTES;

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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
}
