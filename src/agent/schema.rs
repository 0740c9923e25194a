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
/// A tool's schema is taken as its server wrote it: a `$ref` this checker cannot follow (a URL,
/// an anchor) allows anything rather than refusing every call.
pub fn validate(schema: &Value, value: &Value) -> Vec<String> {
    run(schema, schema, value, true)
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

/// Every way `value` breaks `schema` (at most [`MAX_PROBLEMS`]). Beyond the keywords above:
/// `anyOf`, `oneOf` (read as `anyOf`), `allOf`, and `$ref` within the schema (`#`,
/// `#/$defs/...`). A schema that cannot be checked to its end (a `$ref` to nothing, more than
/// [`MAX_REFS`] of them nested, [`MAX_DEPTH`] levels or [`MAX_STEPS`] steps) is one problem.
pub fn problems(schema: &Value, value: &Value) -> Vec<Problem> {
    run(schema, schema, value, false)
}

/// [`problems`] of `value` against `schema`, a part of `root` (whose `$ref`s it may follow).
pub fn problems_in(root: &Value, schema: &Value, value: &Value) -> Vec<Problem> {
    run(root, schema, value, false)
}

/// The names an object schema's `required` lists (none when it lists none, or is not a list).
pub fn required(schema: &Map<String, Value>) -> impl Iterator<Item = &str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// How many `$ref`s one check follows inside each other.
pub const MAX_REFS: usize = 32;
/// The most schema-and-value pairs one check looks at (an `enum`'s options count each):
/// `anyOf`s of `$ref`s can ask for exponentially many, and a check past this is refused.
pub const MAX_STEPS: usize = 100_000;
/// The most problems one check names; it stops there.
pub const MAX_PROBLEMS: usize = 32;
/// How deep one check nests (schemas inside schemas, `$ref`s followed).
pub const MAX_DEPTH: usize = 256;
/// The most `enum` options a problem lists.
const SHOWN_OPTIONS: usize = 10;

fn run(root: &Value, schema: &Value, value: &Value, lenient_refs: bool) -> Vec<Problem> {
    let mut checker = Checker {
        root,
        errors: Vec::new(),
        refs: 0,
        depth: 0,
        steps: 0,
        quiet: 0,
        lenient_refs,
        broken: None,
    };
    let at = At::ROOT;
    checker.check(schema, value, &at);
    // A schema that cannot be checked to the end is refused whole: a verdict reached partway
    // (inside an `anyOf`, say) would be an accident of where it stopped.
    if let Some(broken) = checker.broken.take() {
        checker.errors.clear();
        checker.push(&at, broken);
    }
    checker.errors
}

struct Checker<'s> {
    root: &'s Value,
    errors: Vec<Problem>,
    /// `$ref`s being followed now.
    refs: usize,
    /// Checks nested now.
    depth: usize,
    /// Schema-and-value pairs looked at so far.
    steps: usize,
    /// Inside `anyOf`/`oneOf` options (how many deep): only whether one matches counts, so the
    /// first problem ends the option's check and no message is written.
    quiet: usize,
    /// A `$ref` that cannot be followed allows anything (tool arguments).
    lenient_refs: bool,
    /// Why the check cannot be finished, once it cannot.
    broken: Option<String>,
}

/// One key as a JSON pointer writes it (`~` and `/` escaped).
pub fn pointer_key(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Where a value sits: the place of its parent and the step from there. Written out only when
/// a problem is told, never copied per value checked: a value's keys are a model's or a tool
/// server's to choose, however long.
#[derive(Clone, Copy)]
struct At<'a> {
    parent: Option<&'a At<'a>>,
    step: Step<'a>,
}

#[derive(Clone, Copy)]
enum Step<'a> {
    Root,
    Key(&'a str),
    Index(usize),
}

/// The most characters of a key a problem's place shows.
const SHOWN_KEY: usize = 64;

