//! A `tools/call` result as the model reads it: rendered to text and structured content, with
//! the statuses every remote tool's result carries, and held to the size an HTTP tool's is.

use serde_json::Value;

use crate::agent::remote::{answer, cut, failure};
use crate::agent::text::clip;

/// A `tools/call` result as the model reads it: text joined, structured content kept as JSON,
/// images, audio and resources described rather than dropped; `isError` an error result.
pub fn tool_result(result: &Value) -> Result<Value, String> {
    let mut parts: Vec<String> = Vec::new();
    for item in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let field = |name: &str| item.get(name).and_then(Value::as_str).unwrap_or_default();
        let size = |data: &str| data.len() / 4 * 3;
        parts.push(match field("type") {
            "text" => field("text").to_string(),
            "image" | "audio" => format!(
                "[{} {}, {} bytes, not shown]",
                field("type"),
                field("mimeType"),
                size(field("data"))
            ),
            "resource" => {
                let resource = &item["resource"];
                let uri = resource["uri"].as_str().unwrap_or_default();
                match resource["text"].as_str() {
                    Some(text) => format!("[resource {uri}]\n{text}"),
                    None => format!(
                        "[resource {uri}, {}, {} bytes, not shown]",
                        resource["mimeType"].as_str().unwrap_or("binary"),
                        size(resource["blob"].as_str().unwrap_or_default())
                    ),
                }
            }
            "resource_link" => format!("[link {} {}]", field("name"), field("uri")),
            other => format!("[{other} content, not shown]"),
        });
    }
    let text = parts.join("\n");
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        return Err(failure(if text.is_empty() {
            "the tool failed".to_string()
        } else {
            text
        }));
    }
    let structured = result.get("structuredContent").filter(|v| !v.is_null());
    // Servers repeat structured content as serialized JSON text for older clients: once is
    // enough for the model.
    let text = match structured {
        Some(s) if crate::llm::json::from_str::<Value>(&text).is_ok_and(|t| t == *s) => {
            String::new()
        }
        _ => text,
    };
    if text.is_empty() && structured.is_none() {
        return Ok(answer("no_result", None, None));
    }
    let mut out = answer(
        "ok",
        (!text.is_empty()).then_some(Value::String(text)),
        None,
    );
    if let Some(structured) = structured {
        out["structured"] = structured.clone();
    }
    Ok(out)
}

/// A result held to `max` bytes as the model reads it: a longer answer is cut (its text and
/// structured content, rendered) and marked `degraded`; a longer error is cut.
pub(super) fn capped(result: Result<Value, String>, max: usize) -> Result<Value, String> {
    match result {
        Ok(value) => {
            let size = |v: Option<&Value>| match v {
                Some(Value::String(s)) => s.len(),
                Some(other) => other.to_string().len(),
                None => 0,
            };
            if size(value.get("result")) + size(value.get("structured")) <= max {
                return Ok(value);
            }
            let mut rendered = match value.get("result") {
                Some(Value::String(s)) => s.clone(),
                _ => String::new(),
            };
            if let Some(structured) = value.get("structured") {
                if !rendered.is_empty() {
                    rendered.push('\n');
                }
                rendered.push_str(&structured.to_string());
            }
            Ok(cut(&rendered, max))
        }
        Err(message) if message.len() > max => {
            let kept = clip(&message, max);
            Err(format!(
                "{kept}… (the error was cut to {} bytes)",
                kept.len()
            ))
        }
        Err(message) => Err(message),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map};

    use crate::agent::remote::mcp::testing::{client, run, Server};
    use crate::agent::remote::DEFAULT_RESULT_BYTES;

    #[test]
    fn results_are_capped_like_http_tools_and_marked_degraded() {
        let server = Server::default();
        let c = client(None);
        server.handshake("s-1");
        // A 3 MB answer (under the 4 MB read limit) reaches the model as 16 KB.
        let big = "é".repeat(1_500_000);
        server.json(json!({"content": [{"type": "text", "text": big}]}));
        let out = run(c.call_tool(&server, "dump", &Map::new()))
            .unwrap()
            .unwrap();
        assert_eq!(out["status"], "degraded");
        let kept = out["result"].as_str().unwrap();
        assert!(kept.len() <= DEFAULT_RESULT_BYTES && kept.len() > DEFAULT_RESULT_BYTES - 2);
        assert!(out["note"].as_str().unwrap().contains("cut to"));
        // Structured content counts too; an error is cut as well.
        server.json(json!({"content": [], "structuredContent": {"rows": vec![1; 10_000]}}));
        let out = run(c.call_tool(&server, "rows", &Map::new()))
            .unwrap()
            .unwrap();
        assert_eq!(out["status"], "degraded");
        server.json(
            json!({"content": [{"type": "text", "text": "x".repeat(40_000)}], "isError": true}),
        );
        let failed = run(c.call_tool(&server, "rows", &Map::new()))
            .unwrap()
            .unwrap_err();
        assert!(failed.len() < DEFAULT_RESULT_BYTES + 100 && failed.contains("cut to"));
    }
}
