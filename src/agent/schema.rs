//! Tool arguments checked against the tool's JSON Schema before its handler runs, so a model's
//! mistake becomes an error result it can correct instead of a handler failure.
//!
//! A typed answer is checked the same way, its problems named by JSON pointer.
//!
//! A subset of JSON Schema, the part tool and answer schemas use: `type` (one or a list),
//! `properties`, `required`, `additionalProperties` (`false` or a schema), `enum`, `const`,
//! `items`, `minimum`/`maximum`, `minLength`/`maxLength`, `minItems`/`maxItems`, `anyOf`,
//! `oneOf`, `allOf`, `$ref` within the schema. Other keywords are ignored (accepted). The
//! complete validators on crates.io bring regex and HTTP stacks into the wasm bundle.

use serde_json::{Map, Value};

/// Every way `value` breaks `schema`, each as `path: problem` (`$.tags[1]: expected string`).
pub fn validate(schema: &Value, value: &Value) -> Vec<String> {
    problems(schema, value)
        .into_iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect()
}

/// One way a value breaks a schema: where, as a JSON pointer (`/tags/1`) and as a path
/// (`$.tags[1]`), and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub pointer: String,
    pub path: String,
    pub message: String,
}

/// Every way `value` breaks `schema`. Beyond the keywords above: `anyOf`, `oneOf`, `allOf`, and
/// `$ref` within the schema (`#`, `#/$defs/...`), followed at most [`MAX_REFS`] deep.
pub fn problems(schema: &Value, value: &Value) -> Vec<Problem> {
    let mut checker = Checker {
        root: schema,
        errors: Vec::new(),
        refs: 0,
        steps: 0,
    };
    let at = At {
        pointer: String::new(),
        path: "$".into(),
    };
    checker.check(schema, value, &at);
    if checker.steps > MAX_STEPS {
        checker.errors.truncate(0);
        checker.push(
            &at,
            format!("the schema takes more than {MAX_STEPS} steps to check"),
        );
    }
    checker.errors
}

/// The most schema-and-value pairs one check looks at: `anyOf`s of `$ref`s can ask for
/// exponentially many, and a check past this is refused rather than run.
pub const MAX_STEPS: usize = 100_000;

/// How many `$ref`s one check follows inside each other: a schema that refers to itself stops
/// there (a value nested that deep is refused).
pub const MAX_REFS: usize = 32;

struct Checker<'s> {
    root: &'s Value,
    errors: Vec<Problem>,
    /// `$ref`s being followed now.
    refs: usize,
    /// Schema-and-value pairs looked at so far.
    steps: usize,
}

/// Where a value sits, in both notations.
struct At {
    pointer: String,
    path: String,
}

impl At {
    fn key(&self, name: &str) -> At {
        At {
            pointer: format!(
                "{}/{}",
                self.pointer,
                name.replace('~', "~0").replace('/', "~1")
            ),
            path: format!("{}.{name}", self.path),
        }
    }

    fn index(&self, i: usize) -> At {
        At {
            pointer: format!("{}/{i}", self.pointer),
            path: format!("{}[{i}]", self.path),
        }
    }
}

impl<'s> Checker<'s> {
    fn push(&mut self, at: &At, message: String) {
        self.errors.push(Problem {
            pointer: at.pointer.clone(),
            path: at.path.clone(),
            message,
        });
    }

    /// Whether `value` matches `schema`, without recording why not.
    fn matches(&mut self, schema: &'s Value, value: &Value, at: &At) -> bool {
        let before = self.errors.len();
        self.check(schema, value, at);
        let matched = self.errors.len() == before;
        self.errors.truncate(before);
        matched
    }

