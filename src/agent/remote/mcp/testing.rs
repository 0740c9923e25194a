//! Test support for the MCP client: a server playing recorded answers, and a client of it.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};

use async_trait::async_trait;
use serde_json::{json, Value};

use super::{McpClient, McpServerSpec};
use crate::llm::{ApiRequest, HttpRequest, HttpResponse, HttpTransport};

/// A recorded answer: status, content type, session id, body.
type Recorded = (u16, &'static str, Option<&'static str>, String);

/// A server playing recorded answers.
#[derive(Default)]
pub(super) struct Server {
    answers: RefCell<VecDeque<Recorded>>,
    pub(super) seen: RefCell<Vec<ApiRequest>>,
}

impl Server {
    pub(super) fn answer(
        &self,
        status: u16,
        kind: &'static str,
        session: Option<&'static str>,
        body: &str,
    ) {
        self.answers
            .borrow_mut()
            .push_back((status, kind, session, body.to_string()));
    }
    /// A JSON answer to whatever request comes next.
    pub(super) fn json(&self, result: Value) {
        let body = json!({"jsonrpc": "2.0", "id": "ID", "result": result}).to_string();
        self.answer(200, "application/json", None, &body.replace("\"ID\"", "ID"));
    }
    pub(super) fn handshake(&self, session: &'static str) {
        self.answer(
            200,
            "application/json",
            Some(session),
            r#"{"jsonrpc":"2.0","id":ID,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"t","version":"1"}}}"#,
        );
        self.answer(202, "", None, "");
    }
    pub(super) fn header(&self, i: usize, name: &str) -> Option<String> {
        self.seen.borrow()[i]
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
    pub(super) fn body(&self, i: usize) -> Value {
        crate::llm::json::from_str(self.seen.borrow()[i].body.as_deref().unwrap()).unwrap()
    }
}

#[async_trait(?Send)]
impl HttpTransport for Server {
    async fn post(&self, _: HttpRequest) -> Result<HttpResponse, String> {
        unreachable!()
    }
    async fn get(&self, _: HttpRequest) -> Result<HttpResponse, String> {
        unreachable!()
    }
    async fn send(&self, request: ApiRequest) -> Result<HttpResponse, String> {
        let id = crate::llm::json::from_str::<Value>(request.body.as_deref().unwrap_or("{}"))
            .ok()
            .and_then(|m| m.get("id").cloned())
            .map(|id| id.to_string())
            .unwrap_or_default();
        self.seen.borrow_mut().push(request);
        let (status, kind, session, body) = self
            .answers
            .borrow_mut()
            .pop_front()
            .ok_or("connection refused")?;
        // Recorded bodies name the request id as ID; answers arrive in awkward pieces.
        let body = body.replace("ID", &id).into_bytes();
        let pieces: Vec<Result<Vec<u8>, String>> = body.chunks(7).map(|c| Ok(c.to_vec())).collect();
        let mut headers = vec![("content-type".to_string(), kind.to_string())];
        if let Some(s) = session {
            headers.push(("mcp-session-id".into(), s.into()));
        }
        Ok(HttpResponse {
            status,
            headers,
            body: Box::pin(futures::stream::iter(pieces)),
        })
    }
}

/// A client of the server `docs`, offering only `tools` of its tools when given.
pub(super) fn client(tools: Option<Vec<&str>>) -> McpClient {
    let spec = McpServerSpec {
        name: "docs".into(),
        url: "http://127.0.0.1:9/mcp".into(),
        headers: BTreeMap::from([("Authorization".into(), "secret:DOCS_TOKEN".into())]),
        tools: tools.map(|t| t.into_iter().map(String::from).collect()),
        approval: vec![],
        toolset: None,
        max_bytes: None,
    };
    McpClient::new(spec, &|_| Some("Bearer t0k".into()), true).unwrap()
}

pub(super) fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    futures::executor::block_on(f)
}
