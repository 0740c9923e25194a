//! One file per wire API, and the registry of providers (`PROVIDERS`). Each HTTP wire API
//! turns an [`LlmRequest`](super::LlmRequest) into one HTTP request and the answer's bytes into
//! [`LlmEvent`](super::LlmEvent)s ([`crate::llm::provider::HttpProvider`] runs them all); Workers
//! AI is reached through the platform's `AI` binding instead.
//!
//! Adding a provider: a file here with its wire types, its `WireApi` impl (request, health
//! check, framing, decoder) and its `INFO` row, that row in `PROVIDERS`, and the golden
//! stream tests beside the others. The factory, the configuration (its key and base URL) and
//! the OpenAPI document's model ids read the registry.

pub mod anthropic;
pub mod gemini;
pub mod ollama;
pub mod openai;
pub mod workers_ai;

#[cfg(test)]
mod answer_tests;
#[cfg(test)]
mod file_tests;
#[cfg(test)]
mod handoff_tests;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
pub(crate) mod testing;

pub use crate::llm::provider::HttpProvider;
pub(crate) use crate::llm::provider::{ProviderInfo, Reach};
pub use anthropic::Anthropic;
pub use gemini::Gemini;
pub use ollama::Ollama;
pub use openai::OpenAiChat;
pub use workers_ai::{AiBinding, WorkersAi};

/// Every provider, in the order error messages and documents name them.
pub(crate) const PROVIDERS: &[ProviderInfo] = &[
    anthropic::INFO,
    openai::INFO,
    gemini::INFO,
    ollama::INFO,
    workers_ai::INFO,
];

/// The provider model ids name `name`.
pub(crate) fn info(name: &str) -> Option<&'static ProviderInfo> {
    PROVIDERS.iter().find(|p| p.name == name)
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use super::testing::ScriptedTransport;
    use super::*;
    use crate::llm::{HttpTransport, LlmError, ModelRef, Provider};

    fn transport(status: u16, body: &str) -> Rc<ScriptedTransport> {
        Rc::new(ScriptedTransport {
            status,
            headers: vec![],
            chunks: vec![body.as_bytes().to_vec()],
            last_request: Default::default(),
        })
    }

    fn providers(t: Rc<dyn HttpTransport>) -> Vec<Box<dyn Provider>> {
        let m = |id| ModelRef::parse(id).unwrap();
        let base = Some("http://127.0.0.1:9");
        vec![
            Box::new(Anthropic::provider(
                m("anthropic:claude-haiku-4-5"),
                base,
                Some("k".into()),
                t.clone(),
            )),
            Box::new(OpenAiChat::provider(
                m("openai:gpt-4o"),
                Some("http://127.0.0.1:9/v1"),
                Some("k".into()),
                t.clone(),
            )),
            Box::new(Gemini::provider(
                m("gemini:gemini-2.5-flash"),
                base,
                Some("k".into()),
                t.clone(),
            )),
            Box::new(Ollama::provider(m("ollama:llama3.2"), base, t)),
        ]
    }

    #[test]
    fn health_checks_ask_each_provider_without_spending_tokens() {
        let want = [
            ("http://127.0.0.1:9/v1/models", Some(("x-api-key", "k"))),
            (
                "http://127.0.0.1:9/v1/models",
                Some(("authorization", "Bearer k")),
            ),
            (
                "http://127.0.0.1:9/v1beta/models/gemini-2.5-flash",
                Some(("x-goog-api-key", "k")),
            ),
            ("http://127.0.0.1:9/api/tags", None),
        ];
        for (i, (url, header)) in want.into_iter().enumerate() {
            let ok = transport(200, "{}");
            let provider = providers(ok.clone()).remove(i);
            assert_eq!(futures::executor::block_on(provider.health_check()), Ok(()));
            let sent = ok.last_request.borrow().clone().unwrap();
            assert_eq!(sent.url, url);
            if let Some((name, value)) = header {
                assert!(
                    sent.headers.contains(&(name, value.to_string())),
                    "{:?}",
                    sent.headers
                );
            }
            let denied = transport(401, r#"{"error": {"message": "invalid key"}}"#);
            let provider = providers(denied).remove(i);
            let error = futures::executor::block_on(provider.health_check()).unwrap_err();
            assert!(
                matches!(&error, LlmError::Auth { status: 401, message, .. } if message == "invalid key"),
                "{error:?}"
            );
        }
    }
}