impl<'a> At<'a> {
    const ROOT: At<'static> = At {
        parent: None,
        step: Step::Root,
    };

    fn key(&'a self, name: &'a str) -> At<'a> {
        At {
            parent: Some(self),
            step: Step::Key(name),
        }
    }

    fn index(&'a self, i: usize) -> At<'a> {
        At {
            parent: Some(self),
            step: Step::Index(i),
        }
    }

    /// The place as a JSON pointer (`/tags/1`) and as a path (`$.tags[1]`).
    fn written(&self) -> (String, String) {
        let mut steps = Vec::new();
        let mut at = Some(self);
        while let Some(here) = at {
            steps.push(here.step);
            at = here.parent;
        }
        let (mut pointer, mut path) = (String::new(), String::from("$"));
        for step in steps.into_iter().rev() {
            match step {
                Step::Root => {}
                Step::Key(name) => {
                    let name = crate::agent::text::shorten(name, SHOWN_KEY);
                    pointer.push('/');
                    pointer.push_str(&pointer_key(&name));
                    path.push('.');
                    path.push_str(&name);
                }
                Step::Index(i) => {
                    pointer.push_str(&format!("/{i}"));
                    path.push_str(&format!("[{i}]"));
                }
            }
        }
        (pointer, path)
    }
}

impl<'s> Checker<'s> {
    fn push(&mut self, at: &At, message: String) {
        let (pointer, path) = if self.quiet > 0 {
            // Only that it failed matters.
            (String::new(), String::new())
        } else {
            at.written()
        };
        self.errors.push(Problem {
            pointer,
            path,
            message,
        });
    }

    /// Whether to stop: the check is broken or has found enough (inside an option, anything
    /// since `before`).
    fn done(&self, before: usize) -> bool {
        self.broken.is_some()
            || (self.quiet > 0 && self.errors.len() > before)
            || self.errors.len() >= MAX_PROBLEMS
    }

    fn stop(&mut self, why: String) {
        self.broken.get_or_insert(why);
    }

    /// Whether `value` matches `schema`, without recording why not.
    fn matches(&mut self, schema: &'s Value, value: &Value, at: &At) -> bool {
        let before = self.errors.len();
        self.quiet += 1;
        self.check(schema, value, at);
        self.quiet -= 1;
        let matched = self.errors.len() == before;
        self.errors.truncate(before);
        matched
    }

