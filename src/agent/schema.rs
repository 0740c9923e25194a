//! Tool arguments checked against the tool's JSON Schema before its handler runs, so a model's
//! mistake becomes an error result it can correct instead of a handler failure.
//!
//! A subset of JSON Schema, the part tool schemas use: `type` (one or a list), `properties`,
//! `required`, `additionalProperties: false`, `enum`, `const`, `items`, `minimum`/`maximum`,
//! `minLength`/`maxLength`, `minItems`/`maxItems`. Other keywords are ignored (accepted). The
//! complete validators on crates.io bring regex and HTTP stacks into the wasm bundle.

use serde_json::{Map, Value};

/// Every way `value` breaks `schema`, each as `path: problem`.
pub fn validate(schema: &Value, value: &Value) -> Vec<String> {
    let mut errors = Vec::new();
    check(schema, value, "$", &mut errors);
    errors
}

fn check(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    let Some(schema) = schema.as_object() else {
        return; // `true`, or no schema: anything goes
    };
    if let Some(types) = schema.get("type") {
        let allowed: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !allowed.is_empty() && !allowed.iter().any(|t| is_type(value, t)) {
            errors.push(format!(
                "{path}: expected {}, got {}",
                allowed.join(" or "),
                type_name(value)
            ));
            return;
        }
    }
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        if !options.contains(value) {
            errors.push(format!(
                "{path}: must be one of {}",
                Value::Array(options.clone())
            ));
        }
    }
    if let Some(expected) = schema.get("const") {
        if expected != value {
            errors.push(format!("{path}: must be {expected}"));
        }
    }
    match value {
        Value::Object(map) => check_object(schema, map, path, errors),
        Value::Array(items) => {
            bound(
                schema,
                "minItems",
                "maxItems",
                items.len() as f64,
                "items",
                path,
                errors,
            );
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        Value::String(s) => bound(
            schema,
            "minLength",
            "maxLength",
            s.chars().count() as f64,
            "characters",
            path,
            errors,
        ),
        Value::Number(n) => {
            if let Some(n) = n.as_f64() {
                bound(schema, "minimum", "maximum", n, "", path, errors);
            }
        }
        _ => {}
    }
}

fn check_object(
    schema: &Map<String, Value>,
    map: &Map<String, Value>,
    path: &str,
    errors: &mut Vec<String>,
) {
    let properties = schema.get("properties").and_then(Value::as_object);
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(name) {
            errors.push(format!("{path}: missing required property `{name}`"));
        }
    }
    for (name, value) in map {
        match properties.and_then(|p| p.get(name)) {
            Some(property) => check(property, value, &format!("{path}.{name}"), errors),
            None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                errors.push(format!("{path}: unexpected property `{name}`"))
            }
            None => {}
        }
    }
}

fn bound(
    schema: &Map<String, Value>,
    min: &str,
    max: &str,
    n: f64,
    unit: &str,
    path: &str,
    errors: &mut Vec<String>,
) {
    let unit = if unit.is_empty() {
        String::new()
    } else {
        format!(" {unit}")
    };
    // The bound is printed as the schema wrote it (a JSON number), not as an `f64`.
    if let Some(lo) = schema
        .get(min)
        .filter(|v| v.as_f64().is_some_and(|lo| n < lo))
    {
        errors.push(format!("{path}: must be at least {lo}{unit}"));
    }
    if let Some(hi) = schema
        .get(max)
        .filter(|v| v.as_f64().is_some_and(|hi| n > hi))
    {
        errors.push(format!("{path}: must be at most {hi}{unit}"));
    }
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
}
