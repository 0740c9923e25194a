//! The provider trait; [`HttpProvider`], the one provider of every HTTP wire API, each of which
//! says only what differs (`WireApi`); and the one driver that runs a streamed call: send,
//! check the status, frame the bytes, let the wire's decoder turn frames into events, assemble
//! the message.

use std::rc::Rc;

use async_trait::async_trait;
use futures::StreamExt;

use super::assembler::Assembler;
use super::ndjson::NdjsonDecoder;
use super::sse::SseDecoder;
use super::{
    AssistantMessage, ByteStream, HttpRequest, HttpTransport, LlmError, LlmEvent, LlmRequest,
    ModelRef, StopReason,
};

/// How a streamed call ended. The message is always there: on failure it holds whatever
/// arrived before it, with stop reason [`StopReason::Error`].
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub message: AssistantMessage,
    pub error: Option<LlmError>,
    /// Attempts given up on before `message` (retried, or passed to a fallback) that reported
    /// usage: they were billed all the same, each at its own model's prices. No content.
    pub given_up: Vec<AssistantMessage>,
}

/// One configured model of one provider.
#[async_trait(?Send)]
pub trait Provider {
    fn model(&self) -> &ModelRef;

    /// What the model takes (images, reasoning, tools): the built-in registry's entry, unless
    /// the application knows better (a deployment's own `MODELS` entry).
    fn capabilities(&self) -> super::capabilities::Capabilities {
        super::models::lookup(self.model()).capabilities
    }

    /// Streams one answer, calling `on_event` for each event as it arrives.
    async fn stream(
        &self,
        request: &LlmRequest<'_>,
        on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
    ) -> Completion;

    /// One whole answer. Streaming underneath: the providers' non-streaming modes carry the
    /// same content, and one code path per provider is less to get wrong.
    async fn complete(&self, request: &LlmRequest<'_>) -> Completion {
        self.stream(request, &mut |_| {}).await
    }

    /// Whether the provider answers and accepts our credentials, without spending tokens.
    async fn health_check(&self) -> Result<(), LlmError>;
}

/// Where and as whom an HTTP provider is called.
pub struct Endpoint {
    pub model: ModelRef,
    pub base_url: String,
    pub api_key: Option<String>,
    pub transport: Rc<dyn HttpTransport>,
}

/// What one HTTP wire API does its own way: how a call and a health check are asked, how the
/// answer's bytes are framed, and the decoder that reads them (and names the tool calls a
/// provider sends without an id, from [`LlmRequest::call_ids`]). [`HttpProvider`] does the rest,
/// once for all of them.
pub(crate) trait WireApi {
    /// The base URL when the deployment sets none.
    fn default_base_url(&self) -> &'static str;
    /// The HTTP request of one streamed call.
    fn http_request(
        &self,
        endpoint: &Endpoint,
        request: &LlmRequest<'_>,
    ) -> Result<HttpRequest, LlmError>;
    /// A GET that answers 2xx when the provider is reachable and takes the key, spending no
    /// tokens.
    fn health_request(&self, endpoint: &Endpoint) -> HttpRequest;
    fn framing(&self) -> Framing;
    /// A fresh decoder for one call's answer.
    fn decoder(&self, request: &LlmRequest<'_>) -> Box<dyn Decode>;
}

/// One provider: the name model ids give it, and the settings it is configured by.
pub(crate) struct ProviderInfo {
    /// The part of a model id before the first `:`.
    pub name: &'static str,
    /// The variable holding its API key, if it takes one.
    pub key_var: Option<&'static str>,
    /// The variable holding its base URL (another server of the same API), if it has one.
    pub base_url_var: Option<&'static str>,
    pub reach: Reach,
}

/// How a provider is reached.
pub(crate) enum Reach {
    /// Over HTTP, by this wire API.
    Http(&'static dyn WireApi),
    /// Through the platform's `AI` binding (Workers AI).
    Binding,
}

/// A model served over HTTP by one of the wire APIs (`llm::providers`).
pub struct HttpProvider {
    endpoint: Endpoint,
    wire: &'static dyn WireApi,
}

impl HttpProvider {
    pub(crate) fn new(
        wire: &'static dyn WireApi,
        model: ModelRef,
        base_url: Option<&str>,
        api_key: Option<String>,
        transport: Rc<dyn HttpTransport>,
    ) -> Self {
        let base_url = base_url.unwrap_or(wire.default_base_url()).to_string();
        Self {
            endpoint: Endpoint {
                model,
                base_url,
                api_key,
                transport,
            },
            wire,
        }
    }

    /// The HTTP request of one streamed call.
    pub fn http_request(&self, request: &LlmRequest<'_>) -> Result<HttpRequest, LlmError> {
        // Every wire API's: a typed answer's tool must be one the call offers.
        request.check_answer()?;
        self.wire.http_request(&self.endpoint, request)
    }