    fn check(&mut self, schema: &'s Value, value: &Value, at: &At) {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            self.stop(format!(
                "the schema takes more than {MAX_STEPS} steps to check"
            ));
        }
        if self.depth >= MAX_DEPTH {
            self.stop(format!("the schema nests more than {MAX_DEPTH} levels"));
        }
        if self.broken.is_some() {
            return;
        }
        self.depth += 1;
        self.check_here(schema, value, at);
        self.depth -= 1;
    }

    fn check_here(&mut self, schema: &'s Value, value: &Value, at: &At) {
        let before = self.errors.len();
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
                Some(_) => self.stop(format!("the schema nests past {MAX_REFS} `$ref`s")),
                None if self.lenient_refs => {}
                None => self.stop(format!("`$ref` {reference} points at nothing")),
            }
            if self.done(before) {
                return;
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
            self.steps += options.len();
            if !options.contains(value) {
                let message = if self.quiet > 0 {
                    String::new()
                } else {
                    one_of(options)
                };
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
                if self.done(before) {
                    return;
                }
            }
        }
        // `oneOf` is read as `anyOf`: options told apart only by keywords this checker does
        // not know (`pattern`, `format`) would all match, and every value be refused.
        for keyword in ["anyOf", "oneOf"] {
            let Some(options) = schema.get(keyword).and_then(Value::as_array) else {
                continue;
            };
            if !options.iter().any(|option| self.matches(option, value, at)) {
                self.push(at, format!("matches none of the `{keyword}` schemas"));
            }
        }
        if self.done(before) {
            return;
        }
        match value {
            Value::Object(map) => self.check_object(schema, map, at),
            Value::Array(items) => {
                for m in bound(
                    schema,
                    ("minItems", "maxItems"),
                    items.len() as f64,
                    "items",
                ) {
                    self.push(at, m);
                }
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        if self.done(before) {
                            return;
                        }
                        self.check(item_schema, item, &at.index(i));
                    }
                }
            }
            Value::String(s) => {
                let length = s.chars().count() as f64;
                for m in bound(schema, ("minLength", "maxLength"), length, "characters") {
                    self.push(at, m);
                }
            }
            Value::Number(n) => {
                if let Some(n) = n.as_f64() {
                    for m in bound(schema, ("minimum", "maximum"), n, "") {
                        self.push(at, m);
                    }
                }
            }
            _ => {}
        }
    }

    fn check_object(&mut self, schema: &'s Map<String, Value>, map: &Map<String, Value>, at: &At) {
        let before = self.errors.len();
        let properties = schema.get("properties").and_then(Value::as_object);
        for name in required(schema) {
            if !map.contains_key(name) {
                self.push(at, format!("missing required property `{name}`"));
            }
        }
        let extra = schema.get("additionalProperties");
        for (name, value) in map {
            if self.done(before) {
                return;
            }
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

/// "must be one of [...]", the first [`SHOWN_OPTIONS`] options written out.
fn one_of(options: &[Value]) -> String {
    let shown = Value::Array(options.iter().take(SHOWN_OPTIONS).cloned().collect());
    match options.len() {
        n if n > SHOWN_OPTIONS => {
            format!("must be one of {shown} (and {} more)", n - SHOWN_OPTIONS)
        }
        _ => format!("must be one of {shown}"),
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
                         "size": "big", "kind": "d", "a/b": "x", "meta": {"w": "heavy"}});
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
                ("/kind".into(), "matches none of the `oneOf` schemas".into()),
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
        assert!(refused[0].message.contains("`$ref`s"), "{refused:?}");
        let dangling = problems(&json!({"$ref": "#/$defs/none"}), &json!(1));
        assert!(dangling[0].message.contains("points at nothing"));
        assert_eq!(problems(&json!(false), &json!(1)).len(), 1);
    }

    #[test]
    fn a_hostile_schema_or_answer_costs_a_bounded_check() {
        // A long enum: a few of its options shown.
        let options: Vec<Value> = (0..30_000).map(|i| json!(i)).collect();
        let found = problems(&json!({"enum": options}), &json!(-1));
        assert!(found[0].message.len() < 200, "{}", found[0].message);
        assert!(
            found[0].message.ends_with("(and 29990 more)"),
            "{}",
            found[0].message
        );
        // Failed many times: at most 32 problems, then the check stops.
        let short = json!({"type": "array", "items": {"enum": [1, 2, 3]}});
        assert_eq!(
            problems(&short, &json!(vec![-1; 2_000])).len(),
            MAX_PROBLEMS
        );
        // Failed many times over a long list: refused as too long to check, not run to its end.
        let long = json!({"type": "array", "items": {"enum": options}});
        let refused = problems(&long, &json!(vec![-1; 2_000]));
        assert_eq!(refused.len(), 1);
        assert!(refused[0].message.contains("steps"), "{refused:?}");
        // A `$ref` to nothing, even inside an option, refuses the check whole: not a verdict.
        let dangling = json!({"anyOf": [{"$ref": "#/$defs/none"}, {"type": "integer"}]});
        let refused = problems(&dangling, &json!(1));
        assert_eq!(refused.len(), 1);
        assert!(refused[0].message.contains("points at nothing"));
        // A tool's schema keeps working with a `$ref` this checker cannot follow.
        let tool = json!({"type": "object", "properties": {"a": {"$ref": "https://x.example/a"}}});
        assert!(validate(&tool, &json!({"a": 1})).is_empty());
        // A key the value chose, however long, shows in a problem's place clipped.
        let open = json!({"type": "object", "additionalProperties": {"type": "integer"}});
        let long = "k".repeat(10_000);
        let found = problems(&open, &json!({ long.clone(): "x" }));
        assert_eq!(found[0].pointer, format!("/{}…", "k".repeat(64)));
        assert!(validate(&open, &json!({ long: "x" }))[0]
            .starts_with(&format!("$.{}…: ", "k".repeat(64))));
        // Options that differ only by keywords not checked all match: still accepted.
        let patterned = json!({"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "^b"}]});
        assert!(problems(&patterned, &json!("apple")).is_empty());
    }
}
