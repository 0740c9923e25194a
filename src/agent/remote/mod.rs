//! Tools a deployment plugs in without code: declarative HTTP tools (`HTTP_TOOLS`) and the tools
//! of MCP servers (`MCP_SERVERS`). What they share: the statuses their results carry (seed 003), which hosts
//! they may call, retries inside the tool timeout, and a circuit breaker per service.

pub mod breaker;
pub mod http;
pub mod mcp;
pub mod template;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::IpAddr;

use serde_json::{json, Value};

use crate::llm::Sleeper;

pub use breaker::Breaker;
pub use http::{parse_http_tools, HttpTool, HttpToolSpec};
pub use mcp::{exposed_name, parse_mcp_servers, McpClient, McpServerSpec, McpTool};

/// Calls made to a service that fails with a 5xx, a 429 or a network error, the first included.
pub const ATTEMPTS: u32 = 3;
/// The first wait between attempts; it doubles (with jitter).
pub const BACKOFF_MS: u64 = 250;

/// A successful result: `{"status": "ok" | "no_result" | "degraded", ...}` (seed 003's rule:
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

/// A failed call as the error text the model reads: `{"status": "error", "message": ...}`.
pub fn failure(message: impl Into<String>) -> String {
    json!({"status": "error", "message": message.into()}).to_string()
}

/// The host of an `http(s)://` URL, without port or brackets, lower-cased.
pub fn host_of(url: &str) -> Option<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next()?
    } else {
        authority.split(':').next()?
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// Loopback, private, link-local and unspecified addresses, and `localhost`: what a tool may
/// not call unless the operator allows it (`ALLOW_PRIVATE_TOOL_HOSTS`). Names are not resolved
/// (the runtime has no DNS API), so only literal addresses and `localhost` are recognised.
pub fn is_private_host(host: &str) -> bool {
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V4(ip)) => {
            let [a, b, ..] = ip.octets();
            ip.is_loopback()
                || ip.is_private()
                || ip.is_link_local()
                || ip.is_unspecified()
                || ip.is_broadcast()
                || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        }
        Ok(IpAddr::V6(ip)) => {
            let first = ip.segments()[0];
            ip.is_loopback()
                || ip.is_unspecified()
                || (first & 0xfe00) == 0xfc00 // unique local
                || (first & 0xffc0) == 0xfe80 // link-local
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| is_private_host(&v4.to_string()))
        }
        Err(_) => false,
    }
}

/// Checks a URL a tool is about to call: `http(s)`, and a public host unless `allow_private`.
pub fn check_url(url: &str, allow_private: bool) -> Result<(), String> {
    let host = host_of(url).ok_or_else(|| format!("`{url}` is not an http(s) URL"))?;
    if !allow_private && is_private_host(&host) {
        return Err(format!(
            "`{host}` is a private address; tools may call it only with ALLOW_PRIVATE_TOOL_HOSTS=true"
        ));
    }
    Ok(())
}

/// A declared `name`: 1 to `max` letters, digits, `_` or `-` (what tool names may hold).
pub fn check_name(name: &str, max: usize) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= max
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if valid {
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
/// it fails; `who` names it in the "unavailable" answer of an open circuit.
pub async fn call_service<F, Fut>(
    service: &str,
    who: &str,
    breakers: &Breakers,
    sleeper: &dyn Sleeper,
    now_ms: fn() -> i64,
    attempt: F,
) -> Result<Value, String>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Attempt>,
{
    if let Err(wait_ms) = breakers.admit(service, now_ms()) {
        return Err(failure(format!(
            "unavailable: {who} failed repeatedly and is not called for another {} s",
            (wait_ms + 999) / 1000
        )));
    }
    let mut last = String::new();
    for n in 0..ATTEMPTS {
        if n > 0 {
            let base = BACKOFF_MS << (n - 1);
            let jitter = (sleeper.random() * base as f64 / 2.0) as u64;
            sleeper.sleep(base + jitter).await;
        }
        match attempt().await {
            Attempt::Done(result) => {
                breakers.record(service, true, now_ms());
                return result;
            }
            Attempt::Failed(what) => last = what,
        }
    }
    breakers.record(service, false, now_ms());
    Err(failure(format!("{last} (after {ATTEMPTS} attempts)")))
}

/// Circuit breakers by service name, kept for as long as the isolate lives (across requests).
#[derive(Default)]
pub struct Breakers(RefCell<HashMap<String, Breaker>>);

impl Breakers {
    pub fn admit(&self, service: &str, now_ms: i64) -> Result<(), i64> {
        self.0
            .borrow_mut()
            .entry(service.to_string())
            .or_default()
            .admit(now_ms)
    }

    pub fn record(&self, service: &str, succeeded: bool, now_ms: i64) {
        self.0
            .borrow_mut()
            .entry(service.to_string())
            .or_default()
            .record(succeeded, now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_private_addresses() {
        assert_eq!(
            host_of("https://api.example.com/v1?q=1").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(
            host_of("http://user:pw@10.0.0.1:8080/x").as_deref(),
            Some("10.0.0.1")
        );
        assert_eq!(host_of("http://[::1]:9/").as_deref(), Some("::1"));
        assert_eq!(host_of("ftp://example.com"), None);
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "localhost",
            "db.localhost",
        ] {
            assert!(is_private_host(private), "{private}");
        }
        for public in [
            "8.8.8.8",
            "api.example.com",
            "2606:4700::1111",
            "172.32.0.1",
        ] {
            assert!(!is_private_host(public), "{public}");
        }
        assert!(check_url("http://127.0.0.1:9/x", false)
            .unwrap_err()
            .contains("ALLOW_PRIVATE_TOOL_HOSTS"));
        assert!(check_url("http://127.0.0.1:9/x", true).is_ok());
    }
}
