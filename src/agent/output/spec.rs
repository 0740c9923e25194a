//! What a typed answer must be (`output` on an agent or a message): its kind, its JSON Schema,
//! and what to do when the model's answer does not match. Read from the request's JSON, with
//! errors that point (a JSON pointer) at the part to fix.
//!
//! The model is always asked for an object: an `array` answer is `{"elements": [...]}` and a
//! `choice` is `{"result": "..."}` (tool inputs and strict structured outputs take only
//! objects); [`OutputSpec::unwrap`] takes the answer out again.

use serde_json::{json, Map, Value};

use crate::agent::schema::{pointer_key, required};

/// The largest schema taken, as JSON.
pub const MAX_SCHEMA_BYTES: usize = 64 << 10;
/// The deepest a schema may nest objects and arrays.
pub const MAX_SCHEMA_DEPTH: usize = 10;
/// The most properties a schema may declare, all objects together.
pub const MAX_SCHEMA_PROPERTIES: usize = 1_000;
/// The most options a `choice` may offer, and their most characters in all (OpenAI's bounds on
/// an `enum`).
pub const MAX_CHOICES: usize = 500;
pub const MAX_CHOICE_CHARS: usize = 15_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Object,
    Array,
    Choice,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// The provider's own structured output where the model has it, else a tool.
    Auto,
    Native,
    /// A forced tool whose input is the answer.
    Tool,
    /// Instructions in the prompt, the text parsed.
    Prompt,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnInvalid {
    Error,
    /// One more call, told what was wrong (the default).
    Repair,
    /// The spec's `fallback` value.
    Fallback,
}

#[derive(Debug, Clone, PartialEq)]
pub struct OutputSpec {
    pub kind: Kind,
    /// What the model is asked for: always an object schema (`{}` for `json`: anything).
    pub schema: Value,
    /// The answer's name (a tool's, a response format's).
    pub name: String,
    pub description: Option<String>,
    pub strategy: Strategy,
    pub on_invalid: OnInvalid,
    pub fallback: Option<Value>,
}

/// A bad `output`: where (a JSON pointer into it) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`output{pointer}`: {message}")]
pub struct SpecError {
    pub pointer: String,
    pub message: String,
}

fn at(pointer: impl Into<String>, message: impl Into<String>) -> SpecError {
    SpecError {
        pointer: pointer.into(),
        message: message.into(),
    }
}