    /// The health check's request.
    pub fn health_request(&self) -> HttpRequest {
        self.wire.health_request(&self.endpoint)
    }
}

#[async_trait(?Send)]
impl Provider for HttpProvider {
    fn model(&self) -> &ModelRef {
        &self.endpoint.model
    }

    async fn health_check(&self) -> Result<(), LlmError> {
        let request = self.health_request();
        let provider = self.endpoint.model.provider.as_str();
        check_health(self.endpoint.transport.as_ref(), request, provider).await
    }

    async fn stream(
        &self,
        request: &LlmRequest<'_>,
        on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
    ) -> Completion {
        let mut decoder = self.wire.decoder(request);
        stream_response(
            self.endpoint.transport.as_ref(),
            self.http_request(request),
            &self.endpoint.model,
            self.wire.framing(),
            decoder.as_mut(),
            on_event,
        )
        .await
    }
}

/// What a decoder says after a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    More,
    /// The provider marked the answer complete.
    Done,
}

/// How a provider's response body is cut into frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// Server-Sent Events: `frame(event, data)` per event.
    Sse,
    /// One JSON object per line: `frame("", line)` per line.
    Ndjson,
}

/// A provider's wire decoder: one call per frame.
pub(crate) trait Decode {
    fn frame(
        &mut self,
        event: &str,
        data: &str,
        message: &mut Assembler,
        out: &mut Vec<LlmEvent>,
    ) -> Result<Flow, LlmError>;

    /// The body ended without the provider's end marker. Some servers finish with a stop reason
    /// but never send the marker; they answer [`Flow::Done`] here.
    fn at_eof(&self) -> Flow {
        Flow::More
    }
}

/// Either framer, behind one push/finish interface.
enum Framer {
    Sse(SseDecoder),
    Ndjson(NdjsonDecoder),
}

impl Framer {
    /// Bytes held for the frame or line still arriving.
    fn buffered(&self) -> usize {
        match self {
            Framer::Sse(d) => d.buffered(),
            Framer::Ndjson(d) => d.buffered(),
        }
    }

    fn push(
        &mut self,
        bytes: &[u8],
        on_frame: &mut dyn FnMut(&str, &str) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        match self {
            Framer::Sse(d) => d.push(bytes, on_frame),
            Framer::Ndjson(d) => d.push(bytes, &mut |line| on_frame("", line)),
        }
    }

    fn finish(
        &mut self,
        on_frame: &mut dyn FnMut(&str, &str) -> Result<(), LlmError>,
    ) -> Result<(), LlmError> {
        match self {
            Framer::Sse(d) => d.finish(on_frame),
            Framer::Ndjson(d) => d.finish(&mut |line| on_frame("", line)),
        }
    }
}

/// Runs one streamed call through `transport`; `request` is the provider's encoded request, or
/// why it could not be encoded.
pub(crate) async fn stream_response(
    transport: &dyn HttpTransport,
    request: Result<HttpRequest, LlmError>,
    model: &ModelRef,
    framing: Framing,
    // `dyn`: one copy of the streaming code for every provider, not one each.
    decoder: &mut dyn Decode,
    on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
) -> Completion {
    let provider = model.provider.as_str();
    let request = match request {
        Ok(request) => request,
        Err(error) => return failed(model, error),
    };
    match transport.post(request).await {
        Err(e) => failed(model, transport_error(provider, e)),
        Ok(response) if !(200..300).contains(&response.status) => {
            failed(model, http_error(provider, response).await)
        }
        Ok(response) => decode_body(response.body, model, framing, decoder, on_event).await,
    }
}

/// Largest SSE frame or NDJSON line held while it arrives.
pub(crate) const MAX_FRAME_BYTES: usize = 4 << 20;
/// Most content blocks (text, thinking, tool calls) one answer may have.
pub(crate) const MAX_CONTENT_BLOCKS: usize = 1024;

/// One event (an SSE frame's data or an NDJSON line) read into a decoder's wire type. What
/// cannot be read is a [`LlmError::Decode`] quoting the event's first 200 characters.
pub(crate) fn read_event<'a, T: super::json::FromJson<'a>>(
    provider: &str,
    data: &'a str,
) -> Result<T, LlmError> {
    super::json::from_str(data).map_err(|e| unreadable_event(provider, &e, data))
}

fn unreadable_event(provider: &str, error: &serde_json::Error, data: &str) -> LlmError {
    let start = match data.char_indices().nth(200) {
        Some((i, _)) => &data[..i],
        None => data,
    };
    LlmError::Decode {
        provider: provider.to_string(),
        message: format!("{error} in {start}"),
    }
}

fn decode_limit(provider: &str, what: &str) -> LlmError {
    LlmError::Decode {
        provider: provider.to_string(),
        message: format!("{what}; the stream was abandoned"),
    }
}

/// A transport failure: a stall past the idle timeout is a (retryable) timeout, anything else
/// a network failure.
fn transport_error(provider: &str, message: String) -> LlmError {
    let provider = provider.to_string();
    if message.starts_with(super::IDLE_TIMEOUT) {
        LlmError::Timeout { provider, message }
    } else {
        LlmError::Network { provider, message }
    }
}

