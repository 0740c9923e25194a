//! CORS for browser clients: `CORS_ORIGINS` lists the origins allowed to call (comma-separated,
//! or `*`). Preflight requests are answered here, before authentication (browsers send them
//! without credentials). Pure logic, tested natively.

use crate::edge::config::access::CorsOrigins;

impl CorsOrigins {
    /// The `Access-Control-Allow-Origin` value for a request from `origin`, if it is allowed.
    fn allow(&self, origin: &str) -> Option<String> {
        match self {
            CorsOrigins::None => None,
            CorsOrigins::Any => Some("*".to_string()),
            CorsOrigins::List(list) => list.iter().any(|o| o == origin).then(|| origin.to_string()),
        }
    }

    /// Whether a page from `origin` may call.
    pub fn admits(&self, origin: &str) -> bool {
        self.allow(origin).is_some()
    }

    /// Headers for an ordinary response to a request from `origin`.
    pub fn response_headers(&self, origin: Option<&str>) -> Vec<(&'static str, String)> {
        let Some(allowed) = origin.and_then(|o| self.allow(o)) else {
            return vec![];
        };
        vec![
            ("access-control-allow-origin", allowed),
            ("vary", "Origin".to_string()),
            // Lets a browser client see which stream protocol it is reading, and an MCP client
            // in a page where to get a token after a 401.
            (
                "access-control-expose-headers",
                "x-vercel-ai-ui-message-stream, www-authenticate".to_string(),
            ),
        ]
    }

    /// Headers for a preflight (`OPTIONS`) from `origin`; empty when it is not allowed.
    pub fn preflight_headers(&self, origin: Option<&str>) -> Vec<(&'static str, String)> {
        let Some(allowed) = origin.and_then(|o| self.allow(o)) else {
            return vec![];
        };
        vec![
            ("access-control-allow-origin", allowed),
            ("vary", "Origin".to_string()),
            (
                "access-control-allow-methods",
                "GET, POST, PUT, DELETE, OPTIONS".to_string(),
            ),
            (
                "access-control-allow-headers",
                // `idempotency-key`: a browser on another origin may make a send repeatable;
                // `mcp-protocol-version`: an MCP client's every request after `initialize`.
                // `traceparent`, `tracestate`: a page's trace continued by the turn it starts.
                "authorization, content-type, idempotency-key, mcp-protocol-version, traceparent, tracestate"
                    .to_string(),
            ),
            ("access-control-max-age", "86400".to_string()),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_origins_are_echoed_and_others_get_nothing() {
        let cors = CorsOrigins::parse("https://app.example.com, http://localhost:5173/");
        let h = cors.response_headers(Some("http://localhost:5173"));
        assert_eq!(
            h[0],
            (
                "access-control-allow-origin",
                "http://localhost:5173".to_string()
            )
        );
        assert!(cors
            .response_headers(Some("https://evil.example"))
            .is_empty());
        assert!(cors.response_headers(None).is_empty());
        assert!(cors
            .preflight_headers(Some("https://evil.example"))
            .is_empty());
        assert!(cors
            .preflight_headers(Some("https://app.example.com"))
            .iter()
            .any(|(k, v)| *k == "access-control-allow-headers"
                && v.contains("authorization")
                && v.contains("idempotency-key")));
    }

    #[test]
    fn star_allows_any_and_unset_allows_none() {
        assert_eq!(
            CorsOrigins::parse("*").response_headers(Some("https://x.y"))[0].1,
            "*"
        );
        assert_eq!(CorsOrigins::parse(" "), CorsOrigins::None);
        assert!(CorsOrigins::default()
            .response_headers(Some("https://x.y"))
            .is_empty());
    }
}
