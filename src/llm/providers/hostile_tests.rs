//! Providers that misbehave on purpose: nothing they send may abort the Worker or make it hold
//! unbounded memory, and a provider that goes quiet is a retryable timeout.

use std::rc::Rc;

use async_trait::async_trait;

use super::testing::{request, run};
use super::{Anthropic, Ollama, OpenAiChat};
use crate::llm::{
    idle_timeout, ApiRequest, HttpRequest, HttpResponse, HttpTransport, LlmError, LlmEvent,
    ModelRef, Provider, StopReason,
};

fn anthropic(t: Rc<dyn HttpTransport>) -> Box<dyn Provider> {
    Box::new(Anthropic::provider(
        ModelRef::parse("anthropic:claude-sonnet-4-5").unwrap(),
        Some("http://127.0.0.1:1/"),
        Some("sk-test".into()),
        t,
    ))
}

fn openai(t: Rc<dyn HttpTransport>) -> Box<dyn Provider> {
    Box::new(OpenAiChat::provider(
        ModelRef::parse("openai:gpt-4o").unwrap(),
        Some("http://127.0.0.1:1/v1"),
        Some("sk-test".into()),
        t,
    ))
}

fn ollama(t: Rc<dyn HttpTransport>) -> Box<dyn Provider> {
    Box::new(Ollama::provider(
        ModelRef::parse("ollama:llama3").unwrap(),
        Some("http://127.0.0.1:1"),
        t,
    ))
}

fn decode_error(error: Option<LlmError>) -> String {
    match error {
        Some(LlmError::Decode { message, .. }) => message,
        other => panic!("expected a decode error, got {other:?}"),
    }
}

#[test]
fn a_block_index_near_u32_max_is_a_decode_error_not_an_allocation() {
    let body = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":4294967295,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    );
    let (_, c) = run(&anthropic, vec![body.as_bytes().to_vec()]);
    assert!(decode_error(c.error).contains("index 4294967295 is out of range"));
    assert_eq!(c.message.stop_reason, StopReason::Error);
}

#[test]
fn an_unreadable_event_is_a_decode_error_quoting_its_first_200_characters() {
    // Not JSON, and longer than what the error quotes, in characters of two bytes each.
    let event = format!("{{\"type\": {}", "é".repeat(300));
    let quoted: String = event.chars().take(200).collect();
    for (make, provider, body) in [
        (
            &anthropic as &dyn Fn(_) -> _,
            "anthropic",
            format!("event: message_start\ndata: {event}\n\n"),
        ),
        (&openai, "openai", format!("data: {event}\n\n")),
        (&ollama, "ollama", format!("{event}\n")),
    ] {
        let (_, c) = run(make, vec![body.into_bytes()]);
        match c.error {
            Some(LlmError::Decode {
                provider: p,
                message,
            }) => {
                assert_eq!(p, provider);
                assert!(
                    message.starts_with("expected value at line 1 column 10 in "),
                    "{message}"
                );
                assert!(message.ends_with(&format!(" in {quoted}")), "{message}");
            }
            other => panic!("{provider}: expected a decode error, got {other:?}"),
        }
    }
}

#[test]
fn a_line_that_never_ends_is_abandoned_past_4_mib() {
    // 64 KiB pieces of one endless `data:` line, 5 MiB in all.
    let mut chunks = vec![b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"".to_vec()];
    chunks.extend(std::iter::repeat_n(vec![b'a'; 64 << 10], 80));
    let (_, c) = run(&openai, chunks.clone());
    assert!(decode_error(c.error).contains("over 4 MiB"));
    // The same for NDJSON.
    let (_, c) = run(&ollama, chunks);
    assert!(decode_error(c.error).contains("over 4 MiB"));
}

#[test]
fn an_answer_with_endless_tool_calls_is_abandoned() {
    let mut body = String::new();
    for i in 0..1100 {
        body.push_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{i},\"id\":\"c{i}\",\"function\":{{\"name\":\"f\",\"arguments\":\"{{}}\"}}}}]}}}}]}}\n\n"
        ));
    }
    let (events, c) = run(&openai, vec![body.into_bytes()]);
    assert!(decode_error(c.error).contains("over 1,024 content blocks"));
    let started = events
        .iter()
        .filter(|e| matches!(e, LlmEvent::ToolCallStart { .. }))
        .count();
    assert!(started <= 1025, "{started} calls were started");
}

/// Sends some text, then reports the transport's idle timeout, as the edge transport does
/// when the provider goes quiet.
struct Stalls;

#[async_trait(?Send)]
impl HttpTransport for Stalls {
    async fn post(&self, _: HttpRequest) -> Result<HttpResponse, String> {
        let text = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hal\"}}]}\n\n";
        let items = vec![Ok(text.as_bytes().to_vec()), Err(idle_timeout(60_000))];
        Ok(HttpResponse {
            status: 200,
            headers: vec![],
            body: Box::pin(futures::stream::iter(items)),
        })
    }

    async fn get(&self, request: HttpRequest) -> Result<HttpResponse, String> {
        self.post(request).await
    }

    async fn send(&self, _: ApiRequest) -> Result<HttpResponse, String> {
        Err(idle_timeout(60_000))
    }
}

#[test]
fn a_provider_that_goes_quiet_is_a_retryable_timeout() {
    let provider = openai(Rc::new(Stalls));
    let c = futures::executor::block_on(provider.stream(&request(), &mut |_| {}));
    let error = c.error.expect("an error");
    assert!(
        matches!(&error, LlmError::Timeout { message, .. } if message.contains("60000 ms")),
        "{error:?}"
    );
    assert!(error.is_retryable());
    assert_eq!(c.message.text(), "Hal");
}
