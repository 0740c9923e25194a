//! `HttpTransport` over the Workers `fetch`: how Layer 1 reaches providers at the edge.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;
use futures::{Stream, StreamExt};
use wasm_bindgen::prelude::wasm_bindgen;
use worker::wasm_bindgen::closure::Closure;
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::{js_sys, wasm_bindgen_futures, web_sys};
use worker::{AbortSignal, Delay, Headers, Response, ResponseBody};

use crate::edge::platform::clock::now_ms;
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
        let sent = send("POST", request, self.signal.as_ref());
        self.watched(sent).await
    }

    async fn get(&self, request: HttpRequest) -> Result<HttpResponse, String> {
        let sent = send("GET", request, self.signal.as_ref());
        self.watched(sent).await
    }

    async fn send(&self, request: ApiRequest) -> Result<HttpResponse, String> {
        if !matches!(request.method, "GET" | "POST" | "PUT" | "PATCH" | "DELETE") {
            return Err(format!("unsupported method {}", request.method));
        }
        let outgoing = new_request(
            request.method,
            &request.url,
            &request.headers,
            request.body.as_deref(),
            self.signal.as_ref(),
        )?;
        // A tool's redirects are followed by the agent layer, which checks every hop's host
        // and keeps the deployment's headers from other origins.
        respond(outgoing, Redirect::Manual).await
    }
}

