//! Repair of the slightly malformed tool-argument JSON that open models produce: code fences
//! around it, trailing commas, and unclosed strings, arrays or objects (a stream cut short).
//!
//! Hand-written on purpose: the crates for this pull in `clap` or `regex` + `tracing` + `json5`,
//! which would bloat the wasm bundle for a few dozen lines of work. Only used after a strict
//! parse fails; anything it cannot fix stays raw text.

use serde_json::Value;

/// Parses `raw` strictly, else after repair. `None` if even the repaired text is not JSON.
pub fn parse_lenient(raw: &str) -> Option<Value> {
    crate::llm::json::from_str(raw)
        .ok()
        .or_else(|| crate::llm::json::from_str(&repair(raw)).ok())
}

/// The repaired text (which may still be invalid).
pub fn repair(raw: &str) -> String {
    let text = strip_fences(raw.trim());
    let mut out = String::with_capacity(text.len() + 8);
    let mut closers: Vec<char> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' => {
                closers.push('}');
                out.push(c);
            }
            '[' => {
                closers.push(']');
                out.push(c);
            }
            '}' | ']' => {
                drop_trailing_comma(&mut out);
                if closers.last() == Some(&c) {
                    closers.pop();
                }
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    if in_string {
        if escaped {
            out.pop();
        }
        out.push('"');
    }
    while let Some(closer) = closers.pop() {
        drop_trailing_comma(&mut out);
        // `{"a":` cut after the colon: give the key a value.
        if out.trim_end().ends_with(':') {
            out.push_str("null");
        }
        out.push(closer);
    }
    out
}

fn strip_fences(text: &str) -> &str {
    let Some(rest) = text.strip_prefix("```") else {
        return text;
    };
    // Skip the info string (`json`) up to the end of the line.
    let body = rest.split_once('\n').map_or(rest, |(_, body)| body);
    body.trim_end().strip_suffix("```").unwrap_or(body).trim()
}

fn drop_trailing_comma(out: &mut String) {
    let trimmed = out.trim_end().len();
    if out[..trimmed].ends_with(',') {
        out.truncate(trimmed - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repairs_what_open_models_get_wrong() {
        let cases = [
            (
                r#"{"city": "Oslo", "days": 3,}"#,
                json!({"city": "Oslo", "days": 3}),
            ),
            (r#"{"tags": ["a", "b",], }"#, json!({"tags": ["a", "b"]})),
            (
                "```json\n{\"city\": \"Oslo\"}\n```",
                json!({"city": "Oslo"}),
            ),
            ("```\n{\"a\": 1}```", json!({"a": 1})),
            (
                r#"{"city": "Oslo", "nested": {"x": [1, 2"#,
                json!({"city": "Oslo", "nested": {"x": [1, 2]}}),
            ),
            (r#"{"note": "unterminated"#, json!({"note": "unterminated"})),
            (
                r#"{"a": "has } and , inside",}"#,
                json!({"a": "has } and , inside"}),
            ),
            (r#"{"a":"#, json!({"a": null})),
            (r#"{"q": "say \"hi\""#, json!({"q": "say \"hi\""})),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_lenient(raw), Some(want), "{raw}");
        }
    }

    #[test]
    fn valid_json_is_untouched_and_garbage_stays_unparsed() {
        assert_eq!(
            parse_lenient(r#"{"a": [1, {"b": null}]}"#),
            Some(json!({"a": [1, {"b": null}]}))
        );
        assert_eq!(parse_lenient("call the weather tool for Oslo"), None);
    }
}
