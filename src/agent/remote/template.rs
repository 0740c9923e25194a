//! Templates over a tool call's arguments: `{name}` in a URL (percent-encoded), in a query
//! value or in a JSON body (a string that is exactly `{name}` becomes the argument's JSON value,
//! keeping its type).

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{Map, Value};

/// What stays literal in a URL path segment or a query value.
const URL_SAFE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `text` percent-encoded for a URL path segment, a query name or a query value.
pub fn encode(text: &str) -> impl Iterator<Item = &str> {
    utf8_percent_encode(text, URL_SAFE)
}

/// The placeholders a template uses, in order.
pub fn placeholders(template: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if is_name(&after[..close]) => {
                out.push(&after[..close]);
                rest = &after[close + 1..];
            }
            _ => rest = after,
        }
    }
    out
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Fills `{name}` placeholders; `percent_encode` encodes each value (URLs and query values).
pub fn fill(
    template: &str,
    arguments: &Map<String, Value>,
    percent_encode: bool,
) -> Result<String, String> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}').filter(|c| is_name(&after[..*c])) else {
            out.push_str(&rest[..open + 1]);
            rest = after;
            continue;
        };
        let name = &after[..close];
        let value = arguments
            .get(name)
            .ok_or_else(|| format!("the argument `{name}` is missing"))?;
        out.push_str(&rest[..open]);
        let text = text_of(value);
        if percent_encode {
            out.extend(encode(&text));
        } else {
            out.push_str(&text);
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Fills a JSON body template.
pub fn fill_json(template: &Value, arguments: &Map<String, Value>) -> Result<Value, String> {
    Ok(match template {
        Value::String(s) => {
            let whole = s
                .strip_prefix('{')
                .and_then(|r| r.strip_suffix('}'))
                .filter(|name| is_name(name));
            match whole {
                // An optional argument left out is left out of the body too (as null).
                Some(name) => arguments.get(name).cloned().unwrap_or(Value::Null),
                None => Value::String(fill(s, arguments, false)?),
            }
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| fill_json(v, arguments))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), fill_json(v, arguments)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn urls_are_encoded_and_missing_arguments_named() {
        let a = args(json!({"city": "São Paulo/BR", "days": 3}));
        assert_eq!(
            fill("https://w.example/v1/{city}/forecast?d={days}", &a, true).unwrap(),
            "https://w.example/v1/S%C3%A3o%20Paulo%2FBR/forecast?d=3"
        );
        assert_eq!(
            fill("{city} in {days}", &a, false).unwrap(),
            "São Paulo/BR in 3"
        );
        assert_eq!(
            fill("{ not a name } {}", &a, false).unwrap(),
            "{ not a name } {}"
        );
        assert!(fill("/{country}", &a, true)
            .unwrap_err()
            .contains("`country`"));
        assert_eq!(placeholders("/{a}/{b_2}?x={ c }"), vec!["a", "b_2"]);
    }

    #[test]
    fn json_bodies_keep_types() {
        let a = args(json!({"city": "Oslo", "days": 3, "tags": ["x"]}));
        let body = fill_json(
            &json!({"q": "{city}", "n": "{days}", "t": "{tags}", "label": "weather in {city}", "missing": "{unit}", "k": 1}),
            &a,
        )
        .unwrap();
        assert_eq!(
            body,
            json!({"q": "Oslo", "n": 3, "t": ["x"], "label": "weather in Oslo", "missing": null, "k": 1})
        );
    }
}
