//! Layer 3: the Worker. The only layer that imports `worker`.
//!
//! - `mod.rs`: the `fetch` entry and the one route table
//! - [`routes`]: one handler per endpoint
//! - `store`: all D1 SQL
//! - `conversation`: the conversation Durable Object: runs the turns, queues what arrives
//!   meanwhile, keeps the running turn's stream, recovers interrupted turns
//! - `coordinator`: the Worker's typed client for it, and what they exchange
//! - `turn`: one turn inside the object (preparation, hooks, inbox, stream)
//! - [`ui_stream`]: agent events → AI SDK UI message stream (pure, natively tested)
//! - `fetch`, `ai`: the `fetch` transport and the Workers AI binding Layer 1 uses
//! - [`config`], [`error`]: environment parsing; the one JSON error shape

mod artifacts;
pub mod auth;
pub mod budget;
pub mod config;
pub mod conversation;
mod coordinator;
pub mod cors;
pub mod d1;
pub mod error;
pub mod platform;
mod rate_limit;
mod remote_tools;
mod routes;
pub mod spend;
mod turn;
pub mod ui_stream;

pub use conversation::ConversationCoordinator;
pub use spend::UserSpend;

use std::future::Future;
use std::pin::Pin;

use wasm_bindgen::prelude::wasm_bindgen;
use worker::wasm_bindgen::JsCast;
use worker::{
    event, js_sys, wasm_bindgen_futures, web_sys, Context, Env, Method, Request, Response,
};

use config::Config;
use error::ApiError;
use platform::clock::now_ms;
use platform::ids::new_id;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1 << 20;

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> worker::Result<Response> {
    let method = req.method();
    let path = req.path();
    let origin = req.headers().get("origin").ok().flatten();
    // Every response and log line carries it; a 5xx's message quotes it.
    let request_id = new_id().unwrap_or_else(|_| format!("r{}", now_ms()));
    // Parsed once per request; a bad configuration still lets `/healthz` and preflights answer.
    let config = config(&env);
    let cors = config.as_ref().map(|c| c.cors.clone()).unwrap_or_default();
    let mut response = if method == Method::Options {
        let preflight = Response::empty()?.with_status(204);
        for (name, value) in cors.preflight_headers(origin.as_deref()) {
            preflight.headers().set(name, &value)?;
        }
        preflight
    } else {
        match route(req, &env, config, &request_id).await {
            Ok(response) => response,
            Err(e) => {
                let line = e.log_line(&request_id, method.as_ref(), &path);
                if e.status() >= 500 {
                    worker::console_error!("{line}");
                } else {
                    worker::console_warn!("{line}");
                }
                error_response(&e, &request_id)?
            }
        }
    };
    for (name, value) in cors.response_headers(origin.as_deref()) {
        response.headers_mut().set(name, &value)?;
    }
    response.headers_mut().set(REQUEST_ID, &request_id)?;
    Ok(response)
}

/// The header naming a request; the Worker passes it on to the conversation's object.
pub(crate) const REQUEST_ID: &str = "x-request-id";