    fn check(&mut self, schema: &'s Value, value: &Value, at: &At) {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return;
        }
        let Some(schema) = schema.as_object() else {
            if schema == &Value::Bool(false) {
                self.push(at, "nothing is allowed here".into());
            }
            return; // `true`, or no schema: anything goes
        };
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            match self.resolve(reference) {
                Some(target) if self.refs < MAX_REFS => {
                    self.refs += 1;
                    self.check(target, value, at);
                    self.refs -= 1;
                }
                Some(_) => self.push(at, format!("nested past {MAX_REFS} `$ref`s")),
                None => self.push(at, format!("`$ref` {reference} points at nothing")),
            }
        }
        if let Some(types) = schema.get("type") {
            let allowed: Vec<&str> = match types {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => vec![],
            };
            if !allowed.is_empty() && !allowed.iter().any(|t| is_type(value, t)) {
                let message = format!(
                    "expected {}, got {}",
                    allowed.join(" or "),
                    type_name(value)
                );
                self.push(at, message);
                return;
            }
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array) {
            if !options.contains(value) {
                let message = format!("must be one of {}", Value::Array(options.clone()));
                self.push(at, message);
            }
        }
        if let Some(expected) = schema.get("const") {
            if expected != value {
                self.push(at, format!("must be {expected}"));
            }
        }
        if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
            for part in all {
                self.check(part, value, at);
            }
        }
        for (keyword, exactly_one) in [("anyOf", false), ("oneOf", true)] {
            let Some(options) = schema.get(keyword).and_then(Value::as_array) else {
                continue;
            };
            let matched = options
                .iter()
                .filter(|option| self.matches(option, value, at))
                .count();
            if matched == 0 {
                self.push(at, format!("matches none of the `{keyword}` schemas"));
            } else if exactly_one && matched > 1 {
                self.push(
                    at,
                    format!("matches {matched} of the `oneOf` schemas, not one"),
                );
            }
        }
        match value {
            Value::Object(map) => self.check_object(schema, map, at),
            Value::Array(items) => {
                bound(
                    schema,
                    ("minItems", "maxItems"),
                    items.len() as f64,
                    "items",
                )
                .into_iter()
                .for_each(|m| self.push(at, m));
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        self.check(item_schema, item, &at.index(i));
                    }
                }
            }
            Value::String(s) => bound(
                schema,
                ("minLength", "maxLength"),
                s.chars().count() as f64,
                "characters",
            )
            .into_iter()
            .for_each(|m| self.push(at, m)),
            Value::Number(n) => {
                if let Some(n) = n.as_f64() {
                    bound(schema, ("minimum", "maximum"), n, "")
                        .into_iter()
                        .for_each(|m| self.push(at, m));
                }
            }
            _ => {}
        }
    }

    fn check_object(&mut self, schema: &'s Map<String, Value>, map: &Map<String, Value>, at: &At) {
        let properties = schema.get("properties").and_then(Value::as_object);
        for name in schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !map.contains_key(name) {
                self.push(at, format!("missing required property `{name}`"));
            }
        }
        let extra = schema.get("additionalProperties");
        for (name, value) in map {
            match (properties.and_then(|p| p.get(name)), extra) {
                (Some(property), _) => self.check(property, value, &at.key(name)),
                (None, Some(Value::Bool(false))) => {
                    self.push(at, format!("unexpected property `{name}`"))
                }
                (None, Some(extra @ Value::Object(_))) => self.check(extra, value, &at.key(name)),
                (None, _) => {}
            }
        }
    }

    /// The schema a `$ref` within this one points at.
    fn resolve(&self, reference: &str) -> Option<&'s Value> {
        let pointer = reference.strip_prefix('#')?;
        self.root.pointer(pointer)
    }
}

/// What breaks a `(min, max)` bound of `schema` (printed as the schema wrote it, a JSON number,
/// not as an `f64`).
fn bound(schema: &Map<String, Value>, (min, max): (&str, &str), n: f64, unit: &str) -> Vec<String> {
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    let mut broken = Vec::new();
    if let Some(lo) = schema
        .get(min)
        .filter(|v| v.as_f64().is_some_and(|lo| n < lo))
    {
        broken.push(format!("must be at least {lo}{unit}"));
    }
    if let Some(hi) = schema
        .get(max)
        .filter(|v| v.as_f64().is_some_and(|hi| n > hi))
    {
        broken.push(format!("must be at most {hi}{unit}"));
    }
    broken
}

