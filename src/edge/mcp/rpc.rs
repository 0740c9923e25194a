//! JSON-RPC 2.0 as MCP's Streamable HTTP transport carries it: one message per `POST`, answered
//! with one JSON body or a short SSE stream, and the protocol revisions this server speaks. Pure
//! code, tested natively.

use serde_json::{json, Value};

/// The revisions answered, newest first: `initialize` gets the client's when it is one of
/// them, else the newest; a later request's `MCP-Protocol-Version` must name one.
pub const VERSIONS: &[&str] = &["2025-11-25", "2025-06-18"];

/// The largest whole-number `id` taken: JavaScript's largest exact integer, as the OpenAPI
/// document says.
pub const MAX_SAFE_ID: u64 = 9_007_199_254_740_991;

/// The largest message taken, in bytes: a question for an agent, not a document store.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// A message that is not a request this server can answer, with its JSON-RPC code.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RpcError {
    #[error("{0}")]
    Parse(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("{0}")]
    MethodNotFound(String),
    #[error("{0}")]
    InvalidParams(String),
}

impl RpcError {
    pub fn code(&self) -> i64 {
        match self {
            RpcError::Parse(_) => -32700,
            RpcError::InvalidRequest(_) => -32600,
            RpcError::MethodNotFound(_) => -32601,
            RpcError::InvalidParams(_) => -32602,
        }
    }
}

/// One message from the client.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// A request: it gets an answer with its `id`.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A notification, or an answer to a request of ours (this server sends none): accepted
    /// with a 202 and no body.
    Accepted,
}

/// Reads one message; a bad one is refused with the id it carried (`null` when none could be
/// read) and why.
pub fn read(body: &str) -> Result<Incoming, (Value, RpcError)> {
    let message: Value = crate::llm::json::from_str(body)
        .map_err(|e| (Value::Null, RpcError::Parse(format!("not JSON: {e}"))))?;
    let Value::Object(mut message) = message else {
        let why = if message.is_array() {
            "a batch (an array of messages) is not taken since MCP 2025-06-18: send one message per request"
        } else {
            "a JSON-RPC message is an object"
        };
        return Err((Value::Null, RpcError::InvalidRequest(why.into())));
    };
    // Read first, so that no refusal echoes an id this server would not take.
    let id = match message.remove("id") {
        None => None,
        Some(id @ Value::String(_)) => Some(id),
        // A whole number (`3.0` is one, as JSON Schema counts) within JavaScript's exact
        // integers: an id a client sends is one it can read back. Echoed as it came.
        Some(Value::Number(n)) if whole_and_safe(&n) => Some(Value::Number(n)),
        Some(_) => {
            return Err((
                Value::Null,
                RpcError::InvalidRequest("`id` must be a string or a whole number".into()),
            ))
        }
    };
    let invalid = |id: Option<Value>, why: &str| {
        Err((
            id.unwrap_or(Value::Null),
            RpcError::InvalidRequest(why.into()),
        ))
    };
    if message.get("jsonrpc") != Some(&json!("2.0")) {
        return invalid(id, "`jsonrpc` must be \"2.0\"");
    }
    let method = match message.remove("method") {
        Some(Value::String(method)) => method,
        Some(_) => return invalid(id, "`method` must be a string"),
        // An answer to a request of ours.
        None if message.contains_key("result") || message.contains_key("error") => {
            return Ok(Incoming::Accepted)
        }
        None => return invalid(id, "`method` is missing"),
    };
    let Some(id) = id else {
        return Ok(Incoming::Accepted);
    };
    let params = match message.remove("params") {
        None => Value::Object(Default::default()),
        Some(params @ Value::Object(_)) => params,
        Some(_) => return invalid(Some(id), "`params` must be an object"),
    };
    Ok(Incoming::Request { id, method, params })
}

fn whole_and_safe(n: &serde_json::Number) -> bool {
    match (n.as_i64(), n.as_f64()) {
        (Some(v), _) => v.unsigned_abs() <= MAX_SAFE_ID,
        (None, Some(f)) => f.fract() == 0.0 && f.abs() <= MAX_SAFE_ID as f64,
        _ => false,
    }
}

