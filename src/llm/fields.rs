//! Reading a JSON object's fields by hand, for inputs read rarely: configuration entries
//! (`MODELS`, `HTTP_TOOLS`, `MCP_SERVERS`) and built-in tools' arguments.
//!
//! A type read through `llm::json` carries its own code for its fields, and the reader's errors
//! for a value of the wrong kind do not say which field it was. These inputs are parsed once
//! into a `serde_json::Value` (whose reader the Worker carries anyway) and
//! their fields taken out of it with the few functions below, compiled once for every type. The
//! errors name the field and what it must be, for someone editing a configuration value or a
//! model choosing arguments.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// An object's fields, taken out one by one; [`Fields::of`] has already refused unknown ones.
#[derive(Debug)]
pub struct Fields {
    map: Map<String, Value>,
    /// Put before each field's name in errors: `""`, or `"result."` in a nested object.
    at: String,
}

impl Fields {
    /// `value` as an object whose fields are all among `known`.
    pub fn of(value: Value, known: &[&str]) -> Result<Self, String> {
        Self::nested(value, Some(known), String::new())
    }

    /// `value` as an object, whatever other fields it has (a model's arguments may carry extra
    /// ones, which are ignored).
    pub fn any(value: Value) -> Result<Self, String> {
        Self::nested(value, None, String::new())
    }

    /// `value` as an object named `at` in errors, with only the `known` fields if given.
    fn nested(value: Value, known: Option<&[&str]>, at: String) -> Result<Self, String> {
        let Value::Object(map) = value else {
            return Err(format!("{} must be a JSON object", kind_of(&at)));
        };
        let Some(known) = known else {
            return Ok(Self { map, at });
        };
        if let Some(unknown) = map.keys().find(|k| !known.contains(&k.as_str())) {
            let expected: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
            return Err(format!(
                "unknown field `{at}{unknown}`, expected one of {}",
                expected.join(", ")
            ));
        }
        Ok(Self { map, at })
    }

    /// The field's value; absent and `null` are both `None`.
    pub fn value(&mut self, name: &str) -> Option<Value> {
        self.map.remove(name).filter(|v| !v.is_null())
    }

    /// A field that must be there.
    pub fn required<T>(&mut self, name: &str, read: Reader<T>) -> Result<T, String> {
        self.optional(name, read)?
            .ok_or_else(|| format!("missing field `{}{name}`", self.at))
    }

    /// A field that may be left out (or `null`).
    pub fn optional<T>(&mut self, name: &str, read: Reader<T>) -> Result<Option<T>, String> {
        match self.value(name) {
            None => Ok(None),
            Some(value) => read.0(value)
                .map(Some)
                .ok_or_else(|| format!("`{}{name}` must be {}", self.at, read.1)),
        }
    }

    /// A nested object that may be left out, with its own known fields.
    pub fn object(&mut self, name: &str, known: &[&str]) -> Result<Option<Fields>, String> {
        let at = format!("{}{name}.", self.at);
        self.value(name)
            .map(|v| Self::nested(v, Some(known), at))
            .transpose()
    }
}

fn kind_of(at: &str) -> String {
    match at.strip_suffix('.') {
        Some(name) => format!("`{name}`"),
        None => "it".into(),
    }
}

/// How one kind of field is read, and what it must be (for the error).
pub type Reader<T> = (fn(Value) -> Option<T>, &'static str);

pub const STRING: Reader<String> = (
    |v| match v {
        Value::String(s) => Some(s),
        _ => None,
    },
    "a string",
);

pub const BOOL: Reader<bool> = (|v| v.as_bool(), "true or false");

pub const U32: Reader<u32> = (
    |v| v.as_u64().and_then(|n| u32::try_from(n).ok()),
    "a whole number from 0 to 4294967295",
);

pub const USIZE: Reader<usize> = (
    |v| v.as_u64().and_then(|n| usize::try_from(n).ok()),
    "a whole number, 0 or more",
);

pub const NUMBER: Reader<f64> = (|v| v.as_f64(), "a number");

/// Any JSON value.
pub const JSON: Reader<Value> = (Some, "a JSON value");

pub const STRINGS: Reader<Vec<String>> = (
    |v| match v {
        Value::Array(items) => items.into_iter().map(|i| STRING.0(i)).collect(),
        _ => None,
    },
    "a list of strings",
);

/// An object whose values are all strings (headers, query parameters).
pub const STRING_MAP: Reader<BTreeMap<String, String>> = (
    |v| match v {
        Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| Some((k, STRING.0(v)?)))
            .collect(),
        _ => None,
    },
    "an object whose values are strings",
);