fn is_type(value: &Value, name: &str) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => value.as_f64().is_some_and(|n| n.fract() == 0.0),
        _ => true, // an unknown type name constrains nothing
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn weather() -> Value {
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "units": {"enum": ["c", "f"]},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2}
            },
            "required": ["city"],
            "additionalProperties": false
        })
    }

    #[test]
    fn valid_arguments_pass() {
        assert!(validate(
            &weather(),
            &json!({"city": "Oslo", "days": 3, "units": "c", "tags": ["a"]})
        )
        .is_empty());
        assert!(validate(
            &json!({"type": "object", "properties": {}}),
            &json!({"anything": 1})
        )
        .is_empty());
    }

    #[test]
    fn every_problem_is_named_with_its_path() {
        let errors = validate(
            &weather(),
            &json!({"days": 30.5, "units": "k", "tags": ["a", 2, "c"], "extra": true}),
        );
        assert_eq!(
            errors,
            [
                "$: missing required property `city`",
                "$.days: expected integer, got number",
                "$.units: must be one of [\"c\",\"f\"]",
                "$.tags: must be at most 2 items",
                "$.tags[1]: expected string, got number",
                "$: unexpected property `extra`",
            ]
        );
        assert_eq!(
            validate(&weather(), &json!({"city": "", "days": 0})),
            [
                "$.city: must be at least 1 characters",
                "$.days: must be at least 1"
            ]
        );
    }

    #[test]
    fn an_answer_is_checked_through_refs_and_combinators_with_pointers() {
        let schema = json!({
            "type": "object",
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}
                    },
                    "required": ["name"],
                    "additionalProperties": false
                }
            },
            "properties": {
                "root": {"$ref": "#/$defs/node"},
                "size": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                "kind": {"oneOf": [{"enum": ["a", "b"]}, {"enum": ["b", "c"]}]},
                "a/b": {"allOf": [{"type": "string"}, {"minLength": 2}]},
                "meta": {"type": "object", "additionalProperties": {"type": "number"}}
            }
        });
        let good = json!({"root": {"name": "r", "children": [{"name": "c", "children": []}]},
                          "size": null, "kind": "a", "a/b": "xy", "meta": {"w": 1.5}});
        assert_eq!(problems(&schema, &good), []);
        let bad = json!({"root": {"name": "r", "children": [{"children": [], "x": 1}]},
                         "size": "big", "kind": "b", "a/b": "x", "meta": {"w": "heavy"}});
        let found: Vec<(String, String)> = problems(&schema, &bad)
            .into_iter()
            .map(|p| (p.pointer, p.message))
            .collect();
        assert_eq!(
            found,
            [
                (
                    "/root/children/0".into(),
                    "missing required property `name`".into()
                ),
                ("/root/children/0".into(), "unexpected property `x`".into()),
                ("/size".into(), "matches none of the `anyOf` schemas".into()),
                (
                    "/kind".into(),
                    "matches 2 of the `oneOf` schemas, not one".into()
                ),
                ("/a~1b".into(), "must be at least 2 characters".into()),
                ("/meta/w".into(), "expected number, got string".into()),
            ]
        );
        // A schema that refers to itself without end stops, and says so.
        let endless = json!({"$ref": "#"});
        let stopped = problems(&endless, &json!(1));
        assert_eq!(stopped.len(), 1);
        assert!(stopped[0].message.contains("`$ref`s"), "{stopped:?}");
        // Nor does one that branches at every level: refused once it has taken too long.
        let branching = json!({"anyOf": [{"$ref": "#"}, {"$ref": "#"}], "type": "integer"});
        let refused = problems(&branching, &json!(1));
        assert_eq!(refused.len(), 1);
        assert!(refused[0].message.contains("steps"), "{refused:?}");
        let dangling = problems(&json!({"$ref": "#/$defs/none"}), &json!(1));
        assert!(dangling[0].message.contains("points at nothing"));
        assert_eq!(problems(&json!(false), &json!(1)).len(), 1);
    }
}