async fn route(
    req: Request,
    env: &Env,
    config: Result<Config, ApiError>,
    request_id: &str,
) -> Result<Response, ApiError> {
    let path = req.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let method = req.method();
    match (&method, segments.as_slice()) {
        (Method::Get, ["healthz"]) => return own(routes::health::get(env)).await,
        (Method::Get, ["openapi.json"]) => return routes::openapi::get(env, config.as_ref().ok()),
        _ => {}
    }
    // Everything else acts for a caller, who must authenticate before learning anything of the
    // configuration (even that it is broken).
    let authorization = req.headers().get("authorization")?;
    let config = match config {
        Ok(config) => config,
        Err(broken) => {
            config::auth_from_lookup(|name| env.var(name).ok().map(|v| v.to_string()))?
                .caller(authorization.as_deref(), now_ms() / 1000)?;
            return Err(broken);
        }
    };
    let config = &config;
    let caller = config
        .auth
        .caller(authorization.as_deref(), now_ms() / 1000)?;
    let user = caller.user.as_str();
    let sends = method == Method::Post
        && matches!(
            segments.as_slice(),
            ["v1", "chat"] | ["v1", "conversations", _, "messages" | "retry"]
        );
    // Writes that take D1 space count against the same limit as messages.
    let writes = matches!(
        (&method, segments.as_slice()),
        (Method::Post, ["v1", "conversations"])
            | (Method::Put, ["v1", "conversations", _, "artifacts", _])
    );
    if sends || writes {
        rate_limit::check(env, config, user).await?;
    }
    if sends {
        budget_check(env, config, user).await?;
    }
    match (method, segments.as_slice()) {
        (Method::Post, ["v1", "chat"]) => {
            own(routes::chat::post(req, env, config, user, request_id)).await
        }
        (Method::Get, ["v1", "chat", id, "stream"] | ["v1", "conversations", id, "stream"]) => {
            own(routes::conversations::stream(env, user, id)).await
        }
        (Method::Post, ["v1", "conversations"]) => {
            own(routes::conversations::create(req, env, config, user)).await
        }
        (Method::Get, ["v1", "conversations"]) => {
            own(routes::conversations::list(&req, env, user)).await
        }
        (Method::Get, ["v1", "conversations", id]) => {
            own(routes::conversations::get(env, user, id)).await
        }
        (Method::Post, ["v1", "conversations", id, "retry"]) => {
            own(routes::messages::retry(
                req, env, config, user, id, request_id,
            ))
            .await
        }
        (Method::Post, ["v1", "conversations", id, "cancel"]) => {
            own(routes::conversations::cancel(env, user, id)).await
        }
        (Method::Delete, ["v1", "conversations", id]) => {
            own(routes::conversations::delete(env, user, id)).await
        }
        (Method::Get, ["v1", "models"]) => routes::models::list(config),
        (Method::Get, ["v1", "usage"]) => own(routes::usage::get(env, config, user)).await,
        (Method::Put, ["v1", "admin", "budgets", target]) => {
            let target = percent_encoding::percent_decode_str(target).decode_utf8_lossy();
            own(routes::usage::put(req, env, config, &caller, &target)).await
        }
        (Method::Get, ["v1", "conversations", id, "artifacts"]) => {
            own(routes::artifacts::list(env, user, id)).await
        }
        (Method::Get, ["v1", "conversations", id, "artifacts", artifact]) => {
            own(routes::artifacts::get(&req, env, user, id, artifact)).await
        }
        (Method::Put, ["v1", "conversations", id, "artifacts", artifact]) => {
            own(routes::artifacts::put(req, env, config, user, id, artifact)).await
        }
        (Method::Get, ["v1", "conversations", id, "messages"]) => {
            own(routes::messages::list(&req, env, user, id)).await
        }
        (Method::Post, ["v1", "conversations", id, "messages"]) => {
            own(routes::messages::send(
                req, env, config, user, id, request_id,
            ))
            .await
        }
        (
            _,
            ["healthz"]
            | ["openapi.json"]
            | ["v1", "conversations"]
            | ["v1", "conversations", _]
            | ["v1", "models"]
            | ["v1", "usage"]
            | ["v1", "admin", "budgets", _],
        )
        | (_, ["v1", "conversations", _, "messages" | "stream" | "artifacts"])
        | (_, ["v1", "conversations", _, "artifacts", _])
        | (_, ["v1", "chat"] | ["v1", "chat", _, "stream"]) => Err(ApiError::MethodNotAllowed(
            format!("{:?} is not supported on {path}", req.method()),
        )),
        _ => Err(ApiError::NotFound(format!("no route for {path}"))),
    }
}

/// A handler's future behind a `dyn Future`, so that its state machine stays a function of its
/// own instead of being inlined into its caller's: V8 compiles a wasm function whole on its
/// first call and again, optimised, once it is hot, and `route` with every handler inside it
/// was the largest function in the Worker (48 KB of wasm), compiled by every request.
pub(crate) fn own<'a, T>(
    handler: impl Future<Output = T> + 'a,
) -> Pin<Box<dyn Future<Output = T> + 'a>> {
    Box::pin(handler)
}

/// A message that would start work for a user whose budget is spent, when no cheaper model
/// may answer instead: 402 with when the budget resets. (With `BUDGET_MODEL` the turn runs on it.)
async fn budget_check(env: &Env, config: &Config, user: &str) -> Result<(), ApiError> {
    let (Some(limit), None) = (config.user_budget_usd, &config.budget_model) else {
        return Ok(());
    };
    let budget = d1::Store::from_env(env)?
        .budget(user, Some((limit, config.budget_period)), now_ms())
        .await?;
    match budget {
        Some(budget) if budget.over() => Err(ApiError::PaymentRequired(budget.exhausted_message())),
        _ => Ok(()),
    }
}

pub(crate) fn error_response(e: &ApiError, request_id: &str) -> worker::Result<Response> {
    let headers = worker::Headers::new();
    headers.set("content-type", "application/json")?;
    if let Some(seconds) = e.retry_after_s() {
        headers.set("retry-after", &seconds.to_string())?;
    }
    Ok(Response::ok(e.body(request_id))?
        .with_status(e.status())
        .with_headers(headers))
}