impl FetchTransport {
    /// The response, failed when its headers or any gap between body chunks take longer than
    /// the idle timeout.
    async fn watched(
        &self,
        sent: impl Future<Output = Result<Fetched, String>>,
    ) -> Result<HttpResponse, String> {
        let Some(idle_ms) = self.idle_timeout_ms else {
            return Ok(sent.await?.response);
        };
        let timer = Delay::from(Duration::from_millis(idle_ms));
        let Fetched {
            mut response,
            bytes_came,
        } = match futures::future::select(Box::pin(sent), timer).await {
            futures::future::Either::Left((fetched, _)) => fetched?,
            futures::future::Either::Right(_) => return Err(idle_timeout(idle_ms)),
        };
        response.body = Box::pin(IdleWatch {
            body: response.body,
            idle_ms,
            timer: Box::pin(Delay::from(Duration::from_millis(idle_ms))),
            last_bytes_at: now_ms(),
            bytes_came,
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
    last_bytes_at: i64,
    /// When a piped body's bytes came, as `bulk_read.js` read the clock for them: noted per
    /// chunk without a call out for the time.
    bytes_came: Option<Rc<Cell<i64>>>,
    done: bool,
}

impl Stream for IdleWatch {
    type Item = Result<Vec<u8>, String>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Poll::Ready(item) = self.body.poll_next_unpin(cx) {
            self.last_bytes_at = self.bytes_came.as_ref().map_or_else(now_ms, |at| at.get());
            return Poll::Ready(item);
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            let quiet = (now_ms() - self.last_bytes_at).max(0) as u64;
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

async fn send(
    method: &str,
    request: HttpRequest,
    signal: Option<&AbortSignal>,
) -> Result<Fetched, String> {
    let body = (method == "POST").then_some(request.body.as_str());
    let sent = new_request(method, &request.url, &request.headers, body, signal)?;
    // The runtime has its own copy of the body now: ours (a whole history, files inlined) is
    // not held while the answer streams.
    drop(request);
    fetched(sent, Redirect::Follow).await
}

/// The property of a turn's abort signal that holds the turn's `traceparent`.
const TRACEPARENT: &str = "edgeAgentTraceparent";

/// Makes every request sent with `signal` (the turn's: its providers', tools' and MCP servers')
/// carry `traceparent`. The signal is what every such request is already made with, so it
/// carries the turn's trace context too, without a parameter through every provider and tool.
pub fn trace_outbound(signal: &AbortSignal, traceparent: &str) {
    let _ = js_sys::Reflect::set(signal.as_ref(), &TRACEPARENT.into(), &traceparent.into());
}

/// A request for `fetch` or a Durable Object stub, made with the platform's own `RequestInit`:
/// workers-rs's `Request::new_with_init` carries the whole `cf` options type (image resizing
/// and more) into the wasm, 12 KB, for options we never set.
pub(crate) fn new_request<N: AsRef<str>, V: AsRef<str>>(
    method: &str,
    url: &str,
    headers: &[(N, V)],
    body: Option<&str>,
    signal: Option<&AbortSignal>,
) -> Result<web_sys::Request, String> {
    let set = Headers::new();
    let mut typed = false;
    for (name, value) in headers {
        let name = name.as_ref();
        typed |= name.eq_ignore_ascii_case("content-type");
        // The value may hold a secret: name the header only.
        set.set(name, value.as_ref())
            .map_err(|_| format!("header `{name}` is not valid"))?;
    }
    let init = web_sys::RequestInit::new();
    init.set_method(method);
    if let Some(body) = body {
        // Sent as bytes: as a string it would be decoded into a JavaScript string here and
        // encoded back by `fetch`, two passes over a whole history per LLM call. Bytes get no
        // content type from `fetch`, so the one a string gets is set when none is given.
        if !typed {
            set.set("content-type", "text/plain;charset=UTF-8")
                .map_err(|_| "header `content-type` is not valid".to_string())?;
        }
        init.set_body(&js_sys::Uint8Array::from(body.as_bytes()));
    }
    if let Some(signal) = signal {
        init.set_signal(Some(signal));
        let traced = js_sys::Reflect::get(signal.as_ref(), &TRACEPARENT.into());
        if let Some(traceparent) = traced.ok().and_then(|v| v.as_string()) {
            set.set("traceparent", &traceparent)
                .map_err(|_| "header `traceparent` is not valid".to_string())?;
        }
    }
    init.set_headers(set.as_ref());
    // Not the URL in the error: this text can reach a user (a tool's error result), and a
    // deployment's URLs are its configuration.
    web_sys::Request::new_with_str_and_init(url, &init).map_err(|e| {
        e.as_string()
            .unwrap_or_else(|| "invalid URL or options for Request".into())
    })
}

/// What `fetch` does with a redirect.
#[derive(Clone, Copy, PartialEq)]
enum Redirect {
    /// Follows it (providers: their URLs are the deployment's own).
    Follow,
    /// Hands back the 3xx with its `location`.
    Manual,
}

async fn respond(outgoing: web_sys::Request, redirect: Redirect) -> Result<HttpResponse, String> {
    Ok(fetched(outgoing, redirect).await?.response)
}

/// A response, with when its body's bytes last came if they are piped to us.
struct Fetched {
    response: HttpResponse,
    bytes_came: Option<Rc<Cell<i64>>>,
}

async fn fetched(outgoing: web_sys::Request, redirect: Redirect) -> Result<Fetched, String> {
    let sent = if redirect == Redirect::Manual {
        let init = web_sys::RequestInit::new();
        init.set_redirect(web_sys::RequestRedirect::Manual);
        global().fetch_with_request_and_init(&outgoing, &init)
    } else {
        global().fetch_with_request(&outgoing)
    };
    let response: web_sys::Response = wasm_bindgen_futures::JsFuture::from(sent)
        .await
        .map_err(|e| worker::Error::from(e).to_string())?
        .unchecked_into();
    let response = Response::from(response);
    let status = response.status_code();
    let headers = response.headers().entries().collect();
    let mut bytes_came = None;
    let body: ByteStream = match response.body() {
        ResponseBody::Stream(stream) => {
            let piped = Piped::new(stream)?;
            bytes_came = Some(Rc::clone(&piped.bytes_came));
            Box::pin(piped)
        }
        ResponseBody::Body(bytes) => Box::pin(futures::stream::iter([Ok(bytes.clone())])),
        ResponseBody::Empty => Box::pin(futures::stream::empty()),
    };
    let response = HttpResponse {
        status,
        headers,
        body,
    };
    Ok(Fetched {
        response,
        bytes_came,
    })
}

/// Bytes that follow a wake of the reader within this window wait for the window's end, so a
/// burst wakes the reader once per window; bytes after a quieter spell wake it at once, so a
/// stream's opening, its first token after the model's pause, and a trickle never wait.
const GATHER_MS: i64 = 3;

/// A response body read for us by `bulk_read.js`, which joins the chunks that arrive together into
/// one read (see there) and hands each read to `write`, which only appends the bytes to a
/// buffer and wakes the reader as [`GATHER_MS`] says. Reading chunk by chunk from wasm cost, per
/// chunk, a `read()` promise, a crossing into wasm and a wake and poll of the turn's task:
/// profiled under workerd, about ten times the decoding.
pub(crate) struct Piped {
    received: Rc<RefCell<Received>>,
    /// The time of the latest read's bytes (`Date.now()` in `bulk_read.js`).
    bytes_came: Rc<Cell<i64>>,
    _write: Closure<dyn FnMut(JsValue, u32, f64)>,
    _gathered: Closure<dyn FnMut()>,
}

#[derive(Default)]
struct Received {
    bytes: Vec<u8>,
    /// When the reader was last woken for bytes (`now_ms()`; 0 before the first).
    woken_at: i64,
    /// The pending window's timer, if one runs.
    timer: Option<i32>,
    ended: bool,
    failed: Option<String>,
    reader: Option<Waker>,
}

impl Received {
    fn wake(&mut self) {
        if let Some(reader) = self.reader.take() {
            reader.wake();
        }
    }
}

#[wasm_bindgen(module = "/src/edge/platform/bulk_read.js")]
extern "C" {
    /// Reads `body` to its end, handing `write` the bytes of each read.
    fn pump(body: &web_sys::ReadableStream, write: &js_sys::Function) -> js_sys::Promise;
}

#[wasm_bindgen]
extern "C" {
    /// `Uint8Array.prototype.set.call(into, bytes)`, `into` viewing our memory: js-sys's
    /// `copy_to` does the same after asking `bytes` for its length, one more call out per read,
    /// for a length `bulk_read.js` has handed us. Lengths that differ throw in JavaScript.
    #[wasm_bindgen(js_namespace = Uint8Array, js_name = "prototype.set.call")]
    fn copy_into(into: &mut [u8], bytes: &js_sys::Uint8Array);
}

fn global() -> web_sys::WorkerGlobalScope {
    js_sys::global().unchecked_into()
}

impl Piped {
    pub(crate) fn new(body: &web_sys::ReadableStream) -> Result<Self, String> {
        let received = Rc::new(RefCell::new(Received::default()));
        let window = Rc::clone(&received);
        let gathered = Closure::<dyn FnMut()>::new(move || {
            let mut received = window.borrow_mut();
            received.timer = None;
            received.woken_at = now_ms();
            received.wake();
        });
        let gathered_fn: js_sys::Function = gathered.as_ref().clone().unchecked_into();
        let sink_received = Rc::clone(&received);
        let bytes_came = Rc::new(Cell::new(0));
        let sink_came = Rc::clone(&bytes_came);
        let write = Closure::<dyn FnMut(JsValue, u32, f64)>::new(
            move |chunk: JsValue, length: u32, at: f64| {
                sink_came.set(at as i64);
                // `bulk_read.js` hands `Uint8Array`s, their length and the time they came: no new
                // view, and one call out per read (the copy) rather than three.
                let chunk: js_sys::Uint8Array = chunk.unchecked_into();
                let mut received = sink_received.borrow_mut();
                let start = received.bytes.len();
                received.bytes.resize(start + length as usize, 0);
                copy_into(&mut received.bytes[start..], &chunk);
                if received.timer.is_some() {
                    return;
                }
                // The clock only moves on I/O: bytes that came in the same instant as the last
                // wake are part of a burst.
                let at = at as i64;
                if at - received.woken_at >= GATHER_MS {
                    received.woken_at = at;
                    received.wake();
                    return;
                }
                let wait = (received.woken_at + GATHER_MS - at) as i32;
                received.timer = global()
                    .set_timeout_with_callback_and_timeout_and_arguments_0(&gathered_fn, wait)
                    .ok();
                if received.timer.is_none() {
                    received.wake();
                }
            },
        );
        let piped = pump(body, write.as_ref().unchecked_ref());
        let end = Rc::clone(&received);
        wasm_bindgen_futures::spawn_local(async move {
            let result = wasm_bindgen_futures::JsFuture::from(piped).await;
            let mut received = end.borrow_mut();
            if let Some(timer) = received.timer.take() {
                global().clear_timeout_with_handle(timer);
            }
            match result {
                Ok(_) => received.ended = true,
                // A cancelled turn aborts its fetch: the body just ends, as `ByteStream` has it.
                Err(e) => {
                    let message = js_sys::Error::from(e)
                        .message()
                        .as_string()
                        .unwrap_or_default();
                    if message == "aborted" || message.contains("The operation was aborted") {
                        received.ended = true;
                    } else {
                        received.failed = Some(if message.is_empty() {
                            "the response body failed".into()
                        } else {
                            message
                        });
                    }
                }
            }
            received.wake();
        });
        Ok(Self {
            received,
            bytes_came,
            _write: write,
            _gathered: gathered,
        })
    }
}

impl Stream for Piped {
    type Item = Result<Vec<u8>, String>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut received = self.received.borrow_mut();
        if !received.bytes.is_empty() {
            return Poll::Ready(Some(Ok(std::mem::take(&mut received.bytes))));
        }
        if let Some(failed) = received.failed.take() {
            received.ended = true;
            return Poll::Ready(Some(Err(failed)));
        }
        if received.ended {
            return Poll::Ready(None);
        }
        received.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Piped {
    fn drop(&mut self) {
        // The timer's callback is about to be freed with us: it must not fire.
        if let Some(timer) = self.received.borrow_mut().timer.take() {
            global().clear_timeout_with_handle(timer);
        }
    }
}
