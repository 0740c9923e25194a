//! Request bodies, read within their limits: a body past its limit is refused as soon as it is
//! (by its `content-length`, or while it streams in), not after it has all been read.

use wasm_bindgen::prelude::wasm_bindgen;
use worker::wasm_bindgen::JsCast;
use worker::{js_sys, wasm_bindgen_futures, web_sys, Request};

use crate::edge::error::ApiError;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// Reads a JSON body, with the size limit and a message that says what is wrong. A body past
/// the limit is refused as soon as it is (by its `content-length`, or while it streams in), not
/// after it has all been read.
pub async fn json_body<T: crate::llm::json::FromJsonOwned>(req: Request) -> Result<T, ApiError> {
    json_body_within(req, MAX_BODY_BYTES).await
}

/// [`json_body`] with another limit: a message's body, where files may come base64.
pub async fn json_body_within<T: crate::llm::json::FromJsonOwned>(
    req: Request,
    limit: usize,
) -> Result<T, ApiError> {
    let text = body_text(req, limit).await?;
    // Only no body at all is an empty request; whitespace is not JSON.
    json_text(if text.is_empty() { "{}" } else { &text })
}

/// Reads a body's text as `T`, saying what is wrong when it does not read.
pub fn json_text<'a, T: crate::llm::json::FromJson<'a>>(text: &'a str) -> Result<T, ApiError> {
    crate::llm::json::from_str(text).map_err(not_json)
}

/// A body that does not read as the request's JSON, and why.
pub fn not_json(why: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(format!(
        "the body is not valid JSON for this request: {why}"
    ))
}

/// The body as text, within the size limit (not generic: one copy of the reading serves every
/// body type).
pub async fn body_text(req: Request, limit: usize) -> Result<String, ApiError> {
    // Sized from the declared length once a first megabyte has come (grown by doubling, a
    // large body would be held twice over while it is copied), never for bytes only claimed.
    let declared = req.headers().get("content-length")?;
    let declared = declared.and_then(|v| v.trim().parse::<usize>().ok());
    let expected = declared.unwrap_or(0).min(limit);
    let mut bytes = Vec::with_capacity(expected.min(1 << 20));
    read_body(req, limit, &mut |chunk| {
        if bytes.len() + chunk.len() > limit {
            return Err(body_too_large(format!("over {limit} bytes"), limit));
        }
        if bytes.len() + chunk.len() > bytes.capacity() && expected > bytes.capacity() {
            bytes.reserve_exact(expected.max(bytes.len() + chunk.len()) - bytes.len());
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
pub fn utf8(bytes: Vec<u8>) -> Result<String, ApiError> {
    String::from_utf8(bytes)
        .map_err(|e| ApiError::BadRequest(format!("the body is not UTF-8: {}", e.utf8_error())))
}

/// Hands the body to `take` read by read as it streams in (reads of up to 64 KB, joined by the
/// runtime: see `bulkReader` in `bulk_read.js`), after refusing one whose `content-length` is over
/// `limit` (`take` enforces the limit on what actually comes).
pub async fn read_body(
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

#[wasm_bindgen(module = "/src/edge/platform/bulk_read.js")]
extern "C" {
    /// A request body read in large reads (see `bulk_read.js`): the runtime's own chunks are 4 KB.
    type BulkReader;
    /// `declared`: the body's `content-length`, 0 when it has none.
    #[wasm_bindgen(js_name = bulkReader)]
    fn bulk_reader(body: &web_sys::ReadableStream, declared: f64) -> BulkReader;
    /// Resolves to the next read's bytes, or to null at the end.
    #[wasm_bindgen(method)]
    fn next(this: &BulkReader) -> js_sys::Promise;
}

pub fn body_too_large(size: String, limit: usize) -> ApiError {
    ApiError::PayloadTooLarge(format!("the body is {size}; the limit is {limit} bytes"))
}
