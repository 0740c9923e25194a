//! The byte transport under every provider: one HTTP request out, a status, headers and a
//! body byte stream back. At the edge it is `fetch`; in tests, scripted bytes.

use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;

/// A response body as it arrives; an item error is a network failure described in words (the
/// caller knows which provider it was talking to). Not `Send`: on wasm nothing is.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Vec<u8>, String>>>>;

/// How a transport words "the provider sent nothing for `ms`": the decoder reports it as a
/// retryable [`LlmError::Timeout`](super::LlmError::Timeout), not a network failure.
pub fn idle_timeout(ms: u64) -> String {
    format!("{IDLE_TIMEOUT} {ms} ms")
}

/// The start of every [`idle_timeout`] message.
pub const IDLE_TIMEOUT: &str = "the provider sent nothing for";

#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    pub url: String,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

/// A request to an API a deployment configured (tools: HTTP APIs, MCP servers): any method, and
/// header names that are not known in advance.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiRequest {
    pub method: &'static str,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
}

pub struct HttpResponse {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: ByteStream,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[async_trait(?Send)]
pub trait HttpTransport {
    /// Sends a POST. Errors are network failures only; any HTTP status is a response.
    async fn post(&self, request: HttpRequest) -> Result<HttpResponse, String>;

    /// Sends a GET (`request.body` is ignored). Used for health checks.
    async fn get(&self, request: HttpRequest) -> Result<HttpResponse, String>;

    /// Sends a request to a configured API. Errors are network failures only.
    async fn send(&self, request: ApiRequest) -> Result<HttpResponse, String>;
}

/// Joins a base URL and a path without doubling or dropping the slash.
pub(crate) fn join_url(base: &str, path: &str) -> String {
    format!(
        "{}/{}",
        base.trim_end_matches('/'),
        path.trim_start_matches('/')
    )
}