impl OutputSpec {
    /// Reads a request's `output`.
    pub fn parse(value: &Value) -> Result<Self, SpecError> {
        let Some(o) = value.as_object() else {
            return Err(at("", "must be an object"));
        };
        const KNOWN: &[&str] = &[
            "type",
            "schema",
            "options",
            "name",
            "description",
            "strategy",
            "on_invalid",
            "fallback",
        ];
        if let Some(k) = o.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(at(
                format!("/{}", pointer_key(k)),
                "is not a field of `output`",
            ));
        }
        let text = |field: &str| -> Result<Option<&str>, SpecError> {
            match o.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s)),
                Some(_) => Err(at(format!("/{field}"), "must be a string")),
            }
        };
        let kind = match text("type")? {
            Some("object") => Kind::Object,
            Some("array") => Kind::Array,
            Some("choice") => Kind::Choice,
            Some("json") => Kind::Json,
            Some(other) => {
                return Err(at(
                    "/type",
                    format!("`{other}` is not one of object, array, choice, json"),
                ))
            }
            None => return Err(at("/type", "is required")),
        };
        let given = o.get("schema").filter(|s| !s.is_null());
        let schema = match (kind, given) {
            (Kind::Object | Kind::Array, None) => return Err(at("/schema", "is required")),
            (Kind::Choice | Kind::Json, Some(_)) => {
                return Err(at("/schema", "is not taken by this `type`"))
            }
            (_, Some(schema)) => {
                // An array's elements sit two levels down in what the model is asked for.
                check_schema(schema, if kind == Kind::Array { 2 } else { 0 })?;
                if kind == Kind::Object && schema.get("type") != Some(&json!("object")) {
                    return Err(at("/schema/type", "must be \"object\""));
                }
                Some(schema)
            }
            _ => None,
        };
        let options = match (kind, o.get("options")) {
            (Kind::Choice, Some(Value::Array(items))) if !items.is_empty() => {
                if items.len() > MAX_CHOICES {
                    return Err(at("/options", format!("offers more than {MAX_CHOICES}")));
                }
                let mut options = Vec::with_capacity(items.len());
                let mut chars = 0;
                for (i, item) in items.iter().enumerate() {
                    let Some(s) = item.as_str() else {
                        return Err(at(format!("/options/{i}"), "must be a string"));
                    };
                    // At most 500 options: a scan is cheaper in code than a set.
                    if options.contains(&s) {
                        return Err(at(format!("/options/{i}"), "is there twice"));
                    }
                    chars += s.chars().count();
                    if chars > MAX_CHOICE_CHARS {
                        return Err(at(
                            format!("/options/{i}"),
                            format!("takes the options past {MAX_CHOICE_CHARS} characters in all"),
                        ));
                    }
                    options.push(s);
                }
                options
            }
            (Kind::Choice, _) => return Err(at("/options", "must be a list of strings")),
            (_, Some(_)) => return Err(at("/options", "is taken only by `choice`")),
            _ => Vec::new(),
        };
        let name = text("name")?.unwrap_or("answer");
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return Err(at("/name", "must be 1 to 64 letters, digits, `_` or `-`"));
        }
        let strategy = match text("strategy")? {
            None | Some("auto") => Strategy::Auto,
            Some("native") => Strategy::Native,
            Some("tool") => Strategy::Tool,
            Some("prompt") => Strategy::Prompt,
            Some(other) => {
                return Err(at(
                    "/strategy",
                    format!("`{other}` is not one of auto, native, tool, prompt"),
                ))
            }
        };
        let on_invalid = match text("on_invalid")? {
            None | Some("repair") => OnInvalid::Repair,
            Some("error") => OnInvalid::Error,
            Some("fallback") => OnInvalid::Fallback,
            Some(other) => {
                return Err(at(
                    "/on_invalid",
                    format!("`{other}` is not one of error, repair, fallback"),
                ))
            }
        };
        let fallback = o.get("fallback").cloned();
        if on_invalid == OnInvalid::Fallback && fallback.is_none() {
            return Err(at(
                "/fallback",
                "is required with `on_invalid: \"fallback\"`",
            ));
        }
        let schema = match kind {
            Kind::Object => schema.cloned().unwrap_or_default(),
            Kind::Array => {
                // The element schema moves two levels down: its definitions go to the top,
                // where its `$ref`s (which must name them) still find them.
                let mut items = schema.cloned().unwrap_or_default();
                if let Some((pointer, r)) = stray_ref(&items, "/schema") {
                    return Err(at(
                        pointer,
                        format!("`{r}`: an array's element schema may refer only to its `$defs`"),
                    ));
                }
                let defs: Vec<(String, Value)> = ["$defs", "definitions"]
                    .into_iter()
                    .filter_map(|k| Some((k.to_string(), items.as_object_mut()?.remove(k)?)))
                    .collect();
                let mut outer = wrapper("elements", json!({"type": "array", "items": items}));
                if let Some(o) = outer.as_object_mut() {
                    o.extend(defs);
                }
                outer
            }
            Kind::Choice => wrapper("result", json!({"type": "string", "enum": options})),
            Kind::Json => json!({}),
        };
        Ok(Self {
            kind,
            schema,
            name: name.to_string(),
            description: text("description")?.map(str::to_string),
            strategy,
            on_invalid,
            fallback,
        })
    }

    /// The answer inside what the model produced (`elements` of an array, `result` of a choice).
    pub fn unwrap(&self, produced: Value) -> Value {
        let field = match self.kind {
            Kind::Array => "elements",
            Kind::Choice => "result",
            Kind::Object | Kind::Json => return produced,
        };
        match produced {
            Value::Object(mut map) => map.remove(field).unwrap_or(Value::Null),
            other => other,
        }
    }
}

