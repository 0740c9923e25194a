//! Test support for provider decoders: fixtures, a scripted transport, and byte-split runs.

use std::cell::RefCell;
use std::rc::Rc;

use async_trait::async_trait;

use crate::llm::ApiRequest;
use crate::llm::{
    Completion, HttpRequest, HttpResponse, HttpTransport, LlmEvent, LlmRequest, Provider,
};

/// Reads `tests/fixtures/<path>`; `.chunks.txt` files are re-framed as SSE.
pub fn fixture(path: &str) -> Vec<u8> {
    let full = format!("{}/tests/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    if !path.ends_with(".chunks.txt") {
        return bytes;
    }
    let text = String::from_utf8(bytes).unwrap();
    let anthropic = path.starts_with("anthropic/");
    // Gemini sends no end marker; the others' chunk files leave out `[DONE]`.
    let done_marker = path.starts_with("openai-chat/");
    let mut out = String::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if anthropic {
            let v: serde_json::Value = crate::llm::json::from_str(line).unwrap();
            out.push_str(&format!("event: {}\n", v["type"].as_str().unwrap()));
        }
        out.push_str(&format!("data: {line}\n\n"));
    }
    if done_marker {
        out.push_str("data: [DONE]\n\n");
    }
    out.into_bytes()
}

/// Answers every request with `status` and `chunks`, remembering the last request.
pub struct ScriptedTransport {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub chunks: Vec<Vec<u8>>,
    pub last_request: RefCell<Option<HttpRequest>>,
}

impl ScriptedTransport {
    pub fn new(chunks: Vec<Vec<u8>>) -> Rc<Self> {
        Rc::new(Self {
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
            chunks,
            last_request: RefCell::new(None),
        })
    }
}

#[async_trait(?Send)]
impl HttpTransport for ScriptedTransport {
    async fn post(&self, request: HttpRequest) -> Result<HttpResponse, String> {
        *self.last_request.borrow_mut() = Some(request);
        let items: Vec<Result<Vec<u8>, String>> = self.chunks.iter().cloned().map(Ok).collect();
        Ok(HttpResponse {
            status: self.status,
            headers: self.headers.clone(),
            body: Box::pin(futures::stream::iter(items)),
        })
    }

    async fn get(&self, request: HttpRequest) -> Result<HttpResponse, String> {
        self.post(request).await
    }

    async fn send(&self, request: ApiRequest) -> Result<HttpResponse, String> {
        self.post(HttpRequest {
            url: request.url,
            headers: vec![],
            body: request.body.unwrap_or_default(),
        })
        .await
    }
}

pub fn request() -> LlmRequest<'static> {
    LlmRequest {
        system: None,
        messages: &[],
        tools: &[],
        max_tokens: 1024,
        temperature: None,
        call_ids: "call_0_",
        billing: None,
        answer: None,
    }
}

/// Runs `make(transport)` over `chunks`, collecting events and the completion.
pub fn run(
    make: &dyn Fn(Rc<dyn HttpTransport>) -> Box<dyn Provider>,
    chunks: Vec<Vec<u8>>,
) -> (Vec<LlmEvent>, Completion) {
    let provider = make(ScriptedTransport::new(chunks));
    let mut events = Vec::new();
    let completion = futures::executor::block_on(
        provider.stream(&request(), &mut |e: &LlmEvent| events.push(e.clone())),
    );
    (events, completion)
}

/// Events collapsed so that re-chunking cannot change them: consecutive deltas of one block
/// are merged (a provider may legitimately emit one delta per network chunk).
/// The answer's ids the events told (`LlmEvent::ResponseId`), in order.
pub fn response_ids(events: &[LlmEvent]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ResponseId(id) => Some(id.as_str()),
            _ => None,
        })
        .collect()
}

pub fn merged(events: &[LlmEvent]) -> Vec<LlmEvent> {
    let mut out: Vec<LlmEvent> = Vec::new();
    for e in events {
        match (out.last_mut(), e) {
            (
                Some(LlmEvent::TextDelta { index: a, delta: d }),
                LlmEvent::TextDelta { index: b, delta },
            )
            | (
                Some(LlmEvent::ThinkingDelta { index: a, delta: d }),
                LlmEvent::ThinkingDelta { index: b, delta },
            )
            | (
                Some(LlmEvent::ToolCallDelta { index: a, delta: d }),
                LlmEvent::ToolCallDelta { index: b, delta },
            ) if a == b => d.push_str(delta),
            _ => out.push(e.clone()),
        }
    }
    out
}

/// Runs the whole body in one chunk, then split in two at every byte boundary, and checks each
/// split gives exactly the events and completion of the whole. Returns the whole-body result.
pub fn run_at_every_split(
    make: &dyn Fn(Rc<dyn HttpTransport>) -> Box<dyn Provider>,
    body: &[u8],
) -> (Vec<LlmEvent>, Completion) {
    let (events, completion) = run(make, vec![body.to_vec()]);
    for i in 1..body.len() {
        let (e, c) = run(make, vec![body[..i].to_vec(), body[i..].to_vec()]);
        assert_eq!(
            merged(&e),
            merged(&events),
            "events differ when split at byte {i}"
        );
        assert_eq!(c, completion, "completion differs when split at byte {i}");
    }
    // And one byte per chunk: every boundary at once.
    let (e, c) = run(make, body.iter().map(|b| vec![*b]).collect());
    assert_eq!(
        merged(&e),
        merged(&events),
        "events differ with one byte per chunk"
    );
    assert_eq!(c, completion, "completion differs with one byte per chunk");
    (events, completion)
}
