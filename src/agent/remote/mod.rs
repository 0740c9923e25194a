//! Tools a deployment plugs in without code: declarative HTTP tools (`HTTP_TOOLS`) and the tools
//! of MCP servers (`MCP_SERVERS`). What they share: the statuses their results carry, which hosts
//! they may call, retries inside the tool timeout, and a circuit breaker per service.

pub mod address;
pub mod breaker;
pub mod http;
pub mod mcp;
pub mod redirects;
pub mod template;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;

use serde_json::{json, Value};

use crate::agent::text::clip;
use crate::agent::tools::is_tool_name;
use crate::llm::Sleeper;

pub use address::{check_url, host_of, is_private_host};
pub use breaker::Breaker;
pub use http::{parse_http_tools, HttpTool, HttpToolSpec};
pub use mcp::{exposed_name, parse_mcp_servers, McpClient, McpServerSpec, McpTool};

/// Calls made to a service that fails with a 5xx, a 429 or a network error, the first included.
pub const ATTEMPTS: u32 = 3;
/// The first wait between attempts; it doubles (with jitter).
pub const BACKOFF_MS: u64 = 250;

/// A successful result: `{"status": "ok" | "no_result" | "degraded", ...}` (the rule:
/// the model learns whether there was nothing, or only part).
pub fn answer(status: &str, result: Option<Value>, note: Option<String>) -> Value {
    let mut out = json!({ "status": status });
    if let Some(result) = result {
        out["result"] = result;
    }
    if let Some(note) = note {
        out["note"] = Value::String(note);
    }
    out
}

/// The most a tool's result may give the model unless its configuration says otherwise
/// (`max_bytes`), in bytes.
pub const DEFAULT_RESULT_BYTES: usize = 16 * 1024;
/// The most any configuration may allow: a result stays far below a D1 row's 2 MB.
pub const MAX_RESULT_BYTES: usize = 256 * 1024;

/// A result too long for the model, cut to `max` bytes (at a character boundary) and marked
/// `degraded` with a note saying so.
pub fn cut(rendered: &str, max: usize) -> Value {
    let kept = clip(rendered, max);
    answer(
        "degraded",
        Some(Value::String(kept.to_string())),
        Some(format!(
            "the result was cut to {} bytes; ask for less if you need the rest",
            kept.len()
        )),
    )
}

/// A failed call as the error text the model reads: `{"status": "error", "message": ...}`.
pub fn failure(message: impl Into<String>) -> String {
    json!({"status": "error", "message": message.into()}).to_string()
}

/// A declared `name`: a tool name ([`is_tool_name`]) of at most `max` bytes (`max` no more than
/// [`MAX_TOOL_NAME`](crate::agent::tools::MAX_TOOL_NAME)), so 1 to `max` letters, digits, `_`
/// or `-`.
pub fn check_name(name: &str, max: usize) -> Result<(), String> {
    if name.len() <= max && is_tool_name(name) {
        Ok(())
    } else {
        Err(format!(
            "`name` must be 1 to {max} letters, digits, `_` or `-`"
        ))
    }
}

/// Declared headers with `secret:NAME` values resolved by `secret` (names lower-cased). A
/// missing secret is named, with its header and `owner`; its value never is.
pub fn resolve_headers(
    owner: &str,
    headers: &BTreeMap<String, String>,
    secret: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, String)>, String> {
    headers
        .iter()
        .map(|(name, value)| {
            let value = match value.strip_prefix("secret:") {
                Some(key) => secret(key).ok_or_else(|| {
                    format!("`{owner}`: header `{name}` names the secret `{key}`, which is not set")
                })?,
                None => value.clone(),
            };
            Ok((name.to_ascii_lowercase(), value))
        })
        .collect()
}

/// How one attempt at a remote call went.
pub enum Attempt {
    /// The service answered (an error result too, when it is the call's fault).
    Done(Result<Value, String>),
    /// The service failed (5xx, 429, network): worth another attempt; says what happened.
    Failed(String),
}

/// A call to a remote service through its circuit breaker, retried with jittered backoff while
/// it fails; `who` names it in the "unavailable" answer of an open circuit. A call that is
/// cancelled (`cancelled()` once an attempt fails), or dropped by a timeout, is not a failure
/// of the service: it releases the breaker instead of counting against it.
#[allow(clippy::too_many_arguments)]
pub async fn call_service<F, Fut>(
    service: &str,
    who: &str,
    breakers: &Breakers,
    sleeper: &dyn Sleeper,
    now_ms: fn() -> i64,
    cancelled: &dyn Fn() -> bool,
    attempt: F,
) -> Result<Value, String>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Attempt>,
{
    let admitted = match breakers.admit(service, now_ms()) {
        Ok(admitted) => admitted,
        Err(wait_ms) => {
            return Err(failure(format!(
                "unavailable: {who} failed repeatedly and is not called for another {} s",
                (wait_ms + 999) / 1000
            )))
        }
    };
    let mut last = String::new();
    for n in 0..ATTEMPTS {
        if n > 0 {
            let base = BACKOFF_MS << (n - 1);
            let jitter = (sleeper.random() * base as f64 / 2.0) as u64;
            sleeper.sleep(base + jitter).await;
        }
        match attempt().await {
            Attempt::Done(result) => {
                admitted.record(true, now_ms());
                return result;
            }
            Attempt::Failed(what) if cancelled() => {
                return Err(failure(format!("cancelled: {what}")));
            }
            Attempt::Failed(what) => last = what,
        }
    }
    admitted.record(false, now_ms());
    Err(failure(format!("{last} (after {ATTEMPTS} attempts)")))
}

/// A call the breaker let through; ended without [`Admitted::record`] (cancelled, dropped), it
/// releases the breaker.
pub struct Admitted<'a> {
    breakers: &'a Breakers,
    service: &'a str,
    recorded: bool,
}

impl Admitted<'_> {
    pub fn record(mut self, succeeded: bool, now_ms: i64) {
        self.recorded = true;
        self.breakers
            .with(self.service, |b| b.record(succeeded, now_ms));
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        if !self.recorded {
            self.breakers.with(self.service, Breaker::release);
        }
    }
}

/// Circuit breakers by service name, kept for as long as the isolate lives (across requests).
#[derive(Default)]
pub struct Breakers(RefCell<HashMap<String, Breaker>>);

impl Breakers {
    /// Lets a call to `service` go out, or says for how long it is refused.
    pub fn admit<'a>(&'a self, service: &'a str, now_ms: i64) -> Result<Admitted<'a>, i64> {
        self.with(service, |b| b.admit(now_ms))?;
        Ok(Admitted {
            breakers: self,
            service,
            recorded: false,
        })
    }

    fn with<T>(&self, service: &str, f: impl FnOnce(&mut Breaker) -> T) -> T {
        f(self.0.borrow_mut().entry(service.to_string()).or_default())
    }

    /// The breaker of `service` as it stands (for tests and logs).
    pub fn state(&self, service: &str) -> breaker::State {
        self.with(service, |b| b.state)
    }
}