thread_local! {
    /// The configuration, parsed once per isolate: an isolate's variables and secrets never
    /// change while it lives (new ones come with a new deployment, in a new isolate). Parsing
    /// reads every variable across the wasm boundary, a hundred crossings per request.
    static CONFIG: std::cell::RefCell<Option<Config>> = const { std::cell::RefCell::new(None) };
}

pub(crate) fn config(env: &Env) -> Result<Config, ApiError> {
    if let Some(config) = CONFIG.with(|c| c.borrow().clone()) {
        return Ok(config);
    }
    let config = Config::from_lookup(|name| env.var(name).ok().map(|v| v.to_string()))?;
    CONFIG.with(|c| *c.borrow_mut() = Some(config.clone()));
    Ok(config)
}

/// Reads a JSON body, with the size limit and a message that says what is wrong. A body past
/// the limit is refused as soon as it is (by its `content-length`, or while it streams in), not
/// after it has all been read.
pub(crate) async fn json_body<T: serde::de::DeserializeOwned>(req: Request) -> Result<T, ApiError> {
    let text = body_text(req).await?;
    json_text(if text.trim().is_empty() { "{}" } else { &text })
}

/// Reads a body's text as `T`, saying what is wrong when it does not read.
pub(crate) fn json_text<'a, T: serde::Deserialize<'a>>(text: &'a str) -> Result<T, ApiError> {
    crate::llm::json::from_str(text).map_err(not_json)
}

/// A body that does not read as the request's JSON, and why.
pub(crate) fn not_json(why: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(format!(
        "the body is not valid JSON for this request: {why}"
    ))
}

/// The body as text, within the size limit (not generic: one copy of the reading serves every
/// body type).
async fn body_text(req: Request) -> Result<String, ApiError> {
    let mut bytes = Vec::new();
    read_body(req, MAX_BODY_BYTES, &mut |chunk| {
        if bytes.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(body_too_large(
                format!("over {MAX_BODY_BYTES} bytes"),
                MAX_BODY_BYTES,
            ));
        }
        bytes.extend_from_slice(chunk);
        Ok(())
    })
    .await?;
    // Read as text, for `from_str` rather than `from_slice`: each is its own copy of every
    // reader in the wasm.
    utf8(bytes)
}

/// A body's bytes as text.
pub(crate) fn utf8(bytes: Vec<u8>) -> Result<String, ApiError> {
    String::from_utf8(bytes)
        .map_err(|e| ApiError::BadRequest(format!("the body is not UTF-8: {}", e.utf8_error())))
}

/// Hands the body to `take` read by read as it streams in (reads of up to 64 KB, joined by the
/// runtime: see `bulkReader` in `pump.js`), after refusing one whose `content-length` is over
/// `limit` (`take` enforces the limit on what actually comes).
pub(crate) async fn read_body(
    req: Request,
    limit: usize,
    take: &mut dyn FnMut(&[u8]) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let declared = req.headers().get("content-length")?;
    let declared = declared.and_then(|v| v.trim().parse::<u64>().ok());
    if let Some(length) = declared.filter(|&length| length > limit as u64) {
        return Err(body_too_large(format!("{length} bytes"), limit));
    }
    // No body at all reads as an empty one.
    let Some(body) = req.inner().body() else {
        return Ok(());
    };
    let reader = bulk_reader(&body, declared.unwrap_or(0) as f64);
    let mut bytes = Vec::new();
    loop {
        let next = wasm_bindgen_futures::JsFuture::from(reader.next())
            .await
            .map_err(worker::Error::from)?;
        if next.is_null() {
            return Ok(());
        }
        let read: js_sys::Uint8Array = next.unchecked_into();
        bytes.resize(read.length() as usize, 0);
        read.copy_to(&mut bytes);
        take(&bytes)?;
    }
}

#[wasm_bindgen(module = "/src/edge/platform/pump.js")]
extern "C" {
    /// A request body read in large reads (see `pump.js`): the runtime's own chunks are 4 KB.
    type BulkReader;
    /// `declared`: the body's `content-length`, 0 when it has none.
    #[wasm_bindgen(js_name = bulkReader)]
    fn bulk_reader(body: &web_sys::ReadableStream, declared: f64) -> BulkReader;
    /// Resolves to the next read's bytes, or to null at the end.
    #[wasm_bindgen(method)]
    fn next(this: &BulkReader) -> js_sys::Promise;
}

pub(crate) fn body_too_large(size: String, limit: usize) -> ApiError {
    ApiError::PayloadTooLarge(format!("the body is {size}; the limit is {limit} bytes"))
}

/// A JSON response with a status.
pub(crate) fn json_response(
    status: u16,
    body: &impl serde::Serialize,
) -> Result<Response, ApiError> {
    Ok(Response::from_json(body)?.with_status(status))
}
