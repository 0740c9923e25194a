//! `HttpTransport` over the Workers `fetch`: how Layer 1 reaches providers at the edge.

use async_trait::async_trait;
use futures::StreamExt;
use worker::wasm_bindgen::JsValue;
use worker::{AbortSignal, Fetch, Headers, Method, Request, RequestInit};

use crate::llm::{ApiRequest, HttpRequest, HttpResponse, HttpTransport};

/// Sends with the turn's abort signal, so cancelling a turn stops its provider call at once.
#[derive(Default)]
pub struct FetchTransport {
    pub signal: Option<AbortSignal>,
}

#[async_trait(?Send)]
impl HttpTransport for FetchTransport {
    async fn post(&self, request: HttpRequest) -> Result<HttpResponse, String> {
        send(Method::Post, request, self.signal.as_ref()).await
    }

    async fn get(&self, request: HttpRequest) -> Result<HttpResponse, String> {
        send(Method::Get, request, self.signal.as_ref()).await
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
    let mut response = sent.map_err(|e| format!("{e} ({url})"))?;
    let status = response.status_code();
    let headers = response.headers().entries().collect();
    let body = response.stream().map_err(|e| e.to_string())?;
    Ok(HttpResponse {
        status,
        headers,
        body: Box::pin(body.map(|chunk| chunk.map_err(|e| e.to_string()))),
    })
}