/// Reads a setting that is a JSON array of entries (`MODELS`, `HTTP_TOOLS`, `MCP_SERVERS`):
/// each an object with only the `known` fields, taken out by `read` and checked by `check`, no
/// two with the same `key` field. Errors name the entry by its index and `key`, then what is
/// wrong: "entry 1 (`weather`): `url` must be a string".
pub fn entries<T>(
    json: &str,
    known: &[&str],
    key: &str,
    read: fn(&mut Fields) -> Result<T, String>,
    check: fn(&T) -> Result<(), String>,
) -> Result<Vec<T>, String> {
    let values: Vec<Value> =
        crate::llm::json::from_str(json).map_err(|e| format!("not a JSON array: {e}"))?;
    let mut parsed = Vec::with_capacity(values.len());
    let mut keys: Vec<String> = Vec::with_capacity(values.len());
    for (i, value) in values.into_iter().enumerate() {
        let name = value
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string();
        let at = |message: String| format!("entry {i} (`{name}`): {message}");
        let entry = Fields::of(value, known)
            .and_then(|mut fields| read(&mut fields))
            .map_err(at)?;
        check(&entry).map_err(at)?;
        if keys.contains(&name) {
            return Err(at(format!("another entry has this `{key}`")));
        }
        keys.push(name);
        parsed.push(entry);
    }
    Ok(parsed)
}

/// A list of objects, each read by `read` (errors say which item).
pub fn list<T>(
    value: Value,
    what: &str,
    read: impl Fn(Value) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let Value::Array(items) = value else {
        return Err(format!("{what} must be a list"));
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| read(item).map_err(|e| format!("item {i}: {e}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_are_taken_checked_and_named_in_errors() {
        let mut f = Fields::of(
            json!({"name": "w", "n": 3, "tags": ["a"], "h": {"x": "1"}, "gone": null}),
            &["name", "n", "tags", "h", "gone", "extra"],
        )
        .unwrap();
        assert_eq!(f.required("name", STRING).unwrap(), "w");
        assert_eq!(f.optional("n", U32).unwrap(), Some(3));
        assert_eq!(f.optional("tags", STRINGS).unwrap(), Some(vec!["a".into()]));
        assert_eq!(f.required("h", STRING_MAP).unwrap()["x"], "1");
        assert_eq!(f.optional("gone", STRING).unwrap(), None);
        assert_eq!(
            f.required("extra", STRING).unwrap_err(),
            "missing field `extra`"
        );

        let e = Fields::of(json!({"name": "w", "nmae": 1}), &["name", "url"]).unwrap_err();
        assert_eq!(e, "unknown field `nmae`, expected one of `name`, `url`");
        assert_eq!(
            Fields::of(json!([1]), &[]).unwrap_err(),
            "it must be a JSON object"
        );
        let mut f = Fields::of(
            json!({"n": -1, "m": 1.5, "s": 2, "l": ["a", 1]}),
            &["n", "m", "s", "l"],
        )
        .unwrap();
        for (name, must) in [("n", "a whole number"), ("m", "a whole number")] {
            let e = f.optional(name, U32).unwrap_err();
            assert!(e.starts_with(&format!("`{name}` must be {must}")), "{e}");
        }
        assert_eq!(f.optional("s", STRING).unwrap_err(), "`s` must be a string");
        assert_eq!(
            f.optional("l", STRINGS).unwrap_err(),
            "`l` must be a list of strings"
        );
    }

    #[test]
    fn nested_objects_name_their_parent() {
        let mut f = Fields::of(json!({"result": {"max_bytes": "many"}}), &["result"]).unwrap();
        let mut inner = f.object("result", &["max_bytes"]).unwrap().unwrap();
        assert_eq!(
            inner.optional("max_bytes", USIZE).unwrap_err(),
            "`result.max_bytes` must be a whole number, 0 or more"
        );
        let mut f = Fields::of(json!({"result": {"size": 1}}), &["result"]).unwrap();
        assert_eq!(
            f.object("result", &["max_bytes"]).unwrap_err(),
            "unknown field `result.size`, expected one of `max_bytes`"
        );
        let mut f = Fields::of(json!({"result": 1}), &["result"]).unwrap();
        assert_eq!(
            f.object("result", &[]).unwrap_err(),
            "`result` must be a JSON object"
        );
    }

    #[test]
    fn a_list_names_the_item_that_is_wrong() {
        let read = |v: Value| Fields::of(v, &["a"]).map(|_| ());
        assert_eq!(list(json!([{}, {}]), "`x`", read).unwrap().len(), 2);
        assert_eq!(
            list(json!([{}, {"b": 1}]), "`x`", read).unwrap_err(),
            "item 1: unknown field `b`, expected one of `a`"
        );
        assert_eq!(
            list(json!({}), "`x`", read).unwrap_err(),
            "`x` must be a list"
        );
    }
}