/// The first `$ref` in `schema` that names something other than its `$defs` or `definitions`,
/// with where it is.
fn stray_ref(schema: &Value, pointer: &str) -> Option<(String, String)> {
    match schema {
        Value::Object(o) => {
            if let Some(r) = o.get("$ref").and_then(Value::as_str) {
                if !r.starts_with("#/$defs/") && !r.starts_with("#/definitions/") {
                    return Some((format!("{pointer}/$ref"), r.to_string()));
                }
            }
            o.iter()
                .find_map(|(k, v)| stray_ref(v, &format!("{pointer}/{}", pointer_key(k))))
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, v)| stray_ref(v, &format!("{pointer}/{i}"))),
        _ => None,
    }
}

/// `{"type": "object", "properties": {field: schema}, "required": [field], ...}`.
fn wrapper(field: &str, schema: Value) -> Value {
    json!({
        "type": "object",
        "properties": {field: schema},
        "required": [field],
        "additionalProperties": false,
    })
}

/// Size, depth and property count within what every provider takes; `depth`: the levels the
/// schema sits under in what the model is asked for.
fn check_schema(schema: &Value, depth: usize) -> Result<(), SpecError> {
    let bytes = serde_json::to_string(schema).map_or(usize::MAX, |s| s.len());
    if bytes > MAX_SCHEMA_BYTES {
        return Err(at(
            "/schema",
            format!("is {bytes} bytes as JSON; the limit is {MAX_SCHEMA_BYTES}"),
        ));
    }
    if !schema.is_object() {
        return Err(at("/schema", "must be a JSON Schema object"));
    }
    let mut properties = 0;
    walk(schema, "/schema", depth, &mut properties)
}