/// Decodes a streamed answer body, wherever it came from (HTTP, or a platform binding).
pub(crate) async fn decode_body(
    mut body: ByteStream,
    model: &ModelRef,
    framing: Framing,
    decoder: &mut dyn Decode,
    on_event: &mut dyn for<'e> FnMut(&'e LlmEvent),
) -> Completion {
    let provider = model.provider.as_str();
    let mut message = Assembler::default();
    let mut out = Vec::new();
    let mut framer = match framing {
        Framing::Sse => Framer::Sse(SseDecoder::new()),
        Framing::Ndjson => Framer::Ndjson(NdjsonDecoder::default()),
    };
    let mut flow = Flow::More;
    let mut error = None;
    while flow == Flow::More && error.is_none() {
        let mut on_frame = |event: &str, data: &str| {
            if flow == Flow::Done {
                return Ok(()); // trailing frames after the end (e.g. `[DONE]`)
            }
            flow = decoder.frame(event, data, &mut message, &mut out)?;
            // A bound on what a provider can make us hold: the answer's blocks.
            if message.blocks() > MAX_CONTENT_BLOCKS {
                return Err(decode_limit(
                    provider,
                    "the answer has over 1,024 content blocks",
                ));
            }
            Ok(())
        };
        let result = match body.next().await {
            Some(Ok(bytes)) => framer.push(&bytes, &mut on_frame).and_then(|()| {
                // And on the frame still arriving.
                if framer.buffered() > MAX_FRAME_BYTES {
                    Err(decode_limit(provider, "one frame is over 4 MiB"))
                } else {
                    Ok(())
                }
            }),
            Some(Err(e)) => Err(transport_error(provider, e)),
            None => framer.finish(&mut on_frame).and_then(|()| {
                if flow == Flow::More {
                    flow = decoder.at_eof();
                }
                match flow {
                    Flow::Done => Ok(()),
                    Flow::More => Err(LlmError::Truncated {
                        provider: provider.to_string(),
                    }),
                }
            }),
        };
        error = result.err();
        for event in out.drain(..) {
            on_event(&event);
        }
    }
    message.end_all(&mut out);
    for event in out.drain(..) {
        on_event(&event);
    }
    let fallback = if message.has_tool_calls() {
        StopReason::ToolUse
    } else {
        StopReason::EndTurn
    };
    let mut message = message.into_message(provider, &model.model, fallback);
    if error.is_some() {
        message.stop_reason = StopReason::Error;
    }
    Completion {
        message,
        error,
        given_up: Vec::new(),
    }
}

/// Turns a non-2xx answer into an error carrying the provider's own message and its wait hint.
async fn http_error(provider: &str, mut response: super::HttpResponse) -> LlmError {
    let retry_after_ms = super::error::retry_after_ms(|name| response.header(name));
    let mut body = Vec::new();
    // An error body is small; cap it so a misbehaving server cannot make us buffer forever.
    while let Some(Ok(chunk)) = response.body.next().await {
        body.extend_from_slice(&chunk);
        if body.len() > 16 * 1024 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&body);
    LlmError::from_http(
        provider,
        response.status,
        error_message(&text),
        retry_after_ms,
    )
}

/// The human part of a provider error body: `{"error": {"message": ...}}` (Anthropic, OpenAI,
/// Gemini), `{"error": "..."}` (Ollama, llama.cpp), else the raw text.
pub(crate) fn error_message(body: &str) -> String {
    struct Body {
        error: serde_json::Value,
    }

    crate::json_struct!(Body {
        "error" => error,
    });
    if let Ok(Body { error }) = crate::llm::json::from_str::<Body>(body) {
        if let Some(m) = error.get("message").and_then(|m| m.as_str()) {
            return m.to_string();
        }
        if let Some(m) = error.as_str() {
            return m.to_string();
        }
    }
    let trimmed = body.trim();
    if trimmed.is_empty() {
        "(empty body)".to_string()
    } else {
        trimmed.chars().take(500).collect()
    }
}

/// A health check: a GET that must answer 2xx; anything else is the provider's error.
pub(crate) async fn check_health(
    transport: &dyn HttpTransport,
    request: HttpRequest,
    provider: &str,
) -> Result<(), LlmError> {
    match transport.get(request).await {
        Err(message) => Err(LlmError::Network {
            provider: provider.to_string(),
            message,
        }),
        Ok(response) if (200..300).contains(&response.status) => Ok(()),
        Ok(response) => Err(http_error(provider, response).await),
    }
}

/// A call that failed before any request went out.
pub(crate) fn failed(model: &ModelRef, error: LlmError) -> Completion {
    Completion {
        message: AssistantMessage {
            content: Vec::new(),
            stop_reason: StopReason::Error,
            model: model.model.clone(),
            provider: model.provider.clone(),
            usage: Default::default(),
            output: None,
        },
        error: Some(error),
        given_up: Vec::new(),
    }
}
