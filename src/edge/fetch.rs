//! `HttpTransport` over the Workers `fetch`: how Layer 1 reaches providers at the edge.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use worker::wasm_bindgen::JsValue;
use worker::{AbortSignal, Delay, Fetch, Headers, Method, Request, RequestInit};

use crate::llm::{idle_timeout, ApiRequest, ByteStream, HttpRequest, HttpResponse, HttpTransport};

/// Sends with the turn's abort signal, so cancelling a turn stops its provider call at once.
#[derive(Default)]
pub struct FetchTransport {
    pub signal: Option<AbortSignal>,
    /// A provider that sends nothing (no headers, no body bytes) for this long has stalled
    /// (`PROVIDER_IDLE_TIMEOUT_MS`): its call fails as a retryable timeout.
    pub idle_timeout_ms: Option<u64>,
}

#[async_trait(?Send)]
impl HttpTransport for FetchTransport {
    async fn post(&self, request: HttpRequest) -> Result<HttpResponse, String> {
        let sent = send(Method::Post, request, self.signal.as_ref());
        self.watched(sent).await
    }

    async fn get(&self, request: HttpRequest) -> Result<HttpResponse, String> {
        let sent = send(Method::Get, request, self.signal.as_ref());
        self.watched(sent).await
    }

    async fn send(&self, request: ApiRequest) -> Result<HttpResponse, String> {
        let method = match request.method {
            "GET" => Method::Get,
            "POST" => Method::Post,
            "PUT" => Method::Put,
            "PATCH" => Method::Patch,
            "DELETE" => Method::Delete,
            other => return Err(format!("unsupported method {other}")),
        };
        let headers = Headers::new();
        for (name, value) in &request.headers {
            // The value may hold a secret: name the header only.
            headers
                .set(name, value)
                .map_err(|_| format!("header `{name}` is not valid"))?;
        }
        let mut init = RequestInit::new();
        init.with_method(method)
            .with_headers(headers)
            .with_body(request.body.as_deref().map(JsValue::from_str));
        respond(&request.url, &init, self.signal.as_ref()).await
    }
}

impl FetchTransport {
    /// The response, failed when its headers or any gap between body chunks take longer than
    /// the idle timeout.
    async fn watched(
        &self,
        sent: impl Future<Output = Result<HttpResponse, String>>,
    ) -> Result<HttpResponse, String> {
        let Some(idle_ms) = self.idle_timeout_ms else {
            return sent.await;
        };
        let timer = Delay::from(Duration::from_millis(idle_ms));
        let mut response = match futures::future::select(Box::pin(sent), timer).await {
            futures::future::Either::Left((response, _)) => response?,
            futures::future::Either::Right(_) => return Err(idle_timeout(idle_ms)),
        };
        response.body = Box::pin(IdleWatch {
            body: response.body,
            idle_ms,
            timer: Box::pin(Delay::from(Duration::from_millis(idle_ms))),
            last_bytes_at: now(),
            done: false,
        });
        Ok(response)
    }
}

/// A body that ends with an idle-timeout error when no bytes come for `idle_ms`. One timer
/// per idle period, not one per chunk: a chunk only notes the time, and a timer that fires
/// early is set again for what remains.
struct IdleWatch {
    body: ByteStream,
    idle_ms: u64,
    timer: Pin<Box<Delay>>,
    last_bytes_at: f64,
    done: bool,
}

impl Stream for IdleWatch {
    type Item = Result<Vec<u8>, String>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Poll::Ready(item) = self.body.poll_next_unpin(cx) {
            self.last_bytes_at = now();
            return Poll::Ready(item);
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            let quiet = (now() - self.last_bytes_at).max(0.0) as u64;
            if quiet >= self.idle_ms {
                self.done = true;
                return Poll::Ready(Some(Err(idle_timeout(self.idle_ms))));
            }
            let rest = self.idle_ms - quiet;
            self.timer = Box::pin(Delay::from(Duration::from_millis(rest)));
        }
        Poll::Pending
    }
}

fn now() -> f64 {
    worker::js_sys::Date::now()
}

async fn send(
    method: Method,
    request: HttpRequest,
    signal: Option<&AbortSignal>,
) -> Result<HttpResponse, String> {
    let headers = Headers::new();
    for (name, value) in &request.headers {
        headers.set(name, value).map_err(|e| e.to_string())?;
    }
    let mut init = RequestInit::new();
    let body = (method == Method::Post).then(|| JsValue::from_str(&request.body));
    init.with_method(method)
        .with_headers(headers)
        .with_body(body);
    respond(&request.url, &init, signal).await
}

async fn respond(
    url: &str,
    init: &RequestInit,
    signal: Option<&AbortSignal>,
) -> Result<HttpResponse, String> {
    let outgoing = Request::new_with_init(url, init).map_err(|e| e.to_string())?;
    let fetch = Fetch::Request(outgoing);
    let sent = match signal {
        Some(signal) => fetch.send_with_signal(signal).await,
        None => fetch.send().await,
    };
    // Not the URL: this text can reach a user (a tool's error result), and a deployment's URLs
    // are its configuration.
    let mut response = sent.map_err(|e| e.to_string())?;
    let status = response.status_code();
    let headers = response.headers().entries().collect();
    let body = response.stream().map_err(|e| e.to_string())?;
    Ok(HttpResponse {
        status,
        headers,
        body: Box::pin(body.map(|chunk| chunk.map_err(|e| e.to_string()))),
    })
}