/// Checks one schema object and those inside it, counting nesting by objects and arrays.
fn walk(
    schema: &Value,
    pointer: &str,
    depth: usize,
    properties: &mut usize,
) -> Result<(), SpecError> {
    let Some(o) = schema.as_object() else {
        return match schema {
            Value::Bool(_) => Ok(()),
            _ => Err(at(pointer, "must be a JSON Schema (an object)")),
        };
    };
    // An object or an array, by its `type` (or one of its types) or by what it declares.
    let typed = |t: &Value| matches!(t.as_str(), Some("object" | "array"));
    let nests = match o.get("type") {
        Some(Value::Array(types)) => types.iter().any(typed),
        Some(t) => typed(t),
        None => o.contains_key("properties") || o.contains_key("items"),
    };
    let depth = depth + usize::from(nests);
    if let Some(r) = o.get("$ref") {
        // Only within the schema: nothing is fetched.
        if !r.as_str().is_some_and(|r| r.starts_with('#')) {
            return Err(at(
                format!("{pointer}/$ref"),
                "must point within the schema (`#...`)",
            ));
        }
    }
    if depth > MAX_SCHEMA_DEPTH {
        return Err(at(
            pointer,
            format!("nests deeper than {MAX_SCHEMA_DEPTH} levels"),
        ));
    }
    if let Some(props) = o.get("properties") {
        let Some(props) = props.as_object() else {
            return Err(at(format!("{pointer}/properties"), "must be an object"));
        };
        *properties += props.len();
        if *properties > MAX_SCHEMA_PROPERTIES {
            return Err(at(
                format!("{pointer}/properties"),
                format!("more than {MAX_SCHEMA_PROPERTIES} properties in all"),
            ));
        }
        for (k, v) in props {
            walk(
                v,
                &format!("{pointer}/properties/{}", pointer_key(k)),
                depth,
                properties,
            )?;
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(v) = o.get(key).filter(|v| v.is_object()) {
            walk(v, &format!("{pointer}/{key}"), depth, properties)?;
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(list) = o.get(key) {
            let Some(list) = list.as_array() else {
                return Err(at(format!("{pointer}/{key}"), "must be a list of schemas"));
            };
            for (i, v) in list.iter().enumerate() {
                walk(v, &format!("{pointer}/{key}/{i}"), depth, properties)?;
            }
        }
    }
    for key in ["$defs", "definitions"] {
        if let Some(defs) = o.get(key).and_then(Value::as_object) {
            for (k, v) in defs {
                walk(
                    v,
                    &format!("{pointer}/{key}/{}", pointer_key(k)),
                    depth,
                    properties,
                )?;
            }
        }
    }
    Ok(())
}

/// The keywords OpenAI's strict structured outputs refuse.
const NOT_STRICT: &[&str] = &[
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "not",
    "allOf",
    "oneOf",
];

/// `schema` as OpenAI's strict mode takes it: every property required, those that were
/// optional made nullable, `additionalProperties: false` on every object; `None` when strict
/// mode cannot take it (a keyword it refuses, an object of free-form keys, a root that is not
/// an object): it is then sent without `strict`.
pub fn strict_openai(schema: &Value) -> Option<Value> {
    let root = schema.as_object()?;
    if root.get("type") != Some(&json!("object")) || root.contains_key("anyOf") {
        return None;
    }
    strict_part(schema)
}

fn strict_part(schema: &Value) -> Option<Value> {
    let Value::Object(o) = schema else {
        return Some(schema.clone());
    };
    if o.keys().any(|k| NOT_STRICT.contains(&k.as_str())) {
        return None;
    }
    if o.get("additionalProperties")
        .is_some_and(|a| a != &Value::Bool(false))
    {
        return None;
    }
    let mut out = Map::new();
    for (k, v) in o {
        let v = match k.as_str() {
            "items" | "additionalProperties" => strict_part(v)?,
            "anyOf" | "prefixItems" => Value::Array(
                v.as_array()?
                    .iter()
                    .map(strict_part)
                    .collect::<Option<_>>()?,
            ),
            "$defs" | "definitions" => Value::Object(
                v.as_object()?
                    .iter()
                    .map(|(k, v)| Some((k.clone(), strict_part(v)?)))
                    .collect::<Option<_>>()?,
            ),
            _ => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    if let Some(props) = o.get("properties").and_then(Value::as_object) {
        let required: Vec<&str> = required(o).collect();
        let mut strict_props = Map::new();
        for (name, prop) in props {
            let prop = strict_part(prop)?;
            let prop = if required.contains(&name.as_str()) {
                prop
            } else {
                nullable(prop)
            };
            strict_props.insert(name.clone(), prop);
        }
        out.insert(
            "required".into(),
            Value::Array(props.keys().map(|k| Value::String(k.clone())).collect()),
        );
        out.insert("properties".into(), Value::Object(strict_props));
        out.insert("additionalProperties".into(), Value::Bool(false));
    } else {
        // An object of free-form keys cannot be strict (it would be held to `{}`).
        let types_object = |t: &Value| match t {
            Value::Array(ts) => ts.iter().any(|t| t == "object"),
            t => t == "object",
        };
        if o.get("type").is_some_and(types_object) {
            return None;
        }
    }
    Some(Value::Object(out))
}

/// An answer given under [`strict_openai`]'s form of `schema`, back in `schema`'s: an optional
/// property the model set to `null` (strict mode has it say every property) is left out again,
/// unless `schema` itself allows `null` there. Follows `$ref`s and takes, of an `anyOf`, the
/// first option the answer then matches. Checked against `schema` after this.
pub fn unstrict(schema: &Value, value: Value) -> Value {
    let mut unstrict = Unstrict {
        root: schema,
        budget: UNSTRICT_BUDGET,
    };
    unstrict.value(schema, value, 0)
}

/// How many levels of schema `unstrict` follows, and how much work it may do (a level costs
/// 1, a check of an `anyOf` option or of a null [`CHECK_COST`]): `$ref`s inside `anyOf`s could
/// otherwise ask for exponentially many. Past either, the answer is left as it is there, and
/// the check after it says what is wrong.
const MAX_UNSTRICT_DEPTH: usize = 64;
const UNSTRICT_BUDGET: usize = 10_000;
const CHECK_COST: usize = 100;

struct Unstrict<'s> {
    root: &'s Value,
    budget: usize,
}

impl Unstrict<'_> {
    /// Whether `cost` more may be spent (and spends it).
    fn spend(&mut self, cost: usize) -> bool {
        match self.budget.checked_sub(cost) {
            Some(left) => {
                self.budget = left;
                true
            }
            None => false,
        }
    }

    /// Whether `value` matches `schema` (a part of the root), if the budget allows the check.
    fn matches(&mut self, schema: &Value, value: &Value) -> Option<bool> {
        self.spend(CHECK_COST)
            .then(|| crate::agent::schema::problems_in(self.root, schema, value).is_empty())
    }

    fn value(&mut self, schema: &Value, value: Value, depth: usize) -> Value {
        if depth > MAX_UNSTRICT_DEPTH || !self.spend(1) {
            return value;
        }
        let root = self.root;
        let target = schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix('#'))
            .and_then(|pointer| root.pointer(pointer));
        if let Some(target) = target {
            return self.value(target, value, depth + 1);
        }
        if let Some(options) = schema.get("anyOf").and_then(Value::as_array) {
            for option in options {
                let v = self.value(option, value.clone(), depth + 1);
                match self.matches(option, &v) {
                    Some(true) => return v,
                    Some(false) => {}
                    None => break,
                }
            }
            return value;
        }
        match value {
            Value::Object(map) => {
                let properties = schema.get("properties").and_then(Value::as_object);
                let required: Vec<&str> = schema
                    .as_object()
                    .map_or_else(Vec::new, |s| required(s).collect());
                let mut kept = Map::new();
                for (k, v) in map {
                    let own = properties.and_then(|p| p.get(&k));
                    // Null where the schema as written would not have it: strict mode's doing.
                    let added = v.is_null()
                        && !required.contains(&k.as_str())
                        && own.is_some_and(|own| self.matches(own, &Value::Null) == Some(false));
                    match (added, own) {
                        (true, _) => {}
                        (false, Some(own)) => {
                            let v = self.value(own, v, depth + 1);
                            kept.insert(k, v);
                        }
                        (false, None) => {
                            kept.insert(k, v);
                        }
                    }
                }
                Value::Object(kept)
            }
            Value::Array(items) => {
                let Some(item) = schema.get("items") else {
                    return Value::Array(items);
                };
                let items = items.into_iter();
                Value::Array(items.map(|v| self.value(item, v, depth + 1)).collect())
            }
            other => other,
        }
    }
}

/// A schema that also takes `null`.
fn nullable(schema: Value) -> Value {
    let Value::Object(mut o) = schema else {
        return schema;
    };
    let null = json!("null");
    let types = match o.get("type") {
        Some(Value::String(t)) if t != "null" => vec![json!(t), null],
        Some(Value::Array(ts)) if ts.contains(&null) => ts.clone(),
        Some(Value::Array(ts)) => ts.iter().cloned().chain([null]).collect(),
        _ => return json!({"anyOf": [Value::Object(o), {"type": "null"}]}),
    };
    o.insert("type".into(), Value::Array(types));
    if let Some(Value::Array(e)) = o.get_mut("enum") {
        if !e.contains(&Value::Null) {
            e.push(Value::Null);
        }
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<OutputSpec, SpecError> {
        OutputSpec::parse(&v)
    }

    #[test]
    fn each_kind_asks_the_model_for_an_object_and_unwraps_its_answer() {
        let person = json!({"type": "object", "properties": {"name": {"type": "string"}}});
        let object = parse(json!({"type": "object", "schema": person})).unwrap();
        assert_eq!(object.schema, person);
        assert_eq!(
            (object.name.as_str(), object.strategy, object.on_invalid),
            ("answer", Strategy::Auto, OnInvalid::Repair)
        );
        let array = parse(json!({"type": "array", "schema": {"type": "string"}})).unwrap();
        assert_eq!(
            array.schema["properties"]["elements"]["items"],
            json!({"type": "string"})
        );
        // An element schema's definitions go to the top, where its `$ref`s find them.
        let node = json!({"$ref": "#/$defs/n", "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}});
        let nodes = parse(json!({"type": "array", "schema": node})).unwrap();
        assert_eq!(
            nodes.schema["properties"]["elements"]["items"],
            json!({"$ref": "#/$defs/n"})
        );
        let answer = json!({"elements": [{"next": {}}]});
        assert_eq!(crate::agent::schema::problems(&nodes.schema, &answer), []);
        let bad = json!({"elements": [{"next": 3}]});
        assert_eq!(
            crate::agent::schema::problems(&nodes.schema, &bad)[0].pointer,
            "/elements/0/next"
        );
        let stray = parse(
            json!({"type": "array", "schema": {"type": "object", "properties": {"a": {"$ref": "#"}}}}),
        );
        assert_eq!(stray.unwrap_err().pointer, "/schema/properties/a/$ref");
        assert_eq!(
            array.unwrap(json!({"elements": ["a", "b"]})),
            json!(["a", "b"])
        );
        let choice = parse(json!({"type": "choice", "options": ["yes", "no"]})).unwrap();
        assert_eq!(
            choice.schema["properties"]["result"]["enum"],
            json!(["yes", "no"])
        );
        assert_eq!(choice.unwrap(json!({"result": "no"})), json!("no"));
        let any = parse(json!({"type": "json", "strategy": "prompt"})).unwrap();
        assert_eq!(
            (any.schema.clone(), any.strategy),
            (json!({}), Strategy::Prompt)
        );
        assert_eq!(any.unwrap(json!([1])), json!([1]));
    }

    #[test]
    fn a_bad_output_names_the_part_to_fix_by_its_pointer() {
        let deep = (0..12).fold(
            json!({"type": "string"}),
            |inner, _| json!({"type": "object", "properties": {"x": inner}}),
        );
        let many: Map<String, Value> = (0..1001)
            .map(|i| (format!("p{i}"), json!({"type": "integer"})))
            .collect();
        let huge = json!({"type": "object", "description": "x".repeat(MAX_SCHEMA_BYTES)});
        let cases = [
            (json!("object"), ""),
            (json!({"schema": {}}), "/type"),
            (json!({"type": "table"}), "/type"),
            (json!({"type": "object"}), "/schema"),
            (json!({"type": "object", "schema": {"type": "array"}}), "/schema/type"),
            (json!({"type": "object", "schema": deep}), "/schema/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x"),
            (json!({"type": "object", "schema": {"type": "object", "properties": many}}), "/schema/properties"),
            (json!({"type": "object", "schema": huge}), "/schema"),
            (json!({"type": "object", "schema": {"type": "object", "properties": {"a/b": 3}}}), "/schema/properties/a~1b"),
            (json!({"type": "choice"}), "/options"),
            (json!({"type": "choice", "options": ["a", "a"]}), "/options/1"),
            (json!({"type": "choice", "options": ["a"], "schema": {}}), "/schema"),
            (json!({"type": "json", "name": "two words"}), "/name"),
            (json!({"type": "json", "strategy": "magic"}), "/strategy"),
            (json!({"type": "json", "on_invalid": "fallback"}), "/fallback"),
            (json!({"type": "json", "colour": 1}), "/colour"),
            // Nesting counted by types listed and by what a schema declares, and the array
            // wrapper's two levels.
            (json!({"type": "object", "schema": (0..11).fold(json!({"type": "string"}), |inner, _| json!({"type": ["object", "null"], "properties": {"x": inner}}))}), "/schema/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x"),
            (json!({"type": "array", "schema": (0..9).fold(json!({"type": "string"}), |inner, _| json!({"properties": {"x": inner}}))}), "/schema/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x/properties/x"),
            (json!({"type": "object", "schema": {"type": "object", "properties": {"a": {"$ref": "https://evil.example/s.json"}}}}), "/schema/properties/a/$ref"),
            (json!({"type": "choice", "options": ["x".repeat(10_000), "y".repeat(10_000)]}), "/options/1"),
        ];
        for (output, pointer) in cases {
            let e = parse(output.clone()).unwrap_err();
            assert_eq!(e.pointer, pointer, "{output}: {e}");
            assert!(
                e.to_string().starts_with(&format!("`output{pointer}`")),
                "{e}"
            );
        }
    }

    #[test]
    fn openai_strict_mode_gets_every_property_required_and_optional_ones_nullable() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {"enum": ["a", "b"]}}}},
            },
            "required": ["name"],
        });
        let strict = strict_openai(&schema).unwrap();
        assert_eq!(strict["required"], json!(["name", "age", "tags"]));
        assert_eq!(strict["additionalProperties"], json!(false));
        assert_eq!(strict["properties"]["name"], json!({"type": "string"}));
        assert_eq!(
            strict["properties"]["age"]["type"],
            json!(["integer", "null"])
        );
        let item = &strict["properties"]["tags"]["items"];
        assert_eq!(item["required"], json!(["k"]));
        assert_eq!(
            item["properties"]["k"],
            json!({"anyOf": [{"enum": ["a", "b"]}, {"type": "null"}]})
        );
        // A keyword strict mode refuses: sent as it is, without `strict`.
        let loose = json!({"type": "object", "properties": {"a": {"type": "string"}}, "patternProperties": {}});
        assert_eq!(strict_openai(&loose), None);
        let open = json!({"type": "object", "additionalProperties": {"type": "string"}});
        assert_eq!(strict_openai(&open), None);
        // What the model says under the strict form goes back to the original's: the nulls
        // it had to give for optional properties are left out, so the original validates it.
        let answer = json!({"name": "Ada", "age": null, "tags": [{"k": null}]});
        let back = unstrict(&schema, answer);
        assert_eq!(back, json!({"name": "Ada", "tags": [{}]}));
        assert_eq!(crate::agent::schema::problems(&schema, &back), []);
        let nullable =
            json!({"type": "object", "properties": {"n": {"type": ["integer", "null"]}}});
        assert_eq!(unstrict(&nullable, json!({"n": null})), json!({"n": null}));
        // Through `$ref`s and `anyOf`s, and a null the schema allows another way is kept.
        let deeper = json!({
            "type": "object",
            "$defs": {"item": {"type": "object", "properties": {"k": {"type": "string"}, "opt": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}},
            "properties": {
                "item": {"$ref": "#/$defs/item"},
                "either": {"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": []}, {"type": "string"}]}
            }
        });
        let answer = json!({"item": {"k": null, "opt": null}, "either": {"a": null}});
        let back = unstrict(&deeper, answer);
        assert_eq!(back, json!({"item": {"opt": null}, "either": {}}));
        assert_eq!(crate::agent::schema::problems(&deeper, &back), []);
        // `$ref`s inside `anyOf`s ask for exponentially many tries: bounded, the answer left.
        let branching = json!({"type": "object", "properties": {"x": {"$ref": "#/$defs/n"}},
            "$defs": {"n": {"anyOf": [{"$ref": "#/$defs/n"}, {"$ref": "#/$defs/n"}]}}});
        assert_eq!(unstrict(&branching, json!({"x": 5})), json!({"x": 5}));
        // The root must be an object; an object of free-form keys cannot be held to `{}`.
        assert_eq!(strict_openai(&json!({})), None);
        assert_eq!(strict_openai(&json!({"anyOf": [{"type": "object"}]})), None);
        let free = json!({"type": "object", "properties": {"meta": {"type": ["object", "null"]}}, "required": ["meta"]});
        assert_eq!(strict_openai(&free), None);
        // An optional field of several types with an enum may be null too.
        let typed = json!({"type": "object", "properties": {"n": {"type": ["integer", "string"], "enum": [1, "a"]}}});
        let strict = strict_openai(&typed).unwrap();
        assert_eq!(
            strict["properties"]["n"],
            json!({"type": ["integer", "string", "null"], "enum": [1, "a", null]})
        );
    }
}
