//! One of a server's tools as the agent calls it: retried while the server fails, behind the
//! server's circuit breaker, as an HTTP tool is.

use std::rc::Rc;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::client::McpClient;
use crate::agent::remote::{call_service, failure, Attempt, Breakers};
use crate::agent::tools::ServerTool;
use crate::llm::{HttpTransport, Sleeper, ToolDef};

/// One of a server's tools, as the agent calls it.
pub struct McpTool {
    pub definition: ToolDef,
    /// The name the server knows it by.
    pub tool: String,
    pub client: Rc<McpClient>,
    pub transport: Rc<dyn HttpTransport>,
    pub sleeper: Rc<dyn Sleeper>,
    pub breakers: Rc<Breakers>,
    pub now_ms: fn() -> i64,
    /// Whether the turn was cancelled (a failed attempt then is no failure of the server).
    pub cancelled: Rc<dyn Fn() -> bool>,
}

#[async_trait(?Send)]
impl ServerTool for McpTool {
    fn definition(&self) -> &ToolDef {
        &self.definition
    }

    async fn call(&self, arguments: &Map<String, Value>) -> Result<Value, String> {
        let server = &self.client.spec.name;
        let who = format!("the MCP server `{server}`");
        let attempt = || async {
            match self
                .client
                .call_tool(self.transport.as_ref(), &self.tool, arguments)
                .await
            {
                Ok(result) => Attempt::Done(result),
                Err(e) if e.retryable() => Attempt::Failed(e.to_string()),
                Err(e) => Attempt::Done(Err(failure(e.to_string()))),
            }
        };
        call_service(
            server,
            &who,
            &self.breakers,
            self.sleeper.as_ref(),
            self.now_ms,
            self.cancelled.as_ref(),
            attempt,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::agent::remote::mcp::exposed_name;
    use crate::agent::remote::mcp::testing::{client, run, Server};

    #[derive(Default)]
    struct NoWait;

    #[async_trait(?Send)]
    impl Sleeper for NoWait {
        async fn sleep(&self, _: u64) {}
        fn random(&self) -> f64 {
            0.0
        }
    }

    #[test]
    fn a_server_that_is_down_opens_its_circuit() {
        let server = Rc::new(Server::default());
        let tool = McpTool {
            definition: ToolDef {
                name: exposed_name("docs", "search"),
                description: String::new(),
                input_schema: json!({"type": "object"}),
            },
            tool: "search".into(),
            client: Rc::new(client(None)),
            transport: server.clone(),
            sleeper: Rc::new(NoWait),
            breakers: Rc::default(),
            now_ms: || 0,
            cancelled: Rc::new(|| false),
        };
        // Nothing scripted: every request is refused (a network error).
        for _ in 0..3 {
            let e = run(tool.call(&Map::new())).unwrap_err();
            assert!(
                e.contains("could not be reached") && e.contains("after 3 attempts"),
                "{e}"
            );
        }
        let sent = server.seen.borrow().len();
        assert_eq!(sent, 9);
        let e = run(tool.call(&Map::new())).unwrap_err();
        assert!(e.contains("unavailable: the MCP server `docs`"), "{e}");
        assert_eq!(server.seen.borrow().len(), sent);
    }
}