/// The revision `initialize` answers with, for the one the client asked for.
pub fn negotiate(asked: Option<&str>) -> &'static str {
    VERSIONS
        .iter()
        .find(|v| Some(**v) == asked)
        .copied()
        .unwrap_or(VERSIONS[0])
}

/// Whether a request's `MCP-Protocol-Version` header is one this server speaks. Absent, the
/// transport's rule is to assume 2025-03-26; what this server does differently from it (one
/// message per request, no batches) is refused in terms a client of it reads.
pub fn version_ok(header: Option<&str>) -> bool {
    header.is_none_or(|v| VERSIONS.contains(&v.trim()))
}

pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub fn error(id: &Value, e: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code(), "message": e.to_string()}})
}

/// A `notifications/progress` for request token `token`.
pub fn progress(token: &Value, progress: u64, message: &str) -> Value {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {"progressToken": token, "progress": progress, "message": message},
    })
}

/// A `notifications/message` (MCP's logging) at `level`, carrying `data`.
pub fn log(level: &str, data: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": level, "logger": "edge-agent", "data": data},
    })
}

/// One message as an SSE event of a response stream.
pub fn sse_event(message: &Value) -> String {
    format!("event: message\ndata: {message}\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> (Value, i64) {
        let (id, e) = read(body).unwrap_err();
        (id, e.code())
    }

    #[test]
    fn requests_notifications_and_answers_are_told_apart() {
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#).unwrap(),
            Incoming::Request {
                id: json!(7),
                method: "tools/list".into(),
                params: json!({}),
            }
        );
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap(),
            Incoming::Accepted
        );
        assert_eq!(
            read(r#"{"jsonrpc":"2.0","id":"s1","result":{}}"#).unwrap(),
            Incoming::Accepted
        );
    }

    #[test]
    fn a_bad_message_is_refused_with_its_code_and_the_id_it_carried() {
        assert_eq!(refused("{nope"), (Value::Null, -32700));
        assert_eq!(refused("[]"), (Value::Null, -32600));
        assert_eq!(refused(r#"{"id":1,"method":"ping"}"#), (json!(1), -32600));
        // An id this server would not take is never echoed, whatever else is wrong.
        assert_eq!(
            refused(r#"{"id":{"a":1},"method":"ping"}"#),
            (Value::Null, -32600)
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}"#),
            (Value::Null, -32600)
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":"x","method":"ping","params":[1]}"#),
            (json!("x"), -32600)
        );
        assert_eq!(refused(r#"{"jsonrpc":"2.0","id":2}"#), (json!(2), -32600));
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":null}"#),
            (json!(3), -32600)
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#),
            (Value::Null, -32600)
        );
        assert_eq!(
            refused(r#"{"jsonrpc":"2.0","id":9007199254740992,"method":"ping"}"#),
            (Value::Null, -32600)
        );
        assert!(read(r#"{"jsonrpc":"2.0","id":-9007199254740991,"method":"ping"}"#).is_ok());
        assert!(read(r#"{"jsonrpc":"2.0","id":-1064.0,"method":"ping"}"#).is_ok());
    }

    #[test]
    fn the_revision_is_the_client_s_when_spoken_else_the_newest() {
        assert_eq!(negotiate(Some("2025-06-18")), "2025-06-18");
        assert_eq!(negotiate(Some("2024-11-05")), "2025-11-25");
        assert_eq!(negotiate(None), "2025-11-25");
        assert!(version_ok(None) && version_ok(Some("2025-06-18")));
        assert!(!version_ok(Some("2099-01-01")) && !version_ok(Some("2025-03-26")));
    }

    #[test]
    fn messages_are_framed_as_sse_events() {
        let note = progress(&json!("t"), 2, "calling `search`");
        assert_eq!(
            sse_event(&note),
            "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":2,\"message\":\"calling `search`\"}}\n\n"
        );
        assert_eq!(
            error(&json!(1), &RpcError::MethodNotFound("no".into()))["error"]["code"],
            -32601
        );
    }
}
